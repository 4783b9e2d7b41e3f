//! Helpers for tests that run programs through the ANE engine: locating the e5rt simulator
//! (`e5rt-sim`'s cdylib, built as a dev-dependency next to the test binaries) and opening engines
//! on it. The op suite's second run through the ANE engine uses [`sim_engine`].
#![allow(dead_code)]

pub mod suite;

use aneforge::engine::{AneEngine, AneOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The simulator library (see [`e5rt_sim::test_library_path`]).
pub fn simulator_library() -> PathBuf {
    e5rt_sim::test_library_path().unwrap_or_else(|e| panic!("{e}"))
}

/// An engine on the simulator with a private bundle directory and program cache.
pub fn sim_engine_with(options: AneOptions, scratch: &Path) -> Arc<AneEngine> {
    AneEngine::open(AneOptions {
        library: Some(simulator_library()),
        bundle_dir: Some(scratch.join("bundles")),
        program_cache: Some(scratch.join("cache")),
        ..options
    })
    .expect("the simulator loads")
}

pub fn sim_engine(scratch: &Path) -> Arc<AneEngine> {
    sim_engine_with(AneOptions::default(), scratch)
}

/// Writes `model.mil` (and `weights/weight.bin` when given) into a new directory under `root`.
pub fn write_program(root: &Path, name: &str, text: &str, weights: Option<&[u8]>) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("weights")).unwrap();
    std::fs::write(dir.join("model.mil"), text).unwrap();
    if let Some(w) = weights {
        std::fs::write(dir.join("weights").join("weight.bin"), w).unwrap();
    }
    dir
}

/// Makes the simulator the process-wide ANE engine, so `Engine::Ane` (e.g. in
/// `CompileOptions::engine`) runs on it in this test binary. Idempotent.
pub fn install_simulator() -> Arc<AneEngine> {
    AneEngine::install_global(AneOptions {
        library: Some(simulator_library()),
        program_cache: Some(std::env::temp_dir().join("aneforge-test-programs")),
        ..AneOptions::default()
    })
    .expect("the simulator becomes the process-wide ANE engine")
}
