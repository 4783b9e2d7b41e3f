//! The Llama-family hyperparameters from GGUF metadata (`{arch}.*` keys, llama.cpp's names).

use super::{GgufError, GgufFile, MetaValue};

#[derive(Debug, Clone, PartialEq)]
pub struct RopeScaling {
    /// `linear`, `yarn`, `longrope`, ... as the file names it.
    pub kind: String,
    pub factor: f32,
    pub original_context_length: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// `general.architecture`; the prefix of every other key.
    pub architecture: String,
    pub n_layers: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Dimensions rotated per head (`rope.dimension_count`; all of `head_dim` when absent).
    pub rope_dims: usize,
    pub rope_theta: f32,
    pub rope_scaling: Option<RopeScaling>,
    pub rms_norm_eps: f32,
    pub context_length: usize,
    pub vocab_size: usize,
    /// No `output.weight` tensor: the output projection reuses `token_embd.weight`.
    pub tied_embeddings: bool,
}

impl LlamaConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<Self, GgufError> {
        let arch = file.architecture()?.to_string();
        let key = |k: &str| format!("{arch}.{k}");
        let bad = |k: &str, reason: String| GgufError::BadValue {
            path: file.path().to_path_buf(),
            key: k.to_string(),
            reason,
        };
        let positive = |k: &str| -> Result<usize, GgufError> {
            let k = key(k);
            let v = file.require_u64(&k)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| bad(&k, format!("must be a positive size, found {v}")))
        };
        let optional = |k: &str| -> Result<Option<usize>, GgufError> {
            let k = key(k);
            match file.get_u64(&k)? {
                None => Ok(None),
                Some(v) => usize::try_from(v)
                    .ok()
                    .filter(|&v| v > 0)
                    .map(Some)
                    .ok_or_else(|| bad(&k, format!("must be a positive size, found {v}"))),
            }
        };

        let n_layers = positive("block_count")?;
        let hidden_size = positive("embedding_length")?;
        let intermediate_size = positive("feed_forward_length")?;
        let n_heads = per_layer_constant(file, &key("attention.head_count"))?.ok_or_else(|| {
            GgufError::MissingKey {
                path: file.path().to_path_buf(),
                key: key("attention.head_count"),
            }
        })?;
        let n_kv_heads =
            per_layer_constant(file, &key("attention.head_count_kv"))?.unwrap_or(n_heads);
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(bad(
                &key("attention.head_count_kv"),
                format!("{n_heads} heads cannot be shared by {n_kv_heads} key/value heads"),
            ));
        }
        let head_dim = match optional("attention.key_length")? {
            Some(d) => d,
            None if hidden_size % n_heads == 0 => hidden_size / n_heads,
            None => {
                return Err(bad(
                    &key("attention.head_count"),
                    format!("embedding length {hidden_size} is not divisible by {n_heads} heads"),
                ))
            }
        };
        let rope_dims = optional("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(bad(
                &key("rope.dimension_count"),
                format!("{rope_dims} rotary dimensions for head dimension {head_dim}"),
            ));
        }
        let rope_theta = file.get_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0) as f32;
        let rms_norm_eps = file.require_f64(&key("attention.layer_norm_rms_epsilon"))? as f32;
        let context_length = positive("context_length")?;

        let rope_scaling = match file.get_str(&key("rope.scaling.type"))? {
            Some("none") => None,
            Some(kind) => Some(RopeScaling {
                kind: kind.to_string(),
                factor: file.require_f64(&key("rope.scaling.factor"))? as f32,
                original_context_length: optional("rope.scaling.original_context_length")?,
            }),
            None => match file.get_f64(&key("rope.scale_linear"))? {
                Some(factor) if factor != 1.0 => Some(RopeScaling {
                    kind: "linear".into(),
                    factor: factor as f32,
                    original_context_length: None,
                }),
                _ => None,
            },
        };

        let embd = file.require_tensor("token_embd.weight")?;
        let vocab_from_tensor = embd.dims.get(1).map(|&d| d as usize);
        if embd.dims.first().map(|&d| d as usize) != Some(hidden_size) {
            return Err(GgufError::Tensor {
                path: file.path().to_path_buf(),
                name: embd.name.clone(),
                reason: format!(
                    "dims {:?} do not start with the embedding length {hidden_size}",
                    embd.dims
                ),
            });
        }
        let vocab_size = match optional("vocab_size")? {
            Some(v) => v,
            None => match file.get_array("tokenizer.ggml.tokens")? {
                Some(tokens) => tokens.len(),
                None => vocab_from_tensor.unwrap_or(0),
            },
        };
        if vocab_from_tensor != Some(vocab_size) {
            return Err(bad(
                &key("vocab_size"),
                format!(
                    "{vocab_size} differs from token_embd.weight dims {:?}",
                    embd.dims
                ),
            ));
        }

        Ok(LlamaConfig {
            architecture: arch.clone(),
            n_layers,
            hidden_size,
            intermediate_size,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dims,
            rope_theta,
            rope_scaling,
            rms_norm_eps,
            context_length,
            vocab_size,
            tied_embeddings: file.tensor("output.weight").is_none(),
        })
    }
}

/// A head count stored as one integer, or per layer as an array of equal integers.
fn per_layer_constant(file: &GgufFile, key: &str) -> Result<Option<usize>, GgufError> {
    let bad = |reason: String| GgufError::BadValue {
        path: file.path().to_path_buf(),
        key: key.to_string(),
        reason,
    };
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
