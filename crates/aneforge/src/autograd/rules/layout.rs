//! Data movement: transposes, concatenation, slices and updates, padding and tiling.

use super::Grads;
use crate::autograd::shape_isize;
use crate::autograd::util::zeros;
use crate::graph::{constant, GraphError, HostArray, PadMode, Tensor};

pub(super) fn transpose(perm: &[usize], g: &Tensor) -> Result<Tensor, GraphError> {
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    g.transpose(&inverse)
}

pub(super) fn concat(
    s: &[Tensor],
    axis: usize,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let mut start = 0;
    let mut grads = Vec::with_capacity(s.len());
    for (src, &want) in s.iter().zip(wants) {
        let n = src.shape()[axis];
        grads.push(if want {
            Some(g.narrow(axis as isize, start, n)?)
        } else {
            None
        });
        start += n;
    }
    Ok(grads)
}

/// `[x, begin]`.
pub(super) fn dynamic_slice(s: &[Tensor], g: &Tensor) -> Result<Grads, GraphError> {
    let dx = zeros(s[0].shape())?.dynamic_slice_update(g, &s[1])?;
    Ok(vec![Some(dx), None])
}

/// `[x, update]` at a fixed `begin`.
pub(super) fn slice_update(
    s: &[Tensor],
    begin: &[usize],
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let u = s[1].shape();
    let dx = if wants[0] {
        Some(g.slice_update(&zeros(u)?, begin)?)
    } else {
        None
    };
    let du = if wants[1] {
        let end: Vec<usize> = begin.iter().zip(u).map(|(b, n)| b + n).collect();
        Some(g.slice(begin, &end, &vec![1; u.len()])?)
    } else {
        None
    };
    Ok(vec![dx, du])
}

/// `[x, update, begin]`.
pub(super) fn dynamic_slice_update(
    s: &[Tensor],
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let u = s[1].shape();
    let dx = if wants[0] {
        Some(g.dynamic_slice_update(&zeros(u)?, &s[2])?)
    } else {
        None
    };
    let du = if wants[1] {
        Some(g.dynamic_slice(&s[2], u)?)
    } else {
        None
    };
    Ok(vec![dx, du, None])
}

/// The source index of each output position along one padded axis.
fn pad_source(len: usize, before: usize, after: usize, mode: PadMode) -> Vec<usize> {
    (0..len + before + after)
        .map(|o| {
            let i = o as isize - before as isize;
            let n = len as isize;
            let src = match mode {
                PadMode::Reflect if i < 0 => -i,
                PadMode::Reflect if i >= n => 2 * (n - 1) - i,
                _ => i.clamp(0, n - 1),
            };
            src as usize
        })
        .collect()
}

/// Constant padding crops `g`; reflect and replicate padding sum the copies back onto their
/// sources, one axis at a time, as a product with a constant `[out, in]` selection matrix.
pub(super) fn pad(
    x: &Tensor,
    pads: &[(usize, usize)],
    mode: PadMode,
    g: &Tensor,
) -> Result<Tensor, GraphError> {
    let xs = x.shape();
    if mode == PadMode::Constant {
        let begin: Vec<usize> = pads.iter().map(|p| p.0).collect();
        let end: Vec<usize> = begin.iter().zip(xs).map(|(b, n)| b + n).collect();
        return g.slice(&begin, &end, &vec![1; xs.len()]);
    }
    let rank = xs.len();
    let mut cur = g.clone();
    for (axis, &(before, after)) in pads.iter().enumerate() {
        if before == 0 && after == 0 {
            continue;
        }
        let n = xs[axis];
        let src = pad_source(n, before, after, mode);
        let mut m = vec![0.0f32; src.len() * n];
        for (o, &i) in src.iter().enumerate() {
            m[o * n + i] += 1.0;
        }
        let select = constant(HostArray::from_f32(&[src.len(), n], m)?);
        let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
        perm.push(axis);
        let moved = cur.transpose(&perm)?.matmul(&select)?;
        let mut back = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            back[p] = i;
        }
        cur = moved.transpose(&back)?;
    }
    Ok(cur)
}

/// Sums the copies: axis by axis, `[outer, reps, d, inner]` summed over `reps`.
pub(super) fn tile(x: &Tensor, reps: &[usize], g: &Tensor) -> Result<Tensor, GraphError> {
    let xs = x.shape();
    let mut cur = g.clone();
    for (axis, &r) in reps.iter().enumerate() {
        if r == 1 {
            continue;
        }
        let cs = cur.shape().to_vec();
        let outer: usize = cs[..axis].iter().product();
        let inner: usize = cs[axis + 1..].iter().product();
        let mut next = cs.clone();
        next[axis] = xs[axis];
        cur = cur
            .reshape(&[
                outer as isize,
                r as isize,
                xs[axis] as isize,
                inner as isize,
            ])?
            .sum(&[1], false)?
            .reshape(&shape_isize(&next))?;
    }
    Ok(cur)
}
