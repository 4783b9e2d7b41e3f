//! Helpers for tests that run programs through the ANE engine: locating the e5rt simulator
//! (`e5rt-sim`'s cdylib, built as a dev-dependency next to the test binaries) and opening engines
//! on it. The op suite's second run through the ANE engine uses [`sim_engine`].
#![allow(dead_code)]

pub mod suite;

use aneforge::engine::{AneEngine, AneOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The simulator library: `E5RT_SIM_LIB` when set, else `libe5rt_sim` next to the test binary
/// (`target/<profile>/deps`) or one level up.
pub fn simulator_library() -> PathBuf {
    if let Some(path) = std::env::var_os("E5RT_SIM_LIB") {
        return PathBuf::from(path);
    }
    let name = format!(
        "{}e5rt_sim{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    let candidates = [deps.join(&name), deps.join("..").join(&name)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the e5rt simulator library was not found at {candidates:?}; build it with \
                 `cargo build -p e5rt-sim` (it is a dev-dependency of aneforge, so `cargo test \
                 -p aneforge` builds it) or set E5RT_SIM_LIB"
            )
        })
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
