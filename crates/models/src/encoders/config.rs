//! `config.json` of the encoder families, read into one shape: BERT, RoBERTa, XLM-RoBERTa,
//! CamemBERT, MPNet and DistilBERT all become an [`EncoderConfig`].

use serde::Deserialize;

pub use crate::activation::Activation;
use crate::config::{ConfigError, ModelConfig};

/// The `model_type` values the encoders load.
pub const SUPPORTED_MODEL_TYPES: [&str; 6] = [
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "mpnet",
    "distilbert",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Bert,
    Roberta,
    XlmRoberta,
    Camembert,
    MpNet,
    DistilBert,
}

/// How position ids are formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// `0, 1, 2, ...` whatever the padding.
    Absolute,
    /// fairseq's scheme: non-padding tokens count from `padding_idx + 1`, padding tokens sit at
    /// `padding_idx` (a token is padding when its id equals `padding_idx`).
    AfterPadding { padding_idx: u32 },
}

impl Family {
    pub fn from_model_type(model_type: &str) -> Option<Family> {
        Some(match model_type {
            "bert" => Family::Bert,
            "roberta" => Family::Roberta,
            "xlm-roberta" => Family::XlmRoberta,
            "camembert" => Family::Camembert,
            "mpnet" => Family::MpNet,
            "distilbert" => Family::DistilBert,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Roberta => "roberta",
            Family::XlmRoberta => "xlm-roberta",
            Family::Camembert => "camembert",
            Family::MpNet => "mpnet",
            Family::DistilBert => "distilbert",
        }
    }

    /// Whether the model reads token type ids. Only BERT's tokenizers produce them; the other
    /// families' tokenizers do not, so transformers feeds zeros.
    pub fn reads_token_types(self) -> bool {
        self == Family::Bert
    }

    pub fn is_roberta_like(self) -> bool {
        matches!(
            self,
            Family::Roberta | Family::XlmRoberta | Family::Camembert
        )
    }
}

/// One encoder's architecture, whatever its family.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    /// 0 when the model has no token type embeddings.
    pub type_vocab_size: usize,
    pub layer_norm_eps: f32,
    pub activation: Activation,
    pub pad_token_id: Option<u32>,
    pub positions: Positions,
    /// MPNet's relative attention bias buckets.
    pub relative_attention_buckets: Option<usize>,
    /// `num_labels` (or the size of `id2label`) for sequence-classification checkpoints.
    pub num_labels: Option<usize>,
    /// A cross-encoder activation named in `config.json` (`sentence_transformers.activation_fn`
    /// or the legacy `sbert_ce_default_activation_function`).
    pub activation_fn: Option<String>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_max_positions() -> usize {
    512
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

#[derive(Deserialize)]
struct BertLike {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default = "default_max_positions")]
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    pad_token_id: Option<i64>,
    position_embedding_type: Option<String>,
    relative_attention_num_buckets: Option<usize>,
}

#[derive(Deserialize)]
struct DistilBertLike {
    vocab_size: usize,
    dim: usize,
    n_layers: usize,
    n_heads: usize,
    hidden_dim: usize,
    #[serde(default = "default_act")]
    activation: String,
    #[serde(default = "default_max_positions")]
    max_position_embeddings: usize,
    pad_token_id: Option<i64>,
}

#[derive(Deserialize, Default)]
struct StSection {
    activation_fn: Option<String>,
}

impl EncoderConfig {
    /// Reads a loaded `config.json`; an unsupported `model_type` is an error that lists the
    /// supported ones.
    pub fn from_model_config(config: &ModelConfig) -> Result<EncoderConfig, ConfigError> {
        let model_type = config.expect_model_type(&SUPPORTED_MODEL_TYPES)?;
        let family =
            Family::from_model_type(model_type).ok_or_else(|| ConfigError::UnknownModelType {
                path: config.path().to_path_buf(),
                found: model_type.to_string(),
                supported: SUPPORTED_MODEL_TYPES
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            })?;
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            path: config.path().to_path_buf(),
            field: field.to_string(),
            reason,
        };
        let pad = |v: Option<i64>| -> Result<Option<u32>, ConfigError> {
            match v {
                None => Ok(None),
                Some(p) => u32::try_from(p)
                    .map(Some)
                    .map_err(|_| invalid("pad_token_id", format!("{p} is not a token id"))),
            }
        };
        let act = |field: &str, name: &str| {
            Activation::parse(name).ok_or_else(|| {
                invalid(
                    field,
                    format!(
                        "activation '{name}' is not supported (supported: {})",
                        Activation::supported()
                    ),
                )
            })
        };
        let mut out = match family {
            Family::DistilBert => {
                let c: DistilBertLike = config.parse()?;
                EncoderConfig {
                    family,
                    vocab_size: c.vocab_size,
                    hidden_size: c.dim,
                    num_layers: c.n_layers,
                    num_heads: c.n_heads,
                    intermediate_size: c.hidden_dim,
                    max_position_embeddings: c.max_position_embeddings,
                    type_vocab_size: 0,
                    // DistilBERT's layer norms are built with eps 1e-12 whatever the config says.
                    layer_norm_eps: 1e-12,
                    activation: act("activation", &c.activation)?,
                    pad_token_id: pad(c.pad_token_id)?,
                    positions: Positions::Absolute,
                    relative_attention_buckets: None,
                    num_labels: None,
                    activation_fn: None,
                }
            }
            _ => {
                let c: BertLike = config.parse()?;
                if let Some(kind) = c.position_embedding_type.as_deref() {
                    if kind != "absolute" {
                        return Err(invalid(
                            "position_embedding_type",
                            format!("'{kind}' is not supported (only 'absolute')"),
                        ));
                    }
                }
                let pad_token_id = pad(c.pad_token_id)?;
                let positions = match family {
                    // MPNet's embeddings hard-code padding_idx 1.
                    Family::MpNet => Positions::AfterPadding { padding_idx: 1 },
                    f if f.is_roberta_like() => Positions::AfterPadding {
                        padding_idx: pad_token_id.unwrap_or(1),
                    },
                    _ => Positions::Absolute,
                };
                let type_vocab_size = if family == Family::MpNet {
                    0
                } else {
                    c.type_vocab_size
                };
                EncoderConfig {
                    family,
                    vocab_size: c.vocab_size,
                    hidden_size: c.hidden_size,
                    num_layers: c.num_hidden_layers,
                    num_heads: c.num_attention_heads,
                    intermediate_size: c.intermediate_size,
                    max_position_embeddings: c.max_position_embeddings,
                    type_vocab_size,
                    layer_norm_eps: c.layer_norm_eps as f32,
                    activation: act("hidden_act", &c.hidden_act)?,
                    pad_token_id,
                    positions,
                    relative_attention_buckets: if family == Family::MpNet {
                        Some(c.relative_attention_num_buckets.unwrap_or(32))
                    } else {
                        None
                    },
                    num_labels: None,
                    activation_fn: None,
                }
            }
        };
        out.num_labels = match config.get::<usize>("num_labels")? {
            Some(n) => Some(n),
            None => config
                .get::<serde_json::Map<String, serde_json::Value>>("id2label")?
                .map(|m| m.len()),
        };
        let st: StSection = config.get("sentence_transformers")?.unwrap_or_default();
        out.activation_fn = match st.activation_fn {
            Some(a) => Some(a),
            None => config.get::<String>("sbert_ce_default_activation_function")?,
        };
        out.validate(config)?;
        Ok(out)
    }

    fn validate(&self, config: &ModelConfig) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            path: config.path().to_path_buf(),
            field: field.to_string(),
            reason,
        };
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_layers),
            ("num_attention_heads", self.num_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(invalid(field, "must be at least 1".into()));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_heads) {
            return Err(invalid(
                "num_attention_heads",
                format!(
                    "hidden size {} is not divisible by {} heads",
                    self.hidden_size, self.num_heads
                ),
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps >= 0.0) {
            return Err(invalid(
                "layer_norm_eps",
                format!("{} is not a usable epsilon", self.layer_norm_eps),
            ));
        }
        if let Positions::AfterPadding { padding_idx } = self.positions {
            if padding_idx as usize + 1 >= self.max_position_embeddings {
                return Err(invalid(
                    "max_position_embeddings",
                    format!(
                        "{} leaves no positions after padding_idx {padding_idx}",
                        self.max_position_embeddings
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// The longest sequence the position table can place.
    pub fn max_sequence_length(&self) -> usize {
        match self.positions {
            Positions::Absolute => self.max_position_embeddings,
            Positions::AfterPadding { padding_idx } => {
                self.max_position_embeddings - padding_idx as usize - 1
            }
        }
    }
}
