//! One hyperparameter set for every decoder family, read from a Hugging Face `config.json` or from
//! GGUF metadata. Family differences become explicit fields (norm kind, MLP shape, positions,
//! biases, q/k norms, embedding scale) that the step graph follows.

use std::path::{Path, PathBuf};

pub use crate::activation::Activation;
use crate::config::{ConfigError, ModelConfig};
use crate::gguf::{GgufError, GgufFile, MetaValue};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Gemma,
    Gemma3,
    Gpt2,
    Qwen3Moe,
    Mixtral,
    Phi3,
    Gemma2,
    Qwen2Moe,
    Olmoe,
}

impl Family {
    pub const SUPPORTED_HF: [&'static str; 13] = [
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma3_text",
        "gpt2",
        "qwen3_moe",
        "mixtral",
        "phi3",
        "gemma2",
        "qwen2_moe",
        "olmoe",
    ];
    /// GGUF architectures (Mixtral files say `llama` and hold expert tensors).
    pub const SUPPORTED_GGUF: [&'static str; 11] = [
        "llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gpt2", "qwen3moe", "phi3",
        "qwen2moe", "olmoe",
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma => "gemma",
            Family::Gemma3 => "gemma3",
            Family::Gpt2 => "gpt2",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Mixtral => "mixtral",
            Family::Phi3 => "phi3",
            Family::Gemma2 => "gemma2",
            Family::Qwen2Moe => "qwen2_moe",
            Family::Olmoe => "olmoe",
        }
    }

    /// Gemma's conventions: `(1 + w)` norms, √hidden embedding scale, tied embeddings.
    pub fn is_gemma(self) -> bool {
        matches!(self, Family::Gemma | Family::Gemma2 | Family::Gemma3)
    }
}

/// Sliding-window attention layers with their own RoPE, interleaved with global layers (Gemma 3:
/// five local layers of a 512-position window for each global one).
#[derive(Debug, Clone, PartialEq)]
pub struct LocalAttention {
    /// Keys at most this many positions back are visible.
    pub window: usize,
    /// `local[l]`: layer `l` is a sliding-window layer.
    pub local: Vec<bool>,
    /// The local layers' rotary embedding (global layers use [`LlmConfig::positions`]).
    pub rope: Rope,
}

/// Gemma 2's layer pattern when a checkpoint does not list it: every other layer is global.
pub const GEMMA2_GLOBAL_EVERY: usize = 2;
/// Gemma 3's layer pattern when a checkpoint does not list it: every sixth layer is global.
pub const GEMMA3_GLOBAL_EVERY: usize = 6;
/// Gemma 3's local RoPE base when a checkpoint does not give it.
pub const GEMMA3_LOCAL_THETA: f64 = 10_000.0;

/// A sparse mixture of experts in place of a layer's MLP (Mixtral, Qwen3-MoE, Qwen2-MoE, OLMoE):
/// a router picks `top_k` of `count` gated MLPs per token by softmax probability, and their
/// outputs are summed weighted by those probabilities. Which layers have one:
/// [`LlmConfig::dense_layers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Experts {
    pub count: usize,
    pub top_k: usize,
    /// Each expert's intermediate size.
    pub size: usize,
    /// The chosen probabilities are divided by their sum (Mixtral always; Qwen3-MoE's,
    /// Qwen2-MoE's and OLMoE's `norm_topk_prob`), which equals a softmax over the top-k router
    /// logits.
    pub norm_top_k: bool,
    /// The intermediate size of a shared expert every token goes through besides its chosen
    /// ones, its output scaled by `sigmoid(shared_expert_gate(x))`, a one-output linear
    /// (Qwen2-MoE).
    pub shared: Option<usize>,
}

/// Where q and k are RMS-normalised (before RoPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// Each head over `head_dim` (Qwen3, Gemma 3).
    Head,
    /// The whole projection, every head at once: a `heads·head_dim` weight (OLMoE).
    Whole,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NormKind {
    /// `x · rsqrt(mean(x²) + eps) · w`, or `· (1 + w)` when `plus_one` (Gemma's checkpoints).
    Rms { eps: f32, plus_one: bool },
    /// LayerNorm with weight and bias.
    Layer { eps: f32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpKind {
    /// `down(act(gate(x)) · up(x))`.
    Gated(Activation),
    /// `down(act(up(x)))` (GPT-2's `c_fc`, `c_proj`).
    Plain(Activation),
}

#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor`.
    Linear {
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_positions: f64,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    pub theta: f64,
    /// Rotated dimensions per head (the first `dims` of `head_dim`), even.
    pub dims: usize,
    pub scaling: RopeScaling,
}

impl Rope {
    /// The inverse frequencies of the `dims / 2` rotated pairs, as transformers computes them.
    pub fn inv_freq(&self) -> Vec<f64> {
        let half = self.dims / 2;
        let base: Vec<f64> = (0..half)
            .map(|i| {
                // transformers: 1 / theta^(arange(0, dim, 2, int64).float() / dim), in f32
                let exponent = ((2 * i) as f32 / self.dims as f32) as f64;
                (1.0 / (self.theta as f32).powf(exponent as f32)) as f64
            })
            .collect();
        match &self.scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_positions,
            } => {
                let low_wavelen = original_max_positions / low_freq_factor;
                let high_wavelen = original_max_positions / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_max_positions / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Positions {
    Rope(Rope),
    /// A learned table of `max` position embeddings added to the token embeddings (GPT-2).
    Learned {
        max: usize,
    },
}

/// Where a model's hyperparameters came from, for error messages.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigSource {
    HfConfig(PathBuf),
    Gguf(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct LlmConfig {
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub norm: NormKind,
    pub mlp: MlpKind,
    pub positions: Positions,
    /// Biases on the q, k, v projections.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub o_bias: bool,
    pub mlp_bias: bool,
    /// RMSNorm of the queries and keys before RoPE (Qwen3: each head; OLMoE: the whole
    /// projection).
    pub qk_norm: QkNorm,
    /// Token embeddings multiplied by this (Gemma: √hidden_size).
    pub embed_scale: Option<f32>,
    /// The output head is the token embedding matrix.
    pub tied_embeddings: bool,
    pub max_positions: usize,
    /// Keys at most this many positions back are visible (Mistral).
    pub sliding_window: Option<usize>,
    /// Sliding-window layers interleaved with global ones (Gemma 3).
    pub local_attention: Option<LocalAttention>,
    /// Each sublayer's output is normalised before the residual add (Gemma 3's post-attention and
    /// post-feedforward norms).
    pub post_norms: bool,
    /// Attention logits are scaled by this instead of `1/√head_dim` (Gemma 3's
    /// `query_pre_attn_scalar^-½`).
    pub attn_scale: Option<f32>,
    /// A mixture of experts replaces the MLP of every layer not in [`Self::dense_layers`].
    pub experts: Option<Experts>,
    /// With [`Self::experts`], the layers that keep a dense MLP of `intermediate_size`
    /// (Qwen2-MoE's and Qwen3-MoE's `mlp_only_layers` and `decoder_sparse_step`), ascending.
    pub dense_layers: Vec<usize>,
    /// Attention logits become `cap · tanh(logit / cap)` before the mask (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Output logits become `cap · tanh(logit / cap)` (Gemma 2).
    pub final_softcap: Option<f32>,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub source: ConfigSource,
}

#[derive(Debug, thiserror::Error)]
pub enum LlmConfigError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{}: unsupported architecture '{found}' (supported: {})", path.display(), supported.join(", "))]
    UnsupportedArchitecture {
        path: PathBuf,
        found: String,
        supported: Vec<String>,
    },
    #[error("{}: '{field}': {reason}", path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        reason: String,
    },
}

/// The most decoder layers a mixture-of-experts config may declare (the largest released models
/// have about a hundred).
const MAX_LAYERS: usize = 1 << 16;

fn invalid(path: &Path, field: &str, reason: impl Into<String>) -> LlmConfigError {
    LlmConfigError::Invalid {
        path: path.to_path_buf(),
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// `eos_token_id` as an integer or a list of integers.
fn token_ids(c: &ModelConfig, field: &str) -> Result<Vec<u32>, LlmConfigError> {
    match c.value().get(field) {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Array(_)) => Ok(c.require::<Vec<u32>>(field)?),
        Some(_) => Ok(vec![c.require::<u32>(field)?]),
    }
}

/// `value` of `field` if it is a finite number > 0 (epsilons, rope bases, scaling factors).
fn finite_positive(path: &Path, field: &str, value: f64) -> Result<f64, LlmConfigError> {
    if value.is_finite() && value > 0.0 {
        return Ok(value);
    }
    Err(invalid(
        path,
        field,
        format!("must be a finite number > 0, found {value}"),
    ))
}

fn positive(c: &ModelConfig, field: &str) -> Result<usize, LlmConfigError> {
    let v: usize = c.require(field)?;
    if v == 0 {
        return Err(invalid(c.path(), field, "must be positive"));
    }
    Ok(v)
}

fn optional_positive(c: &ModelConfig, field: &str) -> Result<Option<usize>, LlmConfigError> {
    match c.get::<usize>(field)? {
        Some(0) => Err(invalid(c.path(), field, "must be positive")),
        other => Ok(other),
    }
}

/// `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (older configs).
fn hf_rope(c: &ModelConfig, head_dim: usize, default_theta: f64) -> Result<Rope, LlmConfigError> {
    hf_rope_of(c, "full_attention", head_dim, default_theta)
}

/// The rotary embedding of one layer type: `rope_parameters` may hold one set per layer type
/// (`full_attention`, `sliding_attention`: Gemma 3 in transformers 5).
fn hf_rope_of(
    c: &ModelConfig,
    layer_type: &str,
    head_dim: usize,
    default_theta: f64,
) -> Result<Rope, LlmConfigError> {
    let path = c.path();
    let params = c
        .value()
        .get("rope_parameters")
        .filter(|v| !v.is_null())
        .or_else(|| c.value().get("rope_scaling").filter(|v| !v.is_null()));
    let params = match params.and_then(|p| p.get(layer_type)) {
        Some(per_type) => Some(per_type),
        None => params,
    };
    let field = |name: &str| -> Option<&serde_json::Value> { params.and_then(|p| p.get(name)) };
    let num = |name: &str| -> Result<Option<f64>, LlmConfigError> {
        match field(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                invalid(
                    path,
                    &format!("rope.{name}"),
                    format!("expected a number, found {v}"),
                )
            }),
        }
    };
    let theta = match num("rope_theta")? {
        Some(t) => t,
        None => c.get::<f64>("rope_theta")?.unwrap_or(default_theta),
    };
    let theta = finite_positive(path, "rope_theta", theta)?;
    let kind = field("rope_type")
        .or_else(|| field("type"))
        .and_then(|v| v.as_str())
        .unwrap_or("default")
        .to_string();
    let factor = || -> Result<f64, LlmConfigError> {
        num("factor")?
            .filter(|f| f.is_finite() && *f > 0.0)
            .ok_or_else(|| {
                invalid(
                    path,
                    "rope.factor",
                    format!("rope type '{kind}' needs a positive factor"),
                )
            })
    };
    let scaling = match kind.as_str() {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: factor()? },
        "llama3" => {
            let req = |name: &str| -> Result<f64, LlmConfigError> {
                num(name)?.ok_or_else(|| {
                    invalid(
                        path,
                        &format!("rope.{name}"),
                        "missing for rope type 'llama3'",
                    )
                })
            };
            let (low, high) = (req("low_freq_factor")?, req("high_freq_factor")?);
            if high <= low {
                return Err(invalid(
                    path,
                    "rope.high_freq_factor",
                    "must exceed low_freq_factor",
                ));
            }
            RopeScaling::Llama3 {
                factor: factor()?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_positions: req("original_max_position_embeddings")?,
            }
        }
        other => {
            return Err(invalid(
                path,
                "rope_type",
                format!("'{other}' is not supported (default, linear, llama3 are)"),
            ))
        }
    };
    let partial = match num("partial_rotary_factor")? {
        Some(p) => p,
        None => c.get::<f64>("partial_rotary_factor")?.unwrap_or(1.0),
    };
    let dims = ((head_dim as f64) * partial) as usize;
    if dims == 0 || !dims.is_multiple_of(2) || dims > head_dim {
        return Err(invalid(
            path,
            "partial_rotary_factor",
            format!("gives {dims} rotary dimensions for head dimension {head_dim}"),
        ));
    }
    Ok(Rope {
        theta,
        dims,
        scaling,
    })
}

/// The experts of a mixture-of-experts `config.json` and the layers that keep a dense MLP;
/// `None` for other families.
fn hf_experts(
    c: &ModelConfig,
    family: Family,
    n_layers: usize,
) -> Result<(Option<Experts>, Vec<usize>), LlmConfigError> {
    let path = c.path();
    // published checkpoints say num_experts; transformers 5 writes num_local_experts for
    // Qwen3-MoE
    let count_field = || {
        if c.value().get("num_experts").is_some() {
            "num_experts"
        } else {
            "num_local_experts"
        }
    };
    let (count_field, size_field, norm_top_k) = match family {
        Family::Mixtral => ("num_local_experts", "intermediate_size", true),
        Family::Qwen3Moe | Family::Qwen2Moe => (count_field(), "moe_intermediate_size", false),
        Family::Olmoe => (count_field(), "intermediate_size", false),
        _ => return Ok((None, Vec::new())),
    };
    let norm_top_k = match family {
        Family::Mixtral => norm_top_k,
        _ => c.get::<bool>("norm_topk_prob")?.unwrap_or(false),
    };
    let shared = match family {
        // transformers' default when a config does not say
        Family::Qwen2Moe => {
            Some(optional_positive(c, "shared_expert_intermediate_size")?.unwrap_or(5632))
        }
        _ => None,
    };
    // transformers: layer l is sparse unless listed in mlp_only_layers or
    // (l + 1) % decoder_sparse_step != 0
    let dense_layers = match family {
        Family::Qwen3Moe | Family::Qwen2Moe => {
            let step = c.get::<usize>("decoder_sparse_step")?.unwrap_or(1);
            if step == 0 {
                return Err(invalid(path, "decoder_sparse_step", "must be positive"));
            }
            let only = c.get::<Vec<usize>>("mlp_only_layers")?.unwrap_or_default();
            // the layers are listed one by one below, so a count no model has is refused here
            // rather than looped over
            if n_layers > MAX_LAYERS {
                return Err(invalid(
                    path,
                    "num_hidden_layers",
                    format!("{n_layers} is more than any model has (at most {MAX_LAYERS})"),
                ));
            }
            (0..n_layers)
                .filter(|l| only.contains(l) || (l + 1) % step != 0)
                .collect()
        }
        _ => Vec::new(),
    };
    let experts = experts_of(
        path,
        count_field,
        positive(c, count_field)?,
        positive(c, "num_experts_per_tok")?,
        positive(c, size_field)?,
        norm_top_k,
    )?;
    Ok((Some(Experts { shared, ..experts }), dense_layers))
}

/// Checks that `top_k` of `count` experts can be chosen.
fn experts_of(
    path: &Path,
    count_field: &str,
    count: usize,
    top_k: usize,
    size: usize,
    norm_top_k: bool,
) -> Result<Experts, LlmConfigError> {
    if top_k > count {
        return Err(invalid(
            path,
            count_field,
            format!("{count} experts cannot supply {top_k} per token"),
        ));
    }
    Ok(Experts {
        count,
        top_k,
        size,
        norm_top_k,
        shared: None,
    })
}

impl LlmConfig {
    /// From a Hugging Face `config.json` (a file or a model directory).
    pub fn from_hf(c: &ModelConfig) -> Result<LlmConfig, LlmConfigError> {
        let path = c.path().to_path_buf();
        let model_type = c.model_type().unwrap_or("<missing>");
        let family = match model_type {
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "gemma" => Family::Gemma,
            "gemma3_text" => Family::Gemma3,
            "gpt2" => Family::Gpt2,
            "qwen3_moe" => Family::Qwen3Moe,
            "mixtral" => Family::Mixtral,
            "phi3" => Family::Phi3,
            "gemma2" => Family::Gemma2,
            "qwen2_moe" => Family::Qwen2Moe,
            "olmoe" => Family::Olmoe,
            other => {
                return Err(LlmConfigError::UnsupportedArchitecture {
                    path,
                    found: other.to_string(),
                    supported: Family::SUPPORTED_HF.iter().map(|s| s.to_string()).collect(),
                })
            }
        };
        let mut eos = token_ids(c, "eos_token_id")?;
        eos.dedup();
        let bos = token_ids(c, "bos_token_id")?.first().copied();
        let vocab_size = positive(c, "vocab_size")?;
        if family == Family::Gpt2 {
            return Self::gpt2_from_hf(c, vocab_size, bos, eos);
        }
        let hidden_size = positive(c, "hidden_size")?;
        let n_heads = positive(c, "num_attention_heads")?;
        let n_kv_heads = optional_positive(c, "num_key_value_heads")?.unwrap_or(n_heads);
        if !n_heads.is_multiple_of(n_kv_heads) {
            return Err(invalid(
                &path,
                "num_key_value_heads",
                format!("{n_heads} heads cannot share {n_kv_heads} key/value heads"),
            ));
        }
        let head_dim = match optional_positive(c, "head_dim")? {
            Some(d) => d,
            None if hidden_size.is_multiple_of(n_heads) => hidden_size / n_heads,
            None => {
                return Err(invalid(
                    &path,
                    "hidden_size",
                    format!("{hidden_size} is not divisible by {n_heads} heads"),
                ))
            }
        };
        let act_name: Option<String> = match family {
            Family::Gemma | Family::Gemma2 | Family::Gemma3 => {
                c.get("hidden_activation")?.or(c.get("hidden_act")?)
            }
            _ => c.get("hidden_act")?,
        };
        let act_name = act_name.unwrap_or_else(|| "silu".into());
        let act = match (family, act_name.as_str()) {
            // legacy Gemma configs say "gelu" and mean the tanh approximation (as transformers)
            (Family::Gemma | Family::Gemma2 | Family::Gemma3, "gelu") => Activation::GeluTanh,
            (_, name) => Activation::parse(name).ok_or_else(|| {
                invalid(&path, "hidden_act", format!("'{name}' is not supported"))
            })?,
        };
        let attention_bias: bool = c.get("attention_bias")?.unwrap_or(false);
        let (qkv_bias, o_bias) = match family {
            Family::Qwen2 => (true, false),
            Family::Qwen2Moe => (c.get("qkv_bias")?.unwrap_or(true), false),
            _ => (attention_bias, attention_bias),
        };
        if family == Family::Olmoe && c.get::<f64>("clip_qkv")?.is_some() {
            return Err(invalid(
                &path,
                "clip_qkv",
                "clipping q, k and v is not supported",
            ));
        }
        let eps = c.get::<f64>("rms_norm_eps")?.unwrap_or(1e-6);
        let eps = finite_positive(&path, "rms_norm_eps", eps)? as f32;
        let default_theta = 10_000.0;
        let rope = hf_rope(c, head_dim, default_theta)?;
        let sliding_window = match family {
            Family::Mistral | Family::Mixtral | Family::Phi3 => {
                optional_positive(c, "sliding_window")?
            }
            Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe | Family::Qwen2Moe => {
                if c.get::<bool>("use_sliding_window")?.unwrap_or(false) {
                    return Err(invalid(
                        &path,
                        "use_sliding_window",
                        "per-layer sliding windows are not supported",
                    ));
                }
                None
            }
            _ => None,
        };
        if family == Family::Gemma3 {
            for field in ["final_logit_softcapping", "attn_logit_softcapping"] {
                if c.get::<f64>(field)?.is_some() {
                    return Err(invalid(&path, field, "logit soft-capping is not supported"));
                }
            }
        }
        let softcap = |field: &str| -> Result<Option<f32>, LlmConfigError> {
            match c.get::<f64>(field)? {
                Some(v) => Ok(Some(finite_positive(&path, field, v)? as f32)),
                None => Ok(None),
            }
        };
        let (attn_softcap, final_softcap) = match family {
            Family::Gemma2 => (
                softcap("attn_logit_softcapping")?,
                softcap("final_logit_softcapping")?,
            ),
            _ => (None, None),
        };
        let local_attention = if matches!(family, Family::Gemma2 | Family::Gemma3) {
            let n_layers = positive(c, "num_hidden_layers")?;
            let window = positive(c, "sliding_window")?;
            let local = match c.get::<Vec<String>>("layer_types")? {
                Some(types) => {
                    if types.len() != n_layers {
                        return Err(invalid(
                            &path,
                            "layer_types",
                            format!("{} entries for {n_layers} layers", types.len()),
                        ));
                    }
                    types
                        .iter()
                        .map(|t| match t.as_str() {
                            "sliding_attention" => Ok(true),
                            "full_attention" => Ok(false),
                            other => Err(invalid(
                                &path,
                                "layer_types",
                                format!("'{other}' is not sliding_attention or full_attention"),
                            )),
                        })
                        .collect::<Result<Vec<_>, _>>()?
                }
                None => {
                    let default = match family {
                        Family::Gemma2 => GEMMA2_GLOBAL_EVERY,
                        _ => GEMMA3_GLOBAL_EVERY,
                    };
                    let every = optional_positive(c, "sliding_window_pattern")?.unwrap_or(default);
                    (0..n_layers).map(|l| (l + 1) % every != 0).collect()
                }
            };
            let per_type = c
                .value()
                .get("rope_parameters")
                .is_some_and(|p| p.get("sliding_attention").is_some());
            // Gemma 2's local layers rotate as its global ones do
            let rope = if family == Family::Gemma2 {
                rope.clone()
            } else if per_type {
                hf_rope_of(c, "sliding_attention", head_dim, GEMMA3_LOCAL_THETA)?
            } else {
                let theta = c
                    .get::<f64>("rope_local_base_freq")?
                    .unwrap_or(GEMMA3_LOCAL_THETA);
                Rope {
                    theta: finite_positive(&path, "rope_local_base_freq", theta)?,
                    dims: rope.dims,
                    scaling: RopeScaling::None,
                }
            };
            Some(LocalAttention {
                window,
                local,
                rope,
            })
        } else {
            None
        };
        let attn_scale = match family {
            Family::Gemma2 | Family::Gemma3 => match c.get::<f64>("query_pre_attn_scalar")? {
                Some(q) => {
                    Some((1.0 / finite_positive(&path, "query_pre_attn_scalar", q)?.sqrt()) as f32)
                }
                None => None,
            },
            _ => None,
        };
        let n_layers = positive(c, "num_hidden_layers")?;
        let (experts, dense_layers) = hf_experts(c, family, n_layers)?;
        let qk_norm = match family {
            Family::Qwen3 | Family::Qwen3Moe | Family::Gemma3 => QkNorm::Head,
            Family::Olmoe => QkNorm::Whole,
            _ => QkNorm::None,
        };
        let tied_default = family.is_gemma();
        Ok(LlmConfig {
            family,
            vocab_size,
            hidden_size,
            intermediate_size: positive(c, "intermediate_size")?,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            norm: NormKind::Rms {
                eps,
                plus_one: family.is_gemma(),
            },
            mlp: MlpKind::Gated(act),
            positions: Positions::Rope(rope),
            qkv_bias,
            o_bias,
            mlp_bias: c.get("mlp_bias")?.unwrap_or(false),
            qk_norm,
            embed_scale: family.is_gemma().then(|| (hidden_size as f32).sqrt()),
            tied_embeddings: c.get("tie_word_embeddings")?.unwrap_or(tied_default),
            max_positions: positive(c, "max_position_embeddings")?,
            sliding_window,
            local_attention,
            post_norms: matches!(family, Family::Gemma2 | Family::Gemma3),
            attn_scale,
            experts,
            dense_layers,
            attn_softcap,
            final_softcap,
            bos_token_id: bos,
            eos_token_ids: eos,
            source: ConfigSource::HfConfig(path),
        })
    }

    fn gpt2_from_hf(
        c: &ModelConfig,
        vocab_size: usize,
        bos: Option<u32>,
        eos: Vec<u32>,
    ) -> Result<LlmConfig, LlmConfigError> {
        let path = c.path().to_path_buf();
        let hidden_size = positive(c, "n_embd")?;
        let n_heads = positive(c, "n_head")?;
        if !hidden_size.is_multiple_of(n_heads) {
            return Err(invalid(
                &path,
                "n_embd",
                format!("{hidden_size} is not divisible by {n_heads} heads"),
            ));
        }
        if c.get::<bool>("scale_attn_by_inverse_layer_idx")?
            .unwrap_or(false)
        {
            return Err(invalid(
                &path,
                "scale_attn_by_inverse_layer_idx",
                "not supported",
            ));
        }
        if !c.get::<bool>("scale_attn_weights")?.unwrap_or(true) {
            return Err(invalid(
                &path,
                "scale_attn_weights",
                "unscaled attention is not supported",
            ));
        }
        let act_name: String = c
            .get("activation_function")?
            .unwrap_or_else(|| "gelu_new".into());
        let act = Activation::parse(&act_name).ok_or_else(|| {
            invalid(
                &path,
                "activation_function",
                format!("'{act_name}' is not supported"),
            )
        })?;
        let max = positive(c, "n_positions")?;
        Ok(LlmConfig {
            family: Family::Gpt2,
            vocab_size,
            hidden_size,
            intermediate_size: optional_positive(c, "n_inner")?.unwrap_or(4 * hidden_size),
            n_layers: positive(c, "n_layer")?,
            n_heads,
            n_kv_heads: n_heads,
            head_dim: hidden_size / n_heads,
            norm: NormKind::Layer {
                eps: finite_positive(
                    &path,
                    "layer_norm_epsilon",
                    c.get::<f64>("layer_norm_epsilon")?.unwrap_or(1e-5),
                )? as f32,
            },
            mlp: MlpKind::Plain(act),
            positions: Positions::Learned { max },
            qkv_bias: true,
            o_bias: true,
            mlp_bias: true,
            qk_norm: QkNorm::None,
            embed_scale: None,
            tied_embeddings: c.get("tie_word_embeddings")?.unwrap_or(true),
            max_positions: max,
            sliding_window: None,
            local_attention: None,
            post_norms: false,
            attn_scale: None,
            experts: None,
            dense_layers: Vec::new(),
            attn_softcap: None,
            final_softcap: None,
            bos_token_id: bos,
            eos_token_ids: eos,
            source: ConfigSource::HfConfig(path),
        })
    }

    /// From GGUF metadata (llama.cpp's key names).
    pub fn from_gguf(file: &GgufFile) -> Result<LlmConfig, LlmConfigError> {
        let path = file.path().to_path_buf();
        let arch = file.architecture()?.to_string();
        let family = match arch.as_str() {
            "llama" => Family::Llama,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "gemma" => Family::Gemma,
            "gemma3" => Family::Gemma3,
            "gpt2" => Family::Gpt2,
            "qwen3moe" => Family::Qwen3Moe,
            "phi3" => Family::Phi3,
            "gemma2" => Family::Gemma2,
            "qwen2moe" => Family::Qwen2Moe,
            "olmoe" => Family::Olmoe,
            other => {
                return Err(LlmConfigError::UnsupportedArchitecture {
                    path,
                    found: other.to_string(),
                    supported: Family::SUPPORTED_GGUF
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                })
            }
        };
        let key = |k: &str| format!("{arch}.{k}");
        // llama.cpp writes Mixtral as `llama` with experts
        let family = match file.get_u64(&key("expert_count"))? {
            Some(n) if n > 0 && family == Family::Llama => Family::Mixtral,
            _ => family,
        };
        let size = |k: &str| -> Result<usize, LlmConfigError> {
            let k = key(k);
            let v = file.require_u64(&k)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| invalid(&path, &k, format!("must be a positive size, found {v}")))
        };
        let opt_size = |k: &str| -> Result<Option<usize>, LlmConfigError> {
            let k = key(k);
            match file.get_u64(&k)? {
                None => Ok(None),
                Some(v) => usize::try_from(v)
                    .ok()
                    .filter(|&v| v > 0)
                    .map(Some)
                    .ok_or_else(|| {
                        invalid(&path, &k, format!("must be a positive size, found {v}"))
                    }),
            }
        };
        let hidden_size = size("embedding_length")?;
        let n_layers = size("block_count")?;
        let n_heads = head_count(file, &key("attention.head_count"))?.ok_or_else(|| {
            GgufError::MissingKey {
                path: path.clone(),
                key: key("attention.head_count"),
            }
        })?;
        let n_kv_heads = head_count(file, &key("attention.head_count_kv"))?.unwrap_or(n_heads);
        if !n_heads.is_multiple_of(n_kv_heads) {
            return Err(invalid(
                &path,
                &key("attention.head_count_kv"),
                format!("{n_heads} heads cannot share {n_kv_heads} key/value heads"),
            ));
        }
        let head_dim = match opt_size("attention.key_length")? {
            Some(d) => d,
            None if hidden_size.is_multiple_of(n_heads) => hidden_size / n_heads,
            None => {
                return Err(invalid(
                    &path,
                    &key("attention.head_count"),
                    format!("embedding length {hidden_size} is not divisible by {n_heads} heads"),
                ))
            }
        };
        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| GgufError::MissingTensor {
                path: path.clone(),
                name: "token_embd.weight".into(),
            })?;
        let vocab_size = match embd.shape().as_slice() {
            [v, d] if *d == hidden_size => *v,
            other => {
                return Err(invalid(
                    &path,
                    "token_embd.weight",
                    format!("shape {other:?} is not [vocab, {hidden_size}]"),
                ))
            }
        };
        let max_positions = size("context_length")?;
        let eos = match file.get("tokenizer.ggml.eos_token_id") {
            Some(MetaValue::Array(a)) => a.to_i64s().unwrap_or_default(),
            Some(v) => v.as_i64().into_iter().collect(),
            None => Vec::new(),
        };
        let eos: Vec<u32> = eos
            .into_iter()
            .filter_map(|v| u32::try_from(v).ok())
            .collect();
        let bos = file
            .get_u64("tokenizer.ggml.bos_token_id")?
            .and_then(|v| u32::try_from(v).ok());
        let tied_embeddings = file.tensor("output.weight").is_none();
        if family == Family::Gpt2 {
            let k = key("attention.layer_norm_epsilon");
            let eps = finite_positive(&path, &k, file.require_f64(&k)?)? as f32;
            return Ok(LlmConfig {
                family,
                vocab_size,
                hidden_size,
                intermediate_size: size("feed_forward_length")?,
                n_layers,
                n_heads,
                n_kv_heads,
                head_dim,
                norm: NormKind::Layer { eps },
                mlp: MlpKind::Plain(Activation::GeluTanh),
                positions: Positions::Learned { max: max_positions },
                qkv_bias: true,
                o_bias: true,
                mlp_bias: true,
                qk_norm: QkNorm::None,
                embed_scale: None,
                tied_embeddings,
                max_positions,
                sliding_window: None,
                local_attention: None,
                post_norms: false,
                attn_scale: None,
                experts: None,
                dense_layers: Vec::new(),
                attn_softcap: None,
                final_softcap: None,
                bos_token_id: bos,
                eos_token_ids: eos,
                source: ConfigSource::Gguf(path),
            });
        }
        let experts = match family {
            Family::Mixtral | Family::Qwen3Moe | Family::Qwen2Moe | Family::Olmoe => {
                let k = key("expert_feed_forward_length");
                let expert_size = match family {
                    Family::Qwen3Moe | Family::Qwen2Moe => size("expert_feed_forward_length")?,
                    _ => opt_size("expert_feed_forward_length")?
                        .map_or_else(|| size("feed_forward_length"), Ok)?,
                };
                // llama.cpp renormalises the chosen weights of Mixtral and Qwen3-MoE, not those
                // of Qwen2-MoE and OLMoE (its `norm_w`)
                let norm = match file.get(&key("expert_weights_norm")) {
                    Some(MetaValue::Bool(b)) => *b,
                    _ => matches!(family, Family::Mixtral | Family::Qwen3Moe),
                };
                // llama.cpp: the shared expert is feed_forward_length wide unless this says
                let shared = match family {
                    Family::Qwen2Moe => Some(
                        opt_size("expert_shared_feed_forward_length")?
                            .map_or_else(|| size("feed_forward_length"), Ok)?,
                    ),
                    _ => None,
                };
                let experts = experts_of(
                    &path,
                    &k,
                    size("expert_count")?,
                    size("expert_used_count")?,
                    expert_size,
                    norm,
                )?;
                Some(Experts { shared, ..experts })
            }
            _ => None,
        };
        // llama.cpp's converters write every layer of these as a mixture of experts; a layer
        // with a dense MLP and no router (Qwen2-MoE's mlp_only_layers, as the converter's tensor
        // names would map them) is read as one
        let dense_layers = match experts {
            Some(_) => (0..n_layers)
                .filter(|l| {
                    file.tensor(&format!("blk.{l}.ffn_gate_inp.weight"))
                        .is_none()
                        && file.tensor(&format!("blk.{l}.ffn_up.weight")).is_some()
                })
                .collect(),
            None => Vec::new(),
        };
        let k = key("attention.layer_norm_rms_epsilon");
        let eps = finite_positive(&path, &k, file.require_f64(&k)?)? as f32;
        let k = key("rope.freq_base");
        let theta = finite_positive(&path, &k, file.get_f64(&k)?.unwrap_or(10_000.0))?;
        let dims = opt_size("rope.dimension_count")?.unwrap_or(head_dim);
        if !dims.is_multiple_of(2) || dims > head_dim {
            return Err(invalid(
                &path,
                &key("rope.dimension_count"),
                format!("{dims} rotary dimensions for head dimension {head_dim}"),
            ));
        }
        let scaling = match file.get_str(&key("rope.scaling.type"))? {
            None | Some("none") => match file.get_f64(&key("rope.scale_linear"))? {
                Some(f) if f != 1.0 => RopeScaling::Linear {
                    factor: finite_positive(&path, &key("rope.scale_linear"), f)?,
                },
                _ => RopeScaling::None,
            },
            Some("linear") => {
                let k = key("rope.scaling.factor");
                RopeScaling::Linear {
                    factor: finite_positive(&path, &k, file.require_f64(&k)?)?,
                }
            }
            Some(other) => {
                return Err(invalid(
                    &path,
                    &key("rope.scaling.type"),
                    format!("'{other}' is not supported (linear is)"),
                ))
            }
        };
        if file.tensor("rope_factors_long.weight").is_some() {
            return Err(invalid(
                &path,
                "rope_factors_long.weight",
                "LongRoPE scaling (Phi-3 128k) is not supported",
            ));
        }
        let sliding_window = match family {
            Family::Phi3 => opt_size("attention.sliding_window")?,
            _ => None,
        };
        let has_qkv_bias = file.tensor("blk.0.attn_q.bias").is_some()
            || file.tensor("blk.0.attn_qkv.bias").is_some();
        let has_o_bias = file.tensor("blk.0.attn_output.bias").is_some();
        let act = if family.is_gemma() {
            Activation::GeluTanh
        } else {
            Activation::Silu
        };
        // llama.cpp's Gemma 2: every other layer global, one RoPE
        // llama.cpp's Gemma 3: every sixth layer global, local layers at RoPE base 10000
        let local_attention = match (family, opt_size("attention.sliding_window")?) {
            (Family::Gemma2, Some(window)) => Some(LocalAttention {
                window,
                local: (0..n_layers)
                    .map(|l| (l + 1) % GEMMA2_GLOBAL_EVERY != 0)
                    .collect(),
                rope: Rope {
                    theta,
                    dims,
                    scaling: scaling.clone(),
                },
            }),
            (Family::Gemma3, Some(window)) => Some(LocalAttention {
                window,
                local: (0..n_layers)
                    .map(|l| (l + 1) % GEMMA3_GLOBAL_EVERY != 0)
                    .collect(),
                rope: Rope {
                    theta: GEMMA3_LOCAL_THETA,
                    dims,
                    scaling: RopeScaling::None,
                },
            }),
            _ => None,
        };
        let softcap = |k: &str| -> Result<Option<f32>, LlmConfigError> {
            let k = key(k);
            match file.get_f64(&k)? {
                Some(v) => Ok(Some(finite_positive(&path, &k, v)? as f32)),
                None => Ok(None),
            }
        };
        let (attn_softcap, final_softcap) = match family {
            Family::Gemma2 => (
                softcap("attn_logit_softcapping")?,
                softcap("final_logit_softcapping")?,
            ),
            _ => (None, None),
        };
        // llama.cpp's Gemma 2: 1/√(hidden/heads) for the 46-layer 27B model (its
        // query_pre_attn_scalar), else 1/√head_dim
        let attn_scale = match family {
            Family::Gemma2 if n_layers == 46 => Some((n_heads as f32 / hidden_size as f32).sqrt()),
            _ => None,
        };
        Ok(LlmConfig {
            family,
            vocab_size,
            hidden_size,
            intermediate_size: size("feed_forward_length")?,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            // llama.cpp's converter stores Gemma's norm weights with the 1 already added
            norm: NormKind::Rms {
                eps,
                plus_one: false,
            },
            mlp: MlpKind::Gated(act),
            positions: Positions::Rope(Rope {
                theta,
                dims,
                scaling,
            }),
            qkv_bias: has_qkv_bias,
            o_bias: has_o_bias,
            mlp_bias: file.tensor("blk.0.ffn_up.bias").is_some(),
            qk_norm: match file.tensor("blk.0.attn_q_norm.weight") {
                None => QkNorm::None,
                // OLMoE's norms span the whole projection ([heads·head_dim])
                Some(_) if family == Family::Olmoe => QkNorm::Whole,
                Some(_) => QkNorm::Head,
            },
            embed_scale: family.is_gemma().then(|| (hidden_size as f32).sqrt()),
            tied_embeddings,
            max_positions,
            sliding_window,
            local_attention,
            post_norms: matches!(family, Family::Gemma2 | Family::Gemma3),
            attn_scale,
            experts,
            dense_layers,
            attn_softcap,
            final_softcap,
            bos_token_id: bos,
            eos_token_ids: eos,
            source: ConfigSource::Gguf(path),
        })
    }

    /// The factor the step graph carries the residual stream at. Gemma's residual stream grows past
    /// fp16's largest value (Gemma 3 270M: 1.04e5 by layer 12), so it is carried at 1/64: every
    /// read of it is a norm, which is scale-invariant once its epsilon is scaled by the square, and
    /// a power of two commutes with rounding, so fp32 results are unchanged.
    pub fn residual_scale(&self) -> f32 {
        if self.family.is_gemma() {
            1.0 / 64.0
        } else {
            1.0
        }
    }

    /// The mixture of experts of layer `l`; `None` where the layer's MLP is dense.
    pub fn experts_at(&self, l: usize) -> Option<Experts> {
        self.experts.filter(|_| !self.dense_layers.contains(&l))
    }

    /// Whether layer `l` is a sliding-window layer with the local RoPE.
    pub fn is_local(&self, l: usize) -> bool {
        self.local_attention
            .as_ref()
            .is_some_and(|a| a.local.get(l).copied().unwrap_or(false))
    }

    /// The attention window of layer `l` (keys more than this many positions back are hidden):
    /// the local window for Gemma's local layers, the model's sliding window for every layer of
    /// Mistral and Phi-3; `None` where the layer sees every earlier position.
    pub fn window_at(&self, l: usize) -> Option<usize> {
        match &self.local_attention {
            Some(a) if self.is_local(l) => Some(a.window),
            _ => self.sliding_window,
        }
    }

    /// The window of the sliding-window layers (one per model), if it has any.
    pub fn attention_window(&self) -> Option<usize> {
        (0..self.n_layers).find_map(|l| self.window_at(l))
    }

    /// Width of the fused q, k, v projection.
    pub fn qkv_width(&self) -> usize {
        (self.n_heads + 2 * self.n_kv_heads) * self.head_dim
    }

    pub fn describe_source(&self) -> String {
        match &self.source {
            ConfigSource::HfConfig(p) | ConfigSource::Gguf(p) => p.display().to_string(),
        }
    }
}

/// A head count stored as one integer, or per layer as equal integers.
fn head_count(file: &GgufFile, key: &str) -> Result<Option<usize>, LlmConfigError> {
    let bad = |reason: String| invalid(file.path(), key, reason);
    let value = match file.get(key) {
        None => return Ok(None),
        Some(MetaValue::Array(a)) => {
            let values = a.to_i64s().ok_or_else(|| bad("expected integers".into()))?;
            match values.split_first() {
                Some((&first, rest)) if rest.iter().all(|&v| v == first) => first,
                Some(_) => return Err(bad("differs between layers (not supported)".into())),
                None => return Err(bad("empty array".into())),
            }
        }
        Some(v) => v
            .as_i64()
            .ok_or_else(|| bad(format!("expected an integer, found {}", v.value_type())))?,
    };
    usize::try_from(value)
        .ok()
        .filter(|&v| v > 0)
        .map(Some)
        .ok_or_else(|| bad(format!("must be positive, found {value}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_json(json: serde_json::Value) -> Result<LlmConfig, LlmConfigError> {
        let c = ModelConfig::from_text(PathBuf::from("config.json"), json.to_string()).unwrap();
        LlmConfig::from_hf(&c)
    }

    fn moe(model_type: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut v = serde_json::json!({
            "model_type": model_type,
            "vocab_size": 32,
            "hidden_size": 16,
            "intermediate_size": 48,
            "num_hidden_layers": 4,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 64,
            "num_experts": 6,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 8,
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    }

    #[test]
    fn qwen2_moe_sparse_layers_shared_expert_and_defaults() {
        // transformers: sparse where (l + 1) % step == 0 and l is not in mlp_only_layers
        let cfg = from_json(moe(
            "qwen2_moe",
            serde_json::json!({"decoder_sparse_step": 2, "mlp_only_layers": [3],
                               "shared_expert_intermediate_size": 24}),
        ))
        .unwrap();
        assert_eq!(cfg.family, Family::Qwen2Moe);
        assert_eq!(cfg.dense_layers, [0, 2, 3]);
        let x = cfg.experts_at(1).unwrap();
        assert_eq!((x.count, x.top_k, x.size), (6, 2, 8));
        assert_eq!(x.shared, Some(24));
        // Qwen2-MoE does not renormalise unless norm_topk_prob says so
        assert!(!x.norm_top_k);
        assert!(cfg.experts_at(0).is_none() && cfg.experts_at(3).is_none());
        assert!(cfg.qkv_bias && !cfg.o_bias);
        assert_eq!(cfg.qk_norm, QkNorm::None);
        // transformers' default shared size, and qkv_bias may be switched off
        let cfg = from_json(moe(
            "qwen2_moe",
            serde_json::json!({"qkv_bias": false, "norm_topk_prob": true}),
        ))
        .unwrap();
        assert!(cfg.dense_layers.is_empty());
        assert_eq!(cfg.experts.unwrap().shared, Some(5632));
        assert!(cfg.experts.unwrap().norm_top_k);
        assert!(!cfg.qkv_bias);
    }

    #[test]
    fn qwen3_moe_dense_layers_and_no_shared_expert() {
        let cfg = from_json(moe(
            "qwen3_moe",
            serde_json::json!({"mlp_only_layers": [0, 2]}),
        ))
        .unwrap();
        assert_eq!(cfg.dense_layers, [0, 2]);
        assert_eq!(cfg.experts.unwrap().shared, None);
        assert_eq!(cfg.qk_norm, QkNorm::Head);
    }

    #[test]
    fn olmoe_whole_projection_norms_and_experts_of_intermediate_size() {
        let mut json = moe("olmoe", serde_json::json!({}));
        json.as_object_mut()
            .unwrap()
            .remove("moe_intermediate_size");
        let cfg = from_json(json).unwrap();
        assert_eq!(cfg.family, Family::Olmoe);
        assert_eq!(cfg.qk_norm, QkNorm::Whole);
        let x = cfg.experts.unwrap();
        assert_eq!((x.count, x.top_k, x.size, x.norm_top_k), (6, 2, 48, false));
        assert_eq!(x.shared, None);
        assert!(cfg.dense_layers.is_empty());
        let msg = from_json(moe("olmoe", serde_json::json!({"num_experts_per_tok": 7})))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("6 experts cannot supply 7"), "{msg}");
    }
}
