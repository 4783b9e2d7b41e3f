//! Errors of the CPU engine. Compile errors name the op (its `name` attribute and type).

use crate::port::PortError;

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
    #[error(transparent)]
    Port(#[from] PortError),
    #[error("execute: {0}")]
    Execute(String),
}

pub type Result<T, E = CpuError> = std::result::Result<T, E>;
