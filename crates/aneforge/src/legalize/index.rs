//! Data movement the ANE cannot index: gathers, windows at runtime positions and writes at
//! runtime positions become slices or 0/1 matrices (built on the device from the position).

use super::build::{along_axis, indicator, ramp, zero_one};
use super::Cx;
use crate::graph::{concat, GraphError, Op, Tensor};

/// Static gathers with at most this many contiguous runs become slices + concat; more runs use
/// a constant 0/1 matrix.
const MAX_RUNS: usize = 64;
/// The largest constant selection matrix (elements) a static gather may use.
const MAX_SELECTION: usize = 1 << 22;

fn constant_indices(t: &Tensor) -> Option<Vec<f32>> {
    t.constant_value()?.as_f32().map(|v| v.to_vec())
}

/// `gather(x, indices, axis)`: constant indices → slices + concat off the last axis (or a 0/1
/// matmul); data-dependent indices over at most 2048 rows → one-hot matmul; more → the host.
pub fn gather(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
    axis: usize,
) -> Result<Option<Tensor>, GraphError> {
    let (x, idx) = (&srcs[0], &srcs[1]);
    let n = x.shape()[axis];
    let out: Vec<isize> = node.shape().iter().map(|&d| d as isize).collect();
    if let Some(values) = constant_indices(idx) {
        let mut picks = Vec::with_capacity(values.len());
        for &v in &values {
            if v.fract() != 0.0 || v < 0.0 || v as usize >= n {
                cx.reject(node, format!("index {v} is outside 0..{n}"));
                return Ok(None);
            }
            picks.push(v as usize);
        }
        let runs = runs(&picks);
        let gathered = if runs.len() <= MAX_RUNS {
            cx.rewritten(
                node,
                format!("static gather → {} slice(s) + concat", runs.len()),
            );
            slices_concat(x, axis, &runs)?
        } else if picks.len() * n <= MAX_SELECTION {
            cx.rewritten(node, "static gather → constant 0/1 matmul");
            along_axis(x, &zero_one(picks.len(), n, |i, j| picks[i] == j)?, axis)?
        } else {
            cx.reject(
                node,
                format!(
                    "static gather of {} scattered rows out of {n} is too large to select on the ANE; gather on the host",
                    picks.len()
                ),
            );
            return Ok(None);
        };
        return Ok(Some(gathered.reshape(&out)?));
    }
    if n > cx.limits.max_exact_int {
        cx.reject(
            node,
            format!(
                "gather with data-dependent indices over {n} rows (> {}, beyond fp16-exact indices): gather on the host",
                cx.limits.max_exact_int
            ),
        );
        return Ok(None);
    }
    cx.rewritten(node, "row pick → one-hot matmul");
    let k = idx.len();
    let onehot = indicator(&idx.reshape(&[k as isize, 1])?.eq(&ramp(n, 2, 1)?)?)?;
    Ok(Some(along_axis(x, &onehot, axis)?.reshape(&out)?))
}

/// `linear_experts(x, w, ids)`: the ANE cannot address weights by a runtime index, so every
/// expert is computed (`x[N·K', in] @ w^T`, one projection) and each `(n, k)` picks its expert's
/// block with a one-hot matmul over the `E` experts.
pub fn linear_experts(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
    experts: usize,
) -> Result<Tensor, GraphError> {
    let (x, w, ids) = (&srcs[0], &srcs[1], &srcs[2]);
    let xs = x.shape();
    let (n, k, out) = (node.shape()[0], node.shape()[1], node.shape()[2]);
    let (n_, kx, e) = (n as isize, xs[1] as isize, experts as isize);
    cx.rewritten(node, "expert choice → every expert + one-hot matmul");
    let all = x
        .reshape(&[n_ * kx, xs[2] as isize])?
        .linear(w, None)?
        .reshape(&[n_, kx, e, out as isize])?;
    let onehot = indicator(
        &ids.reshape(&[n_, k as isize, 1])?
            .eq(&ramp(experts, 3, 2)?)?,
    )?;
    Ok(if xs[1] == 1 {
        onehot.matmul(&all.reshape(&[n_, e, out as isize])?)?
    } else {
        onehot
            .reshape(&[n_, k as isize, 1, e])?
            .matmul(&all)?
            .reshape(&[n_, k as isize, out as isize])?
    })
}

/// Maximal runs of consecutive indices: `(start, length)`.
fn runs(picks: &[usize]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &p in picks {
        match out.last_mut() {
            Some((start, len)) if *start + *len == p => *len += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

/// Slices of `axis` concatenated; when `axis` is the last one it is moved off it first.
fn slices_concat(x: &Tensor, axis: usize, runs: &[(usize, usize)]) -> Result<Tensor, GraphError> {
    let r = x.rank();
    let (work, at) = if axis + 1 < r {
        (x.clone(), axis)
    } else if r == 1 {
        (x.reshape(&[x.shape()[0] as isize, 1])?, 0)
    } else {
        (x.swap_axes(r as isize - 1, r as isize - 2)?, r - 2)
    };
    let pieces = runs
        .iter()
        .map(|&(start, len)| work.narrow(at as isize, start, len))
        .collect::<Result<Vec<_>, _>>()?;
    let joined = concat(&pieces, at as isize)?;
    if axis + 1 < r {
        Ok(joined)
    } else if r == 1 {
        joined.reshape(&[joined.shape()[0] as isize])
    } else {
        joined.swap_axes(r as isize - 1, r as isize - 2)
    }
}

/// `begin[axis]` of a runtime position vector, shaped `[1, 1]`.
fn position(begin: &Tensor, axis: usize) -> Result<Tensor, GraphError> {
    begin.narrow(0, axis, 1)?.reshape(&[1, 1])
}

/// A window at a runtime position: one 0/1 selection matmul per axis the window narrows.
pub fn dynamic_slice(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
    size: &[usize],
) -> Result<Option<Tensor>, GraphError> {
    let (x, begin) = (&srcs[0], &srcs[1]);
    if let Some(b) = constant_indices(begin) {
        let begin: Vec<usize> = b.iter().map(|&v| v.max(0.0) as usize).collect();
        let end: Vec<usize> = begin.iter().zip(size).map(|(b, s)| b + s).collect();
        return Ok(Some(x.slice(&begin, &end, &vec![1; x.rank()])?));
    }
    let mut y = x.clone();
    let mut narrowed = false;
    for (axis, (&s, &n)) in size.iter().zip(x.shape()).enumerate() {
        if s == n {
            continue;
        }
        if n > cx.limits.max_exact_int {
            cx.reject(
                node,
                format!(
                    "window at a data-dependent position along an axis of {n} (> {}, beyond fp16-exact positions)",
                    cx.limits.max_exact_int
                ),
            );
            return Ok(None);
        }
        let wanted = position(begin, axis)?.add(&ramp(s, 2, 0)?)?;
        let select = indicator(&wanted.eq(&ramp(n, 2, 1)?)?)?;
        y = along_axis(&y, &select, axis)?;
        narrowed = true;
    }
    if narrowed {
        cx.rewritten(node, "row pick at a runtime position → one-hot matmul");
    }
    Ok(Some(y))
}

/// A write at a runtime position (a KV-cache update): `x·(1 − mask) + placed`, where `mask`
/// marks the window and `placed` is the update moved there by one-hot products.
pub fn dynamic_slice_update(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
) -> Result<Option<Tensor>, GraphError> {
    let (x, update, begin) = (&srcs[0], &srcs[1], &srcs[2]);
    if let Some(b) = constant_indices(begin) {
        let begin: Vec<usize> = b.iter().map(|&v| v.max(0.0) as usize).collect();
        return Ok(Some(Tensor::from_op(
            Op::SliceUpdate { begin },
            vec![x.clone(), update.clone()],
        )?));
    }
    let r = x.rank();
    let mut placed = update.clone();
    let mut mask: Option<Tensor> = None;
    for axis in 0..r {
        let (n, u) = (x.shape()[axis], update.shape()[axis]);
        if n == u {
            continue;
        }
        if n > cx.limits.max_exact_int {
            cx.reject(
                node,
                format!(
                    "write at a data-dependent position along an axis of {n} (> {}, beyond fp16-exact positions)",
                    cx.limits.max_exact_int
                ),
            );
            return Ok(None);
        }
        let at = position(begin, axis)?;
        let window = if u == 1 {
            let mut shape = vec![1isize; r];
            shape[axis] = 1;
            let onehot = indicator(&at.reshape(&shape)?.eq(&ramp(n, r, axis)?)?)?;
            placed = placed.mul(&onehot)?;
            onehot
        } else {
            let rows = ramp(n, 2, 0)?;
            let targets = at.add(&ramp(u, 2, 1)?)?;
            let place = indicator(&rows.eq(&targets)?)?;
            placed = along_axis(&placed, &place, axis)?;
            let mut shape = vec![1isize; r];
            shape[axis] = n as isize;
            place.sum(&[1], false)?.reshape(&shape)?
        };
        mask = Some(match mask {
            None => window,
            Some(m) => m.mul(&window)?,
        });
    }
    let Some(mask) = mask else {
        return Ok(Some(update.clone()));
    };
    cx.rewritten(
        node,
        "KV write at a runtime position → K·(1−onehot) + k·onehot",
    );
    let keep = mask.mul_scalar(-1.0)?.add_scalar(1.0)?;
    Ok(Some(x.mul(&keep)?.add(&placed)?))
}
