//! Matrix products: `MatMul` (NumPy semantics, 1-D operands included), `Gemm`, `Einsum`.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::Node;
use crate::value::Value;
use aneforge::graph::einsum as graph_einsum;
use aneforge::DType;

pub const OPS: &[(&str, Importer)] = &[("MatMul", matmul), ("Gemm", gemm), ("Einsum", einsum)];

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
