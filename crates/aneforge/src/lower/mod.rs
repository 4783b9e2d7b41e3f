//! Lowering: a graph's outputs to one MIL program (`func main<ios18>`) plus its weights blob.
//!
//! Passes: canonicalize (graph rewrites so every node maps onto MIL ops) → topological order with
//! dead nodes dropped → emit (constants deduplicated, large ones into the blob) → print and hash.

mod artifact;
pub(crate) mod canonicalize;
mod consts;
mod emit;
mod order;
mod rewrite;

pub use artifact::{Artifact, FunctionPorts, PortKind, PortSpec, TiledOutput};
pub use consts::{to_f16, BLOB_PATH, INLINE_MAX_ELEMENTS};
pub use order::topo_order;
pub use rewrite::rewrite_graph;

use crate::graph::{GraphError, Tensor};
pub use crate::target::AneArch;
use aneforge_mil as mil;
use std::fmt;

/// What a program is compiled for. The CPU target is fp32 and may use any op the CPU engine runs;
/// the ANE target is fp16 (inputs, outputs, weights and compute).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Target {
    #[default]
    Cpu,
    Ane(AneArch),
}

impl Target {
    pub fn is_ane(&self) -> bool {
        matches!(self, Target::Ane(_))
    }

    /// The MIL type graph-level f32 values take.
    pub fn float_dtype(&self) -> mil::DType {
        match self {
            Target::Cpu => mil::DType::Fp32,
            Target::Ane(_) => mil::DType::Fp16,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Cpu => f.write_str("cpu"),
            Target::Ane(a) => write!(f, "ane({})", a.name()),
        }
    }
}

/// Weight storage. `None` stores weights at the program's float precision (fp32 on the CPU
/// target, fp16 on the ANE target); the other modes compress large weights of ANE programs
/// (`target::compress`): `Auto` picks, per weight, the smallest scheme the family streams
/// natively that passes the accuracy gate; the explicit modes use their scheme on any family.
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

/// How `parameter` leaves are compiled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ParameterMode {
    /// Program inputs, loaded with their initial values when the model is instantiated, so they
    /// can be fed, shared with an output (resident training state) or left as they are.
    #[default]
    Input,
    /// Frozen into constants (inference).
    Constant,
}

#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    #[error("compile: no outputs given")]
    NoOutputs,
    #[error("compile: {name:?} names more than one input, parameter or output")]
    DuplicateName { name: String },
    #[error("compile: function name {name:?} must match [A-Za-z_][A-Za-z0-9_]* and be unique")]
    BadFunctionName { name: String },
    #[error("compile: output name {name:?} must match [A-Za-z_][A-Za-z0-9_]*")]
    BadOutputName { name: String },
    #[error(transparent)]
    Target(#[from] crate::target::TargetError),
    #[error("{op} with operand shapes {shapes:?} cannot be lowered for target {target}: {reason}")]
    Unsupported {
        target: String,
        op: &'static str,
        shapes: Vec<Vec<usize>>,
        reason: String,
    },
    #[error("rewriting {op} for lowering: {source}")]
    Rewrite {
        op: &'static str,
        #[source]
        source: GraphError,
    },
    #[error("weights blob: {0}")]
    Blob(#[from] mil::BlobError),
    #[error("the lowered program fails MIL validation (a lowering bug): {0}")]
    Invalid(mil::ValidationErrors),
}

/// Lowers named outputs to a program for `target` with one function, `main`.
pub fn lower(
    outputs: &[(&str, &Tensor)],
    target: &Target,
    parameters: ParameterMode,
) -> Result<Artifact, LowerError> {
    lower_functions(
        &[FunctionSpec {
            name: "main",
            outputs,
        }],
        target,
        parameters,
    )
}

/// One function of a multi-function program: its name and its named outputs.
#[derive(Clone, Copy, Debug)]
pub struct FunctionSpec<'a> {
    pub name: &'a str,
    pub outputs: &'a [(&'a str, &'a Tensor)],
}

/// Lowers several functions into one program whose weights blob they share: a constant used by
/// more than one function (the same data) is stored once. Prefill and decode programs of one model
/// are the typical case; the first function is the default one.
pub fn lower_functions(
    functions: &[FunctionSpec<'_>],
    target: &Target,
    parameters: ParameterMode,
) -> Result<Artifact, LowerError> {
    if functions.is_empty() {
        return Err(LowerError::NoOutputs);
    }
    let mut names = std::collections::HashSet::new();
    for f in functions {
        if !crate::graph::is_identifier(f.name) || !names.insert(f.name) {
            return Err(LowerError::BadFunctionName {
                name: f.name.to_string(),
            });
        }
    }
    let mut consts = consts::ConstTable::new(target.float_dtype());
    let mut mil_functions = Vec::with_capacity(functions.len());
    let mut ports = Vec::with_capacity(functions.len());
    // Canonical graphs stay alive until every function is emitted: the constant table identifies
    // constants it has seen by the address of their data.
    let mut keep_alive = Vec::with_capacity(functions.len());
    for f in functions {
        // Outputs wider than an ANE family's dimension cap (vocabulary heads) become tile ports.
        let (tiled_outputs, tiled) = match target {
            Target::Ane(arch) => {
                let prepared = crate::target::prepare(f.outputs, *arch)?;
                let tiled: Vec<TiledOutput> = prepared
                    .host
                    .iter()
                    .filter(|h| h.parts.len() > 1)
                    .map(|h| TiledOutput {
                        name: h.name.clone(),
                        shape: h.shape.clone(),
                        parts: h.parts.iter().map(|(_, p)| p.clone()).collect(),
                    })
                    .collect();
                (Some(prepared.outputs), tiled)
            }
            Target::Cpu => (None, Vec::new()),
        };
        let named: Vec<(&str, &Tensor)>;
        let spec = match &tiled_outputs {
            Some(outs) => {
                named = outs.iter().map(|(n, t)| (n.as_str(), t)).collect();
                FunctionSpec {
                    name: f.name,
                    outputs: &named,
                }
            }
            None => *f,
        };
        let (function, inputs, outputs, canonical) =
            lower_function(&spec, target, parameters, &mut consts)?;
        keep_alive.push(canonical);
        mil_functions.push(function);
        ports.push(FunctionPorts {
            name: f.name.to_string(),
            inputs,
            outputs,
            tiled,
        });
    }
    let program = mil::Program {
        version: "1.3".into(),
        attributes: vec![("buildInfo".into(), build_info())],
        functions: mil_functions,
    };
    let weights = std::sync::Arc::new(consts.finish());
    drop(keep_alive);
    let blobs = artifact::blob_store(&weights)?;
    mil::validate_with_blobs(&program, &blobs).map_err(LowerError::Invalid)?;
    if let Target::Ane(arch) = target {
        let violations = crate::target::check_program(&program, *arch);
        if !violations.is_empty() {
            return Err(crate::target::TargetError::Check {
                arch: *arch,
                violations,
            }
            .into());
        }
    }
    Ok(Artifact::new(program, weights, target.clone(), ports))
}

type LoweredFunction = (mil::Function, Vec<PortSpec>, Vec<PortSpec>, Vec<Tensor>);

fn lower_function(
    spec: &FunctionSpec<'_>,
    target: &Target,
    parameters: ParameterMode,
    consts: &mut consts::ConstTable,
) -> Result<LoweredFunction, LowerError> {
    let outputs = spec.outputs;
    if outputs.is_empty() {
        return Err(LowerError::NoOutputs);
    }
    let mut reserved = std::collections::HashSet::new();
    for (name, _) in outputs {
        if !crate::graph::is_identifier(name) {
            return Err(LowerError::BadOutputName {
                name: name.to_string(),
            });
        }
        if !reserved.insert(name.to_string()) {
            return Err(LowerError::DuplicateName {
                name: name.to_string(),
            });
        }
    }
    let roots: Vec<Tensor> = outputs.iter().map(|(_, t)| (*t).clone()).collect();
    let mut canonical = canonicalize::canonicalize(&roots, parameters)?;
    let mut retyped = Vec::new();
    if let Target::Ane(arch) = target {
        let named: Vec<(&str, &Tensor)> = outputs.iter().map(|(n, _)| *n).zip(&canonical).collect();
        let legal = crate::legalize::legalize(&named, *arch);
        if !legal.report.is_legal() {
            return Err(crate::target::TargetError::NotLegal {
                report: Box::new(legal.report),
            }
            .into());
        }
        canonical = legal.outputs;
        retyped = legal.retyped;
    }
    let order = topo_order(&canonical);

    let mut leaves: Vec<&Tensor> = order
        .iter()
        .filter(|t| {
            matches!(
                t.op(),
                crate::graph::Op::Input { .. } | crate::graph::Op::Parameter { .. }
            )
        })
        .collect();
    leaves.sort_by_key(|t| t.id());
    let mut leaf_names = std::collections::HashSet::new();
    for leaf in &leaves {
        let name = match leaf.op() {
            crate::graph::Op::Input { name } | crate::graph::Op::Parameter { name, .. } => name,
            _ => continue,
        };
        if !leaf_names.insert(name.clone()) || reserved.contains(name) {
            return Err(LowerError::DuplicateName { name: name.clone() });
        }
    }
    reserved.extend(leaf_names);

    consts.begin_function();
    let table = std::mem::replace(consts, consts::ConstTable::new(target.float_dtype()));
    let mut emitter = emit::Emitter::new(target, reserved, table);
    let emitted = emit_nodes(&mut emitter, outputs, &canonical, &leaves, &order);
    *consts = std::mem::replace(
        &mut emitter.consts,
        consts::ConstTable::new(target.float_dtype()),
    );
    emitted?;
    let output_ports = outputs
        .iter()
        .zip(&canonical)
        .map(|((name, _), t)| PortSpec {
            name: name.to_string(),
            dtype: t.dtype(),
            mil_dtype: emitter.port_dtype(t.dtype()),
            shape: t.shape().to_vec(),
            kind: PortKind::Output,
        })
        .collect();
    let function = mil::Function {
        name: spec.name.into(),
        opset: "ios18".into(),
        inputs: std::mem::take(&mut emitter.inputs),
        attributes: Vec::new(),
        body: mil::Block {
            inputs: Vec::new(),
            operations: std::mem::take(&mut emitter.ops),
            outputs: outputs.iter().map(|(n, _)| n.to_string()).collect(),
        },
    };
    let mut input_ports = std::mem::take(&mut emitter.ports);
    let mut output_ports: Vec<PortSpec> = output_ports;
    for port in input_ports.iter_mut().chain(output_ports.iter_mut()) {
        if let Some((_, dtype)) = retyped.iter().find(|(n, _)| *n == port.name) {
            port.dtype = *dtype;
        }
    }
    Ok((function, input_ports, output_ports, canonical))
}

fn emit_nodes(
    emitter: &mut emit::Emitter<'_>,
    outputs: &[(&str, &Tensor)],
    canonical: &[Tensor],
    leaves: &[&Tensor],
    order: &[Tensor],
) -> Result<(), LowerError> {
    let mut needs_alias = Vec::new();
    for ((name, _), t) in outputs.iter().zip(canonical) {
        let aliased = t.op().is_leaf()
            || emitter.name_of(t).is_some()
            || t.dtype() == crate::graph::DType::Bool;
        if aliased {
            needs_alias.push((*name, t));
        } else {
            emitter.assign(t, name);
        }
    }
    for leaf in leaves {
        emitter.emit(leaf)?;
    }
    for node in order {
        if !matches!(
            node.op(),
            crate::graph::Op::Input { .. } | crate::graph::Op::Parameter { .. }
        ) {
            emitter.emit(node)?;
        }
    }
    for (name, t) in needs_alias {
        emitter.output_alias(t, name);
    }
    Ok(())
}

fn build_info() -> mil::Literal {
    mil::Literal::Dict {
        key: mil::DType::String,
        value: mil::DType::String,
        entries: vec![(
            mil::Literal::string("aneforge-version"),
            mil::Literal::string(env!("CARGO_PKG_VERSION")),
        )],
    }
}
