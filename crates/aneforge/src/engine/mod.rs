//! Engines run compiled programs. Every engine implements [`Executable`], the runtime contract:
//! typed ports, `set_input` / `execute` / `read_output`, zero-copy views, and `share_buffer` for
//! state that stays resident across executes. The CPU engine is [`cpu::CpuExecutable`]; the ANE
//! engine implements the same trait.

pub mod ane;
mod ane_exec;
mod ane_ffi;
pub mod ane_host;
mod ane_layout;
pub mod ane_select;
mod cache;
pub mod cpu;

pub use ane::{AneEngine, AneError, AneOptions, AneProgram, AneStats};
pub use ane_exec::AneExecutable;
pub use ane_select::{EngineKind, UnknownEngine};
pub use aneforge_cpu::{Accumulation, BufferMut, BufferRef, HostSlice, HostTensor, ValueStats};
pub use cache::{cache_stats, compile_count, CacheStats};

use crate::lower::Artifact;
use aneforge_mil as mil;

/// Which engine runs a compiled program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Engine {
    /// aneforge's own CPU engine: runs any target's program (fp16 programs with fp16 storage).
    #[default]
    Cpu,
    /// The Neural Engine through Apple's e5rt runtime ([`AneEngine::global`]); on other machines,
    /// the e5rt implementation `ANEFORGE_E5RT_LIB` names (such as the simulator).
    Ane,
}

impl Engine {
    /// The ANE where its runtime can be loaded, the CPU otherwise.
    pub fn auto() -> Engine {
        if AneEngine::global().is_ok() {
            Engine::Ane
        } else {
            Engine::Cpu
        }
    }
}

/// One input or output port of a loaded program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub dtype: mil::DType,
    pub shape: Vec<usize>,
}

impl Port {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cpu engine: {0}")]
    Cpu(#[from] aneforge_cpu::CpuError),
    #[error("ane engine: {0}")]
    Ane(#[from] AneError),
    #[error("weights blob: {0}")]
    Blob(#[from] mil::BlobError),
    #[error("the program has no function {name:?}; its functions are {available:?}")]
    UnknownFunction {
        name: String,
        available: Vec<String>,
    },
    #[error("no input port named {name:?}; the inputs are {available:?}")]
    UnknownInput {
        name: String,
        available: Vec<String>,
    },
    #[error("no output port named {name:?}; the outputs are {available:?}")]
    UnknownOutput {
        name: String,
        available: Vec<String>,
    },
    #[error(
        "input {name:?} has shape {shape:?} ({expected} elements) but {got} values were given"
    )]
    Length {
        name: String,
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },
    #[error("input {name:?} is {port} but {given} data was given")]
    DType {
        name: String,
        port: mil::DType,
        given: &'static str,
    },
    #[error("this engine cannot report values inside a program; inspection needs the CPU engine")]
    NoInspection,
    #[error("input {name:?} was never set (set it, share it with an output, or write its view)")]
    Unset { name: String },
    #[error("input {name:?} is given twice")]
    Repeated { name: String },
    #[error("share_buffer({output:?} -> {input:?}): {reason}")]
    Share {
        output: String,
        input: String,
        reason: String,
    },
}

/// The runtime contract every engine implements.
pub trait Executable: Send {
    fn inputs(&self) -> &[Port];
    fn outputs(&self) -> &[Port];
    /// Copies (and converts) host data into an input port; the length must equal the port's
    /// element count.
    fn set_input(&mut self, name: &str, data: HostSlice<'_>) -> Result<(), EngineError>;
    fn execute(&mut self) -> Result<(), EngineError>;
    /// An owned copy of an output in the port's dtype.
    fn read_output(&self, name: &str) -> Result<HostTensor, EngineError>;
    /// An output converted to f32.
    fn read_output_f32(&self, name: &str) -> Result<Vec<f32>, EngineError>;
    /// The input port's buffer, for writing in place.
    fn input_view_mut(&mut self, name: &str) -> Result<BufferMut<'_>, EngineError>;
    /// The output port's buffer, valid until the next execute.
    fn output_view(&self, name: &str) -> Result<BufferRef<'_>, EngineError>;
    /// Before the first execute: binds `input` to `output`'s buffer (same dtype and shape), so
    /// each execute reads the previous value and the new one lands when it returns.
    fn share_buffer(&mut self, output: &str, input: &str) -> Result<(), EngineError>;
    /// Executes, returning the magnitude and inf/NaN count of every value each op wrote, in
    /// order (the CPU engine only: other engines cannot look inside a program).
    fn execute_inspected(&mut self) -> Result<Vec<aneforge_cpu::ValueStats>, EngineError> {
        Err(EngineError::NoInspection)
    }
    /// Frees the engine's resources now (dropping does the same).
    fn release(self: Box<Self>) {}
}

/// Loads an artifact's default function into the chosen engine.
pub fn load(artifact: &Artifact, engine: Engine) -> Result<Box<dyn Executable>, EngineError> {
    let main = artifact.functions()[0].name.clone();
    load_function(artifact, &main, engine)
}

/// Numerical choices of an engine that the program leaves open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EngineOptions {
    /// CPU engine: few-row products against block-quantized weights quantize their activations
    /// to 8 bits per 32 columns (llama.cpp's scheme; see
    /// `aneforge_cpu::CompileOptions::quantize_activations`). The ANE ignores it.
    pub quantize_activations: bool,
    /// CPU engine: the width of running sums in fp16 programs (`aneforge_cpu::Accumulation`).
    pub accumulation: aneforge_cpu::Accumulation,
    /// CPU engine: every MIL op runs as its own kernel (no fusion), so
    /// [`Executable::execute_inspected`] sees each op's result as the program stores it.
    pub inspect: bool,
}

/// Loads one function of an artifact into the chosen engine.
pub fn load_function(
    artifact: &Artifact,
    function: &str,
    engine: Engine,
) -> Result<Box<dyn Executable>, EngineError> {
    load_function_with(artifact, function, engine, EngineOptions::default())
}

/// [`load_function`] with engine options.
pub fn load_function_with(
    artifact: &Artifact,
    function: &str,
    engine: Engine,
    options: EngineOptions,
) -> Result<Box<dyn Executable>, EngineError> {
    if artifact.function(function).is_none() {
        return Err(EngineError::UnknownFunction {
            name: function.to_string(),
            available: artifact
                .functions()
                .iter()
                .map(|f| f.name.clone())
                .collect(),
        });
    }
    match engine {
        Engine::Cpu => Ok(Box::new(cpu::CpuExecutable::load_function_with(
            artifact, function, options,
        )?)),
        Engine::Ane => {
            // the ANE runtime retains function `main`: a one-function view over the same weights
            let single = artifact.function_as_main(function).ok_or_else(|| {
                EngineError::UnknownFunction {
                    name: function.to_string(),
                    available: artifact
                        .functions()
                        .iter()
                        .map(|f| f.name.clone())
                        .collect(),
                }
            })?;
            Ok(Box::new(AneExecutable::load(
                &AneEngine::global()?,
                &single,
            )?))
        }
    }
}

pub(crate) fn slice_kind(data: &HostSlice<'_>) -> (&'static str, usize) {
    match data {
        HostSlice::F32(v) => ("f32", v.len()),
        HostSlice::F16(v) => ("f16", v.len()),
        HostSlice::I32(v) => ("i32", v.len()),
        HostSlice::I8(v) => ("i8", v.len()),
        HostSlice::U8(v) => ("u8", v.len()),
        HostSlice::Bool(v) => ("bool", v.len()),
    }
}

/// Whether host data of kind `given` may be written into a port of `port` dtype.
pub(crate) fn accepts(port: mil::DType, given: &str) -> bool {
    match port {
        mil::DType::Fp32 | mil::DType::Fp16 => matches!(given, "f32" | "f16"),
        mil::DType::Int32 => given == "i32",
        mil::DType::Int8 => given == "i8",
        mil::DType::Uint8 => given == "u8",
        mil::DType::Bool => given == "bool",
        _ => false,
    }
}
