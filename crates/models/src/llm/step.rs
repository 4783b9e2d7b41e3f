//! One decoder step as a graph. A step takes `T` new tokens at a runtime position,
//! writes their keys and values into the resident per-layer caches `[kv_heads, R, head_dim]` (a
//! `slice_update` at that position's row; the ANE legalisation turns it into a one-hot write) and
//! attends over the cache's `R` rows under a host-built additive mask. `R` is the context bucket's
//! `S` for layers that see every earlier position, and the window layout's rows for
//! sliding-window layers ([`super::cache::CacheLayout`]). Prefill (`T` > 1), decode (`T` = 1) and
//! speculative verification (`T` = K + 1) are the same graph at other sizes.
//!
//! Ports (`l` is the global layer index, so segments of one model never clash):
//! inputs `input_ids` i32 `[T]` (with `positions` i32 `[T]` for learned positions) or `hidden_in`
//! `[T, D]`; `rope_cos`, `rope_sin` `[T, head_dim]`; for layers over the whole context
//! `write_pos` i32 `[3]` = `[0, row, 0]` and `mask` `[T, S]`, for sliding-window layers
//! `write_pos_window` and `mask_window` `[T, R]`; `last_index` i32 `[1]` when only the last row's
//! logits are wanted; the caches [`cache_ports`] names. Outputs: `logits` `[T or 1, vocab]` or
//! `hidden_out` `[T, D]`, and each cache's `_out` (share them with the inputs). A port is
//! declared only when a layer of the segment uses it.
//!
//! Caches are f32, fp16 or `q8_0` ([`KvStorage`]): an fp16 cache is written as the new rows cast
//! to fp16 and read through a cast back to f32; a `q8_0` cache is an int8 tensor and an fp16
//! scale per block, quantized as the rows are written and read as `int8 · scale`. The CPU engine
//! reads either form inside its attention kernel (no f32 copy of the cache).

use std::ops::Range;

use aneforge::graph::{self, DType, Tensor};

use super::block::{
    attention, decoder_layer, head_logits, norm_at, rotate_half_matrix, scaled, LayerOptions, Rope,
};
use super::cache::{KvStorage, Q8_BLOCK};
use super::config::{LlmConfig, Positions};
use super::weights::ModelWeights;
use super::LlmError;

pub const INPUT_IDS: &str = "input_ids";
pub const POSITIONS: &str = "positions";
pub const HIDDEN_IN: &str = "hidden_in";
pub const HIDDEN_OUT: &str = "hidden_out";
pub const ROPE_COS: &str = "rope_cos";
pub const ROPE_SIN: &str = "rope_sin";
/// The local layers' rotary tables ([`LlmConfig::local_attention`]).
pub const ROPE_COS_LOCAL: &str = "rope_cos_local";
pub const ROPE_SIN_LOCAL: &str = "rope_sin_local";
pub const WRITE_POS: &str = "write_pos";
pub const MASK: &str = "mask";
/// The sliding-window layers' write row and mask ([`LlmConfig::window_at`]).
pub const WRITE_POS_WINDOW: &str = "write_pos_window";
pub const MASK_WINDOW: &str = "mask_window";
pub const LAST_INDEX: &str = "last_index";
pub const LOGITS: &str = "logits";

pub fn k_cache(layer: usize) -> String {
    format!("k_cache_{layer}")
}
pub fn v_cache(layer: usize) -> String {
    format!("v_cache_{layer}")
}
pub fn k_cache_out(layer: usize) -> String {
    format!("k_cache_{layer}_out")
}
pub fn v_cache_out(layer: usize) -> String {
    format!("v_cache_{layer}_out")
}

/// One resident cache tensor of a layer: its input port, the output port that shares its
/// buffer, and the values it keeps per cache row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachePort {
    pub input: String,
    pub output: String,
    pub width: usize,
}

/// The cache tensors of layer `l` with `head_dim` `hd`: `k_cache_l` and `v_cache_l`
/// `[kv_heads, R, hd]`, and for `q8_0` their scales `k_scale_l`, `v_scale_l`
/// `[kv_heads, R, hd / 32]`.
pub fn cache_ports(l: usize, hd: usize, storage: KvStorage) -> Vec<CachePort> {
    let port = |input: String, output, width| CachePort {
        input,
        output,
        width,
    };
    let mut ports = vec![
        port(k_cache(l), k_cache_out(l), hd),
        port(v_cache(l), v_cache_out(l), hd),
    ];
    if storage == KvStorage::Q8_0 {
        for (kv, width) in [("k", hd / Q8_BLOCK), ("v", hd / Q8_BLOCK)] {
            let name = format!("{kv}_scale_{l}");
            ports.push(port(name.clone(), format!("{name}_out"), width));
        }
    }
    ports
}

/// Which rows of logits a step computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogitsRows {
    /// Every one of the `T` positions (prompt scoring, speculative verification).
    All,
    /// Only the row at `last_index` (generation).
    Last,
}

/// How the first layer receives its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EmbedInput {
    /// Token ids gathered from the embedding table in the program.
    TokenIds,
    /// Embeddings computed on the host (the ANE cannot gather at run time).
    Hidden,
}

/// One step program: `tokens` new positions attending over a cache of `context` positions, for
/// the layers of one segment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StepSpec {
    pub tokens: usize,
    pub context: usize,
    /// Cache rows of the sliding-window layers (`context` unless they keep a ring).
    pub window_rows: usize,
    pub cache: KvStorage,
    pub layers: Range<usize>,
    pub embed: EmbedInput,
    pub logits: LogitsRows,
    /// Also output each layer's hidden state after attention (`probe_l{l}_attn`), its MLP
    /// activation (`probe_l{l}_mlp`) and its output (`probe_l{l}_out`), for numerics audits.
    pub probes: bool,
    /// Mixtures of experts: steps of at most this many tokens compute only each token's chosen
    /// experts' gate and up projections (0: every expert, weighted by the router).
    pub sparse_expert_rows: usize,
}

/// The probe outputs of a step built with [`StepSpec::probes`] start with this.
pub const PROBE_PREFIX: &str = "probe_";

/// A rotary table input `[T, hd]`, viewed `[T, 1, hd]` to broadcast over heads.
fn rope_input(name: &str, t: usize, hd: usize) -> Result<Tensor, LlmError> {
    Ok(graph::input(name, &[t, hd], DType::F32)?.reshape(&[t as isize, 1, hd as isize])?)
}

/// An additive mask input `[T, S]`; query rows are (group member, token) pairs per kv head, so
/// the mask repeats per member.
fn mask_input(name: &str, t: usize, s: usize, group: usize) -> Result<Tensor, LlmError> {
    let mask = graph::input(name, &[t, s], DType::F32)?;
    if group == 1 {
        return Ok(mask);
    }
    Ok(mask
        .reshape(&[1, t as isize, s as isize])?
        .tile(&[group, 1, 1])?
        .reshape(&[(group * t) as isize, s as isize])?)
}

/// `[T, n, hd]` → `[n, T, hd]` (a reshape when `T` = 1).
fn heads_first(x: &Tensor) -> Result<Tensor, LlmError> {
    let s = x.shape();
    if s[0] == 1 {
        return Ok(x.reshape(&[s[1] as isize, 1, s[2] as isize])?);
    }
    Ok(x.transpose(&[1, 0, 2])?)
}

/// The cache tensors of `layers`, each with its layer.
pub fn layers_cache_ports(
    layers: Range<usize>,
    hd: usize,
    storage: KvStorage,
) -> Vec<(usize, CachePort)> {
    layers
        .flat_map(|l| cache_ports(l, hd, storage).into_iter().map(move |p| (l, p)))
        .collect()
}

/// Writes `new` `[kv, T, hd]` at `write_pos` into the cache `port` (and its block scales
/// `scale` for `q8_0`) of `rows` rows: the whole cache as f32 for attention, and the updated
/// cache tensors as outputs.
fn cached(
    storage: KvStorage,
    port: &CachePort,
    scale: Option<&CachePort>,
    new: &Tensor,
    rows: usize,
    write_pos: &Tensor,
) -> Result<(Tensor, Vec<(String, Tensor)>), LlmError> {
    let (kv, t, hd) = (new.shape()[0], new.shape()[1], new.shape()[2]);
    let shape = [kv, rows, hd];
    let out = |n: &CachePort, x: &Tensor| (n.output.clone(), x.clone());
    match (storage, scale) {
        (KvStorage::F32, _) => {
            let all = graph::input(&port.input, &shape, DType::F32)?
                .dynamic_slice_update(new, write_pos)?;
            Ok((all.clone(), vec![out(port, &all)]))
        }
        (KvStorage::F16, _) => {
            let all = graph::input(&port.input, &shape, DType::F16)?
                .dynamic_slice_update(&new.cast(DType::F16)?, write_pos)?;
            Ok((all.cast(DType::F32)?, vec![out(port, &all)]))
        }
        (KvStorage::Q8_0, Some(scale)) => {
            let nb = hd / Q8_BLOCK;
            let blocks = |n: usize| [kv as isize, n as isize, nb as isize, Q8_BLOCK as isize];
            let x = new.reshape(&blocks(t))?;
            let amax = x.abs()?.max(&[-1], true)?;
            // all-zero blocks quantize to zeros under any finite reciprocal
            let inv = amax.maximum_scalar(1e-30)?.recip()?.mul_scalar(127.0)?;
            let q = x.mul(&inv)?.round()?.cast(DType::I8)?;
            let d = amax.mul_scalar(1.0 / 127.0)?.cast(DType::F16)?;
            let three = |x: Tensor, w: usize| x.reshape(&[kv as isize, -1, w as isize]);
            let data = graph::input(&port.input, &shape, DType::I8)?
                .dynamic_slice_update(&three(q, hd)?, write_pos)?;
            let scales = graph::input(&scale.input, &[kv, rows, nb], DType::F16)?
                .dynamic_slice_update(&three(d, nb)?, write_pos)?;
            let wide = data
                .reshape(&blocks(rows))?
                .cast(DType::F32)?
                .mul(&scales.cast(DType::F32)?.reshape(&[
                    kv as isize,
                    rows as isize,
                    nb as isize,
                    1,
                ])?)?
                .reshape(&[kv as isize, rows as isize, hd as isize])?;
            Ok((wide, vec![out(port, &data), out(scale, &scales)]))
        }
        (KvStorage::Q8_0, None) => Err(LlmError::Internal(format!(
            "q8_0 cache {} without its scales",
            port.input
        ))),
    }
}

/// Builds the named outputs of one step.
pub fn build_step(
    cfg: &LlmConfig,
    w: &ModelWeights,
    spec: &StepSpec,
) -> Result<Vec<(String, Tensor)>, LlmError> {
    let (t, s) = (spec.tokens, spec.context);
    let (d, hd) = (cfg.hidden_size, cfg.head_dim);
    let (h, kv) = (cfg.n_heads, cfg.n_kv_heads);
    let group = h / kv;
    if t == 0
        || t > s
        || t > spec.window_rows
        || spec.layers.end > cfg.n_layers
        || spec.layers.is_empty()
    {
        return Err(LlmError::Internal(format!(
            "step spec {spec:?} for {} layers",
            cfg.n_layers
        )));
    }
    let first = spec.layers.start == 0;
    let last = spec.layers.end == cfg.n_layers;
    // the residual stream `x` (and `hidden_in`/`hidden_out`) is carried at this factor
    let rs = cfg.residual_scale();
    let mut x = if first && spec.embed == EmbedInput::TokenIds {
        let ids = graph::input(INPUT_IDS, &[t], DType::I32)?;
        let mut e = w.embed_const.gather(&ids, 0)?;
        let scale = cfg.embed_scale.unwrap_or(1.0) * rs;
        if scale != 1.0 {
            e = e.mul_scalar(scale)?;
        }
        if let Some(pos) = &w.pos_embed {
            let positions = graph::input(POSITIONS, &[t], DType::I32)?;
            e = e.add(&scaled(
                graph::constant(pos.clone()).gather(&positions, 0)?,
                rs,
            )?)?;
        }
        e
    } else {
        graph::input(HIDDEN_IN, &[t, d], DType::F32)?
    };
    let rope = match &cfg.positions {
        Positions::Rope(r) => Some((
            rope_input(ROPE_COS, t, hd)?,
            rope_input(ROPE_SIN, t, hd)?,
            rotate_half_matrix(hd, r.dims)?,
        )),
        Positions::Learned { .. } => None,
    };
    // the local layers' own rotary tables, declared only when this segment has such a layer
    let local = match (&cfg.local_attention, &rope) {
        (Some(a), Some(_)) if spec.layers.clone().any(|l| cfg.is_local(l)) => Some((
            rope_input(ROPE_COS_LOCAL, t, hd)?,
            rope_input(ROPE_SIN_LOCAL, t, hd)?,
            rotate_half_matrix(hd, a.rope.dims)?,
        )),
        _ => None,
    };
    // (write row, mask) over the whole context and over the window, declared on first use
    let mut whole: Option<(Tensor, Tensor)> = None;
    let mut windowed: Option<(Tensor, Tensor)> = None;
    let mut outputs: Vec<(String, Tensor)> = Vec::new();
    let mut probes: Vec<(String, Tensor)> = Vec::new();
    for l in spec.layers.clone() {
        let layer_rope = match &local {
            Some((cos, sin, rot)) if cfg.is_local(l) => Some((cos, sin, rot)),
            _ => rope.as_ref().map(|(c, s, r)| (c, s, r)),
        };
        let layer_rope = layer_rope.map(|(cos, sin, rot)| Rope { cos, sin, rot });
        let (slot, (write, mask), rows) = match cfg.window_at(l) {
            Some(_) => (
                &mut windowed,
                (WRITE_POS_WINDOW, MASK_WINDOW),
                spec.window_rows,
            ),
            None => (&mut whole, (WRITE_POS, MASK), s),
        };
        let (write_pos, layer_mask) = match slot {
            Some(ports) => &*ports,
            None => {
                let write = graph::input(write, &[3], DType::I32)?;
                &*slot.insert((write, mask_input(mask, t, rows, group)?))
            }
        };
        let mut caches = None;
        let opts = LayerOptions {
            lora: None,
            sparse_expert_rows: spec.sparse_expert_rows,
        };
        let ports = cache_ports(l, hd, spec.cache);
        let out = decoder_layer(cfg, &w.layers[l], &x, rs, layer_rope, opts, |q, k, v| {
            let [k_all, v_all] = [(k, 0), (v, 1)].map(|(new, i)| {
                let scale = ports.get(2 + i);
                cached(
                    spec.cache,
                    &ports[i],
                    scale,
                    &heads_first(&new)?,
                    rows,
                    write_pos,
                )
            });
            let ((k_all, k_out), (v_all, v_out)) = (k_all?, v_all?);
            let q = heads_first(&q)?.reshape(&[kv as isize, (group * t) as isize, hd as isize])?;
            let att = attention(cfg, &q, &k_all, &v_all, layer_mask)?;
            let att = att.reshape(&[h as isize, t as isize, hd as isize])?;
            caches = Some([k_out, v_out].concat());
            Ok(if t == 1 {
                att.reshape(&[1, (h * hd) as isize])?
            } else {
                att.transpose(&[1, 0, 2])?
                    .reshape(&[t as isize, (h * hd) as isize])?
            })
        })?;
        let caches =
            caches.ok_or_else(|| LlmError::Internal("layer built without attention".into()))?;
        x = out.x;
        if spec.probes {
            probes.push((format!("{PROBE_PREFIX}l{l}_attn"), out.after_attn));
            probes.push((format!("{PROBE_PREFIX}l{l}_mlp"), out.mlp_act));
            probes.push((format!("{PROBE_PREFIX}l{l}_out"), x.clone()));
        }
        outputs.extend(caches);
    }
    let head_out = if last {
        let x = match (spec.logits, t) {
            (LogitsRows::Last, t) if t > 1 => {
                let at = graph::input(LAST_INDEX, &[1], DType::I32)?;
                x.gather(&at, 0)?
            }
            _ => x,
        };
        let x = norm_at(cfg, &x, &w.final_norm, rs)?;
        (LOGITS.to_string(), head_logits(cfg, &x, &w.head)?)
    } else {
        (HIDDEN_OUT.to_string(), x)
    };
    outputs.insert(0, head_out);
    outputs.extend(probes);
    Ok(outputs)
}
