//! `import_onnx`: an ONNX model imported (`aneforge import`) and compiled into a `Program` that
//! takes inputs and returns outputs by their ONNX names.

use std::path::PathBuf;

use aneforge::CompileOptions;
use aneforge_onnx::{import_file, ImportOptions};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::program::{Program, Returned};
use crate::{errors, options};

/// `{name: dims}`: an input's whole shape (a sequence of sizes), or a symbolic dimension's value
/// (an int), as `aneforge import --input-shape NAME=D0,D1,...` / `DIM=N` take them.
fn input_shapes(shapes: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, Vec<usize>)>> {
    let Some(shapes) = shapes else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(shapes.len());
    for (k, v) in shapes.iter() {
        let name: String = k
            .extract()
            .map_err(|_| errors::invalid("input_shapes: keys are input or dimension names"))?;
        let dims: Vec<usize> = match v.extract::<usize>() {
            Ok(n) => vec![n],
            Err(_) => v.extract().map_err(|_| {
                errors::invalid(format!(
                    "input_shapes[{name:?}]: expected a size or a sequence of sizes, found {v}"
                ))
            })?,
        };
        if dims.contains(&0) {
            return Err(errors::invalid(format!(
                "input_shapes[{name:?}]: sizes must be at least 1, found {dims:?}"
            )));
        }
        out.push((name, dims));
    }
    Ok(out)
}

/// Imports the ONNX model at `path` (external data is read from its directory), compiles it for
/// `target` and loads it into `engine`, as `aneforge import` and `run` do. `input_shapes` binds
/// symbolic dimensions. The program's `run` takes and returns tensors by their ONNX names (a
/// dict of outputs).
#[pyfunction]
#[pyo3(signature = (path, *, input_shapes = None, target = None, engine = "cpu"))]
pub fn import_onnx(
    py: Python<'_>,
    path: PathBuf,
    input_shapes: Option<&Bound<'_, PyDict>>,
    target: Option<&str>,
    engine: &str,
) -> PyResult<Program> {
    let import = ImportOptions {
        input_shapes: self::input_shapes(input_shapes)?,
        ..ImportOptions::default()
    };
    let (engine, target) = options::select(py, engine, target)?;
    let compile = CompileOptions {
        target,
        engine,
        ..CompileOptions::default()
    };
    let (model, aliases) = py.detach(|| {
        let imported = import_file(&path, &import).map_err(errors::onnx)?;
        let model = aneforge::compile_named(&imported.named_outputs(), &compile)
            .map_err(|e| errors::program_of(&path, e))?;
        let aliases = imported
            .inputs
            .iter()
            .map(|i| (i.onnx_name.clone(), i.port.clone()))
            .chain(
                imported
                    .outputs
                    .iter()
                    .map(|o| (o.onnx_name.clone(), o.port.clone())),
            )
            .collect();
        Ok::<_, PyErr>((model, aliases))
    })?;
    Ok(Program::new(model, Returned::Dict, aliases))
}
