//! Compiling a `model.mil` for the simulator: parse, resolve its blob files relative to the
//! program directory, and plan every function on the CPU engine.

use crate::backend::{self, BlobStore, Executor};
use crate::config;
use crate::error::{Code, Result, SimError};
use aneforge_cpu::Port;
use aneforge_mil::ProgramDir;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a port's elements live in a buffer bound to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Byte strides per axis; the innermost axis is contiguous.
    pub strides: Vec<usize>,
    /// Bytes a bound buffer must hold.
    pub extent: usize,
}

impl Layout {
    /// Dense rows, or rows padded to `row_alignment` bytes when that is non-zero.
    pub fn for_port(spec: &Port, row_alignment: usize) -> Layout {
        let rank = spec.shape.len();
        let mut strides = vec![elem(spec); rank];
        for i in (0..rank.saturating_sub(1)).rev() {
            let inner = strides[i + 1] * spec.shape[i + 1];
            strides[i] = if i + 2 == rank && row_alignment > 0 {
                inner.div_ceil(row_alignment) * row_alignment
            } else {
                inner
            };
        }
        let extent = if spec.shape.contains(&0) {
            0
        } else {
            spec.shape
                .iter()
                .zip(&strides)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
                + elem(spec)
        };
        Layout { strides, extent }
    }

    fn rows<'a>(&'a self, spec: &'a Port) -> impl Iterator<Item = usize> + 'a {
        let outer = &spec.shape[..spec.shape.len().saturating_sub(1)];
        let count: usize = outer.iter().product();
        (0..count).map(move |mut r| {
            let mut offset = 0;
            for (i, &d) in outer.iter().enumerate().rev() {
                offset += (r % d) * self.strides[i];
                r /= d;
            }
            offset
        })
    }

    /// Copies the port's elements out of a bound buffer into dense `dst`.
    pub fn gather(&self, spec: &Port, src: &[u8], dst: &mut [u8]) {
        let row = spec.shape.last().copied().unwrap_or(1) * elem(spec);
        for (r, offset) in self.rows(spec).enumerate() {
            dst[r * row..(r + 1) * row].copy_from_slice(&src[offset..offset + row]);
        }
    }

    /// Copies dense `src` into a bound buffer, leaving padding bytes untouched.
    pub fn scatter(&self, spec: &Port, src: &[u8], dst: &mut [u8]) {
        let row = spec.shape.last().copied().unwrap_or(1) * elem(spec);
        for (r, offset) in self.rows(spec).enumerate() {
            dst[offset..offset + row].copy_from_slice(&src[r * row..(r + 1) * row]);
        }
    }
}

/// One planned function of a compiled program.
pub struct CompiledFunction {
    pub name: String,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    pub plan: Arc<dyn Executor>,
}

/// A compiled program: its functions, and the process program slot it occupies.
pub struct CompiledProgram {
    pub path: PathBuf,
    pub functions: Vec<Arc<CompiledFunction>>,
    _slot: config::ProgramSlot,
}

impl CompiledProgram {
    pub fn function(&self, name: &str) -> Option<&Arc<CompiledFunction>> {
        self.functions.iter().find(|f| f.name == name)
    }
}

/// Bytes per element of a port from a signature (which only has exchangeable dtypes).
pub fn elem(port: &Port) -> usize {
    port.elem_bytes().expect("signature ports have host dtypes")
}

fn compile_error(path: &Path, message: impl std::fmt::Display) -> SimError {
    SimError::new(
        Code::CompileFailed,
        format!("{}: {message}", path.display()),
    )
}

/// Compiles the program at `path` (the `model.mil` of a program directory), claiming one of the
/// process's program slots.
pub fn compile(path: &Path) -> Result<CompiledProgram> {
    if path.file_name().and_then(|n| n.to_str()) != Some("model.mil") {
        return Err(compile_error(
            path,
            "the simulator compiles program directories: expected the path of a model.mil",
        ));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let loaded =
        ProgramDir::load(dir).map_err(|e| SimError::new(Code::CompileFailed, e.to_string()))?;
    let blobs: BlobStore = loaded.blobs.into_iter().collect();
    let program = loaded.program;
    let mut functions = Vec::with_capacity(program.functions.len());
    for function in &program.functions {
        let (inputs, outputs) = Port::signature(function).map_err(|e| compile_error(path, e))?;
        let plan = backend::plan(&program, &function.name, &blobs, &inputs, &outputs)
            .map_err(|e| compile_error(path, e))?;
        functions.push(Arc::new(CompiledFunction {
            name: function.name.clone(),
            inputs,
            outputs,
            plan,
        }));
    }
    let slot = config::claim_program().ok_or_else(|| {
        SimError::new(
            Code::ResourceLimit,
            format!(
                "{}: this process already has {} programs loaded (the limit); release one first",
                path.display(),
                config::max_programs()
            ),
        )
    })?;
    Ok(CompiledProgram {
        path: path.to_path_buf(),
        functions,
        _slot: slot,
    })
}
