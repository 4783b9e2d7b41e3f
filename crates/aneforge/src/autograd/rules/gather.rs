//! Gathers.

use super::Grads;
use crate::autograd::shape_isize;
use crate::autograd::util::iota;
use crate::graph::{constant, DType, GraphError, HostArray, Tensor};

/// `[x, indices]`: rows of `g` summed into the positions they were gathered from, as a product
/// with the one-hot matrix of the indices (negative indices count from the end).
pub(super) fn gather(s: &[Tensor], axis: usize, g: &Tensor) -> Result<Grads, GraphError> {
    let (x, idx) = (&s[0], &s[1]);
    let xs = x.shape();
    let d = xs[axis];
    let n = idx.len();
    let outer: usize = xs[..axis].iter().product();
    let inner: usize = xs[axis + 1..].iter().product();
    let flat = idx.reshape(&[n as isize, 1])?;
    let positions = iota(d, &[1, d])?;
    let from_end = positions.sub(&constant(HostArray::scalar_i32(d as i32)))?;
    let hot = flat
        .eq(&positions)?
        .cast(DType::F32)?
        .add(&flat.eq(&from_end)?.cast(DType::F32)?)?;
    let g3 = g.reshape(&[outer as isize, n as isize, inner as isize])?;
    let dx = hot.matmul_t(&g3, true, false)?.reshape(&shape_isize(xs))?;
    Ok(vec![Some(dx), None])
}
