//! Scaled dot-product attention.

use super::reduce::softmax;
use super::Grads;
use crate::autograd::util::sum_to;
use crate::graph::nn::{causal_additive_mask, MASKED};
use crate::graph::{DType, GraphError, Tensor};

/// `[q[*B, L, E], k[*B, S, E], v[*B, S, Ev], mask?]`: recomputes the attention probabilities
/// `P` and backpropagates through `softmax(q kᵀ·scale + mask) v`.
pub(super) fn sdpa(
    s: &[Tensor],
    scale: Option<f32>,
    causal: bool,
    has_mask: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let (q, k, v) = (&s[0], &s[1], &s[2]);
    let r = q.rank();
    let (l, e, len) = (q.shape()[r - 2], q.shape()[r - 1], k.shape()[r - 2]);
    let scale = scale.unwrap_or((1.0 / (e as f64).sqrt()) as f32);
    let mut scores = q.matmul_t(k, false, true)?.mul_scalar(scale)?;
    if has_mask {
        let m = &s[3];
        scores = if m.dtype() == DType::Bool {
            scores.add(&m.cast(DType::F32)?.sub_scalar(1.0)?.mul_scalar(-MASKED)?)?
        } else {
            scores.add(m)?
        };
    }
    if causal {
        scores = scores.add(&causal_additive_mask(l, len)?)?;
    }
    let p = scores.softmax(-1)?;
    let mut grads = vec![None; s.len()];
    if wants[2] {
        grads[2] = Some(p.matmul_t(g, true, false)?);
    }
    if wants[0] || wants[1] || (has_mask && wants[3]) {
        let dp = g.matmul_t(v, false, true)?;
        let ds = softmax(&p, r - 1, &dp)?;
        if wants[0] {
            grads[0] = Some(ds.matmul(k)?.mul_scalar(scale)?);
        }
        if wants[1] {
            grads[1] = Some(ds.matmul_t(q, true, false)?.mul_scalar(scale)?);
        }
        if has_mask && wants[3] {
            grads[3] = Some(sum_to(&ds, s[3].shape())?);
        }
    }
    Ok(grads)
}
