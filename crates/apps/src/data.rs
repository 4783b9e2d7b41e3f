//! Training data: character-level text with deterministic batches (images are in
//! [`crate::images`]).
//!
//! Batches are a pure function of `(seed, step)` ([`aneforge::train::batch_rng`]), so a resumed run sees exactly
//! the batches the uninterrupted run would have; the data position to checkpoint is the step count.

use aneforge::train::windows;
use rand::rngs::StdRng;
use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
}

fn invalid(what: &str, message: impl Into<String>) -> DataError {
    DataError::Invalid {
        what: what.to_string(),
        message: message.into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Validation,
}

/// Text as a sequence of character ids; the first `1 − val_fraction` of the text trains, the
/// rest validates.
#[derive(Clone, Debug)]
pub struct CharDataset {
    vocab: Vec<char>,
    index: HashMap<char, i32>,
    train: Vec<i32>,
    val: Vec<i32>,
}

impl CharDataset {
    pub fn new(text: &str, val_fraction: f64) -> Result<CharDataset, DataError> {
        let mut vocab: Vec<char> = text.chars().collect();
        vocab.sort_unstable();
        vocab.dedup();
        let index: HashMap<char, i32> = vocab
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as i32))
            .collect();
        let ids: Vec<i32> = text.chars().map(|c| index[&c]).collect();
        if !(0.0..1.0).contains(&val_fraction) {
            return Err(invalid(
                "text dataset",
                format!("validation fraction {val_fraction} must be in [0, 1)"),
            ));
        }
        let cut = ((ids.len() as f64) * (1.0 - val_fraction)) as usize;
        let (train, val) = ids.split_at(cut);
        Ok(CharDataset {
            vocab,
            index,
            train: train.to_vec(),
            val: val.to_vec(),
        })
    }

    pub fn load(path: &Path, val_fraction: f64) -> Result<CharDataset, DataError> {
        let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
            path: path.display().to_string(),
            source,
        })?;
        CharDataset::new(&text, val_fraction)
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    pub fn vocab(&self) -> &[char] {
        &self.vocab
    }

    pub fn split_len(&self, split: Split) -> usize {
        self.ids(split).len()
    }

    fn ids(&self, split: Split) -> &[i32] {
        match split {
            Split::Train => &self.train,
            Split::Validation => &self.val,
        }
    }

    /// Character ids of `text`; characters outside the vocabulary are an error.
    pub fn encode(&self, text: &str) -> Result<Vec<i32>, DataError> {
        text.chars()
            .map(|c| {
                self.index.get(&c).copied().ok_or_else(|| {
                    invalid(
                        "encode",
                        format!("character {c:?} is not in the vocabulary"),
                    )
                })
            })
            .collect()
    }

    pub fn decode(&self, ids: &[i32]) -> String {
        ids.iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| self.vocab.get(i))
                    .copied()
                    .unwrap_or('\u{fffd}')
            })
            .collect()
    }

    /// `batch` random windows of `context` ids and the same windows shifted by one (the targets),
    /// each `[batch, context]` row-major.
    pub fn batch(
        &self,
        split: Split,
        batch: usize,
        context: usize,
        rng: &mut StdRng,
    ) -> Result<(Vec<i32>, Vec<i32>), DataError> {
        let ids = self.ids(split);
        if ids.len() <= context {
            return Err(invalid(
                "text dataset",
                format!(
                    "the {split:?} split has {} characters, fewer than a window of {}",
                    ids.len(),
                    context + 1
                ),
            ));
        }
        Ok(windows(ids, batch, context, rng))
    }
}
