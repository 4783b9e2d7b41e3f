//! Op importers, one module per ONNX op family. Each module lists its ops in an `OPS` table of
//! `(op type, importer)`; an importer turns a node's inputs into one value per output (fewer
//! when trailing optional outputs are not produced).

mod bitwise;
mod conv;
mod elementwise;
mod generate;
mod grid_sample;
mod linalg;
mod loss;
mod norm;
mod optional;
mod quant;
mod recurrent;
mod reduce;
mod resize;
mod selection;
mod shape;
mod spectral;
mod text;

use crate::error::OpResult;
use crate::node::Node;
use crate::value::Value;

pub type Importer = fn(&Node) -> OpResult<Vec<Value>>;

const FAMILIES: &[&[(&str, Importer)]] = &[
    elementwise::OPS,
    bitwise::OPS,
    linalg::OPS,
    conv::OPS,
    norm::OPS,
    quant::OPS,
    shape::OPS,
    generate::OPS,
    loss::OPS,
    recurrent::OPS,
    reduce::OPS,
    resize::OPS,
    grid_sample::OPS,
    selection::OPS,
    spectral::OPS,
    text::OPS,
    optional::OPS,
];

pub fn lookup(op: &str) -> Option<Importer> {
    FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .find(|(name, _)| *name == op)
        .map(|(_, f)| *f)
}

/// Every op type the importer has an importer for, sorted (`If`, resolved by the graph walk
/// when its condition is a constant, included).
pub fn supported_ops() -> Vec<&'static str> {
    let mut ops: Vec<&str> = FAMILIES
        .iter()
        .flat_map(|f| f.iter().map(|(n, _)| *n))
        .chain(["If"])
        .collect();
    ops.sort_unstable();
    ops
}

fn one(v: Value) -> OpResult<Vec<Value>> {
    Ok(vec![v])
}

fn tensor(t: aneforge::Tensor) -> OpResult<Vec<Value>> {
    Ok(vec![Value::Tensor(t)])
}
