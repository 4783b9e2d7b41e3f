//! `AffineGrid`, and `GridSample`: the input sampled at the normalized points of a run-time grid, for 1 to 3
//! spatial axes, nearest, linear and cubic (Keys, a = −0.75) modes and zeros, border and
//! reflection padding, as ONNX's reference defines them. Each output point reads 1, 2 or 4 taps
//! per axis; every tap combination is one row gather of the input (points × channels) weighted
//! by the product of the per-axis weights.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::Node;
use crate::value::{Const, Value};
use aneforge::graph::{scalar, CompareOp};
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[("GridSample", grid_sample), ("AffineGrid", affine_grid)];

/// `AffineGrid(theta [N, k, k+1], size)`: the normalized coordinates of every output point
/// (`[N, *spatial, k]`, innermost axis first) as `theta · (x, y[, z], 1)` over the base grid
/// of pixel centres (or corners with `align_corners`).
fn affine_grid(n: &Node) -> OpResult<Vec<Value>> {
    let theta = n.tensor(0)?;
    let size = crate::node::to_usize(&n.konst(1)?.to_i64s()?, "size")?;
    let k = size.len().saturating_sub(2);
    if !(2..=3).contains(&k) || theta.shape() != [size[0], k, k + 1] {
        return invalid(format!(
            "theta of shape {:?} for size {size:?} ([N, 2, 3] with 4 sizes or [N, 3, 4] with 5)",
            theta.shape()
        ));
    }
    let align = n.attr_i("align_corners", 0) != 0;
    let spatial = &size[2..];
    let points: usize = spatial.iter().product();
    let coordinate = |i: usize, len: usize| -> f32 {
        if align {
            if len == 1 {
                0.0
            } else {
                -1.0 + 2.0 * i as f32 / (len - 1) as f32
            }
        } else {
            (2 * i + 1) as f32 / len as f32 - 1.0
        }
    };
    let st = crate::fold::strides(spatial);
    let mut base = Vec::with_capacity(points * (k + 1));
    for p in 0..points {
        // innermost spatial axis first: x, y, z
        for d in (0..k).rev() {
            base.push(coordinate(p / st[d] % spatial[d], spatial[d]));
        }
        base.push(1.0);
    }
    let base = Const::new(vec![1, points, k + 1], crate::value::Data::F32(base))?.to_tensor()?;
    let grid = base.matmul(&theta.transpose(&[0, 2, 1])?)?;
    let mut shape = vec![size[0] as isize];
    shape.extend(spatial.iter().map(|&s| s as isize));
    shape.push(k as isize);
    tensor(grid.reshape(&shape)?)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// One tap along one axis: the input index to read (in range), its weight, and for zeros
/// padding whether the unclamped index was inside (1) or not (0).
struct Tap {
    index: Tensor,
    weight: Tensor,
    inside: Option<Tensor>,
}

fn grid_sample(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let grid = n.tensor(1)?;
    if x.dtype() != DType::F32 || grid.dtype() != DType::F32 {
        return unsupported("non-float input or grid");
    }
    let k = x.rank().saturating_sub(2);
    if !(1..=3).contains(&k) {
        return unsupported(format!("{k} spatial axes (1 to 3 are supported)"));
    }
    let (batch, channels) = (x.shape()[0], x.shape()[1]);
    let spatial = x.shape()[2..].to_vec();
    let out_spatial = grid.shape()[1..grid.rank() - 1].to_vec();
    if grid.rank() != k + 2 || grid.shape()[0] != batch || grid.shape()[k + 1] != k {
        return invalid(format!(
            "grid shape {:?} does not fit input shape {:?}",
            grid.shape(),
            x.shape()
        ));
    }
    let mode = match n.attr_s("mode", "linear").as_str() {
        "linear" | "bilinear" => 2,
        "nearest" => 1,
        "cubic" | "bicubic" => 4,
        other => return invalid(format!("mode {other:?}")),
    };
    let padding = match n.attr_s("padding_mode", "zeros").as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => return invalid(format!("padding_mode {other:?}")),
    };
    let align = n.attr_i("align_corners", 0) != 0;
    let points: usize = out_spatial.iter().product();
    let size: usize = spatial.iter().product();
    if batch * size > 1 << 24 {
        return unsupported(format!(
            "{} input elements per channel (row indices are computed exactly on f32 up to 2^24)",
            batch * size
        ));
    }
    let grid = grid.reshape(&[batch as isize, points as isize, k as isize])?;
    // per spatial axis, its taps; grid's last axis lists coordinates innermost axis first
    let mut axes_taps: Vec<Vec<Tap>> = Vec::new();
    for (d, &len) in spatial.iter().enumerate() {
        let pick = Const::ints(vec![1], vec![(k - 1 - d) as i64])?.to_tensor()?;
        let g = grid
            .gather(&pick, 2)?
            .reshape(&[batch as isize, points as isize])?;
        axes_taps.push(axis_taps(&g, len, mode, padding, align)?);
    }
    // rows of the input: [batch · size, channels]
    let rows = x
        .reshape(&[batch as isize, channels as isize, size as isize])?
        .transpose(&[0, 2, 1])?
        .reshape(&[(batch * size) as isize, channels as isize])?;
    let offsets: Vec<f32> = (0..batch).map(|b| (b * size) as f32).collect();
    let offsets = Const::new(vec![batch, 1], crate::value::Data::F32(offsets))?.to_tensor()?;
    let strides = crate::fold::strides(&spatial);
    let combos = mode.pow(k as u32);
    let mut y: Option<Tensor> = None;
    for combo in 0..combos {
        let mut index = offsets.clone();
        let mut weight: Option<Tensor> = None;
        let mut c = combo;
        for (d, taps) in axes_taps.iter().enumerate() {
            let tap = &taps[c % mode];
            c /= mode;
            index = index.add(&tap.index.mul_scalar(strides[d] as f32)?)?;
            let mut w = tap.weight.clone();
            if let Some(inside) = &tap.inside {
                w = w.mul(inside)?;
            }
            weight = Some(match weight {
                Some(acc) => acc.mul(&w)?,
                None => w,
            });
        }
        let Some(weight) = weight else {
            return invalid("no spatial axis");
        };
        let index = index
            .reshape(&[(batch * points) as isize])?
            .cast(DType::I32)?;
        let term = rows
            .gather(&index, 0)?
            .mul(&weight.reshape(&[(batch * points) as isize, 1])?)?;
        y = Some(match y {
            Some(acc) => acc.add(&term)?,
            None => term,
        });
    }
    let Some(y) = y else {
        return invalid("no taps");
    };
    let mut shape = vec![batch as isize];
    shape.extend(out_spatial.iter().map(|&s| s as isize));
    shape.push(channels as isize);
    let mut perm = vec![0, k + 1];
    perm.extend(1..=k);
    tensor(y.reshape(&shape)?.transpose(&perm)?)
}

/// The taps along one axis of length `len` for normalized coordinates `g` ([batch, points]).
fn axis_taps(
    g: &Tensor,
    len: usize,
    mode: usize,
    padding: Padding,
    align: bool,
) -> OpResult<Vec<Tap>> {
    let l = len as f32;
    let (lo, hi) = if align {
        (0.0, l - 1.0)
    } else {
        (-0.5, l - 0.5)
    };
    let mut v = if align {
        g.add_scalar(1.0)?.mul_scalar((l - 1.0) / 2.0)?
    } else {
        g.add_scalar(1.0)?
            .mul_scalar(l)?
            .sub_scalar(1.0)?
            .mul_scalar(0.5)?
    };
    if mode == 1 {
        v = v.round()?;
    }
    let outside = v.compare(CompareOp::NotEqual, &v.clip(lo, hi)?)?;
    v = match padding {
        Padding::Zeros => v,
        Padding::Border => outside.select(&v.clip(0.0, l - 1.0)?, &v)?,
        Padding::Reflection => outside.select(&reflect(&v, lo, hi)?, &v)?,
    };
    let base = if mode == 1 { trunc(&v)? } else { v.floor()? };
    let t = v.sub(&base)?;
    let (first, weights): (i32, Vec<Tensor>) = match mode {
        1 => (0, vec![scalar(1.0)]),
        2 => (0, vec![t.neg()?.add_scalar(1.0)?, t.clone()]),
        _ => (-1, cubic_weights(&t)?),
    };
    let mut taps = Vec::new();
    for (j, weight) in weights.into_iter().enumerate() {
        let i = base.add_scalar((first + j as i32) as f32)?;
        let (index, inside) = match padding {
            Padding::Zeros => {
                let clamped = i.clip(0.0, l - 1.0)?;
                let inside = i.compare(CompareOp::Equal, &clamped)?.cast(DType::F32)?;
                (clamped, Some(inside))
            }
            Padding::Border => (i.clip(0.0, l - 1.0)?, None),
            Padding::Reflection => {
                let r = trunc(&reflect(&i, lo, hi)?)?;
                (r.clip(0.0, l - 1.0)?, None)
            }
        };
        taps.push(Tap {
            index,
            weight,
            inside,
        });
    }
    Ok(taps)
}

/// Toward zero.
fn trunc(v: &Tensor) -> OpResult<Tensor> {
    let negative = v.compare_scalar(CompareOp::Less, 0.0)?;
    Ok(negative.select(&v.ceil()?, &v.floor()?)?)
}

/// `v` reflected at the nearer border until it lies in `[lo, hi]` (values inside unchanged).
fn reflect(v: &Tensor, lo: f32, hi: f32) -> OpResult<Tensor> {
    let range = hi - lo;
    if range <= 0.0 {
        return Ok(v.mul_scalar(0.0)?.add_scalar(lo)?);
    }
    let below = v.compare_scalar(CompareOp::Less, lo)?;
    // distance past the border it crossed, in whole ranges `m` and a remainder `r`
    let dx = below.select(
        &v.neg()?.add_scalar(lo)?,
        &v.sub_scalar(hi)?.maximum_scalar(0.0)?,
    )?;
    let m = dx.div_scalar(range)?.floor()?;
    let r = dx.sub(&m.mul_scalar(range)?)?;
    let even = m
        .sub(&m.mul_scalar(0.5)?.floor()?.mul_scalar(2.0)?)?
        .compare_scalar(CompareOp::Equal, 0.0)?;
    let from_lo = r.add_scalar(lo)?;
    let from_hi = r.neg()?.add_scalar(hi)?;
    let low_side = even.select(&from_lo, &from_hi)?;
    let high_side = even.select(&from_hi, &from_lo)?;
    let reflected = below.select(&low_side, &high_side)?;
    let outside = v.compare(CompareOp::NotEqual, &v.clip(lo, hi)?)?;
    Ok(outside.select(&reflected, v)?)
}

/// Keys' cubic convolution weights (a = −0.75) of the taps at −1, 0, 1, 2 for offset `t`.
fn cubic_weights(t: &Tensor) -> OpResult<Vec<Tensor>> {
    const A: f32 = -0.75;
    // |s| ≤ 1: (a+2)|s|³ − (a+3)|s|² + 1;  1 < |s| < 2: a|s|³ − 5a|s|² + 8a|s| − 4a
    let near = |s: &Tensor| -> OpResult<Tensor> {
        Ok(s.mul_scalar(A + 2.0)?
            .sub_scalar(A + 3.0)?
            .mul(s)?
            .mul(s)?
            .add_scalar(1.0)?)
    };
    let far = |s: &Tensor| -> OpResult<Tensor> {
        Ok(s.mul_scalar(A)?
            .sub_scalar(5.0 * A)?
            .mul(s)?
            .add_scalar(8.0 * A)?
            .mul(s)?
            .sub_scalar(4.0 * A)?)
    };
    let one_minus = t.neg()?.add_scalar(1.0)?;
    Ok(vec![
        far(&t.add_scalar(1.0)?)?,
        near(t)?,
        near(&one_minus)?,
        far(&one_minus.add_scalar(1.0)?)?,
    ])
}
