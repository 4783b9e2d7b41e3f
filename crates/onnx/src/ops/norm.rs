//! Normalisations: `BatchNormalization` (inference), `LayerNormalization`,
//! `InstanceNormalization`, `GroupNormalization` (opset 21), `LpNormalization`,
//! `MeanVarianceNormalization`.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::{axes, axis, Node};
use crate::value::Value;

pub const OPS: &[(&str, Importer)] = &[
    ("BatchNormalization", batch_norm),
    ("LayerNormalization", layer_norm),
    ("InstanceNormalization", instance_norm),
    ("GroupNormalization", group_norm),
    ("LpNormalization", lp_norm),
    ("MeanVarianceNormalization", mvn),
    ("LRN", lrn),
];

/// `x / (bias + alpha/size · Σ_window x²)^beta` over a window of `size` channels.
fn lrn(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.rank() < 3 {
        return invalid(format!("expected [N, C, ...], got {:?}", x.shape()));
    }
    let size = n.attr_i("size", 0);
    if size <= 0 {
        return invalid("size must be positive");
    }
    let size = size as usize;
    let (alpha, beta, bias) = (
        n.attr_f("alpha", 1e-4),
        n.attr_f("beta", 0.75),
        n.attr_f("bias", 1.0),
    );
    let (b, c) = (x.shape()[0], x.shape()[1]);
    let rest: usize = x.shape()[2..].iter().product();
    let sq = x
        .square()?
        .reshape(&[b as isize, 1, c as isize, rest as isize])?;
    let padded = sq.pad(
        &[(0, 0), (0, 0), ((size - 1) / 2, size / 2), (0, 0)],
        aneforge::graph::PadMode::Constant,
        0.0,
    )?;
    let window = padded.pool(aneforge::graph::PoolAttrs {
        kind: aneforge::graph::PoolKind::Avg { count_pad: true },
        kernel: vec![size, 1],
        strides: vec![1, 1],
        pads: vec![(0, 0), (0, 0)],
        ceil_mode: false,
    })?;
    let sum = window.mul_scalar(size as f32)?;
    let back: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    let denom = sum
        .mul_scalar(alpha / size as f32)?
        .add_scalar(bias)?
        .pow_scalar(beta)?
        .reshape(&back)?;
    tensor(x.div(&denom)?)
}

fn batch_norm(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let (scale, bias, mean, var) = (n.tensor(1)?, n.tensor(2)?, n.tensor(3)?, n.tensor(4)?);
    if x.rank() < 2 {
        return invalid(format!("expected [N, C, ...], got {:?}", x.shape()));
    }
    let eps = n.attr_f("epsilon", 1e-5);
    if n.attr_i("training_mode", 0) != 0 {
        // the batch's statistics normalize; the running ones move toward them by `momentum`
        let axes: Vec<isize> = (0..x.rank() as isize).filter(|&a| a != 1).collect();
        let mut along = vec![1isize; x.rank()];
        along[1] = x.shape()[1] as isize;
        let batch_mean = x.mean(&axes, true)?;
        let centred = x.sub(&batch_mean)?;
        let batch_var = centred.square()?.mean(&axes, true)?;
        let y = centred
            .mul(&batch_var.add_scalar(eps)?.rsqrt()?)?
            .mul(&scale.reshape(&along)?)?
            .add(&bias.reshape(&along)?)?;
        let momentum = n.attr_f("momentum", 0.9);
        let running = |old: &aneforge::Tensor, batch: &aneforge::Tensor| -> OpResult<Value> {
            let batch = batch.reshape(&[-1])?.mul_scalar(1.0 - momentum)?;
            Ok(Value::Tensor(old.mul_scalar(momentum)?.add(&batch)?))
        };
        return Ok(vec![
            Value::Tensor(y),
            running(&mean, &batch_mean)?,
            running(&var, &batch_var)?,
        ]);
    }
    if x.rank() == 2 {
        // [N, C]: the graph op wants spatial axes
        let y = x
            .expand_dims(&[2])?
            .batch_norm(&mean, &var, Some(&scale), Some(&bias), eps)?;
        return tensor(y.squeeze(&[2])?);
    }
    tensor(x.batch_norm(&mean, &var, Some(&scale), Some(&bias), eps)?)
}

fn layer_norm(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let a = axis(n.attr_i("axis", -1), x.rank())?;
    let norm_axes: Vec<isize> = (a as isize..x.rank() as isize).collect();
    let eps = n.attr_f("epsilon", 1e-5);
    let tail = &x.shape()[a..];
    let fit = |t: aneforge::Tensor| -> OpResult<aneforge::Tensor> {
        if t.shape() == tail {
            Ok(t)
        } else {
            Ok(t.broadcast_to(tail)?)
        }
    };
    let gamma = fit(n.tensor(1)?)?;
    let beta = n.opt_tensor(2)?.map(fit).transpose()?;
    let y = x.layer_norm(&norm_axes, Some(&gamma), beta.as_ref(), eps)?;
    if n.proto.output.iter().skip(1).all(|o| o.is_empty()) {
        return tensor(y);
    }
    // the optional statistics outputs, over the normalised axes kept as size 1
    let mean = x.mean(&norm_axes, true)?;
    let var = x.sub(&mean)?.square()?.mean(&norm_axes, true)?;
    let inv_std = var.add_scalar(eps)?.rsqrt()?;
    Ok(vec![
        Value::Tensor(y),
        Value::Tensor(mean),
        Value::Tensor(inv_std),
    ])
}

fn per_channel(t: &aneforge::Tensor, rank: usize) -> OpResult<aneforge::Tensor> {
    let mut shape = vec![t.len() as isize];
    shape.extend(std::iter::repeat_n(1, rank - 2));
    Ok(t.reshape(&shape)?)
}

fn instance_norm(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.rank() < 3 {
        return invalid(format!("expected [N, C, *spatial], got {:?}", x.shape()));
    }
    let eps = n.attr_f("epsilon", 1e-5);
    let spatial: Vec<isize> = (2..x.rank() as isize).collect();
    let y = x.layer_norm(&spatial, None, None, eps)?;
    let y = y.mul(&per_channel(&n.tensor(1)?, x.rank())?)?;
    tensor(y.add(&per_channel(&n.tensor(2)?, x.rank())?)?)
}

fn group_norm(n: &Node) -> OpResult<Vec<Value>> {
    if n.opset < 21 {
        return unsupported("opset 18 GroupNormalization (per-group scale and bias)");
    }
    let x = n.tensor(0)?;
    let groups = n.attr_i("num_groups", 0);
    if groups <= 0 {
        return invalid("num_groups must be positive");
    }
    let eps = n.attr_f("epsilon", 1e-5);
    let (scale, bias) = (n.tensor(1)?, n.tensor(2)?);
    tensor(x.group_norm(groups as usize, Some(&scale), Some(&bias), eps)?)
}

fn lp_norm(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let a = axis(n.attr_i("axis", -1), x.rank())? as isize;
    match n.attr_i("p", 2) {
        2 => tensor(x.div(&x.square()?.sum(&[a], true)?.sqrt()?)?),
        1 => tensor(x.div(&x.abs()?.sum(&[a], true)?)?),
        p => invalid(format!("p = {p} (1 or 2)")),
    }
}

fn mvn(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let list = n.attr_ints("axes").unwrap_or_else(|| vec![0, 2, 3]);
    let ax = axes(&list, x.rank())?;
    let ax: Vec<isize> = ax.iter().map(|&a| a as isize).collect();
    let centred = x.sub(&x.mean(&ax, true)?)?;
    let var = centred.square()?.mean(&ax, true)?;
    tensor(centred.div(&var.add_scalar(1e-9)?.sqrt()?)?)
}
