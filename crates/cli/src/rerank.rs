//! `aneforge rerank`: passages ordered by a cross-encoder's score for a query.

use std::path::PathBuf;

use aneforge_models::encoders::CrossEncoder;

use crate::encoder_args::{progress, EncoderArgs};
use crate::model_hints::{self, Wants};
use crate::output::{print_json, FormatArgs};

#[derive(clap::Args)]
pub struct RerankArgs {
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// The query.
    #[arg(long)]
    pub query: String,
    /// Passages to rank (without passages or --file, stdin is read, one passage per line; `-`
    /// too).
    pub passages: Vec<String>,
    /// A UTF-8 file with one passage per line (`-`: stdin).
    #[arg(long, short = 'f', conflicts_with = "passages")]
    pub file: Option<PathBuf>,
    /// Show only the best K passages.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Raw logits instead of the model's activation (sigmoid for one-label models).
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub format: FormatArgs,
}

#[derive(serde::Serialize)]
struct Entry<'a> {
    index: usize,
    score: f32,
    text: &'a str,
}

pub fn run(args: RerankArgs) -> anyhow::Result<()> {
    let passages = crate::input::texts(&args.passages, args.file.as_deref(), "passages")?;
    let model = CrossEncoder::load(&args.encoder.model, args.encoder.options()?)
        .map_err(|e| model_hints::explain(e.into(), &args.encoder.model, Wants::Encoder))?;
    let bar = progress(
        passages.len(),
        args.encoder.batch_size,
        args.encoder.quiet,
        "passages",
    );
    let refs: Vec<&str> = passages.iter().map(String::as_str).collect();
    let ranked = model.rank(&args.query, &refs, args.top_k, args.raw, &mut |n| {
        bar.inc(n as u64)
    })?;
    bar.finish_and_clear();
    let entries: Vec<Entry> = ranked
        .iter()
        .map(|r| Entry {
            index: r.corpus_id,
            score: r.score,
            text: &passages[r.corpus_id],
        })
        .collect();
    if !args.format.is_text() {
        print_json(args.format.get(), &entries)?;
    } else {
        for e in &entries {
            println!("{:.6}\t{}\t{}", e.score, e.index, e.text);
        }
    }
    Ok(())
}
