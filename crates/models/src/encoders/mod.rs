//! Sentence encoders and rerankers from Hugging Face checkpoints: BERT, RoBERTa, XLM-RoBERTa,
//! CamemBERT, MPNet and DistilBERT (and E5, GTE, BGE checkpoints built on them).
//!
//! The whole transformer, pooling and head compile into one program per `[batch, seq]` bucket
//! ([`graph`]); [`runtime`] sorts inputs by length, pads each batch to a bucketed length and keeps
//! the compiled programs. [`SentenceEncoder`] mirrors `SentenceTransformer.encode`,
//! [`CrossEncoder`] mirrors `CrossEncoder.predict` / `rank`.
//!
//! Truncation follows sentence-transformers: a text (with its prompt) keeps its first
//! `max_length` tokens, special tokens included; a pair is truncated longest-first.

mod config;
mod cross_encoder;
pub mod graph;
mod pooling;
mod runtime;
mod sentence;
mod weights;

use std::collections::HashSet;
use std::path::PathBuf;

pub use config::{Activation, EncoderConfig, Family, Positions, SUPPORTED_MODEL_TYPES};
pub use cross_encoder::{CrossEncoder, Ranked, ScoreActivation};
pub use pooling::Pooling;
pub use runtime::EncoderOptions;
pub use sentence::{Embeddings, EncodeOptions, SentenceEncoder};
pub use weights::{ClassifierHead, EncoderWeights};

use crate::config::ConfigError;
use crate::model_dir::ModelDir;
use crate::resolve::ResolveError;
use crate::tokenizer::{TextTokenizer, TokenizerError};
use crate::weights::{VarBuilder, WeightError};
use runtime::Runtime;

#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Weights(#[from] WeightError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("building the encoder graph: {0}")]
    Graph(#[from] aneforge::GraphError),
    #[error("encoder program: {0}")]
    Program(#[from] aneforge::Error),
    #[error("{}: {message}", path.display())]
    Model { path: PathBuf, message: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("input {index}: {message}")]
    Input { index: usize, message: String },
}

/// What both encoders and rerankers load: the runtime (config, weights, programs) and the
/// tokenizer, set up as sentence-transformers sets them up.
pub(crate) struct Loaded {
    pub runtime: Runtime,
    pub tokenizer: TextTokenizer,
    special_ids: HashSet<u32>,
}

impl Loaded {
    /// sentence-transformers' prompt length: the prompt's tokens with special tokens, less a
    /// trailing special token.
    pub fn prompt_length(&self, prompt: &str) -> Result<usize, EncoderError> {
        let ids = self.tokenizer.encode(prompt)?.ids;
        let trailing_special = ids.last().is_some_and(|id| self.special_ids.contains(id));
        Ok(ids.len() - usize::from(trailing_special))
    }
}

/// Loads `model`'s config, weights and tokenizer. With `classifier`, the checkpoint must carry a
/// sequence-classification head.
pub(crate) fn load_parts(
    model: &ModelDir,
    options: &EncoderOptions,
    classifier: bool,
) -> Result<Loaded, EncoderError> {
    let dir = &model.path;
    let cfg = EncoderConfig::from_model_config(model.config()?)?;
    let root = VarBuilder::from_dir(dir)?;
    let prefix = weights::encoder_prefix(&root)?;
    let encoder = root.pp(&prefix);
    let encoder_weights = EncoderWeights::load(&encoder, &cfg)?;
    let head = if classifier {
        match weights::detect_head(&root, &encoder, &cfg)? {
            Some(h) => Some(h),
            None => {
                return Err(EncoderError::Model {
                    path: dir.to_path_buf(),
                    message: format!(
                        "no sequence-classification head in {}: expected classifier.out_proj.* \
                         (RoBERTa), pre_classifier.* + classifier.* (DistilBERT) or \
                         {}pooler.dense.* + classifier.* (BERT)",
                        root.source().describe(),
                        if prefix.is_empty() {
                            String::new()
                        } else {
                            format!("{prefix}.")
                        }
                    ),
                })
            }
        }
    } else {
        None
    };

    let capacity = cfg.max_sequence_length();
    let mut tokenizer = TextTokenizer::for_sentence_transformer_model(model)?;
    let wanted = options
        .max_length
        .or(tokenizer.max_length())
        .unwrap_or(capacity);
    if wanted == 0 {
        return Err(EncoderError::Unsupported(
            "max length must be at least 1".into(),
        ));
    }
    if options.embeddings_in_program && options.target.is_ane() {
        return Err(EncoderError::Unsupported(
            "embeddings are looked up on the host for ANE targets (gather is walled there)".into(),
        ));
    }
    let max_length = wanted.min(capacity);
    tokenizer = tokenizer.with_max_length(Some(max_length))?;
    let pad_id = tokenizer
        .pad_token()
        .map(|(id, _)| id)
        .or(cfg.pad_token_id)
        .unwrap_or(0);
    let special_ids = tokenizer
        .inner()
        .get_added_tokens_decoder()
        .into_iter()
        .filter(|(_, t)| t.special)
        .map(|(id, _)| id)
        .collect();
    let runtime = Runtime::new(
        cfg,
        encoder_weights,
        head,
        options.clone(),
        pad_id,
        max_length,
    )?;
    Ok(Loaded {
        runtime,
        tokenizer,
        special_ids,
    })
}

/// Cosine similarity of two vectors, summed in f64 (sentence-transformers' `util.cos_sim` for one
/// pair); NaN when either is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}
