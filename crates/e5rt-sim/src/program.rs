//! Compiling a `model.mil` for the simulator: parse, resolve its blob files relative to the
//! program directory, and plan every function on the CPU engine.

use crate::backend::{self, BlobStore, Plan};
use crate::config;
use crate::error::{Code, Result, SimError};
use aneforge_mil::{DType, ProgramDir, ValueType};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One function input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSpec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub elem: usize,
}

impl PortSpec {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn dense_bytes(&self) -> usize {
        self.len() * self.elem
    }
}

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
    pub fn for_port(spec: &PortSpec, row_alignment: usize) -> Layout {
        let rank = spec.shape.len();
        let mut strides = vec![spec.elem; rank];
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
                + spec.elem
        };
        Layout { strides, extent }
    }

    fn rows<'a>(&'a self, spec: &'a PortSpec) -> impl Iterator<Item = usize> + 'a {
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
    pub fn gather(&self, spec: &PortSpec, src: &[u8], dst: &mut [u8]) {
        let row = spec.shape.last().copied().unwrap_or(1) * spec.elem;
        for (r, offset) in self.rows(spec).enumerate() {
            dst[r * row..(r + 1) * row].copy_from_slice(&src[offset..offset + row]);
        }
    }

    /// Copies dense `src` into a bound buffer, leaving padding bytes untouched.
    pub fn scatter(&self, spec: &PortSpec, src: &[u8], dst: &mut [u8]) {
        let row = spec.shape.last().copied().unwrap_or(1) * spec.elem;
        for (r, offset) in self.rows(spec).enumerate() {
            dst[offset..offset + row].copy_from_slice(&src[r * row..(r + 1) * row]);
        }
    }
}

/// One planned function of a compiled program.
pub struct CompiledFunction {
    pub name: String,
    pub inputs: Vec<PortSpec>,
    pub outputs: Vec<PortSpec>,
    pub plan: Arc<dyn Plan>,
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

fn element_size(dtype: DType) -> Option<usize> {
    Some(match dtype {
        DType::Fp32 | DType::Int32 => 4,
        DType::Fp16 => 2,
        DType::Int8 | DType::Uint8 | DType::Bool => 1,
        _ => return None,
    })
}

fn compile_error(path: &Path, message: impl std::fmt::Display) -> SimError {
    SimError::new(
        Code::CompileFailed,
        format!("{}: {message}", path.display()),
    )
}

fn ports(path: &Path, function: &aneforge_mil::Function) -> Result<(Vec<PortSpec>, Vec<PortSpec>)> {
    let spec = |name: &str, ty: Option<&ValueType>| -> Result<PortSpec> {
        let what = format!("port `{name}` of function `{}`", function.name);
        let tensor = ty
            .and_then(ValueType::tensor)
            .ok_or_else(|| compile_error(path, format!("{what} is not a tensor")))?;
        let shape = tensor
            .static_shape()
            .ok_or_else(|| compile_error(path, format!("{what} has a symbolic shape")))?;
        let elem = element_size(tensor.dtype).ok_or_else(|| {
            compile_error(
                path,
                format!(
                    "{what} has dtype {}, which ports cannot carry",
                    tensor.dtype
                ),
            )
        })?;
        Ok(PortSpec {
            name: name.to_string(),
            dtype: tensor.dtype,
            shape,
            elem,
        })
    };
    let inputs = function
        .inputs
        .iter()
        .map(|v| spec(&v.name, Some(&v.ty)))
        .collect::<Result<Vec<_>>>()?;
    let outputs = function
        .body
        .outputs
        .iter()
        .map(|name| spec(name, function.value_type(name)))
        .collect::<Result<Vec<_>>>()?;
    Ok((inputs, outputs))
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
        let (inputs, outputs) = ports(path, function)?;
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
