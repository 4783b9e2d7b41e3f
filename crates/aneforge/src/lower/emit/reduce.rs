//! Emission of reductions and normalisations: reduce, argmax, softmax, layer_norm, batch_norm, cumsum.

use super::{boolean, int, ints, Emitter};
use crate::graph::{Op, Tensor};
use crate::lower::LowerError;

impl Emitter<'_> {
    pub(super) fn reduce(&mut self, node: &Tensor) -> Result<(), LowerError> {
        let s = node.srcs();
        let x = || self.arg(&s[0]);
        match node.op() {
            Op::Reduce { op, axes, keepdims } => {
                let args = vec![
                    ("x", x()),
                    ("axes", ints(axes)),
                    ("keep_dims", boolean(*keepdims)),
                ];
                self.push(node, op.name(), args)
            }
            Op::ArgMax { axis, keepdims } => {
                let args = vec![
                    ("x", x()),
                    ("axis", int(*axis)),
                    ("keep_dims", boolean(*keepdims)),
                ];
                self.push(node, "reduce_argmax", args)
            }
            Op::Softmax { axis } => {
                let args = vec![("x", x()), ("axis", int(*axis))];
                self.push(node, "softmax", args)
            }
            Op::LayerNorm {
                axes,
                eps,
                has_gamma,
                has_beta,
            } => {
                let mut args = vec![("x", x()), ("axes", ints(axes))];
                let mut rest = s[1..].iter();
                if *has_gamma {
                    args.extend(rest.next().map(|g| ("gamma", self.arg(g))));
                }
                if *has_beta {
                    args.extend(rest.next().map(|b| ("beta", self.arg(b))));
                }
                args.push(("epsilon", self.float_lit(*eps)));
                self.push(node, "layer_norm", args)
            }
            Op::BatchNorm {
                eps,
                has_gamma,
                has_beta,
            } => {
                let mut args = vec![
                    ("x", x()),
                    ("mean", self.arg(&s[1])),
                    ("variance", self.arg(&s[2])),
                ];
                let mut rest = s[3..].iter();
                if *has_gamma {
                    args.extend(rest.next().map(|g| ("gamma", self.arg(g))));
                }
                if *has_beta {
                    args.extend(rest.next().map(|b| ("beta", self.arg(b))));
                }
                args.push(("epsilon", self.float_lit(*eps)));
                self.push(node, "batch_norm", args)
            }
            Op::Cumsum {
                axis,
                exclusive,
                reverse,
            } => {
                let args = vec![
                    ("x", x()),
                    ("axis", int(*axis)),
                    ("exclusive", boolean(*exclusive)),
                    ("reverse", boolean(*reverse)),
                ];
                self.push(node, "cumsum", args)
            }
            _ => return Err(self.unsupported(node, "not an reduce op")),
        }
        Ok(())
    }
}
