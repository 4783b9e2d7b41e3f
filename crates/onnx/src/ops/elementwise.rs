//! Elementwise ops and activations: unary maps, broadcast arithmetic and comparisons, logic,
//! `Where`, `Clip` and the activation functions composed from graph ops.

use super::{one, tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::fold::{elementwise, Out};
use crate::node::Node;
use crate::value::{Const, Value};
use aneforge::graph::{scalar, CompareOp, UnaryOp};
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("Relu", relu),
    ("Sigmoid", |n| {
        unary(n, UnaryOp::Sigmoid, |x| 1.0 / (1.0 + (-x).exp()))
    }),
    ("Tanh", |n| unary(n, UnaryOp::Tanh, f64::tanh)),
    ("Exp", |n| unary(n, UnaryOp::Exp, f64::exp)),
    ("Log", |n| unary(n, UnaryOp::Log, f64::ln)),
    ("Sqrt", |n| unary(n, UnaryOp::Sqrt, f64::sqrt)),
    ("Abs", |n| unary(n, UnaryOp::Abs, f64::abs)),
    ("Neg", |n| unary(n, UnaryOp::Neg, |x| -x)),
    ("Sin", |n| unary(n, UnaryOp::Sin, f64::sin)),
    ("Cos", |n| unary(n, UnaryOp::Cos, f64::cos)),
    ("Erf", |n| unary(n, UnaryOp::Erf, erf)),
    ("Floor", |n| unary(n, UnaryOp::Floor, f64::floor)),
    ("Ceil", |n| unary(n, UnaryOp::Ceil, f64::ceil)),
    ("Round", |n| unary(n, UnaryOp::Round, f64::round_ties_even)),
    ("Sign", |n| unary(n, UnaryOp::Sign, sign)),
    ("Softplus", |n| {
        unary(n, UnaryOp::Softplus, |x| x.exp().ln_1p())
    }),
    ("Reciprocal", reciprocal),
    ("Tan", tan),
    ("Add", |n| binary(n, Tensor::add, |v| v[0] + v[1])),
    ("Sub", |n| binary(n, Tensor::sub, |v| v[0] - v[1])),
    ("Mul", |n| binary(n, Tensor::mul, |v| v[0] * v[1])),
    ("Div", div),
    ("Pow", pow),
    ("Mod", modulo),
    ("Max", |n| variadic(n, Tensor::maximum, |v| v[0].max(v[1]))),
    ("Min", |n| variadic(n, Tensor::minimum, |v| v[0].min(v[1]))),
    ("Sum", |n| variadic(n, Tensor::add, |v| v[0] + v[1])),
    ("Mean", mean),
    ("Equal", |n| compare(n, CompareOp::Equal, |a, b| a == b)),
    ("Less", |n| compare(n, CompareOp::Less, |a, b| a < b)),
    ("LessOrEqual", |n| {
        compare(n, CompareOp::LessEqual, |a, b| a <= b)
    }),
    ("Greater", |n| compare(n, CompareOp::Greater, |a, b| a > b)),
    ("GreaterOrEqual", |n| {
        compare(n, CompareOp::GreaterEqual, |a, b| a >= b)
    }),
    ("Not", not),
    ("And", |n| logic(n, |a, b| a && b)),
    ("Or", |n| logic(n, |a, b| a || b)),
    ("Xor", |n| logic(n, |a, b| a != b)),
    ("Where", where_),
    ("Clip", clip),
    ("LeakyRelu", |n| {
        float_tensor(n)?
            .leaky_relu(n.attr_f("alpha", 0.01))
            .map_or_else(|e| Err(e.into()), tensor)
    }),
    ("Elu", |n| {
        float_tensor(n)?
            .elu(n.attr_f("alpha", 1.0))
            .map_or_else(|e| Err(e.into()), tensor)
    }),
    ("Selu", selu),
    ("Celu", celu),
    ("HardSigmoid", hard_sigmoid),
    ("HardSwish", hard_swish),
    ("Softsign", softsign),
    ("Mish", mish),
    ("PRelu", prelu),
    ("ThresholdedRelu", thresholded_relu),
    ("Gelu", gelu),
    ("IsNaN", is_nan),
    ("IsInf", is_inf),
    ("Sinh", |n| {
        hyperbolic(n, |x| {
            Ok(x.exp()?.sub(&x.neg()?.exp()?)?.mul_scalar(0.5)?)
        })
    }),
    ("Cosh", |n| {
        hyperbolic(n, |x| {
            Ok(x.exp()?.add(&x.neg()?.exp()?)?.mul_scalar(0.5)?)
        })
    }),
    ("Asinh", |n| {
        hyperbolic(n, |x| {
            Ok(x.add(&x.square()?.add_scalar(1.0)?.sqrt()?)?.log()?)
        })
    }),
    ("Acosh", |n| {
        hyperbolic(n, |x| {
            Ok(x.add(&x.square()?.sub_scalar(1.0)?.sqrt()?)?.log()?)
        })
    }),
    ("Atanh", |n| {
        hyperbolic(n, |x| {
            let ratio = x.add_scalar(1.0)?.div(&x.neg()?.add_scalar(1.0)?)?;
            Ok(ratio.log()?.mul_scalar(0.5)?)
        })
    }),
    ("Atan", |n| inverse_trig(n, f64::atan, atan)),
    ("Asin", |n| {
        inverse_trig(n, f64::asin, |x| {
            // asin x = atan(x / √((1 − x)(1 + x))); ±1 give ±∞ and so ±π/2
            let cos = x.neg()?.add_scalar(1.0)?.mul(&x.add_scalar(1.0)?)?.sqrt()?;
            atan(&x.div(&cos)?)
        })
    }),
    ("Acos", |n| {
        inverse_trig(n, f64::acos, |x| {
            // acos x = 2·atan(√((1 − x)/(1 + x))), accurate near both ends; −1 gives π
            let ratio = x.neg()?.add_scalar(1.0)?.div(&x.add_scalar(1.0)?)?;
            Ok(atan(&ratio.sqrt()?)?.mul_scalar(2.0)?)
        })
    }),
    ("Shrink", shrink),
];

fn inverse_trig(
    n: &Node,
    fold: fn(f64) -> f64,
    build: fn(&Tensor) -> OpResult<Tensor>,
) -> OpResult<Vec<Value>> {
    if let Value::Const(c) = n.input(0)? {
        return fold1(c, fold);
    }
    tensor(build(&float_tensor(n)?)?)
}

/// atan from graph arithmetic: |x| > 1 is reflected through atan(1/t) = π/2 − atan(t), two
/// half-angle steps (atan t = 2·atan(t / (1 + √(1 + t²)))) bring the argument under
/// tan(π/16) ≈ 0.199, and the odd series to u¹³ then leaves a relative error below 1e-10.
fn atan(x: &Tensor) -> OpResult<Tensor> {
    let a = x.abs()?;
    let reflect = a.compare_scalar(CompareOp::Greater, 1.0)?;
    let mut u = reflect.select(&a.recip()?, &a)?;
    for _ in 0..2 {
        let hyp = u.square()?.add_scalar(1.0)?.sqrt()?.add_scalar(1.0)?;
        u = u.div(&hyp)?;
    }
    let z = u.square()?;
    let mut series = scalar(1.0 / 13.0);
    for k in (0..6).rev() {
        let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
        series = series.mul(&z)?.add_scalar(sign / (2 * k + 1) as f32)?;
    }
    let core = u.mul(&series)?.mul_scalar(4.0)?;
    let half_pi = std::f32::consts::FRAC_PI_2;
    let magnitude = reflect.select(&core.neg()?.add_scalar(half_pi)?, &core)?;
    let negative = x.compare_scalar(CompareOp::Less, 0.0)?;
    Ok(negative.select(&magnitude.neg()?, &magnitude)?)
}

fn hyperbolic(n: &Node, f: fn(&Tensor) -> OpResult<Tensor>) -> OpResult<Vec<Value>> {
    tensor(f(&float_tensor(n)?)?)
}

fn shrink(n: &Node) -> OpResult<Vec<Value>> {
    let lambd = n.attr_f("lambd", 0.5);
    let bias = n.attr_f("bias", 0.0);
    let x = float_tensor(n)?;
    let below = x.compare_scalar(CompareOp::Less, -lambd)?;
    let above = x.compare_scalar(CompareOp::Greater, lambd)?;
    let y = above.select(&x.sub_scalar(bias)?, &scalar(0.0))?;
    tensor(below.select(&x.add_scalar(bias)?, &y)?)
}

fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// erf by Numerical Recipes' `erfcc` (fractional error below 1.2e-7): enough for f32 results.
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        1.0 - r
    } else {
        r - 1.0
    }
}

fn float_tensor(n: &Node) -> OpResult<Tensor> {
    let t = n.tensor(0)?;
    if t.dtype() != DType::F32 {
        return unsupported(format!("{} inputs (only float)", t.dtype()));
    }
    Ok(t)
}

fn fold1(c: &Const, f: impl Fn(f64) -> f64) -> OpResult<Vec<Value>> {
    one(Value::Const(elementwise(&[c], Out::Same, |v| f(v[0]))?))
}

fn unary(n: &Node, op: UnaryOp, f: fn(f64) -> f64) -> OpResult<Vec<Value>> {
    if let Value::Const(c) = n.input(0)? {
        return fold1(c, f);
    }
    tensor(n.tensor(0)?.unary(op)?)
}

fn relu(n: &Node) -> OpResult<Vec<Value>> {
    if let Value::Const(c) = n.input(0)? {
        return fold1(c, |x| x.max(0.0));
    }
    let x = n.tensor(0)?;
    match x.dtype() {
        DType::F32 => tensor(x.relu()?),
        _ => tensor(x.maximum(&zero_like(&x)?)?),
    }
}

fn zero_like(x: &Tensor) -> OpResult<Tensor> {
    Ok(match x.dtype() {
        DType::I32 => aneforge::graph::constant(aneforge::HostArray::scalar_i32(0)),
        _ => scalar(0.0),
    })
}

fn reciprocal(n: &Node) -> OpResult<Vec<Value>> {
    if let Value::Const(c) = n.input(0)? {
        return fold1(c, |x| 1.0 / x);
    }
    tensor(float_tensor(n)?.recip()?)
}

fn tan(n: &Node) -> OpResult<Vec<Value>> {
    let x = float_tensor(n)?;
    tensor(x.sin()?.div(&x.cos()?)?)
}

fn binary(
    n: &Node,
    build: fn(&Tensor, &Tensor) -> Result<Tensor, aneforge::GraphError>,
    f: fn(&[f64]) -> f64,
) -> OpResult<Vec<Value>> {
    if let (Value::Const(a), Value::Const(b)) = (n.input(0)?, n.input(1)?) {
        return one(Value::Const(elementwise(&[a, b], Out::Same, f)?));
    }
    let (a, b) = (n.tensor(0)?, n.tensor(1)?);
    if a.dtype() != b.dtype() {
        return invalid(format!(
            "operand dtypes differ: {} and {}",
            a.dtype(),
            b.dtype()
        ));
    }
    if a.dtype() == DType::Bool {
        return unsupported("arithmetic on bool tensors");
    }
    tensor(build(&a, &b)?)
}

fn div(n: &Node) -> OpResult<Vec<Value>> {
    if let (Value::Const(a), Value::Const(b)) = (n.input(0)?, n.input(1)?) {
        let int = matches!(a.data, crate::value::Data::Int(_));
        return one(Value::Const(elementwise(&[a, b], Out::Same, |v| {
            if int {
                (v[0] / v[1]).trunc()
            } else {
                v[0] / v[1]
            }
        })?));
    }
    let (a, b) = (n.tensor(0)?, n.tensor(1)?);
    if a.dtype() == DType::I32 {
        // integer division truncates toward zero
        let q = a.cast(DType::F32)?.div(&b.cast(DType::F32)?)?;
        return tensor(q.cast(DType::I32)?);
    }
    binary(n, Tensor::div, |v| v[0] / v[1])
}

fn pow(n: &Node) -> OpResult<Vec<Value>> {
    if let (Value::Const(a), Value::Const(b)) = (n.input(0)?, n.input(1)?) {
        return one(Value::Const(elementwise(&[a, b], Out::Same, |v| {
            v[0].powf(v[1])
        })?));
    }
    let a = n.tensor(0)?;
    let b = n.tensor(1)?;
    match (a.dtype(), b.dtype()) {
        (DType::F32, _) => {
            let b = if b.dtype() == DType::F32 {
                b
            } else {
                b.cast(DType::F32)?
            };
            tensor(a.pow(&b)?)
        }
        (DType::I32, DType::I32) => tensor(integer_pow(&a, &b)?),
        // an integer base with a float exponent: the float power, truncated
        (DType::I32, DType::F32) => tensor(a.cast(DType::F32)?.pow(&b)?.cast(DType::I32)?),
        (x, y) => unsupported(format!("Pow of {x} and {y} tensors")),
    }
}

/// `a^b` on integers, exactly while the result fits i32: left-to-right binary exponentiation
/// over the 31 bits of `b ≥ 0` (each square and multiply stays below the result); a negative
/// exponent gives `1/a^|b|` truncated: 1 for a = 1, ±1 for a = −1, else 0.
fn integer_pow(a: &Tensor, b: &Tensor) -> OpResult<Tensor> {
    let int = |v: i32| aneforge::graph::constant(aneforge::HostArray::scalar_i32(v));
    let negative = b.compare(CompareOp::Less, &int(0))?;
    let mut rest = negative.select(&int(0), b)?;
    let mut result = int(1).add(&a.mul(&int(0))?)?;
    for k in (0..31).rev() {
        let weight = int(1 << k);
        let set = rest.compare(CompareOp::GreaterEqual, &weight)?;
        rest = set.select(&rest.sub(&weight)?, &rest)?;
        result = result.mul(&result)?.mul(&set.select(a, &int(1))?)?;
    }
    let odd = b
        .sub(
            &b.cast(DType::F32)?
                .mul_scalar(0.5)?
                .floor()?
                .mul_scalar(2.0)?
                .cast(DType::I32)?,
        )?
        .compare(CompareOp::NotEqual, &int(0))?;
    let minus_one = odd.select(&int(-1), &int(1))?;
    let reciprocal = a.compare(CompareOp::Equal, &int(1))?.select(
        &int(1),
        &a.compare(CompareOp::Equal, &int(-1))?
            .select(&minus_one, &int(0))?,
    )?;
    Ok(negative.select(&reciprocal, &result)?)
}

fn modulo(n: &Node) -> OpResult<Vec<Value>> {
    let fmod = n.attr_i("fmod", 0) != 0;
    match (n.input(0)?, n.input(1)?) {
        (Value::Const(a), Value::Const(b)) => {
            one(Value::Const(elementwise(&[a, b], Out::Same, |v| {
                if fmod {
                    v[0] % v[1]
                } else {
                    v[0] - v[1] * (v[0] / v[1]).floor()
                }
            })?))
        }
        _ => {
            let (a, b) = (n.tensor(0)?, n.tensor(1)?);
            let int = a.dtype() == DType::I32;
            let (fa, fb) = (a.cast(DType::F32)?, b.cast(DType::F32)?);
            let q = fa.div(&fb)?;
            // fmod truncates the quotient, Python-style mod floors it
            let q = if fmod {
                q.sign()?.mul(&q.abs()?.floor()?)?
            } else {
                q.floor()?
            };
            let r = fa.sub(&q.mul(&fb)?)?;
            tensor(if int { r.round()?.cast(DType::I32)? } else { r })
        }
    }
}

fn variadic(
    n: &Node,
    build: fn(&Tensor, &Tensor) -> Result<Tensor, aneforge::GraphError>,
    f: fn(&[f64]) -> f64,
) -> OpResult<Vec<Value>> {
    if n.n_inputs() == 0 {
        return invalid("no inputs");
    }
    if n.all_const() {
        let mut acc = n.konst(0)?.clone();
        for i in 1..n.n_inputs() {
            acc = elementwise(&[&acc, n.konst(i)?], Out::Same, f)?;
        }
        return one(Value::Const(acc));
    }
    let mut acc = n.tensor(0)?;
    for i in 1..n.n_inputs() {
        acc = build(&acc, &n.tensor(i)?)?;
    }
    if n.n_inputs() == 1 {
        // a lone operand still needs a node of its own when it is a graph output
        return one(Value::Tensor(acc));
    }
    tensor(acc)
}

fn mean(n: &Node) -> OpResult<Vec<Value>> {
    let sum = variadic(n, Tensor::add, |v| v[0] + v[1])?;
    let count = n.n_inputs() as f32;
    match sum.into_iter().next() {
        Some(Value::Const(c)) => fold1(&c, |x| x / f64::from(count)),
        Some(Value::Tensor(t)) => tensor(t.div_scalar(count)?),
        None => invalid("no inputs"),
    }
}

fn compare(n: &Node, op: CompareOp, f: fn(f64, f64) -> bool) -> OpResult<Vec<Value>> {
    if let (Value::Const(a), Value::Const(b)) = (n.input(0)?, n.input(1)?) {
        return one(Value::Const(elementwise(&[a, b], Out::Bool, |v| {
            f64::from(u8::from(f(v[0], v[1])))
        })?));
    }
    let (mut a, mut b) = (n.tensor(0)?, n.tensor(1)?);
    if a.dtype() == DType::Bool {
        a = a.cast(DType::F32)?;
        b = b.cast(DType::F32)?;
    }
    tensor(a.compare(op, &b)?)
}

fn as_float(t: &Tensor) -> OpResult<Tensor> {
    Ok(t.cast(DType::F32)?)
}

fn not(n: &Node) -> OpResult<Vec<Value>> {
    if let Value::Const(c) = n.input(0)? {
        return one(Value::Const(elementwise(&[c], Out::Bool, |v| {
            f64::from(u8::from(v[0] == 0.0))
        })?));
    }
    tensor(as_float(&n.tensor(0)?)?.compare_scalar(CompareOp::Equal, 0.0)?)
}

fn logic(n: &Node, f: fn(bool, bool) -> bool) -> OpResult<Vec<Value>> {
    if let (Value::Const(a), Value::Const(b)) = (n.input(0)?, n.input(1)?) {
        return one(Value::Const(elementwise(&[a, b], Out::Bool, |v| {
            f64::from(u8::from(f(v[0] != 0.0, v[1] != 0.0)))
        })?));
    }
    let (a, b) = (as_float(&n.tensor(0)?)?, as_float(&n.tensor(1)?)?);
    // on 0/1 operands: and = a·b, or = max(a, b), xor = a ≠ b
    let out = if f(true, true) {
        if f(true, false) {
            a.maximum(&b)?
        } else {
            a.mul(&b)?
        }
    } else {
        return tensor(a.compare(CompareOp::NotEqual, &b)?);
    };
    tensor(out.compare_scalar(CompareOp::NotEqual, 0.0)?)
}

fn where_(n: &Node) -> OpResult<Vec<Value>> {
    if n.all_const() {
        let (c, a, b) = (n.konst(0)?, n.konst(1)?, n.konst(2)?);
        let idx = elementwise(&[c, a, b], Out::Same, |v| v[0])?;
        let shape = idx.shape.clone();
        let pick_a = a.broadcast_to(&shape)?;
        let pick_b = b.broadcast_to(&shape)?;
        let cond = c.broadcast_to(&shape)?;
        let n_el: usize = shape.iter().product();
        let mut flat = Vec::with_capacity(n_el);
        for i in 0..n_el {
            flat.push(cond.data.f64_at(i) != 0.0);
        }
        let data = match (&pick_a.data, &pick_b.data) {
            (crate::value::Data::F32(x), crate::value::Data::F32(y)) => crate::value::Data::F32(
                flat.iter()
                    .enumerate()
                    .map(|(i, &c)| if c { x[i] } else { y[i] })
                    .collect(),
            ),
            (crate::value::Data::Int(x), crate::value::Data::Int(y)) => crate::value::Data::Int(
                flat.iter()
                    .enumerate()
                    .map(|(i, &c)| if c { x[i] } else { y[i] })
                    .collect(),
            ),
            (crate::value::Data::Bool(x), crate::value::Data::Bool(y)) => crate::value::Data::Bool(
                flat.iter()
                    .enumerate()
                    .map(|(i, &c)| if c { x[i] } else { y[i] })
                    .collect(),
            ),
            _ => return invalid("the two branches have different dtypes"),
        };
        return one(Value::Const(Const::new(shape, data)?));
    }
    let cond = n.tensor(0)?;
    let cond = if cond.dtype() == DType::Bool {
        cond
    } else {
        cond.compare_scalar(CompareOp::NotEqual, 0.0)?
    };
    tensor(cond.select(&n.tensor(1)?, &n.tensor(2)?)?)
}

fn clip(n: &Node) -> OpResult<Vec<Value>> {
    let runtime_bound = (1..3).any(|i| matches!(n.opt(i), Some(Value::Tensor(_))));
    if n.opset >= 11 && runtime_bound {
        let mut y = n.tensor(0)?;
        if let Some(lo) = n.opt_tensor(1)? {
            y = y.maximum(&lo)?;
        }
        if let Some(hi) = n.opt_tensor(2)? {
            y = y.minimum(&hi)?;
        }
        return tensor(y);
    }
    let (lo, hi) = if n.opset < 11 {
        (n.attr_f("min", f32::MIN), n.attr_f("max", f32::MAX))
    } else {
        let bound = |i: usize, default: f32| -> OpResult<f32> {
            match n.opt(i) {
                None => Ok(default),
                Some(_) => Ok(n.konst(i)?.to_f32s().first().copied().unwrap_or(default)),
            }
        };
        (bound(1, f32::MIN)?, bound(2, f32::MAX)?)
    };
    if let Value::Const(c) = n.input(0)? {
        return fold1(c, |x| x.max(f64::from(lo)).min(f64::from(hi)));
    }
    let x = n.tensor(0)?;
    if x.dtype() != DType::F32 {
        let mut out = x;
        if lo > f32::MIN {
            out = out.maximum_scalar(lo)?;
        }
        if hi < f32::MAX {
            out = out.minimum_scalar(hi)?;
        }
        return tensor(out);
    }
    tensor(x.clip(lo, hi)?)
}

fn selu(n: &Node) -> OpResult<Vec<Value>> {
    let alpha = n.attr_f("alpha", 1.673_263_2);
    let gamma = n.attr_f("gamma", 1.050_701);
    tensor(float_tensor(n)?.elu(alpha)?.mul_scalar(gamma)?)
}

fn celu(n: &Node) -> OpResult<Vec<Value>> {
    let alpha = n.attr_f("alpha", 1.0);
    let x = float_tensor(n)?;
    let neg = x
        .div_scalar(alpha)?
        .exp()?
        .sub_scalar(1.0)?
        .mul_scalar(alpha)?;
    tensor(x.maximum_scalar(0.0)?.add(&neg.minimum_scalar(0.0)?)?)
}

fn hard_sigmoid(n: &Node) -> OpResult<Vec<Value>> {
    let alpha = n.attr_f("alpha", 0.2);
    let beta = n.attr_f("beta", 0.5);
    tensor(
        float_tensor(n)?
            .mul_scalar(alpha)?
            .add_scalar(beta)?
            .clip(0.0, 1.0)?,
    )
}

fn hard_swish(n: &Node) -> OpResult<Vec<Value>> {
    let x = float_tensor(n)?;
    let gate = x.mul_scalar(1.0 / 6.0)?.add_scalar(0.5)?.clip(0.0, 1.0)?;
    tensor(x.mul(&gate)?)
}

fn softsign(n: &Node) -> OpResult<Vec<Value>> {
    let x = float_tensor(n)?;
    tensor(x.div(&x.abs()?.add_scalar(1.0)?)?)
}

fn mish(n: &Node) -> OpResult<Vec<Value>> {
    let x = float_tensor(n)?;
    tensor(x.mul(&x.softplus()?.tanh()?)?)
}

fn prelu(n: &Node) -> OpResult<Vec<Value>> {
    let x = float_tensor(n)?;
    let slope = n.tensor(1)?;
    // ONNX broadcasts the slope unidirectionally to x
    tensor(
        x.maximum_scalar(0.0)?
            .add(&x.minimum_scalar(0.0)?.mul(&slope)?)?,
    )
}

fn thresholded_relu(n: &Node) -> OpResult<Vec<Value>> {
    let alpha = n.attr_f("alpha", 1.0);
    let x = float_tensor(n)?;
    let keep = x.compare_scalar(CompareOp::Greater, alpha)?;
    tensor(keep.select(&x, &scalar(0.0))?)
}

fn gelu(n: &Node) -> OpResult<Vec<Value>> {
    let x = float_tensor(n)?;
    match n.attr_s("approximate", "none").as_str() {
        "none" => tensor(x.gelu()?),
        "tanh" => tensor(x.gelu_tanh()?),
        other => invalid(format!("approximate {other:?} is neither none nor tanh")),
    }
}

fn is_nan(n: &Node) -> OpResult<Vec<Value>> {
    let x = float_tensor(n)?;
    tensor(x.compare(CompareOp::NotEqual, &x)?)
}

fn is_inf(n: &Node) -> OpResult<Vec<Value>> {
    let x = float_tensor(n)?;
    let pos = n.attr_i("detect_positive", 1) != 0;
    let neg = n.attr_i("detect_negative", 1) != 0;
    let target = match (pos, neg) {
        (true, true) => x.abs()?,
        (true, false) => x,
        (false, true) => x.neg()?,
        (false, false) => {
            return tensor(
                x.compare(CompareOp::NotEqual, &x)?
                    .cast(DType::F32)?
                    .compare_scalar(CompareOp::NotEqual, 0.0)?,
            )
        }
    };
    tensor(target.compare_scalar(CompareOp::Equal, f32::INFINITY)?)
}
