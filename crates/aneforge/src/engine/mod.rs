//! Engines that run compiled programs.

pub mod ane;
mod ane_ffi;
pub mod ane_host;
mod ane_layout;
pub mod ane_select;

pub use ane::{AneEngine, AneError, AneOptions, AneProgram, AneStats};
pub use ane_select::{EngineKind, Selected, UnknownEngine};
