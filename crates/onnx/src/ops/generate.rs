//! Ops whose values follow from attributes and shapes alone, computed on the host: the window
//! functions (`HannWindow`, `HammingWindow`, `BlackmanWindow`), `EyeLike`, and `OneHot` of
//! constant indices.

use super::{one, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::{axis, Node};
use crate::value::{graph_dtype, Const, Data, Value};
use aneforge::DType;
use std::f64::consts::PI;

pub const OPS: &[(&str, Importer)] = &[
    ("HannWindow", |n| window(n, &[0.5, -0.5])),
    ("HammingWindow", |n| window(n, &[25.0 / 46.0, -21.0 / 46.0])),
    ("BlackmanWindow", |n| window(n, &[0.42, -0.5, 0.08])),
    ("EyeLike", eye_like),
    ("OneHot", one_hot),
];

/// `Σ_k a[k]·cos(2πkn/N)` with `N` the size (periodic) or the size − 1 (symmetric).
fn window(n: &Node, coefficients: &[f64]) -> OpResult<Vec<Value>> {
    let size = n.konst(0)?.to_i64s()?.first().copied().unwrap_or(0);
    if size <= 0 {
        return invalid(format!("size {size}"));
    }
    let size = size as usize;
    let periodic = n.attr_i("periodic", 1) != 0;
    let denom = if periodic { size } else { size - 1 }.max(1) as f64;
    let values: Vec<f64> = (0..size)
        .map(|i| {
            coefficients
                .iter()
                .enumerate()
                .map(|(k, a)| a * (2.0 * PI * k as f64 * i as f64 / denom).cos())
                .sum()
        })
        .collect();
    let out = output_dtype(n, 1)?;
    one(Value::Const(typed(vec![size], values, out)?))
}

fn output_dtype(n: &Node, default: i64) -> OpResult<DType> {
    let code = n.attr_i("output_datatype", n.attr_i("dtype", default)) as i32;
    match graph_dtype(code) {
        Some(d) => Ok(d),
        None => unsupported(format!(
            "output type {}",
            crate::value::elem_type_name(code)
        )),
    }
}

fn typed(shape: Vec<usize>, values: Vec<f64>, dtype: DType) -> OpResult<Const> {
    let data = match dtype {
        // the importer builds f32, i32 and bool values only; storage types convert alike
        DType::F32 | DType::F16 => Data::F32(values.iter().map(|&v| v as f32).collect()),
        DType::I32 | DType::I8 => Data::Int(values.iter().map(|&v| v as i64).collect()),
        DType::Bool => Data::Bool(values.iter().map(|&v| v != 0.0).collect()),
    };
    Const::new(shape, data)
}

fn eye_like(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let shape = x.shape().to_vec();
    if shape.len() != 2 {
        return invalid(format!("expected a matrix, got {shape:?}"));
    }
    let k = n.attr_i("k", 0);
    let dtype = match n.attr("dtype").and_then(|a| a.i) {
        Some(_) => output_dtype(n, 1)?,
        None => x.dtype(),
    };
    let values: Vec<f64> = (0..shape[0] * shape[1])
        .map(|f| {
            let (i, j) = ((f / shape[1]) as i64, (f % shape[1]) as i64);
            f64::from(u8::from(j - i == k))
        })
        .collect();
    one(Value::Const(typed(shape, values, dtype)?))
}

fn one_hot(n: &Node) -> OpResult<Vec<Value>> {
    let indices = n.konst(0)?;
    let depth = n.konst(1)?.data.f64_at(0) as i64;
    let values = n.konst(2)?;
    if depth <= 0 || values.len() != 2 {
        return invalid("depth must be positive and values hold [off, on]");
    }
    let out_rank = indices.shape.len() + 1;
    let a = axis(n.attr_i("axis", -1), out_rank)?;
    let mut shape = indices.shape.clone();
    shape.insert(a, depth as usize);
    let idx = indices.to_i64s()?;
    let inner: usize = indices.shape[a..].iter().product();
    let total: usize = shape.iter().product();
    let (off, on) = (values.data.f64_at(0), values.data.f64_at(1));
    let out: Vec<f64> = (0..total)
        .map(|f| {
            let outer = f / (depth as usize * inner);
            let class = (f / inner) % depth as usize;
            let rest = f % inner;
            let mut i = idx[outer * inner + rest];
            if i < 0 {
                i += depth;
            }
            if i == class as i64 {
                on
            } else {
                off
            }
        })
        .collect();
    let dtype = values.data.dtype();
    one(Value::Const(typed(shape, out, dtype)?))
}
