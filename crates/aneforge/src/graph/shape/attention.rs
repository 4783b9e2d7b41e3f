//! Scaled dot-product attention.

use super::{arity, broadcast, float_only};
use crate::graph::op::Op;
use crate::graph::{DType, GraphError, Tensor, MAX_RANK};

pub(super) fn infer(
    op: &Op,
    name: &'static str,
    srcs: &[Tensor],
) -> Result<(Vec<usize>, DType), GraphError> {
    match op {
        Op::Sdpa {
            scale,
            causal,
            has_mask,
        } => {
            arity(name, srcs, 3 + usize::from(*has_mask))?;
            float_only(name, &srcs[..3])?;
            sdpa_shape(name, srcs, *scale, *causal, *has_mask)
        }
        _ => Err(GraphError::attribute(name, "not an attention op")),
    }
}

fn sdpa_shape(
    op: &'static str,
    srcs: &[Tensor],
    scale: Option<f32>,
    causal: bool,
    has_mask: bool,
) -> Result<(Vec<usize>, DType), GraphError> {
    let (q, k, v) = (srcs[0].shape(), srcs[1].shape(), srcs[2].shape());
    let r = q.len();
    let bad = |m: &str| GraphError::shape(op, &[q, k, v], m.to_string());
    if r < 3 || k.len() != r || v.len() != r {
        return Err(bad("q, k and v need one rank, at least 3: [*B, L, E]"));
    }
    if q[..r - 2] != k[..r - 2] || q[..r - 2] != v[..r - 2] {
        return Err(bad("q, k and v must share the batch axes"));
    }
    let (l, e, s) = (q[r - 2], q[r - 1], k[r - 2]);
    if k[r - 1] != e || v[r - 2] != s {
        return Err(bad("expected q[*B, L, E], k[*B, S, E], v[*B, S, Ev]"));
    }
    if causal && l > s {
        return Err(bad("causal attention needs L <= S"));
    }
    if let Some(sc) = scale {
        if !sc.is_finite() {
            return Err(GraphError::attribute(op, "scale must be finite"));
        }
    }
    let mut out = q.to_vec();
    out[r - 1] = v[r - 1];
    if has_mask {
        let m = &srcs[3];
        if !matches!(m.dtype(), DType::F32 | DType::Bool) {
            return Err(GraphError::dtype(
                op,
                &[m.dtype()],
                "mask must be f32 or bool",
            ));
        }
        let mut scores = q[..r - 1].to_vec();
        scores.push(s);
        let b = broadcast(op, &scores, m.shape())?;
        if b != scores {
            return Err(GraphError::shape(
                op,
                &[q, k, m.shape()],
                format!("mask must broadcast to the score shape {scores:?}"),
            ));
        }
    }
    debug_assert!(out.len() <= MAX_RANK);
    Ok((out, DType::F32))
}
