//! Shape and dtype rules: one per [`Op`] variant, checked when a node is built, kept by op family
//! in the files below (the same families as the CPU engine's `ops/`).

mod attention;
mod conv;
mod elementwise;
mod gather;
mod layout;
mod linalg;
mod reduce;

use super::op::{Op, OpFamily};
use super::{DType, GraphError, Tensor};

/// The output shape and dtype of `op` applied to `srcs`, or the reason it does not apply.
pub fn infer(op: &Op, srcs: &[Tensor]) -> Result<(Vec<usize>, DType), GraphError> {
    let name = op.name();
    match op {
        Op::Input { .. } => Err(GraphError::attribute(
            name,
            "inputs are leaves; build them with `input`",
        )),
        Op::Constant(a) | Op::Parameter { init: a, .. } => {
            arity(name, srcs, 0)?;
            Ok((a.shape().to_vec(), a.dtype()))
        }
        _ => match op.family() {
            OpFamily::Elementwise => elementwise::infer(op, name, srcs),
            OpFamily::Linalg => linalg::infer(op, name, srcs),
            OpFamily::Conv => conv::infer(op, name, srcs),
            OpFamily::Reduce => reduce::infer(op, name, srcs),
            OpFamily::Layout => layout::infer(op, name, srcs),
            OpFamily::Gather => gather::infer(op, name, srcs),
            OpFamily::Attention => attention::infer(op, name, srcs),
            OpFamily::Leaf => Err(GraphError::attribute(name, "a leaf takes no operands")),
        },
    }
}

/// NumPy broadcasting of two shapes.
pub fn broadcast(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>, GraphError> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i < r - a.len() {
            1
        } else {
            a[i - (r - a.len())]
        };
        let db = if i < r - b.len() {
            1
        } else {
            b[i - (r - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(GraphError::shape(
                    op,
                    &[a, b],
                    format!("axis {i} of the result: sizes {da} and {db} do not broadcast"),
                ))
            }
        };
    }
    Ok(out)
}

/// A signed axis (`-1` is the last) as an index below `rank`.
pub fn normalize_axis(op: &'static str, axis: isize, rank: usize) -> Result<usize, GraphError> {
    let r = rank as isize;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(GraphError::attribute(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// Signed axes as sorted unique indices; duplicates are an error.
pub fn normalize_axes(
    op: &'static str,
    axes: &[isize],
    rank: usize,
) -> Result<Vec<usize>, GraphError> {
    let mut out = axes
        .iter()
        .map(|&a| normalize_axis(op, a, rank))
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(GraphError::attribute(
            op,
            format!("axes {axes:?} name an axis twice"),
        ));
    }
    Ok(out)
}

pub(super) fn same(x: &Tensor) -> (Vec<usize>, DType) {
    (x.shape().to_vec(), x.dtype())
}

pub(super) fn arity(op: &'static str, srcs: &[Tensor], n: usize) -> Result<(), GraphError> {
    if srcs.len() != n {
        return Err(GraphError::attribute(
            op,
            format!("expected {n} operands, got {}", srcs.len()),
        ));
    }
    Ok(())
}

pub(super) fn float_only(op: &'static str, srcs: &[Tensor]) -> Result<(), GraphError> {
    if srcs.iter().any(|s| s.dtype() != DType::F32) {
        let dtypes: Vec<DType> = srcs.iter().map(|s| s.dtype()).collect();
        return Err(GraphError::dtype(op, &dtypes, "operands must be f32"));
    }
    Ok(())
}

pub(super) fn check_axes(op: &'static str, x: &[usize], axes: &[usize]) -> Result<(), GraphError> {
    if axes.iter().any(|&a| a >= x.len()) || axes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(GraphError::shape(
            op,
            &[x],
            format!("axes {axes:?} must be sorted, unique and below the rank"),
        ));
    }
    Ok(())
}

pub(super) fn mul(op: &'static str, a: usize, b: usize, x: &[usize]) -> Result<usize, GraphError> {
    a.checked_mul(b)
        .ok_or_else(|| GraphError::shape(op, &[x], "size overflows"))
}
