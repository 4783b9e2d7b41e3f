//! The compile pipeline: named graph outputs to one or more MIL programs. Every compile — a
//! [`crate::Model`], an encoder or LLM bucket, `aneforge compile`, the preflight report — runs the
//! same stages, each once per function:
//!
//! 1. tile: outputs wider than an ANE family's dimension cap become tile ports (ANE targets);
//! 2. canonicalize: graph rewrites so every node maps onto MIL ops;
//! 3. legalize: rewrites that leave only what the ANE family accepts, and the findings report
//!    (ANE targets);
//! 4. split: consecutive segments under the weight ceiling (one-function ANE compiles that ask);
//! 5. emit: MIL functions and the shared weights blob;
//! 6. check: MIL validation, and the family's checker (ANE targets);
//! 7. compress: weight re-encoding behind accuracy gates (ANE targets that ask).
//!
//! W8A8 quantization ([`Quantize::W8A8`], `w8a8.rs`) wraps these stages: it calibrates on the
//! CPU target, inserts `fake_quant` ops, runs them with int8 weights, and gates the result
//! against the fp16 program.
//!
//! [`CompileReport`] says what each stage did and how long it took.

mod compress;
mod preflight;
mod segmented;
mod split;
mod tile;
mod w8a8;

pub use compress::{compress, CompressionReport, WeightChoice, GATE_REL, MIN_ELEMENTS};
pub use preflight::preflight;
pub use segmented::{Compiled, HostOutput, Segment, Source};
pub use split::WEIGHT_CEILING;
pub use w8a8::{
    ActivationScale, Calibration, QuantizationReport, Quantize, DEFAULT_MIN_COSINE, W8A8,
};

use crate::arch::{check_program, AneArch, ArchError, Finding, FindingKind, Report, Violation};
use crate::graph::{is_identifier, DType, Tensor};
use crate::lower::canonicalize::canonicalize;
use crate::lower::{emit_program, Artifact, LowerError, ParameterMode, ReadyFunction, Target};
use aneforge_mil as mil;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Instant;

/// Weight storage. `None` stores weights at the program's float precision (fp32 on the CPU
/// target, fp16 on the ANE target); the other modes compress large weights of ANE programs
/// ([`compress`]): `Auto` picks, per weight, the smallest scheme the family streams natively that
/// passes the accuracy gate; the explicit modes use their scheme on any family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compress {
    #[default]
    None,
    Auto,
    /// int8 per output channel (`constexpr_affine_dequantize`).
    Int8,
    /// 16-entry LUT (`constexpr_lut_to_dense`).
    Int4,
    /// Zero mask + values (`constexpr_sparse_to_dense`), for weights at least half zeros.
    Sparse,
    /// int4 with one scale per block of 32 (`constexpr_blockwise_shift_scale`).
    Blockwise,
}

/// What the pipeline compiles for and how.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProgramOptions {
    pub target: Target,
    pub parameters: ParameterMode,
    pub compress: Compress,
    /// Largest fp16 weight bytes per program; `None` keeps one program whatever its size. Only
    /// one-function ANE compiles are split.
    pub weight_ceiling: Option<u64>,
    /// Activation quantization (ANE targets of the A16 family).
    pub quantize: Quantize,
}

impl ProgramOptions {
    /// One uncompressed, unsplit program for `target`.
    pub fn new(target: &Target, parameters: ParameterMode) -> ProgramOptions {
        ProgramOptions {
            target: target.clone(),
            parameters,
            ..ProgramOptions::default()
        }
    }
}

/// One function of a program: its name and its named outputs.
#[derive(Clone, Copy, Debug)]
pub struct FunctionSpec<'a> {
    pub name: &'a str,
    pub outputs: &'a [(&'a str, &'a Tensor)],
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Lower(#[from] LowerError),
    #[error(transparent)]
    Arch(#[from] ArchError),
    #[error("the graph cannot run on {}: {report}", report.arch)]
    NotLegal { report: Box<Report> },
    #[error("the emitted program fails MIL validation (a compiler bug): {0}")]
    Invalid(mil::ValidationErrors),
    #[error("the emitted program is not accepted by {arch} ({}):\n{}", arch.family(), list(.violations))]
    Check {
        arch: AneArch,
        violations: Vec<Violation>,
    },
    #[error("weight compression applies to ANE programs; the CPU target keeps fp32 weights")]
    CompressCpu,
    #[error("this compression mode is not supported")]
    CompressMode,
    #[error("weight compression: {0}")]
    Encode(#[from] mil::encode::EncodeError),
    #[error("the graph compiled into {count} programs (its weights exceed the ceiling); load each segment")]
    Segmented { count: usize },
    #[error("running segment {segment} on the CPU engine: {message}")]
    Run { segment: usize, message: String },
    #[error("W8A8 quantization {0}")]
    Quantize(String),
    #[error(
        "W8A8 accuracy gate: output '{output}' has cosine {cosine:.6} to the fp16 program, below the bound {bound}; the activation quantized worst is {activation}"
    )]
    QuantizeGate {
        output: String,
        cosine: f64,
        bound: f64,
        activation: String,
    },
}

impl From<mil::BlobError> for CompileError {
    fn from(e: mil::BlobError) -> Self {
        CompileError::Lower(LowerError::Blob(e))
    }
}

fn list(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the pipeline did: the legalization findings (ANE targets), the compression choices and
/// the time of each stage.
#[derive(Clone, Debug, Default)]
pub struct CompileReport {
    /// Every rewritten, rejected, oversized and noted node (`None` on the CPU target).
    pub legality: Option<Report>,
    pub compression: CompressionReport,
    /// The activation scales and the accuracy gate (W8A8 compiles).
    pub quantization: Option<QuantizationReport>,
    /// The stages that ran, in pipeline order.
    pub stages: Vec<StageTime>,
}

/// One pipeline stage: how often it ran (once per function, or per segment after the split) and
/// its total time.
#[derive(Clone, Debug, PartialEq)]
pub struct StageTime {
    pub stage: &'static str,
    pub runs: usize,
    pub seconds: f64,
}

impl CompileReport {
    fn time<T>(&mut self, stage: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        let seconds = start.elapsed().as_secs_f64();
        match self.stages.iter_mut().find(|s| s.stage == stage) {
            Some(s) => {
                s.runs += 1;
                s.seconds += seconds;
            }
            None => self.stages.push(StageTime {
                stage,
                runs: 1,
                seconds,
            }),
        }
        out
    }

    fn findings(&mut self) -> Option<&mut Vec<Finding>> {
        self.legality.as_mut().map(|r| &mut r.findings)
    }
}

impl fmt::Display for CompileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(report) = &self.legality {
            write!(f, "{report}")?;
        }
        if !self.compression.weights.is_empty() {
            write!(f, "{}", self.compression)?;
        }
        if let Some(q) = &self.quantization {
            write!(f, "{q}")?;
        }
        let stages: Vec<String> = self
            .stages
            .iter()
            .map(|s| format!("{} {:.1} ms", s.stage, s.seconds * 1e3))
            .collect();
        writeln!(f, "stages: {}", stages.join(", "))
    }
}

/// Whether a blocking problem stops the pipeline with an error, or is recorded in the report.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Strict,
    Report,
}

/// A function after tiling, canonicalization and legalization, with how the host reassembles
/// its outputs.
struct Prepared {
    ready: ReadyFunction,
    host: Vec<HostOutput>,
}

/// Runs the pipeline over `functions` (the first is the default one).
pub fn compile_program(
    functions: &[FunctionSpec<'_>],
    options: &ProgramOptions,
) -> Result<Compiled, CompileError> {
    match &options.quantize {
        Quantize::W8A8(w) => w8a8::compile(functions, options, w),
        _ => run(functions, options, Mode::Strict),
    }
}

/// The pipeline for one function, `main`, returning its one program.
pub fn compile_artifact(
    outputs: &[(&str, &Tensor)],
    options: &ProgramOptions,
) -> Result<Artifact, CompileError> {
    let options = ProgramOptions {
        weight_ceiling: None,
        ..options.clone()
    };
    compile_program(
        &[FunctionSpec {
            name: "main",
            outputs,
        }],
        &options,
    )?
    .into_artifact()
}

/// The pipeline for several functions sharing one weights blob (prefill and decode programs of
/// one model are the typical case), returning their one program.
pub fn compile_functions(
    functions: &[FunctionSpec<'_>],
    options: &ProgramOptions,
) -> Result<Artifact, CompileError> {
    let options = ProgramOptions {
        weight_ceiling: None,
        ..options.clone()
    };
    compile_program(functions, &options)?.into_artifact()
}

fn run(
    functions: &[FunctionSpec<'_>],
    options: &ProgramOptions,
    mode: Mode,
) -> Result<Compiled, CompileError> {
    if functions.is_empty() {
        return Err(LowerError::NoOutputs.into());
    }
    check_names(functions)?;
    let arch = match &options.target {
        Target::Ane(arch) => Some(*arch),
        Target::Cpu => None,
    };
    let mut report = CompileReport {
        legality: arch.map(Report::new),
        ..CompileReport::default()
    };
    let mut prepared = Vec::with_capacity(functions.len());
    for f in functions {
        prepared.push(prepare(f, options, &mut report)?);
    }
    if let Some(legality) = &report.legality {
        if !legality.is_legal() {
            return match mode {
                Mode::Strict => Err(CompileError::NotLegal {
                    report: Box::new(legality.clone()),
                }),
                Mode::Report => Ok(Compiled {
                    target: options.target.clone(),
                    segments: Vec::new(),
                    outputs: Vec::new(),
                    report,
                }),
            };
        }
    }
    let host = prepared[0].host.clone();
    let readies: Vec<ReadyFunction> = prepared.into_iter().map(|p| p.ready).collect();
    let pieces = match (options.weight_ceiling, arch, readies.as_slice()) {
        (Some(ceiling), Some(_), [only]) => {
            let named: Vec<(&str, &Tensor)> =
                only.outputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
            let mut found = Vec::new();
            let pieces = report.time("split", || split::split(&named, ceiling, &mut found))?;
            report
                .findings()
                .into_iter()
                .for_each(|f| f.append(&mut found));
            if pieces.len() == 1 {
                vec![readies]
            } else {
                pieces
                    .into_iter()
                    .map(|outputs| {
                        vec![ReadyFunction {
                            name: only.name.clone(),
                            outputs,
                            retyped: only.retyped.clone(),
                            tiled: Vec::new(),
                        }]
                    })
                    .collect()
            }
        }
        _ => vec![readies],
    };
    let mut segments = Vec::with_capacity(pieces.len());
    let mut produced: HashMap<String, usize> = HashMap::new();
    for (index, piece) in pieces.iter().enumerate() {
        let emitted = report.time("emit", || emit_program(piece, &options.target));
        let artifact = match (emitted, mode) {
            (Ok(a), _) => a,
            (
                Err(LowerError::Unsupported {
                    op, shapes, reason, ..
                }),
                Mode::Report,
            ) => {
                report.findings().into_iter().for_each(|f| {
                    f.push(Finding {
                        node: "(emission)".into(),
                        op: op.to_string(),
                        shape: shapes.first().cloned().unwrap_or_default(),
                        kind: FindingKind::Rejected {
                            reason: reason.clone(),
                        },
                    })
                });
                continue;
            }
            (Err(e), _) => return Err(e.into()),
        };
        let violations = report.time("check", || check(&artifact, arch))?;
        if let (Some(arch), false) = (arch, violations.is_empty()) {
            if mode == Mode::Strict {
                return Err(CompileError::Check { arch, violations });
            }
            report.findings().into_iter().for_each(|f| {
                f.extend(violations.iter().cloned().map(|v| Finding {
                    node: format!("program value '{}'", v.value),
                    op: v.op_type,
                    shape: v.shape,
                    kind: FindingKind::Rejected { reason: v.problem },
                }))
            });
            continue;
        }
        let artifact = if mode == Mode::Strict {
            // W8A8 stores every weight int8, whatever its size.
            let min_elements = match options.quantize {
                Quantize::W8A8(_) => 0,
                _ => MIN_ELEMENTS,
            };
            let (artifact, c) = report.time("compress", || {
                compress::compress_from(artifact, options.compress, min_elements)
            })?;
            report.compression.weights.extend(c.weights);
            artifact
        } else {
            artifact
        };
        let feeds = artifact
            .inputs()
            .iter()
            .map(|p| {
                let source = match produced.get(&p.name) {
                    Some(&segment) => Source::Segment {
                        segment,
                        port: p.name.clone(),
                    },
                    None => Source::Input(p.name.clone()),
                };
                (p.name.clone(), source)
            })
            .collect();
        for p in artifact.outputs() {
            produced.insert(p.name.clone(), index);
        }
        segments.push(Segment { artifact, feeds });
    }
    let mut outputs = host;
    for h in &mut outputs {
        for (segment, port) in &mut h.parts {
            *segment = produced.get(port.as_str()).copied().unwrap_or(0);
        }
    }
    Ok(Compiled {
        target: options.target.clone(),
        segments,
        outputs,
        report,
    })
}

/// Function names and output names are identifiers, each unique in its scope.
fn check_names(functions: &[FunctionSpec<'_>]) -> Result<(), LowerError> {
    let mut names = HashSet::new();
    for f in functions {
        if !is_identifier(f.name) || !names.insert(f.name) {
            return Err(LowerError::BadFunctionName {
                name: f.name.to_string(),
            });
        }
        if f.outputs.is_empty() {
            return Err(LowerError::NoOutputs);
        }
        let mut outputs = HashSet::new();
        for (name, _) in f.outputs {
            if !is_identifier(name) {
                return Err(LowerError::BadOutputName {
                    name: name.to_string(),
                });
            }
            if !outputs.insert(*name) {
                return Err(LowerError::DuplicateName {
                    name: name.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Tile, canonicalize and legalize one function.
fn prepare(
    f: &FunctionSpec<'_>,
    options: &ProgramOptions,
    report: &mut CompileReport,
) -> Result<Prepared, CompileError> {
    let (outputs, host, tiled) = match &options.target {
        Target::Ane(arch) => {
            let tiled = report.time("tile", || tile::tile_outputs(f.outputs, *arch))?;
            let ports = tiled.tiled_ports();
            report
                .findings()
                .into_iter()
                .for_each(|r| r.extend(tiled.findings.iter().cloned()));
            (tiled.outputs, tiled.host, ports)
        }
        Target::Cpu => {
            let outputs: Vec<(String, Tensor)> = f
                .outputs
                .iter()
                .map(|(n, t)| (n.to_string(), (*t).clone()))
                .collect();
            let host = outputs
                .iter()
                .map(|(n, t)| HostOutput {
                    name: n.clone(),
                    shape: t.shape().to_vec(),
                    axis: t.rank().saturating_sub(1),
                    parts: vec![(0, n.clone())],
                })
                .collect();
            (outputs, host, Vec::new())
        }
    };
    let roots: Vec<Tensor> = outputs.iter().map(|(_, t)| t.clone()).collect();
    let canonical = report.time("canonicalize", || canonicalize(&roots, options.parameters))?;
    let names: Vec<String> = outputs.into_iter().map(|(n, _)| n).collect();
    let (legal, retyped): (Vec<Tensor>, Vec<(String, DType)>) = match &options.target {
        Target::Ane(arch) => {
            let named: Vec<(&str, &Tensor)> =
                names.iter().map(|n| n.as_str()).zip(&canonical).collect();
            let legal = report.time("legalize", || crate::legalize::legalize(&named, *arch));
            report
                .findings()
                .into_iter()
                .for_each(|r| r.extend(legal.report.findings.iter().cloned()));
            (legal.outputs, legal.retyped)
        }
        Target::Cpu => (canonical, Vec::new()),
    };
    Ok(Prepared {
        ready: ReadyFunction {
            name: f.name.to_string(),
            outputs: names.into_iter().zip(legal).collect(),
            retyped,
            tiled,
        },
        host,
    })
}

/// MIL validation of an emitted program, then the family's checker (ANE targets).
fn check(artifact: &Artifact, arch: Option<AneArch>) -> Result<Vec<Violation>, CompileError> {
    let blobs = artifact.blob_store()?;
    mil::validate_with_blobs(artifact.program(), &blobs).map_err(CompileError::Invalid)?;
    Ok(match arch {
        Some(arch) => check_program(artifact.program(), arch),
        None => Vec::new(),
    })
}
