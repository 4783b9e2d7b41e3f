//! Program outputs the ANE cannot produce as they stand: outputs that are inputs (`x * 1`),
//! repeated outputs (`x * 1`), constant outputs (`(t − t) + c`, computed from a fed input), and
//! bool outputs (fp16 0/1).

use super::build::indicator;
use super::Cx;
use crate::graph::{DType, Op, Tensor};
use std::collections::HashSet;

/// `outputs`: (name, legalized tensor, original graph dtype).
pub fn fix_outputs(cx: &mut Cx, outputs: Vec<(String, Tensor, DType)>) -> Vec<Tensor> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(outputs.len());
    for (name, t, dtype) in outputs {
        cx.current = format!("output '{name}'");
        let fixed = match fix_one(cx, &name, &t, dtype, &mut seen) {
            Ok(f) => f,
            Err(e) => {
                cx.reject(&t, format!("output '{name}': {e}"));
                t
            }
        };
        seen.insert(fixed.id());
        cx.adopt(&fixed);
        out.push(fixed);
    }
    out
}

fn fix_one(
    cx: &mut Cx,
    name: &str,
    t: &Tensor,
    dtype: DType,
    seen: &mut HashSet<crate::graph::NodeId>,
) -> Result<Tensor, crate::graph::GraphError> {
    if dtype != DType::F32 {
        cx.retyped.push((name.to_string(), dtype));
    }
    if t.dtype() == DType::Bool {
        cx.rewritten(t, format!("bool output '{name}' → fp16 0/1"));
        return indicator(t);
    }
    match t.op() {
        Op::Constant(_) => {
            let Some(fed) = cx.first_input.clone() else {
                cx.reject(
                    t,
                    format!("output '{name}' is a constant and the program has no fed input to compute it from"),
                );
                return Ok(t.clone());
            };
            cx.rewritten(t, format!("constant output '{name}' → (t − t) + c"));
            let axes: Vec<isize> = (0..fed.rank() as isize).collect();
            let mut zero = fed.sub(&fed)?;
            if !axes.is_empty() {
                zero = zero.sum(&axes, true)?;
            }
            let zero = zero.reshape(&vec![1; t.rank()])?;
            zero.add(t)
        }
        Op::Input { .. } | Op::Parameter { .. } => {
            cx.rewritten(t, format!("output '{name}' is an input → x * 1"));
            t.mul_scalar(1.0)
        }
        _ if seen.contains(&t.id()) => {
            cx.rewritten(t, format!("output '{name}' repeats another output → x * 1"));
            t.mul_scalar(1.0)
        }
        _ => Ok(t.clone()),
    }
}
