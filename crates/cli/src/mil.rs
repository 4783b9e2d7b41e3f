//! `aneforge mil ...`: work with MIL program directories.

use anyhow::{bail, Context};
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum MilCommand {
    /// Parse and validate a program directory (model.mil + weights/weight.bin), check every op's
    /// declared output types and shapes against what the op produces, and summarize it.
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
            let mut unchecked = Vec::new();
            let mut memory = Vec::new();
            for function in &program.program.functions {
                let planned = aneforge_cpu::compile_dir(
                    &program,
                    &function.name,
                    &aneforge_cpu::CompileOptions::default(),
                );
                match planned {
                    Ok(plan) => memory.push(format!(
                        "{}: activation arena {} bytes, decoded constants {} bytes (CPU engine)",
                        function.name,
                        plan.arena_bytes(),
                        plan.const_bytes()
                    )),
                    Err(e) if beyond_the_cpu_engine(&e) => {
                        unchecked.push(format!("{}: {e}", function.name))
                    }
                    Err(e) => bail!("{}: function {}: {e}", dir.display(), function.name),
                }
            }
            println!("{}: ok", dir.display());
            for note in unchecked {
                println!("types not checked past the first op the CPU engine cannot plan: {note}");
            }
            println!("{}", program.summary());
            for line in memory {
                println!("{line}");
            }
            Ok(())
        }
    }
}

/// Errors that say the CPU engine lacks an op, not that the program is wrong.
fn beyond_the_cpu_engine(error: &aneforge_cpu::CpuError) -> bool {
    let text = error.to_string();
    text.contains("does not implement") || text.contains("not supported by the CPU engine")
}
