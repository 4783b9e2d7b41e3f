//! `Tensor`: a cheap handle to an immutable graph node.

use super::host::check_shape;
use super::shape::infer;
use super::{DType, GraphError, HostArray, Op};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Identity of a node, unique within the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u64);

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

pub struct Node {
    id: NodeId,
    op: Op,
    srcs: Vec<Tensor>,
    shape: Vec<usize>,
    dtype: DType,
}

/// A lazy value: the result of `op` over `srcs`. Cloning is an `Arc` clone; equality is node
/// identity.
#[derive(Clone)]
pub struct Tensor(Arc<Node>);

impl Tensor {
    /// Builds a node after checking the op's shape rule against its operands.
    pub fn from_op(op: Op, srcs: Vec<Tensor>) -> Result<Tensor, GraphError> {
        let (shape, dtype) = infer(&op, &srcs)?;
        check_shape(op.name(), &shape)?;
        Ok(Tensor::new_unchecked(op, srcs, shape, dtype))
    }

    fn new_unchecked(op: Op, srcs: Vec<Tensor>, shape: Vec<usize>, dtype: DType) -> Tensor {
        let id = NodeId(NEXT_ID.fetch_add(1, Ordering::Relaxed));
        Tensor(Arc::new(Node {
            id,
            op,
            srcs,
            shape,
            dtype,
        }))
    }

    pub fn id(&self) -> NodeId {
        self.0.id
    }

    pub fn op(&self) -> &Op {
        &self.0.op
    }

    pub fn srcs(&self) -> &[Tensor] {
        &self.0.srcs
    }

    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    pub fn rank(&self) -> usize {
        self.0.shape.len()
    }

    /// Element count (1 for a scalar).
    pub fn len(&self) -> usize {
        self.0.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The data of a constant node.
    pub fn constant_value(&self) -> Option<&HostArray> {
        match &self.0.op {
            Op::Constant(a) => Some(a),
            _ => None,
        }
    }
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for Tensor {}

impl Hash for Tensor {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.id.hash(state)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor(#{} {} {:?} {})",
            self.0.id.0,
            self.0.op.name(),
            self.0.shape,
            self.0.dtype
        )
    }
}

/// Deep graphs are freed iteratively: a recursive drop of a long chain would overflow the stack.
impl Drop for Node {
    fn drop(&mut self) {
        let mut stack: Vec<Tensor> = std::mem::take(&mut self.srcs);
        while let Some(t) = stack.pop() {
            if let Ok(mut node) = Arc::try_unwrap(t.0) {
                stack.append(&mut node.srcs);
            }
        }
    }
}

/// A fed program input. `name` must be a MIL identifier (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn input(name: &str, shape: &[usize], dtype: DType) -> Result<Tensor, GraphError> {
    check_name(name)?;
    check_shape("input", shape)?;
    Ok(Tensor::new_unchecked(
        Op::Input {
            name: name.to_string(),
        },
        Vec::new(),
        shape.to_vec(),
        dtype,
    ))
}

/// Fixed data baked into the program.
pub fn constant(value: HostArray) -> Tensor {
    let (shape, dtype) = (value.shape().to_vec(), value.dtype());
    Tensor::new_unchecked(Op::Constant(value), Vec::new(), shape, dtype)
}

/// A trainable leaf with its initial value.
pub fn parameter(name: &str, init: HostArray) -> Result<Tensor, GraphError> {
    check_name(name)?;
    let (shape, dtype) = (init.shape().to_vec(), init.dtype());
    Ok(Tensor::new_unchecked(
        Op::Parameter {
            name: name.to_string(),
            init,
        },
        Vec::new(),
        shape,
        dtype,
    ))
}

/// An f32 scalar constant.
pub fn scalar(value: f32) -> Tensor {
    constant(HostArray::scalar_f32(value))
}

/// An f32 constant with every element equal to `value`.
pub fn full(shape: &[usize], value: f32) -> Result<Tensor, GraphError> {
    Ok(constant(HostArray::full(shape, value)?))
}

pub(crate) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn check_name(name: &str) -> Result<(), GraphError> {
    if !is_identifier(name) {
        return Err(GraphError::Name {
            name: name.to_string(),
            message: "must match [A-Za-z_][A-Za-z0-9_]*".into(),
        });
    }
    Ok(())
}
