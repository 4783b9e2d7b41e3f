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
    let mut operands = (0..n.n_inputs())
        .map(|i| n.tensor(i))
        .collect::<OpResult<Vec<_>>>()?;
    let ranks: Vec<usize> = operands.iter().map(|t| t.rank()).collect();
    let expanded = expand_ellipsis(&equation.replace(' ', ""), &ranks)?;
    // a label repeated within one operand takes that operand's diagonal first
    let Some((lhs, rhs)) = expanded.split_once("->") else {
        return invalid(format!("equation {expanded:?} has no output"));
    };
    let mut terms: Vec<String> = lhs.split(',').map(str::to_string).collect();
    for (t, term) in terms.iter_mut().enumerate() {
        while let Some((p, q)) = repeated(term) {
            let Some(x) = operands.get(t) else {
                return invalid("more terms than operands");
            };
            operands[t] = diagonal(x, p, q)?;
            let label = term.chars().nth(p).unwrap_or('?');
            *term = term
                .chars()
                .enumerate()
                .filter(|&(i, _)| i != p && i != q)
                .map(|(_, c)| c)
                .chain(std::iter::once(label))
                .collect();
        }
    }
    let expanded = format!("{}->{rhs}", terms.join(","));
    let refs: Vec<&aneforge::Tensor> = operands.iter().collect();
    match graph_einsum(&expanded, &refs) {
        Ok(t) => tensor(t),
        Err(e) => unsupported(format!("equation {equation:?}: {e}")),
    }
}

/// The equation with each `...` spelled out as letters the equation does not use: an operand's
/// ellipsis covers its axes beyond its explicit labels, aligned to the right across operands,
/// and the output (explicit, or implicit: the ellipsis, then the labels used once, sorted)
/// gets all of them.
fn expand_ellipsis(equation: &str, ranks: &[usize]) -> OpResult<String> {
    if !equation.contains("...") && equation.contains("->") {
        return Ok(equation.to_string());
    }
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation, None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return invalid(format!(
            "{} operand terms for {} inputs",
            terms.len(),
            ranks.len()
        ));
    }
    let spans: Vec<usize> = terms
        .iter()
        .zip(ranks)
        .map(|(t, &r)| {
            let explicit = t.replace("...", "").chars().count();
            if t.contains("...") {
                r.checked_sub(explicit).ok_or_else(|| {
                    crate::error::OpError::Invalid(format!("term {t:?} for a rank-{r} operand"))
                })
            } else {
                Ok(0)
            }
        })
        .collect::<OpResult<_>>()?;
    let widest = spans.iter().copied().max().unwrap_or(0);
    let fresh: Vec<char> = ('a'..='z')
        .chain('A'..='Z')
        .filter(|c| !equation.contains(*c))
        .take(widest)
        .collect();
    if fresh.len() < widest {
        return unsupported("no letters left for the ellipsis");
    }
    let letters = |span: usize| -> String { fresh[widest - span..].iter().collect() };
    let lhs: Vec<String> = terms
        .iter()
        .zip(&spans)
        .map(|(t, &e)| t.replace("...", &letters(e)))
        .collect();
    let rhs = match rhs {
        Some(r) => r.replace("...", &letters(widest)),
        None => {
            let joined: String = terms.concat().replace("...", "");
            let mut once: Vec<char> = joined
                .chars()
                .filter(|&c| joined.chars().filter(|&d| d == c).count() == 1)
                .collect();
            once.sort_unstable();
            letters(widest) + &once.into_iter().collect::<String>()
        }
    };
    Ok(format!("{}->{rhs}", lhs.join(",")))
}

/// The first pair of positions holding the same label in one operand term.
fn repeated(term: &str) -> Option<(usize, usize)> {
    let chars: Vec<char> = term.chars().collect();
    (0..chars.len()).find_map(|p| {
        (p + 1..chars.len())
            .find(|&q| chars[q] == chars[p])
            .map(|q| (p, q))
    })
}

/// `x` with axes `p` < `q` (of equal size) replaced by their diagonal, as its last axis.
fn diagonal(x: &aneforge::Tensor, p: usize, q: usize) -> OpResult<aneforge::Tensor> {
    let d = x.shape()[p];
    if x.shape()[q] != d {
        return invalid(format!(
            "a repeated label spans sizes {d} and {}",
            x.shape()[q]
        ));
    }
    let mut perm: Vec<usize> = (0..x.rank()).filter(|&a| a != p && a != q).collect();
    perm.extend([p, q]);
    let moved = x.transpose(&perm)?;
    let mut shape: Vec<isize> = moved.shape()[..x.rank() - 2]
        .iter()
        .map(|&s| s as isize)
        .collect();
    shape.push((d * d) as isize);
    let flat = moved.reshape(&shape)?;
    let picks: Vec<i64> = (0..d).map(|k| (k * (d + 1)) as i64).collect();
    let index = crate::value::Const::ints(vec![d], picks)?.to_tensor()?;
    Ok(flat.gather(&index, (x.rank() - 2) as isize)?)
}
