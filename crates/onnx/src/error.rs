//! Import errors: each names the file, tensor, node, op or opset it is about.

use aneforge::GraphError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a valid ONNX model (protobuf decode failed: {message})")]
    Decode { path: PathBuf, message: String },
    #[error("tensor {tensor:?}: external data {location:?}: {message}")]
    ExternalData {
        tensor: String,
        location: String,
        message: String,
    },
    #[error("tensor {tensor:?}: {message}")]
    Tensor { tensor: String, message: String },
    #[error("model: {0}")]
    Model(String),
    #[error("model: unsupported: {0}")]
    UnsupportedModel(String),
    #[error("input {name:?}: unsupported: {reason}")]
    UnsupportedInput { name: String, reason: String },
    #[error("input {name:?}: {message}")]
    Input { name: String, message: String },
    #[error("node {node:?} ({op}, opset {opset}): unsupported: {reason}")]
    Unsupported {
        op: String,
        node: String,
        opset: i64,
        reason: String,
    },
    #[error("node {node:?} ({op}, opset {opset}): {message}")]
    Node {
        op: String,
        node: String,
        opset: i64,
        message: String,
    },
    #[error("the graph has a cycle through nodes {nodes:?}")]
    Cycle { nodes: Vec<String> },
}

/// An error inside one op's import, before the node it belongs to is known.
#[derive(Debug)]
pub(crate) enum OpError {
    Unsupported(String),
    Invalid(String),
}

impl From<GraphError> for OpError {
    /// The graph's own limits (rank, empty tensors) make a node unsupported, not invalid.
    fn from(e: GraphError) -> OpError {
        let message = e.to_string();
        if message.contains("exceeds the maximum rank")
            || message.contains("zero-size dimensions are not supported")
        {
            OpError::Unsupported(message)
        } else {
            OpError::Invalid(message)
        }
    }
}

pub(crate) type OpResult<T> = Result<T, OpError>;

pub(crate) fn unsupported<T>(reason: impl Into<String>) -> OpResult<T> {
    Err(OpError::Unsupported(reason.into()))
}

pub(crate) fn invalid<T>(message: impl Into<String>) -> OpResult<T> {
    Err(OpError::Invalid(message.into()))
}
