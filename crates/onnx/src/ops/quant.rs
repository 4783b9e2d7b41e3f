//! Linear quantization: `DequantizeLinear`, `QuantizeLinear`, `DynamicQuantizeLinear`. Integer
//! tensors are i32 in the graph; the 8-bit range of the ONNX type is applied by saturation.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::{axis, Node};
use crate::proto::tensor_proto::DataType;
use crate::value::Value;
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("DequantizeLinear", dequantize),
    ("QuantizeLinear", quantize),
    ("DynamicQuantizeLinear", dynamic_quantize),
];

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

fn check_block(n: &Node) -> OpResult<()> {
    if n.attr_i("block_size", 0) != 0 {
        return unsupported("block_size");
    }
    Ok(())
}

fn dequantize(n: &Node) -> OpResult<Vec<Value>> {
    check_block(n)?;
    let x = n.tensor(0)?;
    if x.dtype() != DType::I32 {
        return unsupported(format!("{} input (8- and 32-bit integers)", x.dtype()));
    }
    let a = n.attr_i("axis", 1);
    let scale = along_axis(n.tensor(1)?, a, x.rank())?;
    let mut y = x.cast(DType::F32)?;
    if let Some(zp) = n.opt_tensor(2)? {
        y = y.sub(&along_axis(zp.cast(DType::F32)?, a, x.rank())?)?;
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
        _ => unsupported(format!(
            "quantized type {}",
            crate::value::elem_type_name(elem)
        )),
    }
}

fn quantize(n: &Node) -> OpResult<Vec<Value>> {
    check_block(n)?;
    let x = n.tensor(0)?;
    if x.dtype() != DType::F32 {
        return invalid(format!("{} input (float)", x.dtype()));
    }
    let a = n.attr_i("axis", 1);
    let elem = match (n.attr_i("output_dtype", 0), n.opt(2)) {
        (t, _) if t != 0 => t as i32,
        (_, Some(Value::Const(zp))) if zp.elem_type != 0 => zp.elem_type,
        (_, Some(_)) => {
            return unsupported(
                "the zero point is computed at run time; it must be a constant (its type is the output type)",
            )
        }
        (_, None) => DataType::Uint8 as i32,
    };
    let (lo, hi) = range_of(elem)?;
    let scale = along_axis(n.tensor(1)?, a, x.rank())?;
    let mut q = x.div(&scale)?.round()?;
    if let Some(zp) = n.opt_tensor(2)? {
        q = q.add(&along_axis(zp.cast(DType::F32)?, a, x.rank())?)?;
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
