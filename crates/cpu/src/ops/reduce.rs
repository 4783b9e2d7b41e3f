//! Reductions, softmax, normalisations, cumsum and topk on the row kernel.

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::ew::{broadcast_strides, BinOp, Chain, Instr, Load};
use crate::kernels::layout::{dense_strides, Copy, Piece};
use crate::kernels::rows::{ReduceOp, RowKind, Rows};
use crate::kernels::Kernel;
use crate::known::Known;
use crate::plan::Vid;
use crate::tensor::Elem;
use aneforge_mil::DType;

fn float_x(cx: &mut OpCx) -> Result<(Vid, Vec<usize>, DType)> {
    let x = cx.input("x")?;
    let d = cx.dtype(x);
    if !matches!(d, DType::Fp16 | DType::Fp32 | DType::Int32) {
        return Err(cx.err(format!("x must be fp16, fp32 or int32, found {d}")));
    }
    Ok((x, cx.shape(x), d))
}

/// Normalised, sorted, deduplicated axes.
fn axes(cx: &mut OpCx, arg: &str, rank: usize) -> Result<Option<Vec<usize>>> {
    match cx.ints(arg)? {
        None => Ok(None),
        Some(v) => {
            let mut out = Vec::new();
            for a in v {
                out.push(cx.axis(a, rank)?);
            }
            out.sort_unstable();
            out.dedup();
            Ok(Some(out))
        }
    }
}

/// Moves `axes` to the end through a transpose into a temporary when they are not one block.
/// Returns (value, outer, r, inner).
fn rows_view(
    cx: &mut OpCx,
    x: Vid,
    xs: &[usize],
    ax: &[usize],
) -> Result<(Vid, usize, usize, usize)> {
    let r: usize = ax.iter().map(|&a| xs[a]).product();
    let contiguous = ax.windows(2).all(|w| w[1] == w[0] + 1);
    if ax.is_empty() {
        return Ok((x, xs.iter().product(), 1, 1));
    }
    if contiguous {
        let outer = xs[..ax[0]].iter().product();
        let inner = xs[ax[ax.len() - 1] + 1..].iter().product();
        return Ok((x, outer, r, inner));
    }
    let keep: Vec<usize> = (0..xs.len()).filter(|a| !ax.contains(a)).collect();
    let perm: Vec<usize> = keep.iter().chain(ax.iter()).copied().collect();
    let ps: Vec<usize> = perm.iter().map(|&a| xs[a]).collect();
    let st = dense_strides(xs);
    let tmp =
        cx.b.add_temp(format!("{}#perm", cx.name), cx.dtype(x), ps.clone());
    let piece = Piece {
        src: x,
        src_off: 0,
        src_strides: perm.iter().map(|&a| st[a]).collect(),
        dst: tmp,
        dst_off: 0,
        dst_strides: dense_strides(&ps),
        shape: ps,
    };
    let es = cx.elem(x)?.size();
    cx.emit(
        Kernel::Copy(Copy::new(es, vec![], vec![piece], None)),
        vec![x],
        vec![tmp],
    );
    Ok((tmp, keep.iter().map(|&a| xs[a]).product(), r, 1))
}

fn emit_rows(
    cx: &mut OpCx,
    x: Vid,
    view: (Vid, usize, usize, usize),
    out: Vid,
    out2: Option<Vid>,
    kind: RowKind,
) -> Result<()> {
    let (src, outer, r, inner) = view;
    let k = Rows {
        x: src,
        x_elem: cx.elem(x)?,
        out,
        out_elem: cx.elem(out)?,
        out2,
        outer,
        r,
        inner,
        kind,
        acc16: false,
    };
    let mut writes = vec![out];
    writes.extend(out2);
    cx.emit(Kernel::Rows(k), vec![src], writes);
    Ok(())
}

fn const_vec(cx: &mut OpCx, arg: &str, len: usize) -> Result<Option<Vec<f32>>> {
    match cx.opt_input(arg)? {
        None => Ok(None),
        Some(v) => {
            let k = cx
                .known(v)
                .ok_or_else(|| cx.err(format!("{arg} must be a compile-time constant")))?;
            let f = k
                .f32s()
                .ok_or_else(|| cx.err(format!("{arg} is not numeric")))?;
            if f.len() != len {
                return Err(cx.err(format!("{arg} has {} elements, expected {len}", f.len())));
            }
            Ok(Some(f))
        }
    }
}

pub(crate) fn build(cx: &mut OpCx, t: &str) -> Result<()> {
    if let Some(op) = t.strip_prefix("reduce_") {
        let rop = match op {
            "sum" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            "prod" => ReduceOp::Prod,
            "log_sum_exp" => ReduceOp::LogSumExp,
            "l2_norm" => ReduceOp::L2,
            "l1_norm" => ReduceOp::L1,
            "sum_square" => ReduceOp::SumSquare,
            "log_sum" => ReduceOp::LogSum,
            "argmax" => ReduceOp::ArgMax,
            "argmin" => ReduceOp::ArgMin,
            _ => return Err(cx.err(format!("the CPU engine does not implement op type `{t}`"))),
        };
        let (x, xs, d) = float_x(cx)?;
        let r = xs.len();
        let keep = cx.boolean("keep_dims", false)?;
        let ax = if matches!(rop, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            vec![cx.axis_arg("axis", Some(-1), r)?]
        } else {
            axes(cx, "axes", r)?.unwrap_or_else(|| (0..r).collect())
        };
        let out_shape: Vec<usize> = (0..r)
            .filter_map(|a| {
                if ax.contains(&a) {
                    keep.then_some(1)
                } else {
                    Some(xs[a])
                }
            })
            .collect();
        let od = if matches!(rop, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            DType::Int32
        } else {
            d
        };
        let out = cx.output(0, od, out_shape)?;
        let view = rows_view(cx, x, &xs, &ax)?;
        return emit_rows(cx, x, view, out, None, RowKind::Reduce(rop));
    }
    let (x, xs, d) = float_x(cx)?;
    let r = xs.len();
    match t {
        "softmax" => {
            let a = cx.axis_arg("axis", Some(-1), r)?;
            let out = cx.output(0, d, xs.clone())?;
            let view = rows_view(cx, x, &xs, &[a])?;
            emit_rows(cx, x, view, out, None, RowKind::Softmax)
        }
        "layer_norm" => {
            let ax = axes(cx, "axes", r)?.unwrap_or_else(|| (0..r).collect());
            if !ax.windows(2).all(|w| w[1] == w[0] + 1) {
                return Err(cx.err(format!(
                    "layer_norm over non-adjacent axes {ax:?} is not supported"
                )));
            }
            let n: usize = ax.iter().map(|&a| xs[a]).product();
            let gamma = const_vec(cx, "gamma", n)?;
            let beta = const_vec(cx, "beta", n)?;
            let eps = cx.float("epsilon", Some(1e-5))?;
            let out = cx.output(0, d, xs.clone())?;
            let view = rows_view(cx, x, &xs, &ax)?;
            emit_rows(
                cx,
                x,
                view,
                out,
                None,
                RowKind::LayerNorm { gamma, beta, eps },
            )
        }
        "instance_norm" => {
            if r < 3 {
                return Err(cx.err("x must be [n, C, *D] with rank ≥ 3"));
            }
            let c = xs[1];
            let gamma = const_vec(cx, "gamma", c)?.unwrap_or_else(|| vec![1.0; c]);
            let beta = const_vec(cx, "beta", c)?.unwrap_or_else(|| vec![0.0; c]);
            let eps = cx.float("epsilon", Some(1e-5))?;
            let out = cx.output(0, d, xs.clone())?;
            let ax: Vec<usize> = (2..r).collect();
            let view = rows_view(cx, x, &xs, &ax)?;
            emit_rows(
                cx,
                x,
                view,
                out,
                None,
                RowKind::InstanceNorm {
                    gamma,
                    beta,
                    channels: c,
                    eps,
                },
            )
        }
        "l2_norm" => {
            if r < 3 {
                return Err(cx.err("x must have rank ≥ 3"));
            }
            let eps = cx.float("epsilon", Some(1e-6))?;
            let out = cx.output(0, d, xs.clone())?;
            let ax: Vec<usize> = (r - 3..r).collect();
            let view = rows_view(cx, x, &xs, &ax)?;
            emit_rows(cx, x, view, out, None, RowKind::L2Norm { eps })
        }
        "cumsum" => {
            let a = cx.axis_arg("axis", Some(0), r)?;
            let exclusive = cx.boolean("exclusive", false)?;
            let reverse = cx.boolean("reverse", false)?;
            let out = cx.output(0, d, xs.clone())?;
            let view = rows_view(cx, x, &xs, &[a])?;
            emit_rows(
                cx,
                x,
                view,
                out,
                None,
                RowKind::Cumsum { exclusive, reverse },
            )
        }
        "topk" => {
            let a = cx.axis_arg("axis", Some(-1), r)?;
            let k = cx.int("k", Some(1))?;
            let ascending = cx.boolean("ascending", false)?;
            if k < 1 || k as usize > xs[a] {
                return Err(cx.err(format!(
                    "k = {k} is out of range for dimension {} of size {}",
                    a, xs[a]
                )));
            }
            let mut os = xs.clone();
            os[a] = k as usize;
            let out = cx.output(0, d, os.clone())?;
            let idx = if cx.op.outputs.len() > 1 {
                Some(cx.output(1, DType::Int32, os)?)
            } else {
                None
            };
            let view = rows_view(cx, x, &xs, &[a])?;
            emit_rows(
                cx,
                x,
                view,
                out,
                idx,
                RowKind::TopK {
                    k: k as usize,
                    ascending,
                },
            )
        }
        "batch_norm" => {
            if r < 2 {
                return Err(cx.err("x must be [n, C, *D]"));
            }
            let c = xs[1];
            let mean =
                const_vec(cx, "mean", c)?.ok_or_else(|| cx.err("missing argument `mean`"))?;
            let var = const_vec(cx, "variance", c)?
                .ok_or_else(|| cx.err("missing argument `variance`"))?;
            let gamma = const_vec(cx, "gamma", c)?.unwrap_or_else(|| vec![1.0; c]);
            let beta = const_vec(cx, "beta", c)?.unwrap_or_else(|| vec![0.0; c]);
            let eps = cx.float("epsilon", Some(1e-5))?;
            let scale: Vec<f32> = (0..c).map(|i| gamma[i] / (var[i] + eps).sqrt()).collect();
            let shift: Vec<f32> = (0..c).map(|i| beta[i] - mean[i] * scale[i]).collect();
            let mut cs = vec![1usize; r - 1];
            cs[0] = c;
            let sv = cx.b.add_known(
                format!("{}#scale", cx.name),
                Known::from_f32(DType::Fp32, cs.clone(), scale),
            );
            let hv = cx.b.add_known(
                format!("{}#shift", cx.name),
                Known::from_f32(DType::Fp32, cs.clone(), shift),
            );
            let out = cx.output(0, d, xs.clone())?;
            let oe = cx.elem(out)?;
            let loads = vec![
                Load {
                    value: x,
                    elem: oe,
                    strides: broadcast_strides(&xs, &xs),
                },
                Load {
                    value: sv,
                    elem: Elem::F32,
                    strides: broadcast_strides(&cs, &xs),
                },
                Load {
                    value: hv,
                    elem: Elem::F32,
                    strides: broadcast_strides(&cs, &xs),
                },
            ];
            let ch = Chain {
                shape: xs.clone(),
                loads,
                instrs: vec![
                    Instr::Bin(BinOp::Mul, 3, 0, 1),
                    Instr::Bin(BinOp::Add, 4, 3, 2),
                ],
                nregs: 5,
                stores: vec![(4, out, oe)],
            };
            cx.emit(Kernel::Chain(ch), vec![x, sv, hv], vec![out]);
            Ok(())
        }
        _ => Err(cx.err(format!("the CPU engine does not implement op type `{t}`"))),
    }
}
