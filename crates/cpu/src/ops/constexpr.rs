//! constexpr_* ops: decompressed once at compile time into plain constants (iOS16 and iOS18 forms).

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::quant::QuantWeight;
use crate::known::{unpack_bits, Data, Known};
use aneforge_mil::DType;

fn known_arg(cx: &mut OpCx, arg: &str) -> Result<Option<Known>> {
    match cx.opt_input(arg)? {
        None => Ok(None),
        Some(v) => cx
            .known(v)
            .cloned()
            .map(Some)
            .ok_or_else(|| cx.err(format!("`{arg}` must be a compile-time constant"))),
    }
}

fn req(cx: &mut OpCx, arg: &str) -> Result<Known> {
    known_arg(cx, arg)?.ok_or_else(|| cx.err(format!("missing argument `{arg}`")))
}

fn nums(cx: &OpCx, k: &Known, arg: &str) -> Result<Vec<f32>> {
    k.f32s()
        .ok_or_else(|| cx.err(format!("`{arg}` must be numeric")))
}

/// Builds the output constant of `dtype` from f32 values (exact for int8/uint8 payloads).
fn make(cx: &OpCx, dtype: DType, shape: Vec<usize>, v: Vec<f32>) -> Result<Known> {
    Ok(match dtype {
        DType::Fp16 | DType::Fp32 => Known::from_f32(dtype, shape, v),
        DType::Int8 => Known {
            dtype,
            shape,
            data: Data::I8(v.iter().map(|&x| x as i8).collect()),
        },
        DType::Uint8 => Known {
            dtype,
            shape,
            data: Data::U8(v.iter().map(|&x| x as u8).collect()),
        },
        d => return Err(cx.err(format!("output dtype {d} is not supported"))),
    })
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Index into a block-broadcast parameter of shape `pshape` for data index `idx` of `dshape`.
fn block_index(idx: usize, dshape: &[usize], pshape: &[usize], pstrides: &[usize]) -> usize {
    let mut rem = idx;
    let mut off = 0;
    for a in (0..dshape.len()).rev() {
        let i = rem % dshape[a];
        rem /= dshape[a];
        let block = dshape[a] / pshape[a];
        off += (i / block) * pstrides[a];
    }
    off
}

/// Integer payload values of a quantized constant, if it is one.
fn int_values(k: &Known) -> Option<Vec<i32>> {
    matches!(
        k.dtype,
        DType::Int8 | DType::Uint8 | DType::Int4 | DType::Uint4
    )
    .then(|| k.i64s())
    .flatten()
    .map(|v| v.into_iter().map(|x| x as i32).collect())
}

pub(crate) fn build(cx: &mut OpCx, t: &str) -> Result<()> {
    let mut quant: Option<QuantWeight> = None;
    let k = match t {
        "constexpr_affine_dequantize" => {
            let q = req(cx, "quantized_data")?;
            let zp = req(cx, "zero_point")?;
            let sc = req(cx, "scale")?;
            let r = q.shape.len();
            let axis = cx.axis_arg("axis", None, r)?;
            let (qv, zv, sv) = (
                nums(cx, &q, "quantized_data")?,
                nums(cx, &zp, "zero_point")?,
                nums(cx, &sc, "scale")?,
            );
            let d = q.shape[axis];
            for (p, name) in [(&zv, "zero_point"), (&sv, "scale")] {
                if p.len() != 1 && p.len() != d {
                    return Err(cx.err(format!(
                        "{name} must be a scalar or have {d} elements (the axis size)"
                    )));
                }
            }
            if let (2, 0, Some(vals)) = (r, axis, int_values(&q)) {
                let n = q.shape[0];
                let per = |p: &Vec<f32>| -> Vec<f32> {
                    (0..n)
                        .map(|j| if p.len() == 1 { p[0] } else { p[j] })
                        .collect()
                };
                quant =
                    QuantWeight::new(n, q.shape[1], q.shape[1], &vals, per(&sv), per(&zv), false);
            }
            let inner: usize = q.shape[axis + 1..].iter().product();
            let out: Vec<f32> = qv
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let c = (i / inner) % d;
                    let s = if sv.len() == 1 { sv[0] } else { sv[c] };
                    let z = if zv.len() == 1 { zv[0] } else { zv[c] };
                    s * (x - z)
                })
                .collect();
            make(cx, sc.dtype, q.shape.clone(), out)?
        }
        "constexpr_cast" => {
            let s = req(cx, "source_val")?;
            let to = cx.string("output_dtype", None)?;
            if to != "fp32" {
                return Err(cx.err(format!("output_dtype `{to}` is not supported (fp32)")));
            }
            let v = nums(cx, &s, "source_val")?;
            make(cx, DType::Fp32, s.shape.clone(), v)?
        }
        "constexpr_lut_to_dense" => {
            let lut = req(cx, "lut")?;
            let lv = nums(cx, &lut, "lut")?;
            if cx.has_arg("shape") {
                // iOS16: packed uint8 indices, 1-D lut, explicit shape
                let idx = req(cx, "indices")?;
                let shape: Vec<usize> = cx
                    .req_ints("shape")?
                    .iter()
                    .map(|&v| v.max(0) as usize)
                    .collect();
                let np = lv.len();
                if ![2, 4, 16, 64, 256].contains(&np) || lut.shape.len() != 1 {
                    return Err(cx.err(format!(
                        "lut must be a vector of 2, 4, 16, 64 or 256 entries, found {:?}",
                        lut.shape
                    )));
                }
                let nbits = np.trailing_zeros() as usize;
                let n: usize = shape.iter().product();
                let Data::U8(bytes) = &idx.data else {
                    return Err(cx.err("indices must be uint8"));
                };
                if bytes.len() != (n * nbits).div_ceil(8) {
                    return Err(cx.err(format!(
                        "indices hold {} bytes, expected ceil({nbits}·{n}/8)",
                        bytes.len()
                    )));
                }
                let ids = unpack_bits(bytes, nbits, n);
                let out: Vec<f32> = ids.iter().map(|&i| lv[i as usize]).collect();
                make(cx, lut.dtype, shape, out)?
            } else {
                // iOS18: uintN indices tensor, lut [*blocks, NUM_PALETTES, VECTOR_SIZE]
                let idx = req(cx, "indices")?;
                let ids = idx
                    .i64s()
                    .ok_or_else(|| cx.err("indices must be unsigned integers"))?;
                let is = idx.shape.clone();
                let r = is.len();
                let ls = lut.shape.clone();
                if ls.len() != r + 2 || (0..r).any(|a| ls[a] == 0 || is[a] % ls[a] != 0) {
                    return Err(cx.err(format!("lut {ls:?} must be [blocks of indices {is:?}..., NUM_PALETTES, VECTOR_SIZE]")));
                }
                let (np, vs) = (ls[r], ls[r + 1]);
                if let Some(bits) = idx.dtype.bits() {
                    if np != 1 << bits {
                        return Err(cx.err(format!(
                            "lut has {np} palettes, but {} indices need {}",
                            idx.dtype,
                            1 << bits
                        )));
                    }
                }
                let va = if vs > 1 {
                    let a = cx.int("vector_axis", None)?;
                    cx.axis(a, r)?
                } else {
                    0
                };
                let mut os = is.clone();
                if vs > 1 {
                    os[va] *= vs;
                }
                let ost = strides(&os);
                let bst = strides(&ls[..r]);
                let mut out = vec![0f32; os.iter().product()];
                for (i, &id) in ids.iter().enumerate() {
                    if id < 0 || id as usize >= np {
                        return Err(cx.err(format!("index {id} is outside the {np}-entry lut")));
                    }
                    let table = block_index(i, &is, &ls[..r], &bst);
                    // output position of element i (vector spread along vector_axis)
                    let mut rem = i;
                    let mut base = 0;
                    for a in (0..r).rev() {
                        let c = rem % is[a];
                        rem /= is[a];
                        base += if vs > 1 && a == va { c * vs } else { c } * ost[a];
                    }
                    for e in 0..vs {
                        let o = base + if vs > 1 { e * ost[va] } else { 0 };
                        out[o] = lv[(table * np + id as usize) * vs + e];
                    }
                }
                make(cx, lut.dtype, os, out)?
            }
        }
        "constexpr_sparse_to_dense" => {
            let nz = req(cx, "nonzero_data")?;
            let nv = nums(cx, &nz, "nonzero_data")?;
            let mask = req(cx, "mask")?;
            let (bits, shape): (Vec<u8>, Vec<usize>) = if cx.has_arg("shape") {
                let shape: Vec<usize> = cx
                    .req_ints("shape")?
                    .iter()
                    .map(|&v| v.max(0) as usize)
                    .collect();
                let n: usize = shape.iter().product();
                let Data::U8(bytes) = &mask.data else {
                    return Err(cx.err("mask must be uint8"));
                };
                if bytes.len() != n.div_ceil(8) {
                    return Err(cx.err(format!(
                        "mask holds {} bytes, expected ceil({n}/8)",
                        bytes.len()
                    )));
                }
                (unpack_bits(bytes, 1, n), shape)
            } else {
                let m = mask.i64s().ok_or_else(|| cx.err("mask must be uint1"))?;
                (
                    m.iter().map(|&x| (x != 0) as u8).collect(),
                    mask.shape.clone(),
                )
            };
            let set = bits.iter().filter(|&&b| b != 0).count();
            if set != nv.len() {
                return Err(cx.err(format!(
                    "mask has {set} set bits but nonzero_data holds {} values",
                    nv.len()
                )));
            }
            let mut it = nv.iter();
            let out: Vec<f32> = bits
                .iter()
                .map(|&b| {
                    if b != 0 {
                        *it.next().unwrap_or(&0.0)
                    } else {
                        0.0
                    }
                })
                .collect();
            let dtype = match nz.dtype {
                DType::Int4 => DType::Int8,
                DType::Uint4 => DType::Uint8,
                d => d,
            };
            make(cx, dtype, shape, out)?
        }
        "constexpr_blockwise_shift_scale" => {
            let data = req(cx, "data")?;
            let sc = req(cx, "scale")?;
            let off = known_arg(cx, "offset")?;
            let (ds, ss) = (data.shape.clone(), sc.shape.clone());
            if ds.len() != ss.len() || (0..ds.len()).any(|a| ss[a] == 0 || ds[a] % ss[a] != 0) {
                return Err(cx.err(format!(
                    "scale {ss:?} must have data's rank and divide data {ds:?} into blocks"
                )));
            }
            if let Some(o) = &off {
                if o.shape != ss {
                    return Err(cx.err(format!(
                        "offset {:?} must have the shape of scale {ss:?}",
                        o.shape
                    )));
                }
            }
            let dv = nums(cx, &data, "data")?;
            let sv = nums(cx, &sc, "scale")?;
            let ov = match &off {
                Some(o) => Some(nums(cx, o, "offset")?),
                None => None,
            };
            let pst = strides(&ss);
            if let (2, Some(mut vals)) = (ds.len(), int_values(&data)) {
                let (n, kk) = (ds[0], ds[1]);
                let (bn, nb) = (n / ss[0], ss[1]);
                let mut scale = Vec::with_capacity(n * nb);
                let mut offset = Vec::with_capacity(n * nb);
                for j in 0..n {
                    for b in 0..nb {
                        scale.push(sv[(j / bn) * nb + b]);
                        offset.push(ov.as_ref().map_or(0.0, |o| o[(j / bn) * nb + b]));
                    }
                }
                let four = matches!(data.dtype, DType::Int4 | DType::Uint4);
                if data.dtype == DType::Int4 {
                    vals.iter_mut().for_each(|v| *v += 8);
                    offset.iter_mut().for_each(|o| *o += 8.0);
                }
                quant = QuantWeight::new(n, kk, kk / nb, &vals, scale, offset, four);
            }
            let out: Vec<f32> = dv
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let b = block_index(i, &ds, &ss, &pst);
                    let x = match &ov {
                        Some(o) => x - o[b],
                        None => x,
                    };
                    sv[b] * x
                })
                .collect();
            make(cx, sc.dtype, ds, out)?
        }
        _ => return Err(cx.err(format!("the CPU engine does not implement op type `{t}`"))),
    };
    let v = cx.known_output(0, k)?;
    if let Some(q) = quant {
        cx.b.quant.insert(v, q);
    }
    Ok(())
}
