//! Reductions, softmax and normalisations.

use super::Grads;
use crate::autograd::shape_isize;
use crate::autograd::util::{keep_shape, unreduce};
use crate::graph::{scalar, CompareOp, DType, GraphError, ReduceOp, Tensor};

pub(super) fn reduce(
    op: ReduceOp,
    x: &Tensor,
    y: &Tensor,
    axes: &[usize],
    g: &Tensor,
) -> Result<Tensor, GraphError> {
    let count: usize = axes.iter().map(|&a| x.shape()[a]).product();
    match op {
        ReduceOp::Sum => unreduce(g, x.shape(), axes),
        ReduceOp::Mean => unreduce(&g.mul_scalar(1.0 / count as f32)?, x.shape(), axes),
        // ∂/∂xᵢ Πⱼxⱼ = Π_{j≠i} xⱼ, without dividing by zero: with no zero in the row it is
        // prod/xᵢ; with exactly one zero only that position gets the product of the others.
        ReduceOp::Prod => {
            let keep = shape_isize(&keep_shape(x.shape(), axes));
            let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
            let zero = x.compare_scalar(CompareOp::Equal, 0.0)?;
            let nonzero = zero.select(&scalar(1.0), x)?;
            let p = nonzero.reduce(ReduceOp::Prod, &ax, true)?;
            let zeros = zero.cast(DType::F32)?.sum(&ax, true)?;
            let only_zero = zeros.compare_scalar(CompareOp::Equal, 1.0)?;
            let no_zero = zeros.compare_scalar(CompareOp::Equal, 0.0)?;
            let at_zero = only_zero.select(&p, &scalar(0.0))?;
            let elsewhere = no_zero.select(&p.div(&nonzero)?, &scalar(0.0))?;
            let others = zero.select(&at_zero, &elsewhere)?;
            g.reshape(&keep)?.mul(&others)
        }
        // The gradient is shared equally among tied extrema (PyTorch `amax`/`amin`).
        ReduceOp::Max | ReduceOp::Min => {
            let keep = shape_isize(&keep_shape(x.shape(), axes));
            let hits = x.eq(&y.reshape(&keep)?)?.cast(DType::F32)?;
            let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
            let share = g.reshape(&keep)?.div(&hits.sum(&ax, true)?)?;
            hits.mul(&share)
        }
    }
}

/// `y·(g − Σ g·y)` along `axis`.
pub(super) fn softmax(y: &Tensor, axis: usize, g: &Tensor) -> Result<Tensor, GraphError> {
    let dot = g.mul(y)?.sum(&[axis as isize], true)?;
    y.mul(&g.sub(&dot)?)
}

/// `[x, gamma?, beta?]` normalised over `axes`; gamma and beta have the shape of those axes.
pub(super) fn layer_norm(
    s: &[Tensor],
    axes: &[usize],
    eps: f32,
    has_gamma: bool,
    has_beta: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let x = &s[0];
    let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let others: Vec<isize> = (0..x.rank() as isize).filter(|a| !ax.contains(a)).collect();
    let affine_shape: Vec<isize> = (0..x.rank())
        .map(|i| {
            if axes.contains(&i) {
                x.shape()[i] as isize
            } else {
                1
            }
        })
        .collect();
    let centered = x.sub(&x.mean(&ax, true)?)?;
    let rstd = centered
        .square()?
        .mean(&ax, true)?
        .add_scalar(eps)?
        .rsqrt()?;
    let xhat = centered.mul(&rstd)?;
    let gamma = has_gamma.then(|| &s[1]);
    let beta_at = 1 + usize::from(has_gamma);
    let reduce_others = |t: &Tensor, like: &Tensor| -> Result<Tensor, GraphError> {
        let summed = if others.is_empty() {
            t.clone()
        } else {
            t.sum(&others, true)?
        };
        summed.reshape(&shape_isize(like.shape()))
    };
    let mut grads = vec![None; s.len()];
    if wants[0] {
        let dxhat = match gamma {
            Some(gm) => g.mul(&gm.reshape(&affine_shape)?)?,
            None => g.clone(),
        };
        let mean_d = dxhat.mean(&ax, true)?;
        let mean_dx = dxhat.mul(&xhat)?.mean(&ax, true)?;
        let dx = rstd.mul(&dxhat.sub(&mean_d)?.sub(&xhat.mul(&mean_dx)?)?)?;
        grads[0] = Some(dx);
    }
    if let Some(gm) = gamma {
        if wants[1] {
            grads[1] = Some(reduce_others(&g.mul(&xhat)?, gm)?);
        }
    }
    if has_beta && wants[beta_at] {
        grads[beta_at] = Some(reduce_others(g, &s[beta_at])?);
    }
    Ok(grads)
}

/// `[x[N, C, *S], mean[C], var[C], gamma[C]?, beta[C]?]` with fixed statistics.
pub(super) fn batch_norm(
    s: &[Tensor],
    eps: f32,
    has_gamma: bool,
    has_beta: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let x = &s[0];
    let mut per_channel = vec![x.shape()[1] as isize];
    per_channel.extend(std::iter::repeat_n(1, x.rank() - 2));
    let c = |t: &Tensor| t.reshape(&per_channel);
    let not_channel: Vec<isize> = (0..x.rank() as isize).filter(|&a| a != 1).collect();
    let per_c = |t: &Tensor| t.sum(&not_channel, false);
    let inv = c(&s[2])?.add_scalar(eps)?.rsqrt()?;
    let centered = x.sub(&c(&s[1])?)?;
    let gamma = if has_gamma { Some(c(&s[3])?) } else { None };
    let beta_at = 3 + usize::from(has_gamma);
    let g_scaled = match &gamma {
        Some(gm) => g.mul(gm)?,
        None => g.clone(),
    };
    let mut grads = vec![None; s.len()];
    if wants[0] {
        grads[0] = Some(g_scaled.mul(&inv)?);
    }
    if wants[1] {
        grads[1] = Some(
            per_c(&g_scaled)?
                .mul(&s[2].add_scalar(eps)?.rsqrt()?)?
                .neg()?,
        );
    }
    if wants[2] {
        let cube = inv.mul(&inv)?.mul(&inv)?;
        grads[2] = Some(per_c(&g_scaled.mul(&centered)?.mul(&cube)?)?.mul_scalar(-0.5)?);
    }
    if has_gamma && wants[3] {
        grads[3] = Some(per_c(&g.mul(&centered.mul(&inv)?)?)?);
    }
    if has_beta && wants[beta_at] {
        grads[beta_at] = Some(per_c(g)?);
    }
    Ok(grads)
}
