//! `aneforge serve`: the OpenAI-compatible HTTP server (crates/serve).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use aneforge_models::encoders::{CrossEncoder, SentenceEncoder};
use aneforge_serve::rag::ask::{AskOptions, Rag, Reranker};
use aneforge_serve::{AppState, ChatModel, EmbedModel, Limits, Metrics, RerankModel, Scheduler};
use anyhow::Context;

use crate::encoder_args::EncoderArgs;
use crate::llm::ModelArgs;
use crate::model_hints::{self, Wants};

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A sentence-transformers model for /v1/embeddings (and retrieval with --rag-db).
    #[arg(long, value_name = "MODEL")]
    pub embed_model: Option<String>,
    /// A cross-encoder for /v1/rerank (and reranking retrieved passages with --rag-db).
    #[arg(long, value_name = "MODEL")]
    pub rerank_model: Option<String>,
    /// An index from `aneforge rag index`: chat requests naming the model `rag` answer from it.
    #[arg(long, value_name = "PATH", requires = "embed_model")]
    pub rag_db: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Sequences generated at the same time (one runner and KV cache each).
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub parallel: usize,
    /// Requests waiting for a generation worker; more get 503.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// The largest max_tokens a request may ask for.
    #[arg(long, default_value_t = 4096)]
    pub max_tokens_limit: usize,
    /// Request bodies larger than this are refused with 413.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body_bytes: usize,
}

fn encoder_args(model: &str, base: &ModelArgs) -> EncoderArgs {
    EncoderArgs {
        model: model.to_string(),
        engine: base.engine.clone(),
        compress: "none".into(),
        batch_size: 32,
        max_length: None,
        matmul: Default::default(),
        quiet: true,
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .with_context(|| format!("--host {} --port {}: not an address", args.host, args.port))?;
    let metrics = Arc::new(Metrics::default());
    let loaded = crate::llm::load(&args.model, Vec::new(), None)?;
    let template = loaded.llm.chat().ok();
    let scheduler = Scheduler::start(
        loaded.llm.clone(),
        loaded.opts.clone(),
        args.parallel,
        args.max_queue,
        metrics.clone(),
    )?;
    let llm = ChatModel {
        id: args.model.model.clone(),
        llm: loaded.llm.clone(),
        template,
        scheduler,
    };
    let embed = match &args.embed_model {
        Some(m) => {
            let e = encoder_args(m, &args.model);
            let encoder = SentenceEncoder::load(m, e.options()?)
                .map_err(|err| model_hints::explain(err.into(), m, Wants::Encoder))?;
            Some(EmbedModel {
                id: m.clone(),
                encoder: Arc::new(encoder),
            })
        }
        None => None,
    };
    let rerank = match &args.rerank_model {
        Some(m) => {
            let e = encoder_args(m, &args.model);
            let encoder = CrossEncoder::load(m, e.options()?)
                .map_err(|err| model_hints::explain(err.into(), m, Wants::Encoder))?;
            Some(RerankModel {
                id: m.clone(),
                encoder: Arc::new(encoder),
            })
        }
        None => None,
    };
    let rag = match (&args.rag_db, &embed) {
        (Some(db), Some(e)) => Some(Arc::new(Rag::open(
            "rag",
            db,
            &e.id,
            e.encoder.clone(),
            rerank.as_ref().map(|r| Reranker::Cross(r.encoder.clone())),
            AskOptions::default(),
        )?)),
        _ => None,
    };
    let state = Arc::new(AppState {
        llm: Some(llm),
        embed,
        rerank,
        rag,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_tokens: args.max_tokens_limit,
            max_queue: args.max_queue,
            ..Limits::default()
        },
        metrics,
    });
    let runtime = tokio_runtime()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        eprintln!(
            "serving {} on http://{} ({} generation workers); SIGTERM or Ctrl-C stops",
            state.model_ids().join(", "),
            listener.local_addr()?,
            args.parallel
        );
        aneforge_serve::serve(listener, state, aneforge_serve::shutdown_signal())
            .await
            .context("serving")
    })?;
    eprintln!("stopped");
    Ok(())
}

fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the HTTP runtime")
}
