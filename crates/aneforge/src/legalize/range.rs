//! fp16 range rules: normalisations whose intermediates leave fp16's range at realistic activation
//! sizes are computed on a row rescaled by its own magnitude.
//!
//! fp16 holds at most 65504, so `x²` overflows once |x| > 256, and the sum of squares of a row of
//! LLM hidden states (|h| reaches 1e4 and more) is far out of range even when every element is not.
//! Each rule divides the row by `d = max|x| / t` (a per-row scalar, with `t` chosen so the
//! reduction of the rescaled squares stays below 32768 even if the hardware accumulated in fp16),
//! reduces the rescaled row, and folds `eps` into the rescaled domain as `(√eps / d)²`:
//!
//! ```text
//! x · rsqrt(mean(x²) + eps)     =  (x/d) · rsqrt(mean((x/d)²) + (√eps/d)²)
//! x / max(√Σx², eps)            =  (x/d) / max(√Σ(x/d)², eps/d)
//! layer_norm(x)                 =  c · rsqrt(mean(c²) + (√eps/d)²),  c = x/d − mean(x/d)
//! ```
//!
//! `d` is floored at `√eps / 16` (so the eps term stays ≤ 256) and at 2⁻²⁴. Patterns are matched on
//! the graph as model code and importers build it (`rms_norm`, `l2_normalize`, ONNX-style
//! `x / sqrt(mean(x²) + eps)`), so every family that composes them is covered.

use super::Cx;
use crate::graph::{topo_order, BinaryOp, GraphError, Op, ReduceOp, Tensor, UnaryOp};

/// The largest value a rescaled sum of `n` squares may reach (half of fp16's maximum).
const SUM_BOUND: f64 = 32768.0;

/// The smallest `d`: below it the division would leave fp16's normal range.
const MIN_SCALE: f32 = 1.0 / (1u32 << 24) as f32;

/// `(d, x/d)` for a row reduced over `axes`, with `max|x/d| = t`.
fn rescale(x: &Tensor, axes: &[usize], t: f64, eps: f32) -> Result<(Tensor, Tensor), GraphError> {
    let axes: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let floor = (eps.max(0.0).sqrt() / 16.0).max(MIN_SCALE);
    let d = x
        .abs()?
        .max(&axes, true)?
        .mul_scalar((1.0 / t) as f32)?
        .maximum_scalar(floor)?;
    let xs = x.div(&d)?;
    Ok((d, xs))
}

/// `t` such that `n · (k·t)² ≤ SUM_BOUND`, where `k` bounds |element| / max|x/d| after the
/// rule's own arithmetic (1 for squares of the row, 2 for squares of a centred row).
fn target(n: usize, k: f64) -> f64 {
    (SUM_BOUND / n.max(1) as f64).sqrt() / k
}

/// `(√eps / d)²`, the eps of the rescaled row.
fn scaled_eps(d: &Tensor, eps: f32) -> Result<Tensor, GraphError> {
    let e = d.recip()?.mul_scalar(eps.max(0.0).sqrt())?;
    e.mul(&e)
}

/// `y` if `sq` is `x²` (`square(x)` or `mul(x, x)`).
fn squared_operand(sq: &Tensor) -> Option<Tensor> {
    match sq.op() {
        Op::Unary(UnaryOp::Square) => Some(sq.srcs()[0].clone()),
        Op::Binary(BinaryOp::Mul) if sq.srcs()[0] == sq.srcs()[1] => Some(sq.srcs()[0].clone()),
        _ => None,
    }
}

/// The value of a one-element f32 constant.
fn scalar_of(t: &Tensor) -> Option<f32> {
    let v = t.constant_value()?.as_f32()?;
    (v.len() == 1).then(|| v[0])
}

/// `(x, reduce op, axes, eps)` when `t` is `reduce(x², axes, keepdims) [+ eps]`.
fn reduce_of_squares(t: &Tensor) -> Option<(Tensor, ReduceOp, Vec<usize>, f32)> {
    let (r, eps) = match t.op() {
        Op::Binary(BinaryOp::Add) => {
            let [a, b] = [&t.srcs()[0], &t.srcs()[1]];
            match (scalar_of(a), scalar_of(b)) {
                (_, Some(e)) => (a.clone(), e),
                (Some(e), _) => (b.clone(), e),
                _ => return None,
            }
        }
        _ => (t.clone(), 0.0),
    };
    match r.op() {
        Op::Reduce {
            op: op @ (ReduceOp::Mean | ReduceOp::Sum),
            axes,
            keepdims: true,
        } => Some((squared_operand(&r.srcs()[0])?, *op, axes.clone(), eps)),
        _ => None,
    }
}

/// `reduce(x, axes, keepdims = true)` for a sum or mean, over the last axis in two stages (groups
/// of about √n, then across groups) when that axis alone is reduced and factors, so that no
/// running sum covers more than about √n terms (fp16 accumulators lose a bit per doubling).
fn reduce_in_pieces(x: &Tensor, op: ReduceOp, axes: &[usize]) -> Result<Tensor, GraphError> {
    let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let rank = x.rank();
    let n = reduced(x, axes);
    let inner = (2..=n.isqrt())
        .rev()
        .find(|b| n.is_multiple_of(*b))
        .unwrap_or(1);
    if axes != [rank - 1] || inner < 8 || rank >= crate::graph::MAX_RANK {
        return x.reduce(op, &ax, true);
    }
    let mut split: Vec<isize> = x.shape()[..rank - 1].iter().map(|&d| d as isize).collect();
    split.extend([(n / inner) as isize, inner as isize]);
    let first = x.reshape(&split)?.reduce(op, &[rank as isize], false)?;
    first.reduce(op, &[rank as isize - 1], true)
}

/// The number of elements `axes` of `x` reduce.
fn reduced(x: &Tensor, axes: &[usize]) -> usize {
    axes.iter().map(|&a| x.shape()[a]).product()
}

/// `x · rsqrt(reduce(x²) + eps)` and `x / sqrt(reduce(x²) + eps)` (RMSNorm, and a sum-reduced
/// L2 normalisation with eps inside the root), with `x` on either side of a `mul`.
pub fn rms_norm(cx: &mut Cx, node: &Tensor, srcs: &[Tensor]) -> Result<Option<Tensor>, GraphError> {
    let orig = node.srcs();
    let (wanted, sides): (UnaryOp, &[(usize, usize)]) = match node.op() {
        Op::Binary(BinaryOp::Mul) => (UnaryOp::Rsqrt, &[(0, 1), (1, 0)]),
        Op::Binary(BinaryOp::Div) => (UnaryOp::Sqrt, &[(0, 1)]),
        _ => return Ok(None),
    };
    for &(xi, ri) in sides {
        let r = &orig[ri];
        if !matches!(r.op(), Op::Unary(u) if *u == wanted) {
            continue;
        }
        let Some((x, op, axes, eps)) = reduce_of_squares(&r.srcs()[0]) else {
            continue;
        };
        if x != orig[xi] {
            continue;
        }
        let x = &srcs[xi];
        let n = reduced(x, &axes);
        let (d, xs) = rescale(x, &axes, target(n, 1.0), eps)?;
        let red = reduce_in_pieces(&xs.mul(&xs)?, op, &axes)?;
        let inner = if eps > 0.0 {
            red.add(&scaled_eps(&d, eps)?)?
        } else {
            red
        };
        cx.rewritten(
            node,
            format!(
                "x·rsqrt({}(x²)+eps) over {n} values → fp16-safe rescaled row",
                op.name()
            ),
        );
        let out = match wanted {
            UnaryOp::Rsqrt => xs.mul(&inner.rsqrt()?)?,
            _ => xs.div(&inner.sqrt()?)?,
        };
        return Ok(Some(out));
    }
    Ok(None)
}

/// `x / max(sqrt(Σx²), eps)` (`l2_normalize`, PyTorch's `F.normalize`).
pub fn l2_normalize(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
) -> Result<Option<Tensor>, GraphError> {
    if !matches!(node.op(), Op::Binary(BinaryOp::Div)) {
        return Ok(None);
    }
    let (x, den) = (&node.srcs()[0], &node.srcs()[1]);
    let Op::Binary(BinaryOp::Maximum) = den.op() else {
        return Ok(None);
    };
    let (root, floor) = match (scalar_of(&den.srcs()[0]), scalar_of(&den.srcs()[1])) {
        (_, Some(e)) => (&den.srcs()[0], e),
        (Some(e), _) => (&den.srcs()[1], e),
        _ => return Ok(None),
    };
    if !matches!(root.op(), Op::Unary(UnaryOp::Sqrt)) {
        return Ok(None);
    }
    let Some((y, op, axes, eps)) = reduce_of_squares(&root.srcs()[0]) else {
        return Ok(None);
    };
    if op != ReduceOp::Sum || eps != 0.0 || &y != x {
        return Ok(None);
    }
    let x = &srcs[0];
    let n = reduced(x, &axes);
    let (d, xs) = rescale(x, &axes, target(n, 1.0), 0.0)?;
    let norm = reduce_in_pieces(&xs.mul(&xs)?, ReduceOp::Sum, &axes)?.sqrt()?;
    let floor = d.recip()?.mul_scalar(floor)?;
    cx.rewritten(
        node,
        format!("x/max(‖x‖, eps) over {n} values → fp16-safe rescaled row"),
    );
    Ok(Some(xs.div(&norm.maximum(&floor)?)?))
}

/// `layer_norm` as rescaled arithmetic; `gamma`/`beta` (constants after canonicalization) are
/// applied after. Kept as one `layer_norm` op over the rescaled row, the op's own sums would be
/// out of the compiler's hands: with fp16 running sums, a mean over 1024 values of a row whose
/// mean is 7.5 standard deviations from 0 came out 20% wrong; in pieces it stays within 2%.
pub fn layer_norm(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
) -> Result<Option<Tensor>, GraphError> {
    let Op::LayerNorm {
        axes,
        eps,
        has_gamma,
        has_beta,
    } = node.op()
    else {
        return Ok(None);
    };
    let x = &srcs[0];
    let n = reduced(x, axes);
    let (d, xs) = rescale(x, axes, target(n, 2.0), *eps)?;
    let centred = xs.sub(&reduce_in_pieces(&xs, ReduceOp::Mean, axes)?)?;
    let var = reduce_in_pieces(&centred.mul(&centred)?, ReduceOp::Mean, axes)?;
    let out = centred
        .mul(&var.add(&scaled_eps(&d, *eps)?)?.rsqrt()?)?
        .layer_norm_affine(axes, *has_gamma, *has_beta, &srcs[1..])?;
    cx.rewritten(
        node,
        format!("layer_norm over {n} values → fp16-safe rescaled arithmetic"),
    );
    Ok(Some(out))
}

/// `y` was divided by a per-row magnitude (the operand the rules above build).
fn is_rescaled(y: &Tensor) -> bool {
    matches!(y.op(), Op::Binary(BinaryOp::Div))
        && matches!(y.srcs()[1].op(), Op::Binary(BinaryOp::Maximum))
}

/// Preflight notes for what the rules could not make range-safe in the legalized graph: sums of
/// squares of rows that were not rescaled, and `exp` of values not shifted by their maximum.
pub fn note_unscaled(cx: &mut Cx, outputs: &[Tensor]) {
    for node in topo_order(outputs) {
        match node.op() {
            Op::Reduce {
                op: op @ (ReduceOp::Sum | ReduceOp::Mean),
                axes,
                ..
            } => {
                let Some(y) = squared_operand(&node.srcs()[0]) else {
                    continue;
                };
                if is_rescaled(&y) {
                    continue;
                }
                let n = reduced(&y, axes).max(1);
                let limit = (65504.0 / n as f64).sqrt();
                cx.note(
                    &node,
                    format!(
                        "{} of squares over {n} values is not rescaled: fp16 overflows once \
                         |x| exceeds {limit:.0} (run `aneforge check-fp16` on real inputs)",
                        op.name()
                    ),
                );
            }
            Op::Unary(UnaryOp::Exp) => {
                let x = &node.srcs()[0];
                let shifted = matches!(x.op(), Op::Binary(BinaryOp::Sub))
                    && matches!(
                        x.srcs()[1].op(),
                        Op::Reduce {
                            op: ReduceOp::Max,
                            ..
                        }
                    );
                if !shifted {
                    cx.note(
                        &node,
                        "exp of an unshifted value: fp16 overflows for inputs above 11.09",
                    );
                }
            }
            _ => {}
        }
    }
}
