//! matmul, linear, einsum.

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::ew::{broadcast_shapes, broadcast_strides, BinOp, Chain, Instr, Load};
use crate::kernels::matmul::{Matmul, Prepared, Rhs};
use crate::kernels::Kernel;
use crate::known::Data;
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
    let rhs = match (cx.known(y), y_batch_one) {
        (Some(kn), true) => {
            let yv = kn.f32s().ok_or_else(|| cx.err("y is not numeric"))?;
            let mut wt = vec![0f32; n * k];
            for j in 0..n {
                for kk in 0..k {
                    wt[j * k + kk] = if ty && !y1 {
                        yv[j * k + kk]
                    } else {
                        yv[kk * n + j]
                    };
                }
            }
            Rhs::Prepared(Prepared { wt, k })
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
    let wk = cx
        .known(w)
        .ok_or_else(|| cx.err("weight must be a compile-time constant"))?;
    let rhs = match &wk.data {
        Data::Quant(q) => Rhs::Quant(q.clone()),
        _ => {
            let wt = wk.f32s().ok_or_else(|| cx.err("weight is not numeric"))?;
            Rhs::Prepared(Prepared { wt, k: ws[1] })
        }
    };
    let (n, k) = (ws[0], ws[1]);
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
        }),
        reads,
        writes,
    );
    Ok(())
}

pub(crate) fn einsum(cx: &mut OpCx) -> Result<()> {
    Err(cx.err("einsum is not implemented yet"))
}
