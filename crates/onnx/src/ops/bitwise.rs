//! Bitwise ops on integers (`BitwiseAnd`, `BitwiseOr`, `BitwiseXor`, `BitwiseNot`, `BitShift`)
//! from i32 arithmetic and comparisons. The graph holds every integer type as i32, so each op
//! works on the bits of the value's declared ONNX type: a signed value's sign bit weighs
//! −2^(width−1), and unsigned 32- and 64-bit values are below 2^31 (the only ones an i32 holds).

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::Node;
use crate::proto::tensor_proto::DataType;
use crate::value::{elem_type_name, Value};
use aneforge::graph::{constant, scalar, CompareOp};
use aneforge::{DType, HostArray, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("BitwiseAnd", |n| bitwise(n, |a, b| Ok(a.mul(b)?))),
    ("BitwiseOr", |n| {
        bitwise(n, |a, b| Ok(a.add(b)?.sub(&a.mul(b)?)?))
    }),
    ("BitwiseXor", |n| {
        bitwise(n, |a, b| Ok(a.add(b)?.sub(&a.mul(b)?.mul(&int(2))?)?))
    }),
    ("BitwiseNot", not),
    ("BitShift", shift),
];

/// An integer type's width and signedness.
#[derive(Clone, Copy)]
struct IntType {
    width: u32,
    signed: bool,
}

fn int_type(n: &Node, i: usize) -> OpResult<IntType> {
    let code = match n.input(i)? {
        Value::Const(c) if c.elem_type != 0 => c.elem_type,
        _ => n.input_types.get(i).copied().unwrap_or(0),
    };
    use DataType as D;
    let (width, signed) = match D::try_from(code) {
        Ok(D::Int8) => (8, true),
        Ok(D::Uint8) => (8, false),
        Ok(D::Int16) => (16, true),
        Ok(D::Uint16) => (16, false),
        // int64 values the graph holds are i32 values, and their bits above 31 copy the sign
        Ok(D::Int32 | D::Int64) => (32, true),
        Ok(D::Uint32 | D::Uint64) => (32, false),
        _ => {
            return unsupported(format!(
                "input {i} of element type {} (an integer type must be declared)",
                elem_type_name(code)
            ))
        }
    };
    Ok(IntType { width, signed })
}

fn int(v: i64) -> Tensor {
    constant(HostArray::scalar_i32(v as i32))
}

fn integer_tensor(n: &Node, i: usize) -> OpResult<Tensor> {
    let t = n.tensor(i)?;
    if t.dtype() != DType::I32 {
        return unsupported(format!("{} input {i} (integers)", t.dtype()));
    }
    Ok(t)
}

/// The magnitude bits of `x` as 0/1 i32 tensors, lowest first, and for signed types the sign
/// bit: the value is `Σ bits[k]·2^k − sign·2^(width−1)`. Bits are taken from the top by
/// comparison and subtraction, exact over all of i32.
fn bits(x: &Tensor, t: IntType) -> OpResult<(Vec<Tensor>, Option<Tensor>)> {
    let (mut rest, count, sign) = if t.signed {
        let negative = x.compare(CompareOp::Less, &int(0))?;
        let low = negative.select(&x.sub(&int(-(1i64 << (t.width - 1))))?, x)?;
        (low, t.width - 1, Some(negative.cast(DType::I32)?))
    } else {
        (x.clone(), t.width.min(31), None)
    };
    let mut out = vec![None; count as usize];
    for k in (0..count).rev() {
        let weight = int(1i64 << k);
        let set = rest.compare(CompareOp::GreaterEqual, &weight)?;
        rest = set.select(&rest.sub(&weight)?, &rest)?;
        out[k as usize] = Some(set.cast(DType::I32)?);
    }
    Ok((out.into_iter().flatten().collect(), sign))
}

/// `f` applied to the bits of both operands (0/1 i32 tensors, broadcast as the operands are).
fn bitwise(n: &Node, f: fn(&Tensor, &Tensor) -> OpResult<Tensor>) -> OpResult<Vec<Value>> {
    let (ta, tb) = (int_type(n, 0)?, int_type(n, 1)?);
    if ta.width != tb.width || ta.signed != tb.signed {
        return unsupported("operands of different integer types");
    }
    let (a, b) = (integer_tensor(n, 0)?, integer_tensor(n, 1)?);
    let (a_bits, a_sign) = bits(&a, ta)?;
    let (b_bits, b_sign) = bits(&b, tb)?;
    let mut acc: Option<Tensor> = None;
    let mut add = |term: Tensor| -> OpResult<()> {
        acc = Some(match acc.take() {
            Some(s) => s.add(&term)?,
            None => term,
        });
        Ok(())
    };
    for (k, (x, y)) in a_bits.iter().zip(&b_bits).enumerate() {
        add(f(x, y)?.mul(&int(1i64 << k))?)?;
    }
    if let (Some(x), Some(y)) = (a_sign, b_sign) {
        add(f(&x, &y)?.mul(&int(-(1i64 << (ta.width - 1))))?)?;
    }
    match acc {
        Some(y) => tensor(y),
        None => unsupported("no bits"),
    }
}

/// `~x`: `−1 − x` for signed types, `2^width − 1 − x` for unsigned ones.
fn not(n: &Node) -> OpResult<Vec<Value>> {
    let t = int_type(n, 0)?;
    let x = integer_tensor(n, 0)?;
    if t.signed {
        return tensor(int(-1).sub(&x)?);
    }
    if t.width >= 32 {
        return unsupported("the complement of a 32- or 64-bit unsigned value is beyond i32");
    }
    tensor(int((1i64 << t.width) - 1).sub(&x)?)
}

/// `x >> y` and `x << y` on unsigned 32- and 64-bit values (below 2^31 in the graph): bit `k` of
/// `x` moves to `k ∓ y`, weighing the exact power of two `2^(k∓y)`, and is dropped below bit 0
/// or, shifting left, from bit 31 up (a result of 2^31 or more is beyond what the graph holds for
/// these types and comes out modulo 2^31).
fn shift_wide(x: &Tensor, y: &Tensor, t: IntType, right: bool) -> OpResult<Tensor> {
    let (x_bits, _) = bits(x, t)?;
    let yf = y.cast(DType::F32)?;
    let mut acc: Option<Tensor> = None;
    for (k, bit) in x_bits.iter().enumerate() {
        let to = if right {
            yf.neg()?.add_scalar(k as f32)?
        } else {
            yf.add_scalar(k as f32)?
        };
        let weight = scalar(2.0).pow(&to)?;
        let weight = to
            .compare_scalar(CompareOp::LessEqual, 30.0)?
            .select(&weight, &scalar(0.0))?;
        let weight = to
            .compare_scalar(CompareOp::GreaterEqual, 0.0)?
            .select(&weight, &scalar(0.0))?
            .cast(DType::I32)?;
        let term = bit.mul(&weight)?;
        acc = Some(match acc {
            Some(a) => a.add(&term)?,
            None => term,
        });
    }
    acc.ok_or_else(|| crate::error::OpError::Invalid("no bits".into()))
}

/// `x << y` (modulo 2^width) and `x >> y` on unsigned 8- and 16-bit values, computed on f32,
/// where every intermediate (`x · 2^y`, its quotient by 2^width, the floor) is exact.
fn shift(n: &Node) -> OpResult<Vec<Value>> {
    let t = int_type(n, 0)?;
    let right = n.attr_s("direction", "") == "RIGHT";
    if t.signed {
        return unsupported(format!(
            "shifts of {}-bit signed values (BitShift takes unsigned ones)",
            t.width
        ));
    }
    if t.width > 16 {
        return tensor(shift_wide(
            &integer_tensor(n, 0)?,
            &integer_tensor(n, 1)?,
            t,
            right,
        )?);
    }
    let x = integer_tensor(n, 0)?.cast(DType::F32)?;
    let scale = scalar(2.0).pow(&integer_tensor(n, 1)?.cast(DType::F32)?)?;
    let y = match n.attr_s("direction", "").as_str() {
        "LEFT" => {
            let v = x.mul(&scale)?;
            let modulus = (1u32 << t.width) as f32;
            v.sub(&v.div_scalar(modulus)?.floor()?.mul_scalar(modulus)?)?
        }
        "RIGHT" => x.div(&scale)?.floor()?,
        other => return invalid(format!("direction {other:?} (LEFT or RIGHT)")),
    };
    tensor(y.cast(DType::I32)?)
}
