//! `aneforge mil ...`: work with MIL program directories.

use anyhow::Context;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum MilCommand {
    /// Parse and validate a program directory (model.mil + weights/weight.bin) and summarize it.
    Check {
        /// The program directory.
        dir: PathBuf,
    },
}

pub fn run(command: MilCommand) -> anyhow::Result<()> {
    match command {
        MilCommand::Check { dir } => {
            let program = aneforge_mil::ProgramDir::load(&dir)
                .with_context(|| format!("{} is not a valid program directory", dir.display()))?;
            println!("{}: ok", dir.display());
            println!("{}", program.summary());
            Ok(())
        }
    }
}
