//! Shape and layout ops: reshape-likes become aliases, the rest strided copies.

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::ew::{Chain, Instr, Load};
use crate::kernels::layout::{dense_strides, Copy, Piece};
use crate::kernels::window::{Side, Window};
use crate::kernels::Kernel;
use crate::known::{Data, Known};
use crate::plan::Vid;
use aneforge_mil::DType;

fn esize(cx: &OpCx, v: Vid) -> Result<usize> {
    Ok(cx.elem(v)?.size())
}

fn emit_copy(
    cx: &mut OpCx,
    x: Vid,
    reads: Vec<Vid>,
    outs: Vec<Vid>,
    fills: Vec<(Vid, [u8; 4])>,
    pieces: Vec<Piece>,
    inplace: Option<Vid>,
) -> Result<()> {
    let es = esize(cx, x)?;
    cx.emit(
        Kernel::Copy(Copy::new(es, fills, pieces, inplace)),
        reads,
        outs,
    );
    Ok(())
}

/// Whether the op's `begin` is computed at run time (not a compile-time constant).
fn runtime_begin(cx: &mut OpCx) -> Result<bool> {
    match cx.op.input("begin") {
        Some(aneforge_mil::Argument::Name(_)) => {
            let b = cx.input("begin")?;
            Ok(cx.known(b).is_none())
        }
        _ => Ok(false),
    }
}

/// A runtime position vector: int32 with one entry per axis.
fn check_begin(cx: &OpCx, v: Vid, rank: usize) -> Result<()> {
    if cx.dtype(v) != DType::Int32 || cx.shape(v) != [rank] {
        return Err(cx.err(format!(
            "a runtime begin/end must be int32 [{rank}], found {} {:?}",
            cx.dtype(v),
            cx.shape(v)
        )));
    }
    Ok(())
}

/// Python `slice(b, e, s).indices(d)` → (start, count).
fn py_slice(b: Option<i64>, e: Option<i64>, s: i64, d: usize) -> (i64, usize) {
    let d = d as i64;
    let norm = |v: i64, lo: i64, hi: i64| {
        let v = if v < 0 { v + d } else { v };
        v.clamp(lo, hi)
    };
    let (start, stop) = if s > 0 {
        (
            b.map_or(0, |v| norm(v, 0, d)),
            e.map_or(d, |v| norm(v, 0, d)),
        )
    } else {
        (
            b.map_or(d - 1, |v| norm(v, -1, d - 1)),
            e.map_or(-1, |v| norm(v, -1, d - 1)),
        )
    };
    let count = if s > 0 {
        if stop > start {
            (stop - start + s - 1) / s
        } else {
            0
        }
    } else if start > stop {
        (start - stop + (-s) - 1) / (-s)
    } else {
        0
    };
    (start, count as usize)
}

struct SliceSpec {
    off: isize,
    strides: Vec<isize>,
    /// Full-rank slice shape (before squeezing).
    shape: Vec<usize>,
    squeezed: Vec<usize>,
}

fn slice_spec(cx: &mut OpCx, xs: &[usize]) -> Result<SliceSpec> {
    let r = xs.len();
    let begin = cx.req_ints("begin")?;
    let end = cx.req_ints("end")?;
    let stride = cx.ints("stride")?.unwrap_or_else(|| vec![1; r]);
    let bm = cx.bools("begin_mask")?.unwrap_or_else(|| vec![false; r]);
    let em = cx.bools("end_mask")?.unwrap_or_else(|| vec![false; r]);
    let sm = cx.bools("squeeze_mask")?.unwrap_or_else(|| vec![false; r]);
    if [
        begin.len(),
        end.len(),
        stride.len(),
        bm.len(),
        em.len(),
        sm.len(),
    ]
    .iter()
    .any(|&l| l != r)
    {
        return Err(cx.err(format!(
            "begin/end/stride/masks must all have length rank(x) = {r}"
        )));
    }
    let xst = dense_strides(xs);
    let mut off = 0isize;
    let mut strides = Vec::new();
    let mut shape = Vec::new();
    let mut squeezed = Vec::new();
    for i in 0..r {
        if stride[i] == 0 {
            return Err(cx.err(format!("stride[{i}] is 0")));
        }
        let (start, count) = if sm[i] {
            let b = if begin[i] < 0 {
                begin[i] + xs[i] as i64
            } else {
                begin[i]
            };
            if b < 0 || b >= xs[i] as i64 {
                return Err(cx.err(format!(
                    "squeezed index {} is out of range for dimension {i} of size {}",
                    begin[i], xs[i]
                )));
            }
            (b, 1)
        } else {
            py_slice(
                (!bm[i]).then_some(begin[i]),
                (!em[i]).then_some(end[i]),
                stride[i],
                xs[i],
            )
        };
        off += start as isize * xst[i];
        strides.push(stride[i] as isize * xst[i]);
        shape.push(count);
        if !sm[i] {
            squeezed.push(count);
        }
    }
    Ok(SliceSpec {
        off,
        strides,
        shape,
        squeezed,
    })
}

fn resolve_reshape(cx: &OpCx, xs: &[usize], shape: &[i64]) -> Result<Vec<usize>> {
    let mut to: Vec<i64> = shape.to_vec();
    // 0 copies the input dimension, right-aligned (iOS17 rule; equals iOS15 when ranks match)
    let k = to.len();
    for (idx, t) in to.iter_mut().rev().enumerate() {
        if *t == 0 {
            *t = if idx < xs.len() {
                xs[xs.len() - 1 - idx] as i64
            } else {
                1
            };
        }
    }
    let _ = k;
    let n: usize = xs.iter().product();
    let neg: Vec<usize> = (0..to.len()).filter(|&i| to[i] < 0).collect();
    if neg.len() > 1 || to.iter().any(|&d| d < -1) {
        return Err(cx.err(format!(
            "shape {shape:?}: at most one -1 and no other negative sizes"
        )));
    }
    let known: usize = to
        .iter()
        .filter(|&&d| d >= 0)
        .map(|&d| d as usize)
        .product();
    if let Some(&i) = neg.first() {
        if known == 0 || !n.is_multiple_of(known) {
            return Err(cx.err(format!("cannot infer -1 in {shape:?} for {n} elements")));
        }
        to[i] = (n / known) as i64;
    }
    let out: Vec<usize> = to.iter().map(|&d| d as usize).collect();
    if out.iter().product::<usize>() != n {
        return Err(cx.err(format!("cannot reshape {xs:?} ({n} elements) to {out:?}")));
    }
    Ok(out)
}

pub(super) fn fill(cx: &mut OpCx) -> Result<()> {
    let shape = cx.req_ints("shape")?;
    let v = cx.opt_input("value")?;
    let (dtype, val) = match v {
        Some(v) => {
            let k = cx
                .known(v)
                .ok_or_else(|| cx.err("value must be a constant"))?;
            (
                k.dtype,
                k.f32s().and_then(|f| f.first().copied()).unwrap_or(0.0),
            )
        }
        None => (DType::Fp32, 0.0),
    };
    let shape: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    let n = shape.iter().product();
    let data = match dtype {
        DType::Fp16 => Data::F16(vec![half::f16::from_f32(val); n]),
        DType::Fp32 => Data::F32(vec![val; n].into()),
        DType::Int32 => Data::I32(vec![val as i32; n]),
        DType::Bool => Data::Bool(vec![val != 0.0; n]),
        d => return Err(cx.err(format!("fill value of type {d} is not supported"))),
    };
    cx.known_output(0, Known { dtype, shape, data })?;
    Ok(())
}

pub(super) fn range_1d(cx: &mut OpCx) -> Result<()> {
    let (e, s, st) = (cx.input("end")?, cx.input("start")?, cx.input("step")?);
    let d = cx.dtype(s);
    let get = |v: Vid| {
        cx.known(v)
            .and_then(|k| k.f32s())
            .and_then(|f| f.first().copied())
    };
    let (Some(e), Some(s), Some(st)) = (get(e), get(s), get(st)) else {
        return Err(cx.err("start, end and step must be compile-time constants"));
    };
    if st == 0.0 {
        return Err(cx.err("step is 0"));
    }
    let n = ((e - s) / st).ceil().max(0.0) as usize;
    let vals: Vec<f32> = (0..n).map(|i| s + i as f32 * st).collect();
    let k = match d {
        DType::Int32 => Known {
            dtype: d,
            shape: vec![n],
            data: Data::I32(vals.iter().map(|&v| v as i32).collect()),
        },
        _ => Known::from_f32(d, vec![n], vals),
    };
    cx.known_output(0, k)?;
    Ok(())
}

pub(super) fn identity(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    cx.alias_output(0, x, xs)?;
    Ok(())
}

pub(super) fn reshape(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let shape = cx.req_ints("shape")?;
    let out = resolve_reshape(cx, &xs, &shape)?;
    cx.alias_output(0, x, out)?;
    Ok(())
}

pub(super) fn squeeze(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let out: Vec<usize> = match cx.ints("axes")? {
        None => xs.iter().copied().filter(|&d| d != 1).collect(),
        Some(axes) => {
            let mut drop = vec![false; r];
            for a in axes {
                let a = cx.axis(a, r)?;
                if xs[a] != 1 {
                    return Err(cx.err(format!("cannot squeeze axis {a} of size {}", xs[a])));
                }
                drop[a] = true;
            }
            (0..r).filter(|&i| !drop[i]).map(|i| xs[i]).collect()
        }
    };
    cx.alias_output(0, x, out)?;
    Ok(())
}

pub(super) fn expand_dims(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let axes = cx.req_ints("axes")?;
    let or = r + axes.len();
    let mut pos = Vec::new();
    for a in axes {
        pos.push(cx.axis(a, or)?);
    }
    pos.sort_unstable();
    let mut out = Vec::new();
    let mut it = xs.iter();
    for i in 0..or {
        if pos.contains(&i) {
            out.push(1);
        } else {
            out.push(*it.next().ok_or_else(|| cx.err("duplicate axes"))?);
        }
    }
    cx.alias_output(0, x, out)?;
    Ok(())
}

pub(super) fn transpose(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let dt = cx.dtype(x);
    let perm = cx.req_ints("perm")?;
    if perm.len() != r {
        return Err(cx.err(format!("perm has {} entries, x has rank {r}", perm.len())));
    }
    let mut seen = vec![false; r];
    let mut p = Vec::new();
    for &a in &perm {
        let a = cx.axis(a, r)?;
        if seen[a] {
            return Err(cx.err(format!("perm {perm:?} is not a permutation")));
        }
        seen[a] = true;
        p.push(a);
    }
    let st = dense_strides(&xs);
    let out_shape: Vec<usize> = p.iter().map(|&a| xs[a]).collect();
    let out = cx.output(0, dt, out_shape.clone())?;
    let piece = Piece {
        src: x,
        src_off: 0,
        src_strides: p.iter().map(|&a| st[a]).collect(),
        dst: out,
        dst_off: 0,
        dst_strides: dense_strides(&out_shape),
        shape: out_shape,
    };
    emit_copy(cx, x, vec![x], vec![out], vec![], vec![piece], None)?;
    Ok(())
}

pub(super) fn slice_by_index(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let dt = cx.dtype(x);
    let s = slice_spec(cx, &xs)?;
    let out = cx.output(0, dt, s.squeezed.clone())?;
    let piece = Piece {
        src: x,
        src_off: s.off,
        src_strides: s.strides,
        dst: out,
        dst_off: 0,
        dst_strides: dense_strides(&s.shape),
        shape: s.shape,
    };
    emit_copy(cx, x, vec![x], vec![out], vec![], vec![piece], None)?;
    Ok(())
}

pub(super) fn slice_by_size(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let dt = cx.dtype(x);
    if runtime_begin(cx)? {
        let begin = cx.input("begin")?;
        check_begin(cx, begin, r)?;
        let size = cx.req_ints("size")?;
        if size.len() != r || (0..r).any(|i| size[i] < -1 || size[i] == 0 || size[i] > xs[i] as i64)
        {
            return Err(cx.err(format!(
                "size {size:?} must have {r} entries in 1..=dim (no -1 with a runtime begin) for {xs:?}"
            )));
        }
        if size.contains(&-1) {
            return Err(cx.err("size -1 needs a constant begin"));
        }
        let shape: Vec<usize> = size.iter().map(|&s| s as usize).collect();
        let out = cx.output(0, dt, shape.clone())?;
        let esize = esize(cx, x)?;
        cx.emit(
            Kernel::Window(Window {
                x,
                begin,
                x_shape: xs.clone(),
                shape,
                esize,
                side: Side::Read { out },
            }),
            vec![x, begin],
            vec![out],
        );
        return Ok(());
    }
    let begin = cx.req_ints("begin")?;
    let size = cx.req_ints("size")?;
    if begin.len() != r || size.len() != r {
        return Err(cx.err(format!("begin and size must have length {r}")));
    }
    let st = dense_strides(&xs);
    let mut off = 0isize;
    let mut shape = Vec::new();
    for i in 0..r {
        let b = if begin[i] < 0 {
            begin[i] + xs[i] as i64
        } else {
            begin[i]
        };
        let sz = if size[i] == -1 {
            xs[i] as i64 - b
        } else {
            size[i]
        };
        if b < 0 || sz < 0 || b + sz > xs[i] as i64 {
            return Err(cx.err(format!(
                "begin {begin:?} / size {size:?} out of range for {xs:?}"
            )));
        }
        off += b as isize * st[i];
        shape.push(sz as usize);
    }
    let out = cx.output(0, dt, shape.clone())?;
    let piece = Piece {
        src: x,
        src_off: off,
        src_strides: st,
        dst: out,
        dst_off: 0,
        dst_strides: dense_strides(&shape),
        shape,
    };
    emit_copy(cx, x, vec![x], vec![out], vec![], vec![piece], None)?;
    Ok(())
}

pub(super) fn slice_update(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let dt = cx.dtype(x);
    if runtime_begin(cx)? {
        let u = cx.input("update")?;
        if cx.dtype(u) != dt {
            return Err(cx.err(format!("update is {} but x is {dt}", cx.dtype(u))));
        }
        let begin = cx.input("begin")?;
        check_begin(cx, begin, r)?;
        let end = cx.input("end")?;
        check_begin(cx, end, r)?;
        let plain_stride = cx.ints("stride")?.is_none_or(|s| s.iter().all(|&v| v == 1));
        let no_masks = ["begin_mask", "end_mask", "squeeze_mask"]
            .iter()
            .all(|m| cx.op.input(m).is_none());
        if !plain_stride || !no_masks {
            return Err(cx.err("a runtime begin is supported with unit strides and without masks"));
        }
        let us = cx.shape(u);
        if us.len() != r || (0..r).any(|i| us[i] > xs[i]) {
            return Err(cx.err(format!(
                "update {us:?} must have x's rank and fit inside x {xs:?}"
            )));
        }
        let end = if cx.known(end).is_some() {
            None
        } else {
            Some(end)
        };
        let out = cx.output(0, dt, xs.clone())?;
        let esize = esize(cx, x)?;
        let mut reads = vec![x, u, begin];
        reads.extend(end);
        cx.emit(
            Kernel::Window(Window {
                x,
                begin,
                x_shape: xs.clone(),
                shape: us,
                esize,
                side: Side::Write {
                    update: u,
                    end,
                    out,
                },
            }),
            reads,
            vec![out],
        );
        return Ok(());
    }
    let u = cx.input("update")?;
    if cx.dtype(u) != dt {
        return Err(cx.err(format!("update is {} but x is {dt}", cx.dtype(u))));
    }
    let s = slice_spec(cx, &xs)?;
    if cx.shape(u) != s.squeezed && cx.shape(u) != s.shape {
        return Err(cx.err(format!(
            "update has shape {:?}, the slice has shape {:?}",
            cx.shape(u),
            s.squeezed
        )));
    }
    let out = cx.output(0, dt, xs.clone())?;
    let pieces = vec![
        Piece::dense(x, out, &xs),
        Piece {
            src: u,
            src_off: 0,
            src_strides: dense_strides(&s.shape),
            dst: out,
            dst_off: s.off,
            dst_strides: s.strides,
            shape: s.shape,
        },
    ];
    emit_copy(cx, x, vec![x, u], vec![out], vec![], pieces, Some(x))?;
    Ok(())
}

pub(super) fn split(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let dt = cx.dtype(x);
    let axis = cx.int("axis", None)?;
    let a = cx.axis(axis, r)?;
    let d = xs[a];
    let sizes: Vec<usize> = match (cx.ints("split_sizes")?, cx.ints("num_splits")?) {
        (Some(s), _) => s.iter().map(|&v| v.max(0) as usize).collect(),
        (None, Some(n)) if n.len() == 1 && n[0] > 0 => {
            let n = n[0] as usize;
            if !d.is_multiple_of(n) {
                return Err(cx.err(format!("dimension {d} is not divisible into {n} splits")));
            }
            vec![d / n; n]
        }
        _ => return Err(cx.err("one of split_sizes or num_splits is required")),
    };
    if sizes.iter().sum::<usize>() != d {
        return Err(cx.err(format!("split sizes {sizes:?} do not add up to {d}")));
    }
    let st = dense_strides(&xs);
    let mut outs = Vec::new();
    let mut pieces = Vec::new();
    let mut at = 0;
    for (i, &sz) in sizes.iter().enumerate() {
        let mut s = xs.clone();
        s[a] = sz;
        let o = cx.output(i, dt, s.clone())?;
        pieces.push(Piece {
            src: x,
            src_off: at as isize * st[a],
            src_strides: st.clone(),
            dst: o,
            dst_off: 0,
            dst_strides: dense_strides(&s),
            shape: s,
        });
        outs.push(o);
        at += sz;
    }
    emit_copy(cx, x, vec![x], outs, vec![], pieces, None)?;
    Ok(())
}

pub(super) fn tile(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let dt = cx.dtype(x);
    let reps = cx.req_ints("reps")?;
    if reps.len() != r || reps.iter().any(|&v| v < 1) {
        return Err(cx.err(format!("reps {reps:?} must have {r} positive entries")));
    }
    let os: Vec<usize> = (0..r).map(|i| xs[i] * reps[i] as usize).collect();
    let out = cx.output(0, dt, os.clone())?;
    let (ist, ost) = (dense_strides(&xs), dense_strides(&os));
    let mut shape = Vec::new();
    let mut ss = Vec::new();
    let mut ds = Vec::new();
    for i in 0..r {
        shape.push(reps[i] as usize);
        ss.push(0);
        ds.push(ost[i] * xs[i] as isize);
        shape.push(xs[i]);
        ss.push(ist[i]);
        ds.push(ost[i]);
    }
    let piece = Piece {
        src: x,
        src_off: 0,
        src_strides: ss,
        dst: out,
        dst_off: 0,
        dst_strides: ds,
        shape,
    };
    emit_copy(cx, x, vec![x], vec![out], vec![], vec![piece], None)?;
    Ok(())
}

pub(super) fn pad(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    emit_pad(cx, x, &xs)?;
    Ok(())
}

pub(super) fn space_to_depth(cx: &mut OpCx, t: &str) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let dt = cx.dtype(x);
    let bs = cx.int("block_size", None)?;
    if r != 4 || bs < 1 {
        return Err(cx.err(format!(
            "x must be rank 4 and block_size ≥ 1; x {xs:?}, block_size {bs}"
        )));
    }
    let b = bs as usize;
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (small_c, big_h, big_w, os) = if t == "depth_to_space" {
        if c % (b * b) != 0 {
            return Err(cx.err(format!(
                "channels {c} not divisible by block_size² = {}",
                b * b
            )));
        }
        (
            c / (b * b),
            h * b,
            w * b,
            vec![n, c / (b * b), h * b, w * b],
        )
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(cx.err(format!("spatial {h}x{w} not divisible by block_size {b}")));
        }
        (c, h, w, vec![n, c * b * b, h / b, w / b])
    };
    let out = cx.output(0, dt, os)?;
    // space layout [n, c, hh, i, ww, j] ↔ depth layout [n, (i*b + j)*C + c, hh, ww]
    let (hh, ww) = (big_h / b, big_w / b);
    let shape = vec![n, small_c, hh, b, ww, b];
    let sp: Vec<isize> = {
        let s = dense_strides(&[n, small_c, big_h, big_w]);
        vec![s[0], s[1], s[2] * b as isize, s[2], s[3] * b as isize, s[3]]
    };
    let dp: Vec<isize> = {
        let s = dense_strides(&[n, small_c * b * b, hh, ww]);
        vec![
            s[0],
            s[1],
            s[2],
            s[1] * (b * small_c) as isize,
            s[3],
            s[1] * small_c as isize,
        ]
    };
    let (ss, ds) = if t == "depth_to_space" {
        (dp, sp)
    } else {
        (sp, dp)
    };
    let piece = Piece {
        src: x,
        src_off: 0,
        src_strides: ss,
        dst: out,
        dst_off: 0,
        dst_strides: ds,
        shape,
    };
    emit_copy(cx, x, vec![x], vec![out], vec![], vec![piece], None)?;
    Ok(())
}

pub(super) fn band_part(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    let dt = cx.dtype(x);
    let lower = cx.int("lower", Some(-1))?;
    let upper = cx.int("upper", Some(-1))?;
    if r < 2 {
        return Err(cx.err("x must have rank ≥ 2"));
    }
    let (m, n) = (xs[r - 2], xs[r - 1]);
    let mut mask = vec![false; m * n];
    for i in 0..m {
        for j in 0..n {
            let (i, j) = (i as i64, j as i64);
            mask[i as usize * n + j as usize] =
                (lower < 0 || i - j <= lower) && (upper < 0 || j - i <= upper);
        }
    }
    let mk = cx.b.add_known(
        format!("{}#mask", cx.name),
        Known {
            dtype: DType::Bool,
            shape: vec![m, n],
            data: Data::Bool(mask),
        },
    );
    let zero = cx.b.add_known(
        format!("{}#zero", cx.name),
        Known::from_f32(dt, vec![], vec![0.0]),
    );
    let out = cx.output(0, dt, xs.clone())?;
    let oe = cx.elem(out)?;
    if !oe.is_float() {
        return Err(cx.err(format!("band_part on {dt} is not supported")));
    }
    let loads = vec![
        Load {
            value: mk,
            elem: crate::tensor::Elem::Bool,
            strides: crate::kernels::ew::broadcast_strides(&[m, n], &xs),
        },
        Load {
            value: x,
            elem: oe,
            strides: crate::kernels::ew::broadcast_strides(&xs, &xs),
        },
        Load {
            value: zero,
            elem: oe,
            strides: vec![0; r],
        },
    ];
    let c = Chain {
        shape: xs.clone(),
        loads,
        instrs: vec![Instr::Select(3, 0, 1, 2)],
        nregs: 4,
        stores: vec![(3, out, oe)],
    };
    cx.emit(Kernel::Chain(c), vec![mk, x, zero], vec![out]);
    Ok(())
}

fn emit_pad(cx: &mut OpCx, x: Vid, xs: &[usize]) -> Result<()> {
    let r = xs.len();
    let p = cx.req_ints("pad")?;
    let mode = cx.string("mode", Some("constant"))?;
    let cval = cx.float("constant_val", Some(0.0))?;
    if p.len() % 2 != 0 || p.len() / 2 > r || p.iter().any(|&v| v < 0) {
        return Err(cx.err(format!(
            "pad {p:?} must hold non-negative (before, after) pairs for up to {r} trailing axes"
        )));
    }
    let npad = p.len() / 2;
    let mut before = vec![0usize; r];
    let mut after = vec![0usize; r];
    for i in 0..npad {
        before[r - npad + i] = p[2 * i] as usize;
        after[r - npad + i] = p[2 * i + 1] as usize;
    }
    let os: Vec<usize> = (0..r).map(|i| xs[i] + before[i] + after[i]).collect();
    let dt = cx.dtype(x);
    let out = cx.output(0, dt, os.clone())?;
    let ost = dense_strides(&os);
    let center_off: isize = (0..r).map(|i| before[i] as isize * ost[i]).sum();
    let mut pieces = vec![Piece {
        src: x,
        src_off: 0,
        src_strides: dense_strides(xs),
        dst: out,
        dst_off: center_off,
        dst_strides: ost.clone(),
        shape: xs.to_vec(),
    }];
    let mut fills = Vec::new();
    match mode.as_str() {
        "constant" => {
            let mut pat = [0u8; 4];
            match cx.elem(x)? {
                crate::tensor::Elem::F32 => pat.copy_from_slice(&cval.to_le_bytes()),
                crate::tensor::Elem::F16 => {
                    pat[..2].copy_from_slice(&half::f16::from_f32(cval).to_le_bytes())
                }
                crate::tensor::Elem::I32 => pat.copy_from_slice(&(cval as i32).to_le_bytes()),
                _ => pat[0] = cval as u8,
            }
            if before.iter().chain(after.iter()).any(|&v| v > 0) {
                fills.push((out, pat));
            }
        }
        "reflect" | "replicate" => {
            for a in 0..r {
                if xs[a] == 0 && (before[a] > 0 || after[a] > 0) {
                    return Err(cx.err(format!("{mode} padding of an empty dimension {a}")));
                }
                if mode == "reflect"
                    && (before[a] >= xs[a].max(1) || after[a] >= xs[a].max(1))
                    && (before[a] > 0 || after[a] > 0)
                {
                    return Err(cx.err(format!(
                        "reflect padding {}/{} must be smaller than dimension {a} of size {}",
                        before[a], after[a], xs[a]
                    )));
                }
                let mut slab = os.clone();
                slab[a] = 1;
                let d = xs[a];
                let (b, e) = (before[a], after[a]);
                for q in 0..b {
                    let src = if mode == "reflect" { 2 * b - q } else { b };
                    pieces.push(Piece {
                        src: out,
                        src_off: src as isize * ost[a],
                        src_strides: ost.clone(),
                        dst: out,
                        dst_off: q as isize * ost[a],
                        dst_strides: ost.clone(),
                        shape: slab.clone(),
                    });
                }
                for q in 0..e {
                    let src = if mode == "reflect" {
                        b + d - 2 - q
                    } else {
                        b + d - 1
                    };
                    pieces.push(Piece {
                        src: out,
                        src_off: src as isize * ost[a],
                        src_strides: ost.clone(),
                        dst: out,
                        dst_off: (b + d + q) as isize * ost[a],
                        dst_strides: ost.clone(),
                        shape: slab.clone(),
                    });
                }
            }
        }
        m => {
            return Err(cx.err(format!(
                "unknown pad mode `{m}` (constant, reflect, replicate)"
            )))
        }
    }
    let es = cx.elem(x)?.size();
    cx.emit(
        Kernel::Copy(Copy::new(es, fills, std::mem::take(&mut pieces), None)),
        vec![x],
        vec![out],
    );
    Ok(())
}

pub(super) fn concat(cx: &mut OpCx) -> Result<()> {
    let values = cx.input_list("values")?;
    let axis = cx.int("axis", None)?;
    let interleave = cx.boolean("interleave", false)?;
    let first = *values.first().ok_or_else(|| cx.err("values is empty"))?;
    let fs = cx.shape(first);
    let a = cx.axis(axis, fs.len())?;
    let mut total = 0;
    for &v in &values {
        let s = cx.shape(v);
        if cx.dtype(v) != cx.dtype(first)
            || s.len() != fs.len()
            || (0..s.len()).any(|i| i != a && s[i] != fs[i])
            || (interleave && s[a] != fs[a])
        {
            return Err(cx.err(format!(
                "values {:?} and {:?} cannot be concatenated along axis {a}",
                fs, s
            )));
        }
        total += s[a];
    }
    let mut os = fs.clone();
    os[a] = total;
    let out = cx.output(0, cx.dtype(first), os.clone())?;
    let ost = dense_strides(&os);
    let mut pieces = Vec::new();
    let mut at = 0;
    let nv = values.len() as isize;
    for (i, &v) in values.iter().enumerate() {
        let s = cx.shape(v);
        let mut ds = ost.clone();
        let dst_off = if interleave {
            ds[a] *= nv;
            i as isize * ost[a]
        } else {
            at as isize * ost[a]
        };
        pieces.push(Piece {
            src: v,
            src_off: 0,
            src_strides: dense_strides(&s),
            dst: out,
            dst_off,
            dst_strides: ds,
            shape: s.clone(),
        });
        at += s[a];
    }
    emit_copy(cx, first, values.clone(), vec![out], vec![], pieces, None)?;
    Ok(())
}
