//! Emission of gather.

use super::{int, Emitter};
use crate::graph::{Op, Tensor};
use crate::lower::LowerError;

impl Emitter<'_> {
    pub(super) fn gather(&mut self, node: &Tensor) -> Result<(), LowerError> {
        let s = node.srcs();
        let x = || self.arg(&s[0]);
        match node.op() {
            Op::Gather { axis } => {
                if self.target.is_ane() && !matches!(s[1].op(), Op::Constant(_)) {
                    return Err(self.unsupported(
                        node,
                        "the indices are data-dependent (gather them on the host or use the CPU target)",
                    ));
                }
                let args = vec![
                    ("x", x()),
                    ("indices", self.arg(&s[1])),
                    ("axis", int(*axis)),
                ];
                self.push(node, "gather", args)
            }
            _ => return Err(self.unsupported(node, "not an gather op")),
        }
        Ok(())
    }
}
