//! The final gate for ANE programs: every op, value, dtype and shape in an emitted
//! [`mil::Program`] must be one the target family accepts. Used at the end of every ANE compile
//! and by the tests of each rewrite.

use super::limits::{Limits, COMPUTE_DTYPES, IO_DTYPES, QUANTIZED_DTYPES};
use super::mil_ops::{requirement, Requirement};
use super::AneArch;
use aneforge_mil as mil;
use mil::{Argument, Literal, Operation, TensorType, ValueType};
use std::collections::HashMap;
use std::fmt;

/// One thing the target does not accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub function: String,
    /// The value (op output or function input) the problem is about.
    pub value: String,
    /// The op type producing it (`input` for function inputs).
    pub op_type: String,
    pub shape: Vec<usize>,
    pub problem: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: '{}' ({} {:?}): {}",
            self.function, self.value, self.op_type, self.shape, self.problem
        )
    }
}

/// Everything in `program` that `arch` does not accept, in program order.
pub fn check_program(program: &mil::Program, arch: AneArch) -> Vec<Violation> {
    let mut out = Vec::new();
    for function in &program.functions {
        FunctionCheck::new(function, arch, &mut out).run();
    }
    out
}

struct FunctionCheck<'a> {
    function: &'a mil::Function,
    arch: AneArch,
    limits: Limits,
    types: HashMap<&'a str, &'a TensorType>,
    producers: HashMap<&'a str, &'a Operation>,
    out: &'a mut Vec<Violation>,
}

impl<'a> FunctionCheck<'a> {
    fn new(function: &'a mil::Function, arch: AneArch, out: &'a mut Vec<Violation>) -> Self {
        let mut types = HashMap::new();
        let mut producers = HashMap::new();
        for v in &function.inputs {
            if let ValueType::Tensor(t) = &v.ty {
                types.insert(v.name.as_str(), t);
            }
        }
        for op in &function.body.operations {
            for v in &op.outputs {
                if let ValueType::Tensor(t) = &v.ty {
                    types.insert(v.name.as_str(), t);
                }
                producers.insert(v.name.as_str(), op);
            }
        }
        FunctionCheck {
            function,
            arch,
            limits: Limits::of(arch.family()),
            types,
            producers,
            out,
        }
    }

    fn report(&mut self, value: &str, op_type: &str, ty: Option<&TensorType>, problem: String) {
        self.out.push(Violation {
            function: self.function.name.clone(),
            value: value.to_string(),
            op_type: op_type.to_string(),
            shape: ty.and_then(|t| t.static_shape()).unwrap_or_default(),
            problem,
        });
    }

    fn run(&mut self) {
        let family = self.arch.family();
        for v in &self.function.inputs {
            let Some(t) = v.ty.tensor() else {
                self.report(&v.name, "input", None, "inputs must be tensors".into());
                continue;
            };
            if !IO_DTYPES.contains(&t.dtype) {
                self.report(
                    &v.name,
                    "input",
                    Some(t),
                    format!("input dtype {} (accepted: fp16, int8, uint8)", t.dtype),
                );
            }
            self.shape_limits(&v.name, "input", t, true);
        }
        let input_names: Vec<&str> = self
            .function
            .inputs
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        for name in &self.function.body.outputs {
            let ty = self.types.get(name.as_str()).copied();
            if input_names.contains(&name.as_str()) {
                self.report(
                    name,
                    "output",
                    ty,
                    "an output that is an input must be computed (x * 1)".into(),
                );
            }
            if let Some(t) = ty {
                if !IO_DTYPES.contains(&t.dtype) {
                    self.report(
                        name,
                        "output",
                        Some(t),
                        format!("output dtype {} (accepted: fp16, int8, uint8)", t.dtype),
                    );
                }
            }
        }
        for op in &self.function.body.operations {
            self.op(op, family);
        }
    }

    fn op(&mut self, op: &'a Operation, family: super::Family) {
        let op_type = op.op_type.as_str();
        let value = op
            .outputs
            .first()
            .map_or_else(|| op.name().unwrap_or("?").to_string(), |v| v.name.clone());
        let out_ty = op.outputs.first().and_then(|v| v.ty.tensor());
        match requirement(op_type) {
            Requirement::Any => {}
            Requirement::From(f) if family >= f => {}
            Requirement::From(f) => self.report(
                &value,
                op_type,
                out_ty,
                format!(
                    "needs the {f} family or later (target {} is {family})",
                    self.arch
                ),
            ),
            Requirement::Rewritten(with) => self.report(
                &value,
                op_type,
                out_ty,
                format!("unreliable on the ANE; legalization replaces it with {with}"),
            ),
            Requirement::Walled(why) => self.report(
                &value,
                op_type,
                out_ty,
                format!("no ANE family runs it ({why})"),
            ),
        }
        let constant = op_type == "const" || op_type.starts_with("constexpr_");
        for v in &op.outputs {
            let Some(t) = v.ty.tensor() else {
                self.report(
                    &v.name,
                    op_type,
                    None,
                    "tuple-typed values are not accepted".into(),
                );
                continue;
            };
            let quantized = op_type == "quantize" && QUANTIZED_DTYPES.contains(&t.dtype);
            if !COMPUTE_DTYPES.contains(&t.dtype) && !quantized {
                self.report(
                    &v.name,
                    op_type,
                    Some(t),
                    format!(
                        "value dtype {} (the ANE computes in fp16; bool only from comparisons)",
                        t.dtype
                    ),
                );
            }
            self.shape_limits(&v.name, op_type, t, !constant);
        }
        match op_type {
            "matmul" => self.matmul(op, &value, out_ty),
            "linear" => self.linear(op, &value, out_ty),
            "conv" | "conv_transpose" => self.conv(op, &value, out_ty),
            "scaled_dot_product_attention" if op.input("attn_mask").is_some() => self.report(
                &value,
                op_type,
                out_ty,
                "the native attention op ignores masks; decompose it (matmul, add mask, softmax, matmul)".into(),
            ),
            "slice_by_size" => self.static_args(op, &value, out_ty, &["begin"]),
            "slice_update" => self.static_args(op, &value, out_ty, &["begin", "end"]),
            "mul" => self.mul_after_rounding(op, &value, out_ty),
            _ => {}
        }
    }

    fn shape_limits(&mut self, value: &str, op_type: &str, t: &TensorType, activation: bool) {
        let Some(shape) = t.static_shape() else {
            self.report(value, op_type, Some(t), "shapes must be static".into());
            return;
        };
        let l = self.limits;
        if shape.len() > l.max_rank {
            self.report(
                value,
                op_type,
                Some(t),
                format!("rank {} > {}", shape.len(), l.max_rank),
            );
        }
        for (axis, &d) in shape.iter().enumerate() {
            if d > l.max_axis {
                self.report(
                    value,
                    op_type,
                    Some(t),
                    format!("axis {axis} has size {d} > {} (any axis)", l.max_axis),
                );
            } else if activation && axis + 2 >= shape.len() && d > l.max_spatial {
                self.report(
                    value,
                    op_type,
                    Some(t),
                    format!(
                        "axis {axis} has size {d} > {} (width/height cap of {})",
                        l.max_spatial,
                        self.arch.family()
                    ),
                );
            }
        }
    }

    fn arg_type(&self, op: &Operation, name: &str) -> Option<TensorType> {
        match op.input(name)? {
            Argument::Name(n) => self.types.get(n.as_str()).map(|t| (*t).clone()),
            Argument::Literal(l) => l.value_type().tensor().cloned(),
            Argument::List(_) => None,
        }
    }

    fn bool_arg(&self, op: &Operation, name: &str) -> bool {
        matches!(
            op.input(name),
            Some(Argument::Literal(Literal::Tensor {
                data: mil::TensorData::Bool(b),
                ..
            })) if b.first() == Some(&true)
        )
    }

    fn matmul(&mut self, op: &Operation, value: &str, out_ty: Option<&TensorType>) {
        let Some(x) = self.arg_type(op, "x").and_then(|t| t.static_shape()) else {
            return;
        };
        let k = if self.bool_arg(op, "transpose_x") {
            x.len().checked_sub(2).and_then(|i| x.get(i))
        } else {
            x.last()
        };
        if let Some(&k) = k {
            if k > self.limits.max_spatial {
                self.report(
                    value,
                    "matmul",
                    out_ty,
                    format!(
                        "contraction {k} > {} (cap of {})",
                        self.limits.max_spatial,
                        self.arch.family()
                    ),
                );
            }
        }
    }

    fn linear(&mut self, op: &Operation, value: &str, out_ty: Option<&TensorType>) {
        let Some(w) = self.arg_type(op, "weight").and_then(|t| t.static_shape()) else {
            return;
        };
        if let [out, inp] = w[..] {
            if inp > self.limits.max_spatial {
                self.report(
                    value,
                    "linear",
                    out_ty,
                    format!("contraction {inp} > {}", self.limits.max_spatial),
                );
            }
            if out > self.limits.max_channels {
                self.report(
                    value,
                    "linear",
                    out_ty,
                    format!("{out} output features > {}", self.limits.max_channels),
                );
            }
        }
    }

    fn conv(&mut self, op: &Operation, value: &str, out_ty: Option<&TensorType>) {
        let Some(w) = self.arg_type(op, "weight").and_then(|t| t.static_shape()) else {
            return;
        };
        if w.len() < 3 {
            return;
        }
        let kw = w[w.len() - 1];
        if kw > self.limits.max_kernel_width {
            self.report(
                value,
                &op.op_type,
                out_ty,
                format!(
                    "kernel width {kw} > {} (cap of {})",
                    self.limits.max_kernel_width,
                    self.arch.family()
                ),
            );
        }
        for (what, &c) in [("weight axis 0", &w[0]), ("weight axis 1", &w[1])] {
            if c > self.limits.max_channels {
                self.report(
                    value,
                    &op.op_type,
                    out_ty,
                    format!("{what} has {c} channels > {}", self.limits.max_channels),
                );
            }
        }
    }

    fn static_args(
        &mut self,
        op: &Operation,
        value: &str,
        out_ty: Option<&TensorType>,
        args: &[&str],
    ) {
        for &a in args {
            let dynamic = match op.input(a) {
                Some(Argument::Name(n)) => self
                    .producers
                    .get(n.as_str())
                    .is_none_or(|p| p.op_type != "const"),
                _ => false,
            };
            if dynamic {
                self.report(
                    value,
                    &op.op_type,
                    out_ty,
                    format!("'{a}' is data-dependent (the ANE needs static windows)"),
                );
            }
        }
    }

    /// The ANE mishandles a broadcast scalar multiplier right after floor/ceil/round.
    fn mul_after_rounding(&mut self, op: &Operation, value: &str, out_ty: Option<&TensorType>) {
        let rounded = |arg: Option<&Argument>| match arg {
            Some(Argument::Name(n)) => self
                .producers
                .get(n.as_str())
                .is_some_and(|p| matches!(p.op_type.as_str(), "floor" | "ceil" | "round")),
            _ => false,
        };
        let out_len = out_ty.and_then(|t| t.num_elements()).unwrap_or(0);
        let short = |name: &str| {
            self.arg_type(op, name)
                .and_then(|t| t.num_elements())
                .is_some_and(|n| n < out_len)
        };
        let bad = (rounded(op.input("x")) && short("y")) || (rounded(op.input("y")) && short("x"));
        if bad {
            self.report(
                value,
                "mul",
                out_ty,
                "a broadcast multiplier after floor/ceil/round must be a full-shape constant"
                    .into(),
            );
        }
    }
}
