//! e5rt-sim: the e5rt C API of Apple's Espresso framework, simulated over the aneforge MIL parser
//! and CPU engine, so the ANE engine's binding code runs (and is tested) on any machine.
//!
//! Built as a `cdylib`; point `ANEFORGE_E5RT_LIB` at it. It is a test tool and is never linked into
//! the product. Semantics (object lifetimes, ordering rules, error codes) are described in
//! docs/ane-runtime.md; where the real runtime's behaviour is unknown the simulator is strict.

mod api;
mod backend;
mod config;
mod error;
mod memory;
mod objects;
mod program;
mod registry;

pub use api::*;
