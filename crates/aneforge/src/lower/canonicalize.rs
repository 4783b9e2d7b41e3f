//! Graph-to-graph rewrites run before emission: every node left afterwards maps onto MIL ops
//! one-to-one. MIL requires some operands to be compile-time constants (`linear` weights,
//! `layer_norm` gamma/beta, `batch_norm` statistics); where they are not, the op is expanded into
//! elementwise arithmetic. Target legalisation (ANE walls) adds its own rewrites the same way.

use super::order::topo_order;
use super::{LowerError, ParameterMode};
use crate::graph::nn::causal_additive_mask;
use crate::graph::{self, constant, GraphError, NodeId, Op, Tensor, MAX_RANK};
use std::collections::HashMap;

/// Rewrites the graph reachable from `outputs`; returns the new outputs, in order.
pub fn canonicalize(
    outputs: &[Tensor],
    parameters: ParameterMode,
) -> Result<Vec<Tensor>, LowerError> {
    let mut map: HashMap<NodeId, Tensor> = HashMap::new();
    for node in topo_order(outputs) {
        let srcs: Vec<Tensor> = node
            .srcs()
            .iter()
            .map(|s| map.get(&s.id()).cloned().unwrap_or_else(|| s.clone()))
            .collect();
        let rewritten = rewrite(&node, srcs, parameters).map_err(|e| LowerError::Rewrite {
            op: node.op().name(),
            source: e,
        })?;
        map.insert(node.id(), rewritten);
    }
    Ok(outputs
        .iter()
        .map(|o| map.get(&o.id()).cloned().unwrap_or_else(|| o.clone()))
        .collect())
}

fn is_const(t: &Tensor) -> bool {
    matches!(t.op(), Op::Constant(_))
}

fn rewrite(node: &Tensor, srcs: Vec<Tensor>, params: ParameterMode) -> Result<Tensor, GraphError> {
    let unchanged = srcs.iter().zip(node.srcs()).all(|(a, b)| a == b);
    match node.op() {
        Op::Parameter { init, .. } if params == ParameterMode::Constant => {
            Ok(constant(init.clone()))
        }
        Op::StopGradient => Ok(srcs[0].clone()),
        Op::Linear { has_bias } => linear(&srcs, *has_bias),
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
            let full: Vec<isize> = (0..x.rank())
                .map(|i| {
                    if axes.contains(&i) {
                        x.shape()[i] as isize
                    } else {
                        1
                    }
                })
                .collect();
            let mut out = normed;
            let mut rest = srcs[1..].iter();
            if *has_gamma {
                if let Some(g) = rest.next() {
                    out = out.mul(&g.reshape(&full)?)?;
                }
            }
            if *has_beta {
                if let Some(b) = rest.next() {
                    out = out.add(&b.reshape(&full)?)?;
                }
            }
            Ok(out)
        }
        Op::BatchNorm { eps } if !srcs[1..].iter().all(is_const) => {
            let x = &srcs[0];
            let mut per_channel = vec![x.shape()[1] as isize];
            per_channel.extend(std::iter::repeat_n(1, x.rank() - 2));
            let c = |t: &Tensor| t.reshape(&per_channel);
            let inv = c(&srcs[2])?.add_scalar(*eps)?.rsqrt()?;
            x.sub(&c(&srcs[1])?)?
                .mul(&inv)?
                .mul(&c(&srcs[3])?)?
                .add(&c(&srcs[4])?)
        }
        Op::Sdpa {
            scale,
            causal,
            has_mask,
        } if *causal || scale.is_some() => sdpa(&srcs, *scale, *causal, *has_mask),
        _ if unchanged => Ok(node.clone()),
        op => Tensor::from_op(op.clone(), srcs),
    }
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
            Some(m) if m.dtype() == graph::DType::Bool => {
                let zero = graph::scalar(0.0);
                let masked = graph::scalar(graph::nn::MASKED);
                m.select(&zero, &masked)?.add(&c)?
            }
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
