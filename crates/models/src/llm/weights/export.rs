//! Trained parameters written back as a Hugging Face checkpoint: the loader's reading undone
//! through the same [`NameMap`], so a family's export uses exactly the names, row splits, matrix
//! orientation and norm convention its loader reads.
//!
//! Training names its parameters Llama-style with the loader's fused projections kept fused
//! (`model.layers.N.self_attn.qkv_proj`, `model.layers.N.mlp.gate_up_proj`, Gemma 3's extra norms
//! as `post_attn_norm` / `post_mlp_norm`, learned positions as `model.embed_positions`); see
//! [`crate::llm::training::trainable`]. A tied head is the embedding parameter and is written
//! once, under the embedding's name, as transformers saves it.

use aneforge::train::NamedArray;

use super::names::{NameMap, Part};
use super::transposed;
use crate::llm::config::{Family, LlmConfig, MlpKind, NormKind};
use crate::llm::LlmError;

/// The layer stems of training's parameter names and the part each holds.
const LAYER_STEMS: [(&str, Part); 10] = [
    ("input_layernorm", Part::AttnNorm),
    ("self_attn.qkv_proj", Part::Qkv),
    ("self_attn.q_norm", Part::QNorm),
    ("self_attn.k_norm", Part::KNorm),
    ("self_attn.o_proj", Part::O),
    ("post_attn_norm", Part::PostAttnNorm),
    ("post_attention_layernorm", Part::MlpNorm),
    ("post_mlp_norm", Part::PostMlpNorm),
    ("mlp.gate_up_proj", Part::GateUp),
    ("mlp.down_proj", Part::Down),
];

/// The names transformers gives `cfg`'s family (GPT-2 as `GPT2LMHeadModel` saves it).
pub(super) fn hf_names(family: Family, gpt2_prefix: &str) -> NameMap {
    match family {
        Family::Gpt2 => NameMap::hf_gpt2(gpt2_prefix),
        Family::Gemma2 | Family::Gemma3 => NameMap::hf_gemma3(),
        Family::Mixtral => NameMap::hf_mixtral(),
        Family::Phi3 => NameMap::hf_phi3(),
        _ => NameMap::hf(),
    }
}

fn is_norm(part: Part) -> bool {
    matches!(
        part,
        Part::AttnNorm
            | Part::QNorm
            | Part::KNorm
            | Part::PostAttnNorm
            | Part::MlpNorm
            | Part::PostMlpNorm
    )
}

/// Whether fine-tuned weights of `cfg` can be written as its Hugging Face checkpoint: every
/// family's can except mixtures of experts, whose experts are not trained.
pub fn check_export(cfg: &LlmConfig) -> Result<(), LlmError> {
    if cfg.experts.is_some() {
        return Err(LlmError::Invalid(format!(
            "writing fine-tuned {:?} weights is not supported: mixture-of-experts layers are \
             not trained; train LoRA adapters instead (--lora-rank)",
            cfg.family
        )));
    }
    Ok(())
}

/// Training parameter `name` (`shape`, `data`) as the tensors of `cfg`'s Hugging Face
/// checkpoint: renamed, fused projections split where the family stores them apart, GPT-2's
/// matrices back to Conv1D's `[in, out]`, and `1 + w` norms (Gemma) stored as `w`.
pub fn hf_tensors(
    cfg: &LlmConfig,
    name: &str,
    shape: Vec<usize>,
    data: Vec<f32>,
) -> Result<Vec<NamedArray>, LlmError> {
    check_export(cfg)?;
    let names = hf_names(cfg.family, "transformer.");
    let minus_one = matches!(cfg.norm, NormKind::Rms { plus_one: true, .. });
    let unknown = || {
        LlmError::Internal(format!(
            "parameter {name} has no Hugging Face name for {:?}",
            cfg.family
        ))
    };
    let norm_value = |data: Vec<f32>| -> Vec<f32> {
        if minus_one {
            data.into_iter().map(|w| w - 1.0).collect()
        } else {
            data
        }
    };
    let norm = format!("{}.weight", names.final_norm);
    let top = match name {
        "model.embed_tokens.weight" => Some(names.embed.clone()),
        "model.embed_positions.weight" => Some(names.positions.clone().ok_or_else(unknown)?),
        "lm_head.weight" => Some(names.head.clone()),
        "model.norm.weight" => Some(norm.clone()),
        "model.norm.bias" => Some(format!("{}.bias", names.final_norm)),
        _ => None,
    };
    if let Some(hf) = top {
        let data = if hf == norm { norm_value(data) } else { data };
        return Ok(vec![(hf, shape, data)]);
    }
    let rest = name.strip_prefix("model.layers.").ok_or_else(unknown)?;
    let (layer, rest) = rest.split_once('.').ok_or_else(unknown)?;
    let layer: usize = layer.parse().map_err(|_| unknown())?;
    let (stem, suffix) = rest.rsplit_once('.').ok_or_else(unknown)?;
    let part = LAYER_STEMS
        .iter()
        .find(|(s, _)| *s == stem)
        .map(|(_, p)| *p)
        .ok_or_else(unknown)?;
    let (h, kv, hd) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let inter = cfg.intermediate_size;
    let parts: Vec<(Part, usize)> = match part {
        Part::Qkv if !names.has(Part::Qkv) => {
            vec![(Part::Q, h * hd), (Part::K, kv * hd), (Part::V, kv * hd)]
        }
        Part::GateUp if !names.has(Part::GateUp) => match cfg.mlp {
            MlpKind::Gated(_) => vec![(Part::Gate, inter), (Part::Up, inter)],
            MlpKind::Plain(_) => vec![(Part::Up, inter)],
        },
        p => vec![(p, shape.first().copied().unwrap_or(0))],
    };
    let data = if is_norm(part) && suffix == "weight" {
        norm_value(data)
    } else {
        data
    };
    let cols: usize = shape.get(1..).unwrap_or(&[]).iter().product();
    let rows: usize = parts.iter().map(|(_, r)| r).sum();
    if shape.first() != Some(&rows) || data.len() != rows * cols {
        return Err(LlmError::Internal(format!(
            "parameter {name} has shape {shape:?}, expected {rows} rows"
        )));
    }
    let mut out = Vec::with_capacity(parts.len());
    let mut start = 0;
    for (p, r) in parts {
        let hf = format!("{}.{suffix}", names.layer(layer, p)?);
        let mut s = shape.clone();
        s[0] = r;
        let mut d = data[start * cols..(start + r) * cols].to_vec();
        start += r;
        if names.transposed && s.len() == 2 {
            d = transposed(s[0], s[1], &d);
            s.swap(0, 1);
        }
        out.push((hf, s, d));
    }
    Ok(out)
}
