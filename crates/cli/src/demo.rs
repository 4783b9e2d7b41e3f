//! `aneforge demo`: trains a character-level transformer on Shakespeare from scratch, then
//! samples from it.

use crate::engine_args::EngineArgs;
use aneforge_apps::char_lm::{CharLm, CharLmConfig};
use aneforge_apps::data::CharDataset;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;

/// The training steps the README's main command runs.
pub const DEFAULT_STEPS: u64 = 600;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Total optimizer steps (with --resume, the step count to reach).
    #[arg(long, default_value_t = DEFAULT_STEPS)]
    pub steps: u64,
    /// Seed for the initial weights, the batches and sampling.
    #[arg(short = 's', long, default_value_t = 1337)]
    pub seed: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Continue from the checkpoint instead of starting over.
    #[arg(long)]
    pub resume: bool,
    /// Directory for the checkpoint (default: $XDG_DATA_HOME/aneforge/demo, else
    /// ~/.local/share/aneforge/demo).
    #[arg(short = 'o', long = "output", alias = "out", value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Checkpoint file (written every --checkpoint-every steps and at the end; default:
    /// checkpoint.safetensors in the --output directory).
    #[arg(long, conflicts_with = "output")]
    pub checkpoint: Option<PathBuf>,
    #[arg(long, default_value_t = 200)]
    pub checkpoint_every: u64,
    /// Training text (default: data/shakespeare.txt, built into the binary).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Validation batches (of 32 × 128 characters) for the held-out loss.
    #[arg(long, default_value_t = 8)]
    pub val_batches: u64,
    /// Print the validation loss every this many steps (0: only at the end).
    #[arg(long, default_value_t = 200)]
    pub eval_every: u64,
    /// The start of the sample.
    #[arg(short = 'p', long, default_value = "ROMEO:")]
    pub prompt: String,
    /// Characters to sample after training.
    #[arg(long, default_value_t = 400)]
    pub sample_chars: usize,
    #[arg(long, visible_alias = "temp", default_value_t = 0.8)]
    pub temperature: f32,
}

/// The repository's `data/shakespeare.txt`, built in so an installed binary needs no checkout.
const SHAKESPEARE: &str = include_str!("../../../data/shakespeare.txt");

/// The training text: `path`, else the built-in Shakespeare; and how to name it.
pub fn training_text(path: Option<&std::path::Path>) -> anyhow::Result<(CharDataset, String)> {
    match path {
        Some(path) => Ok((
            CharDataset::load(path, 0.1)
                .with_context(|| format!("loading the training text {}", path.display()))?,
            path.display().to_string(),
        )),
        None => Ok((
            CharDataset::new(SHAKESPEARE, 0.1)?,
            "data/shakespeare.txt (built in)".to_string(),
        )),
    }
}

/// The checkpoint's directory exists (created if needed) and takes a new file, and the checkpoint
/// itself is not a directory: found before training instead of after it.
fn check_checkpoint_path(checkpoint: &std::path::Path) -> anyhow::Result<()> {
    let parent = checkpoint
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    if checkpoint.is_dir() {
        anyhow::bail!(
            "the checkpoint {} is a directory; name a file (or use --output DIR)",
            checkpoint.display()
        );
    }
    tempfile::NamedTempFile::new_in(parent).with_context(|| {
        format!(
            "cannot write the checkpoint {}: its directory does not take new files",
            checkpoint.display()
        )
    })?;
    Ok(())
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    // flags that would only fail after training are checked before it
    CharLm::check_temperature(args.temperature).context("--temperature")?;
    if args.val_batches == 0 {
        anyhow::bail!("--val-batches must be at least 1 (the validation loss is a mean over them)");
    }
    let (engine, target) = args.engine.select()?;
    let checkpoint = match (&args.checkpoint, &args.output) {
        (Some(file), _) => file.clone(),
        (None, Some(dir)) => dir.join("checkpoint.safetensors"),
        (None, None) => crate::user_data::dir()?
            .join("demo")
            .join("checkpoint.safetensors"),
    };
    check_checkpoint_path(&checkpoint)?;
    let (data, source) = training_text(args.data.as_deref())?;
    data.encode(&args.prompt).with_context(|| {
        format!(
            "--prompt {:?} cannot be sampled from after training on {source}",
            args.prompt
        )
    })?;
    let cfg = CharLmConfig {
        seed: args.seed,
        ..CharLmConfig::default()
    };
    println!(
        "aneforge demo: a {}-layer transformer (d_model {}, {} heads, MLP {}, context {}, {} \
         parameters) learns {} from scratch",
        cfg.layers,
        cfg.d_model,
        cfg.heads,
        cfg.mlp,
        cfg.context,
        cfg.gpt(data.vocab_size()).params(),
        source
    );
    println!(
        "{} training / {} validation characters, vocabulary {}; batch {} × {}, AdamW lr {}; \
         engine {engine:?}, target {target}",
        data.split_len(aneforge_apps::data::Split::Train),
        data.split_len(aneforge_apps::data::Split::Validation),
        data.vocab_size(),
        cfg.batch,
        cfg.context,
        cfg.lr
    );
    let compile_start = Instant::now();
    let mut lm = CharLm::new(data, cfg, target, engine).context("building the training step")?;
    println!(
        "compiled the training step in {:.1} s",
        compile_start.elapsed().as_secs_f64()
    );
    if args.resume {
        lm.resume(&checkpoint)
            .with_context(|| format!("resuming from {}", checkpoint.display()))?;
        println!(
            "resumed from {} at step {}",
            checkpoint.display(),
            lm.step_count()
        );
    }
    let start_step = lm.step_count();
    if start_step == 0 {
        println!("step 0: val loss {:.4}", lm.val_loss(args.val_batches)?);
    }
    let bar = ProgressBar::new(args.steps);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:32.cyan/blue} {pos}/{len} steps [{elapsed_precise}<{eta_precise}] {msg}",
        )?
        .progress_chars("=> "),
    );
    bar.set_position(start_step);
    let tokens = lm.tokens_per_step() as f64;
    let started = Instant::now();
    let mut smoothed: Option<f32> = None;
    while lm.step_count() < args.steps {
        let stats = lm.step()?;
        let step = lm.step_count();
        smoothed = Some(match smoothed {
            None => stats.loss,
            Some(s) => 0.9 * s + 0.1 * stats.loss,
        });
        let done = (step - start_step) as f64;
        let rate = done * tokens / started.elapsed().as_secs_f64();
        bar.set_position(step);
        bar.set_message(format!(
            "loss {:.4}  {:.0} tokens/s",
            smoothed.unwrap_or(stats.loss),
            rate
        ));
        // a step skipped by loss scaling (fp16) leaves the step count where it was
        if stats.skipped {
            continue;
        }
        if args.eval_every > 0 && step % args.eval_every == 0 && step < args.steps {
            let val = lm.val_loss(args.val_batches)?;
            let train = smoothed.unwrap_or(stats.loss);
            bar.suspend(|| println!("step {step}: train loss {train:.4}, val loss {val:.4}"));
        }
        if args.checkpoint_every > 0 && step % args.checkpoint_every == 0 {
            lm.save(&checkpoint)?;
        }
    }
    bar.finish();
    let elapsed = started.elapsed().as_secs_f64();
    let trained = lm.step_count() - start_step;
    if trained > 0 {
        println!(
            "trained {trained} steps in {elapsed:.1} s: {:.2} steps/s, {:.0} tokens/s",
            trained as f64 / elapsed,
            trained as f64 * tokens / elapsed
        );
    }
    let val = lm.val_loss(args.val_batches)?;
    println!(
        "step {}: val loss {val:.4} (held-out, {} batches)",
        lm.step_count(),
        args.val_batches
    );
    lm.save(&checkpoint)?;
    println!("checkpoint: {}", checkpoint.display());
    let sample = lm.sample(&args.prompt, args.sample_chars, args.temperature, args.seed)?;
    println!("--- sample (temperature {}) ---", args.temperature);
    println!("{}{}", args.prompt, sample);
    Ok(())
}
