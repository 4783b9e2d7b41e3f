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

/// Where a test finds this crate's cdylib: `E5RT_SIM_LIB` when set, else `libe5rt_sim` next to
/// the running test binary (`target/<profile>/deps`) or one level up, where cargo puts it for a
/// crate that lists `e5rt-sim` as a dev-dependency.
pub fn test_library_path() -> Result<std::path::PathBuf, String> {
    if let Some(path) = std::env::var_os("E5RT_SIM_LIB") {
        return Ok(path.into());
    }
    let name = format!(
        "{}e5rt_sim{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let exe = std::env::current_exe().map_err(|e| format!("the test binary's path: {e}"))?;
    let deps = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    let candidates = [deps.join(&name), deps.join("..").join(&name)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "the e5rt simulator library was not found at {candidates:?}; build it with \
             `cargo build -p e5rt-sim` (a dev-dependency builds it) or set E5RT_SIM_LIB"
            )
        })
}
