//! The aneforge CPU engine: executes MIL programs (issue 3).
