//! The op-suite harness: random data, both targets on the CPU engine, comparison against the f64
//! reference with per-precision tolerances, and the optional program corpus dump.

#![allow(dead_code)]

pub mod reference;

pub use reference::*;

use aneforge::engine::{Engine, EngineKind, HostSlice, HostTensor};
use aneforge::graph::{self, DType, GraphError, HostArray, Tensor};
use aneforge::{compile_named, AneArch, CompileOptions, Target};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;

/// `|got - want| <= atol · max(1, max|want|) + rtol · |want|`, per target precision.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub f32: (f64, f64),
    pub f16: (f64, f64),
}

impl Tol {
    /// Elementwise math: a few ulps in f32; output rounding plus a few ulps in f16.
    pub const ELEMENTWISE: Tol = Tol {
        f32: (1e-6, 1e-5),
        f16: (1e-3, 2e-3),
    };
    /// Reductions and contractions: accumulation error grows with the reduced length.
    pub const ACCUMULATE: Tol = Tol {
        f32: (1e-5, 1e-4),
        f16: (4e-3, 8e-3),
    };
    /// Compositions of several rounded ops (norms, attention, log-softmax).
    pub const COMPOSED: Tol = Tol {
        f32: (2e-5, 2e-4),
        f16: (1e-2, 1.5e-2),
    };
    /// Data movement and selection: bit exact.
    pub const EXACT: Tol = Tol {
        f32: (0.0, 0.0),
        f16: (0.0, 0.0),
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prec {
    F32,
    F16,
}

impl Prec {
    pub fn round(self, v: f32) -> f64 {
        match self {
            Prec::F32 => f64::from(v),
            Prec::F16 => aneforge::lower::to_f16(v).to_f64(),
        }
    }

    fn target(self) -> Target {
        match self {
            Prec::F32 => Target::Cpu,
            Prec::F16 => Target::Ane(AneArch::default()),
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Prec::F32 => "cpu",
            Prec::F16 => "ane",
        }
    }

    /// The engine that runs this precision's programs: the CPU engine, except that with
    /// `ANEFORGE_SUITE_ENGINE=ane` (and an e5rt library, e.g. `ANEFORGE_E5RT_LIB` naming the
    /// simulator) the ANE-target programs run on the ANE engine — the suite's second pass.
    pub fn engine(self) -> Engine {
        let wanted = std::env::var("ANEFORGE_SUITE_ENGINE").unwrap_or_default();
        if self == Prec::F32 || wanted.is_empty() {
            return Engine::Cpu;
        }
        let kind: EngineKind = wanted.parse().unwrap_or_else(|e| panic!("{e}"));
        kind.select()
            .unwrap_or_else(|e| panic!("ANEFORGE_SUITE_ENGINE={wanted}: {e}"))
    }
}

#[derive(Clone, Debug)]
enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
}

#[derive(Clone, Debug)]
struct Value {
    shape: Vec<usize>,
    data: Data,
    fed: bool,
}

/// One test case: named inputs and constants with their data.
pub struct Case {
    name: String,
    checks: std::cell::Cell<usize>,
    pub rng: StdRng,
    values: BTreeMap<String, Value>,
}

/// Graph-side view: the tensors of a case.
pub struct G {
    tensors: BTreeMap<String, Tensor>,
}

impl G {
    pub fn t(&self, name: &str) -> &Tensor {
        &self.tensors[name]
    }
}

/// Reference-side view: the data of a case as the target holds it.
pub struct R {
    values: BTreeMap<String, Nd>,
    ints: BTreeMap<String, Vec<i32>>,
    prec: Prec,
}

impl R {
    pub fn v(&self, name: &str) -> &Nd {
        &self.values[name]
    }

    pub fn ints(&self, name: &str) -> &[i32] {
        &self.ints[name]
    }

    /// `v` rounded to the target's float precision, as an op boundary rounds it.
    pub fn round(&self, v: f64) -> f64 {
        self.prec.round(v as f32)
    }
}

impl Case {
    pub fn new(name: impl Into<String>, seed: u64) -> Case {
        Case {
            name: name.into(),
            checks: std::cell::Cell::new(0),
            rng: StdRng::seed_from_u64(seed),
            values: BTreeMap::new(),
        }
    }

    fn add(&mut self, name: &str, shape: &[usize], data: Data, fed: bool) {
        let v = Value {
            shape: shape.to_vec(),
            data,
            fed,
        };
        self.values.insert(name.to_string(), v);
    }

    pub fn uniform(&mut self, shape: &[usize], lo: f32, hi: f32) -> Vec<f32> {
        (0..numel(shape))
            .map(|_| self.rng.random_range(lo..hi))
            .collect()
    }

    /// A fed f32 input with data uniform in `[lo, hi)`.
    pub fn input(&mut self, name: &str, shape: &[usize], lo: f32, hi: f32) -> &mut Case {
        let d = self.uniform(shape, lo, hi);
        self.add(name, shape, Data::F32(d), true);
        self
    }

    pub fn input_data(&mut self, name: &str, shape: &[usize], data: Vec<f32>) -> &mut Case {
        self.add(name, shape, Data::F32(data), true);
        self
    }

    /// An f32 constant with data uniform in `[lo, hi)`.
    pub fn constant(&mut self, name: &str, shape: &[usize], lo: f32, hi: f32) -> &mut Case {
        let d = self.uniform(shape, lo, hi);
        self.add(name, shape, Data::F32(d), false);
        self
    }

    pub fn constant_data(&mut self, name: &str, shape: &[usize], data: Vec<f32>) -> &mut Case {
        self.add(name, shape, Data::F32(data), false);
        self
    }

    pub fn input_i32(&mut self, name: &str, shape: &[usize], data: Vec<i32>) -> &mut Case {
        self.add(name, shape, Data::I32(data), true);
        self
    }

    pub fn constant_i32(&mut self, name: &str, shape: &[usize], data: Vec<i32>) -> &mut Case {
        self.add(name, shape, Data::I32(data), false);
        self
    }

    pub fn input_bool(&mut self, name: &str, shape: &[usize], data: Vec<bool>) -> &mut Case {
        self.add(name, shape, Data::Bool(data), true);
        self
    }

    pub fn constant_bool(&mut self, name: &str, shape: &[usize], data: Vec<bool>) -> &mut Case {
        self.add(name, shape, Data::Bool(data), false);
        self
    }

    fn graph(&self) -> G {
        let mut tensors = BTreeMap::new();
        for (name, v) in &self.values {
            let (dtype, array) = match &v.data {
                Data::F32(d) => (DType::F32, HostArray::from_f32(&v.shape, d.clone())),
                Data::I32(d) => (DType::I32, HostArray::from_i32(&v.shape, d.clone())),
                Data::Bool(d) => (DType::Bool, HostArray::from_bool(&v.shape, d.clone())),
            };
            let t = if v.fed {
                graph::input(name, &v.shape, dtype).expect("case input")
            } else {
                graph::constant(array.expect("case constant"))
            };
            tensors.insert(name.clone(), t);
        }
        G { tensors }
    }

    fn reference_view(&self, prec: Prec) -> R {
        let mut values = BTreeMap::new();
        let mut ints = BTreeMap::new();
        for (name, v) in &self.values {
            let data: Vec<f64> = match &v.data {
                Data::F32(d) => d.iter().map(|&x| prec.round(x)).collect(),
                Data::I32(d) => {
                    ints.insert(name.clone(), d.clone());
                    d.iter().map(|&x| f64::from(x)).collect()
                }
                Data::Bool(d) => d.iter().map(|&x| f64::from(u8::from(x))).collect(),
            };
            values.insert(name.clone(), Nd::new(&v.shape, data));
        }
        R { values, ints, prec }
    }

    /// Builds one output, runs it for both targets, and compares with the reference.
    pub fn check(
        &self,
        build: impl Fn(&G) -> Result<Tensor, GraphError>,
        reference: impl Fn(&R) -> Nd,
        tol: Tol,
    ) {
        self.check_many(|g| build(g).map(|t| vec![t]), |r| vec![reference(r)], tol)
    }

    pub fn check_many(
        &self,
        build: impl Fn(&G) -> Result<Vec<Tensor>, GraphError>,
        reference: impl Fn(&R) -> Vec<Nd>,
        tol: Tol,
    ) {
        for prec in [Prec::F32, Prec::F16] {
            self.check_one(prec, &build, &reference, tol);
        }
    }

    /// Runs for one precision only.
    pub fn check_one(
        &self,
        prec: Prec,
        build: &dyn Fn(&G) -> Result<Vec<Tensor>, GraphError>,
        reference: &dyn Fn(&R) -> Vec<Nd>,
        tol: Tol,
    ) {
        let label = format!("{} [{}]", self.name, prec.tag());
        let g = self.graph();
        let outs = build(&g).unwrap_or_else(|e| panic!("{label}: building the graph: {e}"));
        let names: Vec<String> = (0..outs.len()).map(|i| format!("out{i}")).collect();
        let named: Vec<(&str, &Tensor)> = names.iter().map(|n| n.as_str()).zip(&outs).collect();
        let options = CompileOptions {
            target: prec.target(),
            engine: prec.engine(),
            ..CompileOptions::default()
        };
        let mut model =
            compile_named(&named, &options).unwrap_or_else(|e| panic!("{label}: compiling: {e}\n"));
        let n = self.checks.get();
        self.checks.set(n + 1);
        dump_corpus(&model, &format!("{}-{n}-{}", self.name, prec.tag()));
        let fed: Vec<(&String, &Value)> = self.values.iter().filter(|(_, v)| v.fed).collect();
        let slices: Vec<(&str, HostSlice<'_>)> = fed
            .iter()
            .filter(|(name, _)| model.input_names().contains(&name.as_str()))
            .map(|(name, v)| {
                let s = match &v.data {
                    Data::F32(d) => HostSlice::F32(d),
                    Data::I32(d) => HostSlice::I32(d),
                    Data::Bool(d) => HostSlice::Bool(d),
                };
                (name.as_str(), s)
            })
            .collect();
        let got = model
            .run(&slices)
            .unwrap_or_else(|e| panic!("{label}: running: {e}\n{}", model.mil_text()));
        let want = reference(&self.reference_view(prec));
        assert_eq!(got.len(), want.len(), "{label}: output count");
        let (atol, rtol) = match prec {
            Prec::F32 => tol.f32,
            Prec::F16 => tol.f16,
        };
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let port = &model.outputs()[i];
            assert_eq!(port.shape, w.shape, "{label}: output {i} shape");
            let g = to_f64(g);
            compare(
                &format!("{label} output {i}"),
                &g,
                w,
                atol,
                rtol,
                model.mil_text(),
            );
        }
    }
}

/// With `ANEFORGE_DUMP_CORPUS=DIR`, saves the model as `DIR/NAME.mlpackage` (for
/// `tools/coreml_check.py DIR`) and as the program directory `DIR/programs/NAME`.
pub fn dump_corpus(model: &aneforge::Model, name: &str) {
    let Ok(dir) = std::env::var("ANEFORGE_DUMP_CORPUS") else {
        return;
    };
    let name = sanitize(name);
    model
        .save(&std::path::Path::new(&dir).join("programs").join(&name))
        .unwrap_or_else(|e| panic!("{name}: saving the program directory: {e}"));
    dump_package(model.artifact(), &name);
}

/// With `ANEFORGE_DUMP_CORPUS=DIR`, exports the program as `DIR/NAME.mlpackage` for
/// `tools/coreml_check.py DIR`, where coremltools' own op definitions check it.
pub fn dump_package(artifact: &aneforge::Artifact, name: &str) {
    let Ok(dir) = std::env::var("ANEFORGE_DUMP_CORPUS") else {
        return;
    };
    let options = aneforge_mil::mlpackage::ExportOptions {
        short_description: name.to_string(),
        ..Default::default()
    };
    artifact
        .export_mlpackage(
            &std::path::Path::new(&dir).join(format!("{name}.mlpackage")),
            &options,
        )
        .unwrap_or_else(|e| panic!("{name}: exporting the .mlpackage: {e}"));
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub fn to_f64(t: &HostTensor) -> Vec<f64> {
    match t {
        HostTensor::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        HostTensor::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        HostTensor::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        HostTensor::I8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        HostTensor::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        HostTensor::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
    }
}

pub fn compare(label: &str, got: &[f64], want: &Nd, atol: f64, rtol: f64, mil: &str) {
    assert_eq!(got.len(), want.data.len(), "{label}: element count");
    let scale = want.data.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let mut worst: Option<(usize, f64, f64)> = None;
    for (i, (&g, &w)) in got.iter().zip(&want.data).enumerate() {
        let err = (g - w).abs();
        let bound = atol * scale + rtol * w.abs();
        let within = err <= bound || g == w;
        let bad = !within;
        if bad && worst.is_none_or(|(_, e, b)| err - bound > e - b) {
            worst = Some((i, err, bound));
        }
    }
    if let Some((i, err, bound)) = worst {
        let idx = unravel(i, &want.shape);
        panic!(
            "{label}: at {idx:?} got {} want {} (error {err:.3e} > bound {bound:.3e}; shape {:?})\n{}",
            got[i], want.data[i], want.shape, if mil.len() < 4000 { mil } else { "" }
        );
    }
}

/// A random shape of rank in `ranks` with each dimension in `dims`.
pub fn random_shape(
    rng: &mut StdRng,
    ranks: std::ops::RangeInclusive<usize>,
    dims: std::ops::RangeInclusive<usize>,
) -> Vec<usize> {
    let r = rng.random_range(ranks);
    (0..r).map(|_| rng.random_range(dims.clone())).collect()
}

/// A shape that broadcasts against `shape`: some axes set to 1, some leading axes dropped.
pub fn broadcast_partner(rng: &mut StdRng, shape: &[usize]) -> Vec<usize> {
    let drop = rng.random_range(0..=shape.len().saturating_sub(1));
    shape[drop..]
        .iter()
        .map(|&d| if rng.random_range(0..3) == 0 { 1 } else { d })
        .collect()
}
