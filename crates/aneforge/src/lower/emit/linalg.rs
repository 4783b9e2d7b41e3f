//! Emission of matmul, linear and linear_experts.

use super::{boolean, int, ints, Emitter};
use crate::graph::{Op, Tensor};
use crate::lower::LowerError;
use aneforge_mil::{self as mil, Argument, Literal, TensorType};

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
            Op::LinearExperts { experts } => self.linear_experts(node, *experts)?,
            _ => return Err(self.unsupported(node, "not an linalg op")),
        }
        Ok(())
    }

    /// `linear_experts` as MIL: the chosen experts' weight rows `ids·out + (0..out)` gathered
    /// (the CPU engine reads only those rows, expanding blocks of a quantized weight), then one
    /// batched matmul against them. ANE targets never get here: the legalizer computes every
    /// expert instead, since the ANE cannot address weights by a runtime index.
    fn linear_experts(&mut self, node: &Tensor, experts: usize) -> Result<(), LowerError> {
        if self.target.is_ane() {
            return Err(self.unsupported(node, "expert weights addressed at run time"));
        }
        let s = node.srcs();
        let (n, k, out) = (node.shape()[0], node.shape()[1], node.shape()[2]);
        let (kx, inner) = (s[0].shape()[1], s[0].shape()[2]);
        debug_assert_eq!(s[1].shape()[0], experts * out);
        let float = self.mil_dtype(s[0].dtype());
        let i32_ty = |shape: &[usize]| TensorType::new(mil::DType::Int32, shape);
        let ids = self.fresh("expert_ids");
        let args = vec![("x", self.arg(&s[2])), ("shape", ints(&[n, k, 1]))];
        self.push_value(&ids, i32_ty(&[n, k, 1]), "reshape", args);
        let first = self.fresh("expert_first_row");
        let args = vec![("x", Argument::name(&ids)), ("y", int(out))];
        self.push_value(&first, i32_ty(&[n, k, 1]), "mul", args);
        let rows = self.fresh("expert_rows");
        let ramp = Literal::int_tensor(mil::DType::Int32, &[out], (0..out as i64).collect());
        let args = vec![
            ("x", Argument::name(&first)),
            ("y", Argument::Literal(ramp)),
        ];
        self.push_value(&rows, i32_ty(&[n, k, out]), "add", args);
        let weights = self.fresh("expert_weights");
        let args = vec![
            ("x", self.arg(&s[1])),
            ("indices", Argument::name(&rows)),
            ("axis", int(0)),
        ];
        let ty = TensorType::new(float, &[n, k, out, inner]);
        self.push_value(&weights, ty, "gather", args);
        let xr = self.fresh("expert_x");
        let args = vec![("x", self.arg(&s[0])), ("shape", ints(&[n, kx, 1, inner]))];
        self.push_value(
            &xr,
            TensorType::new(float, &[n, kx, 1, inner]),
            "reshape",
            args,
        );
        let prod = self.fresh("expert_products");
        let args = vec![
            ("x", Argument::name(&xr)),
            ("y", Argument::name(&weights)),
            ("transpose_x", boolean(false)),
            ("transpose_y", boolean(true)),
        ];
        self.push_value(
            &prod,
            TensorType::new(float, &[n, k, 1, out]),
            "matmul",
            args,
        );
        let args = vec![("x", Argument::name(&prod)), ("shape", ints(&[n, k, out]))];
        self.push(node, "reshape", args);
        Ok(())
    }
}
