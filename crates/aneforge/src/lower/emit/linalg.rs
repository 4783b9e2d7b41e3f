//! Emission of matmul and linear.

use super::{boolean, Emitter};
use crate::graph::{Op, Tensor};
use crate::lower::LowerError;

impl Emitter<'_> {
    pub(super) fn linalg(&mut self, node: &Tensor) -> Result<(), LowerError> {
        let s = node.srcs();
        let x = || self.arg(&s[0]);
        match node.op() {
            Op::MatMul {
                transpose_a,
                transpose_b,
            } => {
                let args = vec![
                    ("x", x()),
                    ("y", self.arg(&s[1])),
                    ("transpose_x", boolean(*transpose_a)),
                    ("transpose_y", boolean(*transpose_b)),
                ];
                self.push(node, "matmul", args)
            }
            Op::Linear { .. } => {
                let mut args = vec![("x", x()), ("weight", self.arg(&s[1]))];
                if let Some(b) = s.get(2) {
                    args.push(("bias", self.arg(b)));
                }
                self.push(node, "linear", args)
            }
            _ => return Err(self.unsupported(node, "not an linalg op")),
        }
        Ok(())
    }
}
