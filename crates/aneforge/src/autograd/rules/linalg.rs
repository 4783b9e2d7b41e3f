//! Contractions: matmul, linear and linear_experts.

use super::Grads;
use crate::autograd::util::sum_to;
use crate::graph::{constant, DType, GraphError, HostArray, Tensor};

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

/// `linear_experts`: with `O[n, k, e] = (ids[n, k] == e)`, the gradient rows `G[n, k, e] =
/// O[n, k, e] · g[n, k]` scatter `g` into every expert's block, so `dx = G @ W` (summed over `k`
/// when `x` broadcasts one row) and `dW = Gᵀ @ x`. The integer ids take none.
pub(super) fn linear_experts(
    s: &[Tensor],
    experts: usize,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let (x, w, ids) = (&s[0], &s[1], &s[2]);
    let (n, k, out) = (g.shape()[0], g.shape()[1], g.shape()[2]);
    let (kx, inner) = (x.shape()[1], x.shape()[2]);
    let (n_, k_, e_, out_) = (n as isize, k as isize, experts as isize, out as isize);
    let ramp = HostArray::from_i32(&[1, 1, experts], (0..experts as i32).collect::<Vec<_>>())?;
    let onehot = ids
        .reshape(&[n_, k_, 1])?
        .eq(&constant(ramp))?
        .cast(DType::F32)?
        .reshape(&[n_, k_, e_, 1])?;
    let scattered = onehot.mul(&g.reshape(&[n_, k_, 1, out_])?)?;
    let mut grads = vec![None; s.len()];
    if wants[0] {
        let gx = if kx == 1 {
            scattered.sum(&[1], false)?.reshape(&[n_, e_ * out_])?
        } else {
            scattered.reshape(&[n_ * k_, e_ * out_])?
        };
        grads[0] = Some(gx.matmul(w)?.reshape(&[n_, kx as isize, inner as isize])?);
    }
    if wants[1] {
        let xb = x
            .broadcast_to(&[n, k, inner])?
            .reshape(&[n_ * k_, inner as isize])?;
        let gw = scattered.reshape(&[n_ * k_, e_ * out_])?;
        grads[1] = Some(gw.matmul_t(&xb, true, false)?);
    }
    Ok(grads)
}
