//! Rules for leaves, casts and elementwise/reduction ops: integer and bool values carried as
//! fp16, argmax, hardware workarounds (square, round, softplus, multiply after rounding),
//! sin/cos below A15, reduce_prod and cumsum.

use super::build::{along_axis, broadcast_values, f32_const, indicator, ramp, zero_one};
use super::Cx;
use crate::graph::{
    constant, input, parameter, scalar, CompareOp, DType, GraphError, HostArray, HostData, Op,
    Tensor, UnaryOp,
};
use std::f32::consts::PI;

/// Integer and bool leaves become f32 leaves (same names).
pub fn leaf(cx: &mut Cx, node: &Tensor) -> Result<Option<Tensor>, GraphError> {
    let dtype = node.dtype();
    if dtype == DType::F32 {
        return Ok(None);
    }
    Ok(match node.op() {
        Op::Input { name } => {
            cx.retyped.push((name.clone(), dtype));
            let fed = input(name, node.shape(), DType::F32)?;
            Some(from_f32(cx, node, fed, dtype)?)
        }
        Op::Parameter { name, init } => {
            cx.retyped.push((name.clone(), dtype));
            let fed = parameter(name, to_f32(init)?)?;
            Some(from_f32(cx, node, fed, dtype)?)
        }
        Op::Constant(value) if dtype == DType::I32 => {
            let big = value.as_i32().is_some_and(|v| {
                v.iter()
                    .any(|x| x.unsigned_abs() as usize > cx.limits.max_exact_int)
            });
            if big {
                cx.note(
                    node,
                    format!(
                        "i32 constant with values beyond ±{} is inexact in fp16 unless used as indices",
                        cx.limits.max_exact_int
                    ),
                );
            }
            Some(constant(to_f32(value)?))
        }
        _ => None,
    })
}

fn from_f32(cx: &mut Cx, node: &Tensor, fed: Tensor, dtype: DType) -> Result<Tensor, GraphError> {
    if dtype == DType::Bool {
        cx.note(node, "bool port carried as fp16 0/1");
        fed.compare_scalar(CompareOp::NotEqual, 0.0)
    } else {
        cx.note(
            node,
            format!(
                "i32 port carried as fp16 (exact for |v| ≤ {})",
                cx.limits.max_exact_int
            ),
        );
        Ok(fed)
    }
}

fn to_f32(a: &HostArray) -> Result<HostArray, GraphError> {
    let data: Vec<f32> = match a.data() {
        HostData::F32(v) => v.to_vec(),
        HostData::I32(v) => v.iter().map(|&x| x as f32).collect(),
        HostData::Bool(v) => v.iter().map(|&b| f32::from(u8::from(b))).collect(),
        HostData::BlockQuantized(q) => q.dequantize()?,
        HostData::Deferred(_) => return Ok(a.clone()),
    };
    HostArray::from_f32(a.shape(), data)
}

/// Casts between carried representations: f32 (also carrying i32) and bool.
pub fn cast(cx: &mut Cx, node: &Tensor, x: &Tensor, to: DType) -> Result<Tensor, GraphError> {
    let from_int = node.srcs()[0].dtype() == DType::I32;
    if to.is_storage() || node.srcs()[0].dtype().is_storage() {
        // the ANE stores every float as fp16 already and has no int8 tensors
        cx.reject(
            node,
            format!(
                "cast between {} and {to}: ANE programs keep f32 values (stored as fp16)",
                node.srcs()[0].dtype()
            ),
        );
        return Ok(x.clone());
    }
    match (x.dtype(), to) {
        (DType::Bool, DType::Bool) => Ok(x.clone()),
        (DType::Bool, _) => indicator(x),
        (_, DType::Bool) => x.compare_scalar(CompareOp::NotEqual, 0.0),
        (_, DType::I32) if !from_int => {
            cx.rewritten(node, "cast to i32 → sign(x)·floor(|x|) in fp16");
            x.abs()?.floor()?.mul(&x.sign()?)
        }
        _ => Ok(x.clone()),
    }
}

/// The ANE returns no integer tensors: argmax becomes the first index holding the maximum,
/// found with fp16 ops (exact while the axis is at most 2048 long).
pub fn argmax(
    cx: &mut Cx,
    node: &Tensor,
    x: &Tensor,
    axis: usize,
    keepdims: bool,
) -> Result<Option<Tensor>, GraphError> {
    let n = x.shape()[axis];
    if n > cx.limits.max_exact_int {
        cx.oversized(
            node,
            format!(
                "argmax over {n} positions: indices are exact in fp16 only up to {}",
                cx.limits.max_exact_int
            ),
        );
        return Ok(None);
    }
    cx.rewritten(
        node,
        "argmax → reduce_max, equal, select over an index ramp, reduce_min",
    );
    let a = axis as isize;
    let hit = x.eq(&x.max(&[a], true)?)?;
    let positions = ramp(n, x.rank(), axis)?.broadcast_to(x.shape())?;
    let candidates = hit.select(&positions, &scalar(n as f32))?;
    Ok(Some(candidates.min(&[a], keepdims)?))
}

/// Values with |x| ≥ 1024 are already integers in fp16; the hardware round misbehaves there.
pub fn guarded_round(cx: &mut Cx, node: &Tensor, x: &Tensor) -> Result<Tensor, GraphError> {
    cx.rewritten(node, "round guarded: |x| ≥ 1024 passes through");
    x.abs()?
        .compare_scalar(CompareOp::GreaterEqual, 1024.0)?
        .select(x, &x.round()?)
}

/// softplus(x) = x above 10 (to fp16 precision); the hardware table is only used below.
pub fn split_softplus(cx: &mut Cx, node: &Tensor, x: &Tensor) -> Result<Tensor, GraphError> {
    cx.rewritten(node, "softplus split: x above 10");
    x.compare_scalar(CompareOp::Greater, 10.0)?
        .select(x, &x.minimum_scalar(10.0)?.softplus()?)
}

/// sin/cos below A15: reduce to [−π, π] in turns, fold into [−π/2, π/2], then a degree-7 odd
/// Taylor polynomial (truncation error ≤ (π/2)⁹/9! ≈ 1.6e-4). Accuracy follows the argument's
/// fp16 spacing: the reduction loses what fp16 cannot hold of large |x|.
pub fn sin_cos(cx: &mut Cx, node: &Tensor, x: &Tensor, cos: bool) -> Result<Tensor, GraphError> {
    cx.rewritten(
        node,
        "sin/cos → range reduction + polynomial (native from A15)",
    );
    let x = if cos {
        x.add_scalar(PI / 2.0)?
    } else {
        x.clone()
    };
    let turns = x.mul_scalar(0.5 / PI)?;
    let r = turns
        .sub(&turns.add_scalar(0.5)?.floor()?)?
        .mul_scalar(2.0 * PI)?;
    let upper = r.compare_scalar(CompareOp::Greater, PI / 2.0)?;
    let lower = r.compare_scalar(CompareOp::Less, -PI / 2.0)?;
    let s = upper.select(
        &r.neg()?.add_scalar(PI)?,
        &lower.select(&r.neg()?.add_scalar(-PI)?, &r)?,
    )?;
    let s2 = s.mul(&s)?;
    let mut p = s2.mul_scalar(-1.0 / 5040.0)?.add_scalar(1.0 / 120.0)?;
    p = p.mul(&s2)?.add_scalar(-1.0 / 6.0)?;
    p = p.mul(&s2)?.add_scalar(1.0)?;
    p.mul(&s)
}

/// reduce_prod = sign · exp(Σ log|x|), with zeros and the sign of negatives counted apart:
/// `log` of a zero or negative is undefined, so |x| of a zero is replaced by 1, the result is 0
/// when any element is 0, and negative when an odd number of elements is negative. Counts are
/// exact in fp16 only up to 2048 reduced elements. Precision: each log carries fp16 error, so
/// the relative error of the product grows with the number of factors.
pub fn reduce_prod(
    cx: &mut Cx,
    node: &Tensor,
    x: &Tensor,
    axes: &[usize],
    keepdims: bool,
) -> Result<Option<Tensor>, GraphError> {
    let count: usize = axes.iter().map(|&a| x.shape()[a]).product();
    if count > cx.limits.max_exact_int {
        cx.oversized(
            node,
            format!(
                "reduce_prod over {count} elements: the sign count is exact in fp16 only up to {}",
                cx.limits.max_exact_int
            ),
        );
        return Ok(None);
    }
    cx.rewritten(
        node,
        "reduce_prod → sign · exp(Σ log|x|), zeros and negatives counted apart",
    );
    let a: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let zero = x.compare_scalar(CompareOp::Equal, 0.0)?;
    let zeros = indicator(&zero)?.sum(&a, true)?;
    let negatives = indicator(&x.compare_scalar(CompareOp::Less, 0.0)?)?.sum(&a, true)?;
    let magnitude = zero
        .select(&scalar(1.0), &x.abs()?)?
        .log()?
        .sum(&a, true)?
        .exp()?;
    let half = negatives.mul_scalar(0.5)?;
    let odd = half.sub(&half.floor()?)?;
    let sign = odd.mul_scalar(-4.0)?.add_scalar(1.0)?;
    let alive = indicator(&zeros.compare_scalar(CompareOp::LessEqual, 0.5)?)?;
    let out = magnitude.mul(&sign)?.mul(&alive)?;
    if keepdims {
        return Ok(Some(out));
    }
    let shape: Vec<isize> = node.shape().iter().map(|&d| d as isize).collect();
    Ok(Some(out.reshape(&shape)?))
}

/// The largest axis a cumsum's triangular constant is built for.
pub const MAX_CUMSUM: usize = 4096;

/// cumsum → matmul with a 0/1 triangular constant along the axis.
pub fn cumsum(
    cx: &mut Cx,
    node: &Tensor,
    x: &Tensor,
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> Result<Option<Tensor>, GraphError> {
    let n = x.shape()[axis];
    if n > MAX_CUMSUM {
        cx.oversized(
            node,
            format!("cumsum over {n} > {MAX_CUMSUM} positions (the triangular constant is n²)"),
        );
        return Ok(None);
    }
    cx.rewritten(node, "cumsum → triangular matmul");
    let m = zero_one(n, n, |i, j| match (reverse, exclusive) {
        (false, false) => j <= i,
        (false, true) => j < i,
        (true, false) => j >= i,
        (true, true) => j > i,
    })?;
    Ok(Some(along_axis(x, &m, axis)?))
}

/// floor, ceil or round: ops after which the ANE mishandles a broadcast multiplier (negation
/// is emitted as a multiply by −1).
pub fn is_rounding(t: &Tensor) -> bool {
    matches!(
        t.op(),
        Op::Unary(UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round)
    )
}

/// Constants up to this many elements are expanded to full shape; larger ones are tiled.
const FULL_CONSTANT_MAX: usize = 65536;

/// A broadcast multiplier right after floor/ceil/round becomes a full-shape operand.
pub fn mul_after_rounding(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
) -> Result<Option<Tensor>, GraphError> {
    let rounded = is_rounding;
    let orig = node.srcs();
    let (keep, widen) = if rounded(&orig[0]) && srcs[1].len() < node.len() {
        (0, 1)
    } else if rounded(&orig[1]) && srcs[0].len() < node.len() {
        (1, 0)
    } else {
        return Ok(None);
    };
    cx.rewritten(
        node,
        "broadcast multiply after floor/ceil/round → full-shape operand",
    );
    let short = &srcs[widen];
    let full = match short.constant_value().and_then(|c| c.as_f32()) {
        Some(values) if node.len() <= FULL_CONSTANT_MAX => f32_const(
            node.shape(),
            broadcast_values(values, short.shape(), node.shape()),
        )?,
        _ => short.broadcast_to(node.shape())?,
    };
    let (a, b) = if keep == 0 {
        (&srcs[0], &full)
    } else {
        (&full, &srcs[1])
    };
    Ok(Some(a.mul(b)?))
}
