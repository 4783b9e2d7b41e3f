//! `aneforge rerank`: passages ordered by a cross-encoder's score for a query.

use std::path::PathBuf;

use aneforge_models::encoders::CrossEncoder;
use anyhow::bail;

use crate::encoder_args::{progress, read_lines, EncoderArgs};

#[derive(clap::Args)]
pub struct RerankArgs {
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// The query.
    #[arg(long)]
    pub query: String,
    /// Passages to rank (or use --file).
    pub passages: Vec<String>,
    /// A UTF-8 file with one passage per line.
    #[arg(long, short = 'f', conflicts_with = "passages")]
    pub file: Option<PathBuf>,
    /// Show only the best K passages.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Raw logits instead of the model's activation (sigmoid for one-label models).
    #[arg(long)]
    pub raw: bool,
    /// text (score, index, passage per line) or json.
    #[arg(long, default_value = "text")]
    pub format: String,
}

#[derive(serde::Serialize)]
struct Entry<'a> {
    index: usize,
    score: f32,
    text: &'a str,
}

pub fn run(args: RerankArgs) -> anyhow::Result<()> {
    let json = match args.format.as_str() {
        "text" => false,
        "json" => true,
        other => bail!("--format {other}: expected text or json"),
    };
    let passages = match &args.file {
        Some(path) => read_lines(path)?,
        None => args.passages.clone(),
    };
    let model = CrossEncoder::load(&args.encoder.model, args.encoder.options()?)?;
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
    if json {
        println!("{}", serde_json::to_string(&entries)?);
    } else {
        for e in &entries {
            println!("{:.6}\t{}\t{}", e.score, e.index, e.text);
        }
    }
    Ok(())
}
