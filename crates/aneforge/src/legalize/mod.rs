//! ANE legalization: graph rewrites that leave only what an ANE family accepts.
//!
//! Runs on the canonical graph (after canonicalization, in the compile pipeline) for ANE targets only; the CPU
//! target keeps the direct ops. Each node is visited once, bottom-up, with its already-legalized
//! operands; a rule either replaces it, leaves it, or records why it cannot run. Nothing stops at
//! the first problem: the [`Report`] lists every rejected, rewritten and oversized node, and is
//! the preflight report.
//!
//! Integers and bools are carried as fp16 on the ANE (the engine computes in fp16 only and
//! accepts fp16/int8/uint8 ports): `i32` values become f32 values (exact for |v| ≤ 2048), `bool`
//! ports become 0/1 fp16 ports; [`Legalized::retyped`] names the ports whose graph dtype differs
//! from their program dtype.

mod attention;
mod build;
pub mod catalog;
mod index;
mod math;
mod outputs;
mod range;
mod scan;
mod shapes;

use crate::arch::{AneArch, Family, Finding, FindingKind, Limits, Report};
use crate::graph::{rewrite_graph, topo_order, DType, GraphError, NodeId, Op, Tensor};
use std::collections::{HashMap, HashSet};

/// A legalized graph and what was done to it.
#[derive(Debug)]
pub struct Legalized {
    /// The legalized outputs, in the order given.
    pub outputs: Vec<Tensor>,
    pub report: Report,
    /// Ports (inputs, parameters, outputs) whose graph dtype is carried as fp16 in the program.
    pub retyped: Vec<(String, DType)>,
}

/// Legalizes named outputs for `arch`. Never fails: what cannot run is in the report
/// ([`Report::is_legal`]).
pub fn legalize(outputs: &[(&str, &Tensor)], arch: AneArch) -> Legalized {
    let roots: Vec<Tensor> = outputs.iter().map(|(_, t)| (*t).clone()).collect();
    let order = topo_order(&roots);
    let mut cx = Cx::new(arch);
    for (i, node) in order.iter().enumerate() {
        let mut label = format!("%{i}");
        match node.op() {
            Op::Input { name } => label.push_str(&format!(" input '{name}'")),
            Op::Parameter { name, .. } => label.push_str(&format!(" parameter '{name}'")),
            _ => {}
        }
        for (name, t) in outputs {
            if *t == node {
                label.push_str(&format!(" (output '{name}')"));
            }
        }
        cx.labels.insert(node.id(), label);
    }
    let rewritten = rewrite_graph(
        &roots,
        |node, srcs| -> Result<Option<Tensor>, GraphError> {
            cx.current = cx.labels.get(&node.id()).cloned().unwrap_or_default();
            let replaced = match rule(&mut cx, node, srcs) {
                Ok(r) => r,
                Err(e) => {
                    cx.reject(node, format!("rewrite failed: {e}"));
                    None
                }
            };
            let new = match replaced {
                Some(t) => t,
                None if srcs.iter().zip(node.srcs()).all(|(a, b)| a == b) => node.clone(),
                None => match Tensor::from_op(node.op().clone(), srcs.to_vec()) {
                    Ok(t) => t,
                    Err(e) => {
                        if cx.report.is_legal() {
                            cx.reject(node, format!("cannot rebuild over legalized operands: {e}"));
                        }
                        node.clone()
                    }
                },
            };
            cx.adopt(&new);
            Ok(Some(new))
        },
        |_, e| e,
    );
    // The rule above never fails and never leaves a node to be rebuilt.
    let rewritten = rewritten.unwrap_or_else(|_| roots.clone());
    let mapped: Vec<(String, Tensor, DType)> = outputs
        .iter()
        .zip(rewritten)
        .map(|((name, t), new)| (name.to_string(), new, t.dtype()))
        .collect();
    let legal = outputs::fix_outputs(&mut cx, mapped);
    scan::scan_limits(&mut cx, &legal);
    range::note_unscaled(&mut cx, &legal);
    Legalized {
        outputs: legal,
        report: cx.report,
        retyped: cx.retyped,
    }
}

/// Legalization state: the target, findings, and labels of the nodes findings point at.
pub(crate) struct Cx {
    pub family: Family,
    pub limits: Limits,
    pub report: Report,
    pub retyped: Vec<(String, DType)>,
    labels: HashMap<NodeId, String>,
    /// The label of the node being legalized; nodes a rule creates inherit it.
    current: String,
    /// Nodes of the legalized graph seen so far.
    known: HashSet<NodeId>,
    /// A legalized fed input, for building computed constants.
    pub first_input: Option<Tensor>,
}

impl Cx {
    fn new(arch: AneArch) -> Cx {
        Cx {
            family: arch.family(),
            limits: Limits::of(arch.family()),
            report: Report::new(arch),
            retyped: Vec::new(),
            labels: HashMap::new(),
            current: String::new(),
            known: HashSet::new(),
            first_input: None,
        }
    }

    pub fn label(&self, node: &Tensor) -> String {
        self.labels
            .get(&node.id())
            .cloned()
            .unwrap_or_else(|| format!("(from {})", self.current))
    }

    fn push(&mut self, node: &Tensor, kind: FindingKind) {
        self.report.findings.push(Finding {
            node: self.label(node),
            op: node.op().name().to_string(),
            shape: node.shape().to_vec(),
            kind,
        });
    }

    pub fn rewritten(&mut self, node: &Tensor, rewrite: impl Into<String>) {
        self.push(
            node,
            FindingKind::Rewritten {
                rewrite: rewrite.into(),
            },
        );
    }

    pub fn reject(&mut self, node: &Tensor, reason: impl Into<String>) {
        self.push(
            node,
            FindingKind::Rejected {
                reason: reason.into(),
            },
        );
    }

    pub fn oversized(&mut self, node: &Tensor, limit: impl Into<String>) {
        self.push(
            node,
            FindingKind::Oversized {
                limit: limit.into(),
            },
        );
    }

    pub fn note(&mut self, node: &Tensor, note: impl Into<String>) {
        self.push(node, FindingKind::Note { note: note.into() });
    }

    /// Labels the nodes a rule created (those not seen before) after the node it replaced.
    fn adopt(&mut self, new: &Tensor) {
        let mut stack = vec![new.clone()];
        while let Some(t) = stack.pop() {
            if !self.known.insert(t.id()) {
                continue;
            }
            if !self.labels.contains_key(&t.id()) {
                self.labels
                    .insert(t.id(), format!("{} (rewritten)", self.current));
            }
            if self.first_input.is_none()
                && matches!(t.op(), Op::Input { .. } | Op::Parameter { .. })
                && t.dtype() == DType::F32
            {
                self.first_input = Some(t.clone());
            }
            stack.extend(t.srcs().iter().cloned());
        }
    }
}

/// Why `fake_quant` is refused below its floor family.
pub const QUANTIZE_FLOOR: &str =
    "int8 activations (MIL quantize/dequantize) need the A16+/M4 family (Apple documents int8-int8 compute on the Neural Engine from A17 Pro and M4)";

/// The rule for one node: `Some` replacement, or `None` to keep the op over the legalized operands.
fn rule(cx: &mut Cx, node: &Tensor, srcs: &[Tensor]) -> Result<Option<Tensor>, GraphError> {
    use crate::graph::UnaryOp as U;
    Ok(match node.op() {
        Op::Input { .. } | Op::Parameter { .. } | Op::Constant(_) => math::leaf(cx, node)?,
        Op::Cast { dtype } => Some(math::cast(cx, node, &srcs[0], *dtype)?),
        Op::ArgMax { axis, keepdims } => math::argmax(cx, node, &srcs[0], *axis, *keepdims)?,
        Op::Unary(U::Square) => {
            cx.rewritten(node, "square → mul(x, x)");
            Some(srcs[0].mul(&srcs[0])?)
        }
        Op::Unary(U::Round) => Some(math::guarded_round(cx, node, &srcs[0])?),
        Op::Unary(U::Softplus) => Some(math::split_softplus(cx, node, &srcs[0])?),
        Op::Unary(u @ (U::Sin | U::Cos)) if cx.family < Family::A15 => {
            Some(math::sin_cos(cx, node, &srcs[0], *u == U::Cos)?)
        }
        Op::Reduce {
            op: crate::graph::ReduceOp::Prod,
            axes,
            keepdims,
        } => math::reduce_prod(cx, node, &srcs[0], axes, *keepdims)?,
        Op::Cumsum {
            axis,
            exclusive,
            reverse,
        } => math::cumsum(cx, node, &srcs[0], *axis, *exclusive, *reverse)?,
        Op::Binary(crate::graph::BinaryOp::Mul) => match range::rms_norm(cx, node, srcs)? {
            Some(t) => Some(t),
            None => math::mul_after_rounding(cx, node, srcs)?,
        },
        Op::Binary(crate::graph::BinaryOp::Div) => match range::rms_norm(cx, node, srcs)? {
            Some(t) => Some(t),
            None => range::l2_normalize(cx, node, srcs)?,
        },
        Op::LayerNorm { .. } => range::layer_norm(cx, node, srcs)?,
        Op::Unary(U::Neg) if math::is_rounding(&node.srcs()[0]) => {
            cx.rewritten(node, "negation after floor/ceil/round → 0 − x");
            Some(crate::graph::scalar(0.0).sub(&srcs[0])?)
        }
        Op::Gather { axis } => index::gather(cx, node, srcs, *axis)?,
        Op::LinearExperts { experts } => Some(index::linear_experts(cx, node, srcs, *experts)?),
        Op::DynamicSlice { size } => index::dynamic_slice(cx, node, srcs, size)?,
        Op::DynamicSliceUpdate => index::dynamic_slice_update(cx, node, srcs)?,
        Op::Sdpa {
            has_mask, causal, ..
        } if *has_mask || *causal => attention::decompose_masked(cx, node, srcs)?,
        Op::Reshape { shape } => attention::head_repeat(cx, node, srcs, shape)?,
        Op::Conv { attrs, has_bias } => shapes::patch_conv(cx, node, srcs, attrs, *has_bias)?,
        Op::FakeQuant { .. } if !crate::arch::mil_ops::accepts("quantize", cx.family) => {
            cx.reject(node, QUANTIZE_FLOOR);
            None
        }
        _ => None,
    })
}
