//! Causal-LM training of a decoder: the same layers as inference ([`super::block`]) over a
//! `[batch, seq]` token batch, with every weight a trainable parameter (dense f32), producing the
//! mean cross-entropy of next-token prediction as transformers computes it (labels shifted by
//! one inside each sequence, positions labelled [`IGNORE_INDEX`] not counted).
//!
//! Parameters are named as in Hugging Face Llama-style checkpoints, except that the loader's
//! fused projections stay fused: `model.layers.N.self_attn.qkv_proj.weight` holds the rows
//! `[q; k; v]` and `model.layers.N.mlp.gate_up_proj.weight` the rows `[gate; up]` (AdamW is
//! elementwise, so training the fused matrix is training its parts). [`checkpoint_tensors`]
//! gives each family's own checkpoint tensors back.
//!
//! Ports: inputs `input_ids` i32 `[batch·seq]`, `labels` i32 `[batch·seq]` (the next token of
//! each position; any valid id where the weight is 0) and `label_weights` f32 `[batch·seq]`
//! (`1/n` on the `n` counted positions, 0 elsewhere), all built by [`TrainBatch`]; output: the
//! scalar loss.

use aneforge::autograd::{weighted_cross_entropy, Segment};
use aneforge::graph::{self, nn::MASKED, DType, HostArray, Tensor};

use super::block::{
    attention, decoder_layer, head_logits, norm_at, rope_rows, rotate_half_matrix, LayerLora,
    LayerOptions, Rope,
};
use super::config::{LlmConfig, Positions};
pub use super::weights::check_export;
use super::weights::{ModelWeights, NormWeights};
use super::LlmError;

pub const INPUT_IDS: &str = super::step::INPUT_IDS;
pub const LABELS: &str = "labels";
pub const LABEL_WEIGHTS: &str = "label_weights";
/// transformers' label for a position that is not predicted.
pub const IGNORE_INDEX: i64 = -100;

/// A model whose weights are parameter leaves.
pub struct TrainableModel {
    pub weights: ModelWeights,
    /// Learned position embeddings (GPT-2): a parameter, or a constant when frozen.
    pub pos_embed: Option<Tensor>,
    /// Per layer, the LoRA adapters (empty for a full fine-tune).
    pub lora: Vec<LayerLora>,
    /// Every parameter, each once (a tied head is the embedding).
    pub params: Vec<Tensor>,
}

fn hf_layer(i: usize, stem: &str) -> String {
    format!("model.layers.{i}.{stem}")
}

/// The program port of the parameter holding checkpoint tensor `name`: ports are identifiers,
/// so each `.` becomes `__` (no Hugging Face decoder tensor name holds `__`).
pub fn port_name(name: &str) -> String {
    name.replace('.', "__")
}

/// The checkpoint tensor name of parameter port `port` ([`port_name`] undone).
pub fn tensor_name(port: &str) -> String {
    port.replace("__", ".")
}

/// Turns the constant `t` into the parameter `name` with the same value; quantized constants
/// cannot be trained.
fn param_of(name: &str, t: &Tensor, params: &mut Vec<Tensor>) -> Result<Tensor, LlmError> {
    let value = t
        .constant_value()
        .filter(|v| v.as_f32().is_some() || v.is_deferred())
        .ok_or_else(|| {
            LlmError::Invalid(format!(
                "weight {name} is not dense f32; load the model with dense weights \
                 (WeightFormat::Dense) to train it"
            ))
        })?;
    // a trained weight is held: deferred values are read once here
    let value = match value.data().values_f32()? {
        Some(v) if value.is_deferred() => HostArray::from_f32(value.shape(), v)?,
        _ => value.clone(),
    };
    let p = graph::parameter(&port_name(name), value)?;
    params.push(p.clone());
    Ok(p)
}

fn norm_param(
    stem: &str,
    w: &NormWeights,
    params: &mut Vec<Tensor>,
) -> Result<NormWeights, LlmError> {
    Ok(NormWeights {
        weight: param_of(&format!("{stem}.weight"), &w.weight, params)?,
        bias: w
            .bias
            .as_ref()
            .map(|b| param_of(&format!("{stem}.bias"), b, params))
            .transpose()?,
    })
}

fn opt_param(
    name: String,
    t: &Option<Tensor>,
    params: &mut Vec<Tensor>,
) -> Result<Option<Tensor>, LlmError> {
    t.as_ref().map(|t| param_of(&name, t, params)).transpose()
}

/// `w` with every weight a parameter (see the module comment for the names).
pub fn trainable(cfg: &LlmConfig, w: &ModelWeights) -> Result<TrainableModel, LlmError> {
    let mut params = Vec::new();
    let p = &mut params;
    let embed_const = param_of("model.embed_tokens.weight", &w.embed_const, p)?;
    let pos_embed = w
        .pos_embed
        .as_ref()
        .map(|a| {
            param_of(
                "model.embed_positions.weight",
                &graph::constant(a.clone()),
                p,
            )
        })
        .transpose()?;
    let mut layers = Vec::with_capacity(w.layers.len());
    for (i, lw) in w.layers.iter().enumerate() {
        let mut l = lw.clone();
        l.attn_norm = norm_param(&hf_layer(i, "input_layernorm"), &lw.attn_norm, p)?;
        l.qkv = param_of(&hf_layer(i, "self_attn.qkv_proj.weight"), &lw.qkv, p)?;
        l.qkv_bias = opt_param(hf_layer(i, "self_attn.qkv_proj.bias"), &lw.qkv_bias, p)?;
        l.q_norm = opt_param(hf_layer(i, "self_attn.q_norm.weight"), &lw.q_norm, p)?;
        l.k_norm = opt_param(hf_layer(i, "self_attn.k_norm.weight"), &lw.k_norm, p)?;
        l.o = param_of(&hf_layer(i, "self_attn.o_proj.weight"), &lw.o, p)?;
        l.o_bias = opt_param(hf_layer(i, "self_attn.o_proj.bias"), &lw.o_bias, p)?;
        if let Some(n) = &lw.post_attn_norm {
            l.post_attn_norm = Some(norm_param(&hf_layer(i, "post_attn_norm"), n, p)?);
        }
        l.mlp_norm = norm_param(&hf_layer(i, "post_attention_layernorm"), &lw.mlp_norm, p)?;
        if let Some(n) = &lw.post_mlp_norm {
            l.post_mlp_norm = Some(norm_param(&hf_layer(i, "post_mlp_norm"), n, p)?);
        }
        l.up = param_of(&hf_layer(i, "mlp.gate_up_proj.weight"), &lw.up, p)?;
        l.up_bias = opt_param(hf_layer(i, "mlp.gate_up_proj.bias"), &lw.up_bias, p)?;
        l.down = param_of(&hf_layer(i, "mlp.down_proj.weight"), &lw.down, p)?;
        l.down_bias = opt_param(hf_layer(i, "mlp.down_proj.bias"), &lw.down_bias, p)?;
        layers.push(l);
    }
    let final_norm = norm_param("model.norm", &w.final_norm, p)?;
    let head = if cfg.tied_embeddings {
        embed_const.clone()
    } else {
        param_of("lm_head.weight", &w.head, p)?
    };
    Ok(TrainableModel {
        weights: ModelWeights {
            embed_const,
            layers,
            final_norm,
            head,
            ..w.clone()
        },
        pos_embed,
        lora: Vec::new(),
        params,
    })
}

/// Rotary tables `[batch·seq, 1, hd]` for positions `0..seq` of every sequence, as constants.
fn rope_consts(
    inv_freq: &[f32],
    dims: usize,
    hd: usize,
    batch: usize,
    seq: usize,
) -> Result<(Tensor, Tensor), LlmError> {
    let n = batch * seq;
    let table = |cos: bool| -> Result<Tensor, LlmError> {
        let mut v = vec![0.0f32; n * hd];
        rope_rows(
            inv_freq,
            dims,
            hd,
            (0..batch).flat_map(|_| 0..seq),
            cos,
            &mut v,
        );
        Ok(graph::constant(HostArray::from_f32(&[n, 1, hd], v)?))
    };
    Ok((table(true)?, table(false)?))
}

/// The additive mask `[seq, seq]`: row `q` sees keys `j <= q` within `window` positions.
fn causal_mask(seq: usize, window: Option<usize>) -> Result<Tensor, LlmError> {
    let mut v = vec![0.0f32; seq * seq];
    for q in 0..seq {
        for j in 0..seq {
            let visible = j <= q && window.is_none_or(|w| q - j < w);
            if !visible {
                v[q * seq + j] = MASKED;
            }
        }
    }
    Ok(graph::constant(HostArray::from_f32(&[seq, seq], v)?))
}

/// `[B·T, n, hd]` → `[B, n, T, hd]`.
fn per_sequence(x: &Tensor, b: usize, t: usize) -> Result<Tensor, LlmError> {
    let (n, hd) = (x.shape()[1] as isize, x.shape()[2] as isize);
    Ok(x.reshape(&[b as isize, t as isize, n, hd])?
        .transpose(&[0, 2, 1, 3])?)
}

/// `[B, KV, T, hd]` repeated to `[B, KV·group, T, hd]` (each kv head serves `group` query heads).
fn repeat_kv(x: &Tensor, group: usize) -> Result<Tensor, LlmError> {
    if group == 1 {
        return Ok(x.clone());
    }
    let s: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    Ok(x.reshape(&[s[0], s[1], 1, s[2], s[3]])?
        .tile(&[1, 1, group, 1, 1])?
        .reshape(&[s[0], s[1] * group as isize, s[2], s[3]])?)
}

/// The mean next-token cross-entropy of `model` over a `[batch, seq]` batch (ports in the module
/// comment).
pub fn causal_lm_loss(
    cfg: &LlmConfig,
    model: &TrainableModel,
    batch: usize,
    seq: usize,
) -> Result<Tensor, LlmError> {
    Ok(causal_lm(cfg, model, batch, seq)?.loss)
}

/// The training graph of [`causal_lm_loss`] with the stretch of each decoder layer marked.
pub struct CausalLm {
    /// The mean next-token cross-entropy.
    pub loss: Tensor,
    /// Per decoder layer, its residual stream in and out: the segments to recompute in the
    /// backward for gradient checkpointing (`TrainerOptions::recompute`).
    pub layers: Vec<Segment>,
}

/// [`causal_lm_loss`] with the layers' segments.
pub fn causal_lm(
    cfg: &LlmConfig,
    model: &TrainableModel,
    batch: usize,
    seq: usize,
) -> Result<CausalLm, LlmError> {
    if batch == 0 || seq == 0 {
        return Err(LlmError::Invalid(format!(
            "a training batch needs at least one sequence of at least one token, got \
             [{batch}, {seq}]"
        )));
    }
    if seq > cfg.max_positions {
        return Err(LlmError::Invalid(format!(
            "training sequences of {seq} tokens are longer than the model's context of {} \
             positions",
            cfg.max_positions
        )));
    }
    let w = &model.weights;
    let n = batch * seq;
    let (h, kv, hd) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let group = h / kv;
    let rs = cfg.residual_scale();
    let ids = graph::input(INPUT_IDS, &[n], DType::I32)?;
    let mut x = w.embed_const.gather(&ids, 0)?;
    let scale = cfg.embed_scale.unwrap_or(1.0) * rs;
    if scale != 1.0 {
        x = x.mul_scalar(scale)?;
    }
    if let Some(pos) = &model.pos_embed {
        let positions: Vec<i32> = (0..batch).flat_map(|_| 0..seq as i32).collect();
        let at = graph::constant(HostArray::from_i32(&[n], positions)?);
        let mut p = pos.gather(&at, 0)?;
        if rs != 1.0 {
            p = p.mul_scalar(rs)?;
        }
        x = x.add(&p)?;
    }
    let tables = |r: &super::config::Rope| -> Result<_, LlmError> {
        let inv: Vec<f32> = r.inv_freq().iter().map(|&f| f as f32).collect();
        let (cos, sin) = rope_consts(&inv, r.dims, hd, batch, seq)?;
        Ok((cos, sin, rotate_half_matrix(hd, r.dims)?))
    };
    let global_rope = match &cfg.positions {
        Positions::Rope(r) => Some(tables(r)?),
        Positions::Learned { .. } => None,
    };
    let global_mask = causal_mask(seq, cfg.sliding_window)?;
    let local = match (&cfg.local_attention, &global_rope) {
        (Some(a), Some(_)) => Some((tables(&a.rope)?, causal_mask(seq, Some(a.window))?)),
        _ => None,
    };
    let mut layers = Vec::with_capacity(w.layers.len());
    for (l, lw) in w.layers.iter().enumerate() {
        let (rope, mask) = match &local {
            Some((r, m)) if cfg.is_local(l) => (Some(r), m),
            _ => (global_rope.as_ref(), &global_mask),
        };
        let rope = rope.map(|(cos, sin, rot)| Rope { cos, sin, rot });
        let opts = LayerOptions {
            lora: model.lora.get(l),
            sparse_expert_rows: 0,
        };
        let out = decoder_layer(cfg, lw, &x, rs, rope, opts, |q, k, v| {
            let q = per_sequence(&q, batch, seq)?;
            let k = repeat_kv(&per_sequence(&k, batch, seq)?, group)?;
            let v = repeat_kv(&per_sequence(&v, batch, seq)?, group)?;
            let att = attention(cfg, &q, &k, &v, mask)?;
            Ok(att
                .transpose(&[0, 2, 1, 3])?
                .reshape(&[n as isize, (h * hd) as isize])?)
        })?;
        layers.push(Segment::new(vec![x], vec![out.x.clone()]));
        x = out.x;
    }
    let x = norm_at(cfg, &x, &w.final_norm, rs)?;
    let logits = head_logits(cfg, &x, &w.head)?;
    let labels = graph::input(LABELS, &[n], DType::I32)?;
    let weights = graph::input(LABEL_WEIGHTS, &[n], DType::F32)?;
    Ok(CausalLm {
        loss: weighted_cross_entropy(&logits, &labels, &weights)?,
        layers,
    })
}

/// The host side of one batch: token ids and transformers-style labels (`-100` = not predicted)
/// turned into the ports of [`causal_lm_loss`].
#[derive(Clone, Debug, PartialEq)]
pub struct TrainBatch {
    pub batch: usize,
    pub seq: usize,
    pub input_ids: Vec<i32>,
    pub labels: Vec<i32>,
    pub label_weights: Vec<f32>,
    /// Positions whose next token is predicted.
    pub counted: usize,
}

impl TrainBatch {
    /// `ids` and `labels` are `[batch, seq]` row-major; position `t` of a row is trained to
    /// predict `labels[t + 1]` (transformers' shift), and the last position of each row
    /// predicts nothing.
    pub fn new(
        batch: usize,
        seq: usize,
        ids: &[u32],
        labels: &[i64],
        vocab: usize,
    ) -> Result<TrainBatch, LlmError> {
        let n = batch * seq;
        if ids.len() != n || labels.len() != n {
            return Err(LlmError::Invalid(format!(
                "a [{batch}, {seq}] batch needs {n} token ids and {n} labels, got {} and {}",
                ids.len(),
                labels.len()
            )));
        }
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(LlmError::Invalid(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let mut targets = vec![0i32; n];
        let mut counted = vec![false; n];
        for r in 0..batch {
            for t in 0..seq.saturating_sub(1) {
                let label = labels[r * seq + t + 1];
                if label == IGNORE_INDEX {
                    continue;
                }
                if label < 0 || label as usize >= vocab {
                    return Err(LlmError::Invalid(format!(
                        "label {label} (row {r}, position {}) is neither a token id below {vocab} \
                         nor {IGNORE_INDEX}",
                        t + 1
                    )));
                }
                targets[r * seq + t] = label as i32;
                counted[r * seq + t] = true;
            }
        }
        let count = counted.iter().filter(|&&c| c).count();
        if count == 0 {
            return Err(LlmError::Invalid(format!(
                "the [{batch}, {seq}] batch has no position whose next token is trained (every \
                 label is {IGNORE_INDEX}, or the sequences are one token long)"
            )));
        }
        let w = 1.0 / count as f32;
        Ok(TrainBatch {
            batch,
            seq,
            input_ids: ids.iter().map(|&i| i as i32).collect(),
            labels: targets,
            label_weights: counted.iter().map(|&c| if c { w } else { 0.0 }).collect(),
            counted: count,
        })
    }

    /// Rows `rows` of this batch as a micro-batch of gradient accumulation: the label weights stay
    /// normalised over the whole batch, so the micro-batch losses sum to the batch's loss.
    pub fn rows(&self, rows: std::ops::Range<usize>) -> TrainBatch {
        let span = rows.start * self.seq..rows.end * self.seq;
        TrainBatch {
            batch: rows.len(),
            seq: self.seq,
            input_ids: self.input_ids[span.clone()].to_vec(),
            labels: self.labels[span.clone()].to_vec(),
            label_weights: self.label_weights[span.clone()].to_vec(),
            counted: self.label_weights[span]
                .iter()
                .filter(|&&w| w != 0.0)
                .count(),
        }
    }

    /// The batch's ports for [`aneforge::train::Trainer::step`].
    pub fn ports(&self) -> Vec<(&'static str, aneforge::engine::HostSlice<'_>)> {
        use aneforge::engine::HostSlice;
        vec![
            (INPUT_IDS, HostSlice::I32(&self.input_ids)),
            (LABELS, HostSlice::I32(&self.labels)),
            (LABEL_WEIGHTS, HostSlice::F32(&self.label_weights)),
        ]
    }
}

/// `params` (as [`aneforge::train::Trainer::read_params`] gives them) as checkpoint tensors:
/// LoRA adapters under their PEFT names as they are, every other parameter as the tensors of
/// the family's Hugging Face checkpoint (`weights::export`).
pub fn checkpoint_tensors(
    cfg: &LlmConfig,
    params: Vec<aneforge::train::NamedArray>,
) -> Result<Vec<aneforge::train::NamedArray>, LlmError> {
    let mut out = Vec::with_capacity(params.len());
    for (port, shape, data) in params {
        let name = tensor_name(&port);
        if name.starts_with(super::lora::ADAPTER_PREFIX) {
            out.push((name, shape, data));
        } else {
            out.extend(super::weights::hf_tensors(cfg, &name, shape, data)?);
        }
    }
    Ok(out)
}

/// The parameters of `model` at their initial values, named and shaped as
/// [`aneforge::train::Trainer::read_params`] gives them (so [`checkpoint_tensors`] writes an
/// untrained or merged model as it writes a trained one).
pub fn initial_params(
    model: &TrainableModel,
) -> Result<Vec<aneforge::train::NamedArray>, LlmError> {
    model
        .params
        .iter()
        .map(|p| match p.op() {
            graph::Op::Parameter { name, init } => {
                let values = init.as_f32().ok_or_else(|| {
                    LlmError::Internal(format!("parameter {name} is not dense f32"))
                })?;
                Ok((name.clone(), init.shape().to_vec(), values.to_vec()))
            }
            _ => Err(LlmError::Internal(
                "a model parameter is not a parameter leaf".into(),
            )),
        })
        .collect()
}

/// Writes f32 `tensors` as a safetensors file (`format: pt` metadata, as transformers and PEFT
/// write), atomically, streaming the values.
pub fn save_safetensors(
    path: &std::path::Path,
    tensors: &[aneforge::train::NamedArray],
) -> Result<(), LlmError> {
    let views: Vec<(&str, &[usize], &[f32])> = tensors
        .iter()
        .map(|(name, shape, data)| (name.as_str(), shape.as_slice(), data.as_slice()))
        .collect();
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| LlmError::Invalid(format!("creating {}: {e}", dir.display())))?;
    }
    aneforge::output::write_safetensors_f32(path, &views, meta)
        .map_err(|e| LlmError::Invalid(format!("writing {}: {e}", path.display())))
}
