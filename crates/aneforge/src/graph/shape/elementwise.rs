//! Elementwise ops: unary functions, clip, binary arithmetic and comparisons (NumPy broadcasting), select, cast, stop_gradient and barrier.

use super::{arity, broadcast, float_only, same};
use crate::graph::op::Op;
use crate::graph::{DType, GraphError, Tensor};

pub(super) fn infer(
    op: &Op,
    name: &'static str,
    srcs: &[Tensor],
) -> Result<(Vec<usize>, DType), GraphError> {
    match op {
        Op::Unary(_) | Op::LeakyRelu { .. } | Op::Elu { .. } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            Ok(same(&srcs[0]))
        }
        Op::Clip { min, max } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            if min.is_nan() || max.is_nan() || min > max {
                return Err(GraphError::attribute(
                    name,
                    format!("bounds [{min}, {max}] are not an interval"),
                ));
            }
            Ok(same(&srcs[0]))
        }
        Op::FakeQuant { scale } => {
            arity(name, srcs, 1)?;
            float_only(name, srcs)?;
            if !(scale.is_finite() && *scale > 0.0) {
                return Err(GraphError::attribute(
                    name,
                    format!("scale {scale} is not a positive finite number"),
                ));
            }
            Ok(same(&srcs[0]))
        }
        Op::Binary(b) => {
            arity(name, srcs, 2)?;
            let dtypes = [srcs[0].dtype(), srcs[1].dtype()];
            let float_op = matches!(b, crate::graph::BinaryOp::Div | crate::graph::BinaryOp::Pow);
            if dtypes[0] != dtypes[1]
                || dtypes[0] == DType::Bool
                || dtypes[0].is_storage()
                || (float_op && dtypes[0] != DType::F32)
            {
                let expected = if float_op { "f32" } else { "f32 or i32" };
                return Err(GraphError::dtype(
                    name,
                    &dtypes,
                    format!("operands must both be {expected}"),
                ));
            }
            Ok((
                broadcast(name, srcs[0].shape(), srcs[1].shape())?,
                dtypes[0],
            ))
        }
        Op::Compare(_) => {
            arity(name, srcs, 2)?;
            let dtypes = [srcs[0].dtype(), srcs[1].dtype()];
            if dtypes[0] != dtypes[1] || dtypes[0] == DType::Bool || dtypes[0].is_storage() {
                return Err(GraphError::dtype(
                    name,
                    &dtypes,
                    "operands must both be f32 or both i32",
                ));
            }
            Ok((
                broadcast(name, srcs[0].shape(), srcs[1].shape())?,
                DType::Bool,
            ))
        }
        Op::Select => {
            arity(name, srcs, 3)?;
            let dtypes = [srcs[0].dtype(), srcs[1].dtype(), srcs[2].dtype()];
            if dtypes[0] != DType::Bool || dtypes[1] != dtypes[2] {
                return Err(GraphError::dtype(
                    name,
                    &dtypes,
                    "expected a bool condition and two values of one dtype",
                ));
            }
            let ab = broadcast(name, srcs[1].shape(), srcs[2].shape())?;
            let shape = broadcast(name, srcs[0].shape(), &ab).map_err(|_| {
                GraphError::shape(
                    name,
                    &[srcs[0].shape(), srcs[1].shape(), srcs[2].shape()],
                    "shapes do not broadcast",
                )
            })?;
            Ok((shape, dtypes[1]))
        }
        Op::Cast { dtype } => {
            arity(name, srcs, 1)?;
            Ok((srcs[0].shape().to_vec(), *dtype))
        }
        Op::StopGradient => {
            arity(name, srcs, 1)?;
            Ok(same(&srcs[0]))
        }
        Op::Barrier => match srcs.first() {
            Some(x) => Ok(same(x)),
            None => Err(GraphError::attribute(
                name,
                "expected the value it passes on, then the values it waits for",
            )),
        },
        _ => Err(GraphError::attribute(name, "not an elementwise op")),
    }
}
