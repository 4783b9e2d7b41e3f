//! Reductions and normalisations: reduce, argmax, softmax, layer_norm, batch_norm, cumsum.

use super::{arity, check_axes, float_only, same};
use crate::graph::op::Op;
use crate::graph::{DType, GraphError, Tensor};

pub(super) fn infer(
    op: &Op,
    name: &'static str,
    srcs: &[Tensor],
) -> Result<(Vec<usize>, DType), GraphError> {
    match op {
        Op::Reduce { axes, keepdims, .. } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            let x = srcs[0].shape();
            check_axes(name, x, axes)?;
            if axes.is_empty() {
                return Err(GraphError::attribute(name, "needs at least one axis"));
            }
            Ok((reduced(x, axes, *keepdims), DType::F32))
        }
        Op::ArgMax { axis, keepdims } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            let x = srcs[0].shape();
            check_axes(name, x, &[*axis])?;
            Ok((reduced(x, &[*axis], *keepdims), DType::I32))
        }
        Op::Softmax { axis } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            check_axes(name, srcs[0].shape(), &[*axis])?;
            Ok(same(&srcs[0]))
        }
        Op::LayerNorm {
            axes,
            eps,
            has_gamma,
            has_beta,
        } => {
            arity(
                name,
                srcs,
                1 + usize::from(*has_gamma) + usize::from(*has_beta),
            )?;
            float_only(name, srcs)?;
            let x = srcs[0].shape();
            check_axes(name, x, axes)?;
            if axes.is_empty() {
                return Err(GraphError::attribute(name, "needs at least one axis"));
            }
            check_eps(name, *eps)?;
            let normalized: Vec<usize> = axes.iter().map(|&a| x[a]).collect();
            for p in &srcs[1..] {
                if p.shape() != normalized.as_slice() {
                    return Err(GraphError::shape(
                        name,
                        &[x, p.shape()],
                        format!("gamma and beta must have shape {normalized:?}"),
                    ));
                }
            }
            Ok(same(&srcs[0]))
        }
        Op::BatchNorm {
            eps,
            has_gamma,
            has_beta,
        } => {
            arity(
                name,
                srcs,
                3 + usize::from(*has_gamma) + usize::from(*has_beta),
            )?;
            float_only(name, srcs)?;
            check_eps(name, *eps)?;
            let x = srcs[0].shape();
            if !(3..=5).contains(&x.len()) {
                return Err(GraphError::shape(
                    name,
                    &[x],
                    "expected [N, C, *spatial] of rank 3 to 5",
                ));
            }
            for p in &srcs[1..] {
                if p.shape() != [x[1]] {
                    return Err(GraphError::shape(
                        name,
                        &[x, p.shape()],
                        format!("mean, variance, gamma and beta must have shape [{}]", x[1]),
                    ));
                }
            }
            Ok(same(&srcs[0]))
        }
        Op::Cumsum { axis, .. } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            check_axes(name, srcs[0].shape(), &[*axis])?;
            Ok(same(&srcs[0]))
        }
        _ => Err(GraphError::attribute(name, "not an reduce op")),
    }
}

fn check_eps(op: &'static str, eps: f32) -> Result<(), GraphError> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(GraphError::attribute(
            op,
            format!("epsilon {eps} must be finite and non-negative"),
        ));
    }
    Ok(())
}

fn reduced(x: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    x.iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}
