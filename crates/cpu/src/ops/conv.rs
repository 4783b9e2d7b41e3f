//! conv, conv_transpose, max_pool, avg_pool, upsample_nearest_neighbor, upsample_bilinear.

use super::linalg::raw_and_epilogue;
use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::conv::{Conv, ConvWeight, Geometry};
use crate::kernels::spatial::{Spatial, SpatialKind, Window};
use crate::kernels::Kernel;
use aneforge_mil::DType;

struct Spatial2 {
    h: usize,
    w: usize,
}

fn spatial_of(cx: &OpCx, xs: &[usize]) -> Result<Spatial2> {
    match xs.len() {
        3 => Ok(Spatial2 { h: 1, w: xs[2] }),
        4 => Ok(Spatial2 { h: xs[2], w: xs[3] }),
        r => Err(cx.err(format!(
            "x must be [N, C, W] or [N, C, H, W], found rank {r}"
        ))),
    }
}

/// Per spatial axis (as 2-D: height then width): (before, after) padding.
#[allow(clippy::too_many_arguments)]
fn pads(
    cx: &mut OpCx,
    sp: usize,
    input: &[usize],
    k: &[usize],
    s: &[usize],
    d: &[usize],
) -> Result<Vec<(usize, usize)>> {
    let pad_type = cx.string("pad_type", Some("valid"))?;
    let mut out = Vec::new();
    match pad_type.as_str() {
        "valid" => out.resize(sp, (0, 0)),
        "custom" => {
            let p = cx.ints("pad")?.unwrap_or_else(|| vec![0; 2 * sp]);
            if p.len() != 2 * sp || p.iter().any(|&v| v < 0) {
                return Err(cx.err(format!(
                    "pad {p:?} must hold {} non-negative values",
                    2 * sp
                )));
            }
            for i in 0..sp {
                out.push((p[2 * i] as usize, p[2 * i + 1] as usize));
            }
        }
        "same" | "same_lower" => {
            for i in 0..sp {
                let ek = (k[i] - 1) * d[i] + 1;
                let total = (s[i] * input[i].div_ceil(s[i]) + ek).saturating_sub(input[i] + s[i]);
                let small = total / 2;
                out.push(if pad_type == "same" {
                    (small, total - small)
                } else {
                    (total - small, small)
                });
            }
        }
        t => {
            return Err(cx.err(format!(
                "unknown pad_type `{t}` (valid, custom, same, same_lower)"
            )))
        }
    }
    Ok(out)
}

fn list(cx: &mut OpCx, arg: &str, sp: usize, default: usize) -> Result<Vec<usize>> {
    match cx.ints(arg)? {
        None => Ok(vec![default; sp]),
        Some(v) if v.len() == sp && v.iter().all(|&x| x >= 1) => {
            Ok(v.iter().map(|&x| x as usize).collect())
        }
        Some(v) => Err(cx.err(format!("{arg} {v:?} must hold {sp} positive values"))),
    }
}

/// Lifts 1-D parameters to (height, width) with height 1.
fn hw<T: Copy>(v: &[T], one: T) -> (T, T) {
    if v.len() == 1 {
        (one, v[0])
    } else {
        (v[0], v[1])
    }
}

pub(crate) fn conv(cx: &mut OpCx, transpose: bool) -> Result<()> {
    let x = cx.input("x")?;
    let wv = cx.input("weight")?;
    let bias = cx.opt_input("bias")?;
    let d = cx.dtype(x);
    if !matches!(d, DType::Fp16 | DType::Fp32) || cx.dtype(wv) != d {
        return Err(cx.err(format!(
            "x and weight must both be fp16 or fp32, found {d} and {}",
            cx.dtype(wv)
        )));
    }
    let xs = cx.shape(x);
    let ws = cx.shape(wv);
    let s2 = spatial_of(cx, &xs)?;
    let sp = xs.len() - 2;
    if ws.len() != xs.len() {
        return Err(cx.err(format!("weight {ws:?} must have the rank of x {xs:?}")));
    }
    if xs.iter().chain(ws.iter()).any(|&d| d == 0) {
        return Err(cx.err(format!(
            "x {xs:?} and weight {ws:?} must not have empty dimensions"
        )));
    }
    let groups = cx.int("groups", Some(1))?;
    if groups < 1 {
        return Err(cx.err("groups must be ≥ 1"));
    }
    let groups = groups as usize;
    let k: Vec<usize> = ws[2..].to_vec();
    let strides = list(cx, "strides", sp, 1)?;
    let dil = list(cx, "dilations", sp, 1)?;
    let input: Vec<usize> = xs[2..].to_vec();
    let (n, cin) = (xs[0], xs[1]);
    let cout = if transpose { ws[1] * groups } else { ws[0] };
    let cin_w = if transpose { ws[0] } else { ws[1] * groups };
    if cin_w != cin || cin % groups != 0 || cout % groups != 0 {
        return Err(cx.err(format!(
            "weight {ws:?} does not match x {xs:?} with groups = {groups}"
        )));
    }
    let p = if transpose {
        let pad_type = cx.string("pad_type", Some("valid"))?;
        let mut out = Vec::new();
        for i in 0..sp {
            let full = (input[i] - 1) * strides[i] + (k[i] - 1) * dil[i] + 1;
            out.push(match pad_type.as_str() {
                "valid" => (0, 0),
                "same" | "same_lower" => {
                    let total = full.saturating_sub(input[i] * strides[i]);
                    let small = total / 2;
                    if pad_type == "same" {
                        (small, total - small)
                    } else {
                        (total - small, small)
                    }
                }
                "custom" => {
                    let pv = cx.ints("pad")?.unwrap_or_else(|| vec![0; 2 * sp]);
                    if pv.len() != 2 * sp {
                        return Err(cx.err(format!("pad must hold {} values", 2 * sp)));
                    }
                    (pv[2 * i].max(0) as usize, pv[2 * i + 1].max(0) as usize)
                }
                t => return Err(cx.err(format!("unknown pad_type `{t}`"))),
            });
        }
        out
    } else {
        pads(cx, sp, &input, &k, &strides, &dil)?
    };
    let mut outsp = Vec::new();
    for i in 0..sp {
        let ek = (k[i] - 1) * dil[i] + 1;
        let o = if transpose {
            ((input[i] - 1) * strides[i] + ek).checked_sub(p[i].0 + p[i].1)
        } else {
            (input[i] + p[i].0 + p[i].1)
                .checked_sub(ek)
                .map(|v| v / strides[i] + 1)
        };
        match o {
            Some(o) if o > 0 => outsp.push(o),
            _ => {
                return Err(cx.err(format!(
                    "spatial axis {i}: input {} with kernel {} gives an empty output",
                    input[i], k[i]
                )))
            }
        }
    }
    let mut os = vec![n, cout];
    os.extend_from_slice(&outsp);
    if transpose {
        if let Some(shape) = cx.ints("output_shape")? {
            let want: Vec<usize> = shape.iter().map(|&v| v.max(0) as usize).collect();
            if want != os {
                return Err(cx.err(format!(
                    "output_shape {want:?} differs from the computed {os:?}"
                )));
            }
        }
    }
    let out = cx.output(0, d, os)?;
    if let Some(b) = bias {
        if cx.shape(b) != [cout] {
            return Err(cx.err(format!("bias must be [{cout}], found {:?}", cx.shape(b))));
        }
    }
    // bias broadcast over [cout, 1...]
    let bias_b = match bias {
        Some(b) => {
            let mut bs = vec![cout];
            bs.extend(std::iter::repeat_n(1, sp));
            Some(cx.alias_temp(b, bs))
        }
        None => None,
    };
    let (raw, epilogue) = raw_and_epilogue(cx, out, bias_b)?;
    let (kh, kw) = hw(&k, 1);
    let (sh, sw) = hw(&strides, 1);
    let (dh, dw) = hw(&dil, 1);
    let pp: Vec<(usize, usize)> = p.clone();
    let ((pt, _), (pl, _)) = hw(&pp, (0, 0));
    let (oh, ow) = hw(&outsp, 1);
    let g = Geometry {
        n,
        cin,
        h: s2.h,
        w: s2.w,
        cout,
        groups,
        kh,
        kw,
        sh,
        sw,
        dh,
        dw,
        pt,
        pl,
        oh,
        ow,
    };
    let weight = match cx.known(wv).and_then(|kn| kn.f32s()) {
        Some(w) => ConvWeight::constant(
            w,
            &g,
            transpose,
            cx.b.bf16_products(cx.dtype(out) == DType::Fp32, g.oh * g.ow),
        ),
        None => ConvWeight::Runtime {
            value: wv,
            elem: cx.elem(wv)?,
            len: ws.iter().product(),
        },
    };
    let x_elem = cx.elem(x)?;
    let mut reads = vec![x];
    if let ConvWeight::Runtime { value, .. } = &weight {
        let value = *value;
        reads.push(value);
    }
    reads.extend(bias_b);
    let mut writes = vec![out];
    if raw != out {
        writes.push(raw);
    }
    cx.emit(
        Kernel::Conv(Conv {
            x,
            x_elem,
            g,
            weight,
            transpose,
            raw,
            epilogue,
            fused: None,
            depthwise_taps: Vec::new(),
            expand: None,
        }),
        reads,
        writes,
    );
    Ok(())
}

pub(crate) fn pool(cx: &mut OpCx, is_max: bool) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let s2 = spatial_of(cx, &xs)?;
    if xs.contains(&0) {
        return Err(cx.err(format!("x {xs:?} must not have empty dimensions")));
    }
    let sp = xs.len() - 2;
    let k = cx.req_ints("kernel_sizes")?;
    if k.len() != sp || k.iter().any(|&v| v < 1) {
        return Err(cx.err(format!("kernel_sizes {k:?} must hold {sp} positive values")));
    }
    let k: Vec<usize> = k.iter().map(|&v| v as usize).collect();
    let strides = list(cx, "strides", sp, 1)?;
    let ceil = cx.boolean("ceil_mode", false)?;
    let exclude = cx.boolean("exclude_padding_from_average", false)?;
    let input: Vec<usize> = xs[2..].to_vec();
    let p = pads(cx, sp, &input, &k, &strides, &vec![1; sp])?;
    let mut outsp = Vec::new();
    for i in 0..sp {
        let pad = p[i].0 + p[i].1;
        let (inp, s, kk) = (input[i] as i64, strides[i] as i64, k[i] as i64);
        let mut o = if ceil {
            (inp + pad as i64 - kk + s - 1).div_euclid(s) + 1
        } else {
            (inp + pad as i64 - kk).div_euclid(s) + 1
        };
        if ceil && pad > 0 && ((o - 1) * s) as f64 >= inp as f64 + pad as f64 / 2.0 {
            o -= 1;
        }
        if o <= 0 {
            return Err(cx.err(format!(
                "spatial axis {i}: input {} with kernel {} gives an empty output",
                input[i], k[i]
            )));
        }
        outsp.push(o as usize);
    }
    let mut os = xs[..2].to_vec();
    os.extend_from_slice(&outsp);
    let d = cx.dtype(x);
    let out = cx.output(0, d, os)?;
    let (kh, kw) = hw(&k, 1);
    let (sh, sw) = hw(&strides, 1);
    let ((pt, pb), (pl, pr)) = hw(&p, (0, 0));
    let (oh, ow) = hw(&outsp, 1);
    let win = Window {
        kh,
        kw,
        sh,
        sw,
        pt,
        pl,
    };
    let kind = if is_max {
        SpatialKind::MaxPool(win)
    } else {
        SpatialKind::AvgPool {
            win,
            pb,
            pr,
            exclude_pad: exclude,
        }
    };
    let k = Spatial {
        x,
        out,
        elem: cx.elem(x)?,
        planes: xs[0] * xs[1],
        h: s2.h,
        w: s2.w,
        oh,
        ow,
        kind,
    };
    cx.emit(Kernel::Spatial(k), vec![x], vec![out]);
    Ok(())
}

fn grid(
    n_in: usize,
    n_out: usize,
    align_corners: bool,
    half_pixel: bool,
) -> Vec<(usize, usize, f32)> {
    (0..n_out)
        .map(|i| {
            let src = if align_corners {
                if n_out > 1 {
                    i as f64 * (n_in as f64 - 1.0) / (n_out as f64 - 1.0)
                } else {
                    0.0
                }
            } else {
                let sp = n_in as f64 / n_out as f64;
                if half_pixel {
                    i as f64 * sp + 0.5 * sp - 0.5
                } else {
                    i as f64 * sp
                }
            };
            let src = src.clamp(0.0, (n_in - 1) as f64);
            let lo = src.floor() as usize;
            let hi = (lo + 1).min(n_in - 1);
            (lo, hi, (src - lo as f64) as f32)
        })
        .collect()
}

pub(crate) fn upsample(cx: &mut OpCx, bilinear: bool) -> Result<()> {
    let x = cx.input("x")?;
    let xs = cx.shape(x);
    let r = xs.len();
    if r < 3 {
        return Err(cx.err("x must have rank ≥ 3"));
    }
    let fh = cx.float("scale_factor_height", Some(1.0))?;
    let fw = cx.float("scale_factor_width", Some(1.0))?;
    let (h, w) = (xs[r - 2], xs[r - 1]);
    if h == 0 || w == 0 || !(fh > 0.0 && fw > 0.0) {
        return Err(cx.err(format!(
            "x {xs:?} must have non-empty spatial dimensions and positive scale factors"
        )));
    }
    let oh = (h as f64 * fh as f64).floor() as usize;
    let ow = (w as f64 * fw as f64).floor() as usize;
    if oh == 0 || ow == 0 {
        return Err(cx.err("scale factors give an empty output"));
    }
    let mut os = xs.clone();
    os[r - 2] = oh;
    os[r - 1] = ow;
    let d = cx.dtype(x);
    let out = cx.output(0, d, os)?;
    let kind = if bilinear {
        let ac = cx.boolean("align_corners", true)?;
        let hp = cx.boolean("half_pixel_centers", !ac)?;
        SpatialKind::Bilinear {
            rows: grid(h, oh, ac, hp),
            cols: grid(w, ow, ac, hp),
        }
    } else {
        SpatialKind::Nearest
    };
    let k = Spatial {
        x,
        out,
        elem: cx.elem(x)?,
        planes: xs[..r - 2].iter().product(),
        h,
        w,
        oh,
        ow,
        kind,
    };
    cx.emit(Kernel::Spatial(k), vec![x], vec![out]);
    Ok(())
}
