//! One decoder layer as a graph, shared by the inference step ([`super::step`]) and the training
//! forward ([`super::training`]): norms, the fused q|k|v projection, q/k head norms, RoPE, the
//! output projection, the MLP and the residual adds. Only attention differs between the two (a
//! resident cache at a runtime position, or causal attention within each sequence of a batch),
//! so the caller supplies it.

use aneforge::graph::{self, HostArray, Tensor};

use super::config::{Experts, LlmConfig, MlpKind, NormKind, QkNorm};
use super::weights::{LayerWeights, NormWeights, SharedExpert};
use super::LlmError;
use crate::Activation;

pub(super) fn norm(cfg: &LlmConfig, x: &Tensor, w: &NormWeights) -> Result<Tensor, LlmError> {
    norm_at(cfg, x, w, 1.0)
}

/// The norm of a value carried at `scale` ([`LlmConfig::residual_scale`]): the epsilon scaled by
/// `scale²` gives the norm of the unscaled value.
pub(super) fn norm_at(
    cfg: &LlmConfig,
    x: &Tensor,
    w: &NormWeights,
    scale: f32,
) -> Result<Tensor, LlmError> {
    let s2 = scale * scale;
    Ok(match cfg.norm {
        NormKind::Rms { eps, .. } => x.rms_norm(Some(&w.weight), eps * s2)?,
        NormKind::Layer { eps } => {
            x.layer_norm(&[-1], Some(&w.weight), w.bias.as_ref(), eps * s2)?
        }
    })
}

/// `x · scale`, or `x` when `scale` is 1.
pub(super) fn scaled(x: Tensor, scale: f32) -> Result<Tensor, LlmError> {
    Ok(if scale == 1.0 {
        x
    } else {
        x.mul_scalar(scale)?
    })
}

/// The constant `R` with `x @ R = rotate_half(x)` over the first `dims` of `head_dim`:
/// `(-x[half..dims], x[..half])`, zero elsewhere.
pub(super) fn rotate_half_matrix(head_dim: usize, dims: usize) -> Result<Tensor, LlmError> {
    let half = dims / 2;
    let mut r = vec![0.0f32; head_dim * head_dim];
    for j in 0..half {
        r[(j + half) * head_dim + j] = -1.0;
        r[j * head_dim + j + half] = 1.0;
    }
    Ok(graph::constant(HostArray::from_f32(
        &[head_dim, head_dim],
        r,
    )?))
}

/// The rotary tables of one set of positions: `cos`, `sin` `[N, 1, hd]` (broadcast over heads)
/// and the rotate-half matrix.
pub(super) struct Rope<'a> {
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
    pub rot: &'a Tensor,
}

/// `x[N, heads, hd] · cos + rotate_half(x) · sin`.
fn rope(x: &Tensor, r: &Rope<'_>) -> Result<Tensor, LlmError> {
    let s = x.shape().to_vec();
    let flat = x.reshape(&[(s[0] * s[1]) as isize, s[2] as isize])?;
    let rotated = flat
        .matmul(r.rot)?
        .reshape(&[s[0] as isize, s[1] as isize, s[2] as isize])?;
    Ok(x.mul(r.cos)?.add(&rotated.mul(r.sin)?)?)
}

/// cos (or sin) of `position · inv_freq` as transformers computes it (f32 angle), duplicated over
/// both halves of the `dims` rotated dimensions; 1 (or 0) on dimensions that are not rotated. One
/// row of `hd` values per position, written into `out`.
pub(super) fn rope_rows(
    inv_freq: &[f32],
    dims: usize,
    hd: usize,
    positions: impl Iterator<Item = usize>,
    cos: bool,
    out: &mut [f32],
) {
    let half = dims / 2;
    for (row, p) in out.chunks_exact_mut(hd).zip(positions) {
        let p = p as f32;
        for (j, v) in row.iter_mut().enumerate() {
            *v = if j < dims {
                let angle = p * inv_freq[j % half];
                if cos {
                    (angle as f64).cos() as f32
                } else {
                    (angle as f64).sin() as f32
                }
            } else if cos {
                1.0
            } else {
                0.0
            };
        }
    }
}

/// A low-rank adapter of one projection: `a` `[r, in]`, `b` `[out, r]` (PEFT's `lora_A` and
/// `lora_B` weights).
#[derive(Clone)]
pub struct LoraPair {
    pub a: Tensor,
    pub b: Tensor,
}

/// The adapters of one layer's projections; an adapted projection's output gains
/// `scale · x Aᵀ Bᵀ` (PEFT's LoRA, `scale = alpha / r`).
#[derive(Clone, Default)]
pub struct LayerLora {
    pub q: Option<LoraPair>,
    pub k: Option<LoraPair>,
    pub v: Option<LoraPair>,
    pub o: Option<LoraPair>,
    pub gate: Option<LoraPair>,
    pub up: Option<LoraPair>,
    pub down: Option<LoraPair>,
    pub scale: f32,
}

/// `y + scale · x Aᵀ Bᵀ` when `pair` is an adapter, else `y`.
fn adapted(y: Tensor, x: &Tensor, pair: Option<&LoraPair>, scale: f32) -> Result<Tensor, LlmError> {
    let Some(p) = pair else { return Ok(y) };
    let delta = x.linear(&p.a, None)?.linear(&p.b, None)?;
    Ok(y.add(&scaled(delta, scale)?)?)
}

/// Attention of `q` over `k`, `v` under the additive `mask` (any batch dimensions in front):
/// the fused op, or with [`LlmConfig::attn_softcap`] the logits soft-capped before the mask.
pub(super) fn attention(
    cfg: &LlmConfig,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &Tensor,
) -> Result<Tensor, LlmError> {
    let Some(cap) = cfg.attn_softcap else {
        return Ok(graph::sdpa(q, k, v, Some(mask), false, cfg.attn_scale)?);
    };
    let scale = cfg.attn_scale.unwrap_or(1.0 / (cfg.head_dim as f32).sqrt());
    let logits = q.matmul_t(k, false, true)?.mul_scalar(scale / cap)?;
    let p = logits.tanh()?.mul_scalar(cap)?.add(mask)?.softmax(-1)?;
    Ok(p.matmul(v)?)
}

/// The output head's logits of the final-normed `x`, soft-capped with
/// [`LlmConfig::final_softcap`].
pub(super) fn head_logits(cfg: &LlmConfig, x: &Tensor, head: &Tensor) -> Result<Tensor, LlmError> {
    let logits = x.linear(head, None)?;
    Ok(match cfg.final_softcap {
        Some(cap) => logits.mul_scalar(1.0 / cap)?.tanh()?.mul_scalar(cap)?,
        None => logits,
    })
}

/// The router's choice for each row of `x[N, D]`: the `top_k` largest softmax probabilities
/// `[N, K]` (divided by their sum when [`Experts::norm_top_k`]) and their experts `[N, K]` (i32);
/// of equal probabilities the lower expert is chosen.
fn route(x: &Tensor, router: &Tensor, experts: Experts) -> Result<(Tensor, Tensor), LlmError> {
    let p = x.linear(router, None)?.softmax(-1)?;
    let (w, ids) = p.top_k(experts.top_k)?;
    let w = if experts.norm_top_k {
        w.div(&w.sum(&[-1], true)?)?
    } else {
        w
    };
    Ok((w, ids))
}

/// Steps of at most this many tokens may compute only the chosen experts' gate and up
/// projections (`linear_experts`); longer ones compute every expert in one projection, which
/// streams each expert's weights once for all the step's tokens.
pub(super) const SPARSE_EXPERT_ROWS: usize = 8;

/// `ids[N, K]` as `[N, K, E]` 0/1 rows.
fn one_hot(ids: &Tensor, count: usize) -> Result<Tensor, LlmError> {
    let ramp = HostArray::from_i32(&[1, 1, count], (0..count as i32).collect::<Vec<_>>())?;
    let (n, k) = (ids.shape()[0] as isize, ids.shape()[1] as isize);
    Ok(ids
        .reshape(&[n, k, 1])?
        .eq(&graph::constant(ramp))?
        .cast(graph::DType::F32)?)
}

/// The mixture of experts' activation `[N, E·I]` (the input of the summing down projection):
/// each row's chosen experts' `act(gate) · up` times the router weight, zero for the others.
fn experts_act(
    hn: &Tensor,
    lw: &LayerWeights,
    router: &Tensor,
    x: Experts,
    act: Activation,
    sparse_rows: usize,
) -> Result<Tensor, LlmError> {
    let n = hn.shape()[0];
    let (e, i) = (x.count as isize, x.size as isize);
    let (w, ids) = route(hn, router, x)?;
    let onehot = one_hot(&ids, x.count)?;
    let k = x.top_k as isize;
    let n_ = n as isize;
    if n <= sparse_rows {
        // `up` holds each expert's gate and up rows in turn: expert e's block is its [g; u]
        let gu = hn
            .reshape(&[n_, 1, -1])?
            .linear_experts(&lw.up, &ids, x.count)?
            .split(&[x.size, x.size], -1)?;
        let a = act
            .apply(&gu[0])?
            .mul(&gu[1])?
            .mul(&w.reshape(&[n_, k, 1])?)?;
        // rows back to their experts' columns: [N, E, K] @ [N, K, I]
        return Ok(onehot
            .transpose(&[0, 2, 1])?
            .matmul(&a)?
            .reshape(&[n_, e * i])?);
    }
    let weight = onehot.mul(&w.reshape(&[n_, k, 1])?)?.sum(&[1], false)?;
    let gu = hn
        .linear(&lw.up, None)?
        .reshape(&[n_, e, 2 * i])?
        .split(&[x.size, x.size], -1)?;
    Ok(act
        .apply(&gu[0])?
        .mul(&gu[1])?
        .mul(&weight.reshape(&[n_, e, 1])?)?
        .reshape(&[n_, e * i])?)
}

/// A shared expert's output `sigmoid(x · gateᵀ) · down(act(gate(x)) · up(x))` for `x[N, D]`.
fn shared_expert(x: &Tensor, s: &SharedExpert, act: Activation) -> Result<Tensor, LlmError> {
    let size = s.down.shape()[1];
    let gu = x.linear(&s.up, None)?.split(&[size, size], -1)?;
    let out = act.apply(&gu[0])?.mul(&gu[1])?.linear(&s.down, None)?;
    let scale = x.linear(&s.gate, None)?.sigmoid()?;
    Ok(out.mul(&scale)?)
}

/// What one layer produces: its output and the intermediate values the fp16 audit probes.
pub(super) struct LayerOut {
    /// The residual stream after the layer.
    pub x: Tensor,
    /// The residual stream after the attention half.
    pub after_attn: Tensor,
    /// The MLP's activation (the input of the down projection).
    pub mlp_act: Tensor,
}

/// Layer `lw` over the residual stream `x[N, D]` (carried at `rs`, [`LlmConfig::residual_scale`]).
/// `attend(q, k, v)` receives `q[N, H, hd]`, `k` and `v` `[N, KV, hd]` (head-normed and rotated)
/// and returns the attention output `[N, H·hd]` in head-major columns.
/// How a layer runs beyond its weights.
#[derive(Clone, Copy, Default)]
pub(super) struct LayerOptions<'a> {
    /// LoRA adapters of the layer's projections (training).
    pub lora: Option<&'a LayerLora>,
    /// Mixtures of experts: steps of at most this many rows compute only the chosen experts'
    /// gate and up projections (0: every expert).
    pub sparse_expert_rows: usize,
}

pub(super) fn decoder_layer(
    cfg: &LlmConfig,
    lw: &LayerWeights,
    x: &Tensor,
    rs: f32,
    rope: Option<Rope<'_>>,
    opts: LayerOptions<'_>,
    attend: impl FnOnce(Tensor, Tensor, Tensor) -> Result<Tensor, LlmError>,
) -> Result<LayerOut, LlmError> {
    let lora = opts.lora;
    let n = x.shape()[0] as isize;
    let (h, kv, hd) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let hn = norm_at(cfg, x, &lw.attn_norm, rs)?;
    let qkv = hn.linear(&lw.qkv, lw.qkv_bias.as_ref())?;
    let mut parts = qkv.split(&[h * hd, kv * hd, kv * hd], -1)?;
    if let Some(ad) = lora {
        for (part, pair) in parts.iter_mut().zip([&ad.q, &ad.k, &ad.v]) {
            *part = adapted(part.clone(), &hn, pair.as_ref(), ad.scale)?;
        }
    }
    let whole = cfg.qk_norm == QkNorm::Whole;
    if let (true, Some(qn), Some(kn), NormKind::Rms { eps, .. }) =
        (whole, &lw.q_norm, &lw.k_norm, cfg.norm)
    {
        parts[0] = parts[0].rms_norm(Some(qn), eps)?;
        parts[1] = parts[1].rms_norm(Some(kn), eps)?;
    }
    let mut q = parts[0].reshape(&[n, h as isize, hd as isize])?;
    let mut k = parts[1].reshape(&[n, kv as isize, hd as isize])?;
    let v = parts[2].reshape(&[n, kv as isize, hd as isize])?;
    if let (false, Some(qn), Some(kn), NormKind::Rms { eps, .. }) =
        (whole, &lw.q_norm, &lw.k_norm, cfg.norm)
    {
        q = q.rms_norm(Some(qn), eps)?;
        k = k.rms_norm(Some(kn), eps)?;
    }
    if let Some(r) = &rope {
        q = self::rope(&q, r)?;
        k = self::rope(&k, r)?;
    }
    let att = attend(q, k, v)?;
    let lora_scale = lora.map_or(1.0, |l| l.scale);
    let o = att.linear(&lw.o, lw.o_bias.as_ref())?;
    let mut o = adapted(o, &att, lora.and_then(|l| l.o.as_ref()), lora_scale)?;
    if let Some(nw) = &lw.post_attn_norm {
        o = norm(cfg, &o, nw)?;
    }
    let after_attn = x.add(&scaled(o, rs)?)?;
    let hn = norm_at(cfg, &after_attn, &lw.mlp_norm, rs)?;
    let pair = |f: fn(&LayerLora) -> &Option<LoraPair>| lora.and_then(|l| f(l).as_ref());
    let mlp_act = match (cfg.mlp, cfg.experts, &lw.router) {
        (MlpKind::Gated(a), Some(x), Some(router)) => {
            experts_act(&hn, lw, router, x, a, opts.sparse_expert_rows)?
        }
        (MlpKind::Gated(a), _, _) => {
            let up = hn.linear(&lw.up, lw.up_bias.as_ref())?;
            let gu = up.split(&[cfg.intermediate_size, cfg.intermediate_size], -1)?;
            let gate = adapted(gu[0].clone(), &hn, pair(|l| &l.gate), lora_scale)?;
            let up = adapted(gu[1].clone(), &hn, pair(|l| &l.up), lora_scale)?;
            a.apply(&gate)?.mul(&up)?
        }
        (MlpKind::Plain(a), _, _) => {
            let up = hn.linear(&lw.up, lw.up_bias.as_ref())?;
            a.apply(&adapted(up, &hn, pair(|l| &l.up), lora_scale)?)?
        }
    };
    let down = mlp_act.linear(&lw.down, lw.down_bias.as_ref())?;
    let mut down = adapted(down, &mlp_act, pair(|l| &l.down), lora_scale)?;
    if let (Some(s), MlpKind::Gated(a)) = (&lw.shared, cfg.mlp) {
        down = down.add(&shared_expert(&hn, s, a)?)?;
    }
    if let Some(nw) = &lw.post_mlp_norm {
        down = norm(cfg, &down, nw)?;
    }
    let x = after_attn.add(&scaled(down, rs)?)?;
    Ok(LayerOut {
        x,
        after_attn,
        mlp_act,
    })
}
