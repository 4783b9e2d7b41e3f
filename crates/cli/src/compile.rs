//! `aneforge compile`: a built-in example graph compiled for an ANE architecture into program
//! directories (`model.mil` + `weights/weight.bin`, one per segment), the plan, and the
//! preflight, compression and estimate reports.

use crate::examples;
use crate::quantize_args::QuantizeArgs;
use aneforge::arch::AneArch;
use aneforge::pipeline::{Source, WEIGHT_CEILING};
use aneforge::{compile_program, Compiled, Compress, FunctionSpec, ProgramOptions, Target};
use anyhow::Context;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct CompileArgs {
    /// The example graph to compile (see `aneforge compile --list`).
    #[arg(required_unless_present = "list")]
    pub graph: Option<String>,
    /// ANE architecture or alias (h13…h18, m1…m5, a13…a18, …).
    #[arg(long, default_value = "h16")]
    pub target: String,
    /// Output directory.
    #[arg(
        short = 'o',
        long = "output",
        alias = "out",
        value_name = "DIR",
        required_unless_present = "list"
    )]
    pub out: Option<PathBuf>,
    /// Also write the program as a Core ML package (a single-program plan only).
    #[arg(long, value_name = "PATH.mlpackage")]
    pub mlpackage: Option<PathBuf>,
    /// Weight compression: none (the weights as stored), auto (the family's native formats),
    /// int8, int4, sparse or blockwise.
    #[arg(long, default_value = "none")]
    pub compress: String,
    /// Largest fp16 weight bytes per program before the graph is split into segments.
    #[arg(long, default_value_t = WEIGHT_CEILING)]
    pub weight_ceiling: u64,
    /// List the example graphs.
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub quantize: QuantizeArgs,
}

fn parse_compress(s: &str) -> anyhow::Result<Compress> {
    Ok(match s {
        "none" => Compress::None,
        "auto" => Compress::Auto,
        "int8" => Compress::Int8,
        "int4" => Compress::Int4,
        "sparse" => Compress::Sparse,
        "blockwise" => Compress::Blockwise,
        other => anyhow::bail!(
            "--compress {other}: expected none, auto, int8, int4, sparse or blockwise"
        ),
    })
}

pub fn run(args: CompileArgs) -> anyhow::Result<()> {
    if args.list {
        for e in examples::EXAMPLES {
            println!("{:<13} {}", e.name, e.about);
        }
        return Ok(());
    }
    let (Some(name), Some(out)) = (args.graph.as_deref(), args.out.as_deref()) else {
        anyhow::bail!("compile needs a graph and --output");
    };
    let example = examples::find(name).with_context(|| {
        format!(
            "unknown example graph {name:?}; valid: {}",
            examples::names()
        )
    })?;
    let arch = AneArch::new(&args.target)?;
    let outputs = (example.build)().with_context(|| format!("building {name}"))?;
    let named: Vec<(&str, &aneforge::Tensor)> = outputs.iter().map(|(n, t)| (*n, t)).collect();
    let roots: Vec<&aneforge::Tensor> = outputs.iter().map(|(_, t)| t).collect();
    let options = ProgramOptions {
        target: Target::Ane(arch),
        compress: parse_compress(&args.compress)?,
        weight_ceiling: Some(args.weight_ceiling),
        quantize: args.quantize.resolve(&roots)?,
        ..ProgramOptions::default()
    };
    let plan = compile_program(
        &[FunctionSpec {
            name: "main",
            outputs: &named,
        }],
        &options,
    )
    .with_context(|| format!("compiling {name} for {arch}"))?;
    write_plan(&plan, arch, out).with_context(|| format!("writing {}", out.display()))?;
    if let Some(package) = &args.mlpackage {
        if plan.segments.len() != 1 {
            anyhow::bail!(
                "--mlpackage: {name} compiled into {} programs; export each segment_N with \
                 `aneforge export`",
                plan.segments.len()
            );
        }
        crate::export::run(crate::export::ExportArgs {
            dir: out.to_path_buf(),
            output: package.clone(),
            function: None,
        })?;
    }
    println!(
        "{name} for {arch} ({}): {} program(s) in {}, estimated {:.1} µs per pass (model, not a measurement)",
        arch.family(),
        plan.segments.len(),
        out.display(),
        plan.estimate_us()
    );
    print!("{}", plan.report);
    Ok(())
}

fn segment_dir(out: &Path, plan: &Compiled, index: usize) -> PathBuf {
    if plan.segments.len() == 1 {
        out.to_path_buf()
    } else {
        out.join(format!("segment_{index}"))
    }
}

fn write_plan(plan: &Compiled, arch: AneArch, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    for (i, s) in plan.segments.iter().enumerate() {
        s.artifact.save(&segment_dir(out, plan, i))?;
    }
    let mut text = String::new();
    writeln!(text, "target {arch} ({})", arch.family())?;
    for (i, s) in plan.segments.iter().enumerate() {
        let dir = segment_dir(out, plan, i);
        let rel = dir.strip_prefix(out).unwrap_or(&dir);
        writeln!(
            text,
            "segment {i}: {}",
            if rel.as_os_str().is_empty() {
                ".".into()
            } else {
                rel.display().to_string()
            }
        )?;
        for (port, source) in &s.feeds {
            match source {
                Source::Input(name) => writeln!(text, "  input {port} <- fed '{name}'")?,
                Source::Segment {
                    segment,
                    port: from,
                } => writeln!(text, "  input {port} <- segment {segment} output '{from}'")?,
            }
        }
        for p in s.artifact.outputs() {
            writeln!(text, "  output {} {:?}", p.name, p.shape)?;
        }
    }
    for h in &plan.outputs {
        let parts: Vec<String> = h.parts.iter().map(|(s, p)| format!("{s}:{p}")).collect();
        writeln!(
            text,
            "output {} {:?} = concat(axis {}) of {}",
            h.name,
            h.shape,
            h.axis,
            parts.join(", ")
        )?;
    }
    write_atomic(&out.join("plan.txt"), &text)?;
    let mut report = plan
        .report
        .legality
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default();
    if !plan.report.compression.weights.is_empty() {
        report.push_str(&plan.report.compression.to_string());
    }
    if let Some(q) = &plan.report.quantization {
        report.push_str(&q.to_string());
    }
    for e in plan.estimates() {
        report.push_str(&e.to_string());
    }
    write_atomic(&out.join("preflight.txt"), &report)
}

fn write_atomic(path: &Path, text: &str) -> anyhow::Result<()> {
    aneforge::output::write_output(path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}
