//! From a `ModelProto` to graph tensors: inputs with their bound shapes, initializers as
//! constants, nodes in dependency order, each through its op's importer.

use crate::error::OpError;
use crate::node::Node;
use crate::proto::{tensor_shape_proto::dimension, type_proto, GraphProto, ModelProto, NodeProto};
use crate::value::{const_from_proto, elem_type_name, graph_dtype, Value};
use crate::{ops, OnnxError};
use aneforge::graph::input;
use aneforge::{DType, Tensor};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The default-domain opsets the importer reads in full (older ones: [`LEGACY_OPS`] only).
pub const OPSETS: std::ops::RangeInclusive<i64> = 7..=22;

/// Ops a model of an opset below [`OPSETS`] may use: their only definitions before opset 7 mean
/// what the importer implements (every other op changed at or after opset 7, broadcasting
/// among them).
pub const LEGACY_OPS: &[&str] = &["Not", "Identity"];

#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// `(name, dims)`: `name` is a graph input (its whole shape) or a symbolic dimension (`dims`
    /// holds its one value). Symbolic dimensions an input binds hold for every input using them.
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// Graph inputs fixed to known values: they fold as constants and are no program inputs
    /// (a program specialised on, say, the axes or sizes a model takes as inputs).
    pub constant_inputs: Vec<(String, crate::Const)>,
    /// Lookups of a constant f32 table by a fed integer input (embeddings) become inputs of
    /// their own that the host fills ([`Imported::host_gathers`]): ANE targets cannot gather
    /// from large tables by data-dependent indices.
    pub host_gathers: bool,
}

/// A table lookup moved to the host: the program input `port` receives
/// `table[indices]` (rows of axis 0), with `indices` the values fed to the input `indices_port`.
#[derive(Clone, Debug)]
pub struct HostGather {
    pub port: String,
    pub indices_port: String,
    pub table: crate::Const,
    pub shape: Vec<usize>,
}

impl HostGather {
    /// The rows of the table that `indices` select, flattened.
    pub fn rows(&self, indices: &[i32]) -> Result<Vec<f32>, OnnxError> {
        let rows = self.table.shape.first().copied().unwrap_or(0);
        let width: usize = self.table.shape[1..].iter().product();
        let table = self.table.to_f32s();
        let mut out = Vec::with_capacity(indices.len() * width);
        for &i in indices {
            let r = if i < 0 {
                i as i64 + rows as i64
            } else {
                i as i64
            };
            if r < 0 || r >= rows as i64 {
                return Err(OnnxError::Input {
                    name: self.indices_port.clone(),
                    message: format!("index {i} is outside the {rows}-row table"),
                });
            }
            let r = r as usize;
            out.extend_from_slice(&table[r * width..(r + 1) * width]);
        }
        Ok(out)
    }
}

/// A graph input as a program port.
#[derive(Clone, Debug)]
pub struct ImportedInput {
    pub onnx_name: String,
    /// The port name: the ONNX name made a MIL identifier.
    pub port: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// The ONNX element type code.
    pub elem_type: i32,
}

#[derive(Clone, Debug)]
pub struct ImportedOutput {
    pub onnx_name: String,
    pub port: String,
    pub tensor: Tensor,
    pub elem_type: i32,
}

#[derive(Clone, Debug)]
pub struct Imported {
    pub opset: i64,
    pub inputs: Vec<ImportedInput>,
    pub outputs: Vec<ImportedOutput>,
    /// Lookups the host computes before each run (with [`ImportOptions::host_gathers`]).
    pub host_gathers: Vec<HostGather>,
}

impl Imported {
    /// `(port, tensor)` pairs, as `aneforge::compile_named` takes them.
    pub fn named_outputs(&self) -> Vec<(&str, &Tensor)> {
        self.outputs
            .iter()
            .map(|o| (o.port.as_str(), &o.tensor))
            .collect()
    }
}

/// The default-domain opset a model imports: at most [`OPSETS`]' end (and from 1).
pub fn model_opset(model: &ModelProto) -> Result<i64, OnnxError> {
    let opset = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain(), "" | "ai.onnx"))
        .map(|o| o.version())
        .ok_or_else(|| {
            OnnxError::UnsupportedModel("imports no opset of the default ONNX domain".into())
        })?;
    if !(1..=*OPSETS.end()).contains(&opset) {
        return Err(OnnxError::UnsupportedModel(format!(
            "opset {opset} is outside the supported range 1–{} ({}–{} in full)",
            OPSETS.end(),
            OPSETS.start(),
            OPSETS.end()
        )));
    }
    Ok(opset)
}

pub fn import_model(model: &ModelProto, options: &ImportOptions) -> Result<Imported, OnnxError> {
    let opset = model_opset(model)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError::Model("the model has no graph".into()))?;
    let mut values: HashMap<String, Value> = HashMap::new();
    for t in &graph.initializer {
        let c = const_from_proto(t).map_err(|message| OnnxError::Tensor {
            tensor: t.name().to_string(),
            message,
        })?;
        values.insert(t.name().to_string(), Value::Const(c));
    }
    for (name, c) in &options.constant_inputs {
        let Some(declared) = graph.input.iter().find(|i| i.name() == name) else {
            return Err(OnnxError::Input {
                name: name.clone(),
                message: "is no graph input".into(),
            });
        };
        check_constant_input(declared, c).map_err(|message| OnnxError::Input {
            name: name.clone(),
            message,
        })?;
        values.insert(name.clone(), Value::Const(c.clone()));
    }
    let inputs = bind_inputs(graph, options, &values)?;
    for i in &inputs {
        if i.shape.len() > aneforge::graph::MAX_RANK || i.shape.contains(&0) {
            return Err(OnnxError::UnsupportedInput {
                name: i.onnx_name.clone(),
                reason: format!(
                    "shape {:?} (the graph takes ranks up to {} without empty dimensions)",
                    i.shape,
                    aneforge::graph::MAX_RANK
                ),
            });
        }
        let t = input(&i.port, &i.shape, i.dtype).map_err(|e| OnnxError::Input {
            name: i.onnx_name.clone(),
            message: e.to_string(),
        })?;
        values.insert(i.onnx_name.clone(), Value::Tensor(t));
    }
    let host_gathers = std::cell::RefCell::new(Vec::new());
    let record = options.host_gathers.then_some(&host_gathers);
    let mut types = declared_types(graph);
    for node in order_nodes(graph, &values)? {
        run_node(node, opset, &mut values, &mut types, record)?;
    }
    let mut used = HashSet::new();
    let mut outputs = Vec::new();
    for o in &graph.output {
        let value = values.get(o.name()).ok_or_else(|| {
            OnnxError::Model(format!(
                "graph output {:?} is produced by no node",
                o.name()
            ))
        })?;
        let tensor = value.to_tensor().map_err(|e| {
            OnnxError::Model(format!("graph output {:?}: {}", o.name(), op_message(e)))
        })?;
        let elem_type = match o.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(t)) => t.elem_type(),
            _ => 0,
        };
        outputs.push(ImportedOutput {
            onnx_name: o.name().to_string(),
            port: port_name(o.name(), &mut used),
            tensor,
            elem_type,
        });
    }
    Ok(Imported {
        opset,
        inputs,
        outputs,
        host_gathers: host_gathers.into_inner(),
    })
}

fn op_message(e: OpError) -> String {
    match e {
        OpError::Unsupported(m) | OpError::Invalid(m) => m,
    }
}

/// A MIL identifier for an ONNX name, unique among `used`.
fn port_name(name: &str, used: &mut HashSet<String>) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if !s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        s.insert(0, '_');
    }
    let mut candidate = s.clone();
    let mut n = 1;
    while !used.insert(candidate.clone()) {
        candidate = format!("{s}_{n}");
        n += 1;
    }
    candidate
}

fn bind_inputs(
    graph: &GraphProto,
    options: &ImportOptions,
    initializers: &HashMap<String, Value>,
) -> Result<Vec<ImportedInput>, OnnxError> {
    let graph_inputs: Vec<_> = graph
        .input
        .iter()
        .filter(|i| !initializers.contains_key(i.name()))
        .collect();
    let names: HashSet<&str> = graph_inputs.iter().map(|i| i.name()).collect();
    let mut params: BTreeMap<String, usize> = BTreeMap::new();
    for (name, dims) in &options.input_shapes {
        if names.contains(name.as_str()) {
            continue;
        }
        match dims.as_slice() {
            [d] => {
                params.insert(name.clone(), *d);
            }
            _ => {
                return Err(OnnxError::Input {
                    name: name.clone(),
                    message: "names no graph input; as a symbolic dimension it takes one value"
                        .into(),
                })
            }
        }
    }
    let given = |name: &str| {
        options
            .input_shapes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.clone())
    };
    // symbolic dimensions bound by the shapes given for whole inputs
    for i in &graph_inputs {
        let (Some(dims), Some(declared)) = (given(i.name()), declared_dims(i)) else {
            continue;
        };
        if dims.len() == declared.len() {
            for (d, v) in declared.iter().zip(&dims) {
                if let Dim::Param(p) = d {
                    params.entry(p.clone()).or_insert(*v);
                }
            }
        }
    }
    let mut used = HashSet::new();
    let mut out = Vec::new();
    for i in graph_inputs {
        let err = |message: String| OnnxError::Input {
            name: i.name().to_string(),
            message,
        };
        let tensor_type = match i.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(t)) => t,
            _ => {
                return Err(OnnxError::UnsupportedInput {
                    name: i.name().to_string(),
                    reason: "a sequence, map or optional input (only tensors)".into(),
                })
            }
        };
        let elem_type = tensor_type.elem_type();
        let dtype = graph_dtype(elem_type).ok_or_else(|| OnnxError::UnsupportedInput {
            name: i.name().to_string(),
            reason: format!("element type {}", elem_type_name(elem_type)),
        })?;
        let declared = declared_dims(i);
        let shape = match (given(i.name()), declared) {
            (Some(dims), Some(declared)) => {
                if dims.len() != declared.len() {
                    return Err(err(format!(
                        "--input-shape gives rank {}, the model declares rank {}",
                        dims.len(),
                        declared.len()
                    )));
                }
                for (k, (d, &v)) in declared.iter().zip(&dims).enumerate() {
                    if let Dim::Fixed(f) = d {
                        if *f != v {
                            return Err(err(format!(
                                "dimension {k} is {f} in the model, {v} was given"
                            )));
                        }
                    }
                }
                dims
            }
            (Some(dims), None) => dims,
            (None, Some(declared)) => declared
                .iter()
                .enumerate()
                .map(|(k, d)| match d {
                    Dim::Fixed(f) => Ok(*f),
                    Dim::Param(p) => params.get(p).copied().ok_or_else(|| {
                        err(format!(
                            "dimension {k} is symbolic ({p}); bind it with --input-shape {}=... \
                             or {p}=N",
                            i.name()
                        ))
                    }),
                    Dim::Unknown => Err(err(format!(
                        "dimension {k} is unknown; give the shape with --input-shape {}=...",
                        i.name()
                    ))),
                })
                .collect::<Result<Vec<usize>, OnnxError>>()?,
            (None, None) => {
                return Err(err(format!(
                    "the model declares no shape; give it with --input-shape {}=...",
                    i.name()
                )))
            }
        };
        out.push(ImportedInput {
            onnx_name: i.name().to_string(),
            port: port_name(i.name(), &mut used),
            shape,
            dtype,
            elem_type,
        });
    }
    Ok(out)
}

enum Dim {
    Fixed(usize),
    Param(String),
    Unknown,
}

/// A value bound to a graph input must have the input's declared rank, its fixed dimensions
/// and a value of its kind (floating point, integer or boolean).
fn check_constant_input(i: &crate::proto::ValueInfoProto, c: &crate::Const) -> Result<(), String> {
    use crate::proto::tensor_proto::DataType as T;
    if let Some(dims) = declared_dims(i) {
        let fits = dims.len() == c.shape.len()
            && dims
                .iter()
                .zip(&c.shape)
                .all(|(d, &n)| !matches!(d, Dim::Fixed(f) if *f != n));
        if !fits {
            let shown: Vec<String> = dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => n.to_string(),
                    Dim::Param(p) => p.clone(),
                    Dim::Unknown => "?".into(),
                })
                .collect();
            return Err(format!(
                "the model declares shape [{}], the value given has shape {:?}",
                shown.join(", "),
                c.shape
            ));
        }
    }
    let Some(type_proto::Value::TensorType(t)) = i.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Ok(());
    };
    let declared = t.elem_type();
    let kind = |e: i32| match T::try_from(e) {
        Ok(T::Bool) => Some("boolean"),
        Ok(T::Float | T::Float16 | T::Double | T::Bfloat16) => Some("floating-point"),
        Ok(
            T::Int8 | T::Int16 | T::Int32 | T::Int64 | T::Uint8 | T::Uint16 | T::Uint32 | T::Uint64,
        ) => Some("integer"),
        _ => None,
    };
    let given = match c.data {
        crate::value::Data::F32(_) => "floating-point",
        crate::value::Data::Int(_) => "integer",
        crate::value::Data::Bool(_) => "boolean",
    };
    match kind(declared) {
        Some(k) if k != given => Err(format!(
            "the model declares a {k} input ({}), the value given is {given}",
            T::try_from(declared).map_or("?", |t| t.as_str_name())
        )),
        _ => Ok(()),
    }
}

fn declared_dims(i: &crate::proto::ValueInfoProto) -> Option<Vec<Dim>> {
    let Some(type_proto::Value::TensorType(t)) = i.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    Some(
        t.shape
            .as_ref()?
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(dimension::Value::DimValue(v)) if *v >= 0 => Dim::Fixed(*v as usize),
                Some(dimension::Value::DimParam(p)) if !p.is_empty() => Dim::Param(p.clone()),
                _ => Dim::Unknown,
            })
            .collect(),
    )
}

/// The nodes in an order where each comes after the producers of its inputs (Kahn's algorithm;
/// the file's order breaks ties). Names neither produced nor known are errors naming the node.
fn order_nodes<'g>(
    graph: &'g GraphProto,
    known: &HashMap<String, Value>,
) -> Result<Vec<&'g NodeProto>, OnnxError> {
    let nodes = &graph.node;
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            producer.insert(o.as_str(), i);
        }
    }
    let mut pending = vec![0usize; nodes.len()];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        let mut deps: Vec<usize> = Vec::new();
        for name in node_reads(n) {
            match producer.get(name) {
                Some(&p) => deps.push(p),
                None if known.contains_key(name) => {}
                None => {
                    return Err(OnnxError::Node {
                        op: n.op_type().to_string(),
                        node: node_label(n, i),
                        opset: 0,
                        message: format!(
                            "input {name:?} is produced by no node, input or initializer"
                        ),
                    })
                }
            }
        }
        deps.extend(
            subgraph_reads(n)
                .into_iter()
                .filter_map(|name| producer.get(name).copied())
                .filter(|&p| p != i),
        );
        deps.sort_unstable();
        deps.dedup();
        pending[i] = deps.len();
        for d in deps {
            users[d].push(i);
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..nodes.len())
        .filter(|&i| pending[i] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(&nodes[i]);
        for &u in &users[i] {
            pending[u] -= 1;
            if pending[u] == 0 {
                ready.push(std::cmp::Reverse(u));
            }
        }
    }
    if order.len() < nodes.len() {
        let stuck = (0..nodes.len())
            .filter(|&i| pending[i] > 0)
            .map(|i| node_label(&nodes[i], i))
            .collect();
        return Err(OnnxError::Cycle { nodes: stuck });
    }
    Ok(order)
}

/// The value names a node reads, including the outer-scope names its subgraphs read.
fn node_reads(n: &NodeProto) -> Vec<&str> {
    n.input
        .iter()
        .filter(|s| !s.is_empty())
        .map(String::as_str)
        .collect()
}

/// The names a node's subgraphs (If branches, loop bodies) read, at any depth; those produced
/// inside them are included too and are ignored by the caller, which only orders by outer
/// producers.
fn subgraph_reads(n: &NodeProto) -> Vec<&str> {
    let mut out = Vec::new();
    for a in &n.attribute {
        for g in a.g.iter().chain(a.graphs.iter()) {
            for inner in &g.node {
                out.extend(node_reads(inner));
                out.extend(subgraph_reads(inner));
            }
        }
    }
    out
}

pub(crate) fn node_label(n: &NodeProto, index: usize) -> String {
    if n.name().is_empty() {
        format!(
            "#{index} -> {}",
            n.output.first().map_or("", String::as_str)
        )
    } else {
        n.name().to_string()
    }
}

/// The ONNX element type each graph input, initializer and annotated value is declared with.
fn declared_types(graph: &crate::proto::GraphProto) -> HashMap<String, i32> {
    let infos = graph
        .input
        .iter()
        .chain(&graph.value_info)
        .chain(&graph.output);
    infos
        .filter_map(|i| match i.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(t)) => Some((i.name().to_string(), t.elem_type())),
            _ => None,
        })
        .chain(
            graph
                .initializer
                .iter()
                .map(|t| (t.name().to_string(), t.data_type())),
        )
        .collect()
}

fn run_node(
    proto: &NodeProto,
    opset: i64,
    values: &mut HashMap<String, Value>,
    types: &mut HashMap<String, i32>,
    host_gathers: Option<&std::cell::RefCell<Vec<HostGather>>>,
) -> Result<(), OnnxError> {
    let label = || {
        if proto.name().is_empty() {
            format!("-> {}", proto.output.first().map_or("", String::as_str))
        } else {
            proto.name().to_string()
        }
    };
    let op = proto.op_type().to_string();
    if op == "If" && matches!(proto.domain(), "" | "ai.onnx") {
        return run_if(proto, opset, values, types, host_gathers, &label());
    }
    if !matches!(proto.domain(), "" | "ai.onnx") {
        return Err(OnnxError::Unsupported {
            op: format!("{}.{}", proto.domain(), op),
            node: label(),
            opset,
            reason: format!("domain {:?} is not supported", proto.domain()),
        });
    }
    if opset < *OPSETS.start() && !LEGACY_OPS.contains(&op.as_str()) {
        return Err(OnnxError::Unsupported {
            op,
            node: label(),
            opset,
            reason: format!(
                "opset {opset} predates {}; below it only {} import",
                OPSETS.start(),
                LEGACY_OPS.join(", ")
            ),
        });
    }
    let Some(import) = ops::lookup(&op) else {
        return Err(OnnxError::Unsupported {
            op,
            node: label(),
            opset,
            reason: "no importer for this op".into(),
        });
    };
    let inputs = proto
        .input
        .iter()
        .map(|name| {
            if name.is_empty() {
                None
            } else {
                values.get(name).cloned()
            }
        })
        .collect();
    let input_types = proto
        .input
        .iter()
        .map(|name| types.get(name).copied().unwrap_or(0))
        .collect();
    let node = Node {
        proto,
        host_gathers,
        inputs,
        input_types,
        opset,
    };
    let results = import(&node).map_err(|e| match e {
        OpError::Unsupported(reason) => OnnxError::Unsupported {
            op: op.clone(),
            node: label(),
            opset,
            reason,
        },
        OpError::Invalid(message) => OnnxError::Node {
            op: op.clone(),
            node: label(),
            opset,
            message,
        },
    })?;
    // Cast and CastLike declare their output's element type (which QuantizeLinear's zero point
    // carries when it is computed)
    let cast_to = match op.as_str() {
        "Cast" => proto
            .attribute
            .iter()
            .find(|a| a.name() == "to")
            .and_then(|a| a.i)
            .map(|t| t as i32),
        "CastLike" => node.input_types.get(1).copied().filter(|&t| t != 0),
        _ => None,
    };
    if let (Some(t), Some(out)) = (cast_to, proto.output.first()) {
        types.insert(out.clone(), t);
    }
    let mut results = results.into_iter();
    for (k, name) in proto.output.iter().enumerate() {
        let value = results.next();
        if name.is_empty() {
            continue;
        }
        match value {
            Some(v) => {
                values.insert(name.clone(), v);
            }
            None => {
                return Err(OnnxError::Unsupported {
                    op: op.clone(),
                    node: label(),
                    opset,
                    reason: format!("output {k} ({name:?}) is not produced"),
                })
            }
        }
    }
    Ok(())
}

/// `If` whose condition is known at import time: the chosen branch is imported in place, seeing
/// the enclosing scope, and its outputs become the node's.
fn run_if(
    proto: &NodeProto,
    opset: i64,
    values: &mut HashMap<String, Value>,
    types: &mut HashMap<String, i32>,
    host_gathers: Option<&std::cell::RefCell<Vec<HostGather>>>,
    label: &str,
) -> Result<(), OnnxError> {
    let err = |reason: String| OnnxError::Unsupported {
        op: "If".into(),
        node: label.to_string(),
        opset,
        reason,
    };
    let cond_name = proto.input.first().map_or("", String::as_str);
    let cond = match values.get(cond_name) {
        Some(Value::Const(c)) if c.len() == 1 => c.data.f64_at(0) != 0.0,
        Some(Value::Const(_)) => return Err(err("the condition must hold one element".into())),
        Some(Value::Tensor(_)) => {
            return Err(err(format!(
                "the condition ({cond_name:?}) is computed at run time; it must be a constant"
            )))
        }
        None => return Err(err(format!("the condition {cond_name:?} is not produced"))),
    };
    let branch_name = if cond { "then_branch" } else { "else_branch" };
    let branch = proto
        .attribute
        .iter()
        .find(|a| a.name() == branch_name)
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| err(format!("no {branch_name}")))?;
    for t in &branch.initializer {
        let c = const_from_proto(t).map_err(|message| OnnxError::Tensor {
            tensor: t.name().to_string(),
            message,
        })?;
        values.insert(t.name().to_string(), Value::Const(c));
    }
    for node in order_nodes(branch, values)? {
        run_node(node, opset, values, types, host_gathers)?;
    }
    if branch.output.len() != proto.output.len() {
        return Err(err(format!(
            "{branch_name} has {} outputs, the node {}",
            branch.output.len(),
            proto.output.len()
        )));
    }
    for (out, inner) in proto.output.iter().zip(&branch.output) {
        let v = values.get(inner.name()).cloned().ok_or_else(|| {
            err(format!(
                "{branch_name} output {:?} is not produced",
                inner.name()
            ))
        })?;
        if !out.is_empty() {
            values.insert(out.clone(), v);
        }
    }
    Ok(())
}
