//! aneforge: tensor graphs compiled to MIL programs and run on the ANE or the CPU.
//!
//! Build a graph with [`graph`], compile it with [`compile`] for a [`Target`], run the resulting
//! [`Model`] on an [`Engine`].

pub mod arch;
pub mod autograd;
pub mod engine;
pub mod graph;
pub mod legalize;
pub mod lower;
mod model;
pub mod output;
pub mod pipeline;
pub mod train;

pub use arch::AneArch;
pub use engine::Engine;
pub use graph::{DType, GraphError, HostArray, Tensor};
pub use lower::{Artifact, LowerError, ParameterMode, Target};
pub use model::{compile, compile_named, CompileOptions, Error, MemoryReport, Model};
pub use pipeline::{
    compile_artifact, compile_functions, compile_program, Calibration, CompileError, Compiled,
    Compress, FunctionSpec, ProgramOptions, Quantize, W8A8,
};
