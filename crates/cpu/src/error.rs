//! Errors of the CPU engine. Compile errors name the op (its `name` attribute and type).

use aneforge_mil::DType;

#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error("function `{0}` is not in the program (functions: {1})")]
    NoFunction(String, String),
    #[error("op `{name}` ({op_type}): {message}")]
    Op {
        name: String,
        op_type: String,
        message: String,
    },
    #[error("function input `{name}`: {message}")]
    Input { name: String, message: String },
    #[error("program: {0}")]
    Program(String),
    #[error("no {kind} port named `{name}` (ports: {available})")]
    UnknownPort {
        kind: &'static str,
        name: String,
        available: String,
    },
    #[error("port `{port}` holds {expected} elements, got {found}")]
    Length {
        port: String,
        expected: usize,
        found: usize,
    },
    #[error("port `{port}` is {expected}, host data is {found}")]
    Dtype {
        port: String,
        expected: DType,
        found: &'static str,
    },
    #[error("share_buffer({output}, {input}): {message}")]
    Share {
        output: String,
        input: String,
        message: String,
    },
    #[error("execute: {0}")]
    Execute(String),
}

pub type Result<T, E = CpuError> = std::result::Result<T, E>;
