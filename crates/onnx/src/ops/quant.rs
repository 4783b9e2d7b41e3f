//! Linear quantization: `DequantizeLinear`, `QuantizeLinear`, `DynamicQuantizeLinear`. Integer
//! tensors are i32 in the graph; the 8-bit range of the ONNX type is applied by saturation.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::float_format::FloatFormat;
use crate::node::{axis, Node};
use crate::proto::tensor_proto::DataType;
use crate::value::Value;
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("DequantizeLinear", dequantize),
    ("QuantizeLinear", quantize),
    ("DynamicQuantizeLinear", dynamic_quantize),
    ("MatMulInteger", |n| integer_op(n, false)),
    ("ConvInteger", |n| integer_op(n, true)),
    ("QLinearMatMul", |n| qlinear(n, false)),
    ("QLinearConv", |n| qlinear(n, true)),
];

/// `x - zero_point` as floats; the zero point is per tensor or, for the weight operand of a
/// product, per output row (`axis`).
fn centred(x: &Tensor, zp: Option<Tensor>, axis: i64) -> OpResult<Tensor> {
    let xf = x.cast(DType::F32)?;
    Ok(match zp {
        Some(z) => xf.sub(&along_axis(z.cast(DType::F32)?, axis, x.rank())?)?,
        None => xf,
    })
}

/// The float product (matmul or convolution) of two centred operands.
fn product(n: &Node, conv: bool, a: &Tensor, b: &Tensor) -> OpResult<Tensor> {
    if !conv {
        return Ok(a.matmul(b)?);
    }
    let k = a.rank() - 2;
    let list = |name: &str, default: usize, len: usize| -> OpResult<Vec<usize>> {
        match n.attr_ints(name) {
            Some(v) => crate::node::to_usize(&v, name),
            None => Ok(vec![default; len]),
        }
    };
    if !matches!(n.attr_s("auto_pad", "NOTSET").as_str(), "NOTSET" | "VALID") {
        return unsupported("auto_pad SAME_* on integer convolutions");
    }
    let p = list("pads", 0, 2 * k)?;
    let attrs = aneforge::graph::ConvAttrs {
        strides: list("strides", 1, k)?,
        pads: (0..k).map(|i| (p[i], p[i + k])).collect(),
        dilations: list("dilations", 1, k)?,
        groups: n.attr_i("group", 1).max(1) as usize,
    };
    Ok(a.conv(b, None, attrs)?)
}

/// `MatMulInteger` / `ConvInteger`: `(a - a_zp) ⊛ (b - b_zp)` in i32, computed on floats
/// (exact while the sums stay below 2^24).
fn integer_op(n: &Node, conv: bool) -> OpResult<Vec<Value>> {
    let (a, b) = (n.tensor(0)?, n.tensor(1)?);
    let b_axis = if conv { 0 } else { -1 };
    let a = centred(&a, n.opt_tensor(2)?, if conv { 0 } else { -2 })?;
    let b = centred(&b, n.opt_tensor(3)?, b_axis)?;
    tensor(product(n, conv, &a, &b)?.round()?.cast(DType::I32)?)
}

/// `QLinearMatMul(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp)` and `QLinearConv(x, x_s, x_zp, w,
/// w_s, w_zp, y_s, y_zp, bias?)`: dequantize, multiply in float, requantize to y's type.
fn qlinear(n: &Node, conv: bool) -> OpResult<Vec<Value>> {
    let a = n.tensor(0)?;
    let b = n.tensor(3)?;
    let a_f = centred(&a, n.opt_tensor(2)?, 1)?.mul(&along_axis(n.tensor(1)?, 1, a.rank())?)?;
    let b_axis = if conv { 0 } else { -1 };
    let b_scale = along_axis(n.tensor(4)?, b_axis, b.rank())?;
    let b_f = centred(&b, n.opt_tensor(5)?, b_axis)?.mul(&b_scale)?;
    let mut y = product(n, conv, &a_f, &b_f)?;
    if conv {
        if let Some(bias) = n.opt_tensor(8)? {
            // the int32 bias is in units of x_scale · w_scale
            let scale = n
                .tensor(1)?
                .reshape(&[])?
                .mul(&n.tensor(4)?.reshape(&[-1])?)?;
            let bias = bias.cast(DType::F32)?.mul(&scale)?;
            let mut shape = vec![1isize; y.rank()];
            shape[1] = bias.len() as isize;
            y = y.add(&bias.reshape(&shape)?)?;
        }
    }
    let elem = match n.opt(7) {
        Some(Value::Const(zp)) if zp.elem_type != 0 => zp.elem_type,
        Some(_) => {
            return unsupported(format!(
                "the output zero point ({:?}) is computed at run time; it must be a constant \
                 (its type is the output type)",
                n.proto.input.get(7).map_or("", String::as_str)
            ))
        }
        None => DataType::Uint8 as i32,
    };
    let (lo, hi) = range_of(elem)?;
    let y_axis = if conv { 1 } else { -1 };
    let mut q = y
        .div(&along_axis(n.tensor(6)?, y_axis, y.rank())?)?
        .round()?;
    if let Some(zp) = n.opt_tensor(7)? {
        q = q.add(&along_axis(zp.cast(DType::F32)?, y_axis, y.rank())?)?;
    }
    tensor(q.clip(lo, hi)?.cast(DType::I32)?)
}

/// A quantization parameter of `QuantizeLinear`/`DequantizeLinear` shaped to broadcast against
/// `x`: per tensor, per axis (`[C]`), or blocked (`block_size`: `x`'s rank, `ceil(D / block)`
/// along `axis`, each entry covering `block` consecutive elements there).
fn parameter(n: &Node, p: Tensor, x: &Tensor) -> OpResult<Tensor> {
    let a = n.attr_i("axis", 1);
    let block = n.attr_i("block_size", 0);
    if block == 0 {
        return along_axis(p, a, x.rank());
    }
    let a = axis(a, x.rank())?;
    let d = x.shape()[a];
    let block = usize::try_from(block).or_else(|_| invalid("block_size is negative"))?;
    if p.rank() != x.rank() || p.shape()[a] != d.div_ceil(block) {
        return invalid(format!(
            "blocked parameter shape {:?} does not fit input shape {:?} with block_size {block} \
             along axis {a}",
            p.shape(),
            x.shape()
        ));
    }
    let picks: Vec<i64> = (0..d).map(|i| (i / block) as i64).collect();
    let index = crate::value::Const::ints(vec![d], picks)?.to_tensor()?;
    Ok(p.gather(&index, a as isize)?)
}

/// A per-axis parameter (`[C]`) shaped to broadcast along `axis` of an operand of `rank`.
fn along_axis(p: Tensor, a: i64, rank: usize) -> OpResult<Tensor> {
    if p.rank() == 0 || p.len() == 1 && p.rank() <= 1 {
        return Ok(p.reshape(&[])?);
    }
    if p.rank() != 1 {
        return unsupported("blocked quantization parameters");
    }
    let a = axis(a, rank)?;
    let mut shape = vec![1isize; rank];
    shape[a] = p.len() as isize;
    Ok(p.reshape(&shape)?)
}

fn dequantize(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.dtype() == DType::Bool {
        return invalid("bool input (integers or FLOAT8)");
    }
    let scale = parameter(n, n.tensor(1)?, &x)?;
    let mut y = if x.dtype() == DType::F32 {
        x.clone()
    } else {
        x.cast(DType::F32)?
    };
    if let Some(zp) = n.opt_tensor(2)? {
        let zp = if zp.dtype() == DType::F32 {
            zp
        } else {
            zp.cast(DType::F32)?
        };
        y = y.sub(&parameter(n, zp, &x)?)?;
    }
    tensor(y.mul(&scale)?)
}

/// The saturation range of the quantized type.
fn range_of(elem: i32) -> OpResult<(f32, f32)> {
    match DataType::try_from(elem) {
        Ok(DataType::Uint8) => Ok((0.0, 255.0)),
        Ok(DataType::Int8) => Ok((-128.0, 127.0)),
        Ok(DataType::Uint16) => Ok((0.0, 65535.0)),
        Ok(DataType::Int16) => Ok((-32768.0, 32767.0)),
        Ok(DataType::Uint4) => Ok((0.0, 15.0)),
        Ok(DataType::Int4) => Ok((-8.0, 7.0)),
        _ => unsupported(format!(
            "quantized type {}",
            crate::value::elem_type_name(elem)
        )),
    }
}

fn quantize(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.dtype() != DType::F32 {
        return invalid(format!("{} input (float)", x.dtype()));
    }
    let elem = match (n.attr_i("output_dtype", 0), n.opt(2)) {
        (t, _) if t != 0 => t as i32,
        (_, Some(Value::Const(zp))) if zp.elem_type != 0 => zp.elem_type,
        (_, Some(_)) if n.input_types.get(2).is_some_and(|&t| t != 0) => n.input_types[2],
        (_, Some(_)) => {
            return unsupported(format!(
                "the zero point ({:?}) is computed at run time; it must be a constant (its type \
                 is the output type)",
                n.proto.input.get(2).map_or("", String::as_str)
            ))
        }
        (_, None) => DataType::Uint8 as i32,
    };
    let scale = parameter(n, n.tensor(1)?, &x)?;
    let scaled = x.div(&scale)?;
    if let Some(format) = FloatFormat::of(elem) {
        // FLOAT8: the zero point is zero; Cast's rounding and saturation
        return tensor(format.round(&scaled, n.attr_i("saturate", 1) != 0)?);
    }
    let (lo, hi) = range_of(elem)?;
    let mut q = scaled.round()?;
    if let Some(zp) = n.opt_tensor(2)? {
        q = q.add(&parameter(n, zp.cast(DType::F32)?, &x)?)?;
    }
    tensor(q.clip(lo, hi)?.cast(DType::I32)?)
}

fn dynamic_quantize(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.dtype() != DType::F32 {
        return invalid(format!("{} input (float)", x.dtype()));
    }
    let all: Vec<isize> = (0..x.rank() as isize).collect();
    let hi = x.max(&all, false)?.maximum_scalar(0.0)?;
    let lo = x.min(&all, false)?.minimum_scalar(0.0)?;
    let scale = hi.sub(&lo)?.div_scalar(255.0)?;
    let zp = lo.neg()?.div(&scale)?.round()?.clip(0.0, 255.0)?;
    let y = x.div(&scale)?.round()?.add(&zp)?.clip(0.0, 255.0)?;
    Ok(vec![
        Value::Tensor(y.cast(DType::I32)?),
        Value::Tensor(scale),
        Value::Tensor(zp.cast(DType::I32)?),
    ])
}
