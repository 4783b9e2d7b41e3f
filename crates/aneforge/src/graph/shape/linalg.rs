//! Matrix products: matmul (batch axes broadcast) and linear.

use super::{arity, broadcast, float_only};
use crate::graph::op::Op;
use crate::graph::{DType, GraphError, Tensor};

pub(super) fn infer(
    op: &Op,
    name: &'static str,
    srcs: &[Tensor],
) -> Result<(Vec<usize>, DType), GraphError> {
    match op {
        Op::MatMul {
            transpose_a,
            transpose_b,
        } => {
            arity(name, srcs, 2)?;
            float_only(name, srcs)?;
            let (a, b) = (srcs[0].shape(), srcs[1].shape());
            if a.len() < 2 || b.len() < 2 {
                return Err(GraphError::shape(
                    name,
                    &[a, b],
                    "operands need rank 2 or more",
                ));
            }
            let (m, ka) = last_two(a, *transpose_a);
            let (kb, n) = last_two(b, *transpose_b);
            if ka != kb {
                return Err(GraphError::shape(
                    name,
                    &[a, b],
                    format!("contraction sizes differ: {ka} vs {kb}"),
                ));
            }
            let mut shape = broadcast(name, &a[..a.len() - 2], &b[..b.len() - 2])?;
            shape.extend([m, n]);
            Ok((shape, DType::F32))
        }
        Op::Linear { has_bias } => {
            arity(name, srcs, 2 + usize::from(*has_bias))?;
            float_only(name, srcs)?;
            let (x, w) = (srcs[0].shape(), srcs[1].shape());
            if x.is_empty() || w.len() != 2 || x[x.len() - 1] != w[1] {
                return Err(GraphError::shape(
                    name,
                    &[x, w],
                    "expected x[..., in] and weight[out, in]",
                ));
            }
            if *has_bias && srcs[2].shape() != [w[0]] {
                return Err(GraphError::shape(
                    name,
                    &[x, w, srcs[2].shape()],
                    format!("bias must have shape [{}]", w[0]),
                ));
            }
            let mut shape = x.to_vec();
            *shape.last_mut().expect("rank checked above") = w[0];
            Ok((shape, DType::F32))
        }
        Op::LinearExperts { experts } => {
            arity(name, srcs, 3)?;
            let (x, w, ids) = (srcs[0].shape(), srcs[1].shape(), srcs[2].shape());
            let all = [x, w, ids];
            if srcs[0].dtype() != DType::F32 || srcs[1].dtype() != DType::F32 {
                return Err(GraphError::shape(name, &all, "x and weight must be f32"));
            }
            if srcs[2].dtype() != DType::I32 {
                return Err(GraphError::shape(name, &all, "ids must be i32"));
            }
            if x.len() != 3 || w.len() != 2 || ids.len() != 2 {
                return Err(GraphError::shape(
                    name,
                    &all,
                    "expected x[N, K or 1, in], weight[experts·out, in] and ids[N, K]",
                ));
            }
            let (n, k) = (ids[0], ids[1]);
            if *experts == 0 || w[0] % experts != 0 {
                return Err(GraphError::shape(
                    name,
                    &all,
                    format!("{} weight rows do not split into {experts} experts", w[0]),
                ));
            }
            if x[0] != n || (x[1] != k && x[1] != 1) || x[2] != w[1] {
                return Err(GraphError::shape(
                    name,
                    &all,
                    format!("x must be [{n}, {k} or 1, {}]", w[1]),
                ));
            }
            Ok((vec![n, k, w[0] / experts], DType::F32))
        }
        _ => Err(GraphError::attribute(name, "not an linalg op")),
    }
}

fn last_two(s: &[usize], transpose: bool) -> (usize, usize) {
    let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
    if transpose {
        (c, r)
    } else {
        (r, c)
    }
}
