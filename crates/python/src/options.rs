//! `engine=` and `target=` as the CLI's `--engine` and `--target` take them (one rule, in
//! `aneforge::engine::select`), and `set_num_threads` as its `-t/--threads`.

use aneforge::engine::{self, EngineKind};
use aneforge::{Engine, Target};
use pyo3::prelude::*;

use crate::errors;

/// The engine and compile target for `engine` (`"cpu"`, `"ane"`, `"auto"`) and `target`
/// (`None`, `"cpu"`, `"ane"` or an ANE architecture or alias such as `"h16"`, `"m4"`).
pub fn select(py: Python<'_>, engine: &str, target: Option<&str>) -> PyResult<(Engine, Target)> {
    let kind: EngineKind = engine
        .parse()
        .map_err(|e: engine::UnknownEngine| errors::invalid(e.to_string()))?;
    let selection = engine::select(kind, target).map_err(errors::select)?;
    if let Some(warning) = selection.warning {
        let message = std::ffi::CString::new(warning).unwrap_or_default();
        let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
        PyErr::warn(py, category.as_any(), &message, 1)?;
    }
    Ok((selection.engine, selection.target))
}

/// The CPU engine's matmul precision `name` (`"f32"` or `"bf16"`) for programs compiled for
/// `target` on `engine` (the CLI's `--matmul-precision`, one rule in `engine::select_matmul`).
pub fn matmul(name: &str, engine: Engine, target: &Target) -> PyResult<engine::MatmulPrecision> {
    engine::select_matmul(name, engine, target).map_err(errors::invalid)
}

/// Sizes the CPU engine's worker pool (the CLI's `-t/--threads`). The pool is built once per
/// process: call this before the first program runs.
#[pyfunction]
pub fn set_num_threads(n: usize) -> PyResult<()> {
    if n == 0 {
        return Err(errors::invalid(
            "set_num_threads takes a count of at least 1",
        ));
    }
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
    {
        Ok(()) => Ok(()),
        Err(_) if rayon::current_num_threads() == n => Ok(()),
        Err(e) => Err(errors::invalid(format!(
            "cannot start {n} worker threads ({} already run programs in this process): {e}",
            rayon::current_num_threads()
        ))),
    }
}

/// The CPU engine's worker threads.
#[pyfunction]
pub fn num_threads() -> usize {
    rayon::current_num_threads()
}
