//! Contractions: matmul and linear.

use super::Grads;
use crate::autograd::util::sum_to;
use crate::graph::{GraphError, Tensor};

pub(super) fn matmul(
    a: &Tensor,
    b: &Tensor,
    ta: bool,
    tb: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let ga = if wants[0] {
        let d = match (ta, tb) {
            (false, false) => g.matmul_t(b, false, true)?,
            (false, true) => g.matmul_t(b, false, false)?,
            (true, false) => b.matmul_t(g, false, true)?,
            (true, true) => b.matmul_t(g, true, true)?,
        };
        Some(sum_to(&d, a.shape())?)
    } else {
        None
    };
    let gb = if wants[1] {
        let d = match (ta, tb) {
            (false, false) => a.matmul_t(g, true, false)?,
            (false, true) => g.matmul_t(a, true, false)?,
            (true, false) => a.matmul_t(g, false, false)?,
            (true, true) => g.matmul_t(a, true, true)?,
        };
        Some(sum_to(&d, b.shape())?)
    } else {
        None
    };
    Ok(vec![ga, gb])
}

/// `[x[..., in], w[out, in], b[out]?]`.
pub(super) fn linear(
    s: &[Tensor],
    has_bias: bool,
    g: &Tensor,
    wants: &[bool],
) -> Result<Grads, GraphError> {
    let (x, w) = (&s[0], &s[1]);
    let (out_f, in_f) = (w.shape()[0] as isize, w.shape()[1] as isize);
    let mut grads = vec![None; s.len()];
    if wants[0] {
        let gx = if x.rank() == 1 {
            g.reshape(&[1, out_f])?.matmul(w)?.reshape(&[in_f])?
        } else {
            g.matmul(w)?
        };
        grads[0] = Some(gx);
    }
    let g2 = g.reshape(&[-1, out_f])?;
    if wants[1] {
        let x2 = x.reshape(&[-1, in_f])?;
        grads[1] = Some(g2.matmul_t(&x2, true, false)?);
    }
    if has_bias && wants[2] {
        grads[2] = Some(g2.sum(&[0], false)?);
    }
    Ok(grads)
}
