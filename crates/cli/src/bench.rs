//! `aneforge bench ...`: throughput measurements meant to run next to peer scripts
//! (tools/bench/embed.sh runs `bench embed` beside sentence-transformers on PyTorch and ONNX
//! Runtime; the CPU engine's kernel benchmarks run their peers themselves, see bench_cpu.rs).

use std::path::PathBuf;
use std::time::Instant;

use aneforge_models::encoders::SentenceEncoder;
use anyhow::bail;

use crate::encoder_args::EncoderArgs;
use crate::input::read_lines;
use crate::model_hints::{self, Wants};
use crate::output::FormatArgs;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Sentence-embedding throughput over a file of sentences (one per line).
    Embed(BenchEmbedArgs),
    /// Image-classifier throughput at several batch sizes (tools/bench/vision.sh runs it beside
    /// PyTorch and ONNX Runtime).
    Vision(crate::bench_vision::BenchVisionArgs),
    /// Prefill and decode speed of an LLM (batch 1), with peak memory.
    Llm(crate::llm::BenchLlmArgs),
    /// Latency of one function of a program directory (from `compile` or `import`) fed .npy
    /// inputs: load, first run, median and best of timed runs, peak memory.
    Program(crate::bench_program::BenchProgramArgs),
    /// Training steps of the demo configuration (steps/s, tokens/s), optionally next to PyTorch
    /// running tools/bench/train_peer.py with the same configuration.
    Train(crate::bench_train::TrainArgs),
    /// CPU engine SGEMM (n×n×n fp32) with 1 and 2 threads, its ratio to the CPU's fp32 peak,
    /// optionally next to NumPy/OpenBLAS (--peer-python).
    Gemm(crate::bench_cpu::GemmArgs),
    /// CPU engine decode GEMV (1×k against an n×k weight: f32, or int8/int4 kept compressed),
    /// optionally next to PyTorch's linear.
    Gemv(crate::bench_cpu::GemvArgs),
    /// CPU engine 3×3 convolutions on ResNet-50's stage shapes, optionally next to PyTorch.
    Conv(crate::bench_cpu::ConvArgs),
    /// CPU engine scaled dot-product attention (S=128 and 512, 12 heads × 64), optionally next
    /// to PyTorch's SDPA.
    Attention(crate::bench_cpu::AttentionArgs),
    /// The CPU engine's fixed cost per execute of a tiny program.
    Overhead(crate::bench_cpu::OverheadArgs),
}

#[derive(clap::Args)]
pub struct BenchEmbedArgs {
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// Sentences, one per line (`-`: stdin).
    #[arg(long, short = 'f')]
    pub file: PathBuf,
    /// Timed passes over all sentences after the first (which compiles the programs).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    #[command(flatten)]
    pub format: FormatArgs,
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Embed(args) => embed(args),
        BenchCommand::Vision(args) => crate::bench_vision::run(args),
        BenchCommand::Llm(args) => crate::llm::bench_llm(args),
        BenchCommand::Program(args) => crate::bench_program::run(args),
        BenchCommand::Train(args) => crate::bench_train::train(args),
        BenchCommand::Gemm(args) => crate::bench_cpu::gemm(args),
        BenchCommand::Gemv(args) => crate::bench_cpu::gemv(args),
        BenchCommand::Conv(args) => crate::bench_cpu::conv(args),
        BenchCommand::Attention(args) => crate::bench_cpu::attention(args),
        BenchCommand::Overhead(args) => crate::bench_cpu::overhead(args),
    }
}

/// Peak resident set size of this process in MiB (Linux `VmHWM`).
pub(crate) fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn embed(args: BenchEmbedArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let sentences = read_lines(&args.file)?;
    if sentences.is_empty() {
        bail!("{} holds no sentences", args.file.display());
    }
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let start = Instant::now();
    let options = args.encoder.options()?;
    let target = options.target.to_string();
    let encoder = SentenceEncoder::load(&args.encoder.model, options)
        .map_err(|e| model_hints::explain(e.into(), &args.encoder.model, Wants::Encoder))?;
    let load_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let first = encoder.encode(&refs)?;
    let cold_s = start.elapsed().as_secs_f64();
    let mut times = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        let start = Instant::now();
        let again = encoder.encode(&refs)?;
        times.push(start.elapsed().as_secs_f64());
        if again.data != first.data {
            bail!("two passes over the same sentences gave different embeddings");
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let best = times[0];
    let n = sentences.len() as f64;
    let rss = peak_rss_mib().unwrap_or(f64::NAN);
    if !args.format.is_text() {
        let report = serde_json::json!({
            "system": "aneforge",
            "sentences": sentences.len(),
            "batch_size": args.encoder.batch_size,
            "target": target,
            "compress": args.encoder.compress,
            "load_s": load_s,
            "first_pass_s": cold_s,
            "median_s": median,
            "best_s": best,
            "sentences_per_s": n / median,
            "best_sentences_per_s": n / best,
            "programs": encoder.cached_programs(),
            "compiles": encoder.compiled_programs(),
            "peak_rss_mib": rss,
        });
        println!("{report}");
    } else {
        println!(
            "aneforge: {} sentences, batch {}, target {}: {:.1} sentences/s (median of {}, best \
             {:.1}); first pass {:.2} s; {} programs held, {} compiled in all; load {:.2} s; peak RSS \
             {:.0} MiB",
            sentences.len(),
            args.encoder.batch_size,
            target,
            n / median,
            args.runs,
            n / best,
            cold_s,
            encoder.cached_programs(),
            encoder.compiled_programs(),
            load_s,
            rss
        );
    }
    Ok(())
}
