//! Options shared by `embed`, `rerank` and `bench embed`: model, engine and target (the shared
//! [`EngineArgs`]), compression, batching; the progress bar.

use aneforge::{Compress, Target};
use aneforge_models::encoders::EncoderOptions;
use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};

use crate::engine_args::{EngineArgs, MatmulArgs};

#[derive(clap::Args, Clone, Debug)]
pub struct EncoderArgs {
    /// Model id (ORG/NAME in the Hugging Face cache) or directory.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Weight compression of ANE-target programs: none (the weights as stored), auto (the
    /// family's native formats), int8 or int4, each behind an accuracy gate.
    #[arg(long, default_value = "none")]
    pub compress: String,
    /// Texts per program execution.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Truncate texts to this many tokens (default: the model's maximum length).
    #[arg(long)]
    pub max_length: Option<usize>,
    #[command(flatten)]
    pub matmul: MatmulArgs,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl EncoderArgs {
    pub fn options(&self) -> anyhow::Result<EncoderOptions> {
        let (engine, target) = self.engine.select()?;
        let matmul = self.matmul.precision(engine, &target)?;
        Ok(EncoderOptions {
            compress: parse_compress(&self.compress, &target)?,
            target,
            engine,
            batch_size: self.batch_size,
            max_length: self.max_length,
            matmul,
            ..EncoderOptions::default()
        })
    }
}

pub fn parse_compress(s: &str, target: &Target) -> anyhow::Result<Compress> {
    let mode = match s {
        "none" => return Ok(Compress::None),
        "int8" => Compress::Int8,
        "int4" => Compress::Int4,
        "auto" => Compress::Auto,
        other => bail!("--compress {other}: expected none, auto, int8 or int4"),
    };
    if !target.is_ane() {
        bail!("--compress {s} re-encodes the weights of ANE programs: add --target ane (or an ANE architecture)");
    }
    Ok(mode)
}

/// A progress bar on stderr for inputs of more than a few batches (hidden when stderr is not a
/// terminal).
pub fn progress(total: usize, batch_size: usize, quiet: bool, what: &str) -> ProgressBar {
    if quiet || total <= 2 * batch_size {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    let style = ProgressStyle::with_template(&format!(
        "{{bar:40}} {{pos}}/{{len}} {what} ({{per_sec}}, eta {{eta}})"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}
