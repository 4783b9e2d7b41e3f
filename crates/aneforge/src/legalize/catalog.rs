//! The per-family status of every graph op on the ANE, as the legalizer treats it — what
//! `aneforge ops --target …` prints. Tests check it against the legalizer's behaviour.

use crate::arch::Family;
use crate::graph::{BinaryOp, CompareOp, UnaryOp};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Emitted as is.
    Native,
    /// Replaced by an equivalent the family runs.
    Rewritten,
    /// Cannot run on the family (the detail says where it goes instead).
    Walled,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Native => "native",
            Status::Rewritten => "rewritten",
            Status::Walled => "walled",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpRow {
    pub op: &'static str,
    pub status: Status,
    pub detail: &'static str,
}

fn row(op: &'static str, status: Status, detail: &'static str) -> OpRow {
    OpRow { op, status, detail }
}

/// Every graph op with its status on `family`.
pub fn graph_ops(family: Family) -> Vec<OpRow> {
    use Status::*;
    let mut rows = Vec::new();
    for u in UnaryOp::ALL {
        rows.push(match u {
            UnaryOp::Square => row(u.name(), Rewritten, "mul(x, x)"),
            UnaryOp::Round => row(u.name(), Rewritten, "guarded: |x| >= 1024 passes through"),
            UnaryOp::Softplus => row(u.name(), Rewritten, "x above 10, softplus below"),
            UnaryOp::Sin | UnaryOp::Cos if family < Family::A15 => row(
                u.name(),
                Rewritten,
                "range reduction + degree-7 polynomial (native from A15)",
            ),
            UnaryOp::Floor | UnaryOp::Ceil => row(
                u.name(),
                Native,
                "a broadcast multiplier right after it becomes full-shape",
            ),
            _ => row(u.name(), Native, ""),
        });
    }
    for (op, detail) in [("clip", ""), ("leaky_relu", ""), ("elu", "")] {
        rows.push(row(op, Native, detail));
    }
    for b in BinaryOp::ALL {
        rows.push(row(b.name(), Native, ""));
    }
    for c in CompareOp::ALL {
        rows.push(row(c.name(), Native, "bool result, consumed by select"));
    }
    rows.extend([
        row("select", Native, ""),
        row(
            "matmul",
            Native,
            "contraction within the width cap; wide outputs tiled",
        ),
        row(
            "linear",
            Native,
            "wide output heads tiled into separate ports",
        ),
        row(
            "linear_experts",
            Rewritten,
            "every expert computed, then a one-hot matmul picks each row's (no runtime weight addressing)",
        ),
        row(
            "conv",
            Native,
            "P×P stride-P patch conv → space_to_depth(P) + 1×1 conv; kernel width capped",
        ),
        row("conv_transpose", Native, ""),
        row("max_pool", Native, ""),
        row("avg_pool", Native, ""),
        row("upsample_nearest", Native, ""),
        row("upsample_bilinear", Native, ""),
        row("reduce_sum", Native, ""),
        row("reduce_mean", Native, ""),
        row("reduce_max", Native, ""),
        row("reduce_min", Native, ""),
        row(
            "reduce_prod",
            Rewritten,
            "sign · exp(Σ log|x|), zeros and negatives counted (≤ 2048 elements)",
        ),
        row(
            "argmax",
            Rewritten,
            "reduce_max, equal, index ramp, reduce_min (fp16 indices, axis ≤ 2048)",
        ),
        row("softmax", Native, ""),
        row("layer_norm", Native, ""),
        row("batch_norm", Native, ""),
        row("reshape", Native, ""),
        row("transpose", Native, ""),
        row("concat", Native, ""),
        row("slice", Native, ""),
        row(
            "dynamic_slice",
            Rewritten,
            "row pick → one-hot matmul per narrowed axis (axis ≤ 2048)",
        ),
        row("slice_update", Native, "static window"),
        row(
            "dynamic_slice_update",
            Rewritten,
            "KV write → K·(1−onehot) + k·onehot (axis ≤ 2048)",
        ),
        row("pad", Native, ""),
        row("tile", Native, "the GQA head repeat → 0/1 expansion matmul"),
        row(
            "gather",
            Rewritten,
            "constant indices → slices + concat; runtime indices over ≤ 2048 rows → one-hot matmul",
        ),
        row(
            "gather (runtime indices, > 2048 rows)",
            Walled,
            "embedding lookups: gather on the host",
        ),
        row("space_to_depth", Native, ""),
        row("depth_to_space", Native, ""),
        row("cumsum", Rewritten, "triangular matmul (axis ≤ 4096)"),
        row(
            "cast",
            Native,
            "i32 and bool carried as fp16; cast to i32 → sign(x)·floor(|x|)",
        ),
        row("sdpa", Native, "without a mask"),
        row(
            "sdpa (masked or causal)",
            Rewritten,
            "matmul, additive mask clamped at −1e4, softmax, matmul",
        ),
        row("stop_gradient", Native, "identity"),
        row(
            "barrier",
            Native,
            "identity (its extra sources only order the program)",
        ),
    ]);
    rows.push(if crate::arch::mil_ops::accepts("quantize", family) {
        row(
            "fake_quant",
            Native,
            "int8 per-tensor quantize → dequantize (iOS17 ops)",
        )
    } else {
        row("fake_quant", Walled, super::QUANTIZE_FLOOR)
    });
    rows
}
