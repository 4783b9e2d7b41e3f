//! `aneforge train-digits` and `aneforge train-fashion`: a small CNN trained from scratch on the
//! 8×8 handwritten digits or on Fashion-MNIST, with held-out accuracy after every epoch.

use crate::engine_args::EngineArgs;
use aneforge_apps::classifier::{ClassifierConfig, ImageClassifier};
use aneforge_apps::images::{ImageSet, FASHION_FILES};
use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
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

#[derive(clap::Args, Debug)]
pub struct FashionArgs {
    #[arg(long, default_value_t = 10)]
    pub epochs: u64,
    #[arg(short = 's', long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 2e-3)]
    pub lr: f32,
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Train on the first N training images only (default: all 60,000).
    #[arg(long, value_name = "N")]
    pub train_images: Option<usize>,
    /// Do not mirror training images at random.
    #[arg(long)]
    pub no_flip: bool,
    /// Keep the learning rate constant instead of decaying it to 0 along a half cosine over
    /// the run's epochs.
    #[arg(long)]
    pub constant_lr: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// A directory with the four IDX files (gzip-compressed or not), or a model id in the
    /// Hugging Face cache (default: zalandoresearch/fashion-mnist as `scripts/fetch-models.sh
    /// fashion-mnist` places it, else /usr/share/datasets/fashion-mnist from Debian's
    /// dataset-fashion-mnist package).
    #[arg(long)]
    pub data: Option<String>,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

/// The repository's `data/digits.csv`, built in so an installed binary needs no checkout.
const DIGITS: &str = include_str!("../../../data/digits.csv");

const FASHION_ID: &str = "zalandoresearch/fashion-mnist";
const FASHION_DEBIAN: &str = "/usr/share/datasets/fashion-mnist";

pub fn run_digits(args: DigitsArgs) -> anyhow::Result<()> {
    let (engine, target) = args.engine.select()?;
    let (data, source) = match &args.data {
        Some(path) => (
            ImageSet::load_digits(path).with_context(|| format!("loading {}", path.display()))?,
            path.display().to_string(),
        ),
        None => (
            ImageSet::parse_digits(DIGITS, "data/digits.csv")?,
            "data/digits.csv (built in)".to_string(),
        ),
    };
    let cfg = ClassifierConfig {
        seed: args.seed,
        lr: args.lr,
        ..ClassifierConfig::digits()
    };
    let (train, test) = data.split(0.2, cfg.seed);
    let model = ImageClassifier::new(train, test, cfg, target.clone(), engine)?;
    let about = format!("{source}; engine {engine:?}, target {target}");
    train_and_report(model, &about, args.epochs, true)
}

pub fn run_fashion(args: FashionArgs) -> anyhow::Result<()> {
    let (engine, target) = args.engine.select()?;
    let dir = fashion_dir(args.data.as_deref())?;
    let (mut train, test) = ImageSet::load_fashion_mnist(&dir)?;
    if let Some(n) = args.train_images {
        if n == 0 || n > train.len() {
            bail!(
                "--train-images {n}: {} has {} training images",
                dir.display(),
                train.len()
            );
        }
        train = train.subset(&(0..n).collect::<Vec<_>>());
    }
    let cfg = ClassifierConfig {
        seed: args.seed,
        lr: args.lr,
        batch: args.batch,
        hflip: !args.no_flip,
        cosine_epochs: (!args.constant_lr).then_some(args.epochs),
        ..ClassifierConfig::fashion()
    };
    let model = ImageClassifier::new(train, test, cfg, target.clone(), engine)?;
    let about = format!(
        "Fashion-MNIST from {}; engine {engine:?}, target {target}",
        dir.display()
    );
    train_and_report(model, &about, args.epochs, args.quiet)
}

/// Where the Fashion-MNIST files are: `--data` (a directory or a hub-cache id), else the
/// fetched pseudo-model, else Debian's package.
fn fashion_dir(spec: Option<&str>) -> anyhow::Result<PathBuf> {
    let has_files = |d: &Path| FASHION_FILES.iter().all(|f| d.join(f).is_file());
    if let Some(spec) = spec {
        let dir = aneforge_models::resolve(spec)?.dir().to_path_buf();
        if !has_files(&dir) {
            bail!(
                "{} does not hold the Fashion-MNIST files ({})",
                dir.display(),
                FASHION_FILES.join(", ")
            );
        }
        return Ok(dir);
    }
    if let Ok(m) = aneforge_models::resolve(FASHION_ID) {
        if has_files(m.dir()) {
            return Ok(m.dir().to_path_buf());
        }
    }
    let debian = Path::new(FASHION_DEBIAN);
    if has_files(debian) {
        return Ok(debian.to_path_buf());
    }
    bail!(
        "Fashion-MNIST not found: neither {FASHION_ID} in the Hugging Face cache nor \
         {FASHION_DEBIAN}; run scripts/fetch-models.sh fashion-mnist, install Debian's \
         dataset-fashion-mnist, or pass --data DIR"
    )
}

fn train_and_report(
    mut model: ImageClassifier,
    about: &str,
    epochs: u64,
    quiet: bool,
) -> anyhow::Result<()> {
    let cfg = model.config().clone();
    println!(
        "{about}: {} training and {} test images; CNN widths {:?}, group norm ({} groups), \
         AdamW lr {}, batch {}{}{}",
        model.train_len(),
        model.test_len(),
        cfg.widths,
        cfg.norm_groups,
        cfg.lr,
        cfg.batch,
        if cfg.hflip { ", random mirroring" } else { "" },
        match cfg.cosine_epochs {
            Some(e) => format!(", cosine decay over {e} epochs"),
            None => String::new(),
        }
    );
    let start = Instant::now();
    for _ in 0..epochs {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} batches ({eta})")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar
        };
        let s = model.epoch_with(|done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })?;
        bar.finish_and_clear();
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
