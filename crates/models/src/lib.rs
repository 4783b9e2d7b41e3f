//! Model files and loaders (issues 7-8).
