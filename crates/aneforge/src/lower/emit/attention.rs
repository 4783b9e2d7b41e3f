//! Emission of scaled dot-product attention.

use super::Emitter;
use crate::graph::{Op, Tensor};
use crate::lower::LowerError;

impl Emitter<'_> {
    pub(super) fn attention(&mut self, node: &Tensor) -> Result<(), LowerError> {
        let s = node.srcs();
        let x = || self.arg(&s[0]);
        match node.op() {
            Op::Sdpa { has_mask, .. } => {
                let mut args = vec![
                    ("query", x()),
                    ("key", self.arg(&s[1])),
                    ("value", self.arg(&s[2])),
                ];
                if *has_mask {
                    args.push(("attn_mask", self.arg(&s[3])));
                }
                self.push(node, "scaled_dot_product_attention", args)
            }
            _ => return Err(self.unsupported(node, "not an attention op")),
        }
        Ok(())
    }
}
