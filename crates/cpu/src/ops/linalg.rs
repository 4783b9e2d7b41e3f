//! matmul, linear, einsum.

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::bf16::Bf16B;
use crate::kernels::ew::{broadcast_shapes, broadcast_strides, BinOp, Chain, Instr, Load};
use crate::kernels::matmul::{Matmul, Prepared, Rhs};
use crate::kernels::packed::PackedB;
use crate::kernels::Kernel;
use crate::known::{Data, Floats, Known};
use crate::plan::Vid;
use crate::tensor::Elem;
use aneforge_mil::DType;

fn float_dtype(cx: &OpCx, v: Vid, what: &str) -> Result<DType> {
    let d = cx.dtype(v);
    if !matches!(d, DType::Fp16 | DType::Fp32) {
        return Err(cx.err(format!("{what} must be fp16 or fp32, found {d}")));
    }
    Ok(d)
}

/// The raw f32 product buffer and the epilogue that turns it into `out` (+ optional bias).
pub(crate) fn raw_and_epilogue(
    cx: &mut OpCx,
    out: Vid,
    bias: Option<Vid>,
) -> Result<(Vid, Option<Chain>)> {
    let out_elem = cx.elem(out)?;
    let shape = cx.shape(out);
    if out_elem == Elem::F32 && bias.is_none() {
        return Ok((out, None));
    }
    let raw = if out_elem == Elem::F32 {
        out
    } else {
        let name = format!("{}#raw", cx.b.values[out].name);
        cx.b.add_temp(name, DType::Fp32, shape.clone())
    };
    let mut loads = vec![Load {
        value: raw,
        elem: Elem::F32,
        strides: broadcast_strides(&shape, &shape),
    }];
    let mut instrs = Vec::new();
    let mut reg = 0;
    if let Some(b) = bias {
        loads.push(Load {
            value: b,
            elem: cx.elem(b)?,
            strides: broadcast_strides(&cx.shape(b), &shape),
        });
        instrs.push(Instr::Bin(BinOp::Add, 2, 0, 1));
        reg = 2;
    }
    let nregs = loads.len() + instrs.len();
    let c = Chain {
        shape,
        loads,
        instrs,
        nregs,
        stores: vec![(reg, out, out_elem)],
    };
    Ok((raw, Some(c)))
}

pub(crate) fn matmul(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let y = cx.input("y")?;
    let tx = cx.boolean("transpose_x", false)?;
    let ty = cx.boolean("transpose_y", false)?;
    let dt = float_dtype(cx, x, "x")?;
    if cx.dtype(y) != dt {
        return Err(cx.err(format!("x is {dt} but y is {}", cx.dtype(y))));
    }
    let (mut xs, mut ys) = (cx.shape(x), cx.shape(y));
    if xs.is_empty() || ys.is_empty() {
        return Err(cx.err("x and y must have rank ≥ 1"));
    }
    let x1 = xs.len() == 1;
    let y1 = ys.len() == 1;
    if x1 && tx {
        return Err(cx.err("x is rank 1, but transpose_x is true"));
    }
    if x1 {
        xs.insert(0, 1);
    }
    if y1 {
        ys.push(1);
    }
    let (xr, xc) = (xs[xs.len() - 2], xs[xs.len() - 1]);
    let (yr, yc) = (ys[ys.len() - 2], ys[ys.len() - 1]);
    let (m, k) = if tx { (xc, xr) } else { (xr, xc) };
    let (k2, n) = if ty && !y1 { (yc, yr) } else { (yr, yc) };
    if k != k2 {
        return Err(cx.err(format!(
            "inner dimensions differ: x {:?} (transpose_x={tx}) and y {:?} (transpose_y={ty})",
            cx.shape(x),
            cx.shape(y)
        )));
    }
    let xb = &xs[..xs.len() - 2];
    let yb = &ys[..ys.len() - 2];
    let batch = broadcast_shapes(xb, yb).ok_or_else(|| {
        cx.err(format!(
            "batch dimensions {xb:?} and {yb:?} do not broadcast"
        ))
    })?;
    let mut out_shape = batch.clone();
    out_shape.push(m);
    out_shape.push(n);
    let mut final_shape = out_shape.clone();
    if y1 {
        final_shape.pop();
    }
    if x1 {
        let r = final_shape.len();
        final_shape.remove(r - if y1 { 1 } else { 2 });
    }
    let out = cx.output(0, dt, final_shape)?;
    let a_elem = cx.elem(x)?;
    let (a_rs, a_cs) = if tx { (1, xc) } else { (xc, 1) };
    let a_batch_strides: Vec<usize> = broadcast_strides(xb, &batch)
        .iter()
        .map(|s| s * xr * xc)
        .collect();
    let y_batch_one = yb.iter().product::<usize>() == 1;
    let bf16 = bf16_rows(cx, dt, m * xb.iter().product::<usize>());
    let rhs = match (cx.known(y), y_batch_one) {
        (Some(kn), true) => {
            prepare(kn, n, k, ty && !y1, bf16).ok_or_else(|| cx.err("y is not numeric"))?
        }
        _ => {
            let (rs, cs) = if ty && !y1 { (1, yc) } else { (yc, 1) };
            Rhs::Value {
                v: y,
                elem: cx.elem(y)?,
                rs,
                cs,
                batch_strides: broadcast_strides(yb, &batch)
                    .iter()
                    .map(|s| s * yr * yc)
                    .collect(),
            }
        }
    };
    // One y for every batch and x's rows contiguous across batches: the batches are one tall
    // matrix, so run a single [batch·m, k] × [k, n] GEMM instead of one per batch.
    let (m, batch, a_batch_strides) = if y_batch_one && !tx && !x1 && xb == batch.as_slice() {
        (m * batch.iter().product::<usize>(), Vec::new(), Vec::new())
    } else {
        (m, batch, a_batch_strides)
    };
    let rhs = match rhs {
        Rhs::Value {
            v,
            elem,
            rs,
            cs,
            batch_strides,
        } => Rhs::Value {
            v,
            elem,
            rs,
            cs,
            batch_strides: if batch.is_empty() {
                Vec::new()
            } else {
                batch_strides
            },
        },
        prepared => prepared,
    };
    let (raw, epilogue) = raw_and_epilogue(cx, out, None)?;
    let mut reads = vec![x];
    if matches!(rhs, Rhs::Value { .. }) {
        reads.push(y);
    }
    let mut writes = vec![out];
    if raw != out {
        writes.push(raw);
    }
    cx.emit(
        Kernel::Matmul(Matmul {
            a: x,
            a_elem,
            a_rs,
            a_cs,
            a_batch_strides,
            rhs,
            batch,
            m,
            n,
            k,
            raw,
            epilogue,
            acc16: false,
        }),
        reads,
        writes,
    );
    Ok(())
}

pub(crate) fn linear(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let w = cx.input("weight")?;
    let bias = cx.opt_input("bias")?;
    let dt = float_dtype(cx, x, "x")?;
    let xs = cx.shape(x);
    let ws = cx.shape(w);
    if xs.is_empty() || ws.len() != 2 || ws[1] != xs[xs.len() - 1] {
        return Err(cx.err(format!(
            "weight must be [D_out, D_in] with D_in = x's last dimension; x {xs:?}, weight {ws:?}"
        )));
    }
    if cx.dtype(w) != dt {
        return Err(cx.err(format!("x is {dt} but weight is {}", cx.dtype(w))));
    }
    let (n, k) = (ws[0], ws[1]);
    let m_rows: usize = xs[..xs.len() - 1].iter().product();
    let blocks = match cx.known(w).map(|k| &k.data) {
        Some(Data::Quant(q)) => Some(q.clone()),
        _ => None,
    };
    let rhs = match (blocks, cx.b.quant.get(&w)) {
        (Some(q), _) if cx.b.activations != crate::Activations::F32 => {
            let mut q = (*q).clone();
            q.activations = cx.b.activations;
            q.narrow_params();
            Rhs::Blocks(std::sync::Arc::new(q))
        }
        (Some(q), _) => Rhs::Blocks(q),
        (None, Some(q)) if m_rows <= 2 && q.n == n && q.k == k => Rhs::Quant(q.clone()),
        _ => {
            let wk = cx
                .known(w)
                .ok_or_else(|| cx.err("weight must be a compile-time constant"))?;
            prepare(wk, n, k, true, bf16_rows(cx, dt, m_rows))
                .ok_or_else(|| cx.err("weight is not numeric"))?
        }
    };
    if let Some(b) = bias {
        if cx.shape(b) != [n] {
            return Err(cx.err(format!("bias must be [{n}], found {:?}", cx.shape(b))));
        }
        if cx.dtype(b) != dt {
            return Err(cx.err(format!("bias is {} but x is {dt}", cx.dtype(b))));
        }
    }
    let mut out_shape = xs.clone();
    *out_shape.last_mut().unwrap_or(&mut 0) = n;
    let out = cx.output(0, dt, out_shape)?;
    let m = xs[..xs.len() - 1].iter().product();
    let (raw, epilogue) = raw_and_epilogue(cx, out, bias)?;
    let a_elem = cx.elem(x)?;
    let mut reads = vec![x];
    reads.extend(bias);
    let mut writes = vec![out];
    if raw != out {
        writes.push(raw);
    }
    cx.emit(
        Kernel::Matmul(Matmul {
            a: x,
            a_elem,
            a_rs: k,
            a_cs: 1,
            a_batch_strides: vec![],
            rhs,
            batch: vec![],
            m,
            n,
            k,
            raw,
            epilogue,
            acc16: false,
        }),
        reads,
        writes,
    );
    Ok(())
}

/// Whether a product of `rows` rows in a `dt` program takes bf16 operands
/// ([`crate::MatmulPrecision::Bf16`]).
fn bf16_rows(cx: &OpCx, dt: DType, rows: usize) -> bool {
    cx.b.bf16_products(dt == DType::Fp32, rows)
}

/// A constant right-hand side (`nk`: stored `[n, k]`, else `[k, n]`). With `bf16`, packed
/// rounded to bfloat16. Otherwise f32 blob constants stored `[n, k]` are read in place as
/// `wt[n][k]` (the blob is the only copy); anything else needs a copy anyway (widened or
/// transposed), so it is packed into column panels shared by content between plans. `None`
/// for non-numeric constants.
fn prepare(kn: &Known, n: usize, k: usize, nk: bool, bf16: bool) -> Option<Rhs> {
    if bf16 {
        let yv = kn.f32s()?;
        return Some(Rhs::Bf16(if nk {
            Bf16B::pack(k, n, |t, j| yv[j * k + t])
        } else {
            Bf16B::pack(k, n, |t, j| yv[t * n + j])
        }));
    }
    if let (true, Data::F32(view @ Floats::Blob { .. })) = (nk, &kn.data) {
        return Some(Rhs::Prepared(Prepared {
            wt: view.clone(),
            k,
        }));
    }
    let yv = kn.f32s()?;
    Some(Rhs::Packed(if nk {
        PackedB::pack(k, n, |t, j| yv[j * k + t])
    } else {
        PackedB::pack(k, n, |t, j| yv[t * n + j])
    }))
}

/// Two-operand einsum without repeated or summed-away single-operand indices: permute both
/// operands to [batch, free, contracted] / [batch, contracted, free], one batched matmul, permute
/// the result to the output order. Batch axes broadcast like matmul's.
pub(crate) fn einsum(cx: &mut OpCx) -> Result<()> {
    let vals = cx.input_list("values")?;
    let eq = cx.string("equation", None)?;
    if vals.len() != 2 {
        return Err(cx.err(format!("einsum needs two values, found {}", vals.len())));
    }
    let (x, y) = (vals[0], vals[1]);
    let dt = float_dtype(cx, x, "values[0]")?;
    if cx.dtype(y) != dt {
        return Err(cx.err("both values must share one dtype"));
    }
    let bad = |m: &str| cx.err(format!("equation `{eq}`: {m}"));
    let (lhs, out) = eq
        .split_once("->")
        .ok_or_else(|| bad("expected `a,b->c`"))?;
    let (a, b) = lhs
        .split_once(',')
        .ok_or_else(|| bad("expected two operands"))?;
    let (a, b, out): (Vec<char>, Vec<char>, Vec<char>) = (
        a.trim().chars().collect(),
        b.trim().chars().collect(),
        out.trim().chars().collect(),
    );
    let (xs, ys) = (cx.shape(x), cx.shape(y));
    if a.len() != xs.len() || b.len() != ys.len() {
        return Err(bad(&format!(
            "subscripts do not match ranks of {xs:?} and {ys:?}"
        )));
    }
    let uniq = |v: &[char]| v.iter().enumerate().all(|(i, c)| !v[..i].contains(c));
    if !uniq(&a) || !uniq(&b) || !uniq(&out) {
        return Err(bad(
            "repeated subscripts within one operand are not supported",
        ));
    }
    let size = |c: char| -> Option<usize> {
        let sx = a.iter().position(|&d| d == c).map(|i| xs[i]);
        let sy = b.iter().position(|&d| d == c).map(|i| ys[i]);
        match (sx, sy) {
            (Some(p), Some(q)) if p == q || p == 1 || q == 1 => Some(p.max(q)),
            (Some(p), None) | (None, Some(p)) => Some(p),
            _ => None,
        }
    };
    let batch: Vec<char> = out
        .iter()
        .copied()
        .filter(|c| a.contains(c) && b.contains(c))
        .collect();
    let left: Vec<char> = out
        .iter()
        .copied()
        .filter(|c| a.contains(c) && !b.contains(c))
        .collect();
    let right: Vec<char> = out
        .iter()
        .copied()
        .filter(|c| b.contains(c) && !a.contains(c))
        .collect();
    let contr: Vec<char> = a
        .iter()
        .copied()
        .filter(|c| b.contains(c) && !out.contains(c))
        .collect();
    if a.iter()
        .chain(b.iter())
        .any(|c| !out.contains(c) && !contr.contains(c))
        || out.iter().any(|c| !a.contains(c) && !b.contains(c))
    {
        return Err(bad(
            "every subscript must appear in the output or in both operands",
        ));
    }
    let mut os = Vec::new();
    for &c in &out {
        os.push(size(c).ok_or_else(|| bad(&format!("dimension `{c}` differs between operands")))?);
    }
    for &c in &contr {
        let (p, q) = (
            xs[a.iter().position(|&d| d == c).unwrap_or(0)],
            ys[b.iter().position(|&d| d == c).unwrap_or(0)],
        );
        if p != q {
            return Err(bad(&format!("contracted dimension `{c}` is {p} vs {q}")));
        }
    }
    let out_v = cx.output(0, dt, os.clone())?;
    // permute operands into temporaries
    let permute = |cx: &mut OpCx,
                   v: Vid,
                   subs: &[char],
                   order: &[char],
                   tag: &str|
     -> Result<(Vid, Vec<usize>)> {
        let shape = cx.shape(v);
        let perm: Vec<usize> = order
            .iter()
            .map(|c| subs.iter().position(|d| d == c).unwrap_or(0))
            .collect();
        let ps: Vec<usize> = perm.iter().map(|&i| shape[i]).collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok((v, ps));
        }
        let st = crate::kernels::layout::dense_strides(&shape);
        let tmp = cx.b.add_temp(format!("{}#{tag}", cx.name), dt, ps.clone());
        let piece = crate::kernels::layout::Piece {
            src: v,
            src_off: 0,
            src_strides: perm.iter().map(|&i| st[i]).collect(),
            dst: tmp,
            dst_off: 0,
            dst_strides: crate::kernels::layout::dense_strides(&ps),
            shape: ps.clone(),
        };
        let es = cx.elem(v)?.size();
        cx.emit(
            Kernel::Copy(crate::kernels::layout::Copy::new(
                es,
                vec![],
                vec![piece],
                None,
            )),
            vec![v],
            vec![tmp],
        );
        Ok((tmp, ps))
    };
    let xo: Vec<char> = batch.iter().chain(&left).chain(&contr).copied().collect();
    let yo: Vec<char> = batch.iter().chain(&contr).chain(&right).copied().collect();
    let (xp, xps) = permute(cx, x, &a, &xo, "lhs")?;
    let (yp, yps) = permute(cx, y, &b, &yo, "rhs")?;
    let nb = batch.len();
    let (m, k, n) = (
        xps[nb..nb + left.len()].iter().product::<usize>(),
        contr
            .iter()
            .map(|&c| xs[a.iter().position(|&d| d == c).unwrap_or(0)])
            .product::<usize>(),
        yps[nb + contr.len()..].iter().product::<usize>(),
    );
    let bshape: Vec<usize> = batch.iter().map(|&c| size(c).unwrap_or(1)).collect();
    let xb: Vec<usize> = xps[..nb].to_vec();
    let yb: Vec<usize> = yps[..nb].to_vec();
    let res_order: Vec<char> = batch.iter().chain(&left).chain(&right).copied().collect();
    let direct = res_order == out;
    let mut rs = bshape.clone();
    rs.extend(left.iter().map(|&c| size(c).unwrap_or(1)));
    rs.extend(right.iter().map(|&c| size(c).unwrap_or(1)));
    let res = if direct {
        out_v
    } else {
        cx.b.add_temp(format!("{}#product", cx.name), dt, rs.clone())
    };
    let (raw, epilogue) = raw_and_epilogue(cx, res, None)?;
    let a_elem = cx.elem(xp)?;
    let mut writes = vec![res];
    if raw != res {
        writes.push(raw);
    }
    cx.emit(
        Kernel::Matmul(Matmul {
            a: xp,
            a_elem,
            a_rs: k,
            a_cs: 1,
            a_batch_strides: broadcast_strides(&xb, &bshape)
                .iter()
                .map(|s| s * m * k)
                .collect(),
            rhs: Rhs::Value {
                v: yp,
                elem: cx.elem(yp)?,
                rs: n,
                cs: 1,
                batch_strides: broadcast_strides(&yb, &bshape)
                    .iter()
                    .map(|s| s * k * n)
                    .collect(),
            },
            batch: bshape,
            m,
            n,
            k,
            raw,
            epilogue,
            acc16: false,
        }),
        vec![xp, yp],
        writes,
    );
    if !direct {
        let perm: Vec<usize> = out
            .iter()
            .map(|c| res_order.iter().position(|d| d == c).unwrap_or(0))
            .collect();
        let st = crate::kernels::layout::dense_strides(&rs);
        let piece = crate::kernels::layout::Piece {
            src: res,
            src_off: 0,
            src_strides: perm.iter().map(|&i| st[i]).collect(),
            dst: out_v,
            dst_off: 0,
            dst_strides: crate::kernels::layout::dense_strides(&os),
            shape: os,
        };
        let es = cx.elem(res)?.size();
        cx.emit(
            Kernel::Copy(crate::kernels::layout::Copy::new(
                es,
                vec![],
                vec![piece],
                None,
            )),
            vec![res],
            vec![out_v],
        );
    }
    Ok(())
}
