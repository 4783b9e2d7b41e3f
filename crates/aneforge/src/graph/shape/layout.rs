//! Layout ops: reshape, transpose, concat, slices and slice updates, pad, tile, space_to_depth and depth_to_space.

use super::{arity, check_axes, float_only, mul, same};
use crate::graph::op::Op;
use crate::graph::{DType, GraphError, Tensor};

pub(super) fn infer(
    op: &Op,
    name: &'static str,
    srcs: &[Tensor],
) -> Result<(Vec<usize>, DType), GraphError> {
    match op {
        Op::Reshape { shape } => {
            arity(name, srcs, 1)?;
            let x = srcs[0].shape();
            let n = crate::graph::host::checked_elements(name, shape)?;
            if n != srcs[0].len() {
                return Err(GraphError::shape(
                    name,
                    &[x, shape],
                    "element counts differ",
                ));
            }
            Ok((shape.clone(), srcs[0].dtype()))
        }
        Op::Transpose { perm } => {
            arity(name, srcs, 1)?;
            let x = srcs[0].shape();
            let mut seen = vec![false; x.len()];
            let valid = perm.len() == x.len()
                && perm
                    .iter()
                    .all(|&p| p < x.len() && !std::mem::replace(&mut seen[p], true));
            if !valid {
                return Err(GraphError::shape(
                    name,
                    &[x],
                    format!("{perm:?} is not a permutation of the axes"),
                ));
            }
            Ok((perm.iter().map(|&p| x[p]).collect(), srcs[0].dtype()))
        }
        Op::Concat { axis } => {
            if srcs.is_empty() {
                return Err(GraphError::attribute(name, "needs at least one operand"));
            }
            let first = srcs[0].shape();
            let shapes: Vec<&[usize]> = srcs.iter().map(|s| s.shape()).collect();
            check_axes(name, first, &[*axis])?;
            let mut out = first.to_vec();
            out[*axis] = 0;
            for s in srcs {
                let ok = s.dtype() == srcs[0].dtype()
                    && s.rank() == first.len()
                    && s.shape()
                        .iter()
                        .zip(first)
                        .enumerate()
                        .all(|(i, (a, b))| i == *axis || a == b);
                if !ok {
                    return Err(GraphError::shape(
                        name,
                        &shapes,
                        format!("operands must share dtype and all axes but {axis}"),
                    ));
                }
                out[*axis] += s.shape()[*axis];
            }
            Ok((out, srcs[0].dtype()))
        }
        Op::Slice { begin, end, stride } => {
            arity(name, srcs, 1)?;
            let x = srcs[0].shape();
            let r = x.len();
            if begin.len() != r || end.len() != r || stride.len() != r {
                return Err(GraphError::shape(
                    name,
                    &[x],
                    "begin, end and stride need one entry per axis",
                ));
            }
            let mut out = Vec::with_capacity(r);
            for i in 0..r {
                if begin[i] >= end[i] || end[i] > x[i] || stride[i] == 0 {
                    return Err(GraphError::shape(
                        name,
                        &[x],
                        format!(
                            "axis {i}: range {}..{} step {} is empty or outside 0..{}",
                            begin[i], end[i], stride[i], x[i]
                        ),
                    ));
                }
                out.push((end[i] - begin[i]).div_ceil(stride[i]));
            }
            Ok((out, srcs[0].dtype()))
        }
        Op::DynamicSlice { size } => {
            arity(name, srcs, 2)?;
            let (x, begin) = (srcs[0].shape(), srcs[1].shape());
            check_begin(name, srcs, 1)?;
            if size.len() != x.len() || size.iter().zip(x).any(|(s, d)| *s == 0 || s > d) {
                return Err(GraphError::shape(
                    name,
                    &[x, begin],
                    format!("window {size:?} does not fit"),
                ));
            }
            Ok((size.clone(), srcs[0].dtype()))
        }
        Op::SliceUpdate { begin } => {
            arity(name, srcs, 2)?;
            let (x, u) = (srcs[0].shape(), srcs[1].shape());
            same_dtype(name, &srcs[..2])?;
            let fits = u.len() == x.len()
                && begin.len() == x.len()
                && (0..x.len()).all(|i| begin[i].checked_add(u[i]).is_some_and(|e| e <= x[i]));
            if !fits {
                return Err(GraphError::shape(
                    name,
                    &[x, u],
                    format!("update at {begin:?} does not fit inside x"),
                ));
            }
            Ok(same(&srcs[0]))
        }
        Op::DynamicSliceUpdate => {
            arity(name, srcs, 3)?;
            let (x, u) = (srcs[0].shape(), srcs[1].shape());
            same_dtype(name, &srcs[..2])?;
            check_begin(name, srcs, 2)?;
            if u.len() != x.len() || u.iter().zip(x).any(|(a, b)| a > b) {
                return Err(GraphError::shape(
                    name,
                    &[x, u],
                    "update must have x's rank and fit inside it",
                ));
            }
            Ok(same(&srcs[0]))
        }
        Op::Pad { pads, mode, value } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            let x = srcs[0].shape();
            if pads.len() != x.len() {
                return Err(GraphError::shape(
                    name,
                    &[x],
                    format!(
                        "{} (before, after) pairs given for rank {}",
                        pads.len(),
                        x.len()
                    ),
                ));
            }
            if !value.is_finite() {
                return Err(GraphError::attribute(name, "the pad value must be finite"));
            }
            let mut out = Vec::with_capacity(x.len());
            for (i, (&(b, a), &d)) in pads.iter().zip(x).enumerate() {
                let limit = match mode {
                    crate::graph::PadMode::Constant => usize::MAX,
                    crate::graph::PadMode::Reflect => d - 1,
                    crate::graph::PadMode::Replicate => d,
                };
                if b > limit || a > limit {
                    return Err(GraphError::shape(
                        name,
                        &[x],
                        format!(
                            "axis {i}: {} padding of ({b}, {a}) exceeds {limit}",
                            mode.name()
                        ),
                    ));
                }
                out.push(
                    d.checked_add(b)
                        .and_then(|v| v.checked_add(a))
                        .ok_or_else(|| GraphError::shape(name, &[x], "size overflows"))?,
                );
            }
            Ok((out, DType::F32))
        }
        Op::Tile { reps } => {
            arity(name, srcs, 1)?;
            let x = srcs[0].shape();
            if reps.len() != x.len() || reps.contains(&0) {
                return Err(GraphError::shape(
                    name,
                    &[x],
                    format!("reps {reps:?} must have one entry >= 1 per axis"),
                ));
            }
            let out = x
                .iter()
                .zip(reps)
                .map(|(&d, &r)| mul(name, d, r, x))
                .collect::<Result<_, _>>()?;
            Ok((out, srcs[0].dtype()))
        }
        Op::SpaceToDepth { block } | Op::DepthToSpace { block } => {
            arity(name, srcs, 1)?;
            let x = srcs[0].shape();
            if x.len() != 4 || *block == 0 {
                return Err(GraphError::shape(
                    name,
                    &[x],
                    "expected [N, C, H, W] and a block size >= 1",
                ));
            }
            let b = *block;
            let out = if matches!(op, Op::SpaceToDepth { .. }) {
                if !x[2].is_multiple_of(b) || !x[3].is_multiple_of(b) {
                    return Err(GraphError::shape(
                        name,
                        &[x],
                        format!("H and W must be multiples of {b}"),
                    ));
                }
                let bb = mul(name, b, b, x)?;
                vec![x[0], mul(name, x[1], bb, x)?, x[2] / b, x[3] / b]
            } else {
                let bb = mul(name, b, b, x)?;
                if !x[1].is_multiple_of(bb) {
                    return Err(GraphError::shape(
                        name,
                        &[x],
                        format!("C must be a multiple of {bb}"),
                    ));
                }
                vec![
                    x[0],
                    x[1] / bb,
                    mul(name, x[2], b, x)?,
                    mul(name, x[3], b, x)?,
                ]
            };
            Ok((out, srcs[0].dtype()))
        }
        _ => Err(GraphError::attribute(name, "not an layout op")),
    }
}

fn same_dtype(op: &'static str, srcs: &[Tensor]) -> Result<(), GraphError> {
    if srcs.windows(2).any(|w| w[0].dtype() != w[1].dtype()) {
        let dtypes: Vec<DType> = srcs.iter().map(|s| s.dtype()).collect();
        return Err(GraphError::dtype(
            op,
            &dtypes,
            "operands must share a dtype",
        ));
    }
    Ok(())
}

fn check_begin(op: &'static str, srcs: &[Tensor], at: usize) -> Result<(), GraphError> {
    let rank = srcs[0].rank();
    if srcs[at].dtype() != DType::I32 || srcs[at].shape() != [rank] {
        return Err(GraphError::shape(
            op,
            &[srcs[0].shape(), srcs[at].shape()],
            format!("begin must be an i32 vector of length {rank}"),
        ));
    }
    Ok(())
}
