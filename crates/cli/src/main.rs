use clap::Parser;

mod bench;
mod bench_cpu;
mod bench_train;
mod compile;
mod demo;
mod digits;
mod embed;
mod encoder_args;
mod engine_args;
mod examples;
mod llm;
mod mil;
mod rerank;
mod run;
mod targets;

/// aneforge: compile tensor graphs into Apple Neural Engine programs and run them.
#[derive(Parser)]
#[command(name = "aneforge", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
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
    TrainDigits(digits::DigitsArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// List the ANE architectures, their families, core counts and chip figures.
    Targets,
    /// The per-op status (native / rewritten / walled) on an ANE family.
    Ops {
        /// Architecture or alias (h13…h18, m1…m5, a13…a18, …).
        #[arg(long)]
        target: String,
        /// Also list every MIL op of the registry.
        #[arg(long)]
        mil: bool,
    },
    /// Run a program directory (model.mil + weights/weight.bin, e.g. from `aneforge compile`) on
    /// an engine, with .npy inputs and outputs.
    Run(run::RunArgs),
    /// Compile a built-in example graph for an ANE architecture into program directories.
    Compile(compile::CompileArgs),
    /// Sentence embeddings from a sentence-transformers (or BERT-family) model.
    Embed(embed::EmbedArgs),
    /// Rank passages for a query with a cross-encoder.
    Rerank(rerank::RerankArgs),
    /// Continue a prompt with a decoder LLM; the text streams to stdout, speeds to stderr.
    Generate(llm::GenerateArgs),
    /// An interactive conversation with a chat model (its chat template); one line per turn.
    Chat(llm::ChatArgs),
}

fn main() -> anyhow::Result<()> {
    // warnings (such as the ANE engine releasing programs to stay under the runtime's limit) are
    // shown by default; RUST_LOG=info or debug shows more
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Mil(command)) => mil::run(command),
        Some(Command::Demo(args)) => demo::run(args),
        Some(Command::TrainDigits(args)) => digits::run(args),
        Some(Command::Bench(command)) => bench::run(command),
        Some(Command::Targets) => targets::targets(),
        Some(Command::Ops { target, mil }) => targets::ops(&target, mil),
        Some(Command::Compile(args)) => compile::run(args),
        Some(Command::Run(args)) => run::run(args),
        Some(Command::Embed(args)) => embed::run(args),
        Some(Command::Rerank(args)) => rerank::run(args),
        Some(Command::Generate(args)) => llm::generate_cmd(args),
        Some(Command::Chat(args)) => llm::chat_cmd(args),
        None => Ok(()),
    }
}
