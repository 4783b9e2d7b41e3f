//! Spatial ops over `[N, C, *S]`: convolution, transposed convolution, pooling and upsampling.

use super::{arity, float_only, mul};
use crate::graph::op::{ConvAttrs, Op, PoolAttrs};
use crate::graph::{DType, GraphError, Tensor};

pub(super) fn infer(
    op: &Op,
    name: &'static str,
    srcs: &[Tensor],
) -> Result<(Vec<usize>, DType), GraphError> {
    match op {
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
        _ => Err(GraphError::attribute(name, "not an conv op")),
    }
}

fn add3(a: usize, b: usize, c: usize) -> Option<usize> {
    a.checked_add(b)?.checked_add(c)
}

fn ck(op: &'static str, shapes: &[&[usize]], v: Option<usize>) -> Result<usize, GraphError> {
    v.ok_or_else(|| GraphError::shape(op, shapes, "size arithmetic overflows"))
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
