//! Lowering: canonical (and, for ANE targets, legalized) graphs to one MIL program
//! (`func main<ios18>` and any further functions) plus the weights blob they share.
//!
//! Two passes, both called by the compile pipeline (`crate::pipeline`): canonicalize (graph
//! rewrites so every node maps onto MIL ops), then emit (topological order with dead nodes
//! dropped, constants deduplicated, large ones into the blob, ports typed).

mod artifact;
pub(crate) mod canonicalize;
mod consts;
mod emit;

pub use artifact::{Artifact, FunctionPorts, PortKind, PortSpec, TiledOutput};
pub use consts::{to_f16, BLOB_PATH, INLINE_MAX_ELEMENTS};

use crate::arch::AneArch;
use crate::graph::{topo_order, DType, GraphError, Tensor};
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
    /// A deferred constant's values could not be read.
    #[error("{0}")]
    ConstantData(GraphError),
}

/// One function ready for emission: its name, its outputs (canonical graphs, legalized for ANE
/// targets, with valid unique names), the ports whose graph dtype the program carries as fp16,
/// and the outputs the host assembles from tiles.
#[derive(Clone, Debug)]
pub struct ReadyFunction {
    pub name: String,
    pub outputs: Vec<(String, Tensor)>,
    pub retyped: Vec<(String, DType)>,
    pub tiled: Vec<TiledOutput>,
}

/// Emits functions into one program whose weights blob they share: a constant used by more than
/// one function (the same data) is stored once. The first function is the default one. The
/// program is not yet validated; the pipeline's check stage does that.
pub fn emit_program(functions: &[ReadyFunction], target: &Target) -> Result<Artifact, LowerError> {
    if functions.is_empty() {
        return Err(LowerError::NoOutputs);
    }
    let hint = consts::blob_bytes_hint(functions, target.float_dtype());
    let mut consts = consts::ConstTable::with_capacity(target.float_dtype(), hint);
    let mut mil_functions = Vec::with_capacity(functions.len());
    let mut ports = Vec::with_capacity(functions.len());
    for f in functions {
        let (function, inputs, outputs) = emit_function(f, target, &mut consts)?;
        mil_functions.push(function);
        ports.push(FunctionPorts {
            name: f.name.clone(),
            inputs,
            outputs,
            tiled: f.tiled.clone(),
        });
    }
    let program = mil::Program {
        version: "1.3".into(),
        attributes: vec![("buildInfo".into(), build_info())],
        functions: mil_functions,
    };
    let (weights, entries) = consts.finish();
    let weights = std::sync::Arc::new(weights);
    Ok(Artifact::with_digest(
        program,
        weights,
        entries,
        target.clone(),
        ports,
    ))
}

type EmittedFunction = (mil::Function, Vec<PortSpec>, Vec<PortSpec>);

fn emit_function(
    spec: &ReadyFunction,
    target: &Target,
    consts: &mut consts::ConstTable,
) -> Result<EmittedFunction, LowerError> {
    let outputs: Vec<(&str, &Tensor)> = spec.outputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    if outputs.is_empty() {
        return Err(LowerError::NoOutputs);
    }
    let mut reserved: std::collections::HashSet<String> =
        outputs.iter().map(|(n, _)| n.to_string()).collect();
    let canonical: Vec<Tensor> = outputs.iter().map(|(_, t)| (*t).clone()).collect();
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
    let emitted = emit_nodes(&mut emitter, &outputs, &canonical, &leaves, &order);
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
        name: spec.name.clone(),
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
        if let Some((_, dtype)) = spec.retyped.iter().find(|(n, _)| *n == port.name) {
            port.dtype = *dtype;
        }
    }
    Ok((function, input_ports, output_ports))
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
