//! Shape plumbing shared by the VJP rules: undoing broadcasts, zeros, one-hot matrices and
//! scattering a strided window back into a larger tensor.

use super::shape_isize;
use crate::graph::{constant, scalar, DType, GraphError, HostArray, PadMode, Tensor};

/// Zeros of `shape` (a scalar broadcast, so no large constant lands in the weights blob).
pub fn zeros(shape: &[usize]) -> Result<Tensor, GraphError> {
    if shape.iter().product::<usize>() <= crate::lower::INLINE_MAX_ELEMENTS {
        return Ok(constant(HostArray::full(shape, 0.0)?));
    }
    scalar(0.0).broadcast_to(shape)
}

/// Sums `g` over the axes a broadcast added or stretched, so it gets `shape` (the inverse of
/// broadcasting `shape` to `g.shape()`).
pub fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor, GraphError> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let lead = g.rank().checked_sub(shape.len()).ok_or_else(|| {
        GraphError::shape(
            "sum_to",
            &[g.shape(), shape],
            "the target has more axes than the gradient",
        )
    })?;
    let axes: Vec<isize> = (0..g.rank())
        .filter(|&i| i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1))
        .map(|i| i as isize)
        .collect();
    let summed = if axes.is_empty() {
        g.clone()
    } else {
        g.sum(&axes, true)?
    };
    summed.reshape(&shape_isize(shape))
}

/// `x`'s shape with `axes` set to 1.
pub(crate) fn keep_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect()
}

/// An i32 constant `[0, 1, ..., n-1]` of shape `shape` (one axis of size `n`, others 1).
pub(crate) fn iota(n: usize, shape: &[usize]) -> Result<Tensor, GraphError> {
    let data: Vec<i32> = (0..n).map(|i| i as i32).collect();
    Ok(constant(HostArray::from_i32(shape, data)?))
}

/// `[*indices.shape, depth]` f32 one-hot rows of i32 `indices` (indices outside `0..depth` give
/// a zero row).
pub fn one_hot(indices: &Tensor, depth: usize) -> Result<Tensor, GraphError> {
    if indices.dtype() != DType::I32 {
        return Err(GraphError::dtype(
            "one_hot",
            &[indices.dtype()],
            "indices must be i32",
        ));
    }
    let mut col = indices.shape().to_vec();
    col.push(1);
    let mut row = vec![1; indices.rank()];
    row.push(depth);
    indices
        .reshape(&shape_isize(&col))?
        .eq(&iota(depth, &row)?)?
        .cast(DType::F32)
}

/// The zero tensor of `shape` with `g` written at `begin + i·stride` along every axis: the
/// adjoint of `x.slice(begin, begin + stride·(g.shape - 1) + 1, stride)`.
pub(crate) fn strided_scatter(
    g: &Tensor,
    shape: &[usize],
    begin: &[usize],
    stride: &[usize],
) -> Result<Tensor, GraphError> {
    let mut cur = g.clone();
    for (axis, &s) in stride.iter().enumerate() {
        if s == 1 {
            continue;
        }
        let cs = cur.shape().to_vec();
        let (m, outer, inner) = (
            cs[axis],
            cs[..axis].iter().product::<usize>(),
            cs[axis + 1..].iter().product::<usize>(),
        );
        let spread = cur
            .reshape(&[outer as isize, m as isize, 1, inner as isize])?
            .pad(
                &[(0, 0), (0, 0), (0, s - 1), (0, 0)],
                PadMode::Constant,
                0.0,
            )?;
        let room = shape[axis] - begin[axis];
        let len = (m * s).min(room);
        let mut next = cs.clone();
        next[axis] = len;
        cur = spread
            .reshape(&[outer as isize, (m * s) as isize, inner as isize])?
            .narrow(1, 0, len)?
            .reshape(&shape_isize(&next))?;
    }
    let pads: Vec<(usize, usize)> = (0..shape.len())
        .map(|i| (begin[i], shape[i] - begin[i] - cur.shape()[i]))
        .collect();
    if pads.iter().all(|&p| p == (0, 0)) {
        return Ok(cur);
    }
    cur.pad(&pads, PadMode::Constant, 0.0)
}

/// `g` (shaped like the reduction of `shape` over `axes`, with or without kept axes) broadcast
/// back to `shape`.
pub(crate) fn unreduce(g: &Tensor, shape: &[usize], axes: &[usize]) -> Result<Tensor, GraphError> {
    g.reshape(&shape_isize(&keep_shape(shape, axes)))?
        .broadcast_to(shape)
}
