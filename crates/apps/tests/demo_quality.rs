//! The demo's quality: `aneforge demo`'s exact configuration (4 layers, d_model 128, 4 heads,
//! MLP 512, context 128, batch 32, AdamW 3e-4, seed 1337) on the repository's Shakespeare, after
//! a few steps, has a held-out loss below a stated bound — and below the cross-entropy of the
//! best context-free predictor (the training split's character frequencies, computed here in f64
//! on the same held-out batches), so it has learnt more than which characters are common.

use aneforge::engine::Engine;
use aneforge::Target;
use aneforge_apps::char_lm::{CharLm, CharLmConfig};
use aneforge_apps::data::CharDataset;
use std::collections::HashMap;
use std::path::Path;

const STEPS: u64 = 30;
const VAL_BATCHES: u64 = 4;
/// Measured with the release CLI (`aneforge demo --steps 30 --val-batches 4 --seed S`): seed 1337
/// (this test's) reaches 3.242; seeds 1, 2 and 3 reach 3.233, 3.256 and 3.262. Untrained, the loss
/// is ln 76 = 4.33; the training split's character frequencies score 3.367 on these batches.
const VAL_LOSS_BOUND: f32 = 3.32;

fn shakespeare() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/shakespeare.txt");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The mean of −ln p(target) over `targets`, with p the character frequencies of the training
/// split (the text's first 90%).
fn unigram_cross_entropy(text: &str, targets: &[char]) -> f64 {
    let chars: Vec<char> = text.chars().collect();
    let cut = (chars.len() as f64 * 0.9) as usize;
    let mut counts: HashMap<char, f64> = HashMap::new();
    for &c in &chars[..cut] {
        *counts.entry(c).or_default() += 1.0;
    }
    let total = cut as f64;
    let nll: f64 = targets
        .iter()
        .map(|c| {
            let n = counts.get(c).copied().unwrap_or(0.5);
            -(n / total).ln()
        })
        .sum();
    nll / targets.len() as f64
}

#[test]
fn the_demo_beats_its_quality_bound_after_a_few_steps() {
    let text = shakespeare();
    let data = CharDataset::new(&text, 0.1).unwrap();
    let vocab = data.vocab_size();
    let cfg = CharLmConfig::default();
    assert_eq!(
        (
            cfg.layers,
            cfg.d_model,
            cfg.heads,
            cfg.mlp,
            cfg.context,
            cfg.batch,
            cfg.lr
        ),
        (4, 128, 4, 512, 128, 32, 3e-4),
        "the demo configuration changed: measure the bound again"
    );
    let mut lm = CharLm::new(data.clone(), cfg, Target::Cpu, Engine::Cpu).unwrap();
    let mut targets = Vec::new();
    for i in 0..VAL_BATCHES {
        let (_, y) = lm.validation_batch(i).unwrap();
        targets.extend(data.decode(&y).chars());
    }
    let unigram = unigram_cross_entropy(&text, &targets);
    let uniform = (vocab as f64).ln();
    let start = lm.val_loss(VAL_BATCHES).unwrap();
    assert!(
        (f64::from(start) - uniform).abs() < 0.1,
        "the untrained model's loss {start} should be near ln({vocab}) = {uniform:.4}"
    );
    for _ in 0..STEPS {
        let s = lm.step().unwrap();
        assert!(
            s.loss.is_finite(),
            "step {}: loss {}",
            lm.step_count(),
            s.loss
        );
    }
    let val = lm.val_loss(VAL_BATCHES).unwrap();
    eprintln!(
        "after {STEPS} steps: val loss {val:.4} (untrained {start:.4}, unigram {unigram:.4}, bound \
         {VAL_LOSS_BOUND})"
    );
    assert!(
        val < VAL_LOSS_BOUND,
        "val loss {val} after {STEPS} steps is above the bound {VAL_LOSS_BOUND}"
    );
    assert!(
        f64::from(val) < unigram,
        "val loss {val} after {STEPS} steps does not beat character frequencies ({unigram:.4})"
    );
}
