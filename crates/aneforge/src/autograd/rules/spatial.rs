//! Pooling and resizing. Pool gradients are depthwise transposed convolutions: average pooling's
//! with an all-ones kernel over `g / window size`; max pooling's with one one-hot kernel per window
//! offset over `g` masked to the first maximum of each window (PyTorch's choice on ties).

use super::linalg::conv_input_grad;
use crate::autograd::shape_isize;
use crate::graph::{
    concat, constant, ConvAttrs, DType, GraphError, HostArray, PadMode, PoolAttrs, PoolKind,
    Tensor, UpsampleMode,
};

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
