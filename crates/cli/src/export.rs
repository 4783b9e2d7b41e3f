//! `aneforge export DIR -o NAME.mlpackage`: a program directory as a Core ML package.

use std::path::PathBuf;

use aneforge_mil::mlpackage::{export_program_dir, ExportOptions};
use aneforge_mil::ProgramDir;
use anyhow::{bail, Context};

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Program directory (model.mil and weights/weight.bin, e.g. from `aneforge compile`).
    pub dir: PathBuf,
    /// The package to write (a directory ending in .mlpackage; replaced if it exists).
    #[arg(
        short = 'o',
        long = "output",
        alias = "out",
        value_name = "PATH.mlpackage"
    )]
    pub output: PathBuf,
    /// The function Core ML runs by default (default: main, or the program's only function).
    #[arg(long)]
    pub function: Option<String>,
}

pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    if args.output.extension().is_none_or(|e| e != "mlpackage") {
        bail!(
            "--output {}: a Core ML package is a directory named NAME.mlpackage",
            args.output.display()
        );
    }
    let program = ProgramDir::load(&args.dir)
        .with_context(|| format!("{} is not a valid program directory", args.dir.display()))?;
    let names: Vec<&str> = program
        .program
        .functions
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    let default_function = match (&args.function, names.as_slice()) {
        (Some(f), _) => f.clone(),
        (None, [only]) => only.to_string(),
        (None, _) => "main".to_string(),
    };
    let options = ExportOptions {
        default_function,
        short_description: format!("exported by aneforge from {}", args.dir.display()),
        ..ExportOptions::default()
    };
    export_program_dir(&program, &args.output, &options).with_context(|| {
        format!(
            "exporting {} to {}",
            args.dir.display(),
            args.output.display()
        )
    })?;
    println!("{} -> {}", args.dir.display(), args.output.display());
    Ok(())
}
