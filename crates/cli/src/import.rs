//! `aneforge import MODEL.onnx -o DIR`: an ONNX model compiled into a program directory
//! (`model.mil` + `weights/weight.bin`) that `aneforge run` runs, for the CPU target or an ANE
//! architecture.

use crate::quantize_args::QuantizeArgs;
use aneforge::arch::AneArch;
use aneforge::engine::HostTensor;
use aneforge::{compile_program, FunctionSpec, ProgramOptions, Target};
use aneforge_onnx::{import_file, Const, Data, ImportOptions};
use anyhow::{bail, Context};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct ImportArgs {
    /// The ONNX model (external data files are read from its directory).
    pub model: PathBuf,
    /// Output program directory.
    #[arg(short = 'o', long = "output", alias = "out", value_name = "DIR")]
    pub out: PathBuf,
    /// cpu (fp32) or an ANE architecture or alias (h13…h18, m1…m5, …; fp16).
    #[arg(long, default_value = "h16")]
    pub target: String,
    /// The shape of an input, NAME=D0,D1,... (binding the symbolic dimensions it uses), or the
    /// value of a symbolic dimension, DIM=N. Repeatable.
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Fix a graph input to the values of FILE.npy, NAME=FILE.npy: it folds as a constant and is
    /// no input of the program (say, the sample rate a VAD model takes as an input). Repeatable.
    #[arg(long = "constant", value_name = "NAME=FILE.npy")]
    pub constants: Vec<String>,
    /// Also write the program as a Core ML package.
    #[arg(long, value_name = "PATH.mlpackage")]
    pub mlpackage: Option<PathBuf>,
    #[command(flatten)]
    pub quantize: QuantizeArgs,
}

fn parse_shape(spec: &str) -> anyhow::Result<(String, Vec<usize>)> {
    let Some((name, dims)) = spec.split_once('=') else {
        bail!("--input-shape {spec}: expected NAME=D0,D1,...");
    };
    let dims = dims
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .ok()
                .filter(|&d| d > 0)
                .with_context(|| format!("--input-shape {spec}: {d:?} is not a positive integer"))
        })
        .collect::<anyhow::Result<Vec<usize>>>()?;
    Ok((name.to_string(), dims))
}

fn read_constant(spec: &str) -> anyhow::Result<(String, Const)> {
    let Some((name, path)) = spec.split_once('=') else {
        bail!("--constant {spec}: expected NAME=FILE.npy");
    };
    let (shape, tensor) =
        crate::run::read_npy(Path::new(path)).with_context(|| format!("--constant {spec}"))?;
    let data = match tensor {
        HostTensor::F32(v) => Data::F32(v),
        HostTensor::F16(v) => Data::F32(v.iter().map(|x| x.to_f32()).collect()),
        HostTensor::I32(v) => Data::Int(v.into_iter().map(i64::from).collect()),
        HostTensor::I8(v) => Data::Int(v.into_iter().map(i64::from).collect()),
        HostTensor::U8(v) => Data::Int(v.into_iter().map(i64::from).collect()),
        HostTensor::Bool(v) => Data::Bool(v),
    };
    Ok((
        name.to_string(),
        Const {
            shape,
            data,
            elem_type: 0,
        },
    ))
}

pub fn run(args: ImportArgs) -> anyhow::Result<()> {
    let target = match args.target.as_str() {
        "cpu" => Target::Cpu,
        other => Target::Ane(AneArch::new(other)?),
    };
    let options = ImportOptions {
        input_shapes: args
            .input_shapes
            .iter()
            .map(|s| parse_shape(s))
            .collect::<anyhow::Result<_>>()?,
        constant_inputs: args
            .constants
            .iter()
            .map(|s| read_constant(s))
            .collect::<anyhow::Result<_>>()?,
        ..ImportOptions::default()
    };
    let model = &args.model;
    let imported =
        import_file(model, &options).with_context(|| format!("importing {}", model.display()))?;
    let named = imported.named_outputs();
    let roots: Vec<&aneforge::Tensor> = named.iter().map(|(_, t)| *t).collect();
    let compiled = compile_program(
        &[FunctionSpec {
            name: "main",
            outputs: &named,
        }],
        &ProgramOptions {
            target: target.clone(),
            quantize: args.quantize.resolve(&roots)?,
            ..ProgramOptions::default()
        },
    )
    .with_context(|| format!("compiling {} for {}", model.display(), args.target))?;
    let quantization = compiled.report.quantization.clone();
    let artifact = compiled.into_artifact()?;
    artifact
        .save(&args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    if let Some(package) = &args.mlpackage {
        crate::export::run(crate::export::ExportArgs {
            dir: args.out.clone(),
            output: package.clone(),
            function: None,
        })?;
    }
    let mut text = String::new();
    writeln!(
        text,
        "{} (opset {}) for {}: program in {}",
        model.display(),
        imported.opset,
        args.target,
        args.out.display()
    )?;
    let ports: Vec<&str> = artifact.inputs().iter().map(|p| p.name.as_str()).collect();
    for i in imported
        .inputs
        .iter()
        .filter(|i| ports.contains(&i.port.as_str()))
    {
        writeln!(
            text,
            "  input {} <- {:?} {} {:?}",
            i.port, i.onnx_name, i.dtype, i.shape
        )?;
    }
    for o in &imported.outputs {
        writeln!(
            text,
            "  output {} -> {:?} {} {:?}",
            o.port,
            o.onnx_name,
            o.tensor.dtype(),
            o.tensor.shape()
        )?;
    }
    if let Some(q) = quantization {
        write!(text, "{q}")?;
    }
    print!("{text}");
    Ok(())
}
