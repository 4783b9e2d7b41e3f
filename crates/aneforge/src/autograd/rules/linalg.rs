//! Contractions: matmul, linear, convolution and transposed convolution.
//!
//! A convolution's input gradient is the transposed convolution of `g` with the same weight; its
//! weight gradient is itself a convolution — of the input (batch and channel axes exchanged) with
//! `g` as the kernel, strides and dilations exchanged — so both run on the engine's conv kernels.

use super::Grads;
use crate::autograd::shape_isize;
use crate::autograd::util::{sum_to, zeros};
use crate::graph::{ConvAttrs, GraphError, Op, PadMode, Tensor};

pub(super) fn matmul(
    a: &Tensor,
    b: &Tensor,
    ta: bool,
    tb: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let ga = if wants[0] {
        let d = match (ta, tb) {
            (false, false) => g.matmul_t(b, false, true)?,
            (false, true) => g.matmul_t(b, false, false)?,
            (true, false) => b.matmul_t(g, false, true)?,
            (true, true) => b.matmul_t(g, true, true)?,
        };
        Some(sum_to(&d, a.shape())?)
    } else {
        None
    };
    let gb = if wants[1] {
        let d = match (ta, tb) {
            (false, false) => a.matmul_t(g, true, false)?,
            (false, true) => g.matmul_t(a, true, false)?,
            (true, false) => a.matmul_t(g, false, false)?,
            (true, true) => g.matmul_t(a, true, true)?,
        };
        Some(sum_to(&d, b.shape())?)
    } else {
        None
    };
    Ok(vec![ga, gb])
}

/// `[x[..., in], w[out, in], b[out]?]`.
pub(super) fn linear(
    s: &[Tensor],
    has_bias: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let (x, w) = (&s[0], &s[1]);
    let (out_f, in_f) = (w.shape()[0] as isize, w.shape()[1] as isize);
    let mut grads = vec![None; s.len()];
    if wants[0] {
        let gx = if x.rank() == 1 {
            g.reshape(&[1, out_f])?.matmul(w)?.reshape(&[in_f])?
        } else {
            g.matmul(w)?
        };
        grads[0] = Some(gx);
    }
    let g2 = g.reshape(&[-1, out_f])?;
    if wants[1] {
        let x2 = x.reshape(&[-1, in_f])?;
        grads[1] = Some(g2.matmul_t(&x2, true, false)?);
    }
    if has_bias && wants[2] {
        grads[2] = Some(g2.sum(&[0], false)?);
    }
    Ok(grads)
}

fn spatial_axes(rank: usize) -> Vec<isize> {
    (2..rank as isize).collect()
}

/// `[x[N, C, *S], w[O, C/G, *K], b[O]?]`.
pub(super) fn conv(
    s: &[Tensor],
    attrs: &ConvAttrs,
    has_bias: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let (x, w) = (&s[0], &s[1]);
    let mut grads = vec![None; s.len()];
    if wants[0] {
        grads[0] = Some(conv_input_grad(g, w, attrs, x.shape())?);
    }
    if wants[1] {
        grads[1] = Some(conv_weight_grad(x, g, attrs, w.shape())?);
    }
    if has_bias && wants[2] {
        let mut axes = vec![0];
        axes.extend(spatial_axes(g.rank()));
        grads[2] = Some(g.sum(&axes, false)?);
    }
    Ok(grads)
}

/// `[x[N, C, *S], w[C, O/G, *K], b[O]?]`: the adjoint of a convolution with weight `w`, so its
/// input gradient is that convolution and its weight gradient the convolution's with the roles
/// of input and output exchanged.
pub(super) fn conv_transpose(
    s: &[Tensor],
    attrs: &ConvAttrs,
    has_bias: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let (x, w) = (&s[0], &s[1]);
    let mut grads = vec![None; s.len()];
    if wants[0] {
        let y = g.conv(w, None, attrs.clone())?;
        grads[0] = Some(crop_or_pad_to(&y, x.shape())?);
    }
    if wants[1] {
        grads[1] = Some(conv_weight_grad(g, x, attrs, w.shape())?);
    }
    if has_bias && wants[2] {
        let mut axes = vec![0];
        axes.extend(spatial_axes(g.rank()));
        grads[2] = Some(g.sum(&axes, false)?);
    }
    Ok(grads)
}

/// Crops trailing positions of `y`'s spatial axes or pads them with zeros to reach `shape`.
fn crop_or_pad_to(y: &Tensor, shape: &[usize]) -> Result<Tensor, GraphError> {
    let ys = y.shape().to_vec();
    let mut end = ys.clone();
    let mut pads = vec![(0, 0); ys.len()];
    for i in 2..ys.len() {
        end[i] = ys[i].min(shape[i]);
        pads[i].1 = shape[i] - end[i];
    }
    let cropped = y.slice(&vec![0; ys.len()], &end, &vec![1; ys.len()])?;
    if pads.iter().all(|&p| p == (0, 0)) {
        return Ok(cropped);
    }
    cropped.pad(&pads, PadMode::Constant, 0.0)
}

/// The gradient of `conv(x, w)` with respect to `x` (of shape `x_shape`) given the output
/// cotangent `g`: a transposed convolution that crops the padding, with zeros for the trailing
/// input positions no window reached.
pub(crate) fn conv_input_grad(
    g: &Tensor,
    w: &Tensor,
    attrs: &ConvAttrs,
    x_shape: &[usize],
) -> Result<Tensor, GraphError> {
    let sp = x_shape.len() - 2;
    let mut pads = Vec::with_capacity(sp);
    for i in 0..sp {
        let (before, _) = attrs.pads[i];
        let k = w.shape()[2 + i];
        let full = (g.shape()[2 + i] - 1) * attrs.strides[i] + attrs.dilations[i] * (k - 1) + 1;
        if full <= before {
            // every window lies inside the leading padding: x never reaches the output
            return zeros(x_shape);
        }
        let crop_end = full.saturating_sub(before + x_shape[2 + i]);
        pads.push((before, crop_end));
    }
    let t_attrs = ConvAttrs {
        strides: attrs.strides.clone(),
        pads,
        dilations: attrs.dilations.clone(),
        groups: attrs.groups,
    };
    let y = Tensor::from_op(
        Op::ConvTranspose {
            attrs: t_attrs,
            output_padding: vec![0; sp],
            has_bias: false,
        },
        vec![g.clone(), w.clone()],
    )?;
    crop_or_pad_to(&y, x_shape)
}

/// The gradient of `conv(x, w)` with respect to `w` (of shape `w_shape`): the convolution of
/// `x` viewed as `[C/G, G·N, *S]` with `g` viewed as the kernel `[O, N, *So]` (`G` groups),
/// strides and dilations exchanged, cropped to the kernel size.
pub(crate) fn conv_weight_grad(
    x: &Tensor,
    g: &Tensor,
    attrs: &ConvAttrs,
    w_shape: &[usize],
) -> Result<Tensor, GraphError> {
    let xs = x.shape();
    let rank = xs.len();
    let (n, c) = (xs[0] as isize, xs[1] as isize);
    let groups = attrs.groups as isize;
    let cg = c / groups;
    let spatial: Vec<isize> = xs[2..].iter().map(|&d| d as isize).collect();
    let rest: Vec<usize> = (2..rank).collect();
    let xt = if groups == 1 {
        let mut perm = vec![1, 0];
        perm.extend(&rest);
        x.transpose(&perm)?
    } else {
        let mut grouped = vec![n, groups, cg];
        grouped.extend(&spatial);
        let mut perm = vec![2, 1, 0];
        perm.extend(rest.iter().map(|&a| a + 1));
        let mut merged = vec![cg, groups * n];
        merged.extend(&spatial);
        x.reshape(&grouped)?.transpose(&perm)?.reshape(&merged)?
    };
    let mut perm = vec![1, 0];
    perm.extend(&rest);
    let gt = g.transpose(&perm)?;
    let k_attrs = ConvAttrs {
        strides: attrs.dilations.clone(),
        pads: attrs.pads.clone(),
        dilations: attrs.strides.clone(),
        groups: attrs.groups,
    };
    let full = xt.conv(&gt, None, k_attrs)?;
    let mut end = full.shape().to_vec();
    end[2..].copy_from_slice(&w_shape[2..]);
    let kernel = full.slice(&vec![0; rank], &end, &vec![1; rank])?;
    let out = kernel.transpose(&perm)?;
    debug_assert_eq!(out.shape(), w_shape);
    out.reshape(&shape_isize(w_shape))
}
