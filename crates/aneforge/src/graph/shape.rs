//! Shape and dtype rules: one per [`Op`] variant, checked when a node is built.

use super::op::{ConvAttrs, Op, PoolAttrs};
use super::{DType, GraphError, Tensor, MAX_RANK};

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
        Op::Unary(_) | Op::LeakyRelu { .. } | Op::Elu { .. } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            Ok(same(&srcs[0]))
        }
        Op::Clip { min, max } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            if min.is_nan() || max.is_nan() || min > max {
                return Err(GraphError::attribute(
                    name,
                    format!("bounds [{min}, {max}] are not an interval"),
                ));
            }
            Ok(same(&srcs[0]))
        }
        Op::Binary(b) => {
            arity(name, srcs, 2)?;
            let dtypes = [srcs[0].dtype(), srcs[1].dtype()];
            let float_op = matches!(b, super::BinaryOp::Div | super::BinaryOp::Pow);
            if dtypes[0] != dtypes[1]
                || dtypes[0] == DType::Bool
                || (float_op && dtypes[0] != DType::F32)
            {
                let expected = if float_op { "f32" } else { "f32 or i32" };
                return Err(GraphError::dtype(
                    name,
                    &dtypes,
                    format!("operands must both be {expected}"),
                ));
            }
            Ok((
                broadcast(name, srcs[0].shape(), srcs[1].shape())?,
                dtypes[0],
            ))
        }
        Op::Compare(_) => {
            arity(name, srcs, 2)?;
            let dtypes = [srcs[0].dtype(), srcs[1].dtype()];
            if dtypes[0] != dtypes[1] || dtypes[0] == DType::Bool {
                return Err(GraphError::dtype(
                    name,
                    &dtypes,
                    "operands must both be f32 or both i32",
                ));
            }
            Ok((
                broadcast(name, srcs[0].shape(), srcs[1].shape())?,
                DType::Bool,
            ))
        }
        Op::Select => {
            arity(name, srcs, 3)?;
            let dtypes = [srcs[0].dtype(), srcs[1].dtype(), srcs[2].dtype()];
            if dtypes[0] != DType::Bool || dtypes[1] != dtypes[2] {
                return Err(GraphError::dtype(
                    name,
                    &dtypes,
                    "expected a bool condition and two values of one dtype",
                ));
            }
            let ab = broadcast(name, srcs[1].shape(), srcs[2].shape())?;
            let shape = broadcast(name, srcs[0].shape(), &ab).map_err(|_| {
                GraphError::shape(
                    name,
                    &[srcs[0].shape(), srcs[1].shape(), srcs[2].shape()],
                    "shapes do not broadcast",
                )
            })?;
            Ok((shape, dtypes[1]))
        }
        Op::MatMul {
            transpose_a,
            transpose_b,
        } => {
            arity(name, srcs, 2)?;
            float_only(name, srcs)?;
            let (a, b) = (srcs[0].shape(), srcs[1].shape());
            if a.len() < 2 || b.len() < 2 {
                return Err(GraphError::shape(
                    name,
                    &[a, b],
                    "operands need rank 2 or more",
                ));
            }
            let (m, ka) = last_two(a, *transpose_a);
            let (kb, n) = last_two(b, *transpose_b);
            if ka != kb {
                return Err(GraphError::shape(
                    name,
                    &[a, b],
                    format!("contraction sizes differ: {ka} vs {kb}"),
                ));
            }
            let mut shape = broadcast(name, &a[..a.len() - 2], &b[..b.len() - 2])?;
            shape.extend([m, n]);
            Ok((shape, DType::F32))
        }
        Op::Linear { has_bias } => {
            arity(name, srcs, 2 + usize::from(*has_bias))?;
            float_only(name, srcs)?;
            let (x, w) = (srcs[0].shape(), srcs[1].shape());
            if x.is_empty() || w.len() != 2 || x[x.len() - 1] != w[1] {
                return Err(GraphError::shape(
                    name,
                    &[x, w],
                    "expected x[..., in] and weight[out, in]",
                ));
            }
            if *has_bias && srcs[2].shape() != [w[0]] {
                return Err(GraphError::shape(
                    name,
                    &[x, w, srcs[2].shape()],
                    format!("bias must have shape [{}]", w[0]),
                ));
            }
            let mut shape = x.to_vec();
            *shape.last_mut().expect("rank checked above") = w[0];
            Ok((shape, DType::F32))
        }
        Op::Conv { attrs, has_bias } => {
            arity(name, srcs, 2 + usize::from(*has_bias))?;
            float_only(name, srcs)?;
            conv_shape(name, srcs, attrs, *has_bias)
        }
        Op::ConvTranspose {
            attrs,
            output_padding,
            has_bias,
        } => {
            arity(name, srcs, 2 + usize::from(*has_bias))?;
            float_only(name, srcs)?;
            conv_transpose_shape(name, srcs, attrs, output_padding, *has_bias)
        }
        Op::Pool(attrs) => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            pool_shape(name, srcs[0].shape(), attrs)
        }
        Op::Upsample {
            scale_h, scale_w, ..
        } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            let x = srcs[0].shape();
            if x.len() != 4 {
                return Err(GraphError::shape(name, &[x], "expected [N, C, H, W]"));
            }
            if *scale_h == 0 || *scale_w == 0 {
                return Err(GraphError::attribute(name, "scale factors must be >= 1"));
            }
            let (h, w) = (mul(name, x[2], *scale_h, x)?, mul(name, x[3], *scale_w, x)?);
            Ok((vec![x[0], x[1], h, w], DType::F32))
        }
        Op::Reduce { axes, keepdims, .. } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            let x = srcs[0].shape();
            check_axes(name, x, axes)?;
            if axes.is_empty() {
                return Err(GraphError::attribute(name, "needs at least one axis"));
            }
            Ok((reduced(x, axes, *keepdims), DType::F32))
        }
        Op::ArgMax { axis, keepdims } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            let x = srcs[0].shape();
            check_axes(name, x, &[*axis])?;
            Ok((reduced(x, &[*axis], *keepdims), DType::I32))
        }
        Op::Softmax { axis } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            check_axes(name, srcs[0].shape(), &[*axis])?;
            Ok(same(&srcs[0]))
        }
        Op::LayerNorm {
            axes,
            eps,
            has_gamma,
            has_beta,
        } => {
            arity(
                name,
                srcs,
                1 + usize::from(*has_gamma) + usize::from(*has_beta),
            )?;
            float_only(name, srcs)?;
            let x = srcs[0].shape();
            check_axes(name, x, axes)?;
            if axes.is_empty() {
                return Err(GraphError::attribute(name, "needs at least one axis"));
            }
            check_eps(name, *eps)?;
            let normalized: Vec<usize> = axes.iter().map(|&a| x[a]).collect();
            for p in &srcs[1..] {
                if p.shape() != normalized.as_slice() {
                    return Err(GraphError::shape(
                        name,
                        &[x, p.shape()],
                        format!("gamma and beta must have shape {normalized:?}"),
                    ));
                }
            }
            Ok(same(&srcs[0]))
        }
        Op::BatchNorm {
            eps,
            has_gamma,
            has_beta,
        } => {
            arity(
                name,
                srcs,
                3 + usize::from(*has_gamma) + usize::from(*has_beta),
            )?;
            float_only(name, srcs)?;
            check_eps(name, *eps)?;
            let x = srcs[0].shape();
            if !(3..=5).contains(&x.len()) {
                return Err(GraphError::shape(
                    name,
                    &[x],
                    "expected [N, C, *spatial] of rank 3 to 5",
                ));
            }
            for p in &srcs[1..] {
                if p.shape() != [x[1]] {
                    return Err(GraphError::shape(
                        name,
                        &[x, p.shape()],
                        format!("mean, variance, gamma and beta must have shape [{}]", x[1]),
                    ));
                }
            }
            Ok(same(&srcs[0]))
        }
        Op::Reshape { shape } => {
            arity(name, srcs, 1)?;
            let x = srcs[0].shape();
            let n = super::host::checked_elements(name, shape)?;
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
                    super::PadMode::Constant => usize::MAX,
                    super::PadMode::Reflect => d - 1,
                    super::PadMode::Replicate => d,
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
        Op::Gather { axis } => {
            arity(name, srcs, 2)?;
            let (x, idx) = (srcs[0].shape(), srcs[1].shape());
            if srcs[1].dtype() != DType::I32 {
                return Err(GraphError::dtype(
                    name,
                    &[srcs[0].dtype(), srcs[1].dtype()],
                    "indices must be i32",
                ));
            }
            check_axes(name, x, &[*axis])?;
            let mut out = x[..*axis].to_vec();
            out.extend_from_slice(idx);
            out.extend_from_slice(&x[axis + 1..]);
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
        Op::Cumsum { axis, .. } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            check_axes(name, srcs[0].shape(), &[*axis])?;
            Ok(same(&srcs[0]))
        }
        Op::Cast { dtype } => {
            arity(name, srcs, 1)?;
            Ok((srcs[0].shape().to_vec(), *dtype))
        }
        Op::Sdpa {
            scale,
            causal,
            has_mask,
        } => {
            arity(name, srcs, 3 + usize::from(*has_mask))?;
            float_only(name, &srcs[..3])?;
            sdpa_shape(name, srcs, *scale, *causal, *has_mask)
        }
        Op::StopGradient => {
            arity(name, srcs, 1)?;
            Ok(same(&srcs[0]))
        }
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

fn same(x: &Tensor) -> (Vec<usize>, DType) {
    (x.shape().to_vec(), x.dtype())
}

fn arity(op: &'static str, srcs: &[Tensor], n: usize) -> Result<(), GraphError> {
    if srcs.len() != n {
        return Err(GraphError::attribute(
            op,
            format!("expected {n} operands, got {}", srcs.len()),
        ));
    }
    Ok(())
}

fn float_only(op: &'static str, srcs: &[Tensor]) -> Result<(), GraphError> {
    if srcs.iter().any(|s| s.dtype() != DType::F32) {
        let dtypes: Vec<DType> = srcs.iter().map(|s| s.dtype()).collect();
        return Err(GraphError::dtype(op, &dtypes, "operands must be f32"));
    }
    Ok(())
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

fn check_axes(op: &'static str, x: &[usize], axes: &[usize]) -> Result<(), GraphError> {
    if axes.iter().any(|&a| a >= x.len()) || axes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(GraphError::shape(
            op,
            &[x],
            format!("axes {axes:?} must be sorted, unique and below the rank"),
        ));
    }
    Ok(())
}

fn check_eps(op: &'static str, eps: f32) -> Result<(), GraphError> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(GraphError::attribute(
            op,
            format!("epsilon {eps} must be finite and non-negative"),
        ));
    }
    Ok(())
}

fn mul(op: &'static str, a: usize, b: usize, x: &[usize]) -> Result<usize, GraphError> {
    a.checked_mul(b)
        .ok_or_else(|| GraphError::shape(op, &[x], "size overflows"))
}

fn add3(a: usize, b: usize, c: usize) -> Option<usize> {
    a.checked_add(b)?.checked_add(c)
}

fn ck(op: &'static str, shapes: &[&[usize]], v: Option<usize>) -> Result<usize, GraphError> {
    v.ok_or_else(|| GraphError::shape(op, shapes, "size arithmetic overflows"))
}

fn last_two(s: &[usize], transpose: bool) -> (usize, usize) {
    let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
    if transpose {
        (c, r)
    } else {
        (r, c)
    }
}

fn reduced(x: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    x.iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

fn check_spatial(
    op: &'static str,
    x: &[usize],
    attrs_len: &[(&str, usize)],
) -> Result<usize, GraphError> {
    if !(3..=4).contains(&x.len()) {
        return Err(GraphError::shape(
            op,
            &[x],
            "expected [N, C, L] or [N, C, H, W]",
        ));
    }
    let s = x.len() - 2;
    for (what, n) in attrs_len {
        if *n != s {
            return Err(GraphError::attribute(
                op,
                format!("{what} has {n} entries for {s} spatial axes"),
            ));
        }
    }
    Ok(s)
}

fn conv_shape(
    op: &'static str,
    srcs: &[Tensor],
    a: &ConvAttrs,
    has_bias: bool,
) -> Result<(Vec<usize>, DType), GraphError> {
    let (x, w) = (srcs[0].shape(), srcs[1].shape());
    let s = check_spatial(
        op,
        x,
        &[
            ("strides", a.strides.len()),
            ("pads", a.pads.len()),
            ("dilations", a.dilations.len()),
        ],
    )?;
    check_conv_attrs(op, a)?;
    let g = a.groups;
    if w.len() != x.len() || w[1].checked_mul(g) != Some(x[1]) || !w[0].is_multiple_of(g) {
        return Err(GraphError::shape(
            op,
            &[x, w],
            format!("expected weight [O, C/groups, *kernel] with groups {g} dividing C and O"),
        ));
    }
    if has_bias && srcs[2].shape() != [w[0]] {
        return Err(GraphError::shape(
            op,
            &[x, w, srcs[2].shape()],
            format!("bias must have shape [{}]", w[0]),
        ));
    }
    let mut out = vec![x[0], w[0]];
    for i in 0..s {
        let padded = ck(op, &[x, w], add3(x[2 + i], a.pads[i].0, a.pads[i].1))?;
        let span = ck(op, &[x, w], a.dilations[i].checked_mul(w[2 + i] - 1))? + 1;
        if span > padded {
            return Err(GraphError::shape(
                op,
                &[x, w],
                format!("spatial axis {i}: dilated kernel {span} exceeds padded input {padded}"),
            ));
        }
        out.push((padded - span) / a.strides[i] + 1);
    }
    Ok((out, DType::F32))
}

fn check_conv_attrs(op: &'static str, a: &ConvAttrs) -> Result<(), GraphError> {
    if a.strides.contains(&0) || a.dilations.contains(&0) || a.groups == 0 {
        return Err(GraphError::attribute(
            op,
            "strides, dilations and groups must be >= 1",
        ));
    }
    Ok(())
}

fn conv_transpose_shape(
    op: &'static str,
    srcs: &[Tensor],
    a: &ConvAttrs,
    output_padding: &[usize],
    has_bias: bool,
) -> Result<(Vec<usize>, DType), GraphError> {
    let (x, w) = (srcs[0].shape(), srcs[1].shape());
    let s = check_spatial(
        op,
        x,
        &[
            ("strides", a.strides.len()),
            ("pads", a.pads.len()),
            ("dilations", a.dilations.len()),
            ("output_padding", output_padding.len()),
        ],
    )?;
    check_conv_attrs(op, a)?;
    let g = a.groups;
    if w.len() != x.len() || w[0] != x[1] || x[1] % g != 0 {
        return Err(GraphError::shape(
            op,
            &[x, w],
            format!("expected weight [C, O/groups, *kernel] with groups {g} dividing C"),
        ));
    }
    let out_channels = ck(op, &[x, w], w[1].checked_mul(g))?;
    if has_bias && srcs[2].shape() != [out_channels] {
        return Err(GraphError::shape(
            op,
            &[x, w, srcs[2].shape()],
            format!("bias must have shape [{out_channels}]"),
        ));
    }
    let mut out = vec![x[0], out_channels];
    for i in 0..s {
        let (pb, pa) = a.pads[i];
        let op_i = output_padding[i];
        if op_i >= a.strides[i].max(a.dilations[i]) || op_i > pa {
            return Err(GraphError::attribute(
                op,
                format!(
                    "spatial axis {i}: output padding {op_i} must be below the stride or dilation \
                     and at most the trailing padding {pa}"
                ),
            ));
        }
        let full = (x[2 + i] - 1)
            .checked_mul(a.strides[i])
            .zip(a.dilations[i].checked_mul(w[2 + i] - 1))
            .and_then(|(p, q)| add3(p, q, 1 + op_i));
        let full = ck(op, &[x, w], full)?;
        if pb + pa >= full {
            return Err(GraphError::shape(
                op,
                &[x, w],
                format!("spatial axis {i}: padding ({pb}, {pa}) leaves no output"),
            ));
        }
        out.push(full - pb - pa);
    }
    Ok((out, DType::F32))
}

fn pool_shape(
    op: &'static str,
    x: &[usize],
    a: &PoolAttrs,
) -> Result<(Vec<usize>, DType), GraphError> {
    let s = check_spatial(
        op,
        x,
        &[
            ("kernel", a.kernel.len()),
            ("strides", a.strides.len()),
            ("pads", a.pads.len()),
        ],
    )?;
    if a.kernel.contains(&0) || a.strides.contains(&0) {
        return Err(GraphError::attribute(op, "kernel and strides must be >= 1"));
    }
    let mut out = vec![x[0], x[1]];
    for i in 0..s {
        let (pb, pa) = a.pads[i];
        let (k, st) = (a.kernel[i], a.strides[i]);
        if pb > k / 2 || pa > k / 2 {
            return Err(GraphError::attribute(
                op,
                format!("spatial axis {i}: padding ({pb}, {pa}) exceeds half the kernel {k}"),
            ));
        }
        if a.ceil_mode && (pb != pa || st > k) {
            return Err(GraphError::attribute(
                op,
                "ceil mode needs symmetric padding and a stride no larger than the kernel",
            ));
        }
        let padded = ck(op, &[x], add3(x[2 + i], pb, pa))?;
        if k > padded {
            return Err(GraphError::shape(
                op,
                &[x],
                format!("spatial axis {i}: kernel {k} exceeds padded input {padded}"),
            ));
        }
        let mut o = if a.ceil_mode {
            (padded - k).div_ceil(st) + 1
        } else {
            (padded - k) / st + 1
        };
        if a.ceil_mode && (o - 1) * st >= x[2 + i] + pb {
            o -= 1;
        }
        out.push(o);
    }
    Ok((out, DType::F32))
}

fn sdpa_shape(
    op: &'static str,
    srcs: &[Tensor],
    scale: Option<f32>,
    causal: bool,
    has_mask: bool,
) -> Result<(Vec<usize>, DType), GraphError> {
    let (q, k, v) = (srcs[0].shape(), srcs[1].shape(), srcs[2].shape());
    let r = q.len();
    let bad = |m: &str| GraphError::shape(op, &[q, k, v], m.to_string());
    if r < 3 || k.len() != r || v.len() != r {
        return Err(bad("q, k and v need one rank, at least 3: [*B, L, E]"));
    }
    if q[..r - 2] != k[..r - 2] || q[..r - 2] != v[..r - 2] {
        return Err(bad("q, k and v must share the batch axes"));
    }
    let (l, e, s) = (q[r - 2], q[r - 1], k[r - 2]);
    if k[r - 1] != e || v[r - 2] != s {
        return Err(bad("expected q[*B, L, E], k[*B, S, E], v[*B, S, Ev]"));
    }
    if causal && l > s {
        return Err(bad("causal attention needs L <= S"));
    }
    if let Some(sc) = scale {
        if !sc.is_finite() {
            return Err(GraphError::attribute(op, "scale must be finite"));
        }
    }
    let mut out = q.to_vec();
    out[r - 1] = v[r - 1];
    if has_mask {
        let m = &srcs[3];
        if !matches!(m.dtype(), DType::F32 | DType::Bool) {
            return Err(GraphError::dtype(
                op,
                &[m.dtype()],
                "mask must be f32 or bool",
            ));
        }
        let mut scores = q[..r - 1].to_vec();
        scores.push(s);
        let b = broadcast(op, &scores, m.shape())?;
        if b != scores {
            return Err(GraphError::shape(
                op,
                &[q, k, m.shape()],
                format!("mask must broadcast to the score shape {scores:?}"),
            ));
        }
    }
    debug_assert!(out.len() <= MAX_RANK);
    Ok((out, DType::F32))
}
