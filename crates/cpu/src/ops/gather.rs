//! gather, gather_along_axis, one_hot.

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::gather::{Gather, GatherKind};
use crate::kernels::Kernel;
use crate::tensor::Elem;
use aneforge_mil::DType;

fn pattern(elem: Elem, v: f32) -> [u8; 4] {
    let mut p = [0u8; 4];
    match elem {
        Elem::F32 => p.copy_from_slice(&v.to_le_bytes()),
        Elem::F16 => p[..2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
        Elem::I32 => p.copy_from_slice(&(v as i32).to_le_bytes()),
        Elem::Bool => p[0] = (v != 0.0) as u8,
        Elem::I8 => p[0] = v as i8 as u8,
        Elem::U8 => p[0] = v as u8,
    }
    p
}

pub(crate) fn build(cx: &mut OpCx, t: &str) -> Result<()> {
    match t {
        "gather" => {
            let x = cx.input("x")?;
            let idx = cx.input("indices")?;
            let xs = cx.shape(x);
            let is = cx.shape(idx);
            let axis = cx.axis_arg("axis", Some(0), xs.len())?;
            let bd = cx.int("batch_dims", Some(0))?;
            let bd = if bd < 0 { bd + is.len() as i64 } else { bd } as usize;
            if bd > axis || bd > is.len() || xs[..bd] != is[..bd] {
                return Err(cx.err(format!("batch_dims {bd} must be ≤ axis and x {xs:?} / indices {is:?} must agree on them")));
            }
            let mut os: Vec<usize> = xs[..axis].to_vec();
            os.extend_from_slice(&is[bd..]);
            os.extend_from_slice(&xs[axis + 1..]);
            let out = cx.output(0, cx.dtype(x), os)?;
            let kind = GatherKind::Gather {
                outer: xs[..axis].iter().product(),
                d: xs[axis],
                post: xs[axis + 1..].iter().product(),
                batches: xs[..bd].iter().product(),
                ni: is[bd..].iter().product(),
            };
            let k = Gather {
                x: Some(x),
                indices: idx,
                idx_elem: cx.elem(idx)?,
                out,
                esize: cx.elem(x)?.size(),
                kind,
            };
            cx.emit(Kernel::Gather(k), vec![x, idx], vec![out]);
        }
        "gather_along_axis" => {
            let x = cx.input("x")?;
            let idx = cx.input("indices")?;
            let xs = cx.shape(x);
            let is = cx.shape(idx);
            let axis = cx.axis_arg("axis", Some(0), xs.len())?;
            if is.len() != xs.len() || (0..xs.len()).any(|a| a != axis && is[a] != xs[a]) {
                return Err(cx.err(format!(
                    "indices {is:?} must match x {xs:?} except along axis {axis}"
                )));
            }
            let out = cx.output(0, cx.dtype(x), is.clone())?;
            let kind = GatherKind::AlongAxis {
                outer: xs[..axis].iter().product(),
                d: xs[axis],
                ni: is[axis],
                inner: xs[axis + 1..].iter().product(),
            };
            let k = Gather {
                x: Some(x),
                indices: idx,
                idx_elem: cx.elem(idx)?,
                out,
                esize: cx.elem(x)?.size(),
                kind,
            };
            cx.emit(Kernel::Gather(k), vec![x, idx], vec![out]);
        }
        "one_hot" => {
            let idx = cx.input("indices")?;
            let is = cx.shape(idx);
            let depth = cx.int("one_hot_vector_size", None)?;
            if depth < 1 {
                return Err(cx.err("one_hot_vector_size must be ≥ 1"));
            }
            let axis = cx.axis_arg("axis", Some(-1), is.len() + 1)?;
            let on_v = cx.opt_input("on_value")?;
            let dtype = on_v.map_or(DType::Fp32, |v| cx.dtype(v));
            let on = cx.float("on_value", Some(1.0))?;
            let off = cx.float("off_value", Some(0.0))?;
            let mut os = is.clone();
            os.insert(axis, depth as usize);
            let out = cx.output(0, dtype, os)?;
            let oe = cx.elem(out)?;
            let kind = GatherKind::OneHot {
                outer: is[..axis].iter().product(),
                depth: depth as usize,
                inner: is[axis..].iter().product(),
                on: pattern(oe, on),
                off: pattern(oe, off),
            };
            let k = Gather {
                x: None,
                indices: idx,
                idx_elem: cx.elem(idx)?,
                out,
                esize: oe.size(),
                kind,
            };
            cx.emit(Kernel::Gather(k), vec![idx], vec![out]);
        }
        _ => return Err(cx.err(format!("the CPU engine does not implement op type `{t}`"))),
    }
    Ok(())
}
