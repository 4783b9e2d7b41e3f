//! Graph construction errors: each names the op and the operand shapes or dtypes involved.

use super::DType;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("{op}: {message} (operand shapes {})", fmt_shapes(.shapes))]
    Shape {
        op: &'static str,
        shapes: Vec<Vec<usize>>,
        message: String,
    },
    #[error("{op}: {message} (operand dtypes {})", fmt_dtypes(.dtypes))]
    DType {
        op: &'static str,
        dtypes: Vec<DType>,
        message: String,
    },
    #[error("{op}: {message}")]
    Attribute { op: &'static str, message: String },
    #[error(
        "constant data: {len} values cannot fill shape {shape:?}, which has {expected} elements"
    )]
    DataLength {
        shape: Vec<usize>,
        len: usize,
        expected: usize,
    },
    #[error("name {name:?}: {message}")]
    Name { name: String, message: String },
    /// Deferred constant data ([`super::DeferredF32`]) could not be read.
    #[error("constant data: {0}")]
    ConstantData(String),
}

impl GraphError {
    pub(crate) fn shape(op: &'static str, shapes: &[&[usize]], message: impl Into<String>) -> Self {
        GraphError::Shape {
            op,
            shapes: shapes.iter().map(|s| s.to_vec()).collect(),
            message: message.into(),
        }
    }

    pub(crate) fn dtype(op: &'static str, dtypes: &[DType], message: impl Into<String>) -> Self {
        GraphError::DType {
            op,
            dtypes: dtypes.to_vec(),
            message: message.into(),
        }
    }

    pub(crate) fn attribute(op: &'static str, message: impl Into<String>) -> Self {
        GraphError::Attribute {
            op,
            message: message.into(),
        }
    }
}

fn fmt_shapes(shapes: &[Vec<usize>]) -> String {
    let parts: Vec<String> = shapes.iter().map(|s| format!("{s:?}")).collect();
    parts.join(", ")
}

fn fmt_dtypes(dtypes: &[DType]) -> String {
    let parts: Vec<&str> = dtypes.iter().map(|d| d.name()).collect();
    parts.join(", ")
}
