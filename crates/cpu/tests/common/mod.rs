//! Test helpers: a small MIL AST builder, a deterministic RNG, a runner and comparisons.
#![allow(dead_code)]

use aneforge_cpu::{compile, BlobStore, CompileOptions, HostSlice, Instance, Plan};
use aneforge_mil::{
    Argument, Block, DType, Function, Literal, NamedValue, Operation, Program, TensorType,
};
use half::f16;
use std::collections::HashMap;
use std::sync::Arc;

/// An argument value for [`Prog::op`].
#[derive(Clone, Debug)]
pub enum A {
    V(String),
    I(i64),
    Is(Vec<i64>),
    F(DType, f64),
    B(bool),
    Bs(Vec<bool>),
    S(&'static str),
    List(Vec<String>),
}

pub fn v(s: &str) -> A {
    A::V(s.to_string())
}

impl A {
    fn arg(&self) -> Argument {
        match self {
            A::V(n) => Argument::Name(n.clone()),
            A::I(i) => Argument::Literal(Literal::int(DType::Int32, *i)),
            A::Is(v) => Argument::Literal(Literal::int_tensor(DType::Int32, &[v.len()], v.clone())),
            A::F(d, x) => Argument::Literal(Literal::float(*d, *x)),
            A::B(b) => Argument::Literal(Literal::bool(*b)),
            A::Bs(v) => Argument::Literal(Literal::bool_tensor(&[v.len()], v.clone())),
            A::S(s) => Argument::Literal(Literal::string(*s)),
            A::List(items) => {
                Argument::List(items.iter().map(|n| Argument::Name(n.clone())).collect())
            }
        }
    }
}

#[derive(Default)]
pub struct Prog {
    pub inputs: Vec<NamedValue>,
    pub ops: Vec<Operation>,
    pub outputs: Vec<String>,
    n: usize,
}

impl Prog {
    pub fn new() -> Prog {
        Prog::default()
    }

    fn fresh(&mut self, base: &str) -> String {
        self.n += 1;
        format!("{base}_{}", self.n)
    }

    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> String {
        self.inputs
            .push(NamedValue::new(name, TensorType::new(dtype, shape)));
        name.to_string()
    }

    /// One-output op; returns the output name.
    pub fn op(
        &mut self,
        op_type: &str,
        args: &[(&str, A)],
        dtype: DType,
        shape: &[usize],
    ) -> String {
        self.op_n(op_type, args, &[(dtype, shape.to_vec())])
            .remove(0)
    }

    pub fn op_n(
        &mut self,
        op_type: &str,
        args: &[(&str, A)],
        outs: &[(DType, Vec<usize>)],
    ) -> Vec<String> {
        let mut op = Operation::new(op_type);
        for (k, a) in args {
            op = op.with_input(*k, a.arg());
        }
        let mut names = Vec::new();
        for (d, s) in outs {
            let n = self.fresh(op_type);
            op = op.with_output(n.clone(), TensorType::new(*d, s));
            names.push(n);
        }
        op = op.with_attribute("name", Literal::string(names[0].clone()));
        self.ops.push(op);
        names
    }

    pub fn konst(&mut self, dtype: DType, shape: &[usize], data: &[f64]) -> String {
        let n = self.fresh("const");
        let lit = if dtype.is_float() {
            Literal::float_tensor(dtype, shape, data.to_vec())
        } else if dtype == DType::Bool {
            Literal::bool_tensor(shape, data.iter().map(|&x| x != 0.0).collect())
        } else {
            Literal::int_tensor(dtype, shape, data.iter().map(|&x| x as i64).collect())
        };
        let op = Operation::new("const")
            .with_output(n.clone(), TensorType::new(dtype, shape))
            .with_attribute("name", Literal::string(n.clone()))
            .with_attribute("val", lit);
        self.ops.push(op);
        n
    }

    pub fn konst_lit(&mut self, lit: Literal) -> String {
        let n = self.fresh("const");
        let ty = match lit.value_type() {
            aneforge_mil::ValueType::Tensor(t) => t,
            _ => panic!("tensor literal"),
        };
        let op = Operation::new("const")
            .with_output(n.clone(), ty)
            .with_attribute("name", Literal::string(n.clone()))
            .with_attribute("val", lit);
        self.ops.push(op);
        n
    }

    pub fn output(&mut self, name: &str) {
        self.outputs.push(name.to_string());
    }

    pub fn build(&self) -> Program {
        Program {
            version: "1.3".into(),
            attributes: vec![],
            functions: vec![Function {
                name: "main".into(),
                opset: "ios18".into(),
                inputs: self.inputs.clone(),
                attributes: vec![],
                body: Block {
                    inputs: vec![],
                    operations: self.ops.clone(),
                    outputs: self.outputs.clone(),
                },
            }],
        }
    }
}

/// Deterministic xorshift RNG.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Rounds values to what the port dtype can hold (fp16 inputs are stored as f16).
pub fn quantize(d: DType, v: &[f64]) -> Vec<f64> {
    match d {
        DType::Fp16 => v.iter().map(|&x| f16::from_f64(x).to_f64()).collect(),
        DType::Fp32 => v.iter().map(|&x| x as f32 as f64).collect(),
        _ => v.to_vec(),
    }
}

pub fn set(inst: &mut Instance, name: &str, d: DType, data: &[f64]) {
    match d {
        DType::Fp32 => inst.set_input(
            name,
            HostSlice::F32(&data.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        ),
        DType::Fp16 => inst.set_input(
            name,
            HostSlice::F16(&data.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>()),
        ),
        DType::Int32 => inst.set_input(
            name,
            HostSlice::I32(&data.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        ),
        DType::Bool => inst.set_input(
            name,
            HostSlice::Bool(&data.iter().map(|&x| x != 0.0).collect::<Vec<_>>()),
        ),
        DType::Int8 => inst.set_input(
            name,
            HostSlice::I8(&data.iter().map(|&x| x as i8).collect::<Vec<_>>()),
        ),
        _ => panic!("unsupported test dtype"),
    }
    .unwrap();
}

pub fn run_opts(
    p: &Prog,
    inputs: &[(&str, DType, Vec<f64>)],
    opts: &CompileOptions,
) -> HashMap<String, Vec<f64>> {
    let plan = compile(&p.build(), "main", &BlobStore::new(), opts).unwrap();
    let mut inst = plan.instantiate();
    for (n, d, data) in inputs {
        set(&mut inst, n, *d, data);
    }
    inst.execute().unwrap();
    p.outputs
        .iter()
        .map(|o| (o.clone(), to_f64(&inst.read_output(o).unwrap())))
        .collect()
}

/// `p` compiled for `threads` threads, and its schedule one kernel per line; `what` names the case
/// if compiling fails.
pub fn compile_threads(p: &Prog, threads: usize, what: &str) -> (Arc<Plan>, String) {
    let options = CompileOptions {
        threads: Some(threads),
        ..Default::default()
    };
    let plan = compile(&p.build(), "main", &BlobStore::new(), &options)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let schedule = plan.schedule().join("\n");
    (plan, schedule)
}

pub fn run(p: &Prog, inputs: &[(&str, DType, Vec<f64>)]) -> HashMap<String, Vec<f64>> {
    run_opts(p, inputs, &CompileOptions::default())
}

/// Tolerance per precision: fp32 relative 2e-5 (+abs), fp16 two half-ulps of the reference.
pub fn assert_close(what: &str, d: DType, got: &[f64], want: &[f64], scale: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = match d {
            DType::Fp16 => 2e-3 * w.abs().max(scale) + 1e-6,
            _ => 2e-5 * w.abs().max(scale) + 1e-7,
        };
        let ok = (g - w).abs() <= tol || (g.is_nan() && w.is_nan()) || (g.is_infinite() && g == w);
        assert!(ok, "{what}: element {i}: got {g}, want {w} (tol {tol})");
    }
}

pub fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// Row-major index → multi-index.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// NumPy broadcast read of `data` (shape `s`) at output multi-index `idx`.
pub fn bcast(data: &[f64], s: &[usize], idx: &[usize]) -> f64 {
    let off = idx.len() - s.len();
    let j: Vec<usize> = (0..s.len())
        .map(|a| if s[a] == 1 { 0 } else { idx[off + a] })
        .collect();
    data[ravel(&j, s)]
}

pub fn bshape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let da = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                1
            };
            let db = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                1
            };
            da.max(db)
        })
        .collect()
}

pub fn to_f64(t: &aneforge_cpu::HostTensor) -> Vec<f64> {
    use aneforge_cpu::HostTensor as H;
    match t {
        H::I32(v) => v.iter().map(|&x| x as f64).collect(),
        other => other.to_f32().iter().map(|&x| x as f64).collect(),
    }
}

/// Explicit tolerance: |got − want| ≤ rel · max(|want|, scale).
pub fn assert_close_rel(what: &str, got: &[f64], want: &[f64], rel: f64, scale: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = rel * w.abs().max(scale);
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w} (tol {tol})"
        );
    }
}
