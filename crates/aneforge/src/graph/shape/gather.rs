//! Gather along an axis.

use super::{arity, check_axes};
use crate::graph::op::Op;
use crate::graph::{DType, GraphError, Tensor};

pub(super) fn infer(
    op: &Op,
    name: &'static str,
    srcs: &[Tensor],
) -> Result<(Vec<usize>, DType), GraphError> {
    match op {
        Op::Gather { axis } => {
            arity(name, srcs, 2)?;
            let (x, idx) = (srcs[0].shape(), srcs[1].shape());
            if srcs[1].dtype() != DType::I32 {
                return Err(GraphError::dtype(
                    name,
                    &[srcs[0].dtype(), srcs[1].dtype()],
                    "indices must be i32",
                ));
            }
            check_axes(name, x, &[*axis])?;
            let mut out = x[..*axis].to_vec();
            out.extend_from_slice(idx);
            out.extend_from_slice(&x[axis + 1..]);
            Ok((out, srcs[0].dtype()))
        }
        _ => Err(GraphError::attribute(name, "not an gather op")),
    }
}
