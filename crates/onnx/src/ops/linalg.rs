//! Matrix products: `MatMul` (NumPy semantics, 1-D operands included), `Gemm`, `Einsum`; `Det`.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::Node;
use crate::value::Value;
use aneforge::graph::einsum as graph_einsum;
use aneforge::DType;

pub const OPS: &[(&str, Importer)] = &[
    ("MatMul", matmul),
    ("Gemm", gemm),
    ("Einsum", einsum),
    ("Det", det),
];

/// `Det` of `[..., M, M]` for M up to 3 by cofactor expansion.
fn det(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let r = x.rank();
    if r < 2 || x.shape()[r - 1] != x.shape()[r - 2] || x.dtype() != DType::F32 {
        return invalid(format!(
            "{} input of shape {:?} (float [..., M, M])",
            x.dtype(),
            x.shape()
        ));
    }
    let m = x.shape()[r - 1];
    if m > 3 {
        return unsupported(format!("{m}×{m} matrices (up to 3×3)"));
    }
    let lead: Vec<isize> = x.shape()[..r - 2].iter().map(|&d| d as isize).collect();
    let mut flat_shape = lead.clone();
    flat_shape.push((m * m) as isize);
    let flat = x.reshape(&flat_shape)?;
    let e = |i: usize, j: usize| -> OpResult<aneforge::Tensor> {
        let pick = crate::value::Const::ints(vec![], vec![(i * m + j) as i64])?.to_tensor()?;
        Ok(flat.gather(&pick, (r - 2) as isize)?)
    };
    let minor = |a: usize, b: usize, c: usize, d: usize| -> OpResult<aneforge::Tensor> {
        // the 2×2 determinant of rows (a, c) and columns (b, d) given as entries
        let (rows, cols) = ([a, c], [b, d]);
        Ok(e(rows[0], cols[0])?
            .mul(&e(rows[1], cols[1])?)?
            .sub(&e(rows[0], cols[1])?.mul(&e(rows[1], cols[0])?)?)?)
    };
    let y = match m {
        1 => e(0, 0)?,
        2 => minor(0, 0, 1, 1)?,
        _ => e(0, 0)?
            .mul(&minor(1, 1, 2, 2)?)?
            .sub(&e(0, 1)?.mul(&minor(1, 0, 2, 2)?)?)?
            .add(&e(0, 2)?.mul(&minor(1, 0, 2, 1)?)?)?,
    };
    tensor(y)
}

fn matmul(n: &Node) -> OpResult<Vec<Value>> {
    let (mut a, mut b) = (n.tensor(0)?, n.tensor(1)?);
    if a.dtype() != DType::F32 || b.dtype() != DType::F32 {
        return unsupported(format!("MatMul of {} and {}", a.dtype(), b.dtype()));
    }
    let (vec_a, vec_b) = (a.rank() == 1, b.rank() == 1);
    if vec_a {
        a = a.expand_dims(&[0])?;
    }
    if vec_b {
        b = b.expand_dims(&[1])?;
    }
    let mut y = a.matmul(&b)?;
    if vec_b {
        y = y.squeeze(&[-1])?;
    }
    if vec_a {
        y = y.squeeze(&[-2])?;
    }
    tensor(y)
}

fn gemm(n: &Node) -> OpResult<Vec<Value>> {
    let (a, b) = (n.tensor(0)?, n.tensor(1)?);
    if a.rank() != 2 || b.rank() != 2 {
        return invalid(format!(
            "A and B must be matrices, got shapes {:?} and {:?}",
            a.shape(),
            b.shape()
        ));
    }
    let alpha = n.attr_f("alpha", 1.0);
    let beta = n.attr_f("beta", 1.0);
    let ta = n.attr_i("transA", 0) != 0;
    let tb = n.attr_i("transB", 0) != 0;
    let mut y = if !ta && tb && b.constant_value().is_some() {
        a.linear(&b, None)?
    } else {
        a.matmul_t(&b, ta, tb)?
    };
    if alpha != 1.0 {
        y = y.mul_scalar(alpha)?;
    }
    if let Some(c) = n.opt_tensor(2)? {
        let c = if beta != 1.0 { c.mul_scalar(beta)? } else { c };
        y = y.add(&c)?;
    }
    tensor(y)
}

fn einsum(n: &Node) -> OpResult<Vec<Value>> {
    let equation = n.attr_s("equation", "");
    let operands = (0..n.n_inputs())
        .map(|i| n.tensor(i))
        .collect::<OpResult<Vec<_>>>()?;
    let refs: Vec<&aneforge::Tensor> = operands.iter().collect();
    match graph_einsum(&equation.replace(' ', ""), &refs) {
        Ok(t) => tensor(t),
        Err(e) => unsupported(format!("equation {equation:?}: {e}")),
    }
}
