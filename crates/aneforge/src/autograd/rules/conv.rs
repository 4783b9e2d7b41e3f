//! Convolution, transposed convolution, pooling and resizing.
//!
//! A convolution's input gradient is the transposed convolution of `g` with the same weight; its
//! weight gradient is itself a convolution — of the input (batch and channel axes exchanged) with
//! `g` as the kernel, strides and dilations exchanged — so both run on the engine's conv kernels.
//! Pool gradients are depthwise transposed convolutions: average pooling's with an all-ones kernel
//! over `g / window size`; max pooling's with one one-hot kernel per window offset over `g` masked
//! to the first maximum of each window (PyTorch's choice on ties).

use super::Grads;
use crate::autograd::shape_isize;
use crate::autograd::util::zeros;
use crate::graph::{
    concat, constant, ConvAttrs, DType, GraphError, HostArray, Op, PadMode, PoolAttrs, PoolKind,
    Tensor, UpsampleMode,
};

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

/// Pool attributes as 2-D (a 1-D pool is a 2-D pool over height 1).
struct Pool2 {
    k: [usize; 2],
    s: [usize; 2],
    pads: [(usize, usize); 2],
}

fn lift(a: &PoolAttrs) -> Pool2 {
    if a.kernel.len() == 1 {
        Pool2 {
            k: [1, a.kernel[0]],
            s: [1, a.strides[0]],
            pads: [(0, 0), a.pads[0]],
        }
    } else {
        Pool2 {
            k: [a.kernel[0], a.kernel[1]],
            s: [a.strides[0], a.strides[1]],
            pads: [a.pads[0], a.pads[1]],
        }
    }
}

fn as_4d(t: &Tensor) -> Result<Tensor, GraphError> {
    let s = t.shape();
    if s.len() == 3 {
        t.reshape(&[s[0] as isize, s[1] as isize, 1, s[2] as isize])
    } else {
        Ok(t.clone())
    }
}

pub(super) fn pool(
    x: &Tensor,
    y: &Tensor,
    attrs: &PoolAttrs,
    g: &Tensor,
) -> Result<Tensor, GraphError> {
    let p = lift(attrs);
    let (x4, y4, g4) = (as_4d(x)?, as_4d(y)?, as_4d(g)?);
    let dx = match attrs.kind {
        PoolKind::Max => max_pool(&x4, &y4, &p, &g4)?,
        PoolKind::Avg { count_pad } => avg_pool(&x4, &p, count_pad, &g4)?,
    };
    dx.reshape(&shape_isize(x.shape()))
}

fn depthwise_attrs(p: &Pool2, channels: usize) -> ConvAttrs {
    ConvAttrs {
        strides: p.s.to_vec(),
        pads: p.pads.to_vec(),
        dilations: vec![1, 1],
        groups: channels,
    }
}

fn max_pool(x: &Tensor, y: &Tensor, p: &Pool2, g: &Tensor) -> Result<Tensor, GraphError> {
    let xs = x.shape();
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (oh, ow) = (y.shape()[2], y.shape()[3]);
    let need = [(oh - 1) * p.s[0] + p.k[0], (ow - 1) * p.s[1] + p.k[1]];
    let ends = [
        need[0].saturating_sub(p.pads[0].0 + h),
        need[1].saturating_sub(p.pads[1].0 + w),
    ];
    let padded = x.pad(
        &[
            (0, 0),
            (0, 0),
            (p.pads[0].0, ends[0]),
            (p.pads[1].0, ends[1]),
        ],
        PadMode::Constant,
        f32::MIN,
    )?;
    let taps = p.k[0] * p.k[1];
    let mut taken: Option<Tensor> = None;
    let mut parts = Vec::with_capacity(taps);
    for a in 0..p.k[0] {
        for b in 0..p.k[1] {
            let window = padded.slice(
                &[0, 0, a, b],
                &[n, c, a + (oh - 1) * p.s[0] + 1, b + (ow - 1) * p.s[1] + 1],
                &[1, 1, p.s[0], p.s[1]],
            )?;
            let hit = window.eq(y)?.cast(DType::F32)?;
            let first = match &taken {
                None => hit.clone(),
                Some(t) => hit.mul(&t.neg()?.add_scalar(1.0)?)?,
            };
            taken = Some(match taken {
                None => first.clone(),
                Some(t) => t.add(&first)?,
            });
            parts.push(
                g.mul(&first)?
                    .reshape(&[n as isize, c as isize, 1, (oh * ow) as isize])?,
            );
        }
    }
    let stacked =
        concat(&parts, 2)?.reshape(&[n as isize, (c * taps) as isize, oh as isize, ow as isize])?;
    let mut kernel = vec![0.0f32; c * taps * taps];
    for ch in 0..c {
        for t in 0..taps {
            kernel[(ch * taps + t) * taps + t] = 1.0;
        }
    }
    let weight = constant(HostArray::from_f32(&[c * taps, 1, p.k[0], p.k[1]], kernel)?);
    conv_input_grad(&stacked, &weight, &depthwise_attrs(p, c), xs)
}

/// The divisor the engine uses at each output position (PyTorch semantics).
fn avg_divisors(h: usize, w: usize, oh: usize, ow: usize, p: &Pool2, count_pad: bool) -> Vec<f32> {
    let span = |o: usize, axis: usize, len: usize| -> usize {
        let start = (o * p.s[axis]) as isize - p.pads[axis].0 as isize;
        let end = start + p.k[axis] as isize;
        if count_pad {
            (end.min((len + p.pads[axis].1) as isize) - start).max(1) as usize
        } else {
            (end.min(len as isize) - start.max(0)).max(1) as usize
        }
    };
    let mut out = Vec::with_capacity(oh * ow);
    for i in 0..oh {
        for j in 0..ow {
            out.push((span(i, 0, h) * span(j, 1, w)) as f32);
        }
    }
    out
}

fn avg_pool(x: &Tensor, p: &Pool2, count_pad: bool, g: &Tensor) -> Result<Tensor, GraphError> {
    let xs = x.shape();
    let (c, h, w) = (xs[1], xs[2], xs[3]);
    let (oh, ow) = (g.shape()[2], g.shape()[3]);
    let divisors = avg_divisors(h, w, oh, ow, p, count_pad);
    let scaled = if divisors.iter().all(|&d| d == divisors[0]) {
        g.mul_scalar(1.0 / divisors[0])?
    } else {
        g.div(&constant(HostArray::from_f32(&[oh, ow], divisors)?))?
    };
    let ones = constant(HostArray::full(&[c, 1, p.k[0], p.k[1]], 1.0)?);
    conv_input_grad(&scaled, &ones, &depthwise_attrs(p, c), xs)
}

/// The `[out, in]` matrix of 1-D linear interpolation with the engine's sampling grid.
fn interpolation(n_in: usize, scale: usize, align_corners: bool) -> Vec<f32> {
    let n_out = n_in * scale;
    let mut m = vec![0.0f32; n_out * n_in];
    for o in 0..n_out {
        let src = if align_corners {
            if n_out > 1 {
                o as f64 * (n_in as f64 - 1.0) / (n_out as f64 - 1.0)
            } else {
                0.0
            }
        } else {
            (o as f64 + 0.5) / scale as f64 - 0.5
        };
        let src = src.clamp(0.0, (n_in - 1) as f64);
        let lo = src.floor() as usize;
        let hi = (lo + 1).min(n_in - 1);
        let frac = (src - lo as f64) as f32;
        m[o * n_in + lo] += 1.0 - frac;
        m[o * n_in + hi] += frac;
    }
    m
}

pub(super) fn upsample(
    x: &Tensor,
    mode: UpsampleMode,
    sh: usize,
    sw: usize,
    g: &Tensor,
) -> Result<Tensor, GraphError> {
    let xs = shape_isize(x.shape());
    let (h, w) = (x.shape()[2], x.shape()[3]);
    match mode {
        UpsampleMode::Nearest => g
            .reshape(&[xs[0] * xs[1], xs[2], sh as isize, xs[3], sw as isize])?
            .sum(&[2, 4], false)?
            .reshape(&xs),
        UpsampleMode::Bilinear { align_corners } => {
            let rows = constant(HostArray::from_f32(
                &[h * sh, h],
                interpolation(h, sh, align_corners),
            )?);
            let cols = constant(HostArray::from_f32(
                &[w * sw, w],
                interpolation(w, sw, align_corners),
            )?);
            rows.matmul_t(&g.matmul(&cols)?, true, false)
        }
    }
}
