//! Fuzz targets for aneforge's file parsers ([`targets`]), their seed inputs ([`seeds`]) and a
//! mutator ([`mutate`]). The `aneforge-fuzz` binary runs them on stable Rust under a memory cap
//! and a per-input time limit (docs/hardening.md).

pub mod mutate;
pub mod seeds;
pub mod targets;

pub use targets::{Target, TARGETS};
