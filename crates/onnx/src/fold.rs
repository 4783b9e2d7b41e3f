//! Host evaluation of nodes whose inputs are all constants: shape arithmetic (`Shape`, `Gather`,
//! `Concat`, `Unsqueeze`, ...) folds here so that shapes are known when the graph is built.

use crate::error::{invalid, OpResult};
use crate::value::{Const, Data};

/// NumPy broadcasting of two shapes.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> OpResult<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => invalid(format!(
                "shapes {a:?} and {b:?} do not broadcast ({x} vs {y})"
            )),
        })
        .collect()
}

pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// For each element of `out_shape` in row-major order, the flat index of the element of
/// `shape` that broadcasts to it.
pub fn broadcast_indices(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let n: usize = out_shape.iter().product();
    let lift = out_shape.len() - shape.len();
    let src_strides = strides(shape);
    let out_strides = strides(out_shape);
    (0..n)
        .map(|flat| {
            let mut idx = 0;
            for (k, &d) in shape.iter().enumerate() {
                let coord = flat / out_strides[k + lift] % out_shape[k + lift];
                if d != 1 {
                    idx += coord * src_strides[k];
                }
            }
            idx
        })
        .collect()
}

impl Const {
    /// The elements at `indices` (flat), as an array of `shape`.
    pub(crate) fn take(&self, indices: &[usize], shape: Vec<usize>) -> OpResult<Const> {
        let data = match &self.data {
            Data::F32(v) => Data::F32(indices.iter().map(|&i| v[i]).collect()),
            Data::Int(v) => Data::Int(indices.iter().map(|&i| v[i]).collect()),
            Data::Bool(v) => Data::Bool(indices.iter().map(|&i| v[i]).collect()),
        };
        Const::new(shape, data)
    }

    pub(crate) fn reshaped(&self, shape: Vec<usize>) -> OpResult<Const> {
        Const::new(shape, self.data.clone())
    }

    pub(crate) fn broadcast_to(&self, shape: &[usize]) -> OpResult<Const> {
        self.take(&broadcast_indices(&self.shape, shape), shape.to_vec())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// The dtype of the operands.
    Same,
    Bool,
}

/// Elementwise over broadcast operands, computed in f64 (exact for the integers of shapes).
pub fn elementwise(args: &[&Const], out: Out, f: impl Fn(&[f64]) -> f64) -> OpResult<Const> {
    let mut shape: Vec<usize> = Vec::new();
    for a in args {
        shape = broadcast_shape(&shape, &a.shape)?;
    }
    let maps: Vec<Vec<usize>> = args
        .iter()
        .map(|a| broadcast_indices(&a.shape, &shape))
        .collect();
    let n: usize = shape.iter().product();
    let mut vals = vec![0f64; args.len()];
    let results: Vec<f64> = (0..n)
        .map(|i| {
            for (k, a) in args.iter().enumerate() {
                vals[k] = a.data.f64_at(maps[k][i]);
            }
            f(&vals)
        })
        .collect();
    let data = match (out, args.first().map(|a| &a.data)) {
        (Out::Bool, _) => Data::Bool(results.iter().map(|&x| x != 0.0).collect()),
        (Out::Same, Some(Data::Int(_))) => Data::Int(results.iter().map(|&x| x as i64).collect()),
        (Out::Same, Some(Data::Bool(_))) => Data::Bool(results.iter().map(|&x| x != 0.0).collect()),
        (Out::Same, _) => Data::F32(results.iter().map(|&x| x as f32).collect()),
    };
    Const::new(shape, data)
}
