//! Elementwise ops: activations and math functions, clipping, binary arithmetic with
//! broadcasting, and `select`.

use super::Grads;
use crate::autograd::util::sum_to;
use crate::graph::{scalar, BinaryOp, CompareOp, DType, GraphError, Tensor, UnaryOp};
use std::f64::consts::{FRAC_2_SQRT_PI, PI, SQRT_2};

/// `cond ? g : 0`.
fn keep_where(cond: &Tensor, g: &Tensor) -> Result<Tensor, GraphError> {
    cond.select(g, &scalar(0.0))
}

/// The gradient of `y = op(x)`; `None` for the piecewise-constant ops.
pub(super) fn unary(
    op: UnaryOp,
    x: &Tensor,
    y: &Tensor,
    g: &Tensor,
) -> Result<Option<Tensor>, GraphError> {
    let grad = match op {
        UnaryOp::Relu => keep_where(&x.compare_scalar(CompareOp::Greater, 0.0)?, g)?,
        UnaryOp::Gelu => {
            // Φ(x) + x·φ(x)
            let cdf = x
                .mul_scalar((1.0 / SQRT_2) as f32)?
                .erf()?
                .add_scalar(1.0)?
                .mul_scalar(0.5)?;
            let pdf = x
                .square()?
                .mul_scalar(-0.5)?
                .exp()?
                .mul_scalar((1.0 / (2.0 * PI).sqrt()) as f32)?;
            g.mul(&cdf.add(&x.mul(&pdf)?)?)?
        }
        UnaryOp::GeluTanh => {
            let k = (2.0 / PI).sqrt() as f32;
            let c = 0.044715f32;
            let x2 = x.square()?;
            let inner = x.mul(&x2.mul_scalar(c)?.add_scalar(1.0)?)?.mul_scalar(k)?;
            let t = inner.tanh()?;
            let sech2 = t.square()?.neg()?.add_scalar(1.0)?;
            let dinner = x2.mul_scalar(3.0 * c)?.add_scalar(1.0)?.mul_scalar(k)?;
            let d = t
                .add_scalar(1.0)?
                .mul_scalar(0.5)?
                .add(&x.mul(&sech2)?.mul(&dinner)?.mul_scalar(0.5)?)?;
            g.mul(&d)?
        }
        UnaryOp::Silu => {
            let s = x.sigmoid()?;
            let d = s.mul(&x.mul(&s.neg()?.add_scalar(1.0)?)?.add_scalar(1.0)?)?;
            g.mul(&d)?
        }
        UnaryOp::Sigmoid => g.mul(&y.mul(&y.neg()?.add_scalar(1.0)?)?)?,
        UnaryOp::Tanh => g.mul(&y.square()?.neg()?.add_scalar(1.0)?)?,
        UnaryOp::Exp => g.mul(y)?,
        UnaryOp::Log => g.div(x)?,
        UnaryOp::Sqrt => g.mul_scalar(0.5)?.div(y)?,
        UnaryOp::Rsqrt => g.mul(&y.square()?.mul(y)?.mul_scalar(-0.5)?)?,
        UnaryOp::Abs => g.mul(&x.sign()?)?,
        UnaryOp::Neg => g.neg()?,
        UnaryOp::Square => g.mul(&x.mul_scalar(2.0)?)?,
        UnaryOp::Sin => g.mul(&x.cos()?)?,
        UnaryOp::Cos => g.mul(&x.sin()?.neg()?)?,
        UnaryOp::Erf => g.mul(
            &x.square()?
                .neg()?
                .exp()?
                .mul_scalar(FRAC_2_SQRT_PI as f32)?,
        )?,
        UnaryOp::Softplus => g.mul(&x.sigmoid()?)?,
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Sign => return Ok(None),
    };
    Ok(Some(grad))
}

/// Gradient passes where `min <= x <= max` (PyTorch `clamp`).
pub(super) fn clip(x: &Tensor, g: &Tensor, min: f32, max: f32) -> Result<Tensor, GraphError> {
    let inside = keep_where(&x.compare_scalar(CompareOp::LessEqual, max)?, g)?;
    keep_where(&x.compare_scalar(CompareOp::GreaterEqual, min)?, &inside)
}

/// The clipped straight-through estimator (PyTorch's `fake_quantize_per_tensor_affine`): `g`
/// where `round(x / scale)` lies in the int8 range, zero where the quantizer saturates.
pub(super) fn fake_quant(x: &Tensor, g: &Tensor, scale: f32) -> Result<Tensor, GraphError> {
    let q = x.div(&crate::graph::scalar(scale))?.round()?;
    let inside = keep_where(&q.compare_scalar(CompareOp::LessEqual, 127.0)?, g)?;
    keep_where(&q.compare_scalar(CompareOp::GreaterEqual, -128.0)?, &inside)
}

pub(super) fn leaky_relu(x: &Tensor, g: &Tensor, alpha: f32) -> Result<Tensor, GraphError> {
    x.compare_scalar(CompareOp::Greater, 0.0)?
        .select(g, &g.mul_scalar(alpha)?)
}

pub(super) fn elu(x: &Tensor, g: &Tensor, alpha: f32) -> Result<Tensor, GraphError> {
    let negative = g.mul(&x.exp()?.mul_scalar(alpha)?)?;
    x.compare_scalar(CompareOp::Greater, 0.0)?
        .select(g, &negative)
}

/// 1 where `a` wins, ½ on ties (PyTorch `maximum`/`minimum`), as f32.
fn winner_share(a: &Tensor, b: &Tensor, op: CompareOp) -> Result<Tensor, GraphError> {
    let wins = a.compare(op, b)?.cast(DType::F32)?;
    let ties = a.eq(b)?.cast(DType::F32)?.mul_scalar(0.5)?;
    wins.add(&ties)
}

pub(super) fn binary(
    op: BinaryOp,
    a: &Tensor,
    b: &Tensor,
    y: &Tensor,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let (ga, gb): (Option<Tensor>, Option<Tensor>) = match op {
        BinaryOp::Add => (Some(g.clone()), Some(g.clone())),
        BinaryOp::Sub => (Some(g.clone()), wants[1].then(|| g.neg()).transpose()?),
        BinaryOp::Mul => (
            wants[0].then(|| g.mul(b)).transpose()?,
            wants[1].then(|| g.mul(a)).transpose()?,
        ),
        BinaryOp::Div => {
            let ga = g.div(b)?;
            let gb = if wants[1] {
                Some(ga.mul(y)?.neg()?)
            } else {
                None
            };
            (Some(ga), gb)
        }
        BinaryOp::Pow => {
            let ga = if wants[0] {
                Some(g.mul(&b.mul(&a.pow(&b.sub_scalar(1.0)?)?)?)?)
            } else {
                None
            };
            // d/db a^b = a^b·ln a, taken as 0 where a <= 0.
            let gb = if wants[1] {
                let positive = a.compare_scalar(CompareOp::Greater, 0.0)?;
                let safe_log = positive.select(a, &scalar(1.0))?.log()?;
                Some(g.mul(&y.mul(&safe_log)?)?)
            } else {
                None
            };
            (ga, gb)
        }
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let cmp = if op == BinaryOp::Maximum {
                CompareOp::Greater
            } else {
                CompareOp::Less
            };
            let share = winner_share(a, b, cmp)?;
            let ga = g.mul(&share)?;
            let gb = if wants[1] { Some(g.sub(&ga)?) } else { None };
            (Some(ga), gb)
        }
    };
    Ok(vec![
        ga.filter(|_| wants[0])
            .map(|t| sum_to(&t, a.shape()))
            .transpose()?,
        gb.filter(|_| wants[1])
            .map(|t| sum_to(&t, b.shape()))
            .transpose()?,
    ])
}

/// `[cond, a, b]`: the gradient goes to `a` where `cond` holds and to `b` elsewhere.
pub(super) fn select(s: &[Tensor], g: &Tensor, wants: &[bool]) -> Result<Grads, GraphError> {
    let zero = scalar(0.0);
    let ga = if wants[1] {
        Some(sum_to(&s[0].select(g, &zero)?, s[1].shape())?)
    } else {
        None
    };
    let gb = if wants[2] {
        Some(sum_to(&s[0].select(&zero, g)?, s[2].shape())?)
    } else {
        None
    };
    Ok(vec![None, ga, gb])
}
