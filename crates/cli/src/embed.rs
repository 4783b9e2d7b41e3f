//! `aneforge embed`: sentence embeddings as JSON, JSON lines or NumPy `.npy`.

use std::io::Write;
use std::path::PathBuf;

use aneforge_models::encoders::{EncodeOptions, Pooling, SentenceEncoder};
use anyhow::{bail, Context};

use crate::encoder_args::{progress, EncoderArgs};
use crate::model_hints::{self, Wants};

#[derive(clap::Args)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// Texts to embed (without texts or --file, stdin is read, one text per line; `-` too).
    pub texts: Vec<String>,
    /// A UTF-8 file with one text per line (`-`: stdin).
    #[arg(long, short = 'f', conflicts_with = "texts")]
    pub file: Option<PathBuf>,
    /// json (a list of vectors), jsonl (one vector per line) or npy (float32 [texts, dim];
    /// needs --output).
    #[arg(long, value_enum, default_value_t = EmbedFormat::Json)]
    pub format: EmbedFormat,
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// L2-normalise even if the model has no Normalize module.
    #[arg(long)]
    pub normalize: bool,
    /// Pooling instead of the model's: cls, mean, max, mean_sqrt_len_tokens, weightedmean,
    /// lasttoken; several comma-separated modes are concatenated.
    #[arg(long)]
    pub pooling: Option<String>,
    /// A prompt name from the model's config_sentence_transformers.json (e.g. query).
    #[arg(long, conflicts_with = "prompt")]
    pub prompt_name: Option<String>,
    /// A literal prompt prepended to every text.
    #[arg(long)]
    pub prompt: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedFormat {
    Json,
    Jsonl,
    Npy,
}

fn parse_pooling(s: &str) -> anyhow::Result<Vec<Pooling>> {
    s.split(',')
        .map(|m| {
            Pooling::parse(m.trim()).with_context(|| {
                let names: Vec<&str> = Pooling::ALL.iter().map(|p| p.name()).collect();
                format!("--pooling {m}: expected one of {}", names.join(", "))
            })
        })
        .collect()
}

/// Writes `bytes` to `path` (see [`aneforge::output::write_output`]).
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    aneforge::output::write_output(path, bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

pub fn run(args: EmbedArgs) -> anyhow::Result<()> {
    if args.format == EmbedFormat::Npy && args.output.is_none() {
        bail!("--format npy writes binary data: give --output FILE");
    }
    let texts = crate::input::texts(&args.texts, args.file.as_deref(), "texts")?;
    let options = EncodeOptions {
        prompt_name: args.prompt_name.clone(),
        prompt: args.prompt.clone(),
        normalize: args.normalize,
        pooling: args.pooling.as_deref().map(parse_pooling).transpose()?,
        batch_size: None,
    };
    let encoder = SentenceEncoder::load(&args.encoder.model, args.encoder.options()?)
        .map_err(|e| model_hints::explain(e.into(), &args.encoder.model, Wants::Encoder))?;
    let bar = progress(
        texts.len(),
        args.encoder.batch_size,
        args.encoder.quiet,
        "texts",
    );
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embeddings = encoder.encode_with(&refs, &options, &mut |n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    let rows: Vec<&[f32]> = embeddings.iter().collect();
    let bytes = match args.format {
        EmbedFormat::Json => {
            let mut text = serde_json::to_string(&rows)?;
            text.push('\n');
            text.into_bytes()
        }
        EmbedFormat::Jsonl => {
            let mut text = String::new();
            for row in &rows {
                text.push_str(&serde_json::to_string(row)?);
                text.push('\n');
            }
            text.into_bytes()
        }
        EmbedFormat::Npy => {
            aneforge_models::npy::to_bytes(&[embeddings.rows, embeddings.dim], &embeddings.data)
        }
    };
    match &args.output {
        Some(path) => write_atomically(path, &bytes),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            Ok(out.flush()?)
        }
    }
}
