//! Unary, binary, select, cast, quantize and dequantize ops: each becomes a one-op elementwise
//! chain (float) or an integer kernel; fusion merges chains later.

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::ew::{
    broadcast_shapes, broadcast_strides, Affine, BinOp, Chain, Instr, IntEw, IntOp, Load, UnOp,
};
use crate::kernels::Kernel;
use crate::plan::Vid;
use crate::tensor::Elem;
use aneforge_mil::DType;

fn unary_op(cx: &mut OpCx, t: &str) -> Result<Option<UnOp>> {
    Ok(Some(match t {
        "relu" => UnOp::Relu,
        "relu6" => UnOp::Relu6,
        "gelu" => match cx.string("mode", Some("EXACT"))?.as_str() {
            "EXACT" => UnOp::GeluExact,
            "TANH_APPROXIMATION" => UnOp::GeluTanh,
            "SIGMOID_APPROXIMATION" => UnOp::GeluSigmoid,
            m => {
                return Err(cx.err(format!(
                    "unknown gelu mode `{m}` (EXACT, TANH_APPROXIMATION, SIGMOID_APPROXIMATION)"
                )))
            }
        },
        "silu" => UnOp::Silu,
        "sigmoid" => UnOp::Sigmoid,
        "sigmoid_hard" => {
            UnOp::SigmoidHard(cx.float("alpha", Some(0.2))?, cx.float("beta", Some(0.5))?)
        }
        "tanh" => UnOp::Tanh,
        "exp" => UnOp::Exp,
        "exp2" => UnOp::Exp2,
        "log" => UnOp::Log(cx.float("epsilon", Some(1e-45))?),
        "sqrt" => UnOp::Sqrt,
        "rsqrt" => UnOp::Rsqrt(cx.float("epsilon", Some(1e-12))?),
        "inverse" => UnOp::Inverse(cx.float("epsilon", Some(1e-4))?),
        "abs" => UnOp::Abs,
        "sign" => UnOp::Sign,
        "square" => UnOp::Square,
        "sin" => UnOp::Sin,
        "cos" => UnOp::Cos,
        "erf" => UnOp::Erf,
        "softplus" => UnOp::Softplus,
        "softsign" => UnOp::Softsign,
        "clip" => UnOp::Clip(cx.float("alpha", None)?, cx.float("beta", None)?),
        "leaky_relu" => UnOp::LeakyRelu(cx.float("alpha", Some(0.01))?),
        "elu" => UnOp::Elu(cx.float("alpha", Some(1.0))?),
        "floor" => UnOp::Floor,
        "ceil" => UnOp::Ceil,
        "round" => UnOp::Round,
        "logical_not" => UnOp::Not,
        _ => return Ok(None),
    }))
}

fn binary_op(t: &str) -> Option<BinOp> {
    Some(match t {
        "add" => BinOp::Add,
        "sub" => BinOp::Sub,
        "mul" => BinOp::Mul,
        "real_div" => BinOp::Div,
        "pow" => BinOp::Pow,
        "maximum" => BinOp::Max,
        "minimum" => BinOp::Min,
        "floor_div" => BinOp::FloorDiv,
        "mod" => BinOp::Mod,
        "equal" => BinOp::Eq,
        "not_equal" => BinOp::Ne,
        "greater" => BinOp::Gt,
        "greater_equal" => BinOp::Ge,
        "less" => BinOp::Lt,
        "less_equal" => BinOp::Le,
        "logical_and" => BinOp::And,
        "logical_or" => BinOp::Or,
        "logical_xor" => BinOp::Xor,
        _ => return None,
    })
}

/// `pow(x, c)` of floats by a constant c of 2, 3 or 4 that leaves x's shape as it is: products
/// instead of a `powf` call per element (GELU's tanh form computes `pow(x, 3)` over every
/// activation of a transformer's feed-forward layers).
fn small_power(cx: &OpCx, b: BinOp, x: Vid, y: Vid, shape: &[usize]) -> Option<UnOp> {
    if b != BinOp::Pow || cx.shape(x) != shape || !matches!(cx.dtype(x), DType::Fp16 | DType::Fp32)
    {
        return None;
    }
    let c = cx.known(y)?.f32s()?;
    let first = *c.first()?;
    if c.iter().any(|&v| v != first) {
        return None;
    }
    match first {
        2.0 => Some(UnOp::Square),
        3.0 => Some(UnOp::Cube),
        4.0 => Some(UnOp::Fourth),
        _ => None,
    }
}

/// Emits a one-op elementwise kernel over `ins` (broadcast to `shape`) producing output 0.
fn emit(cx: &mut OpCx, ins: &[Vid], shape: Vec<usize>, out_dtype: DType, op: IntOp) -> Result<()> {
    if shape.len() > 8 {
        return Err(cx.err(format!(
            "rank {} exceeds the engine's limit of 8",
            shape.len()
        )));
    }
    let out = cx.output(0, out_dtype, shape.clone())?;
    let out_elem = cx.elem(out)?;
    let mut loads = Vec::new();
    for &v in ins {
        loads.push(Load {
            value: v,
            elem: cx.elem(v)?,
            strides: broadcast_strides(&cx.shape(v), &shape),
        });
    }
    // an integer cast to f32 rounds once whichever way it goes (the float chain's load converts
    // it directly, the integer kernel through an exact f64), so it runs as a float chain, which
    // the ops reading it fuse into (a mean pooling's mask)
    let to_f32 = matches!(op, IntOp::Un(UnOp::Copy)) && out_elem == Elem::F32;
    let float = (to_f32
        || loads
            .iter()
            .all(|l| l.elem.is_float() || l.elem == Elem::Bool))
        && (out_elem.is_float() || out_elem == Elem::Bool);
    let kernel = if float {
        let n = ins.len();
        let instr = match op {
            IntOp::Un(u) => Instr::Un(u, n, 0),
            IntOp::Bin(b) => Instr::Bin(b, n, 0, 1),
            IntOp::Select => Instr::Select(n, 0, 1, 2),
            IntOp::Quantize(_) | IntOp::Dequantize(_) => {
                return Err(cx.err("quantized values are int8 or uint8, never float"))
            }
        };
        let mut instrs = vec![instr];
        if out_elem == Elem::F16 {
            instrs.push(Instr::Un(UnOp::RoundF16, n, n));
        }
        let c = Chain {
            shape,
            loads,
            instrs,
            nregs: n + 1,
            stores: vec![(n, out, out_elem)],
        };
        Kernel::Chain(c)
    } else {
        Kernel::IntEw(IntEw {
            shape,
            loads,
            op,
            out,
            out_elem,
        })
    };
    cx.emit(kernel, ins.to_vec(), vec![out]);
    Ok(())
}

pub(crate) fn build(cx: &mut OpCx, t: &str) -> Result<()> {
    if let Some(u) = unary_op(cx, t)? {
        let x = cx.input("x")?;
        let d = cx.dtype(x);
        let out_d = if t == "logical_not" { DType::Bool } else { d };
        if t == "logical_not" && d != DType::Bool {
            return Err(cx.err(format!("x must be bool, found {d}")));
        }
        if t != "logical_not" && !matches!(d, DType::Fp16 | DType::Fp32 | DType::Int32) {
            return Err(cx.err(format!("x must be fp16, fp32 or int32, found {d}")));
        }
        let shape = cx.shape(x);
        return emit(cx, &[x], shape, out_d, IntOp::Un(u));
    }
    if let Some(b) = binary_op(t) {
        let x = cx.input("x")?;
        let y = cx.input("y")?;
        let (dx, dy) = (cx.dtype(x), cx.dtype(y));
        if dx != dy {
            return Err(cx.err(format!(
                "x is {dx} but y is {dy}; both must have the same dtype"
            )));
        }
        if b.is_logical() && dx != DType::Bool {
            return Err(cx.err(format!("x and y must be bool, found {dx}")));
        }
        let shape = broadcast_shapes(&cx.shape(x), &cx.shape(y)).ok_or_else(|| {
            cx.err(format!(
                "shapes {:?} and {:?} do not broadcast",
                cx.shape(x),
                cx.shape(y)
            ))
        })?;
        let out_d = if b.is_compare() { DType::Bool } else { dx };
        if let Some(u) = small_power(cx, b, x, y, &shape) {
            return emit(cx, &[x], shape, out_d, IntOp::Un(u));
        }
        return emit(cx, &[x, y], shape, out_d, IntOp::Bin(b));
    }
    match t {
        "select" => {
            let c = cx.input("cond")?;
            let a = cx.input("a")?;
            let b = cx.input("b")?;
            if cx.dtype(a) != cx.dtype(b) {
                return Err(cx.err(format!("a is {} but b is {}", cx.dtype(a), cx.dtype(b))));
            }
            let s = broadcast_shapes(&cx.shape(c), &cx.shape(a))
                .and_then(|s| broadcast_shapes(&s, &cx.shape(b)))
                .ok_or_else(|| cx.err("cond, a and b do not broadcast"))?;
            let d = cx.dtype(a);
            emit(cx, &[c, a, b], s, d, IntOp::Select)
        }
        "cast" => {
            let x = cx.input("x")?;
            let name = cx.string("dtype", None)?;
            let d = match name.as_str() {
                "int32" => DType::Int32,
                "fp16" => DType::Fp16,
                "fp32" => DType::Fp32,
                "bool" => DType::Bool,
                "int8" => DType::Int8,
                "uint8" => DType::Uint8,
                other => {
                    return Err(cx.err(format!(
                        "cast to `{other}` is not supported (int32, fp16, fp32, bool, int8, uint8)"
                    )))
                }
            };
            let shape = cx.shape(x);
            emit(cx, &[x], shape, d, IntOp::Un(UnOp::Copy))
        }
        "quantize" => quantize(cx),
        "dequantize" => dequantize(cx),
        _ => Err(cx.err(format!("the CPU engine does not implement op type `{t}`"))),
    }
}

/// The per-tensor scale and zero point of `quantize`/`dequantize` (iOS17): scalar constants;
/// per-axis (vector) parameters are refused by name.
fn affine(cx: &mut OpCx, int: DType, float: DType) -> Result<Affine> {
    if cx.has_arg("axis") {
        return Err(cx.err(
            "per-axis quantization (an `axis` argument) is not implemented; use a scalar scale",
        ));
    }
    let s = cx.input("scale")?;
    if !cx.shape(s).is_empty() {
        return Err(cx.err(format!(
            "scale must be a scalar, found shape {:?}",
            cx.shape(s)
        )));
    }
    let scale = f64::from(cx.float("scale", None)?);
    if !(scale.is_finite() && scale != 0.0) {
        return Err(cx.err(format!("scale {scale} must be finite and nonzero")));
    }
    let zero = match cx.ints("zero_point")? {
        None => 0.0,
        Some(v) if v.len() == 1 => v[0] as f64,
        Some(v) => {
            return Err(cx.err(format!(
                "zero_point must be a scalar, found {} values",
                v.len()
            )))
        }
    };
    let (lo, hi) = match int {
        DType::Int8 => (-128.0, 127.0),
        DType::Uint8 => (0.0, 255.0),
        d => return Err(cx.err(format!("quantized type {d} is not int8 or uint8"))),
    };
    let float = match float {
        DType::Fp16 => Elem::F16,
        DType::Fp32 => Elem::F32,
        d => return Err(cx.err(format!("float type {d} is not fp16 or fp32"))),
    };
    Ok(Affine {
        scale,
        zero,
        lo,
        hi,
        float,
    })
}

fn quantize_kernel(cx: &mut OpCx, x: Vid, out_dtype: DType, op: IntOp) -> Result<()> {
    let shape = cx.shape(x);
    let out = cx.output(0, out_dtype, shape.clone())?;
    let out_elem = cx.elem(out)?;
    let load = Load {
        value: x,
        elem: cx.elem(x)?,
        strides: broadcast_strides(&shape, &shape),
    };
    let kernel = Kernel::IntEw(IntEw {
        shape,
        loads: vec![load],
        op,
        out,
        out_elem,
    });
    cx.emit(kernel, vec![x], vec![out]);
    Ok(())
}

fn quantize(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("input")?;
    let int = match cx.string("output_dtype", None)?.as_str() {
        "int8" => DType::Int8,
        "uint8" => DType::Uint8,
        other => {
            return Err(cx.err(format!(
                "output_dtype `{other}` is not supported (int8, uint8)"
            )))
        }
    };
    let float = cx.dtype(x);
    let a = affine(cx, int, float)?;
    quantize_kernel(cx, x, int, IntOp::Quantize(a))
}

fn dequantize(cx: &mut OpCx) -> Result<()> {
    let x = cx.input("input")?;
    let scale = cx.input("scale")?;
    let float = cx.dtype(scale);
    let int = cx.dtype(x);
    let a = affine(cx, int, float)?;
    quantize_kernel(cx, x, float, IntOp::Dequantize(a))
}
