//! `Resize` (and the older `Upsample`): nearest, linear and cubic interpolation, separably per
//! resized axis. Each axis becomes a few gathers with constant indices (the taps) weighted by
//! constant coefficients, all computed on the host from ONNX's coordinate transformation, so
//! every mode and any scale or size is covered, antialiased downsampling included.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::{axis, Node};
use crate::value::{Const, Data, Value};
use aneforge::graph::constant;
use aneforge::{DType, HostArray, Tensor};

pub const OPS: &[(&str, Importer)] = &[("Resize", resize), ("Upsample", upsample)];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

struct Spec {
    mode: Mode,
    transform: String,
    nearest: String,
    cubic_a: f64,
    exclude_outside: bool,
    /// Linear and cubic downsampling widen their filter by 1 / scale.
    antialias: bool,
    extrapolation: f32,
    roi: Vec<f64>,
}

fn mode_of(s: &str) -> OpResult<Mode> {
    match s {
        "nearest" => Ok(Mode::Nearest),
        "linear" | "bilinear" => Ok(Mode::Linear),
        "cubic" => Ok(Mode::Cubic),
        other => invalid(format!("mode {other:?}")),
    }
}

fn upsample(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let scales: Vec<f64> = if n.opset >= 9 {
        n.konst(1)?
            .to_f32s()
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    } else {
        n.attr_floats("scales")
            .unwrap_or_default()
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    };
    let spec = Spec {
        mode: mode_of(&n.attr_s("mode", "nearest"))?,
        transform: "asymmetric".into(),
        nearest: "floor".into(),
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
        extrapolation: 0.0,
        roi: Vec::new(),
    };
    let axes: Vec<usize> = (0..x.rank()).collect();
    let sizes = out_sizes_from_scales(x.shape(), &axes, &scales)?;
    tensor(apply(&x, &spec, &axes, &scales, &sizes)?)
}

fn out_sizes_from_scales(shape: &[usize], axes: &[usize], scales: &[f64]) -> OpResult<Vec<usize>> {
    if scales.len() != axes.len() {
        return invalid(format!("{} scales for {} axes", scales.len(), axes.len()));
    }
    axes.iter()
        .zip(scales)
        .map(|(&a, &s)| {
            if s <= 0.0 {
                return invalid(format!("scale {s}"));
            }
            Ok((shape[a] as f64 * s).floor() as usize)
        })
        .collect()
}

fn resize(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let r = x.rank();
    let axes: Vec<usize> = match n.attr_ints("axes") {
        Some(list) => list.iter().map(|&a| axis(a, r)).collect::<OpResult<_>>()?,
        None => (0..r).collect(),
    };
    let (scales_at, sizes_at) = if n.opset < 11 {
        (1, usize::MAX)
    } else {
        (2, 3)
    };
    let given = |i: usize| -> OpResult<Option<Const>> {
        match n.opt(i) {
            Some(v) if !v.shape().contains(&0) => Ok(Some(n.konst(i)?.clone())),
            _ => Ok(None),
        }
    };
    let roi = if n.opset >= 11 {
        given(1)?.map(|c| c.to_f32s().iter().map(|&v| f64::from(v)).collect())
    } else {
        None
    };
    let (scales, sizes) = match (given(scales_at)?, given(sizes_at)?) {
        (Some(s), _) => {
            let scales: Vec<f64> = s.to_f32s().iter().map(|&v| f64::from(v)).collect();
            let sizes = out_sizes_from_scales(x.shape(), &axes, &scales)?;
            (scales, sizes)
        }
        (None, Some(z)) => {
            let mut sizes: Vec<usize> = z.to_i64s()?.iter().map(|&v| v.max(0) as usize).collect();
            if sizes.len() != axes.len() {
                return invalid(format!("{} sizes for {} axes", sizes.len(), axes.len()));
            }
            let mut scales: Vec<f64> = axes
                .iter()
                .zip(&sizes)
                .map(|(&a, &s)| s as f64 / x.shape()[a] as f64)
                .collect();
            let policy = n.attr_s("keep_aspect_ratio_policy", "stretch");
            if policy != "stretch" {
                let pick = if policy == "not_larger" {
                    f64::min
                } else {
                    f64::max
                };
                let scale = scales.iter().copied().reduce(pick).unwrap_or(1.0);
                scales = vec![scale; axes.len()];
                sizes = axes
                    .iter()
                    .map(|&a| (x.shape()[a] as f64 * scale).round() as usize)
                    .collect();
            }
            (scales, sizes)
        }
        (None, None) => return invalid("neither scales nor sizes"),
    };
    let spec = Spec {
        mode: mode_of(&n.attr_s("mode", "nearest"))?,
        transform: n.attr_s("coordinate_transformation_mode", "half_pixel"),
        nearest: n.attr_s("nearest_mode", "round_prefer_floor"),
        cubic_a: f64::from(n.attr_f("cubic_coeff_a", -0.75)),
        exclude_outside: n.attr_i("exclude_outside", 0) != 0,
        antialias: n.attr_i("antialias", 0) != 0,
        extrapolation: n.attr_f("extrapolation_value", 0.0),
        roi: roi.unwrap_or_default(),
    };
    tensor(apply(&x, &spec, &axes, &scales, &sizes)?)
}

/// The source coordinate of output position `i` along an axis of `lo` → `lr` elements. As in
/// ONNX's reference implementation (which its test data come from), the modes that divide by
/// the output length use the unrounded `scale · lo`.
fn source_coord(
    spec: &Spec,
    i: usize,
    scale: f64,
    lo: usize,
    lr: usize,
    roi: (f64, f64),
) -> OpResult<f64> {
    let (i, lo_f) = (i as f64, lo as f64);
    let lr_f = scale * lo_f;
    Ok(match spec.transform.as_str() {
        "half_pixel" => (i + 0.5) / scale - 0.5,
        "half_pixel_symmetric" => {
            let adjustment = lr as f64 / lr_f;
            let offset = lo_f / 2.0 * (1.0 - adjustment);
            offset + (i + 0.5) / scale - 0.5
        }
        "pytorch_half_pixel" => {
            if lr_f != 1.0 {
                (i + 0.5) / scale - 0.5
            } else {
                -0.5
            }
        }
        "align_corners" => {
            if lr_f == 1.0 {
                0.0
            } else {
                i * (lo_f - 1.0) / (lr_f - 1.0)
            }
        }
        "asymmetric" => i / scale,
        "tf_crop_and_resize" => {
            let (start, end) = roi;
            if lr_f != 1.0 {
                start * (lo_f - 1.0) + i * (end - start) * (lo_f - 1.0) / (lr_f - 1.0)
            } else {
                (end - start) * (lo_f - 1.0) / 2.0 + start * (lo_f - 1.0)
            }
        }
        other => return invalid(format!("coordinate_transformation_mode {other:?}")),
    })
}

fn nearest_index(spec: &Spec, x: f64) -> OpResult<i64> {
    Ok(match spec.nearest.as_str() {
        "round_prefer_floor" => {
            if x.fract() == 0.5 || x.fract() == -0.5 {
                x.floor()
            } else {
                x.round()
            }
        }
        "round_prefer_ceil" => {
            if x.fract() == 0.5 || x.fract() == -0.5 {
                x.ceil()
            } else {
                x.round()
            }
        }
        "floor" => x.floor(),
        "ceil" => x.ceil(),
        other => return invalid(format!("nearest_mode {other:?}")),
    } as i64)
}

/// `(source index, weight)` taps for one output position.
fn taps(spec: &Spec, x: f64, lo: usize) -> OpResult<Vec<(usize, f64)>> {
    let clamp = |i: i64| i.clamp(0, lo as i64 - 1) as usize;
    let inside = |i: i64| i >= 0 && i < lo as i64;
    Ok(match spec.mode {
        Mode::Nearest => vec![(clamp(nearest_index(spec, x)?), 1.0)],
        Mode::Linear => {
            let base = x.floor();
            let r = x - base;
            let b = base as i64;
            vec![(clamp(b), 1.0 - r), (clamp(b + 1), r)]
        }
        Mode::Cubic => {
            let a = spec.cubic_a;
            let base = x.floor();
            let r = x - base;
            let b = base as i64;
            let c = [
                ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                ((a + 2.0) * (1.0 - r) - (a + 3.0)) * (1.0 - r) * (1.0 - r) + 1.0,
                ((a * (2.0 - r) - 5.0 * a) * (2.0 - r) + 8.0 * a) * (2.0 - r) - 4.0 * a,
            ];
            let idx = [b - 1, b, b + 1, b + 2];
            if spec.exclude_outside {
                let total: f64 = (0..4).filter(|&k| inside(idx[k])).map(|k| c[k]).sum();
                (0..4)
                    .map(|k| {
                        let w = if inside(idx[k]) { c[k] / total } else { 0.0 };
                        (clamp(idx[k]), w)
                    })
                    .collect()
            } else {
                (0..4).map(|k| (clamp(idx[k]), c[k])).collect()
            }
        }
    })
}

/// Antialiased taps for downsampling by `scale` < 1, as ONNX's reference computes them: the
/// sample point `x` splits into a base index and a ratio in (0, 1] (an integer `x` counts as
/// ratio 1 past the index below it), the linear or cubic kernel is evaluated at
/// `scale · (i − ratio)` over every offset `i` it reaches, and the weights are normalised
/// (again after dropping outside taps with `exclude_outside`); taps beyond the edges read the
/// edge.
fn antialias_taps(spec: &Spec, x: f64, lo: usize, scale: f64) -> Vec<(usize, f64)> {
    let base = if x.fract() == 0.0 { x - 1.0 } else { x.floor() };
    let ratio = x - base;
    let a = spec.cubic_a;
    let (start, kernel): (i64, Box<dyn Fn(f64) -> f64>) = match spec.mode {
        Mode::Cubic => (
            (-2.0 / scale).floor() as i64 + 1,
            Box::new(move |t: f64| {
                let t = t.abs();
                if t <= 1.0 {
                    ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
                } else if t < 2.0 {
                    ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a
                } else {
                    0.0
                }
            }),
        ),
        _ => (
            (-1.0 / scale).floor() as i64 + 1,
            Box::new(|t: f64| (1.0 - t.abs()).clamp(0.0, 1.0)),
        ),
    };
    let b = base as i64;
    let mut taps: Vec<(i64, f64)> = (start..2 - start)
        .map(|i| (b + i, kernel(scale * (i as f64 - ratio))))
        .collect();
    let normalise = |taps: &mut Vec<(i64, f64)>| {
        let total: f64 = taps.iter().map(|t| t.1).sum();
        for t in taps.iter_mut() {
            t.1 /= total;
        }
    };
    normalise(&mut taps);
    if spec.exclude_outside {
        for t in taps.iter_mut() {
            if t.0 < 0 || t.0 >= lo as i64 {
                t.1 = 0.0;
            }
        }
        normalise(&mut taps);
    }
    taps.into_iter()
        .map(|(i, w)| (i.clamp(0, lo as i64 - 1) as usize, w))
        .collect()
}

fn apply(
    x: &Tensor,
    spec: &Spec,
    axes: &[usize],
    scales: &[f64],
    sizes: &[usize],
) -> OpResult<Tensor> {
    if sizes.contains(&0) {
        return unsupported("an empty output");
    }
    let dtype = x.dtype();
    let mut y = if dtype == DType::F32 || spec.mode == Mode::Nearest {
        x.clone()
    } else {
        x.cast(DType::F32)?
    };
    let r = x.rank();
    let mut inside_mask: Option<Tensor> = None;
    for (k, &a) in axes.iter().enumerate() {
        let (lo, lr, scale) = (x.shape()[a], sizes[k], scales[k]);
        let roi = if spec.roi.len() == 2 * axes.len() {
            (spec.roi[k], spec.roi[k + axes.len()])
        } else if spec.roi.len() == 2 * r {
            (spec.roi[a], spec.roi[a + r])
        } else {
            (0.0, 1.0)
        };
        let mut per_out: Vec<Vec<(usize, f64)>> = Vec::with_capacity(lr);
        let mut inside = Vec::with_capacity(lr);
        for i in 0..lr {
            let c = source_coord(spec, i, scale, lo, lr, roi)?;
            inside
                .push(spec.transform != "tf_crop_and_resize" || (c >= 0.0 && c <= lo as f64 - 1.0));
            per_out.push(
                if spec.antialias && scale < 1.0 && spec.mode != Mode::Nearest {
                    antialias_taps(spec, c, lo, scale)
                } else {
                    taps(spec, c, lo)?
                },
            );
        }
        let identity = lo == lr
            && per_out
                .iter()
                .enumerate()
                .all(|(i, t)| t.iter().all(|&(j, w)| (j == i && w == 1.0) || w == 0.0));
        if identity && inside.iter().all(|&b| b) {
            continue;
        }
        let mut axis_shape = vec![1usize; r];
        axis_shape[a] = lr;
        let n_taps = per_out[0].len();
        let mut acc: Option<Tensor> = None;
        for t in 0..n_taps {
            let idx: Vec<i64> = per_out.iter().map(|p| p[t].0 as i64).collect();
            let picked = y.gather(&Const::ints(vec![lr], idx)?.to_tensor()?, a as isize)?;
            let term = if n_taps == 1 {
                picked
            } else {
                let w: Vec<f32> = per_out.iter().map(|p| p[t].1 as f32).collect();
                picked.mul(&constant(HostArray::from_f32(&axis_shape, w)?))?
            };
            acc = Some(match acc {
                Some(s) => s.add(&term)?,
                None => term,
            });
        }
        y = acc.ok_or(crate::error::OpError::Invalid("no taps".into()))?;
        if inside.iter().any(|&b| !b) {
            let m = Const::new(axis_shape, Data::Bool(inside))?.to_tensor()?;
            inside_mask = Some(match inside_mask {
                Some(prev) => prev
                    .cast(DType::F32)?
                    .mul(&m.cast(DType::F32)?)?
                    .compare_scalar(aneforge::graph::CompareOp::NotEqual, 0.0)?,
                None => m,
            });
        }
    }
    if let Some(mask) = inside_mask {
        y = mask.select(&y, &aneforge::graph::scalar(spec.extrapolation))?;
    }
    if y.dtype() != dtype {
        y = y.round()?.cast(dtype)?;
    }
    Ok(y)
}
