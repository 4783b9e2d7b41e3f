//! Rerankers as `sentence_transformers.CrossEncoder` runs them: a (query, passage) pair encoded
//! together with token types, the checkpoint's classification head, and the activation
//! sentence-transformers applies by default.

use std::path::Path;

use serde::Deserialize;

use super::graph::Head;
use super::runtime::{EncoderOptions, Row};
use super::{load_parts, EncoderError, Loaded};
use crate::config::read_json_if_exists;
use crate::model_dir::ModelDir;
use crate::tokenizer::TextTokenizer;

/// What turns logits into scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreActivation {
    Sigmoid,
    Identity,
    Tanh,
}

impl ScoreActivation {
    fn from_torch_path(path: &str) -> Option<ScoreActivation> {
        Some(match path.rsplit('.').next().unwrap_or(path) {
            "Sigmoid" => ScoreActivation::Sigmoid,
            "Identity" => ScoreActivation::Identity,
            "Tanh" => ScoreActivation::Tanh,
            _ => return None,
        })
    }

    pub fn apply(self, x: f32) -> f32 {
        match self {
            ScoreActivation::Sigmoid => (1.0 / (1.0 + (-f64::from(x)).exp())) as f32,
            ScoreActivation::Identity => x,
            ScoreActivation::Tanh => x.tanh(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScoreActivation::Sigmoid => "sigmoid",
            ScoreActivation::Identity => "identity",
            ScoreActivation::Tanh => "tanh",
        }
    }
}

/// One passage's place in a ranking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranked {
    /// Index of the passage in the input.
    pub corpus_id: usize,
    pub score: f32,
}

#[derive(Deserialize, Default)]
struct CrossEncoderStConfig {
    activation_fn: Option<String>,
}

pub struct CrossEncoder {
    loaded: Loaded,
    activation: ScoreActivation,
    num_labels: usize,
}

impl std::fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("family", &self.loaded.runtime.cfg.family)
            .field("num_labels", &self.num_labels)
            .field("activation", &self.activation)
            .finish()
    }
}

impl CrossEncoder {
    pub fn load(spec: &str, options: EncoderOptions) -> Result<CrossEncoder, EncoderError> {
        let resolved = crate::resolve(spec)?;
        CrossEncoder::from_dir(resolved.dir(), options)
    }

    pub fn from_dir(
        dir: impl AsRef<Path>,
        options: EncoderOptions,
    ) -> Result<CrossEncoder, EncoderError> {
        let dir = dir.as_ref();
        let loaded = load_parts(&ModelDir::open(dir)?, &options, true)?;
        let num_labels = loaded
            .runtime
            .classifier
            .as_ref()
            .map(|h| h.num_labels())
            .unwrap_or(1);
        let st: CrossEncoderStConfig =
            read_json_if_exists(dir.join("config_sentence_transformers.json"))?.unwrap_or_default();
        let activation = default_activation(
            [
                st.activation_fn.as_deref(),
                loaded.runtime.cfg.activation_fn.as_deref(),
            ],
            num_labels,
        )?;
        Ok(CrossEncoder {
            loaded,
            activation,
            num_labels,
        })
    }

    pub fn num_labels(&self) -> usize {
        self.num_labels
    }

    /// The activation `predict` applies (sentence-transformers' default for this model).
    pub fn activation(&self) -> ScoreActivation {
        self.activation
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.loaded.tokenizer
    }

    pub fn max_length(&self) -> usize {
        self.loaded.runtime.max_length
    }

    /// `[pairs, num_labels]` raw logits.
    pub fn logits(
        &self,
        pairs: &[(&str, &str)],
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, EncoderError> {
        let mut rows = Vec::with_capacity(pairs.len());
        for (index, (a, b)) in pairs.iter().enumerate() {
            let t = self
                .loaded
                .tokenizer
                .encode_pair(a, b)
                .map_err(|e| EncoderError::Input {
                    index,
                    message: e.to_string(),
                })?;
            rows.push(Row {
                ids: t.ids,
                type_ids: t.type_ids,
                prompt_len: 0,
            });
        }
        self.loaded
            .runtime
            .run(&rows, &Head::Logits, None, progress)
    }

    /// Scores as `CrossEncoder.predict` gives them by default: the activation applied to the
    /// logits (one score per pair for single-label models, `num_labels` per pair otherwise).
    pub fn predict(&self, pairs: &[(&str, &str)]) -> Result<Vec<Vec<f32>>, EncoderError> {
        self.predict_with(pairs, false, &mut |_| {})
    }

    /// As [`CrossEncoder::predict`]; `raw` returns logits without the activation.
    pub fn predict_with(
        &self,
        pairs: &[(&str, &str)],
        raw: bool,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, EncoderError> {
        let mut out = self.logits(pairs, progress)?;
        if !raw {
            for row in &mut out {
                row.iter_mut().for_each(|x| *x = self.activation.apply(*x));
            }
        }
        Ok(out)
    }

    /// Passages sorted by score, best first (ties keep input order), at most `top_k` of them.
    /// Only for single-label models, as in sentence-transformers.
    pub fn rank(
        &self,
        query: &str,
        passages: &[&str],
        top_k: Option<usize>,
        raw: bool,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Ranked>, EncoderError> {
        if self.num_labels != 1 {
            return Err(EncoderError::Unsupported(format!(
                "ranking needs a single-label model; this one has {} labels (use predict)",
                self.num_labels
            )));
        }
        let pairs: Vec<(&str, &str)> = passages.iter().map(|p| (query, *p)).collect();
        let scores = self.predict_with(&pairs, raw, progress)?;
        let mut ranked: Vec<Ranked> = scores
            .iter()
            .enumerate()
            .map(|(corpus_id, s)| Ranked {
                corpus_id,
                score: s.first().copied().unwrap_or(f32::NAN),
            })
            .collect();
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
        if let Some(k) = top_k {
            ranked.truncate(k);
        }
        Ok(ranked)
    }
}

/// sentence-transformers' choice: the first activation named (its own config file, then
/// `config.json`) that is a `torch.` class, else sigmoid for one label and identity otherwise.
fn default_activation(
    named: [Option<&str>; 2],
    num_labels: usize,
) -> Result<ScoreActivation, EncoderError> {
    for path in named.into_iter().flatten() {
        if !path.starts_with("torch.") {
            continue;
        }
        return ScoreActivation::from_torch_path(path).ok_or_else(|| {
            EncoderError::Unsupported(format!(
                "cross-encoder activation '{path}' is not supported (supported: Sigmoid, \
                 Identity, Tanh)"
            ))
        });
    }
    Ok(if num_labels == 1 {
        ScoreActivation::Sigmoid
    } else {
        ScoreActivation::Identity
    })
}
