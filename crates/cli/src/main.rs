use clap::Parser;

mod compile;
mod examples;
mod llm;
mod mil;
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
    /// Compile a built-in example graph for an ANE architecture into program directories.
    Compile(compile::CompileArgs),
    /// Continue a prompt with a decoder LLM; the text streams to stdout, speeds to stderr.
    Generate(llm::GenerateArgs),
    /// An interactive conversation with a chat model (its chat template); one line per turn.
    Chat(llm::ChatArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(clap::Subcommand)]
enum BenchCommand {
    /// Prefill and decode speed of an LLM (batch 1), with peak memory.
    Llm(llm::BenchLlmArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Mil(command)) => mil::run(command),
        Some(Command::Targets) => targets::targets(),
        Some(Command::Ops { target, mil }) => targets::ops(&target, mil),
        Some(Command::Compile(args)) => compile::run(args),
        Some(Command::Generate(args)) => llm::generate_cmd(args),
        Some(Command::Chat(args)) => llm::chat_cmd(args),
        Some(Command::Bench(BenchCommand::Llm(args))) => llm::bench_llm(args),
        None => Ok(()),
    }
}
