//! Losses: `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss` over `[N, C, *D]` scores
//! and integer `[N, *D]` targets. The target's class is picked by a one-hot comparison with the
//! class index, so no gather by data-dependent indices is needed.

use super::Importer;
use crate::error::{invalid, OpResult};
use crate::node::Node;
use crate::value::{Const, Value};
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("NegativeLogLikelihoodLoss", |n| {
        let x = n.tensor(0)?;
        Ok(vec![Value::Tensor(nll(n, &x)?)])
    }),
    ("SoftmaxCrossEntropyLoss", |n| {
        let x = n.tensor(0)?;
        if x.rank() < 2 {
            return invalid(format!("expected [N, C, ...], got {:?}", x.shape()));
        }
        let log_prob = x.log_softmax(1)?;
        Ok(vec![
            Value::Tensor(nll(n, &log_prob)?),
            Value::Tensor(log_prob),
        ])
    }),
];

/// `-x[n, target[n, d], d] · weight[target]`, reduced as the node's `reduction` says.
fn nll(n: &Node, x: &Tensor) -> OpResult<Tensor> {
    let target = n.tensor(1)?;
    if x.rank() < 2 || target.rank() + 1 != x.rank() || target.dtype() != DType::I32 {
        return invalid(format!(
            "scores {:?} and integer targets {:?} do not match",
            x.shape(),
            target.shape()
        ));
    }
    let classes = x.shape()[1];
    let mut class_shape = vec![1usize; x.rank()];
    class_shape[1] = classes;
    let iota = Const::ints(class_shape.clone(), (0..classes as i64).collect())?.to_tensor()?;
    let onehot = iota.eq(&target.expand_dims(&[1])?)?.cast(DType::F32)?;
    let picked = x.mul(&onehot)?.sum(&[1], false)?;
    let mut weight: Option<Tensor> = match n.opt_tensor(2)? {
        Some(w) => {
            let shaped: Vec<isize> = class_shape.iter().map(|&d| d as isize).collect();
            Some(onehot.mul(&w.reshape(&shaped)?)?.sum(&[1], false)?)
        }
        None => None,
    };
    if let Some(ignore) = n.attr("ignore_index").and_then(|a| a.i) {
        let keep = target
            .compare_scalar(aneforge::graph::CompareOp::NotEqual, ignore as f32)?
            .cast(DType::F32)?;
        weight = Some(match weight {
            Some(w) => w.mul(&keep)?,
            None => keep,
        });
    }
    let loss = match &weight {
        Some(w) => picked.mul(w)?.neg()?,
        None => picked.neg()?,
    };
    let all: Vec<isize> = (0..loss.rank() as isize).collect();
    match n.attr_s("reduction", "mean").as_str() {
        "none" => Ok(loss),
        "sum" => Ok(loss.sum(&all, false)?),
        "mean" => match &weight {
            Some(w) => Ok(loss.sum(&all, false)?.div(&w.sum(&all, false)?)?),
            None => Ok(loss.mean(&all, false)?),
        },
        other => invalid(format!("reduction {other:?}")),
    }
}
