//! `constexpr_blockwise_shift_scale` kept quantized: a rank-2 constant with 4- or 8-bit data (or
//! fp16 data without offsets), blocks along the last axis and float scales/offsets becomes a
//! [`QuantTensor`] over the weights blob (no copy). `linear` and `gather` compute on it directly; any other consumer sees the
//! dequantized values. `constexpr_cast` of an fp16 matrix to fp32 is kept the same way, as fp16.
//! Other forms fall back to the decompressing implementation.

use std::sync::Arc;

use aneforge_mil::{Argument, DType, Literal};

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::quant_blocks::{Params, QFormat, QuantGather, QuantTensor, Storage};
use crate::kernels::Kernel;
use crate::known::{Data, Known};

/// The blob storage and payload offset of a BLOBFILE literal argument.
fn blob_arg(cx: &OpCx, arg: &str) -> Option<(Storage, usize, DType, Vec<usize>)> {
    let Some(Argument::Literal(Literal::Blob { ty, path, offset })) = cx.op.input(arg) else {
        return None;
    };
    let file = cx.b.blobs.get(path)?;
    file.payload(*offset, ty).ok()?;
    let entry = file.entry(*offset).ok()?;
    Some((
        file.shared_bytes(),
        entry.data_offset as usize,
        ty.dtype,
        ty.static_shape()?,
    ))
}

fn params(cx: &mut OpCx, arg: &str, shape: &[usize], storage: &Storage) -> Result<Option<Params>> {
    if let Some((bytes, off, dtype, s)) = blob_arg(cx, arg) {
        if s != shape {
            return Ok(None);
        }
        if Arc::ptr_eq(&bytes, storage) {
            return Ok(match dtype {
                DType::Fp32 => Some(Params::F32 { off }),
                DType::Fp16 => Some(Params::F16 { off }),
                _ => None,
            });
        }
    }
    let Some(v) = cx.opt_input(arg)? else {
        return Ok(None);
    };
    let Some(k) = cx.known(v) else {
        return Ok(None);
    };
    if k.shape != shape {
        return Ok(None);
    }
    Ok(k.f32s().map(|v| Params::Owned(v.into())))
}

/// Builds the quantized constant when the op has the supported form; `false` otherwise.
fn try_quantized(cx: &mut OpCx) -> Result<bool> {
    let Some((bytes, data_off, dtype, shape)) = blob_arg(cx, "data") else {
        return Ok(false);
    };
    let format = match dtype {
        DType::Uint4 => QFormat::U4,
        DType::Int4 => QFormat::I4,
        DType::Uint8 => QFormat::U8,
        DType::Int8 => QFormat::I8,
        // fp16 values scaled per block (a bf16 matrix kept in fp16 with power-of-two scales)
        DType::Fp16 if cx.op.input("offset").is_none() => QFormat::F16,
        _ => return Ok(false),
    };
    let [rows, cols] = shape[..] else {
        return Ok(false);
    };
    let Some(scale_v) = cx.opt_input("scale")? else {
        return Ok(false);
    };
    let out_dtype = cx.dtype(scale_v);
    if !matches!(out_dtype, DType::Fp32 | DType::Fp16) {
        return Ok(false);
    }
    let ss = cx.shape(scale_v);
    let [srows, blocks] = ss[..] else {
        return Ok(false);
    };
    if srows != rows || blocks == 0 || !cols.is_multiple_of(blocks) {
        return Ok(false);
    }
    let Some(scale) = params(cx, "scale", &ss, &bytes)? else {
        return Ok(false);
    };
    let offset = match cx.op.input("offset") {
        None => None,
        Some(_) => {
            let Some(v) = cx.opt_input("offset")? else {
                return Ok(false);
            };
            if !matches!(cx.dtype(v), DType::Fp32 | DType::Fp16) {
                return Ok(false);
            }
            match params(cx, "offset", &ss, &bytes)? {
                Some(p) => Some(p),
                None => return Ok(false),
            }
        }
    };
    let q = QuantTensor::new(
        bytes,
        data_off,
        format,
        rows,
        cols,
        cols / blocks,
        scale,
        offset,
    )
    .map_err(|e| cx.err(e))?;
    cx.known_output(
        0,
        Known {
            dtype: out_dtype,
            shape: vec![rows, cols],
            data: Data::Quant(Arc::new(q)),
        },
    )?;
    Ok(true)
}

/// `constexpr_cast(source_val = fp16 [rows, cols] blob entry, output_dtype = "fp32")` kept as
/// fp16 in the blob ([`QuantTensor::half`]); `false` for any other form.
fn try_half(cx: &mut OpCx) -> Result<bool> {
    let Some((bytes, data_off, DType::Fp16, shape)) = blob_arg(cx, "source_val") else {
        return Ok(false);
    };
    let [rows, cols] = shape[..] else {
        return Ok(false);
    };
    if cx.string("output_dtype", None)? != "fp32" {
        return Ok(false);
    }
    let q = QuantTensor::half(bytes, data_off, rows, cols).map_err(|e| cx.err(e))?;
    cx.known_output(
        0,
        Known {
            dtype: DType::Fp32,
            shape: vec![rows, cols],
            data: Data::Quant(Arc::new(q)),
        },
    )?;
    Ok(true)
}

pub(crate) fn constexpr(cx: &mut OpCx, t: &str) -> Result<()> {
    let kept = match t {
        "constexpr_cast" => try_half(cx)?,
        _ => try_quantized(cx)?,
    };
    if kept {
        return Ok(());
    }
    super::constexpr::build(cx, t)
}

/// The quantized matrix behind a value, if any.
pub(crate) fn quantized(cx: &OpCx, v: crate::plan::Vid) -> Option<Arc<QuantTensor>> {
    match &cx.known(v)?.data {
        Data::Quant(q) => Some(q.clone()),
        _ => None,
    }
}

/// `gather(x = quantized [rows, cols], indices, axis = 0)`: dequantizes only the picked rows.
/// Returns `false` when the form does not apply.
pub(crate) fn gather(cx: &mut OpCx) -> Result<bool> {
    let x = cx.input("x")?;
    let Some(q) = quantized(cx, x) else {
        return Ok(false);
    };
    let idx = cx.input("indices")?;
    let axis = cx.axis_arg("axis", Some(0), 2)?;
    let bd = cx.int("batch_dims", Some(0))?;
    if axis != 0 || bd != 0 {
        return Ok(false);
    }
    let is = cx.shape(idx);
    let mut os = is.clone();
    os.push(q.cols);
    let out = cx.output(0, cx.dtype(x), os)?;
    let kernel = QuantGather {
        count: is.iter().product(),
        q,
        indices: idx,
        idx_elem: cx.elem(idx)?,
        out,
        out_elem: cx.elem(out)?,
    };
    cx.emit(Kernel::QuantGather(kernel), vec![idx], vec![out]);
    Ok(true)
}
