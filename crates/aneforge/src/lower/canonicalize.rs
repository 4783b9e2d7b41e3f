//! Graph-to-graph rewrites run before emission: every node left afterwards maps onto MIL ops
//! one-to-one. The pass is single: nodes a rule builds must already be canonical.
//! MIL requires some operands to be compile-time constants (`linear` weights,
//! `layer_norm` gamma/beta, `batch_norm` statistics); where they are not, the op is expanded into
//! elementwise arithmetic. Target legalisation (ANE walls) adds its own rewrites the same way.

use super::{LowerError, ParameterMode};
use crate::graph::nn::causal_additive_mask;
use crate::graph::{self, constant, rewrite_graph, GraphError, NodeId, Op, Tensor, MAX_RANK};
use std::collections::HashMap;

/// Rewrites the graph reachable from `outputs`; returns the new outputs, in order.
pub fn canonicalize(
    outputs: &[Tensor],
    parameters: ParameterMode,
) -> Result<Vec<Tensor>, LowerError> {
    let fail = |node: &Tensor, source| LowerError::Rewrite {
        op: node.op().name(),
        source,
    };
    // readers of each node in the graph as given (a graph output counts as one more), so that a
    // conv is only folded into the one op that reads it
    let mut readers: HashMap<NodeId, usize> = HashMap::new();
    for node in graph::topo_order(outputs) {
        for src in node.srcs() {
            *readers.entry(src.id()).or_default() += 1;
        }
    }
    for o in outputs {
        *readers.entry(o.id()).or_default() += 1;
    }
    let sole = |t: &Tensor| readers.get(&t.id()) == Some(&1);
    rewrite_graph(
        outputs,
        |node, srcs| rewrite(node, srcs, parameters, &sole).map_err(|e| fail(node, e)),
        fail,
    )
}

fn is_const(t: &Tensor) -> bool {
    matches!(t.op(), Op::Constant(_))
}

/// `sole(t)`: the original node `t` has one reader.
fn rewrite(
    node: &Tensor,
    srcs: &[Tensor],
    params: ParameterMode,
    sole: &dyn Fn(&Tensor) -> bool,
) -> Result<Option<Tensor>, GraphError> {
    let out = match node.op() {
        Op::Parameter { init, .. } if params == ParameterMode::Constant => constant(init.clone()),
        Op::StopGradient => srcs[0].clone(),
        // MIL `select` takes its output shape from `a` and `b` alone (coremltools' type
        // inference ignores `cond`), so widen `a` when only `cond` carries the full shape.
        Op::Select
            if graph::shape::broadcast("select", srcs[1].shape(), srcs[2].shape())?
                != node.shape() =>
        {
            let a = srcs[1].broadcast_to(node.shape())?;
            srcs[0].select(&a, &srcs[2])?
        }
        Op::Linear { has_bias } => linear(srcs, *has_bias)?,
        // Core ML rejects dilations on a conv whose weight is not a constant (coremltools:
        // "Convolution with dynamic weights does not support dilations"), so the weight is
        // dilated in the program instead: zeros between taps, dilation 1.
        Op::Conv { attrs, .. } if !is_const(&srcs[1]) && attrs.dilations.iter().any(|&d| d > 1) => {
            let weight = dilate_weight(&srcs[1], &attrs.dilations)?;
            let attrs = graph::ConvAttrs {
                dilations: vec![1; attrs.dilations.len()],
                ..attrs.clone()
            };
            srcs[0].conv(&weight, srcs.get(2), attrs)?
        }
        Op::Conv { attrs, .. } => match folded_pad(&srcs[0], attrs, &srcs[1]) {
            Some((x, attrs)) => x.conv(&srcs[1], srcs.get(2), attrs)?,
            None => return Ok(None),
        },
        Op::LayerNorm {
            axes,
            eps,
            has_gamma,
            has_beta,
        } if !srcs[1..].iter().all(is_const) => {
            let x = &srcs[0];
            let normed = Tensor::from_op(
                Op::LayerNorm {
                    axes: axes.clone(),
                    eps: *eps,
                    has_gamma: false,
                    has_beta: false,
                },
                vec![x.clone()],
            )?;
            normed.layer_norm_affine(axes, *has_gamma, *has_beta, &srcs[1..])?
        }
        Op::BatchNorm {
            eps,
            has_gamma,
            has_beta,
        } if srcs[1..].iter().all(is_const) && sole(&node.srcs()[0]) => {
            match conv_with_affine(
                &srcs[0],
                batch_norm_affine(srcs, *eps, *has_gamma, *has_beta),
            )? {
                Some(folded) => folded,
                None => return Ok(None),
            }
        }
        Op::Binary(op) => match binary_affine(node, *op, srcs, sole)? {
            Some(folded) => folded,
            None => return Ok(None),
        },
        Op::BatchNorm {
            eps,
            has_gamma,
            has_beta,
        } if !srcs[1..].iter().all(is_const) => {
            let x = &srcs[0];
            let mut per_channel = vec![x.shape()[1] as isize];
            per_channel.extend(std::iter::repeat_n(1, x.rank() - 2));
            let c = |t: &Tensor| t.reshape(&per_channel);
            let inv = c(&srcs[2])?.add_scalar(*eps)?.rsqrt()?;
            let mut out = x.sub(&c(&srcs[1])?)?.mul(&inv)?;
            let mut rest = srcs[3..].iter();
            if *has_gamma {
                if let Some(g) = rest.next() {
                    out = out.mul(&c(g)?)?;
                }
            }
            if *has_beta {
                if let Some(b) = rest.next() {
                    out = out.add(&c(b)?)?;
                }
            }
            out
        }
        Op::Sdpa {
            scale,
            causal,
            has_mask,
        } if *causal || scale.is_some() => sdpa(srcs, *scale, *causal, *has_mask)?,
        _ => return Ok(None),
    };
    Ok(Some(out))
}

fn f32s(t: &Tensor) -> Option<&[f32]> {
    t.constant_value()
        .filter(|v| v.dtype() == graph::DType::F32)
        .and_then(|v| v.as_f32())
}

/// A constant f32 operand of a binary op over a conv's `[N, C, *S]` output that varies along
/// the channel axis only: its value per channel (a scalar repeated).
fn per_channel(t: &Tensor, rank: usize, channels: usize) -> Option<Vec<f64>> {
    let v = f32s(t)?;
    let shape = t.shape();
    if shape.len() > rank || v.is_empty() {
        return None;
    }
    let lead = rank - shape.len();
    let along = shape
        .iter()
        .enumerate()
        .all(|(i, &d)| d == 1 || (i + lead == 1 && d == channels));
    if !along {
        return None;
    }
    Some(if v.len() == channels {
        v.iter().map(|&x| f64::from(x)).collect()
    } else {
        vec![f64::from(v[0]); channels]
    })
}

/// A per-channel affine map `y[c] = x[c]·scale[c] + shift[c]` after a conv with constant f32
/// weights (a batch norm with constant statistics, a product or a sum by a per-channel
/// constant), folded into the conv: each output channel's weights times `scale[c]`, its bias
/// `b[c]·scale[c] + shift[c]`, computed in f64. The map then costs nothing at run time and the
/// conv's output needs no per-channel pass (ONNX exports keep Conv → BatchNormalization apart;
/// PyTorch's `fuse_conv_bn_eval` and ONNX Runtime fold it the same way). `None` unless `conv`
/// is such a conv and `affine` (given the channel count) gives the map.
fn conv_with_affine(
    conv: &Tensor,
    affine: impl FnOnce(usize) -> Option<(Vec<f64>, Vec<f64>)>,
) -> Result<Option<Tensor>, GraphError> {
    let Op::Conv { attrs, has_bias } = conv.op() else {
        return Ok(None);
    };
    let inputs = conv.srcs();
    let Some(w) = f32s(&inputs[1]) else {
        return Ok(None);
    };
    let channels = inputs[1].shape()[0];
    let bias = if *has_bias {
        f32s(&inputs[2])
    } else {
        Some(&[][..])
    };
    let Some(bias) = bias.filter(|b| !*has_bias || b.len() == channels) else {
        return Ok(None);
    };
    if conv.dtype() != graph::DType::F32 || channels == 0 {
        return Ok(None);
    }
    let Some((scale, shift)) = affine(channels) else {
        return Ok(None);
    };
    let per = w.len() / channels;
    let weight: Vec<f32> = w
        .iter()
        .enumerate()
        .map(|(i, &x)| (f64::from(x) * scale[i / per]) as f32)
        .collect();
    let bias: Vec<f32> = (0..channels)
        .map(|c| (bias.get(c).map_or(0.0, |&b| f64::from(b)) * scale[c] + shift[c]) as f32)
        .collect();
    let weight = constant(graph::HostArray::from_f32(inputs[1].shape(), weight)?);
    let bias = constant(graph::HostArray::from_f32(&[channels], bias)?);
    Ok(Some(inputs[0].conv(&weight, Some(&bias), attrs.clone())?))
}

/// The batch norm whose sources are `srcs` as a per-channel affine map: scale γ/√(var + ε),
/// shift β − mean·scale.
fn batch_norm_affine(
    srcs: &[Tensor],
    eps: f32,
    has_gamma: bool,
    has_beta: bool,
) -> impl FnOnce(usize) -> Option<(Vec<f64>, Vec<f64>)> + '_ {
    move |channels| {
        fn vector(t: &Tensor, n: usize) -> Option<&[f32]> {
            f32s(t).filter(|v| v.len() == n)
        }
        let (mean, var) = (vector(&srcs[1], channels)?, vector(&srcs[2], channels)?);
        let mut rest = srcs[3..].iter();
        let mut take = |present: bool| match present {
            true => rest.next().and_then(|t| vector(t, channels)).map(Some),
            false => Some(None),
        };
        let (gamma, beta) = (take(has_gamma)?, take(has_beta)?);
        let at = |v: Option<&[f32]>, c: usize, absent: f64| v.map_or(absent, |v| f64::from(v[c]));
        let scale: Vec<f64> = (0..channels)
            .map(|c| at(gamma, c, 1.0) / (f64::from(var[c]) + f64::from(eps)).sqrt())
            .collect();
        let shift = (0..channels)
            .map(|c| at(beta, c, 0.0) - f64::from(mean[c]) * scale[c])
            .collect();
        Some((scale, shift))
    }
}

/// A product or sum of a conv's output (read by nothing else) and a per-channel constant, in
/// either operand order, folded into the conv; `None` for any other binary op or operand.
fn binary_affine(
    node: &Tensor,
    op: graph::BinaryOp,
    srcs: &[Tensor],
    sole: &dyn Fn(&Tensor) -> bool,
) -> Result<Option<Tensor>, GraphError> {
    if !matches!(op, graph::BinaryOp::Mul | graph::BinaryOp::Add) {
        return Ok(None);
    }
    let original = node.srcs();
    for (i, j) in [(0, 1), (1, 0)] {
        let (conv, k) = (&srcs[i], &srcs[j]);
        if !matches!(conv.op(), Op::Conv { .. })
            || conv.shape() != node.shape()
            || !sole(&original[i])
        {
            continue;
        }
        let folded = conv_with_affine(conv, |channels| {
            let v = per_channel(k, conv.rank(), channels)?;
            Some(match op {
                graph::BinaryOp::Mul => (v, vec![0.0; channels]),
                _ => (vec![1.0; channels], v),
            })
        })?;
        if folded.is_some() {
            return Ok(folded);
        }
    }
    Ok(None)
}

/// A conv input that is a zero-constant pad of its spatial axes only becomes the conv's own
/// padding: ONNX exports of "same" padding (EfficientNet, TensorFlow models) pad before the conv,
/// and the padded copy is then never made. Kept only while each side's padding stays within the
/// kernel's reach, `(k − 1)·d`, so every output still reads some input. Returns the pad's input
/// and the conv's attributes with the pads added.
fn folded_pad(
    x: &Tensor,
    attrs: &graph::ConvAttrs,
    weight: &Tensor,
) -> Option<(Tensor, graph::ConvAttrs)> {
    let Op::Pad {
        pads,
        mode: graph::PadMode::Constant,
        value,
    } = x.op()
    else {
        return None;
    };
    let (batch_channel, spatial) = pads.split_at(2.min(pads.len()));
    if value.to_bits() != 0
        || batch_channel.iter().any(|&p| p != (0, 0))
        || spatial.len() != attrs.pads.len()
    {
        return None;
    }
    let kernel = weight.shape().get(2..)?;
    let mut pads = Vec::with_capacity(spatial.len());
    for (((&(a, b), &(c, d)), &k), &dl) in spatial
        .iter()
        .zip(&attrs.pads)
        .zip(kernel)
        .zip(&attrs.dilations)
    {
        let reach = k.checked_sub(1)? * dl;
        let (before, after) = (a + c, b + d);
        if before > reach || after > reach {
            return None;
        }
        pads.push((before, after));
    }
    let attrs = graph::ConvAttrs {
        pads,
        ..attrs.clone()
    };
    Some((x.srcs()[0].clone(), attrs))
}

/// `[Cout, Cin/g, k…]` → `[Cout, Cin/g, (k−1)·d+1 …]` with `d − 1` zeros between taps.
fn dilate_weight(w: &Tensor, dilations: &[usize]) -> Result<Tensor, GraphError> {
    let mut w = w.clone();
    for (i, &d) in dilations.iter().enumerate() {
        let axis = 2 + i;
        let k = w.shape()[axis];
        if d <= 1 || k <= 1 {
            continue;
        }
        let mut gap_shape = w.shape().to_vec();
        gap_shape.insert(axis + 1, d - 1);
        let gap = graph::full(&gap_shape, 0.0)?;
        let taps = w.expand_dims(&[axis as isize + 1])?;
        let spread = graph::concat(&[taps, gap], axis as isize + 1)?;
        let mut flat: Vec<isize> = w.shape().iter().map(|&n| n as isize).collect();
        flat[axis] = (k * d) as isize;
        w = spread
            .reshape(&flat)?
            .narrow(axis as isize, 0, (k - 1) * d + 1)?;
    }
    Ok(w)
}

/// MIL `linear` takes constant weights and an input of rank 1 to 3.
fn linear(srcs: &[Tensor], has_bias: bool) -> Result<Tensor, GraphError> {
    let (x, w) = (&srcs[0], &srcs[1]);
    let bias = srcs.get(2).filter(|_| has_bias);
    let native = is_const(w) && bias.is_none_or(is_const);
    let lead: Vec<isize> = x.shape()[..x.rank() - 1]
        .iter()
        .map(|&d| d as isize)
        .collect();
    let out_shape: Vec<isize> = lead
        .iter()
        .copied()
        .chain([w.shape()[0] as isize])
        .collect();
    if native {
        let op = Op::Linear { has_bias };
        if x.rank() <= 3 {
            return Tensor::from_op(op, srcs.to_vec());
        }
        let flat = x.reshape(&[-1, x.shape()[x.rank() - 1] as isize])?;
        let mut s = vec![flat, w.clone()];
        s.extend(bias.cloned());
        return Tensor::from_op(op, s)?.reshape(&out_shape);
    }
    let x2 = if x.rank() == 1 {
        x.expand_dims(&[0])?
    } else {
        x.clone()
    };
    let mut y = x2.matmul_t(w, false, true)?;
    if let Some(b) = bias {
        y = y.add(b)?;
    }
    y.reshape(&out_shape)
}

/// Leaves MIL's `scaled_dot_product_attention` (scale `1/sqrt(E)`, additive or bool mask): a custom
/// scale is folded into `q`, the causal constraint becomes an additive constant mask.
fn sdpa(
    srcs: &[Tensor],
    scale: Option<f32>,
    causal: bool,
    has_mask: bool,
) -> Result<Tensor, GraphError> {
    let (q, k, v) = (&srcs[0], &srcs[1], &srcs[2]);
    let r = q.rank();
    let e = q.shape()[r - 1];
    let native_scale = 1.0 / (e as f64).sqrt();
    let q = match scale {
        Some(s) if (f64::from(s) - native_scale).abs() > 1e-7 * native_scale => {
            q.mul_scalar((f64::from(s) / native_scale) as f32)?
        }
        _ => q.clone(),
    };
    let mut mask = if has_mask { srcs.get(3).cloned() } else { None };
    if causal {
        let (l, s) = (q.shape()[r - 2], k.shape()[r - 2]);
        let c = causal_additive_mask(l, s)?;
        mask = Some(match mask {
            None => c,
            Some(m) if m.dtype() == graph::DType::Bool => m
                .cast(graph::DType::F32)?
                .sub_scalar(1.0)?
                .mul_scalar(-graph::nn::MASKED)?
                .add(&c)?,
            Some(m) => m.add(&c)?,
        });
    }
    debug_assert!(q.rank() <= MAX_RANK);
    let mut s = vec![q, k.clone(), v.clone()];
    s.extend(mask.clone());
    Tensor::from_op(
        Op::Sdpa {
            scale: None,
            causal: false,
            has_mask: mask.is_some(),
        },
        s,
    )
}
