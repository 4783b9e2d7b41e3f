//! e5rt simulator (issue 6).
