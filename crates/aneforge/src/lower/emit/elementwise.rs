//! Emission of elementwise ops: unary functions, clip, activations with a parameter, binary arithmetic, comparisons, select, cast, stop_gradient, barrier and fake_quant.

use super::{string, Emitter};
use crate::graph::{BinaryOp, CompareOp, Op, Tensor, UnaryOp};
use crate::lower::LowerError;
use aneforge_mil::{self as mil, Argument, TensorType};

impl Emitter<'_> {
    pub(super) fn elementwise(&mut self, node: &Tensor) -> Result<(), LowerError> {
        let s = node.srcs();
        let x = || self.arg(&s[0]);
        match node.op() {
            Op::Unary(u) => self.unary(node, *u),
            Op::Clip { min, max } => {
                let args = vec![
                    ("x", x()),
                    ("alpha", self.float_lit(*min)),
                    ("beta", self.float_lit(*max)),
                ];
                self.push(node, "clip", args)
            }
            Op::LeakyRelu { alpha } => {
                let args = vec![("x", x()), ("alpha", self.float_lit(*alpha))];
                self.push(node, "leaky_relu", args)
            }
            Op::Elu { alpha } => {
                let args = vec![("x", x()), ("alpha", self.float_lit(*alpha))];
                self.push(node, "elu", args)
            }
            Op::Binary(b) => {
                let op = match b {
                    BinaryOp::Add => "add",
                    BinaryOp::Sub => "sub",
                    BinaryOp::Mul => "mul",
                    BinaryOp::Div => "real_div",
                    BinaryOp::Pow => "pow",
                    BinaryOp::Maximum => "maximum",
                    BinaryOp::Minimum => "minimum",
                };
                let args = vec![("x", x()), ("y", self.arg(&s[1]))];
                self.push(node, op, args)
            }
            Op::Compare(c) => {
                let op = match c {
                    CompareOp::Equal => "equal",
                    CompareOp::NotEqual => "not_equal",
                    CompareOp::Less => "less",
                    CompareOp::LessEqual => "less_equal",
                    CompareOp::Greater => "greater",
                    CompareOp::GreaterEqual => "greater_equal",
                };
                let args = vec![("x", x()), ("y", self.arg(&s[1]))];
                self.push(node, op, args)
            }
            Op::Select => {
                let args = vec![
                    ("cond", x()),
                    ("a", self.arg(&s[1])),
                    ("b", self.arg(&s[2])),
                ];
                self.push(node, "select", args)
            }
            Op::Cast { dtype } => {
                let to = self.mil_dtype(*dtype);
                if to == self.mil_dtype(s[0].dtype()) {
                    let args = vec![("x", x())];
                    self.push(node, "identity", args)
                } else {
                    let args = vec![("x", x()), ("dtype", string(to.name()))];
                    self.push(node, "cast", args)
                }
            }
            Op::StopGradient => {
                let args = vec![("x", x())];
                self.push(node, "identity", args)
            }
            // MIL has no ordering edge: the program keeps the graph's topological order, in
            // which the barrier follows what it waits for, and the CPU engine runs statements
            // in program order
            Op::Barrier => {
                let args = vec![("x", x())];
                self.push(node, "identity", args)
            }
            Op::FakeQuant { scale } => {
                // iOS17 `quantize` / `dequantize`: a scalar scale of the input's float type and
                // no zero point (symmetric), so neither takes an `axis`.
                let stored = self.consts.float_value(*scale);
                if !(stored.is_finite() && stored > 0.0) {
                    return Err(self.unsupported(
                        node,
                        &format!(
                            "scale {scale} is not a positive finite {}",
                            self.float.name()
                        ),
                    ));
                }
                let input = x();
                let q = self.fresh("quantized");
                let args = vec![
                    ("input", input),
                    ("scale", self.float_lit(*scale)),
                    ("output_dtype", string("int8")),
                ];
                let ty = TensorType::new(mil::DType::Int8, node.shape());
                self.push_value(&q, ty, "quantize", args);
                let args = vec![
                    ("input", Argument::Name(q)),
                    ("scale", self.float_lit(*scale)),
                ];
                self.push(node, "dequantize", args)
            }
            _ => return Err(self.unsupported(node, "not an elementwise op")),
        }
        Ok(())
    }

    fn unary(&mut self, node: &Tensor, u: UnaryOp) {
        let x = self.arg(&node.srcs()[0]);
        let op = match u {
            UnaryOp::Gelu | UnaryOp::GeluTanh => {
                let mode = if u == UnaryOp::Gelu {
                    "EXACT"
                } else {
                    "TANH_APPROXIMATION"
                };
                return self.push(node, "gelu", vec![("x", x), ("mode", string(mode))]);
            }
            UnaryOp::Neg => {
                let minus_one = self.float_lit(-1.0);
                return self.push(node, "mul", vec![("x", x), ("y", minus_one)]);
            }
            // Every other unary op is the MIL op of its graph name.
            _ => u.name(),
        };
        self.push(node, op, vec![("x", x)])
    }
}
