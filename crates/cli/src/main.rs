use clap::Parser;

mod bench;
mod embed;
mod encoder_args;
mod mil;
mod rerank;

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
    /// Sentence embeddings from a sentence-transformers (or BERT-family) model.
    Embed(embed::EmbedArgs),
    /// Rank passages for a query with a cross-encoder.
    Rerank(rerank::RerankArgs),
    /// Throughput benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Mil(command)) => mil::run(command),
        Some(Command::Embed(args)) => embed::run(args),
        Some(Command::Rerank(args)) => rerank::run(args),
        Some(Command::Bench(command)) => bench::run(command),
        None => Ok(()),
    }
}
