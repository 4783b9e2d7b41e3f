//! Benchmark entry points for `aneforge bench gemm|conv|attention|overhead` and the divan benches.
//! Each builds a small MIL program, compiles it once and times `execute()` (best of `reps` after a
//! warm-up), so the figures include the engine's own per-execute work.

use aneforge_cpu::{compile, Activations, BlobStore, CompileOptions, HostSlice, Instance};
use aneforge_mil::{Argument, Block, DType, Function, Literal, Operation, Program, TensorType};
use std::time::Instant;

/// One measured figure.
#[derive(Clone, Debug)]
pub struct Figure {
    pub name: String,
    /// Best (lowest) time per execute in seconds.
    pub seconds: f64,
    /// Median time per execute in seconds.
    pub median_seconds: f64,
    /// Floating-point operations per execute (0 when not meaningful).
    pub flops: f64,
    pub threads: usize,
    /// Mean on-CPU time of the calling thread per execute (Linux schedstat), when available. With
    /// one thread this is the kernel's cost without time lost to other processes on a busy machine.
    pub cpu_seconds: Option<f64>,
}

/// Nanoseconds the calling thread has spent on a CPU (Linux `/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

impl Figure {
    pub fn gflops(&self) -> f64 {
        self.flops / self.seconds / 1e9
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // mean on-CPU time of the calling thread: with one thread, the kernel's cost net of time
        // lost to other processes on a busy machine
        let cpu = match (self.cpu_seconds, self.threads) {
            (Some(c), 1) if self.flops > 0.0 => format!(
                "  on-cpu {:>9.3} ms {:>7.1} GFLOP/s",
                c * 1e3,
                self.flops / c / 1e9
            ),
            (Some(c), 1) => format!("  on-cpu {:>9.3} us", c * 1e6),
            _ => String::new(),
        };
        if self.flops > 0.0 {
            write!(
                f,
                "{:<40} threads={} best {:>10.3} ms  median {:>10.3} ms  {:>8.1} GFLOP/s",
                self.name,
                self.threads,
                self.seconds * 1e3,
                self.median_seconds * 1e3,
                self.gflops()
            )?;
            f.write_str(&cpu)
        } else {
            write!(
                f,
                "{:<40} threads={} best {:>10.3} us  median {:>10.3} us",
                self.name,
                self.threads,
                self.seconds * 1e6,
                self.median_seconds * 1e6
            )?;
            f.write_str(&cpu)
        }
    }
}

/// Where benchmark programs' blob constants live.
const BLOB_PATH: &str = "@model_path/weights/weight.bin";

/// A blob store holding `w`'s file at [`BLOB_PATH`].
fn one_blob(w: aneforge_mil::BlobWriter) -> BlobStore {
    let mut blobs = BlobStore::new();
    blobs.insert(
        BLOB_PATH.into(),
        aneforge_mil::BlobFile::from_vec("weight.bin", w.finish()).expect("blob"),
    );
    blobs
}

struct P {
    inputs: Vec<aneforge_mil::NamedValue>,
    ops: Vec<Operation>,
    n: usize,
}

impl P {
    fn new() -> P {
        P {
            inputs: vec![],
            ops: vec![],
            n: 0,
        }
    }

    fn input(&mut self, name: &str, d: DType, shape: &[usize]) -> String {
        self.inputs.push(aneforge_mil::NamedValue::new(
            name,
            TensorType::new(d, shape),
        ));
        name.to_string()
    }

    fn op(&mut self, t: &str, args: Vec<(&str, Argument)>, d: DType, shape: &[usize]) -> String {
        self.n += 1;
        let name = format!("{t}_{}", self.n);
        let mut op = Operation::new(t);
        for (k, a) in args {
            op = op.with_input(k, a);
        }
        op = op
            .with_output(name.clone(), TensorType::new(d, shape))
            .with_attribute("name", Literal::string(name.clone()));
        self.ops.push(op);
        name
    }

    fn konst(&mut self, d: DType, shape: &[usize], v: Vec<f64>) -> String {
        self.n += 1;
        let name = format!("const_{}", self.n);
        let op = Operation::new("const")
            .with_output(name.clone(), TensorType::new(d, shape))
            .with_attribute("name", Literal::string(name.clone()))
            .with_attribute("val", Literal::float_tensor(d, shape, v));
        self.ops.push(op);
        name
    }

    /// A `const` read from the one blob file of `blobs` (the engine's weights path) at `offset`.
    fn blob_const(&mut self, d: DType, shape: &[usize], offset: u64) -> String {
        self.n += 1;
        let name = format!("const_{}", self.n);
        let ty = TensorType::new(d, shape);
        self.ops.push(
            Operation::new("const")
                .with_output(name.clone(), ty.clone())
                .with_attribute("name", Literal::string(name.clone()))
                .with_attribute(
                    "val",
                    Literal::Blob {
                        ty,
                        path: BLOB_PATH.into(),
                        offset,
                    },
                ),
        );
        name
    }

    fn program(self, outputs: Vec<String>) -> Program {
        Program {
            version: "1.3".into(),
            attributes: vec![],
            functions: vec![Function {
                name: "main".into(),
                opset: "ios18".into(),
                inputs: self.inputs,
                attributes: vec![],
                body: Block {
                    inputs: vec![],
                    operations: self.ops,
                    outputs,
                },
            }],
        }
    }
}

fn name(n: &str) -> Argument {
    Argument::Name(n.to_string())
}

fn ints(v: &[i64]) -> Argument {
    Argument::Literal(Literal::int_tensor(DType::Int32, &[v.len()], v.to_vec()))
}

fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// Compiles `p` with `threads` workers and fills every input with deterministic data.
pub fn prepare(p: &Program, threads: usize) -> Instance {
    prepare_with(p, &BlobStore::new(), threads)
}

/// [`prepare`] for programs with BLOBFILE constants.
pub fn prepare_with(p: &Program, blobs: &BlobStore, threads: usize) -> Instance {
    let opts = CompileOptions {
        threads: Some(threads),
        ..Default::default()
    };
    let plan = compile(p, "main", blobs, &opts).expect("benchmark program compiles");
    let mut inst = plan.instantiate();
    for (i, port) in plan.inputs().iter().enumerate() {
        let data = pseudo_random(port.len(), 7 + i as u64);
        inst.set_input(&port.name, HostSlice::F32(&data))
            .expect("input");
    }
    inst
}

fn time(name: String, inst: &mut Instance, flops: f64, threads: usize, reps: usize) -> Figure {
    inst.execute().expect("warm-up");
    // at least `reps` samples and at least 0.3 s, so the on-CPU total is long against the
    // scheduler tick that schedstat advances with
    let start = Instant::now();
    let c0 = thread_cpu_ns();
    let mut times = Vec::new();
    while times.len() < reps.max(1) || start.elapsed().as_secs_f64() < 0.3 {
        let t = Instant::now();
        inst.execute().expect("execute");
        times.push(t.elapsed().as_secs_f64());
    }
    let cpu_seconds = match (c0, thread_cpu_ns()) {
        (Some(a), Some(b)) => Some((b - a) as f64 * 1e-9 / times.len() as f64),
        _ => None,
    };
    times.sort_by(|a, b| a.total_cmp(b));
    Figure {
        name,
        seconds: times[0],
        median_seconds: times[times.len() / 2],
        flops,
        threads,
        cpu_seconds,
    }
}

/// fp32 `[n, n] × [n, n]` with both operands runtime inputs.
pub fn gemm_program(n: usize) -> Program {
    let mut p = P::new();
    let a = p.input("a", DType::Fp32, &[n, n]);
    let b = p.input("b", DType::Fp32, &[n, n]);
    let c = p.op(
        "matmul",
        vec![("x", name(&a)), ("y", name(&b))],
        DType::Fp32,
        &[n, n],
    );
    p.program(vec![c])
}

pub fn gemm(n: usize, threads: usize, reps: usize) -> Figure {
    let mut inst = prepare(&gemm_program(n), threads);
    time(
        format!("sgemm {n}x{n}x{n}"),
        &mut inst,
        2.0 * (n as f64).powi(3),
        threads,
        reps,
    )
}

/// Decode-style fp32 GEMV: `[1, k] × Wᵀ` with a constant `[n, k]` weight (linear).
pub fn gemv_program(k: usize, n: usize) -> Program {
    linear_program(1, k, n, false).0
}

pub fn gemv(k: usize, n: usize, threads: usize, reps: usize) -> Figure {
    let mut inst = prepare(&gemv_program(k, n), threads);
    time(
        format!("gemv linear 1x{k} -> {n}"),
        &mut inst,
        2.0 * (k * n) as f64,
        threads,
        reps,
    )
}

/// `[m, k] × Wᵀ` against a constant f32 `[n, k]` weight: stored in the blob file as converted
/// models store their linears (`blob`; read in place), or written inline in the program (packed
/// into panels when compiled).
pub fn linear_program(m: usize, k: usize, n: usize, blob: bool) -> (Program, BlobStore) {
    let weights = pseudo_random(n * k, 3);
    let mut p = P::new();
    let x = p.input("x", DType::Fp32, &[m, k]);
    let (w, blobs) = if blob {
        let mut bw = aneforge_mil::BlobWriter::new();
        let off = bw.add_f32(&weights);
        (p.blob_const(DType::Fp32, &[n, k], off), one_blob(bw))
    } else {
        let v = weights.iter().map(|&v| v as f64).collect();
        (p.konst(DType::Fp32, &[n, k], v), BlobStore::new())
    };
    let y = p.op(
        "linear",
        vec![("x", name(&x)), ("weight", name(&w))],
        DType::Fp32,
        &[m, n],
    );
    (p.program(vec![y]), blobs)
}

/// [`linear_program`] timed.
pub fn linear(m: usize, k: usize, n: usize, blob: bool, threads: usize, reps: usize) -> Figure {
    let (p, blobs) = linear_program(m, k, n, blob);
    let mut inst = prepare_with(&p, &blobs, threads);
    let how = if blob { "blob" } else { "packed" };
    time(
        format!("linear {how} {m}x{k} -> {n}"),
        &mut inst,
        2.0 * (m * k * n) as f64,
        threads,
        reps,
    )
}

/// Decode GEMV against a `[n, k]` int8 or int4 weight (constexpr_blockwise_shift_scale, blocks of
/// 32 along k) that the engine keeps compressed.
pub fn gemv_quant_program(k: usize, n: usize, bits: u8) -> (Program, BlobStore) {
    let dtype = if bits == 4 { DType::Int4 } else { DType::Int8 };
    let payload: Vec<u8> = pseudo_random(n * k * bits as usize / 8, 11)
        .iter()
        .map(|&v| ((v + 0.5) * 255.0) as u8)
        .collect();
    let mut w = aneforge_mil::BlobWriter::new();
    let off = w.add(dtype, n * k, &payload).expect("int payload");
    let blobs = one_blob(w);
    let mut p = P::new();
    let x = p.input("x", DType::Fp32, &[1, k]);
    let data = p.blob_const(dtype, &[n, k], off);
    let scale = p.konst(DType::Fp32, &[n, k / 32], vec![0.01; n * (k / 32)]);
    let wq = p.op(
        "constexpr_blockwise_shift_scale",
        vec![("data", name(&data)), ("scale", name(&scale))],
        DType::Fp32,
        &[n, k],
    );
    let y = p.op(
        "linear",
        vec![("x", name(&x)), ("weight", name(&wq))],
        DType::Fp32,
        &[1, n],
    );
    (p.program(vec![y]), blobs)
}

pub fn gemv_quant(k: usize, n: usize, bits: u8, threads: usize, reps: usize) -> Figure {
    let (p, blobs) = gemv_quant_program(k, n, bits);
    let mut inst = prepare_with(&p, &blobs, threads);
    time(
        format!("gemv int{bits} 1x{k} -> {n} (compressed)"),
        &mut inst,
        2.0 * (k * n) as f64,
        threads,
        reps,
    )
}

/// A decoder's MLP stack at batch 1: `layers` pairs of `[1, d] → [1, f] → [1, d]` linears over
/// 8-bit (or 4-bit) weights in blocks of 32 with f32 scales (GGUF Q8_0 / Q4_0 as the CPU target
/// lowers them), so the weights
/// stream from memory as in LLM decode (pick the sizes to exceed the last-level cache).
pub fn decode_stack_program(d: usize, f: usize, layers: usize, bits: u8) -> (Program, BlobStore) {
    let dtype = if bits == 4 { DType::Int4 } else { DType::Int8 };
    let mut w = aneforge_mil::BlobWriter::new();
    let mut mats = Vec::new();
    for l in 0..2 * layers {
        let (n, k) = if l % 2 == 0 { (f, d) } else { (d, f) };
        let payload: Vec<u8> = pseudo_random(n * k * bits as usize / 8, 11 + l as u64)
            .iter()
            .map(|&v| ((v + 0.5) * 255.0) as u8)
            .collect();
        let data = w.add(dtype, n * k, &payload).expect("int payload");
        let scales: Vec<f32> = pseudo_random(n * k / 32, 13 + l as u64)
            .iter()
            .map(|&v| 0.01 + 0.001 * v)
            .collect();
        let scale = w.add_f32(&scales);
        mats.push((n, k, data, scale));
    }
    let blobs = one_blob(w);
    let blob = |d: DType, shape: &[usize], offset: u64| {
        Argument::Literal(Literal::Blob {
            ty: TensorType::new(d, shape),
            path: BLOB_PATH.into(),
            offset,
        })
    };
    let mut p = P::new();
    let mut x = p.input("x", DType::Fp32, &[1, d]);
    for (n, k, data, scale) in mats {
        let wq = p.op(
            "constexpr_blockwise_shift_scale",
            vec![
                ("data", blob(dtype, &[n, k], data)),
                ("scale", blob(DType::Fp32, &[n, k / 32], scale)),
            ],
            DType::Fp32,
            &[n, k],
        );
        x = p.op(
            "linear",
            vec![("x", name(&x)), ("weight", name(&wq))],
            DType::Fp32,
            &[1, n],
        );
    }
    (p.program(vec![x]), blobs)
}

/// [`decode_stack_program`] with `activations` (f32, or quantized for integer dot products).
pub fn decode_stack(
    d: usize,
    f: usize,
    layers: usize,
    bits: u8,
    activations: Activations,
    threads: usize,
    reps: usize,
) -> Figure {
    let (p, blobs) = decode_stack_program(d, f, layers, bits);
    let opts = CompileOptions {
        threads: Some(threads),
        activations,
        ..Default::default()
    };
    let plan = compile(&p, "main", &blobs, &opts).expect("benchmark program compiles");
    let mut inst = plan.instantiate();
    inst.set_input("x", HostSlice::F32(&pseudo_random(d, 7)))
        .expect("input");
    time(
        format!(
            "decode stack int{bits}-weights {}-activations {layers}x({d}->{f}->{d})",
            activations.name()
        ),
        &mut inst,
        4.0 * (layers * d * f) as f64,
        threads,
        reps,
    )
}

/// fp32 `ks × ks` stride-1 same-padded conv with bias, NCHW.
pub fn conv_program(n: usize, c_in: usize, hw: usize, c_out: usize, ks: usize) -> Program {
    let mut p = P::new();
    let x = p.input("x", DType::Fp32, &[n, c_in, hw, hw]);
    let w = p.konst(
        DType::Fp32,
        &[c_out, c_in, ks, ks],
        pseudo_random(c_out * c_in * ks * ks, 5)
            .iter()
            .map(|&v| v as f64 * 0.1)
            .collect(),
    );
    let bias = p.konst(DType::Fp32, &[c_out], vec![0.01; c_out]);
    let y = p.op(
        "conv",
        vec![
            ("x", name(&x)),
            ("weight", name(&w)),
            ("bias", name(&bias)),
            ("strides", ints(&[1, 1])),
            ("pad_type", Argument::Literal(Literal::string("same"))),
            ("dilations", ints(&[1, 1])),
            ("groups", Argument::Literal(Literal::int(DType::Int32, 1))),
        ],
        DType::Fp32,
        &[n, c_out, hw, hw],
    );
    p.program(vec![y])
}

pub fn conv(
    n: usize,
    c_in: usize,
    hw: usize,
    c_out: usize,
    ks: usize,
    threads: usize,
    reps: usize,
) -> Figure {
    let mut inst = prepare(&conv_program(n, c_in, hw, c_out, ks), threads);
    let flops = 2.0 * (n * c_out * hw * hw * c_in * ks * ks) as f64;
    time(
        format!("conv{ks}x{ks} {n}x{c_in}x{hw}x{hw} -> {c_out}"),
        &mut inst,
        flops,
        threads,
        reps,
    )
}

/// fp32 scaled_dot_product_attention over [1, heads, s, d] q/k/v.
pub fn attention_program(s: usize, heads: usize, d: usize) -> Program {
    let mut p = P::new();
    let shape = [1, heads, s, d];
    let q = p.input("q", DType::Fp32, &shape);
    let k = p.input("k", DType::Fp32, &shape);
    let v = p.input("v", DType::Fp32, &shape);
    let o = p.op(
        "scaled_dot_product_attention",
        vec![("query", name(&q)), ("key", name(&k)), ("value", name(&v))],
        DType::Fp32,
        &shape,
    );
    p.program(vec![o])
}

pub fn attention(s: usize, heads: usize, d: usize, threads: usize, reps: usize) -> Figure {
    let mut inst = prepare(&attention_program(s, heads, d), threads);
    let flops = 4.0 * (heads * s * s * d) as f64;
    time(
        format!("sdpa s={s} heads={heads} d={d}"),
        &mut inst,
        flops,
        threads,
        reps,
    )
}

/// A tiny program (add, relu, mul on 16 elements; fused into one loop).
pub fn tiny_program() -> Program {
    let mut p = P::new();
    let x = p.input("x", DType::Fp32, &[16]);
    let y = p.input("y", DType::Fp32, &[16]);
    let s = p.op(
        "add",
        vec![("x", name(&x)), ("y", name(&y))],
        DType::Fp32,
        &[16],
    );
    let r = p.op("relu", vec![("x", name(&s))], DType::Fp32, &[16]);
    let m = p.op(
        "mul",
        vec![("x", name(&r)), ("y", name(&x))],
        DType::Fp32,
        &[16],
    );
    p.program(vec![m])
}

/// The engine's fixed cost per execute, measured on [`tiny_program`].
pub fn overhead(reps: usize) -> Figure {
    let mut inst = prepare(&tiny_program(), 1);
    // many executes per sample so timer resolution does not dominate
    const INNER: usize = 1000;
    inst.execute().expect("warm-up");
    let c0 = thread_cpu_ns();
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..INNER {
                inst.execute().expect("execute");
            }
            t.elapsed().as_secs_f64() / INNER as f64
        })
        .collect();
    let cpu_best = match (c0, thread_cpu_ns()) {
        (Some(a), Some(b)) => Some((b - a) as f64 * 1e-9 / (reps.max(1) * INNER) as f64),
        _ => None,
    };
    times.sort_by(|a, b| a.total_cmp(b));
    Figure {
        name: "overhead: tiny program execute".into(),
        seconds: times[0],
        median_seconds: times[times.len() / 2],
        flops: 0.0,
        threads: 1,
        cpu_seconds: cpu_best,
    }
}
