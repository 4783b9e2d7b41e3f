//! Reductions (`ReduceSum`, `ReduceMean`, ..., `ReduceLogSumExp`), `ArgMax`/`ArgMin`, `Softmax`,
//! `LogSoftmax`.

use super::{one, tensor, Importer};
use crate::error::{unsupported, OpResult};
use crate::fold::strides;
use crate::node::{axes, axis, Node};
use crate::value::{Const, Data, Value};
use aneforge::graph::ReduceOp;
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("ReduceSum", |n| reduce(n, Kind::Plain(ReduceOp::Sum), 13)),
    ("ReduceMean", |n| reduce(n, Kind::Plain(ReduceOp::Mean), 18)),
    ("ReduceMax", |n| reduce(n, Kind::Plain(ReduceOp::Max), 18)),
    ("ReduceMin", |n| reduce(n, Kind::Plain(ReduceOp::Min), 18)),
    ("ReduceProd", |n| reduce(n, Kind::Plain(ReduceOp::Prod), 18)),
    ("ReduceL1", |n| reduce(n, Kind::L1, 18)),
    ("ReduceL2", |n| reduce(n, Kind::L2, 18)),
    ("ReduceSumSquare", |n| reduce(n, Kind::SumSquare, 18)),
    ("ReduceLogSum", |n| reduce(n, Kind::LogSum, 18)),
    ("ReduceLogSumExp", |n| reduce(n, Kind::LogSumExp, 18)),
    ("ArgMax", |n| arg(n, false)),
    ("ArgMin", |n| arg(n, true)),
    ("Hardmax", hardmax),
    ("TopK", top_k),
    ("Softmax", |n| softmax(n, false)),
    ("LogSoftmax", |n| softmax(n, true)),
];

#[derive(Clone, Copy)]
enum Kind {
    Plain(ReduceOp),
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

/// `axes_input_from`: the opset from which the axes are the second input, not an attribute.
fn reduce(n: &Node, kind: Kind, axes_input_from: i64) -> OpResult<Vec<Value>> {
    let rank = n.input(0)?.rank();
    let listed = if n.opset >= axes_input_from {
        n.opt_ints(1)?
    } else {
        n.attr_ints("axes")
    };
    let keep = n.attr_i("keepdims", 1) != 0;
    let list = match listed {
        Some(v) if !v.is_empty() => axes(&v, rank)?,
        _ if n.attr_i("noop_with_empty_axes", 0) != 0 => {
            return one(n.input(0)?.clone());
        }
        _ => (0..rank).collect(),
    };
    if let Value::Const(c) = n.input(0)? {
        if c.shape.contains(&0) {
            return one(Value::Const(fold_empty(c, kind, &list, keep)?));
        }
    }
    if let (Value::Const(c), Kind::Plain(op)) = (n.input(0)?, kind) {
        if matches!(c.data, Data::Int(_)) {
            return one(Value::Const(fold_int(c, op, &list, keep)?));
        }
    }
    let x = n.tensor(0)?;
    if x.dtype() == DType::Bool && matches!(kind, Kind::Plain(ReduceOp::Max | ReduceOp::Min)) {
        let ax: Vec<isize> = list.iter().map(|&a| a as isize).collect();
        let y = x.cast(DType::F32)?.reduce(
            if matches!(kind, Kind::Plain(ReduceOp::Max)) {
                ReduceOp::Max
            } else {
                ReduceOp::Min
            },
            &ax,
            keep,
        )?;
        return tensor(y.cast(DType::Bool)?);
    }
    if x.dtype() != DType::F32 && !matches!(kind, Kind::Plain(_)) {
        return unsupported(format!("{} inputs", x.dtype()));
    }
    let ax: Vec<isize> = list.iter().map(|&a| a as isize).collect();
    if rank == 0 {
        return tensor(x);
    }
    let y = match kind {
        Kind::Plain(op) => x.reduce(op, &ax, keep)?,
        Kind::L1 => x.abs()?.sum(&ax, keep)?,
        Kind::L2 => x.square()?.sum(&ax, keep)?.sqrt()?,
        Kind::SumSquare => x.square()?.sum(&ax, keep)?,
        Kind::LogSum => x.sum(&ax, keep)?.log()?,
        Kind::LogSumExp => {
            let m = x.max(&ax, true)?;
            let s = x.sub(&m)?.exp()?.sum(&ax, true)?.log()?.add(&m)?;
            if keep {
                s
            } else {
                s.squeeze(&ax)?
            }
        }
    };
    tensor(y)
}

/// The reduction of an empty constant. An output element that reduces no values is the
/// reduction's identity, as ONNX defines it: 0 for the sums, 1 for the product, −∞ and +∞ for
/// max and min, −∞ for the log sums (log 0), NaN for the mean (0 / 0).
fn fold_empty(c: &Const, kind: Kind, list: &[usize], keep: bool) -> OpResult<Const> {
    let shape: Vec<usize> = c
        .shape
        .iter()
        .enumerate()
        .filter(|(i, _)| keep || !list.contains(i))
        .map(|(i, &d)| if list.contains(&i) { 1 } else { d })
        .collect();
    let n: usize = shape.iter().product();
    let identity = match kind {
        Kind::Plain(ReduceOp::Sum) | Kind::L1 | Kind::L2 | Kind::SumSquare => 0.0,
        Kind::Plain(ReduceOp::Prod) => 1.0,
        Kind::Plain(ReduceOp::Max) | Kind::LogSum | Kind::LogSumExp => f32::NEG_INFINITY,
        Kind::Plain(ReduceOp::Min) => f32::INFINITY,
        Kind::Plain(ReduceOp::Mean) => f32::NAN,
    };
    match &c.data {
        Data::F32(_) => Const::new(shape, Data::F32(vec![identity; n])),
        Data::Int(_) if identity.is_finite() => {
            Const::new(shape, Data::Int(vec![identity as i64; n]))
        }
        _ => unsupported(format!(
            "this reduction of an empty {} tensor (its identity is not an integer)",
            c.data.dtype()
        )),
    }
}

/// Integer reductions on the host (shape arithmetic such as the product of dimensions).
fn fold_int(c: &Const, op: ReduceOp, list: &[usize], keep: bool) -> OpResult<Const> {
    let Data::Int(v) = &c.data else {
        return crate::error::invalid("not integer data");
    };
    let kept: Vec<usize> = c
        .shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if list.contains(&i) { 1 } else { d })
        .collect();
    let out_strides = strides(&kept);
    let in_strides = strides(&c.shape);
    let n_out: usize = kept.iter().product();
    let mut acc: Vec<Option<i64>> = vec![None; n_out];
    for (flat, &x) in v.iter().enumerate() {
        let mut o = 0;
        for (k, &d) in c.shape.iter().enumerate() {
            let coord = flat / in_strides[k] % d;
            if !list.contains(&k) {
                o += coord * out_strides[k];
            }
        }
        acc[o] = Some(match (acc[o], op) {
            (None, _) => x,
            (Some(a), ReduceOp::Sum | ReduceOp::Mean) => a + x,
            (Some(a), ReduceOp::Prod) => a * x,
            (Some(a), ReduceOp::Max) => a.max(x),
            (Some(a), ReduceOp::Min) => a.min(x),
        });
    }
    let count: usize = list.iter().map(|&a| c.shape[a]).product();
    let vals: Vec<i64> = acc
        .into_iter()
        .map(|a| {
            let a = a.unwrap_or(0);
            if matches!(op, ReduceOp::Mean) {
                a / count.max(1) as i64
            } else {
                a
            }
        })
        .collect();
    let shape = if keep {
        kept
    } else {
        c.shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !list.contains(i))
            .map(|(_, &d)| d)
            .collect()
    };
    Const::ints(shape, vals)
}

fn arg(n: &Node, min: bool) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.dtype() != DType::F32 {
        return unsupported(format!("{} inputs", x.dtype()));
    }
    let a = axis(n.attr_i("axis", 0), x.rank())?;
    let keep = n.attr_i("keepdims", 1) != 0;
    let src = if min { x.neg()? } else { x };
    if n.attr_i("select_last_index", 0) == 0 {
        return tensor(src.argmax(a as isize, keep)?);
    }
    // the last extreme is the first one of the reversed axis
    let d = src.shape()[a];
    let reversed_idx = Const::ints(vec![d], (0..d as i64).rev().collect())?.to_tensor()?;
    let first = src
        .gather(&reversed_idx, a as isize)?
        .argmax(a as isize, keep)?;
    let last = aneforge::graph::constant(aneforge::HostArray::scalar_i32(d as i32 - 1));
    tensor(last.sub(&first)?)
}

fn hardmax(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let default = if n.opset >= 13 { -1 } else { 1 };
    let a = axis(n.attr_i("axis", default), x.rank())?;
    if n.opset < 13 && a + 1 != x.rank() {
        return unsupported("opset < 13 Hardmax over a flattened tail");
    }
    let d = x.shape()[a];
    let idx = x.argmax(a as isize, true)?;
    let mut iota_shape = vec![1usize; x.rank()];
    iota_shape[a] = d;
    let iota = Const::ints(iota_shape, (0..d as i64).collect())?.to_tensor()?;
    tensor(iota.eq(&idx)?.cast(DType::F32)?)
}

fn softmax(n: &Node, log: bool) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let default = if n.opset >= 13 { -1 } else { 1 };
    let a = axis(n.attr_i("axis", default), x.rank())?;
    let apply = |t: &Tensor, ax: isize| -> OpResult<Tensor> {
        Ok(if log {
            t.log_softmax(ax)?
        } else {
            t.softmax(ax)?
        })
    };
    if n.opset >= 13 || a + 1 == x.rank() {
        return tensor(apply(&x, a as isize)?);
    }
    // before opset 13 the input is seen as a matrix [prod(dims[..axis]), prod(dims[axis..])]
    let rows: usize = x.shape()[..a].iter().product();
    let flat = x.reshape(&[rows as isize, -1])?;
    let y = apply(&flat, 1)?;
    let back: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    tensor(y.reshape(&back)?)
}

/// `TopK`: the `k` largest (or smallest) elements along `axis`, in order, ties to the lower
/// index, with their indices. Element `i` ranks by how many elements beat it (`x_j` beyond `x_i`,
/// or equal at a lower index); the `r`-th output selects the element of rank `r`. The pairwise
/// comparison takes one more axis than the input.
fn top_k(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let r = x.rank();
    if r == 0 || r >= aneforge::graph::MAX_RANK {
        return unsupported(format!(
            "rank {r} (1 to {} for the pairwise ranking)",
            aneforge::graph::MAX_RANK - 1
        ));
    }
    let a = axis(n.attr_i("axis", -1), r)?;
    let k = if n.opset >= 10 {
        n.konst(1)?.to_i64s()?.first().copied().unwrap_or(-1)
    } else {
        n.attr_i("k", -1)
    };
    let len = x.shape()[a];
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| (1..=len).contains(&k))
        .ok_or_else(|| crate::error::OpError::Invalid(format!("k {k} for an axis of {len}")))?;
    let largest = n.attr_i("largest", 1) != 0;
    // the axis last
    let mut perm: Vec<usize> = (0..r).filter(|&d| d != a).collect();
    perm.push(a);
    let xt = x.transpose(&perm)?;
    let xi = xt.expand_dims(&[r as isize])?; // [.., L, 1]: x_i
    let xj = xt.expand_dims(&[r as isize - 1])?; // [.., 1, L]: x_j
    let beyond = xj.compare(
        if largest {
            aneforge::graph::CompareOp::Greater
        } else {
            aneforge::graph::CompareOp::Less
        },
        &xi,
    )?;
    let equal = xj.compare(aneforge::graph::CompareOp::Equal, &xi)?;
    let earlier: Vec<bool> = (0..len * len).map(|f| f % len < f / len).collect();
    let earlier = Const::new(vec![len, len], Data::Bool(earlier))?.to_tensor()?;
    let zero = Const::new(vec![], Data::F32(vec![0.0]))?.to_tensor()?;
    let one = Const::new(vec![], Data::F32(vec![1.0]))?.to_tensor()?;
    let tie = equal.select(&earlier.select(&one, &zero)?, &zero)?;
    let rank = beyond.select(&one, &tie)?.sum(&[-1], false)?; // [.., L]
    let ranks: Vec<f32> = (0..k).map(|q| q as f32).collect();
    let ranks = Const::new(vec![k, 1], Data::F32(ranks))?.to_tensor()?;
    let pick = rank
        .expand_dims(&[r as isize - 1])?
        .compare(aneforge::graph::CompareOp::Equal, &ranks)?; // [.., k, L]
    let none = match xt.dtype() {
        DType::I32 => Const::ints(vec![], vec![0])?.to_tensor()?,
        _ => zero.clone(),
    };
    let values = pick.select(&xj, &none)?.sum(&[-1], false)?;
    let positions: Vec<f32> = (0..len).map(|i| i as f32).collect();
    let positions = Const::new(vec![len], Data::F32(positions))?.to_tensor()?;
    let indices = pick
        .select(&positions, &zero)?
        .sum(&[-1], false)?
        .cast(DType::I32)?;
    let mut back = vec![0; r];
    for (pos, &d) in perm.iter().enumerate() {
        back[d] = pos;
    }
    Ok(vec![
        Value::Tensor(values.transpose(&back)?),
        Value::Tensor(indices.transpose(&back)?),
    ])
}
