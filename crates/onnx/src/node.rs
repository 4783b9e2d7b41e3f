//! One node during import: its resolved inputs, attributes and opset.

use crate::error::{invalid, unsupported, OpResult};
use crate::proto::{AttributeProto, NodeProto};
use crate::value::{const_from_proto, Const, Value};
use aneforge::Tensor;

pub struct Node<'a> {
    pub proto: &'a NodeProto,
    /// Where table lookups by a fed input are recorded when they run on the host
    /// ([`crate::ImportOptions::host_gathers`]); `None` keeps them in the graph.
    pub host_gathers: Option<&'a std::cell::RefCell<Vec<crate::HostGather>>>,
    /// One entry per declared input; `None` for an omitted optional input (empty name).
    pub inputs: Vec<Option<Value>>,
    /// The ONNX element type each input is declared with (as a graph input, initializer or
    /// annotated value); 0 where the model does not say.
    pub input_types: Vec<i32>,
    /// The version of the default ONNX domain the model imports.
    pub opset: i64,
}

impl Node<'_> {
    pub fn n_inputs(&self) -> usize {
        self.inputs.len()
    }

    pub fn input(&self, i: usize) -> OpResult<&Value> {
        match self.inputs.get(i) {
            Some(Some(v)) => Ok(v),
            _ => invalid(format!("input {i} is required")),
        }
    }

    pub fn opt(&self, i: usize) -> Option<&Value> {
        self.inputs.get(i).and_then(|v| v.as_ref())
    }

    pub fn tensor(&self, i: usize) -> OpResult<Tensor> {
        self.input(i)?.to_tensor()
    }

    pub fn opt_tensor(&self, i: usize) -> OpResult<Option<Tensor>> {
        self.opt(i).map(|v| v.to_tensor()).transpose()
    }

    /// An input whose value must be known at import time (shapes, axes, pads, ...).
    pub fn konst(&self, i: usize) -> OpResult<&Const> {
        match self.input(i)? {
            Value::Const(c) => Ok(c),
            Value::Tensor(_) => unsupported(format!(
                "input {i} ({:?}) is computed at run time; it must be a constant",
                self.proto.input.get(i).map_or("", String::as_str)
            )),
        }
    }

    pub fn opt_ints(&self, i: usize) -> OpResult<Option<Vec<i64>>> {
        match self.opt(i) {
            None => Ok(None),
            Some(_) => Ok(Some(self.konst(i)?.to_i64s()?)),
        }
    }

    /// Every input is a host constant (the node folds).
    pub fn all_const(&self) -> bool {
        self.inputs
            .iter()
            .flatten()
            .all(|v| matches!(v, Value::Const(_)))
    }

    pub fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.proto.attribute.iter().find(|a| a.name() == name)
    }

    pub fn attr_i(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i).unwrap_or(default)
    }

    pub fn attr_f(&self, name: &str, default: f32) -> f32 {
        self.attr(name).and_then(|a| a.f).unwrap_or(default)
    }

    pub fn attr_s(&self, name: &str, default: &str) -> String {
        self.attr(name)
            .and_then(|a| a.s.as_ref())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_else(|| default.to_string())
    }

    pub fn attr_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).map(|a| a.ints.clone())
    }

    pub fn attr_floats(&self, name: &str) -> Option<Vec<f32>> {
        self.attr(name).map(|a| a.floats.clone())
    }

    pub fn attr_tensor(&self, name: &str) -> OpResult<Option<Const>> {
        match self.attr(name).and_then(|a| a.t.as_ref()) {
            None => Ok(None),
            Some(t) => const_from_proto(t)
                .map(Some)
                .map_err(crate::error::OpError::Invalid),
        }
    }
}

/// Normalises a possibly negative axis against `rank`.
pub fn axis(a: i64, rank: usize) -> OpResult<usize> {
    let r = rank as i64;
    if a < -r || a >= r.max(1) && !(rank == 0 && a == 0) {
        return invalid(format!("axis {a} is out of range for rank {rank}"));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

pub fn axes(list: &[i64], rank: usize) -> OpResult<Vec<usize>> {
    let mut out = list
        .iter()
        .map(|&a| axis(a, rank))
        .collect::<OpResult<Vec<_>>>()?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

pub fn to_usize(v: &[i64], what: &str) -> OpResult<Vec<usize>> {
    v.iter()
        .map(|&x| usize::try_from(x).or_else(|_| invalid(format!("{what} {x} is negative"))))
        .collect()
}
