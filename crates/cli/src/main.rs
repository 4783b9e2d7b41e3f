use clap::Parser;

mod bench;
mod demo;
mod digits;
mod engine_args;
mod mil;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Mil(command)) => mil::run(command),
        Some(Command::Demo(args)) => demo::run(args),
        Some(Command::TrainDigits(args)) => digits::run(args),
        Some(Command::Bench(command)) => bench::run(command),
        None => Ok(()),
    }
}
