use clap::Parser;

/// aneforge: compile tensor graphs into Apple Neural Engine programs and run them.
#[derive(Parser)]
#[command(name = "aneforge", version)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
