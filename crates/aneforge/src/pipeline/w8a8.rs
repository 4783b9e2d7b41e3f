//! W8A8: int8 activations and int8 weights, for the int8-int8 compute Apple documents on the
//! Neural Engine from A17 Pro and M4 (the A16 family here).
//!
//! 1. calibrate: the fp32 graph runs on the CPU engine over the sample inputs; every float
//!    activation that feeds a `linear`, `conv` or a `matmul` with one constant operand gets a
//!    symmetric per-tensor scale `fp16(max|x| / 127)` (rounded to fp16 so the fp16 program stores
//!    it exactly);
//! 2. a `fake_quant` (MIL `quantize` → int8 → `dequantize`) is inserted on each of those inputs,
//!    and the program compiles with every fp16 blob weight of rank ≥ 2 stored int8 per output
//!    channel (the `Compress::Int8` encoder and its per-weight gate);
//! 3. gate: the fp16 program and the W8A8 program run on the CPU engine over the same samples;
//!    the compile is refused when the cosine similarity of any output, over all samples, is below
//!    the bound.

use super::{run, CompileError, Compiled, Compress, FunctionSpec, Mode, ProgramOptions};
use crate::arch::mil_ops;
use crate::graph::{rewrite_graph, topo_order, DType, NodeId, Op, Tensor};
use crate::lower::{LowerError, ParameterMode, Target};
use half::f16;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

/// The default accuracy bound: the cosine similarity of each output to the fp16 program's.
pub const DEFAULT_MIN_COSINE: f64 = 0.99;

/// Activation quantization of ANE programs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Quantize {
    /// Activations stay at the program's float precision.
    #[default]
    None,
    /// int8 activations (per tensor, calibrated) and int8 weights (per output channel).
    W8A8(W8A8),
}

/// W8A8 settings: the calibration samples and the accuracy bound.
#[derive(Clone, Debug)]
pub struct W8A8 {
    pub calibration: Arc<Calibration>,
    /// Smallest accepted cosine similarity of an output to the fp16 program's.
    pub min_cosine: f64,
}

impl W8A8 {
    pub fn new(calibration: Calibration) -> W8A8 {
        W8A8 {
            calibration: Arc::new(calibration),
            min_cosine: DEFAULT_MIN_COSINE,
        }
    }
}

impl PartialEq for W8A8 {
    fn eq(&self, other: &Self) -> bool {
        self.min_cosine.to_bits() == other.min_cosine.to_bits()
            && self.calibration == other.calibration
    }
}

impl Eq for W8A8 {}

impl Hash for W8A8 {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.min_cosine.to_bits().hash(state);
        self.calibration.hash(state);
    }
}

/// Sample inputs: per sample, a value for every graph input (row-major, the input's shape).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calibration {
    samples: Vec<HashMap<String, Vec<f32>>>,
}

impl Eq for Calibration {}

impl Hash for Calibration {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for s in &self.samples {
            let mut names: Vec<&String> = s.keys().collect();
            names.sort();
            for n in names {
                n.hash(state);
                s[n].iter().for_each(|v| v.to_bits().hash(state));
            }
        }
    }
}

impl Calibration {
    pub fn new() -> Calibration {
        Calibration::default()
    }

    /// Adds one sample: `(input name, values)` for every graph input.
    pub fn push(&mut self, sample: impl IntoIterator<Item = (String, Vec<f32>)>) {
        self.samples.push(sample.into_iter().collect());
    }

    /// `count` samples of one input, stacked along a leading axis (`values` holds `count ·
    /// numel(input)` values); refused when `values` does not split into `count` equal samples.
    pub fn stacked(name: &str, count: usize, values: &[f32]) -> Result<Calibration, CompileError> {
        if count == 0 || values.is_empty() || !values.len().is_multiple_of(count) {
            return Err(refuse(format!(
                "{} calibration values of input '{name}' do not split into {count} equal samples",
                values.len()
            )));
        }
        let mut c = Calibration::new();
        for chunk in values.chunks(values.len() / count) {
            c.push([(name.to_string(), chunk.to_vec())]);
        }
        Ok(c)
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// One quantized activation: the input of `consumer` (`linear_0`, `conv_1`, … in graph order).
#[derive(Clone, Debug, PartialEq)]
pub struct ActivationScale {
    pub consumer: String,
    /// The activation's source, when it is a graph input.
    pub input: Option<String>,
    pub shape: Vec<usize>,
    /// Largest magnitude over the calibration samples (fp32 graph).
    pub max_abs: f32,
    /// `fp16(max_abs / 127)`; `None` when the activation was zero on every sample (left in fp16).
    pub scale: Option<f32>,
    /// `‖fake_quant(x) − x‖ / ‖x‖` over the calibration samples.
    pub rel_error: f64,
}

impl ActivationScale {
    fn label(&self) -> String {
        match &self.input {
            Some(i) => format!("'{}' (input '{i}')", self.consumer),
            None => format!("'{}'", self.consumer),
        }
    }
}

/// What W8A8 did: the per-tensor scales and the gate's measurements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuantizationReport {
    pub activations: Vec<ActivationScale>,
    /// `(output, cosine to the fp16 program)` over all samples.
    pub cosines: Vec<(String, f64)>,
    pub min_cosine: f64,
    pub samples: usize,
}

impl fmt::Display for QuantizationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "w8a8: {} activations, {} calibration samples, gate cosine >= {}",
            self.activations.len(),
            self.samples,
            self.min_cosine
        )?;
        for a in &self.activations {
            match a.scale {
                Some(s) => writeln!(
                    f,
                    "  {} {:?}: max |x| {:.6}, scale {:e}, relative error {:.4}",
                    a.label(),
                    a.shape,
                    a.max_abs,
                    s,
                    a.rel_error
                )?,
                None => writeln!(
                    f,
                    "  {} {:?}: zero on every sample, kept fp16",
                    a.label(),
                    a.shape
                )?,
            }
        }
        for (name, c) in &self.cosines {
            writeln!(f, "  output '{name}': cosine {c:.6} to the fp16 program")?;
        }
        Ok(())
    }
}

fn refuse(message: impl Into<String>) -> CompileError {
    CompileError::Quantize(message.into())
}

/// The activation an op reads through its first operand (linear, conv), or the non-constant
/// operand of a matmul against a constant.
fn quantized_operand(node: &Tensor) -> Option<usize> {
    let s = node.srcs();
    let float = |i: usize| s[i].dtype() == DType::F32 && s[i].constant_value().is_none();
    match node.op() {
        Op::Linear { .. } | Op::Conv { .. } if float(0) => Some(0),
        Op::MatMul { .. } => match (s[0].constant_value(), s[1].constant_value()) {
            (None, Some(_)) if float(0) => Some(0),
            (Some(_), None) if float(1) => Some(1),
            _ => None,
        },
        _ => None,
    }
}

/// The W8A8 compile of one function (see the module docs).
pub(super) fn compile(
    functions: &[FunctionSpec<'_>],
    options: &ProgramOptions,
    w: &W8A8,
) -> Result<Compiled, CompileError> {
    let [function] = functions else {
        return Err(refuse(format!(
            "quantizes one function, found {}",
            functions.len()
        )));
    };
    let arch = match &options.target {
        Target::Ane(arch) => *arch,
        Target::Cpu => {
            return Err(refuse(
                "produces ANE programs (int8 activations in an fp16 program); the CPU target keeps fp32",
            ))
        }
    };
    if !mil_ops::accepts("quantize", arch.family()) {
        return Err(refuse(format!(
            "target {arch} ({}) cannot run it: {}",
            arch.family(),
            crate::legalize::QUANTIZE_FLOOR
        )));
    }
    if !matches!(options.compress, Compress::None | Compress::Int8) {
        return Err(refuse(format!(
            "stores weights int8; compression {:?} was also asked for",
            options.compress
        )));
    }
    if !(w.min_cosine.is_finite() && w.min_cosine > -1.0 && w.min_cosine <= 1.0) {
        return Err(refuse(format!(
            "the cosine bound {} is not in (-1, 1]",
            w.min_cosine
        )));
    }
    let roots: Vec<Tensor> = function.outputs.iter().map(|(_, t)| (*t).clone()).collect();
    let feeds = feeds(&roots, &w.calibration)?;

    let mut timings = Vec::new();
    let start = Instant::now();
    let mut activations = Vec::new();
    let mut sites: Vec<Tensor> = Vec::new();
    let mut counts: HashMap<&'static str, usize> = HashMap::new();
    let mut consumers: HashMap<NodeId, usize> = HashMap::new();
    for node in topo_order(&roots) {
        let Some(i) = quantized_operand(&node) else {
            continue;
        };
        let k = counts.entry(node.op().name()).or_insert(0);
        let consumer = format!("{}_{k}", node.op().name());
        *k += 1;
        let x = &node.srcs()[i];
        if consumers.contains_key(&x.id()) {
            continue;
        }
        consumers.insert(x.id(), sites.len());
        sites.push(x.clone());
        activations.push(ActivationScale {
            consumer,
            input: match x.op() {
                Op::Input { name } => Some(name.clone()),
                _ => None,
            },
            shape: x.shape().to_vec(),
            max_abs: 0.0,
            scale: None,
            rel_error: 0.0,
        });
    }
    if sites.is_empty() {
        return Err(refuse(
            "the graph has no linear, conv or constant-operand matmul whose input could be quantized",
        ));
    }
    calibrate(&sites, &feeds, &mut activations)?;
    timings.push(("calibrate", start.elapsed().as_secs_f64()));

    let start = Instant::now();
    let scales: HashMap<NodeId, f32> = sites
        .iter()
        .zip(&activations)
        .filter_map(|(t, a)| a.scale.map(|s| (t.id(), s)))
        .collect();
    let mut inserted: HashMap<NodeId, Tensor> = HashMap::new();
    let quantized = rewrite_graph(
        &roots,
        |node, srcs| {
            let Some(i) = quantized_operand(node) else {
                return Ok(None);
            };
            let original = &node.srcs()[i];
            let Some(&scale) = scales.get(&original.id()) else {
                return Ok(None);
            };
            let q = match inserted.get(&original.id()) {
                Some(q) => q.clone(),
                None => {
                    let q = srcs[i].fake_quant(scale)?;
                    inserted.insert(original.id(), q.clone());
                    q
                }
            };
            let mut srcs = srcs.to_vec();
            srcs[i] = q;
            Tensor::from_op(node.op().clone(), srcs).map(Some)
        },
        |_, e| e,
    )
    .map_err(|source| LowerError::Rewrite {
        op: "fake_quant",
        source,
    })?;
    let named: Vec<(&str, &Tensor)> = function
        .outputs
        .iter()
        .map(|(n, _)| *n)
        .zip(&quantized)
        .collect();
    let spec = [FunctionSpec {
        name: function.name,
        outputs: &named,
    }];
    let quantized_options = ProgramOptions {
        compress: Compress::Int8,
        ..options.clone()
    };
    let mut compiled = run(&spec, &quantized_options, Mode::Strict)?;
    let fp16_options = ProgramOptions {
        compress: Compress::None,
        quantize: Quantize::None,
        ..options.clone()
    };
    let baseline = run(functions, &fp16_options, Mode::Strict)?;
    timings.push(("quantize", start.elapsed().as_secs_f64()));

    let start = Instant::now();
    let cosines = gate(&baseline, &compiled, &feeds)?;
    timings.push(("gate", start.elapsed().as_secs_f64()));
    let report = QuantizationReport {
        activations,
        cosines,
        min_cosine: w.min_cosine,
        samples: feeds.len(),
    };
    for (stage, seconds) in timings {
        compiled.report.stages.push(super::StageTime {
            stage,
            runs: 1,
            seconds,
        });
    }
    let worst = report
        .cosines
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .cloned();
    if let Some((output, cosine)) = worst {
        if cosine.is_nan() || cosine < w.min_cosine {
            let activation = report
                .activations
                .iter()
                .filter(|a| a.scale.is_some())
                .max_by(|a, b| a.rel_error.total_cmp(&b.rel_error))
                .map(|a| format!("{} (relative error {:.4})", a.label(), a.rel_error))
                .unwrap_or_default();
            return Err(CompileError::QuantizeGate {
                output,
                cosine,
                bound: w.min_cosine,
                activation,
            });
        }
    }
    compiled.report.quantization = Some(report);
    Ok(compiled)
}

/// Per sample, the feeds of every fed port: the calibration values of each graph input (checked
/// against its shape) and the initial values of parameters.
fn feeds(
    roots: &[Tensor],
    calibration: &Calibration,
) -> Result<Vec<HashMap<String, Vec<f32>>>, CompileError> {
    if calibration.is_empty() {
        return Err(refuse("the calibration set has no samples"));
    }
    let mut inputs = Vec::new();
    let mut params = HashMap::new();
    for node in topo_order(roots) {
        match node.op() {
            Op::Input { name } => {
                if node.dtype() != DType::F32 {
                    return Err(refuse(format!(
                        "input '{name}' is {}; calibration feeds f32 inputs only",
                        node.dtype()
                    )));
                }
                inputs.push((name.clone(), node.shape().to_vec()));
            }
            Op::Parameter { name, init } => {
                let values = init.to_f32_vec().ok_or_else(|| {
                    refuse(format!("parameter '{name}' has no f32 initial value"))
                })?;
                params.insert(name.clone(), values);
            }
            _ => {}
        }
    }
    let mut out = Vec::with_capacity(calibration.len());
    for (i, sample) in calibration.samples.iter().enumerate() {
        for name in sample.keys() {
            if !inputs.iter().any(|(n, _)| n == name) {
                let names: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
                return Err(refuse(format!(
                    "calibration sample {i} names input '{name}', which the graph does not have (inputs: {})",
                    names.join(", ")
                )));
            }
        }
        let mut f = params.clone();
        for (name, shape) in &inputs {
            let want: usize = shape.iter().product();
            let Some(v) = sample.get(name) else {
                return Err(refuse(format!(
                    "calibration sample {i} has no value for input '{name}' (shape {shape:?})"
                )));
            };
            if v.len() != want {
                return Err(refuse(format!(
                    "calibration sample {i}: input '{name}' expects shape {shape:?} ({want} values), got {} values",
                    v.len()
                )));
            }
            if let Some(bad) = v.iter().position(|x| !x.is_finite()) {
                return Err(refuse(format!(
                    "calibration sample {i}: input '{name}' has a non-finite value at element {bad}"
                )));
            }
            f.insert(name.clone(), v.clone());
        }
        out.push(f);
    }
    Ok(out)
}

/// Runs the fp32 graph with the activations as outputs and fills in each one's scale.
fn calibrate(
    sites: &[Tensor],
    feeds: &[HashMap<String, Vec<f32>>],
    activations: &mut [ActivationScale],
) -> Result<(), CompileError> {
    let names: Vec<String> = (0..sites.len())
        .map(|k| format!("activation_{k}"))
        .collect();
    let named: Vec<(&str, &Tensor)> = names.iter().map(|n| n.as_str()).zip(sites).collect();
    let cpu = ProgramOptions {
        target: Target::Cpu,
        parameters: ParameterMode::Input,
        ..ProgramOptions::default()
    };
    let program = run(
        &[FunctionSpec {
            name: "main",
            outputs: &named,
        }],
        &cpu,
        Mode::Strict,
    )?;
    let mut values: Vec<Vec<Vec<f32>>> = vec![Vec::new(); sites.len()];
    for f in feeds {
        let mut out = program.run_cpu(f)?;
        for (k, n) in names.iter().enumerate() {
            let v = out.remove(n).ok_or_else(|| {
                refuse(format!(
                    "activation output '{n}' missing from a calibration run"
                ))
            })?;
            values[k].push(v);
        }
    }
    for (a, vs) in activations.iter_mut().zip(&values) {
        let max =
            vs.iter().flatten().fold(
                0f32,
                |m, &v| if v.is_nan() { f32::NAN } else { m.max(v.abs()) },
            );
        if !max.is_finite() {
            return Err(refuse(format!(
                "activation {} is not finite on the calibration samples",
                a.label()
            )));
        }
        a.max_abs = max;
        if max == 0.0 {
            continue;
        }
        let scale = f16::from_f32(max / 127.0).to_f32();
        if !(scale.is_finite() && scale > 0.0) {
            return Err(refuse(format!(
                "activation {} has max |x| {max}, whose scale {} is outside fp16's range",
                a.label(),
                max / 127.0
            )));
        }
        a.scale = Some(scale);
        let (mut err, mut norm) = (0f64, 0f64);
        for &v in vs.iter().flatten() {
            let q = f64::from(((v / scale).round_ties_even()).clamp(-128.0, 127.0) * scale);
            err += (q - f64::from(v)).powi(2);
            norm += f64::from(v).powi(2);
        }
        a.rel_error = if norm > 0.0 { (err / norm).sqrt() } else { 0.0 };
    }
    Ok(())
}

/// The cosine similarity of each output of `quantized` to `baseline`'s over every sample.
fn gate(
    baseline: &Compiled,
    quantized: &Compiled,
    feeds: &[HashMap<String, Vec<f32>>],
) -> Result<Vec<(String, f64)>, CompileError> {
    let names: Vec<String> = baseline.outputs.iter().map(|o| o.name.clone()).collect();
    let mut sums = vec![(0f64, 0f64, 0f64); names.len()];
    for f in feeds {
        let a = baseline.run_cpu(f)?;
        let b = quantized.run_cpu(f)?;
        for (k, n) in names.iter().enumerate() {
            let (Some(x), Some(y)) = (a.get(n), b.get(n)) else {
                return Err(refuse(format!("output '{n}' missing from a gate run")));
            };
            for (&p, &q) in x.iter().zip(y) {
                let (p, q) = (f64::from(p), f64::from(q));
                sums[k].0 += p * q;
                sums[k].1 += p * p;
                sums[k].2 += q * q;
            }
        }
    }
    Ok(names
        .into_iter()
        .zip(sums)
        .map(|(n, (dot, pp, qq))| {
            let c = if pp == 0.0 && qq == 0.0 {
                1.0
            } else {
                dot / (pp.sqrt() * qq.sqrt())
            };
            (n, c)
        })
        .collect())
}
