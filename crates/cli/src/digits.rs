//! `aneforge train-digits`: a small CNN on the 8×8 handwritten digits, with held-out accuracy.

use crate::engine_args::EngineArgs;
use aneforge_apps::data::Digits;
use aneforge_apps::digits::{DigitsClassifier, DigitsConfig};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct DigitsArgs {
    #[arg(long, default_value_t = 15)]
    pub epochs: u64,
    #[arg(short = 's', long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 3e-3)]
    pub lr: f32,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The digits file (default: data/digits.csv, built into the binary).
    #[arg(long)]
    pub data: Option<PathBuf>,
}

/// The repository's `data/digits.csv`, built in so an installed binary needs no checkout.
const DIGITS: &str = include_str!("../../../data/digits.csv");

pub fn run(args: DigitsArgs) -> anyhow::Result<()> {
    let (engine, target) = args.engine.select()?;
    let (data, source) = match &args.data {
        Some(path) => (
            Digits::load(path).with_context(|| format!("loading {}", path.display()))?,
            path.display().to_string(),
        ),
        None => (
            Digits::parse(DIGITS, "data/digits.csv")?,
            "data/digits.csv (built in)".to_string(),
        ),
    };
    let cfg = DigitsConfig {
        seed: args.seed,
        lr: args.lr,
        ..DigitsConfig::default()
    };
    let mut model = DigitsClassifier::new(&data, cfg.clone(), target.clone(), engine)?;
    println!(
        "{}: {} training and {} test images; CNN widths {:?}, group norm ({} groups), AdamW lr {}; \
         engine {engine:?}, target {target}",
        source,
        model.train_len(),
        model.test_len(),
        cfg.widths,
        cfg.norm_groups,
        cfg.lr
    );
    let start = Instant::now();
    for _ in 0..args.epochs {
        let s = model.epoch()?;
        println!(
            "epoch {:>2}: train loss {:.4}, train accuracy {:.1}%, test accuracy {:.1}%",
            s.epoch,
            s.train_loss,
            100.0 * s.train_accuracy,
            100.0 * model.test_accuracy()?
        );
    }
    println!(
        "test accuracy {:.2}% on {} held-out images ({:.1} s)",
        100.0 * model.test_accuracy()?,
        model.test_len(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
