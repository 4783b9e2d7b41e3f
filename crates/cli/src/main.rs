use std::process::ExitCode;

use clap::{CommandFactory, Parser};

mod allocator;
mod bench;
mod bench_cpu;
mod bench_program;
mod bench_train;
mod bench_vision;
mod check_fp16;
mod classify;
mod compile;
mod demo;
mod embed;
mod encoder_args;
mod engine_args;
mod examples;
mod export;
mod finetune;
mod import;
mod input;
mod interrupt;
mod llm;
mod mil;
mod model_hints;
mod output;
mod quantize_args;
mod rag;
mod rerank;
mod run;
mod serve;
mod sigpipe;
mod targets;
mod train_images;
mod transcribe;
mod user_data;

/// aneforge: compile tensor graphs into Apple Neural Engine programs and run them.
#[derive(Parser)]
#[command(name = "aneforge", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The most memory one CPU-engine program may use at run time (arena, port buffers and
    /// scratch), e.g. 8G or 512M; a program that needs more is refused before it runs. Default:
    /// $ANEFORGE_MAX_MEMORY, else three quarters of RAM.
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_max_memory)]
    max_memory: Option<usize>,
}

fn parse_max_memory(text: &str) -> Result<usize, String> {
    aneforge_cpu::parse_bytes(text)
        .filter(|&b| b > 0)
        .ok_or_else(|| {
            format!("expected a positive byte count such as 8G, 512M or 1000000, got {text:?}")
        })
}

#[derive(clap::Subcommand)]
enum Command {
    /// MIL program directories.
    #[command(subcommand)]
    Mil(mil::MilCommand),
    /// Train a character-level transformer on Shakespeare from scratch, then sample from it.
    Demo(demo::DemoArgs),
    /// Train a small CNN on the 8x8 handwritten digits and report test accuracy.
    #[command(alias = "train-mnist")]
    TrainDigits(train_images::DigitsArgs),
    /// Train a CNN on Fashion-MNIST (28x28 clothes, 10 classes) and report test accuracy.
    TrainFashion(train_images::FashionArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// List the ANE architectures, their families, core counts and chip figures.
    Targets {
        #[command(flatten)]
        format: output::FormatArgs,
    },
    /// The per-op status (native / rewritten / walled) on an ANE family.
    Ops {
        /// Architecture or alias (h13…h18, m1…m5, a13…a18, …).
        #[arg(long)]
        target: String,
        /// Also list every MIL op of the registry.
        #[arg(long)]
        mil: bool,
        #[command(flatten)]
        format: output::FormatArgs,
    },
    /// Run a program directory (model.mil + weights/weight.bin, e.g. from `aneforge compile`) on
    /// an engine, with .npy inputs and outputs.
    Run(run::RunArgs),
    /// Compile a built-in example graph for an ANE architecture into program directories.
    Compile(compile::CompileArgs),
    /// Write a program directory as a Core ML .mlpackage.
    Export(export::ExportArgs),
    /// Compile an ONNX model into a program directory that `aneforge run` runs.
    Import(import::ImportArgs),
    /// Sentence embeddings from a sentence-transformers (or BERT-family) model, or a CLIP
    /// model's image embeddings (--images).
    Embed(embed::EmbedArgs),
    /// Rank passages for a query with a cross-encoder.
    Rerank(rerank::RerankArgs),
    /// The top-k ImageNet classes of images (EfficientNet-Lite, ResNet, MobileNetV3).
    Classify(classify::ClassifyArgs),
    /// Fine-tune a decoder LLM (every weight, or LoRA adapters) on a text or chat .jsonl file.
    Finetune(finetune::FinetuneArgs),
    /// Continue a prompt with a decoder LLM; the text streams to stdout, speeds to stderr.
    Generate(llm::GenerateArgs),
    /// An interactive conversation with a chat model (its chat template); one line per turn.
    Chat(llm::ChatArgs),
    /// Run an LLM's ANE-target fp16 program next to its fp32 program on a prompt and report,
    /// layer by layer and op by op, where fp16 overflows or drifts.
    #[command(name = "check-fp16")]
    CheckFp16(check_fp16::CheckFp16Args),
    /// Transcribe speech with a Whisper model (txt, json, srt or vtt).
    Transcribe(transcribe::TranscribeArgs),
    /// An OpenAI-compatible HTTP server: chat and text completions (streaming), embeddings,
    /// reranking, health and Prometheus metrics.
    Serve(serve::ServeArgs),
    /// Retrieval-augmented answers: index documents, then ask questions citing them.
    #[command(subcommand)]
    Rag(rag::RagCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell) to stdout.
    Completions { shell: clap_complete::Shell },
}

fn main() -> ExitCode {
    sigpipe::restore_default();
    // warnings (such as the ANE engine releasing programs to stay under the runtime's limit) are
    // shown by default; RUST_LOG=info or debug shows more. symphonia logs each failed format
    // probe itself; that failure reaches the user as `transcribe`'s error naming the file.
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,symphonia_core=off"),
    )
    .init();
    let cli = Cli::parse();
    if let Some(bytes) = cli.max_memory {
        aneforge_cpu::set_memory_limit(bytes);
    }
    let Some(command) = cli.command else {
        eprint!("{}", Cli::command().render_help());
        return ExitCode::from(2);
    };
    if decodes_text(&command) {
        allocator::keep_large_blocks_mapped();
    }
    match dispatch(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if sigpipe::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Whether `command` generates text with a decoder LLM, whose peak memory over a long generation
/// the allocator policy of [`allocator::keep_large_blocks_mapped`] lowers. The other commands
/// keep glibc's own policy, under which buffers a product allocates on every call are reused
/// instead of mapped and unmapped each time.
fn decodes_text(command: &Command) -> bool {
    matches!(
        command,
        Command::Generate(_)
            | Command::Chat(_)
            | Command::Serve(_)
            | Command::Rag(rag::RagCommand::Ask(_))
            | Command::CheckFp16(_)
            | Command::Bench(bench::BenchCommand::Llm(_))
    )
}

fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Mil(command) => mil::run(command),
        Command::Demo(args) => demo::run(args),
        Command::TrainDigits(args) => train_images::run_digits(args),
        Command::TrainFashion(args) => train_images::run_fashion(args),
        Command::Bench(command) => bench::run(command),
        Command::Targets { format } => targets::targets(format.get()),
        Command::Ops {
            target,
            mil,
            format,
        } => targets::ops(&target, mil, format.get()),
        Command::Compile(args) => compile::run(args),
        Command::Export(args) => export::run(args),
        Command::Import(args) => import::run(args),
        Command::Run(args) => run::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Rerank(args) => rerank::run(args),
        Command::Classify(args) => classify::run(args),
        Command::Finetune(args) => finetune::run(args),
        Command::Generate(args) => llm::generate_cmd(args),
        Command::Chat(args) => llm::chat_cmd(args),
        Command::CheckFp16(args) => check_fp16::run(args),
        Command::Transcribe(args) => transcribe::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Rag(command) => rag::run(command),
        Command::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut Cli::command(), "aneforge", &mut out);
            Ok(())
        }
    }
}
