//! Training data: character-level text with deterministic batches, and the 8×8 handwritten
//! digits (scikit-learn's copy of the UCI optical digits test set) as a small image dataset.
//!
//! Batches are a pure function of `(seed, step)` ([`batch_rng`]), so a resumed run sees exactly
//! the batches the uninterrupted run would have; the data position to checkpoint is the step count.

use aneforge::train::{batch_rng, windows};
use rand::rngs::StdRng;
use rand::RngExt;
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

/// 8×8 grey images with values 0..=16 scaled to [0, 1], and their labels 0..=9.
#[derive(Clone, Debug)]
pub struct Digits {
    pub images: Vec<f32>,
    pub labels: Vec<i32>,
}

impl Digits {
    pub const SIDE: usize = 8;
    pub const PIXELS: usize = 64;

    /// Parses the committed CSV: one image per line, 64 pixel values then the label.
    pub fn parse(text: &str, what: &str) -> Result<Digits, DataError> {
        let mut images = Vec::new();
        let mut labels = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split(',').collect();
            if fields.len() != Self::PIXELS + 1 {
                return Err(invalid(
                    what,
                    format!(
                        "line {}: {} fields, expected 65 (64 pixels and a label)",
                        n + 1,
                        fields.len()
                    ),
                ));
            }
            for f in &fields[..Self::PIXELS] {
                let v: u8 = f.trim().parse().map_err(|_| {
                    invalid(what, format!("line {}: pixel {f:?} is not 0..=16", n + 1))
                })?;
                if v > 16 {
                    return Err(invalid(
                        what,
                        format!("line {}: pixel {v} exceeds 16", n + 1),
                    ));
                }
                images.push(f32::from(v) / 16.0);
            }
            let label: i32 = fields[Self::PIXELS]
                .trim()
                .parse()
                .map_err(|_| invalid(what, format!("line {}: label is not an integer", n + 1)))?;
            if !(0..=9).contains(&label) {
                return Err(invalid(
                    what,
                    format!("line {}: label {label} is not 0..=9", n + 1),
                ));
            }
            labels.push(label);
        }
        if labels.is_empty() {
            return Err(invalid(what, "no images"));
        }
        Ok(Digits { images, labels })
    }

    pub fn load(path: &Path) -> Result<Digits, DataError> {
        let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Digits::parse(&text, &path.display().to_string())
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// A deterministic shuffle split into `(train, test)` with `test_fraction` of the images.
    pub fn split(&self, test_fraction: f64, seed: u64) -> (Digits, Digits) {
        let mut order: Vec<usize> = (0..self.len()).collect();
        let mut rng = batch_rng(seed, 7, 0);
        for i in (1..order.len()).rev() {
            let j = rng.random_range(0..=i);
            order.swap(i, j);
        }
        let test_n = ((self.len() as f64) * test_fraction).round() as usize;
        let pick = |idx: &[usize]| Digits {
            images: idx
                .iter()
                .flat_map(|&i| {
                    self.images[i * Self::PIXELS..(i + 1) * Self::PIXELS]
                        .iter()
                        .copied()
                })
                .collect(),
            labels: idx.iter().map(|&i| self.labels[i]).collect(),
        };
        (pick(&order[test_n..]), pick(&order[..test_n]))
    }

    /// The images and labels at `indices` (`[n, 1, 8, 8]` row-major and `[n]`).
    pub fn gather(&self, indices: &[usize]) -> (Vec<f32>, Vec<i32>) {
        let mut x = Vec::with_capacity(indices.len() * Self::PIXELS);
        let mut y = Vec::with_capacity(indices.len());
        for &i in indices {
            x.extend_from_slice(&self.images[i * Self::PIXELS..(i + 1) * Self::PIXELS]);
            y.push(self.labels[i]);
        }
        (x, y)
    }

    /// The image indices of epoch `epoch` in a shuffled order fixed by `seed`.
    pub fn epoch_order(&self, seed: u64, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        let mut rng = batch_rng(seed, 8, epoch);
        for i in (1..order.len()).rev() {
            let j = rng.random_range(0..=i);
            order.swap(i, j);
        }
        order
    }
}
