//! Convolution and pooling over 1 or 2 spatial axes: `Conv`, `ConvTranspose`, `MaxPool`,
//! `AveragePool`, `GlobalAveragePool`, `GlobalMaxPool`.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::{to_usize, Node};
use crate::value::Value;
use aneforge::graph::{ConvAttrs, Op, PoolAttrs, PoolKind};
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("Conv", conv),
    ("ConvTranspose", conv_transpose),
    ("MaxPool", |n| pool(n, PoolKind::Max)),
    ("AveragePool", |n| {
        let count_pad = n.attr_i("count_include_pad", 0) != 0;
        pool(n, PoolKind::Avg { count_pad })
    }),
    ("LpPool", lp_pool),
    ("GlobalAveragePool", |n| global(n, false)),
    ("GlobalMaxPool", |n| global(n, true)),
];

/// The spatial rank of an `[N, C, *S]` operand, which the graph supports for 1 and 2.
fn spatial_rank(x: &Tensor) -> OpResult<usize> {
    match x.rank() {
        3 | 4 => Ok(x.rank() - 2),
        r if r > 4 => unsupported(format!("{} spatial axes (1 or 2 are supported)", r - 2)),
        _ => invalid(format!(
            "expected [N, C, *spatial], got shape {:?}",
            x.shape()
        )),
    }
}

fn list(n: &Node, name: &str, len: usize, default: usize) -> OpResult<Vec<usize>> {
    match n.attr_ints(name) {
        Some(v) if v.len() == len => to_usize(&v, name),
        Some(v) => invalid(format!("{name} has {} entries, expected {len}", v.len())),
        None => Ok(vec![default; len]),
    }
}

/// `(before, after)` pads per spatial axis from `pads` / `auto_pad` for a forward window.
fn window_pads(
    n: &Node,
    input: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
) -> OpResult<Vec<(usize, usize)>> {
    let k = input.len();
    match n.attr_s("auto_pad", "NOTSET").as_str() {
        "NOTSET" => {
            let p = list(n, "pads", 2 * k, 0)?;
            Ok((0..k).map(|i| (p[i], p[i + k])).collect())
        }
        "VALID" => Ok(vec![(0, 0); k]),
        mode @ ("SAME_UPPER" | "SAME_LOWER") => Ok((0..k)
            .map(|i| {
                let out = input[i].div_ceil(strides[i]);
                let span = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out - 1) * strides[i] + span).saturating_sub(input[i]);
                let small = total / 2;
                if mode == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                }
            })
            .collect()),
        other => invalid(format!("auto_pad {other:?}")),
    }
}

fn conv(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let w = n.tensor(1)?;
    let k = spatial_rank(&x)?;
    if w.rank() != k + 2 {
        return invalid(format!(
            "weight shape {:?} for input {:?}",
            w.shape(),
            x.shape()
        ));
    }
    let kernel = w.shape()[2..].to_vec();
    let strides = list(n, "strides", k, 1)?;
    let dilations = list(n, "dilations", k, 1)?;
    let pads = window_pads(n, &x.shape()[2..], &kernel, &strides, &dilations)?;
    let attrs = ConvAttrs {
        strides,
        pads,
        dilations,
        groups: n.attr_i("group", 1).max(1) as usize,
    };
    let bias = n.opt_tensor(2)?;
    tensor(x.conv(&w, bias.as_ref(), attrs)?)
}

fn conv_transpose(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let w = n.tensor(1)?;
    let k = spatial_rank(&x)?;
    if w.rank() != k + 2 {
        return invalid(format!(
            "weight shape {:?} for input {:?}",
            w.shape(),
            x.shape()
        ));
    }
    if n.attr("output_shape").is_some() {
        return unsupported("the output_shape attribute");
    }
    if !matches!(n.attr_s("auto_pad", "NOTSET").as_str(), "NOTSET" | "VALID") {
        return unsupported("auto_pad SAME_* on ConvTranspose");
    }
    let strides = list(n, "strides", k, 1)?;
    let dilations = list(n, "dilations", k, 1)?;
    let p = list(n, "pads", 2 * k, 0)?;
    let attrs = ConvAttrs {
        strides,
        pads: (0..k).map(|i| (p[i], p[i + k])).collect(),
        dilations,
        groups: n.attr_i("group", 1).max(1) as usize,
    };
    let output_padding = list(n, "output_padding", k, 0)?;
    let bias = n.opt_tensor(2)?;
    let build = |attrs: ConvAttrs, output_padding: Vec<usize>, bias: Option<&Tensor>| {
        let mut srcs = vec![x.clone(), w.clone()];
        srcs.extend(bias.cloned());
        Tensor::from_op(
            Op::ConvTranspose {
                attrs,
                output_padding,
                has_bias: bias.is_some(),
            },
            srcs,
        )
    };
    let grows = (0..k).any(|i| output_padding[i] > attrs.pads[i].1);
    if !grows {
        return tensor(build(attrs, output_padding, bias.as_ref())?);
    }
    // output padding beyond the trailing padding extends the output past the full transposed
    // convolution, where only the bias lands: compute the full result and append zeros
    let mut full_attrs = attrs.clone();
    let mut extend = vec![(0usize, 0usize); 2];
    for (i, &op) in output_padding.iter().enumerate() {
        let (pb, pa) = attrs.pads[i];
        full_attrs.pads[i] = (pb, 0);
        extend.push((0, op.saturating_sub(pa)));
    }
    let y = build(full_attrs, vec![0; k], None)?;
    let y = y.pad(&extend, aneforge::graph::PadMode::Constant, 0.0)?;
    match bias {
        Some(b) => {
            let mut shape = vec![b.len() as isize];
            shape.extend(std::iter::repeat_n(1, k));
            tensor(y.add(&b.reshape(&shape)?)?)
        }
        None => tensor(y),
    }
}

fn pool(n: &Node, kind: PoolKind) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.dtype() == DType::I32 && kind == PoolKind::Max {
        // integer max pooling runs on floats (exact below 2^24)
        let y = pool_of(n, kind, x.cast(DType::F32)?)?;
        return match y.as_slice() {
            [Value::Tensor(t)] => tensor(t.cast(DType::I32)?),
            _ => invalid("pooling produced no tensor"),
        };
    }
    pool_of(n, kind, x)
}

fn pool_of(n: &Node, kind: PoolKind, x: Tensor) -> OpResult<Vec<Value>> {
    let k = spatial_rank(&x)?;
    let kernel = match n.attr_ints("kernel_shape") {
        Some(v) if v.len() == k => to_usize(&v, "kernel_shape")?,
        _ => return invalid(format!("kernel_shape must list {k} sizes")),
    };
    let dilations = list(n, "dilations", k, 1)?;
    if dilations.iter().any(|&d| d != 1) {
        return unsupported("dilated pooling");
    }
    if n.attr_i("storage_order", 0) != 0 {
        return unsupported("storage_order 1");
    }
    let strides = list(n, "strides", k, 1)?;
    let pads = window_pads(n, &x.shape()[2..], &kernel, &strides, &dilations)?;
    let ceil_mode = n.attr_i("ceil_mode", 0) != 0;
    let attrs = PoolAttrs {
        kind,
        kernel: kernel.clone(),
        strides: strides.clone(),
        pads: pads.clone(),
        ceil_mode,
    };
    match x.pool(attrs) {
        Ok(y) => tensor(y),
        // the graph op takes padding up to half the kernel and symmetric ceil-mode windows
        Err(_) => padded_pool(&x, kind, &kernel, &strides, &pads, ceil_mode),
    }
}

/// Pooling with any padding: the padding (and, in ceil mode, the end of the last window) is
/// written out, the windows pool without padding, and an average divides by a pooled count of
/// the positions that count (input elements, and explicit padding with `count_pad`).
fn padded_pool(
    x: &Tensor,
    kind: PoolKind,
    kernel: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    ceil_mode: bool,
) -> OpResult<Vec<Value>> {
    let spatial = &x.shape()[2..];
    let mut full = vec![(0usize, 0usize); 2];
    for (i, &(b, e)) in pads.iter().enumerate() {
        let len = spatial[i] + b + e;
        if len < kernel[i] {
            return invalid(format!(
                "axis {i}: the kernel {} exceeds the padded size {len}",
                kernel[i]
            ));
        }
        let mut extra = 0;
        if ceil_mode {
            let mut out = (len - kernel[i]).div_ceil(strides[i]) + 1;
            // the last window must start inside the input or its leading padding
            if (out - 1) * strides[i] >= spatial[i] + b {
                out -= 1;
            }
            extra = ((out - 1) * strides[i] + kernel[i]).saturating_sub(len);
        }
        full.push((b, e + extra));
    }
    let window = |t: &Tensor, k: PoolKind| -> OpResult<Tensor> {
        Ok(t.pool(PoolAttrs {
            kind: k,
            kernel: kernel.to_vec(),
            strides: strides.to_vec(),
            pads: vec![(0, 0); kernel.len()],
            ceil_mode: false,
        })?)
    };
    match kind {
        PoolKind::Max => {
            let padded = x.pad(&full, aneforge::graph::PadMode::Constant, f32::MIN)?;
            tensor(window(&padded, PoolKind::Max)?)
        }
        PoolKind::Avg { count_pad } => {
            let sum = window(
                &x.pad(&full, aneforge::graph::PadMode::Constant, 0.0)?,
                PoolKind::Avg { count_pad: true },
            )?;
            // 1 where a position counts: the input, and the explicit padding with count_pad
            let mut mask_shape = vec![1usize, 1];
            mask_shape.extend(spatial);
            let ones = aneforge::graph::full(&mask_shape, 1.0)?;
            let counted: Vec<(usize, usize)> = full
                .iter()
                .enumerate()
                .map(|(i, &(b, _))| {
                    if i >= 2 && count_pad {
                        (b, pads[i - 2].1)
                    } else {
                        (0, 0)
                    }
                })
                .collect();
            let mut mask = ones.pad(&counted, aneforge::graph::PadMode::Constant, 1.0)?;
            let rest: Vec<(usize, usize)> = full
                .iter()
                .zip(&counted)
                .map(|(&(b, e), &(cb, ce))| (b - cb, e - ce))
                .collect();
            mask = mask.pad(&rest, aneforge::graph::PadMode::Constant, 0.0)?;
            let count = window(&mask, PoolKind::Avg { count_pad: true })?;
            tensor(sum.div(&count)?)
        }
    }
}

/// `(Σ_window |x|^p)^(1/p)`: an average pool counting the padding, times the window size.
fn lp_pool(n: &Node) -> OpResult<Vec<Value>> {
    let p = n.attr_i("p", 2);
    if p <= 0 {
        return invalid(format!("p = {p}"));
    }
    let x = n.tensor(0)?;
    let powered = if p == 2 {
        x.square()?
    } else {
        x.abs()?.pow_scalar(p as f32)?
    };
    let area: usize = n
        .attr_ints("kernel_shape")
        .unwrap_or_default()
        .iter()
        .product::<i64>()
        .max(1) as usize;
    let pooled = match pool_of(n, PoolKind::Avg { count_pad: true }, powered)?.as_slice() {
        [Value::Tensor(t)] => t.mul_scalar(area as f32)?,
        _ => return invalid("pooling produced no tensor"),
    };
    tensor(if p == 2 {
        pooled.sqrt()?
    } else {
        pooled.pow_scalar(1.0 / p as f32)?
    })
}

fn global(n: &Node, max: bool) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.rank() < 3 {
        return invalid(format!("expected [N, C, *spatial], got {:?}", x.shape()));
    }
    let axes: Vec<isize> = (2..x.rank() as isize).collect();
    tensor(if max {
        x.max(&axes, true)?
    } else {
        x.mean(&axes, true)?
    })
}
