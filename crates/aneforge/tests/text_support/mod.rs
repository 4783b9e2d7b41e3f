//! Character-level batches for the trainer tests: a text's sorted distinct characters are the
//! vocabulary, and batches are windows of its first 90%, as the demo's dataset splits it.

use aneforge::train::windows;
use rand::rngs::StdRng;

pub struct Text {
    train: Vec<i32>,
    pub vocab: usize,
}

impl Text {
    pub fn new(text: &str) -> Text {
        let mut vocab: Vec<char> = text.chars().collect();
        vocab.sort_unstable();
        vocab.dedup();
        let ids: Vec<i32> = text
            .chars()
            .map(|c| vocab.binary_search(&c).expect("in the vocabulary") as i32)
            .collect();
        let cut = ((ids.len() as f64) * (1.0 - 0.1)) as usize;
        Text {
            train: ids[..cut].to_vec(),
            vocab: vocab.len(),
        }
    }

    /// `batch` windows of `context` ids and their next-id targets.
    pub fn batch(&self, batch: usize, context: usize, rng: &mut StdRng) -> (Vec<i32>, Vec<i32>) {
        windows(&self.train, batch, context, rng)
    }
}
