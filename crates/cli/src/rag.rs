//! `aneforge rag index` and `aneforge rag ask`: retrieval-augmented answers over a documents
//! directory (crates/serve's rag module).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use aneforge_models::encoders::{CrossEncoder, SentenceEncoder};
use aneforge_models::llm::{generate, GenerateOptions, Runner, SamplingOptions};
use aneforge_serve::energy;
use aneforge_serve::rag::ask::{AskOptions, CandidatePool, Rag, Reranker};
use aneforge_serve::rag::chunk::ChunkOptions;
use aneforge_serve::rag::index::index;
use aneforge_serve::rag::store::Store;
use anyhow::Context;

use crate::encoder_args::EncoderArgs;
use crate::llm::ModelArgs;
use crate::model_hints::{self, Wants};
use crate::output::{print_json, FormatArgs};

#[derive(clap::Subcommand)]
pub enum RagCommand {
    /// Index a documents directory (or one text file) into an index file; files whose content
    /// is unchanged since the last run are skipped, removed files are dropped.
    Index(IndexArgs),
    /// Answer a question from an index, citing the passages used.
    Ask(AskArgs),
}

#[derive(clap::Args)]
pub struct IndexArgs {
    /// A directory of .txt/.md/.rst files (searched recursively) or one text file.
    pub docs: PathBuf,
    /// The index file (SQLite with sqlite-vec), created if absent.
    #[arg(long)]
    pub db: PathBuf,
    /// The sentence-transformers model that embeds the chunks.
    #[arg(
        long = "embed-model",
        default_value = "sentence-transformers/all-MiniLM-L6-v2"
    )]
    pub embed_model: String,
    /// The longest chunk in bytes (whole lines; longer lines are split at spaces).
    #[arg(long, default_value_t = 800)]
    pub chunk_chars: usize,
    /// Bytes of lines consecutive chunks share.
    #[arg(long, default_value_t = 200)]
    pub overlap_chars: usize,
    /// The longest unit in bytes: each chunk is cut into units of a few lines, which the searches
    /// match (embedding and words); the chunk holding the best units is cited.
    #[arg(long, default_value_t = 300)]
    pub unit_chars: usize,
    #[command(flatten)]
    pub engine: crate::engine_args::EngineArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Pool {
    Fused,
    Bm25,
}

#[derive(clap::Args)]
pub struct AskArgs {
    /// The question.
    pub question: String,
    #[arg(long)]
    pub db: PathBuf,
    /// The LLM that answers (id, directory or .gguf).
    #[command(flatten)]
    pub model: ModelArgs,
    /// The model the index was built with.
    #[arg(
        long = "embed-model",
        default_value = "sentence-transformers/all-MiniLM-L6-v2"
    )]
    pub embed_model: String,
    /// A cross-encoder that reranks the fused chunks (optional).
    #[arg(long = "rerank-model")]
    pub rerank_model: Option<String>,
    /// An embedding model that reorders the fused chunks by the cosine of their embeddings to the
    /// question's, usually a larger one than the index's (optional; instead of --rerank-model).
    #[arg(long = "rescore-model", conflicts_with = "rerank_model")]
    pub rescore_model: Option<String>,
    /// Passages given to the LLM and cited.
    #[arg(short = 'k', long, default_value_t = 3)]
    pub top_k: usize,
    /// Chunks taken from each search (embedding and words) before they are fused and reranked.
    #[arg(long, default_value_t = 20)]
    pub candidates: usize,
    /// Where the candidates come from: the word search (BM25) alone, or both searches (embedding
    /// and words) fused by reciprocal rank; --rescore-model or --rerank-model reorders them.
    #[arg(long = "candidate-pool", value_enum, default_value_t = Pool::Bm25)]
    pub pool: Pool,
    /// Most tokens of the answer.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 256)]
    pub max_tokens: usize,
    /// Only retrieve: print the passages that would be cited, without running the LLM.
    #[arg(long)]
    pub retrieve_only: bool,
    #[command(flatten)]
    pub format: FormatArgs,
}

pub fn run(command: RagCommand) -> anyhow::Result<()> {
    match command {
        RagCommand::Index(args) => index_cmd(args),
        RagCommand::Ask(args) => ask_cmd(args),
    }
}

fn encoder(
    model: &str,
    engine: &crate::engine_args::EngineArgs,
) -> anyhow::Result<SentenceEncoder> {
    let args = EncoderArgs {
        model: model.to_string(),
        engine: engine.clone(),
        compress: "none".into(),
        batch_size: 32,
        max_length: None,
        matmul: Default::default(),
        quiet: true,
    };
    SentenceEncoder::load(model, args.options()?)
        .map_err(|e| model_hints::explain(e.into(), model, Wants::Encoder))
}

fn index_cmd(args: IndexArgs) -> anyhow::Result<()> {
    let encoder = encoder(&args.embed_model, &args.engine)?;
    let mut store = Store::open(&args.db, &args.embed_model, encoder.dimension())?;
    let opts = ChunkOptions {
        max_chars: args.chunk_chars,
        overlap_chars: args.overlap_chars,
        unit_chars: args.unit_chars,
    };
    let report = index(&args.docs, &mut store, &encoder, &opts, &mut |key, n| {
        eprintln!("indexed {key}: {n} chunks");
    })?;
    let counts = store.counts()?;
    eprintln!(
        "{}: {} added, {} updated, {} unchanged, {} removed; the index holds {} files, {} chunks",
        args.db.display(),
        report.added,
        report.updated,
        report.unchanged,
        report.removed,
        counts.files,
        counts.chunks
    );
    Ok(())
}

#[derive(serde::Serialize)]
struct Answer<'a> {
    question: &'a str,
    answer: Option<String>,
    sources: &'a [aneforge_serve::rag::ask::Source],
    energy_joules: Option<f64>,
}

fn ask_cmd(args: AskArgs) -> anyhow::Result<()> {
    let embed = Arc::new(encoder(&args.embed_model, &args.model.engine)?);
    let reranker = match &args.rerank_model {
        Some(m) => {
            let e = EncoderArgs {
                model: m.clone(),
                engine: args.model.engine.clone(),
                compress: "none".into(),
                batch_size: 32,
                max_length: None,
                matmul: Default::default(),
                quiet: true,
            };
            Some(Reranker::Cross(Arc::new(
                CrossEncoder::load(m, e.options()?)
                    .map_err(|err| model_hints::explain(err.into(), m, Wants::Encoder))?,
            )))
        }
        None => match &args.rescore_model {
            Some(m) => Some(Reranker::Embedding(Arc::new(encoder(
                m,
                &args.model.engine,
            )?))),
            None => None,
        },
    };
    let rag = Rag::open(
        "rag",
        &args.db,
        &args.embed_model,
        embed,
        reranker,
        AskOptions {
            top_k: args.top_k,
            candidates: args.candidates,
            pool: match args.pool {
                Pool::Fused => CandidatePool::Fused,
                Pool::Bm25 => CandidatePool::Bm25,
            },
        },
    )?;
    let meter = energy::Meter::start();
    let sources = rag.retrieve(&args.question)?;
    let answer = if args.retrieve_only {
        None
    } else {
        let loaded = crate::llm::load(&args.model, Vec::new(), None)?;
        let llm = loaded.llm.clone();
        let prompt = llm.encode_raw(
            &llm.chat()?
                .render(&Rag::messages(&args.question, &sources, &[]), true)?,
        )?;
        let mut runner =
            Runner::new(llm, loaded.opts.clone()).context("compiling the model's step programs")?;
        let opts = GenerateOptions {
            max_new_tokens: args.max_tokens,
            sampling: SamplingOptions::greedy(),
            ..GenerateOptions::default()
        };
        let text = args.format.is_text();
        let mut out = |t: &str| {
            if text {
                let mut o = std::io::stdout().lock();
                o.write_all(t.as_bytes()).is_ok() && o.flush().is_ok()
            } else {
                true
            }
        };
        Some(generate(&mut runner, &prompt, &opts, &mut out)?.text)
    };
    let energy = match meter.and_then(energy::Meter::stop) {
        Ok(e) => Some(e),
        Err(reason) => {
            eprintln!("energy: not measured ({reason})");
            None
        }
    };
    if args.format.is_text() {
        if answer.is_none() {
            for (i, s) in sources.iter().enumerate() {
                println!(
                    "[{}] {} (score {:.4})\n{}\n",
                    i + 1,
                    s.location(),
                    s.score,
                    s.text
                );
            }
        } else {
            println!("{}", Rag::citations(&sources));
        }
        if let Some(e) = energy {
            eprintln!(
                "energy: {:.2} J over {:.2} s ({} powermetrics samples)",
                e.joules, e.seconds, e.samples
            );
        }
        return Ok(());
    }
    let record = Answer {
        question: &args.question,
        answer,
        sources: &sources,
        energy_joules: energy.map(|e| e.joules),
    };
    print_json(args.format.get(), std::slice::from_ref(&record))
}
