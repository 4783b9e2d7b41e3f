//! Attention on the ANE: the native `scaled_dot_product_attention` ignores masks, so masked and
//! causal attention is decomposed with an additive mask clamped at −1e4; grouped-query head
//! repeats become a 0/1 expansion matmul.

use super::build::{along_axis, f32_const, indicator, zero_one};
use super::Cx;
use crate::graph::{DType, GraphError, Op, Tensor};

/// Masked positions add this to the scores: far below any fp16 score, with room before −65504.
pub const ANE_MASKED: f32 = -1.0e4;

/// `softmax(q kᵀ · scale + mask) v` from matmul, add, softmax, matmul.
pub fn decompose_masked(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
) -> Result<Option<Tensor>, GraphError> {
    let Op::Sdpa {
        scale,
        causal,
        has_mask,
    } = node.op()
    else {
        return Ok(None);
    };
    let (q, k, v) = (&srcs[0], &srcs[1], &srcs[2]);
    let r = q.rank();
    let e = q.shape()[r - 1];
    let scale = scale.unwrap_or(1.0 / (e as f32).sqrt());
    let mut scores = q.mul_scalar(scale)?.matmul_t(k, false, true)?;
    if *has_mask {
        scores = scores.add(&additive(&srcs[3])?)?;
    }
    if *causal {
        let (l, s) = (q.shape()[r - 2], k.shape()[r - 2]);
        let data = (0..l)
            .flat_map(|i| (0..s).map(move |j| if j + l <= i + s { 0.0 } else { ANE_MASKED }))
            .collect();
        scores = scores.add(&f32_const(&[l, s], data)?)?;
    }
    cx.rewritten(
        node,
        "masked/causal attention → matmul, additive mask (−1e4), softmax, matmul (the native op ignores masks)",
    );
    Ok(Some(scores.softmax(-1)?.matmul(v)?))
}

/// A mask as an additive term no lower than [`ANE_MASKED`].
fn additive(mask: &Tensor) -> Result<Tensor, GraphError> {
    if mask.dtype() == DType::Bool {
        return indicator(mask)?.add_scalar(-1.0)?.mul_scalar(-ANE_MASKED);
    }
    if let Some(values) = mask.constant_value().and_then(|c| c.as_f32()) {
        return f32_const(
            mask.shape(),
            values.iter().map(|&m| m.max(ANE_MASKED)).collect(),
        );
    }
    mask.maximum_scalar(ANE_MASKED)
}

/// `reshape(tile(reshape(x)))` that repeats each entry of one axis `g` times in place (the
/// grouped-query head repeat) → `E · x` along that axis with `E[c, j] = (c / g == j)`.
pub fn head_repeat(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
    shape: &[usize],
) -> Result<Option<Tensor>, GraphError> {
    let tile = &srcs[0];
    let Op::Tile { reps } = tile.op() else {
        return Ok(None);
    };
    let inner = &tile.srcs()[0];
    if !matches!(inner.op(), Op::Reshape { .. }) {
        return Ok(None);
    }
    let x = &inner.srcs()[0];
    let (xs, is) = (x.shape(), inner.shape());
    let repeated: Vec<usize> = (0..reps.len()).filter(|&i| reps[i] > 1).collect();
    let [t] = repeated[..] else {
        return Ok(None);
    };
    let g = reps[t];
    let inserted = t >= 1
        && is.len() == xs.len() + 1
        && is[t] == 1
        && is[..t] == xs[..t]
        && is[t + 1..] == xs[t..];
    if !inserted {
        return Ok(None);
    }
    let mut merged = xs.to_vec();
    merged[t - 1] *= g;
    if shape != merged.as_slice() {
        return Ok(None);
    }
    cx.rewritten(node, "GQA head repeat → 0/1 expansion matmul");
    let h = xs[t - 1];
    let expand = zero_one(h * g, h, |c, j| c / g == j)?;
    Ok(Some(along_axis(x, &expand, t - 1)?))
}
