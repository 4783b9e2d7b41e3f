//! Graph-to-graph rewrites run before emission: every node left afterwards maps onto MIL ops
//! one-to-one. The pass is single: nodes a rule builds must already be canonical.
//! MIL requires some operands to be compile-time constants (`linear` weights,
//! `layer_norm` gamma/beta, `batch_norm` statistics); where they are not, the op is expanded into
//! elementwise arithmetic. Target legalisation (ANE walls) adds its own rewrites the same way.

use super::{LowerError, ParameterMode};
use crate::graph::nn::causal_additive_mask;
use crate::graph::{self, constant, rewrite_graph, GraphError, Op, Tensor, MAX_RANK};

/// Rewrites the graph reachable from `outputs`; returns the new outputs, in order.
pub fn canonicalize(
    outputs: &[Tensor],
    parameters: ParameterMode,
) -> Result<Vec<Tensor>, LowerError> {
    let fail = |node: &Tensor, source| LowerError::Rewrite {
        op: node.op().name(),
        source,
    };
    rewrite_graph(
        outputs,
        |node, srcs| rewrite(node, srcs, parameters).map_err(|e| fail(node, e)),
        fail,
    )
}

fn is_const(t: &Tensor) -> bool {
    matches!(t.op(), Op::Constant(_))
}

fn rewrite(
    node: &Tensor,
    srcs: &[Tensor],
    params: ParameterMode,
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
