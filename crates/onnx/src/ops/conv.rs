//! Convolution and pooling over 1 or 2 spatial axes: `Conv`, `ConvTranspose`, `MaxPool`,
//! `AveragePool`, `GlobalAveragePool`, `GlobalMaxPool`.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::{to_usize, Node};
use crate::value::{Const, Value};
use aneforge::graph::{ConvAttrs, Op, PoolAttrs, PoolKind};
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("Conv", conv),
    ("ConvTranspose", conv_transpose),
    ("MaxPool", |n| pool(n, PoolKind::Max)),
    ("MaxUnpool", max_unpool),
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
    let strides = list(n, "strides", k, 1)?;
    let dilations = list(n, "dilations", k, 1)?;
    let mut p = list(n, "pads", 2 * k, 0)?;
    let mut output_padding = list(n, "output_padding", k, 0)?;
    let auto_pad = n.attr_s("auto_pad", "NOTSET");
    let same = auto_pad.starts_with("SAME");
    if same || n.attr("output_shape").is_some() {
        // the pads that give the requested output size (`input · stride` for SAME_*): the total
        // splits evenly, the odd element at the end for SAME_UPPER, else at the start
        let given = n.attr_ints("output_shape").unwrap_or_default();
        let given = &given[given.len().saturating_sub(k)..];
        for i in 0..k {
            let input = x.shape()[2 + i];
            let want = match given.get(i) {
                Some(&o) if !same => {
                    usize::try_from(o).or_else(|_| invalid("negative output_shape"))?
                }
                _ => input * strides[i],
            };
            let full = strides[i] * (input - 1)
                + output_padding[i]
                + (w.shape()[2 + i] - 1) * dilations[i]
                + 1;
            let Some(total) = full.checked_sub(want) else {
                // larger than the full result: the extra trailing positions hold only the bias
                p[i] = 0;
                p[i + k] = 0;
                output_padding[i] += want - full;
                continue;
            };
            let (start, end) = if auto_pad == "SAME_LOWER" {
                (total - total / 2, total / 2)
            } else {
                (total / 2, total - total / 2)
            };
            p[i] = start;
            p[i + k] = end;
        }
    }
    let attrs = ConvAttrs {
        strides,
        pads: (0..k).map(|i| (p[i], p[i + k])).collect(),
        dilations,
        groups: n.attr_i("group", 1).max(1) as usize,
    };
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
    // three spatial axes pool by strided slices (the graph op takes one or two)
    let k = if x.rank() == 5 { 3 } else { spatial_rank(&x)? };
    let kernel = match n.attr_ints("kernel_shape") {
        Some(v) if v.len() == k => to_usize(&v, "kernel_shape")?,
        _ => return invalid(format!("kernel_shape must list {k} sizes")),
    };
    let dilations = list(n, "dilations", k, 1)?;
    let strides = list(n, "strides", k, 1)?;
    let pads = window_pads(n, &x.shape()[2..], &kernel, &strides, &dilations)?;
    let ceil_mode = n.attr_i("ceil_mode", 0) != 0;
    if kind == PoolKind::Max && n.proto.output.get(1).is_some_and(|o| !o.is_empty()) {
        let window = Window {
            kernel,
            strides,
            dilations,
        };
        return max_pool_with_indices(n, &x, &window, &pads, ceil_mode);
    }
    if n.attr_i("storage_order", 0) != 0 {
        return unsupported("storage_order 1 without the indices output");
    }
    let window = Window {
        kernel,
        strides,
        dilations,
    };
    if k <= 2 && window.dilations.iter().all(|&d| d == 1) {
        let attrs = PoolAttrs {
            kind,
            kernel: window.kernel.clone(),
            strides: window.strides.clone(),
            pads: pads.clone(),
            ceil_mode,
        };
        if let Ok(y) = x.pool(attrs) {
            return tensor(y);
        }
    }
    // the graph op takes no dilation, padding up to half the kernel and only symmetric
    // ceil-mode windows
    padded_pool(&x, kind, &window, &pads, ceil_mode)
}

struct Window {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
}

impl Window {
    /// The extent of a dilated window along spatial axis `i`.
    fn span(&self, i: usize) -> usize {
        (self.kernel[i] - 1) * self.dilations[i] + 1
    }

    /// Max or sum over the windows of an unpadded `[N, C, *S]` operand: the graph's pool
    /// without dilation, else one strided slice per kernel tap.
    fn reduce(&self, t: &Tensor, max: bool) -> OpResult<Tensor> {
        if self.kernel.len() <= 2 && self.dilations.iter().all(|&d| d == 1) {
            let kind = if max {
                PoolKind::Max
            } else {
                PoolKind::Avg { count_pad: true }
            };
            let y = t.pool(PoolAttrs {
                kind,
                kernel: self.kernel.clone(),
                strides: self.strides.clone(),
                pads: vec![(0, 0); self.kernel.len()],
                ceil_mode: false,
            })?;
            let area: usize = self.kernel.iter().product();
            return Ok(if max { y } else { y.mul_scalar(area as f32)? });
        }
        let k = self.kernel.len();
        let spatial = &t.shape()[2..];
        let outs: Vec<usize> = (0..k)
            .map(|i| (spatial[i] - self.span(i)) / self.strides[i] + 1)
            .collect();
        let taps: usize = self.kernel.iter().product();
        let mut acc: Option<Tensor> = None;
        for tap in 0..taps {
            let mut rest = tap;
            let mut begin = vec![0usize; 2];
            let mut end = t.shape()[..2].to_vec();
            let mut step = vec![1usize; 2];
            for i in (0..k).rev() {
                let offset = rest % self.kernel[i] * self.dilations[i];
                rest /= self.kernel[i];
                begin.insert(2, offset);
                end.insert(2, offset + (outs[i] - 1) * self.strides[i] + 1);
                step.insert(2, self.strides[i]);
            }
            let piece = t.slice(&begin, &end, &step)?;
            acc = Some(match acc {
                None => piece,
                Some(a) if max => a.maximum(&piece)?,
                Some(a) => a.add(&piece)?,
            });
        }
        acc.ok_or(crate::error::OpError::Invalid("an empty kernel".into()))
    }
}

/// Pooling with any padding: the padding (and, in ceil mode, the end of the last window) is
/// written out, the windows pool without padding, and an average divides by a pooled count of
/// the positions that count (input elements, and explicit padding with `count_pad`).
fn padded_pool(
    x: &Tensor,
    kind: PoolKind,
    w: &Window,
    pads: &[(usize, usize)],
    ceil_mode: bool,
) -> OpResult<Vec<Value>> {
    let spatial = &x.shape()[2..];
    let mut full = vec![(0usize, 0usize); 2];
    for (i, &(b, e)) in pads.iter().enumerate() {
        let len = spatial[i] + b + e;
        let span = w.span(i);
        if len < span {
            return invalid(format!(
                "axis {i}: the window {span} exceeds the padded size {len}"
            ));
        }
        let mut extra = 0;
        if ceil_mode {
            let mut out = (len - span).div_ceil(w.strides[i]) + 1;
            // the last window must start inside the input or its leading padding
            if (out - 1) * w.strides[i] >= spatial[i] + b {
                out -= 1;
            }
            extra = ((out - 1) * w.strides[i] + span).saturating_sub(len);
        }
        full.push((b, e + extra));
    }
    match kind {
        PoolKind::Max => {
            let padded = x.pad(&full, aneforge::graph::PadMode::Constant, f32::MIN)?;
            tensor(w.reduce(&padded, true)?)
        }
        PoolKind::Avg { count_pad } => {
            let sum = w.reduce(
                &x.pad(&full, aneforge::graph::PadMode::Constant, 0.0)?,
                false,
            )?;
            // 1 where a position counts: the input, and with count_pad every padded position
            // (the ceil-mode extension too, as ONNX's reference divides by the window size)
            let mut mask_shape = vec![1usize, 1];
            mask_shape.extend(spatial);
            let ones = aneforge::graph::full(&mask_shape, 1.0)?;
            let counted: Vec<(usize, usize)> = full
                .iter()
                .enumerate()
                .map(|(i, &(b, e))| if i >= 2 && count_pad { (b, e) } else { (0, 0) })
                .collect();
            let mut mask = ones.pad(&counted, aneforge::graph::PadMode::Constant, 1.0)?;
            let rest: Vec<(usize, usize)> = full
                .iter()
                .zip(&counted)
                .map(|(&(b, e), &(cb, ce))| (b - cb, e - ce))
                .collect();
            mask = mask.pad(&rest, aneforge::graph::PadMode::Constant, 0.0)?;
            let count = w.reduce(&mask, false)?;
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

/// `MaxUnpool(X, I, output_shape?)`: a zero tensor of the unpooled shape (from the kernel,
/// strides and pads) with each value of `X` at its flat index in `I` (constant), placed at the
/// start of a larger `output_shape` when one is given (as ONNX's reference does).
fn max_unpool(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let indices = n.konst(1)?.to_i64s()?;
    let k = spatial_rank(&x)?;
    if indices.len() != x.len() {
        return invalid(format!("{} indices for {} values", indices.len(), x.len()));
    }
    let kernel = n
        .attr_ints("kernel_shape")
        .ok_or_else(|| crate::error::OpError::Invalid("no kernel_shape".into()))?;
    let kernel = to_usize(&kernel, "kernel_shape")?;
    let strides = list(n, "strides", k, 1)?;
    let pads = list(n, "pads", 2 * k, 0)?;
    let mut inferred = x.shape()[..2].to_vec();
    for i in 0..k {
        let full = (x.shape()[2 + i] - 1) * strides[i] + kernel[i];
        inferred.push(full.saturating_sub(pads[i] + pads[i + k]));
    }
    let len: usize = inferred.iter().product();
    let targets = indices
        .iter()
        .map(|&i| {
            usize::try_from(i)
                .ok()
                .filter(|&i| i < len)
                .map(Some)
                .ok_or_else(|| crate::error::OpError::Invalid(format!("index {i} beyond {len}")))
        })
        .collect::<OpResult<Vec<Option<usize>>>>()?;
    let zeros =
        crate::value::Const::new(inferred.clone(), crate::value::Data::F32(vec![0.0; len]))?;
    let y = super::shape::scatter(zeros.to_tensor()?, &x, &targets, |_, u| Ok(u.clone()))?;
    let Some(_) = n.opt(2) else {
        return tensor(y);
    };
    let shape = to_usize(&n.konst(2)?.to_i64s()?, "output_shape")?;
    if shape.len() != inferred.len() || shape.iter().zip(&inferred).any(|(s, i)| s < i) {
        return invalid(format!(
            "output_shape {shape:?} is smaller than the unpooled shape {inferred:?}"
        ));
    }
    let extra: Vec<(usize, usize)> = shape
        .iter()
        .zip(&inferred)
        .map(|(s, i)| (0, s - i))
        .collect();
    tensor(y.pad(&extra, aneforge::graph::PadMode::Constant, 0.0)?)
}

/// Max pooling of a 2-D `[N, C, H, W]` input that also returns each maximum's flat index into
/// the input (the spatial part row-major, or column-major with `storage_order` 1; the first
/// maximum in window order wins). One constant-index gather per kernel tap, out-of-range taps
/// reading −∞.
fn max_pool_with_indices(
    n: &Node,
    x: &Tensor,
    window: &Window,
    pads: &[(usize, usize)],
    ceil_mode: bool,
) -> OpResult<Vec<Value>> {
    if x.rank() != 4 || ceil_mode || x.dtype() != DType::F32 {
        return unsupported(format!(
            "the indices output for a {} input of shape {:?}{} (2-D float, floor mode)",
            x.dtype(),
            x.shape(),
            if ceil_mode { " in ceil mode" } else { "" }
        ));
    }
    let column_major = n.attr_i("storage_order", 0) != 0;
    let [batch, channels, h, w] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let out = |i: usize, len: usize| -> OpResult<usize> {
        (len + pads[i].0 + pads[i].1)
            .checked_sub(window.span(i))
            .map(|v| v / window.strides[i] + 1)
            .ok_or_else(|| crate::error::OpError::Invalid("the window exceeds the input".into()))
    };
    let (oh, ow) = (out(0, h)?, out(1, w)?);
    let shape = vec![batch, channels, oh, ow];
    let flat_x = x.reshape(&[-1])?;
    let mut best: Option<(Tensor, Tensor)> = None;
    for kh in 0..window.kernel[0] {
        for kw in 0..window.kernel[1] {
            let mut read = Vec::with_capacity(batch * channels * oh * ow);
            let mut inside = Vec::with_capacity(read.capacity());
            let mut index = Vec::with_capacity(read.capacity());
            for plane in 0..batch * channels {
                for i in 0..oh {
                    for j in 0..ow {
                        let y = (i * window.strides[0] + kh * window.dilations[0]) as i64
                            - pads[0].0 as i64;
                        let z = (j * window.strides[1] + kw * window.dilations[1]) as i64
                            - pads[1].0 as i64;
                        let ok = (0..h as i64).contains(&y) && (0..w as i64).contains(&z);
                        let (y, z) = (y.max(0) as usize, z.max(0) as usize);
                        read.push(if ok { (plane * h + y) * w + z } else { 0 } as i64);
                        inside.push(ok);
                        let spatial = if column_major { z * h + y } else { y * w + z };
                        index.push((plane * h * w + spatial) as i64);
                    }
                }
            }
            let v = flat_x.gather(&Const::ints(shape.clone(), read)?.to_tensor()?, 0)?;
            let inside =
                Const::new(shape.clone(), crate::value::Data::Bool(inside))?.to_tensor()?;
            let v = inside.select(&v, &aneforge::graph::scalar(f32::NEG_INFINITY))?;
            let idx = Const::ints(shape.clone(), index)?.to_tensor()?;
            best = Some(match best {
                None => (v, idx),
                Some((b, bi)) => {
                    let better = v.compare(aneforge::graph::CompareOp::Greater, &b)?;
                    (better.select(&v, &b)?, better.select(&idx, &bi)?)
                }
            });
        }
    }
    let (y, indices) =
        best.ok_or_else(|| crate::error::OpError::Invalid("an empty kernel".into()))?;
    Ok(vec![Value::Tensor(y), Value::Tensor(indices)])
}
