//! Benchmark entry points (filled in later).
