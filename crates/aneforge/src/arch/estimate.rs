//! A cost model, not a measurement: `estimate(program, arch)` predicts the wall time of one
//! dispatch from a per-chip roofline,
//!
//! `overhead + Σ_op max(flops_op / peak, bytes_op / bandwidth)`,
//!
//! with each op's flops counted from its shapes and its bytes the tensors it reads and writes
//! (weights at their stored size when the family streams their format natively, at fp16
//! otherwise). It ignores on-chip caching, op fusion, layout padding and clocks; use it to
//! compare programs and targets, never as a benchmark. No number here was measured by us.
//!
//! Published figures (Apple's own; the newsroom pages were read through press coverage):
//! - M1: "16-core Neural Engine capable of 11 trillion operations per second" (Apple Newsroom,
//!   "Apple unleashes M1", 10 Nov 2020). Memory bandwidth is not in that release; Apple's M2
//!   release gives M2's 100 GB/s as "50 percent more than M1", i.e. ≈ 66.7 GB/s.
//! - M2: 15.8 trillion operations per second, 100 GB/s (Apple Newsroom, "Apple unveils M2 with
//!   breakthrough performance and capabilities", 6 Jun 2022).
//! - M3: 18 trillion operations per second, 100 GB/s (Apple Newsroom, "Apple unveils M3, M3 Pro,
//!   and M3 Max", 30 Oct 2023; M3 tech specs).
//! - M4: 38 trillion operations per second, 120 GB/s (Apple Newsroom, "Apple introduces M4
//!   chip", 7 May 2024). The 38 counts int8 operations, unlike the fp16 counts before it; the
//!   model takes half (19 TFLOP/s fp16), which third-party measurements also report.
//! - M5: 153 GB/s (Apple Newsroom, "Apple unleashes M5", 15 Oct 2025). Apple gives no Neural
//!   Engine figure in operations per second; the model reuses M4's fp16 rate.
//!
//! An "operation" is taken as one fp16 FLOP (a multiply-accumulate counts 2). Variants with more
//! cores (`g`, `s`, `c`, `d`) use their generation's base figures: Apple quotes the same Neural
//! Engine for the Pro and Max parts. The dispatch overhead is the middle of the 70–200 µs per
//! call that DESIGN.md §6 records for the runtime.

use super::formats::{is_native, scheme_of_op};
use super::{AneArch, Chip};
use aneforge_mil as mil;
use mil::{Argument, Literal, Operation, TensorType, ValueType};
use std::collections::HashMap;

/// Per-dispatch overhead in microseconds.
pub const DISPATCH_US: f64 = 135.0;

/// The roofline parameters of one chip.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChipFigures {
    pub chip: &'static str,
    /// Peak fp16 throughput, TFLOP/s.
    pub peak_tflops: f64,
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbs: f64,
}

/// The figures for an architecture's chip (see the module docs for sources).
pub fn figures(arch: AneArch) -> ChipFigures {
    let (chip, peak_tflops, bandwidth_gbs) = match arch.chip() {
        Chip::M1 | Chip::None => ("M1", 11.0, 100.0 / 1.5),
        Chip::M2 => ("M2", 15.8, 100.0),
        Chip::M3 => ("M3", 18.0, 100.0),
        Chip::M4 => ("M4", 38.0 / 2.0, 120.0),
        Chip::M5 => ("M5", 38.0 / 2.0, 153.0),
    };
    ChipFigures {
        chip,
        peak_tflops,
        bandwidth_gbs,
    }
}

/// Which roof bounds an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    Compute,
    Memory,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OpCost {
    pub value: String,
    pub op_type: String,
    pub flops: f64,
    pub bytes: f64,
    pub us: f64,
    pub bound: Bound,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub arch: AneArch,
    pub figures: ChipFigures,
    pub overhead_us: f64,
    pub ops: Vec<OpCost>,
    pub total_us: f64,
}

impl Estimate {
    pub fn flops(&self) -> f64 {
        self.ops.iter().map(|o| o.flops).sum()
    }

    pub fn bytes(&self) -> f64 {
        self.ops.iter().map(|o| o.bytes).sum()
    }
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "estimate for {} ({}: {:.1} TFLOP/s fp16, {:.1} GB/s): {:.1} µs = {:.0} µs dispatch + {:.1} µs over {} ops ({:.3} GFLOP, {:.2} MB) — a roofline model, not a measurement",
            self.arch,
            self.figures.chip,
            self.figures.peak_tflops,
            self.figures.bandwidth_gbs,
            self.total_us,
            self.overhead_us,
            self.total_us - self.overhead_us,
            self.ops.len(),
            self.flops() / 1e9,
            self.bytes() / 1e6,
        )?;
        let mut top: Vec<&OpCost> = self.ops.iter().collect();
        top.sort_by(|a, b| b.us.total_cmp(&a.us));
        for o in top.iter().take(8) {
            writeln!(
                f,
                "  {:>9.2} µs  {:?}-bound  {} '{}'",
                o.us, o.bound, o.op_type, o.value
            )?;
        }
        Ok(())
    }
}

/// Estimates one dispatch of `program`'s `main` function on `arch`.
pub fn estimate(program: &mil::Program, arch: AneArch) -> Estimate {
    estimate_with(program, arch, DISPATCH_US)
}

pub fn estimate_with(program: &mil::Program, arch: AneArch, overhead_us: f64) -> Estimate {
    let fig = figures(arch);
    let mut ops = Vec::new();
    if let Some(function) = program
        .function("main")
        .or_else(|| program.functions.first())
    {
        let mut types: HashMap<&str, &TensorType> = HashMap::new();
        for v in &function.inputs {
            if let ValueType::Tensor(t) = &v.ty {
                types.insert(&v.name, t);
            }
        }
        let mut stored: HashMap<&str, f64> = HashMap::new();
        for op in &function.body.operations {
            for v in &op.outputs {
                if let ValueType::Tensor(t) = &v.ty {
                    types.insert(&v.name, t);
                }
            }
            if op.op_type == "const" || op.op_type.starts_with("constexpr_") {
                if let Some(v) = op.outputs.first() {
                    stored.insert(&v.name, weight_bytes(op, arch));
                }
                continue;
            }
            let bytes = op_bytes(op, &types, &stored);
            let flops = op_flops(op, &types);
            let compute = flops / (fig.peak_tflops * 1e12) * 1e6;
            let memory = bytes / (fig.bandwidth_gbs * 1e9) * 1e6;
            let (us, bound) = if compute >= memory {
                (compute, Bound::Compute)
            } else {
                (memory, Bound::Memory)
            };
            ops.push(OpCost {
                value: op
                    .outputs
                    .first()
                    .map_or_else(String::new, |v| v.name.clone()),
                op_type: op.op_type.clone(),
                flops,
                bytes,
                us,
                bound,
            });
        }
    }
    let total_us = overhead_us + ops.iter().map(|o| o.us).sum::<f64>();
    Estimate {
        arch,
        figures: fig,
        overhead_us,
        ops,
        total_us,
    }
}

fn dense_bytes(t: &TensorType) -> f64 {
    let bits = t.dtype.bits().unwrap_or(8) as f64;
    t.num_elements().unwrap_or(0) as f64 * bits / 8.0
}

/// Bytes a weight costs to read: its stored payloads when the family streams the format, its
/// dense fp16 size otherwise.
fn weight_bytes(op: &Operation, arch: AneArch) -> f64 {
    let out = op.outputs.first().and_then(|v| v.ty.tensor());
    let dense = out.map_or(0.0, dense_bytes);
    if op.op_type == "const" {
        return dense;
    }
    match scheme_of_op(&op.op_type) {
        Some(s) if is_native(s, arch.family()) => {
            let mut total = 0.0;
            let mut add = |l: &Literal| {
                if let Literal::Blob { ty, .. } | Literal::Tensor { ty, .. } = l {
                    total += dense_bytes(ty);
                }
            };
            op.attributes.iter().for_each(|(_, l)| add(l));
            op.inputs.iter().for_each(|(_, a)| {
                if let Argument::Literal(l) = a {
                    add(l)
                }
            });
            total
        }
        _ => dense,
    }
}

fn arg_bytes(a: &Argument, types: &HashMap<&str, &TensorType>, stored: &HashMap<&str, f64>) -> f64 {
    match a {
        Argument::Name(n) => stored
            .get(n.as_str())
            .copied()
            .or_else(|| types.get(n.as_str()).map(|t| dense_bytes(t)))
            .unwrap_or(0.0),
        Argument::Literal(Literal::Blob { ty, .. }) => dense_bytes(ty),
        Argument::Literal(_) => 0.0,
        Argument::List(items) => items.iter().map(|i| arg_bytes(i, types, stored)).sum(),
    }
}

fn op_bytes(
    op: &Operation,
    types: &HashMap<&str, &TensorType>,
    stored: &HashMap<&str, f64>,
) -> f64 {
    let read: f64 = op
        .inputs
        .iter()
        .map(|(_, a)| arg_bytes(a, types, stored))
        .sum();
    let written: f64 = op
        .outputs
        .iter()
        .filter_map(|v| v.ty.tensor())
        .map(dense_bytes)
        .sum();
    read + written
}

fn shape_of(op: &Operation, arg: &str, types: &HashMap<&str, &TensorType>) -> Option<Vec<usize>> {
    match op.input(arg)? {
        Argument::Name(n) => types.get(n.as_str())?.static_shape(),
        Argument::Literal(l) => l.value_type().tensor()?.static_shape(),
        Argument::List(_) => None,
    }
}

fn is_true(op: &Operation, arg: &str) -> bool {
    matches!(
        op.input(arg),
        Some(Argument::Literal(Literal::Tensor { data: mil::TensorData::Bool(b), .. })) if b.first() == Some(&true)
    )
}

fn op_flops(op: &Operation, types: &HashMap<&str, &TensorType>) -> f64 {
    let out: f64 = op
        .outputs
        .first()
        .and_then(|v| v.ty.tensor())
        .and_then(|t| t.num_elements())
        .unwrap_or(0) as f64;
    let x = shape_of(op, "x", types).unwrap_or_default();
    let elems = |s: &[usize]| s.iter().product::<usize>() as f64;
    match op.op_type.as_str() {
        "matmul" => {
            let k = if is_true(op, "transpose_x") {
                x.len().checked_sub(2).map_or(1, |i| x[i])
            } else {
                x.last().copied().unwrap_or(1)
            };
            2.0 * out * k as f64
        }
        "linear" => {
            let k = shape_of(op, "weight", types)
                .and_then(|w| w.get(1).copied())
                .unwrap_or(1);
            2.0 * out * k as f64 + out
        }
        "conv" => {
            let w = shape_of(op, "weight", types).unwrap_or_default();
            2.0 * out * elems(w.get(1..).unwrap_or(&[])) + out
        }
        "conv_transpose" => {
            let w = shape_of(op, "weight", types).unwrap_or_default();
            2.0 * elems(&x) * elems(w.get(1..).unwrap_or(&[]))
        }
        "scaled_dot_product_attention" => {
            let q = shape_of(op, "query", types).unwrap_or_default();
            let k = shape_of(op, "key", types).unwrap_or_default();
            let s = k.len().checked_sub(2).map_or(1, |i| k[i]) as f64;
            let e = q.last().copied().unwrap_or(1) as f64;
            let rows = elems(&q) / e;
            4.0 * rows * s * e + 5.0 * rows * s
        }
        "softmax" => 5.0 * out,
        "layer_norm" | "batch_norm" | "instance_norm" | "l2_norm" => 8.0 * out,
        "max_pool" | "avg_pool" => {
            let k = match op.input("kernel_sizes") {
                Some(Argument::Literal(Literal::Tensor {
                    data: mil::TensorData::Int(v),
                    ..
                })) => v.iter().product::<i64>().max(1) as f64,
                _ => 1.0,
            };
            out * k
        }
        t if t.starts_with("reduce_") => elems(&x),
        "reshape" | "transpose" | "concat" | "slice_by_index" | "slice_by_size"
        | "slice_update" | "tile" | "pad" | "space_to_depth" | "depth_to_space" | "identity"
        | "expand_dims" | "squeeze" | "split" | "cast" => 0.0,
        _ => out,
    }
}
