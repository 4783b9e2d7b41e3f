//! A Whisper model's dimensions, read from transformers' `config.json` or inferred from a
//! CTranslate2 `model.bin` (shapes of its variables and its `num_heads` scalars).

use std::path::Path;

use serde_json::Value;

use super::ct2::Ct2Model;
use super::WhisperError;
use crate::weights::{TensorSource, WeightError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhisperConfig {
    /// Mel bins of the input features (80, or 128 for large-v3 and turbo).
    pub n_mels: usize,
    pub d_model: usize,
    pub encoder_layers: usize,
    pub decoder_layers: usize,
    pub encoder_heads: usize,
    pub decoder_heads: usize,
    pub ffn_dim: usize,
    pub vocab_size: usize,
    /// Encoder positions: 1500 frames of 20 ms for a 30 s window.
    pub max_source_positions: usize,
    /// Decoder positions (448).
    pub max_target_positions: usize,
}

impl WhisperConfig {
    /// transformers' `WhisperConfig` keys.
    pub fn from_hf_json(path: &Path) -> Result<WhisperConfig, WhisperError> {
        let text = std::fs::read_to_string(path).map_err(|e| WhisperError::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| WhisperError::Config(format!("{}: not JSON: {e}", path.display())))?;
        let get = |key: &str| -> Result<usize, WhisperError> {
            v.get(key)
                .and_then(Value::as_u64)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    WhisperError::Config(format!(
                        "{}: missing or non-integer '{key}'",
                        path.display()
                    ))
                })
        };
        let cfg = WhisperConfig {
            n_mels: get("num_mel_bins")?,
            d_model: get("d_model")?,
            encoder_layers: get("encoder_layers")?,
            decoder_layers: get("decoder_layers")?,
            encoder_heads: get("encoder_attention_heads")?,
            decoder_heads: get("decoder_attention_heads")?,
            ffn_dim: get("encoder_ffn_dim")?,
            vocab_size: get("vocab_size")?,
            max_source_positions: get("max_source_positions")?,
            max_target_positions: get("max_target_positions")?,
        };
        cfg.check(&path.display().to_string())?;
        Ok(cfg)
    }

    /// Dimensions from the shapes of a CTranslate2 Whisper model's variables.
    pub fn from_ct2(model: &Ct2Model) -> Result<WhisperConfig, WhisperError> {
        if model.spec() != "WhisperSpec" {
            return Err(WhisperError::Config(format!(
                "{}: a CTranslate2 '{}' model, not a WhisperSpec",
                model.path().display(),
                model.spec()
            )));
        }
        let shape = |name: &str| -> Result<Vec<usize>, WhisperError> {
            model.meta(name).map(|m| m.shape).ok_or_else(|| {
                WhisperError::Weights(WeightError::MissingTensor {
                    name: name.to_string(),
                    source_desc: model.describe(),
                    similar: Vec::new(),
                })
            })
        };
        let count_layers = |side: &str| {
            (0..)
                .take_while(|i| {
                    model
                        .meta(&format!("model.{side}.layers.{i}.fc1.weight"))
                        .is_some()
                })
                .count()
        };
        let conv1 = shape("model.encoder.conv1.weight")?;
        let fc1 = shape("model.encoder.layers.0.fc1.weight")?;
        let heads = |name: &str| -> Result<usize, WhisperError> {
            let n = model.scalar_int(name)?;
            usize::try_from(n).map_err(|_| {
                WhisperError::Config(format!("{}: {name} is {n}", model.path().display()))
            })
        };
        let cfg = WhisperConfig {
            n_mels: conv1.get(1).copied().unwrap_or(0),
            d_model: conv1.first().copied().unwrap_or(0),
            encoder_layers: count_layers("encoder"),
            decoder_layers: count_layers("decoder"),
            encoder_heads: heads("encoder/num_heads")?,
            decoder_heads: heads("decoder/num_heads")?,
            ffn_dim: fc1.first().copied().unwrap_or(0),
            vocab_size: shape("model.decoder.embed_tokens.weight")?[0],
            max_source_positions: shape("model.encoder.embed_positions.weight")?[0],
            max_target_positions: shape("model.decoder.embed_positions.weight")?[0],
        };
        cfg.check(&model.path().display().to_string())?;
        Ok(cfg)
    }

    fn check(&self, source: &str) -> Result<(), WhisperError> {
        let bad = |what: String| Err(WhisperError::Config(format!("{source}: {what}")));
        if self.encoder_layers == 0 || self.decoder_layers == 0 {
            return bad("no encoder or decoder layers".into());
        }
        for (heads, side) in [
            (self.encoder_heads, "encoder"),
            (self.decoder_heads, "decoder"),
        ] {
            if heads == 0 || !self.d_model.is_multiple_of(heads) {
                return bad(format!(
                    "{side}: {heads} heads do not divide d_model {}",
                    self.d_model
                ));
            }
        }
        if self.max_source_positions == 0 || self.max_target_positions == 0 || self.n_mels == 0 {
            return bad("zero positions or mel bins".into());
        }
        Ok(())
    }

    /// Mel frames of one 30 s window (two per encoder position: conv2 has stride 2).
    pub fn n_frames(&self) -> usize {
        2 * self.max_source_positions
    }
}
