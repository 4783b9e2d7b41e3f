//! `einsum` for one or two operands, decomposed into sums, transposes, reshapes and one batched
//! matmul. Labels are ASCII letters; repeated labels within one operand (diagonals) and `...` are
//! not supported.

use super::{GraphError, Tensor};

const OP: &str = "einsum";

/// Evaluates `equation` (e.g. `"bhqd,bhkd->bhqk"`, `"ij->ji"`) over `operands`.
pub fn einsum(equation: &str, operands: &[&Tensor]) -> Result<Tensor, GraphError> {
    let (inputs, output) = parse(equation, operands.len())?;
    for (labels, t) in inputs.iter().zip(operands) {
        if labels.len() != t.rank() {
            return Err(GraphError::shape(
                OP,
                &[t.shape()],
                format!("{equation:?}: operand labels {labels:?} do not match its rank"),
            ));
        }
    }
    let mut sizes = std::collections::HashMap::new();
    for (labels, t) in inputs.iter().zip(operands) {
        for (&l, &d) in labels.iter().zip(t.shape()) {
            let e = sizes.entry(l).or_insert(d);
            if *e != d && d != 1 && *e != 1 {
                let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape()).collect();
                return Err(GraphError::shape(
                    OP,
                    &shapes,
                    format!("{equation:?}: label {l:?} has sizes {e} and {d}"),
                ));
            }
            *e = (*e).max(d);
        }
    }
    match operands {
        [a] => {
            let reduced = sum_out(a, &inputs[0], &output)?;
            permute_to(&reduced.0, &reduced.1, &output)
        }
        [a, b] => pair(a, &inputs[0], b, &inputs[1], &output, &sizes, equation),
        _ => Err(GraphError::attribute(
            OP,
            format!("{equation:?}: only one or two operands are supported"),
        )),
    }
}

fn parse(equation: &str, n: usize) -> Result<(Vec<Vec<char>>, Vec<char>), GraphError> {
    let bad = |m: &str| GraphError::attribute(OP, format!("{equation:?}: {m}"));
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = eq
        .split_once("->")
        .ok_or_else(|| bad("expected an explicit output (`->`)"))?;
    let inputs: Vec<Vec<char>> = lhs.split(',').map(|s| s.chars().collect()).collect();
    let output: Vec<char> = rhs.chars().collect();
    if inputs.len() != n {
        return Err(bad(&format!(
            "{} operand specs for {n} operands",
            inputs.len()
        )));
    }
    for labels in inputs.iter().chain(std::iter::once(&output)) {
        if labels.iter().any(|c| !c.is_ascii_alphabetic()) {
            return Err(bad("labels must be ASCII letters (no `...`)"));
        }
        let mut seen = labels.clone();
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("a label repeats within one operand"));
        }
    }
    if let Some(l) = output
        .iter()
        .find(|l| !inputs.iter().any(|i| i.contains(l)))
    {
        return Err(bad(&format!("output label {l:?} appears in no operand")));
    }
    Ok((inputs, output))
}

/// Sums away the axes of `t` whose labels are not in `keep`.
fn sum_out(t: &Tensor, labels: &[char], keep: &[char]) -> Result<(Tensor, Vec<char>), GraphError> {
    let axes: Vec<isize> = labels
        .iter()
        .enumerate()
        .filter(|(_, l)| !keep.contains(l))
        .map(|(i, _)| i as isize)
        .collect();
    let rest: Vec<char> = labels
        .iter()
        .copied()
        .filter(|l| keep.contains(l))
        .collect();
    if axes.is_empty() {
        return Ok((t.clone(), rest));
    }
    Ok((t.sum(&axes, false)?, rest))
}

fn permute_to(t: &Tensor, labels: &[char], order: &[char]) -> Result<Tensor, GraphError> {
    let perm: Vec<usize> = order
        .iter()
        .map(|l| labels.iter().position(|m| m == l).unwrap_or(usize::MAX))
        .collect();
    t.transpose(&perm)
}

fn pair(
    a: &Tensor,
    la: &[char],
    b: &Tensor,
    lb: &[char],
    out: &[char],
    sizes: &std::collections::HashMap<char, usize>,
    equation: &str,
) -> Result<Tensor, GraphError> {
    let keep_a: Vec<char> = la
        .iter()
        .copied()
        .filter(|l| out.contains(l) || lb.contains(l))
        .collect();
    let keep_b: Vec<char> = lb
        .iter()
        .copied()
        .filter(|l| out.contains(l) || la.contains(l))
        .collect();
    let (a, la) = sum_out(a, la, &keep_a)?;
    let (b, lb) = sum_out(b, lb, &keep_b)?;
    let batch: Vec<char> = la
        .iter()
        .copied()
        .filter(|l| lb.contains(l) && out.contains(l))
        .collect();
    let contracted: Vec<char> = la
        .iter()
        .copied()
        .filter(|l| lb.contains(l) && !out.contains(l))
        .collect();
    let a_only: Vec<char> = la.iter().copied().filter(|l| !lb.contains(l)).collect();
    let b_only: Vec<char> = lb.iter().copied().filter(|l| !la.contains(l)).collect();
    if batch.len() > 3 {
        return Err(GraphError::attribute(
            OP,
            format!("{equation:?}: more than 3 batch labels exceed the rank limit"),
        ));
    }
    for &l in &contracted {
        let (da, db) = (dim(&a, &la, l), dim(&b, &lb, l));
        if da != db {
            return Err(GraphError::shape(
                OP,
                &[a.shape(), b.shape()],
                format!("{equation:?}: contracted label {l:?} has sizes {da} and {db}"),
            ));
        }
    }
    let size = |t: &Tensor, lt: &[char], ls: &[char]| -> isize {
        ls.iter().map(|&l| dim(t, lt, l)).product::<usize>() as isize
    };
    let batch_dims = |t: &Tensor, lt: &[char]| -> Vec<isize> {
        batch.iter().map(|&l| dim(t, lt, l) as isize).collect()
    };
    let (m, k, n) = (
        size(&a, &la, &a_only),
        size(&a, &la, &contracted),
        size(&b, &lb, &b_only),
    );
    let (a_mat, ta) = arrange(
        &a,
        &la,
        &batch,
        &a_only,
        &contracted,
        m,
        k,
        &batch_dims(&a, &la),
    )?;
    let (b_mat, tb) = arrange(
        &b,
        &lb,
        &batch,
        &contracted,
        &b_only,
        k,
        n,
        &batch_dims(&b, &lb),
    )?;
    let prod = a_mat.matmul_t(&b_mat, ta, tb)?;
    let mut result_labels = batch.clone();
    result_labels.extend(&a_only);
    result_labels.extend(&b_only);
    let mut result_shape: Vec<isize> = prod.shape()[..batch.len()]
        .iter()
        .map(|&d| d as isize)
        .collect();
    result_shape.extend(a_only.iter().chain(&b_only).map(|l| sizes[l] as isize));
    let result = prod.reshape(&result_shape)?;
    permute_to(&result, &result_labels, out)
}

fn dim(t: &Tensor, labels: &[char], l: char) -> usize {
    labels
        .iter()
        .position(|&m| m == l)
        .map_or(1, |i| t.shape()[i])
}

/// `t` as `[*batch, rows, cols]` (or its transpose, flagged), moving axes only when needed.
#[allow(clippy::too_many_arguments)]
fn arrange(
    t: &Tensor,
    labels: &[char],
    batch: &[char],
    rows: &[char],
    cols: &[char],
    r: isize,
    c: isize,
    batch_dims: &[isize],
) -> Result<(Tensor, bool), GraphError> {
    let order = |first: &[char], second: &[char]| -> Vec<char> {
        batch.iter().chain(first).chain(second).copied().collect()
    };
    let straight = order(rows, cols);
    let flipped = order(cols, rows);
    let (target, transposed, shape2) = if flipped == labels && straight != labels {
        (flipped, true, [c, r])
    } else {
        (straight, false, [r, c])
    };
    let moved = permute_to(t, labels, &target)?;
    let mut shape = batch_dims.to_vec();
    shape.extend(shape2);
    Ok((moved.reshape(&shape)?, transposed))
}
