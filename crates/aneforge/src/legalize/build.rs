//! Small graph builders the rules share: index ramps, 0/1 matrices, and a matmul applied along
//! one axis.

use crate::graph::{constant, DType, GraphError, HostArray, Tensor};

/// An f32 constant.
pub fn f32_const(shape: &[usize], data: Vec<f32>) -> Result<Tensor, GraphError> {
    Ok(constant(HostArray::from_f32(shape, data)?))
}

/// `0, 1, …, n−1` as f32, laid along `axis` of a rank-`rank` tensor (size 1 elsewhere).
pub fn ramp(n: usize, rank: usize, axis: usize) -> Result<Tensor, GraphError> {
    let mut shape = vec![1; rank];
    shape[axis] = n;
    f32_const(&shape, (0..n).map(|i| i as f32).collect())
}

/// `cond ? 1 : 0` as f32 (a cast: coremltools infers `select`'s shape from its branches only).
pub fn indicator(cond: &Tensor) -> Result<Tensor, GraphError> {
    cond.cast(DType::F32)
}

/// A constant `[rows, cols]` 0/1 matrix.
pub fn zero_one(
    rows: usize,
    cols: usize,
    f: impl Fn(usize, usize) -> bool,
) -> Result<Tensor, GraphError> {
    let data = (0..rows)
        .flat_map(|i| (0..cols).map(move |j| (i, j)))
        .map(|(i, j)| if f(i, j) { 1.0 } else { 0.0 })
        .collect();
    f32_const(&[rows, cols], data)
}

/// `out[.., i, ..] = Σ_j m[i, j] · x[.., j, ..]` along `axis`: `m` is `[k, n]` with `n` the
/// size of `axis`; the result has `k` there.
pub fn along_axis(x: &Tensor, m: &Tensor, axis: usize) -> Result<Tensor, GraphError> {
    let r = x.rank();
    if r == 1 {
        let n = x.shape()[0] as isize;
        let k = m.shape()[0] as isize;
        return m.matmul(&x.reshape(&[n, 1])?)?.reshape(&[k]);
    }
    if axis + 1 == r {
        return x.matmul_t(m, false, true);
    }
    let moved = x.swap_axes(axis as isize, r as isize - 2)?;
    m.matmul(&moved)?.swap_axes(axis as isize, r as isize - 2)
}

/// `values` (row-major over `from`) broadcast to `to` (NumPy rules; `from` fits `to`).
pub fn broadcast_values(values: &[f32], from: &[usize], to: &[usize]) -> Vec<f32> {
    let off = to.len() - from.len();
    let n: usize = to.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; to.len()];
    for _ in 0..n {
        let mut flat = 0usize;
        for (a, &d) in from.iter().enumerate() {
            let i = if d == 1 { 0 } else { idx[a + off] };
            flat = flat * d + i;
        }
        out.push(values[flat]);
        for a in (0..to.len()).rev() {
            idx[a] += 1;
            if idx[a] < to[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_values_follows_numpy() {
        assert_eq!(
            broadcast_values(&[1.0, 2.0], &[2, 1], &[2, 3]),
            [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
        );
        assert_eq!(
            broadcast_values(&[1.0, 2.0, 3.0], &[3], &[2, 3]),
            [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
        );
        assert_eq!(broadcast_values(&[7.0], &[], &[2]), [7.0, 7.0]);
    }
}
