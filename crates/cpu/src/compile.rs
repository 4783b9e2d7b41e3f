//! `compile()`: walks one function, builds nodes through the op builders, fuses, places values.

use crate::error::{CpuError, Result};
use crate::kernels::Kernel;
use crate::known::{decode_literal, BlobStore, Data, Floats, Known};
use crate::plan::{op_error, ArenaAlloc, ConstBuf, Home, Node, Plan, Value, Vid};
use crate::port::Port;
use crate::tensor::Elem;
use aneforge_mil::{Argument, DType, Literal, Operation, Program, ValueType};
use std::collections::HashMap;
use std::sync::Arc;

/// Options for [`compile`]. `Default::default()` sizes the thread pool to the machine.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Worker threads for large kernels; `None` = the size of rayon's global pool (all cores
    /// unless `RAYON_NUM_THREADS` says otherwise).
    pub threads: Option<usize>,
    /// Pattern fusion (epilogues, attention, norms, elementwise chains). On by default.
    pub fuse: bool,
    /// The activations of few-row products against block-quantized weights
    /// (`constexpr_blockwise_shift_scale`): exact f32 by default, or quantized per 32 columns
    /// for integer dot products (see [`Activations`]).
    pub activations: Activations,
    /// What fp16 programs assume about the width of the sums inside matmul/linear and
    /// reductions (see [`Accumulation`]).
    pub accumulation: Accumulation,
    /// The arithmetic of fp32 programs' many-row products against constant weights (see
    /// [`MatmulPrecision`]).
    pub matmul: MatmulPrecision,
}

/// How fp32 programs compute products of at least [`MatmulPrecision::MIN_ROWS`] rows against a
/// constant weight (`linear`, `matmul` with a constant `y`, and convs without groups over that
/// many output pixels) and attention over that many query rows: the products that dominate
/// encoders, vision models and prefill. fp16 programs, few-row products (decode), depthwise and
/// grouped convs and block-quantized weights are not affected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatmulPrecision {
    /// Every product in f32: the exact program.
    #[default]
    F32,
    /// Both operands rounded to bfloat16 (to nearest even), products summed in f32, as
    /// PyTorch's `set_float32_matmul_precision("medium")` allows: about 2⁻⁹ relative error per
    /// operand. On AMX CPUs (Intel Sapphire Rapids and later) these products run on the tile
    /// unit; elsewhere they take the f32 kernels over the rounded values, and attention stays
    /// f32.
    Bf16,
}

impl MatmulPrecision {
    /// Fewer rows than this keep f32 products (a GEMV reads its weight once either way).
    pub const MIN_ROWS: usize = 16;

    /// The CLI's name of each mode.
    pub fn name(self) -> &'static str {
        match self {
            MatmulPrecision::F32 => "f32",
            MatmulPrecision::Bf16 => "bf16",
        }
    }

    /// Whether bf16 products run on AMX tiles in this process.
    pub fn bf16_on_amx() -> bool {
        crate::kernels::bf16::uses_amx()
    }
}

/// How few-row products (decode) against block-quantized weights take their activation rows.
/// The integer forms quantize each row per 32 columns, `x ≈ s·q` with `s = max|x| / qmax` and
/// `q = round_half_even(x / s)` in f32 arithmetic, and sum `q_w·q` exactly in integers
/// (AVX-512 VNNI CPUs only; elsewhere, and for blocks they do not take, the f32 path runs).
/// Products over more rows (prefill) always take f32 activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Activations {
    /// f32 activations against the weights' values: the exact product.
    #[default]
    F32,
    /// 15-bit activations, `qmax = 127·128`: a rounding of at most 2⁻¹⁵ of a chunk's largest
    /// magnitude, 128 times finer than `Int8`, summed as two 8-bit planes.
    Int16,
    /// llama.cpp's scheme, `qmax = 127`.
    Int8,
}

impl Activations {
    /// 8-bit planes per quantized activation (0: f32).
    pub fn planes(self) -> usize {
        match self {
            Activations::F32 => 0,
            Activations::Int8 => 1,
            Activations::Int16 => 2,
        }
    }

    /// The CLI's name of each mode.
    pub fn name(self) -> &'static str {
        match self {
            Activations::F32 => "f32",
            Activations::Int16 => "int16",
            Activations::Int8 => "int8",
        }
    }
}

/// The precision of running sums when an fp16 program executes. Apple does not document how the
/// Neural Engine accumulates; results are stored as fp16 between ops either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Accumulation {
    /// Sums are carried in f32 and rounded to fp16 once, when the op's result is stored.
    #[default]
    F32,
    /// Every partial sum of an fp16 matmul/linear (except compressed-weight GEMVs), reduce_sum,
    /// reduce_mean, softmax denominator and layer/RMS/L2 norm statistic is rounded to fp16 (the
    /// pessimistic reading, for finding where a program depends on wide accumulators). Convs keep
    /// f32 sums. Slow: a plain loop.
    F16,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            threads: None,
            fuse: true,
            activations: Activations::F32,
            accumulation: Accumulation::F32,
            matmul: MatmulPrecision::F32,
        }
    }
}

pub(crate) struct Builder<'p> {
    pub values: Vec<Value>,
    pub by_name: HashMap<String, Vid>,
    pub known: HashMap<Vid, Known>,
    /// Compressed forms of constexpr-decompressed `[n, k]` weights, for the decode GEMV.
    pub quant: HashMap<Vid, crate::kernels::quant::QuantWeight>,
    pub nodes: Vec<Node>,
    pub blobs: &'p BlobStore,
    pub activations: Activations,
    pub matmul: MatmulPrecision,
}

impl Builder<'_> {
    /// Whether a product over `rows` rows (query rows, output pixels) of an fp32 (`fp32`)
    /// program takes bf16 operands ([`MatmulPrecision::Bf16`]).
    pub fn bf16_products(&self, fp32: bool, rows: usize) -> bool {
        self.matmul == MatmulPrecision::Bf16 && fp32 && rows >= MatmulPrecision::MIN_ROWS
    }

    pub fn add_value(&mut self, name: String, dtype: DType, shape: Vec<usize>, home: Home) -> Vid {
        let id = self.values.len();
        self.values.push(Value {
            name: name.clone(),
            dtype,
            shape,
            home,
        });
        self.by_name.insert(name, id);
        id
    }

    /// A kernel-internal value (not nameable from the program).
    pub fn add_temp(&mut self, name: String, dtype: DType, shape: Vec<usize>) -> Vid {
        let id = self.values.len();
        self.values.push(Value {
            name,
            dtype,
            shape,
            home: Home::None,
        });
        id
    }

    pub fn add_known(&mut self, name: String, k: Known) -> Vid {
        let id = self.add_value(name, k.dtype, k.shape.clone(), Home::None);
        self.known.insert(id, k);
        id
    }
}

/// One op being built: argument access with errors that name the op.
pub(crate) struct OpCx<'a, 'p> {
    pub b: &'a mut Builder<'p>,
    pub op: &'a Operation,
    pub name: String,
}

impl OpCx<'_, '_> {
    pub fn err(&self, message: impl Into<String>) -> CpuError {
        op_error(&self.name, &self.op.op_type, message)
    }

    /// An argument from the op's inputs, or — as compiled Core ML programs write constexpr
    /// arguments — from its attributes (`name` excluded).
    fn arg(&self, arg: &str) -> Option<Argument> {
        if let Some(a) = self.op.input(arg) {
            return Some(a.clone());
        }
        if arg == "name" {
            return None;
        }
        self.op.attribute(arg).map(|l| Argument::Literal(l.clone()))
    }

    pub fn has_arg(&self, arg: &str) -> bool {
        self.arg(arg).is_some()
    }

    fn resolve(&mut self, arg: &str, a: &Argument) -> Result<Vid> {
        match a {
            Argument::Name(n) => self.b.by_name.get(n).copied().ok_or_else(|| {
                self.err(format!(
                    "argument `{arg}` refers to `{n}`, which is not defined before this op"
                ))
            }),
            Argument::Literal(l) => {
                let k = decode_literal(l, self.b.blobs)
                    .map_err(|e| self.err(format!("argument `{arg}`: {e}")))?;
                let name = format!("{}::{arg}#{}", self.name, self.b.values.len());
                Ok(self.b.add_known(name, k))
            }
            Argument::List(_) => {
                Err(self.err(format!("argument `{arg}` is a list, expected one tensor")))
            }
        }
    }

    /// A required tensor argument.
    pub fn input(&mut self, arg: &str) -> Result<Vid> {
        let a = self
            .arg(arg)
            .ok_or_else(|| self.err(format!("missing argument `{arg}`")))?;
        self.resolve(arg, &a)
    }

    pub fn opt_input(&mut self, arg: &str) -> Result<Option<Vid>> {
        match self.arg(arg) {
            None => Ok(None),
            Some(a) => self.resolve(arg, &a).map(Some),
        }
    }

    /// A list-valued argument (`values = (a, b, c)`), or a single tensor as a one-element list.
    pub fn input_list(&mut self, arg: &str) -> Result<Vec<Vid>> {
        let a = self
            .arg(arg)
            .ok_or_else(|| self.err(format!("missing argument `{arg}`")))?;
        match &a {
            Argument::List(items) => items.iter().map(|it| self.resolve(arg, it)).collect(),
            other => Ok(vec![self.resolve(arg, other)?]),
        }
    }

    pub fn shape(&self, v: Vid) -> Vec<usize> {
        self.b.values[v].shape.clone()
    }

    pub fn dtype(&self, v: Vid) -> DType {
        self.b.values[v].dtype
    }

    pub fn elem(&self, v: Vid) -> Result<Elem> {
        let d = self.dtype(v);
        Elem::from_dtype(d).ok_or_else(|| {
            self.err(format!(
                "`{}` is {d}, which has no runtime form here",
                self.b.values[v].name
            ))
        })
    }

    pub fn known(&self, v: Vid) -> Option<&Known> {
        self.b.known.get(&v)
    }

    fn known_arg(&mut self, arg: &str) -> Result<Option<Known>> {
        match self.opt_input(arg)? {
            None => Ok(None),
            Some(v) => match self.b.known.get(&v) {
                Some(k) => Ok(Some(k.clone())),
                None => Err(self.err(format!("argument `{arg}` must be a compile-time constant"))),
            },
        }
    }

    pub fn ints(&mut self, arg: &str) -> Result<Option<Vec<i64>>> {
        match self.known_arg(arg)? {
            None => Ok(None),
            Some(k) => k.i64s().map(Some).ok_or_else(|| {
                self.err(format!(
                    "argument `{arg}` must be integers, found {}",
                    k.dtype
                ))
            }),
        }
    }

    pub fn req_ints(&mut self, arg: &str) -> Result<Vec<i64>> {
        self.ints(arg)?
            .ok_or_else(|| self.err(format!("missing argument `{arg}`")))
    }

    pub fn int(&mut self, arg: &str, default: Option<i64>) -> Result<i64> {
        match self.ints(arg)? {
            Some(v) if v.len() == 1 => Ok(v[0]),
            Some(v) => Err(self.err(format!(
                "argument `{arg}` must be a scalar, found {} values",
                v.len()
            ))),
            None => default.ok_or_else(|| self.err(format!("missing argument `{arg}`"))),
        }
    }

    pub fn float(&mut self, arg: &str, default: Option<f32>) -> Result<f32> {
        match self.known_arg(arg)? {
            Some(k) => match k.f32s() {
                Some(v) if v.len() == 1 => Ok(v[0]),
                _ => Err(self.err(format!("argument `{arg}` must be a numeric scalar"))),
            },
            None => default.ok_or_else(|| self.err(format!("missing argument `{arg}`"))),
        }
    }

    pub fn boolean(&mut self, arg: &str, default: bool) -> Result<bool> {
        match self.known_arg(arg)? {
            Some(k) => match k.bools() {
                Some(v) if v.len() == 1 => Ok(v[0]),
                _ => Err(self.err(format!("argument `{arg}` must be a bool scalar"))),
            },
            None => Ok(default),
        }
    }

    pub fn bools(&mut self, arg: &str) -> Result<Option<Vec<bool>>> {
        match self.known_arg(arg)? {
            None => Ok(None),
            Some(k) => k
                .bools()
                .map(Some)
                .ok_or_else(|| self.err(format!("argument `{arg}` must be bools"))),
        }
    }

    pub fn string(&mut self, arg: &str, default: Option<&str>) -> Result<String> {
        match self.known_arg(arg)? {
            Some(k) => match k.strs() {
                Some([s]) => Ok(s.clone()),
                _ => Err(self.err(format!("argument `{arg}` must be a string"))),
            },
            None => default
                .map(|s| s.to_string())
                .ok_or_else(|| self.err(format!("missing argument `{arg}`"))),
        }
    }

    /// An axis argument normalised against `rank`.
    pub fn axis_arg(&mut self, arg: &str, default: Option<i64>, rank: usize) -> Result<usize> {
        let a = self.int(arg, default)?;
        self.axis(a, rank)
    }

    /// Normalises an axis against `rank` (negative counts from the end).
    pub fn axis(&self, axis: i64, rank: usize) -> Result<usize> {
        let r = rank as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a >= r.max(1) {
            return Err(self.err(format!("axis {axis} is out of range for rank {rank}")));
        }
        Ok(a as usize)
    }

    fn declared(&self, i: usize) -> Result<&aneforge_mil::NamedValue> {
        self.op.outputs.get(i).ok_or_else(|| {
            self.err(format!(
                "expected at least {} outputs, the op declares {}",
                i + 1,
                self.op.outputs.len()
            ))
        })
    }

    /// Defines output `i` with the computed dtype and shape, checking the declared type.
    pub fn output(&mut self, i: usize, dtype: DType, shape: Vec<usize>) -> Result<Vid> {
        let nv = self.declared(i)?.clone();
        if shape.len() > 8 {
            return Err(self.err(format!(
                "output `{}` has rank {}; the CPU engine supports rank ≤ 8",
                nv.name,
                shape.len()
            )));
        }
        let ValueType::Tensor(ty) = &nv.ty else {
            return Err(self.err(format!("output `{}` is not a tensor", nv.name)));
        };
        if ty.dtype != dtype {
            return Err(self.err(format!(
                "output `{}` is declared {}, but the op produces {dtype}",
                nv.name, ty.dtype
            )));
        }
        match ty.static_shape() {
            Some(s) if s == shape => {}
            Some(s) => {
                return Err(self.err(format!(
                    "output `{}` is declared with shape {s:?}, but the op produces {shape:?}",
                    nv.name
                )))
            }
            None if ty.rank() == shape.len() => {}
            None => {
                return Err(self.err(format!(
                    "output `{}` is declared with rank {}, but the op produces shape {shape:?}",
                    nv.name,
                    ty.rank()
                )))
            }
        }
        Ok(self.b.add_value(nv.name.clone(), dtype, shape, Home::None))
    }

    /// Defines output `i` as compile-time constant data.
    pub fn known_output(&mut self, i: usize, k: Known) -> Result<Vid> {
        let v = self.output(i, k.dtype, k.shape.clone())?;
        self.b.known.insert(v, k);
        Ok(v)
    }

    /// Defines output `i` as a zero-copy alias of `src` (same bytes, new shape).
    pub fn alias_output(&mut self, i: usize, src: Vid, shape: Vec<usize>) -> Result<Vid> {
        let dtype = self.dtype(src);
        let v = self.output(i, dtype, shape)?;
        if let Some(k) = self.b.known.get(&src).cloned() {
            let mut k = k;
            k.shape = self.b.values[v].shape.clone();
            self.b.known.insert(v, k);
        } else {
            self.b.values[v].home = Home::Alias(src);
        }
        Ok(v)
    }

    /// A kernel-internal alias of `src` with another shape (e.g. a bias viewed as [C, 1, 1]).
    pub fn alias_temp(&mut self, src: Vid, shape: Vec<usize>) -> Vid {
        let dtype = self.dtype(src);
        let v = self.b.add_temp(
            format!("{}#view", self.b.values[src].name),
            dtype,
            shape.clone(),
        );
        if let Some(k) = self.b.known.get(&src).cloned() {
            let mut k = k;
            k.shape = shape;
            self.b.known.insert(v, k);
        } else {
            self.b.values[v].home = Home::Alias(src);
        }
        v
    }

    pub fn emit(&mut self, kernel: Kernel, reads: Vec<Vid>, writes: Vec<Vid>) {
        self.b.nodes.push(Node {
            name: self.name.clone(),
            op_type: self.op.op_type.clone(),
            kernel,
            reads,
            writes,
        });
    }
}

/// Validates and plans one function of a program.
pub fn compile(
    program: &Program,
    function: &str,
    blobs: &BlobStore,
    options: &CompileOptions,
) -> Result<Arc<Plan>> {
    let f = program.function(function).ok_or_else(|| {
        let names: Vec<&str> = program.functions.iter().map(|f| f.name.as_str()).collect();
        CpuError::NoFunction(function.to_string(), names.join(", "))
    })?;
    let threads = options
        .threads
        .unwrap_or_else(rayon::current_num_threads)
        .max(1);
    let mut b = Builder {
        values: Vec::new(),
        by_name: HashMap::new(),
        known: HashMap::new(),
        quant: HashMap::new(),
        nodes: Vec::new(),
        blobs,
        activations: options.activations,
        matmul: options.matmul,
    };
    let mut inputs = Vec::new();
    for (i, nv) in f.inputs.iter().enumerate() {
        let bad = |m: String| CpuError::Input {
            name: nv.name.clone(),
            message: m,
        };
        let ValueType::Tensor(ty) = &nv.ty else {
            return Err(bad("only tensor inputs are supported".into()));
        };
        let shape = ty.static_shape().ok_or_else(|| {
            bad(format!(
                "{} has a symbolic shape; the CPU engine needs static shapes",
                aneforge_mil::ty_string(ty)
            ))
        })?;
        if Elem::from_dtype(ty.dtype).is_none() {
            return Err(bad(format!("{} inputs are not supported", ty.dtype)));
        }
        if b.by_name.contains_key(&nv.name) {
            return Err(bad("defined twice".into()));
        }
        b.add_value(nv.name.clone(), ty.dtype, shape.clone(), Home::Input(i));
        inputs.push(Port {
            name: nv.name.clone(),
            dtype: ty.dtype,
            shape,
        });
    }
    for op in &f.body.operations {
        let name = op.name().map(str::to_string).unwrap_or_else(|| {
            op.outputs
                .first()
                .map(|o| o.name.clone())
                .unwrap_or_else(|| "<unnamed>".into())
        });
        let mut cx = OpCx {
            b: &mut b,
            op,
            name,
        };
        if !op.blocks.is_empty() {
            return Err(cx.err("control flow (nested blocks) is not supported by the CPU engine"));
        }
        crate::ops::build(&mut cx)?;
    }
    let mut outputs = Vec::new();
    let mut output_vids = Vec::new();
    for name in &f.body.outputs {
        let v = *b.by_name.get(name).ok_or_else(|| {
            CpuError::Program(format!(
                "function output `{name}` is not defined in `{function}`"
            ))
        })?;
        let val = &b.values[v];
        if val.elem().is_none() {
            return Err(CpuError::Program(format!(
                "function output `{name}` is {}, which has no runtime form",
                val.dtype
            )));
        }
        outputs.push(Port {
            name: name.clone(),
            dtype: val.dtype,
            shape: val.shape.clone(),
        });
        output_vids.push(v);
    }
    if options.fuse {
        crate::fuse::run(&mut b, &output_vids);
    }
    if options.accumulation == Accumulation::F16 {
        for node in &mut b.nodes {
            match &mut node.kernel {
                Kernel::Matmul(m) if m.a_elem == Elem::F16 => m.acc16 = true,
                Kernel::Rows(r) if r.x_elem == Elem::F16 => r.acc16 = true,
                _ => {}
            }
        }
    }
    finish(b, inputs, outputs, output_vids, threads)
}

fn finish(
    mut b: Builder<'_>,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    output_vids: Vec<Vid>,
    threads: usize,
) -> Result<Arc<Plan>> {
    let root = |values: &[Value], mut v: Vid| {
        while let Home::Alias(s) = values[v].home {
            v = s;
        }
        v
    };
    // drop nodes whose results nobody needs
    let mut needed = vec![false; b.values.len()];
    for &v in &output_vids {
        needed[v] = true;
        needed[root(&b.values, v)] = true;
    }
    let mut keep = vec![false; b.nodes.len()];
    for (i, n) in b.nodes.iter().enumerate().rev() {
        if n.writes.iter().any(|&w| needed[w]) || n.kernel.has_side_effects() {
            keep[i] = true;
            for &r in &n.reads {
                needed[r] = true;
                needed[root(&b.values, r)] = true;
            }
        }
    }
    let mut k = keep.into_iter();
    b.nodes.retain(|_| k.next().unwrap_or(true));
    for n in &mut b.nodes {
        n.kernel.finalize();
    }
    // aliases of needed values keep their roots needed (done above); place outputs
    let mut direct = vec![false; outputs.len()];
    let mut producer: HashMap<Vid, usize> = HashMap::new();
    for (i, n) in b.nodes.iter().enumerate() {
        for &w in &n.writes {
            producer.insert(w, i);
        }
    }
    for (j, &v) in output_vids.iter().enumerate() {
        if b.values[v].home == Home::None
            && producer.contains_key(&v)
            && !output_vids[..j].contains(&v)
        {
            b.values[v].home = Home::Output(j);
            direct[j] = true;
        }
    }
    // materialise constants that kernels read at run time
    let mut consts = Vec::new();
    let mut materialise = |b: &mut Builder<'_>, v: Vid| -> Result<()> {
        let v = root(&b.values, v);
        if b.values[v].home != Home::None {
            return Ok(());
        }
        if let Some(k) = b.known.get(&v) {
            let buf = match &k.data {
                Data::F32(view @ Floats::Blob { .. }) if k.dtype == DType::Fp32 => {
                    ConstBuf::Blob(view.clone())
                }
                _ => ConstBuf::Owned(k.to_buffer().ok_or_else(|| {
                    CpuError::Program(format!(
                        "constant `{}` is {}, which has no runtime form",
                        b.values[v].name, k.dtype
                    ))
                })?),
            };
            b.values[v].home = Home::Const(consts.len());
            consts.push(buf);
        }
        Ok(())
    };
    for i in 0..b.nodes.len() {
        for r in b.nodes[i].reads.clone() {
            materialise(&mut b, r)?;
        }
    }
    for &v in &output_vids {
        materialise(&mut b, v)?;
    }
    // lifetimes and arena slots
    let n_nodes = b.nodes.len();
    let mut last_use: HashMap<Vid, usize> = HashMap::new();
    for (i, n) in b.nodes.iter().enumerate() {
        for &r in &n.reads {
            last_use.insert(root(&b.values, r), i);
        }
    }
    for &v in &output_vids {
        last_use.insert(root(&b.values, v), usize::MAX);
    }
    let mut arena = ArenaAlloc::default();
    for i in 0..n_nodes {
        for w in b.nodes[i].writes.clone() {
            if b.values[w].home == Home::None {
                let off = arena.alloc(b.values[w].bytes());
                b.values[w].home = Home::Arena(off);
            }
        }
        let mut done: Vec<Vid> = b.nodes[i]
            .reads
            .iter()
            .chain(b.nodes[i].writes.iter())
            .map(|&v| root(&b.values, v))
            .filter(|v| last_use.get(v).is_none_or(|&l| l == i))
            .collect();
        done.sort_unstable();
        done.dedup();
        for v in done {
            if let Home::Arena(off) = b.values[v].home {
                arena.release(off, b.values[v].bytes());
            }
        }
    }
    let nin = inputs.len();
    let nout = outputs.len();
    let locs: Vec<(usize, usize)> = (0..b.values.len())
        .map(|v| match b.values[root(&b.values, v)].home {
            Home::Arena(off) => (0, off),
            Home::Input(i) => (1 + i, 0),
            Home::Output(j) => (1 + nin + j, 0),
            Home::Const(c) => (1 + nin + nout + c, 0),
            Home::None | Home::Alias(_) => (usize::MAX, 0),
        })
        .collect();
    // in-place candidates for share_buffer: inputs the producer of an output may overwrite
    let mut inplace = vec![Vec::new(); nout];
    for (j, &v) in output_vids.iter().enumerate() {
        if !direct[j] {
            continue;
        }
        let Some(&p) = producer.get(&v) else { continue };
        let chain = matches!(b.nodes[p].kernel, Kernel::Chain(_));
        let sources = b.nodes[p].kernel.inplace_sources(&b.values, v);
        for &x in &sources {
            let x = root(&b.values, x);
            let Home::Input(i) = b.values[x].home else {
                continue;
            };
            if inputs[i].shape != outputs[j].shape || inputs[i].dtype != outputs[j].dtype {
                continue;
            }
            // a chain may load the input any number of times (each block is loaded before it
            // is stored); a copy kernel reads it once
            let readers_ok = b.nodes.iter().enumerate().all(|(ni, n)| {
                let reads_x = n.reads.iter().any(|&r| root(&b.values, r) == x);
                let mut own = n.reads.iter().filter(|&&r| root(&b.values, r) == x);
                if ni == p && chain {
                    own.all(|r| sources.contains(r))
                } else if ni == p {
                    own.count() == 1
                } else {
                    !reads_x || ni < p
                }
            });
            let not_output = output_vids.iter().all(|&o| root(&b.values, o) != x);
            if readers_ok && not_output && !inplace[j].contains(&i) {
                inplace[j].push(i);
            }
        }
    }
    let scratch_floats = b
        .nodes
        .iter()
        .map(|n| n.kernel.scratch_floats(&b.values, threads))
        .max()
        .unwrap_or(0);
    check_memory(&b, &output_vids, arena.top, scratch_floats, threads)?;
    let parallel = threads > 1 && b.nodes.iter().any(|n| n.kernel.wants_threads(&b.values));
    if parallel {
        crate::team::prepare(threads).map_err(|e| {
            CpuError::Program(format!("cannot start {threads} worker threads: {e}"))
        })?;
    }
    Ok(Arc::new(Plan {
        values: b.values,
        locs,
        nodes: b.nodes,
        consts,
        inputs,
        outputs,
        output_vids,
        output_direct: direct,
        inplace,
        arena_bytes: arena.top,
        scratch_floats,
        threads,
        parallel,
    }))
}

/// The environment variable that sets [`memory_limit`], in bytes with an optional `K`, `M`, `G`
/// or `T` (binary) suffix.
pub const MAX_MEMORY_ENV: &str = "ANEFORGE_MAX_MEMORY";

/// A process-wide [`memory_limit`] set by [`set_memory_limit`] (0: none set).
static MEMORY_LIMIT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Sets [`memory_limit`] for this process (the CLI's `--max-memory`), over the environment.
pub fn set_memory_limit(bytes: usize) {
    MEMORY_LIMIT.store(bytes.max(1), std::sync::atomic::Ordering::Relaxed);
}

/// The most memory one plan may need at run time (arena, port buffers and scratch together): the
/// limit [`set_memory_limit`] set, else `ANEFORGE_MAX_MEMORY` if set, else three quarters of
/// physical RAM (`/proc/meminfo`), else unlimited where RAM cannot be read.
pub fn memory_limit() -> Result<usize> {
    let set = MEMORY_LIMIT.load(std::sync::atomic::Ordering::Relaxed);
    if set != 0 {
        return Ok(set);
    }
    if let Ok(text) = std::env::var(MAX_MEMORY_ENV) {
        return parse_bytes(&text).ok_or_else(|| {
            CpuError::Program(format!(
                "{MAX_MEMORY_ENV}={text:?}: expected a byte count such as 8G, 512M or 1000000"
            ))
        });
    }
    let total_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
    });
    Ok(total_kib.map_or(usize::MAX, |k| k.saturating_mul(1024) / 4 * 3))
}

/// A byte count with an optional binary `K`, `M`, `G` or `T` suffix (`8G`, `512M`, `1000000`).
pub fn parse_bytes(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last()? {
        (i, 'K' | 'k') => (&text[..i], 10),
        (i, 'M' | 'm') => (&text[..i], 20),
        (i, 'G' | 'g') => (&text[..i], 30),
        (i, 'T' | 't') => (&text[..i], 40),
        _ => (text, 0),
    };
    digits.trim().parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// Fails, naming the op with the largest result, when the plan's run-time memory (arena, input
/// and output buffers, scratch) exceeds [`memory_limit`]: sizes come from the program text, and a
/// program of a few hundred bytes can ask for terabytes.
fn check_memory(
    b: &Builder<'_>,
    output_vids: &[Vid],
    arena_bytes: usize,
    scratch_floats: usize,
    threads: usize,
) -> Result<()> {
    let limit = memory_limit()?;
    let inputs: usize = b
        .values
        .iter()
        .filter(|v| matches!(v.home, Home::Input(_)))
        .fold(0, |sum, v| sum.saturating_add(v.bytes()));
    let outputs: usize = output_vids
        .iter()
        .fold(0, |sum, &v| sum.saturating_add(b.values[v].bytes()));
    let scratch = scratch_floats.saturating_mul(4);
    let total = arena_bytes
        .saturating_add(inputs)
        .saturating_add(outputs)
        .saturating_add(scratch);
    if total <= limit {
        return Ok(());
    }
    let largest = |n: &Node| {
        n.writes
            .iter()
            .map(|&w| b.values[w].bytes())
            .max()
            .unwrap_or(0)
            .max(
                n.kernel
                    .scratch_floats(&b.values, threads)
                    .saturating_mul(4),
            )
    };
    let message = format!(
        "the program needs {total} bytes (arena {arena_bytes}, inputs {inputs}, outputs \
         {outputs}, scratch {scratch}), over the limit of {limit} bytes (set {MAX_MEMORY_ENV} \
         to change it)"
    );
    Err(match b.nodes.iter().max_by_key(|n| largest(n)) {
        Some(n) => {
            let shapes: Vec<String> = n
                .writes
                .iter()
                .map(|&w| format!("{:?} {}", b.values[w].shape, b.values[w].dtype))
                .collect();
            CpuError::Op {
                name: n.name.clone(),
                op_type: n.op_type.clone(),
                message: format!(
                    "needs {} bytes (result {}); {message}",
                    largest(n),
                    shapes.join(", ")
                ),
            }
        }
        None => CpuError::Program(message),
    })
}

/// [`compile`] for a loaded program directory (`model.mil` + its blob files).
pub fn compile_dir(
    dir: &aneforge_mil::ProgramDir,
    function: &str,
    options: &CompileOptions,
) -> Result<Arc<Plan>> {
    let blobs: BlobStore = dir
        .blobs
        .iter()
        .map(|(k, v)| (k.clone(), crate::shared_weights::share_file(v)))
        .collect();
    compile(&dir.program, function, &blobs, options)
}

/// The literal a `const` op carries in its `val` attribute (or input, as some printers put it).
pub(crate) fn const_literal(op: &Operation) -> Option<&Literal> {
    op.attribute("val").or_else(|| match op.input("val") {
        Some(Argument::Literal(l)) => Some(l),
        _ => None,
    })
}
