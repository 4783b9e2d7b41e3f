//! The ANE-engine suite: programs run through an [`AneEngine`] and checked against the CPU engine
//! and against naive f64 references. Run on the simulator (where results must equal the CPU
//! engine's bit for bit, since the simulator executes with it) and, on a Mac, on the real runtime
//! (where the ANE's own fp16 arithmetic is compared with a tolerance).

use super::write_program;
use aneforge::engine::{AneEngine, AneProgram, EngineError, Executable, HostSlice, PortError};
use aneforge_mil::ProgramDir;
use half::f16;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// How ANE-engine results must relate to the CPU engine's.
#[derive(Clone, Copy, Debug)]
pub enum Agreement {
    /// Bit for bit (the simulator executes with the CPU engine).
    Identical,
    /// Within `rel·|cpu| + abs` (real hardware has its own fp16 arithmetic).
    Close { rel: f32, abs: f32 },
}

impl Agreement {
    #[track_caller]
    pub fn check(self, what: &str, ane: &[f32], cpu: &[f32]) {
        assert_eq!(ane.len(), cpu.len(), "{what}: lengths");
        for (i, (&a, &c)) in ane.iter().zip(cpu).enumerate() {
            let ok = match self {
                Agreement::Identical => a.to_bits() == c.to_bits() || (a.is_nan() && c.is_nan()),
                Agreement::Close { rel, abs } => (a - c).abs() <= rel * c.abs() + abs,
            };
            assert!(ok, "{what}[{i}]: ANE engine {a}, CPU engine {c} ({self:?})");
        }
    }
}

/// `|got - want| <= tol·max(1, |want|)` against an f64 reference.
#[track_caller]
pub fn near(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * w.abs().max(1.0),
            "{what}[{i}]: got {g}, reference {w}"
        );
    }
}

/// The CPU engine's instance of a program directory's `main`.
pub fn cpu_instance(dir: &Path) -> aneforge_cpu::Instance {
    let loaded = ProgramDir::load(dir).expect("the program directory loads");
    let blobs: aneforge_cpu::BlobStore = loaded.blobs.into_iter().collect();
    let plan = aneforge_cpu::compile(
        &loaded.program,
        "main",
        &blobs,
        &aneforge_cpu::CompileOptions::default(),
    )
    .expect("the CPU engine plans the program");
    plan.instantiate()
}

/// One execute: the inputs to set (f32 host data, converted by each engine).
pub type Step = Vec<(&'static str, Vec<f32>)>;

/// Every output after every step, by name.
pub type Trace = Vec<BTreeMap<String, Vec<f32>>>;

pub fn run_ane(program: &mut AneProgram, shares: &[(&str, &str)], steps: &[Step]) -> Trace {
    for (output, input) in shares {
        program.share_buffer(output, input).unwrap();
    }
    let names: Vec<String> = program.outputs().iter().map(|p| p.name.clone()).collect();
    steps
        .iter()
        .map(|step| {
            for (name, data) in step {
                program.set_input(name, HostSlice::F32(data)).unwrap();
            }
            program.execute().unwrap();
            names
                .iter()
                .map(|n| (n.clone(), program.read_output_f32(n).unwrap()))
                .collect()
        })
        .collect()
}

pub fn run_cpu(dir: &Path, shares: &[(&str, &str)], steps: &[Step]) -> Trace {
    let mut instance = cpu_instance(dir);
    for (output, input) in shares {
        instance.share_buffer(output, input).unwrap();
    }
    let names: Vec<String> = instance
        .plan()
        .outputs()
        .iter()
        .map(|p| p.name.clone())
        .collect();
    steps
        .iter()
        .map(|step| {
            for (name, data) in step {
                instance
                    .set_input(name, aneforge_cpu::HostSlice::F32(data))
                    .unwrap();
            }
            instance.execute().unwrap();
            names
                .iter()
                .map(|n| (n.clone(), instance.read_output_f32(n).unwrap()))
                .collect()
        })
        .collect()
}

/// Runs `steps` on both engines and checks every output of every step.
pub fn compare(
    engine: &Arc<AneEngine>,
    dir: &Path,
    shares: &[(&str, &str)],
    steps: &[Step],
    agreement: Agreement,
) -> Trace {
    let mut program = engine.load_dir(dir).unwrap();
    let ane = run_ane(&mut program, shares, steps);
    let cpu = run_cpu(dir, shares, steps);
    for (s, (a, c)) in ane.iter().zip(&cpu).enumerate() {
        assert_eq!(a.keys().collect::<Vec<_>>(), c.keys().collect::<Vec<_>>());
        for (name, values) in a {
            agreement.check(
                &format!("{} step {s} `{name}`", dir.display()),
                values,
                &c[name],
            );
        }
    }
    ane
}

/// The hook for running any program (for instance every case of the op suite) a second time
/// through the ANE engine: saves `program` in the engine's program cache, runs `steps` on the ANE
/// engine and on the CPU engine, and checks every output with `agreement`.
pub fn run_program_dir(
    engine: &Arc<AneEngine>,
    program: &ProgramDir,
    shares: &[(&str, &str)],
    steps: &[Step],
    agreement: Agreement,
) -> Trace {
    let loaded = engine.load(program).unwrap();
    let dir = loaded.dir().to_path_buf();
    drop(loaded);
    compare(engine, &dir, shares, steps, agreement)
}

/// Deterministic test data in [-1, 1).
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

pub fn round16(x: f64) -> f64 {
    f16::from_f64(x).to_f64()
}

fn header() -> &'static str {
    "program(1.3)\n{\n"
}

/// fp16 programs over the ops the CPU engine runs, each compared with the CPU engine.
pub fn fp16_programs_match_the_cpu_engine(
    engine: &Arc<AneEngine>,
    scratch: &Path,
    agreement: Agreement,
) {
    let mut blob = aneforge_mil::BlobWriter::new();
    let to16 = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
    let w_at = blob.add_f16(&to16(data(32, 2)));
    let b_at = blob.add_f16(&to16(data(4, 3)));
    let weights = blob.finish();
    let blobfile = |ty: &str, at: u64| {
        format!(
            "{ty}(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64({at})))"
        )
    };
    let linear = format!(
        "{}    func main<ios18>(tensor<fp16, [2, 8]> x) {{\n\
         \x20           tensor<fp16, [4, 8]> w = const()[name = string(\"w\"), val = {}];\n\
         \x20           tensor<fp16, [4]> b = const()[name = string(\"b\"), val = {}];\n\
         \x20           tensor<fp16, [2, 4]> h = linear(x = x, weight = w, bias = b)[name = string(\"h\")];\n\
         \x20           tensor<fp16, [2, 4]> y = relu(x = h)[name = string(\"y\")];\n\
         \x20       }} -> (y);\n}}\n",
        header(),
        blobfile("tensor<fp16, [4, 8]>", w_at),
        blobfile("tensor<fp16, [4]>", b_at),
    );
    let dir = write_program(scratch, "linear_relu", &linear, Some(&weights));
    compare(engine, &dir, &[], &[vec![("x", data(16, 1))]], agreement);

    let programs = [
        (
            "matmul_transpose_concat",
            format!(
                "{}    func main<ios18>(tensor<fp16, [3, 5]> a, tensor<fp16, [3, 4]> b) {{\n\
                 \x20           tensor<fp16, [5, 4]> m = matmul(x = a, y = b, transpose_x = bool(true), transpose_y = bool(false))[name = string(\"m\")];\n\
                 \x20           tensor<int32, [2]> perm = const()[name = string(\"perm\"), val = tensor<int32, [2]>([1, 0])];\n\
                 \x20           tensor<fp16, [4, 5]> t = transpose(x = m, perm = perm)[name = string(\"t\")];\n\
                 \x20           tensor<fp16, [4, 15]> c = concat(values = (t, t, t), axis = int32(1), interleave = bool(false))[name = string(\"c\")];\n\
                 \x20       }} -> (c, m);\n}}\n",
                header()
            ),
            vec![("a", data(15, 4)), ("b", data(12, 5))],
        ),
        (
            "broadcast_chain",
            format!(
                "{}    func main<ios18>(tensor<fp16, [2, 3, 4]> x, tensor<fp16, [1, 1, 4]> s) {{\n\
                 \x20           tensor<fp16, [2, 3, 4]> a = mul(x = x, y = s)[name = string(\"a\")];\n\
                 \x20           tensor<fp16, [2, 3, 4]> b = sub(x = a, y = x)[name = string(\"b\")];\n\
                 \x20           tensor<fp16, [2, 3, 4]> y = tanh(x = b)[name = string(\"y\")];\n\
                 \x20       }} -> (y, a);\n}}\n",
                header()
            ),
            vec![("x", data(24, 6)), ("s", data(4, 7))],
        ),
    ];
    for (name, text, inputs) in programs {
        let dir = write_program(scratch, name, &text, None);
        compare(engine, &dir, &[], &[inputs], agreement);
    }
}

/// `acc_out = acc + x` with `acc_out` shared into `acc`: the sum stays resident.
pub fn accumulator(engine: &Arc<AneEngine>, scratch: &Path, agreement: Agreement) {
    let text = format!(
        "{}    func main<ios18>(tensor<fp16, [2, 3]> x, tensor<fp16, [2, 3]> acc) {{\n\
         \x20           tensor<fp16, [2, 3]> acc_out = add(x = acc, y = x)[name = string(\"acc_out\")];\n\
         \x20       }} -> (acc_out);\n}}\n",
        header()
    );
    let dir = write_program(scratch, "accumulator", &text, None);
    let initial = data(6, 11);
    let xs: Vec<Vec<f32>> = (0..5).map(|k| data(6, 20 + k)).collect();
    let mut steps: Vec<Step> = vec![vec![("acc", initial.clone()), ("x", xs[0].clone())]];
    steps.extend(xs[1..].iter().map(|x| vec![("x", x.clone())]));
    let trace = compare(engine, &dir, &[("acc_out", "acc")], &steps, agreement);
    // f64 reference: fp16 storage rounds after every add
    let mut acc: Vec<f64> = initial.iter().map(|&v| round16(v as f64)).collect();
    for (step, x) in trace.iter().zip(&xs) {
        for (a, &xv) in acc.iter_mut().zip(x) {
            *a = round16(*a + round16(xv as f64));
        }
        near("accumulator", &step["acc_out"], &acc, 1e-3);
    }
}

/// A KV cache of 6 positions written one position per execute with the ANE-friendly one-hot form
/// `K·(1 − onehot) + k·onehot`, the cache resident across executes.
pub fn kv_cache_onehot(engine: &Arc<AneEngine>, scratch: &Path, agreement: Agreement) {
    let text = format!(
        "{}    func main<ios18>(tensor<fp16, [1, 6, 4]> cache, tensor<fp16, [1, 1, 4]> k, tensor<fp16, [1, 6, 1]> onehot) {{\n\
         \x20           fp16 one = const()[name = string(\"one\"), val = fp16(0x1p+0)];\n\
         \x20           tensor<fp16, [1, 6, 1]> keep = sub(x = one, y = onehot)[name = string(\"keep\")];\n\
         \x20           tensor<fp16, [1, 6, 4]> kept = mul(x = cache, y = keep)[name = string(\"kept\")];\n\
         \x20           tensor<fp16, [1, 6, 4]> written = mul(x = k, y = onehot)[name = string(\"written\")];\n\
         \x20           tensor<fp16, [1, 6, 4]> cache_out = add(x = kept, y = written)[name = string(\"cache_out\")];\n\
         \x20       }} -> (cache_out);\n}}\n",
        header()
    );
    let dir = write_program(scratch, "kv_onehot", &text, None);
    let keys: Vec<Vec<f32>> = (0..4).map(|t| data(4, 40 + t)).collect();
    let steps: Vec<Step> = keys
        .iter()
        .enumerate()
        .map(|(t, k)| {
            let onehot: Vec<f32> = (0..6).map(|p| if p == t { 1.0 } else { 0.0 }).collect();
            vec![("k", k.clone()), ("onehot", onehot)]
        })
        .collect();
    let trace = compare(engine, &dir, &[("cache_out", "cache")], &steps, agreement);
    let mut cache = vec![0.0f64; 24];
    for (t, (step, k)) in trace.iter().zip(&keys).enumerate() {
        for (d, &kv) in k.iter().enumerate() {
            cache[t * 4 + d] = round16(kv as f64);
        }
        near("kv cache (one-hot)", &step["cache_out"], &cache, 0.0);
    }
}

/// A KV cache row written with `slice_update` (at position 3), the cache resident: rows other
/// than the written one keep their values across executes.
pub fn kv_cache_slice_update(engine: &Arc<AneEngine>, scratch: &Path, agreement: Agreement) {
    let text = format!(
        "{}    func main<ios18>(tensor<fp16, [1, 6, 4]> cache, tensor<fp16, [1, 1, 4]> k) {{\n\
         \x20           tensor<int32, [3]> begin = const()[name = string(\"begin\"), val = tensor<int32, [3]>([0, 3, 0])];\n\
         \x20           tensor<int32, [3]> end = const()[name = string(\"end\"), val = tensor<int32, [3]>([1, 4, 4])];\n\
         \x20           tensor<fp16, [1, 6, 4]> cache_out = slice_update(x = cache, update = k, begin = begin, end = end)[name = string(\"cache_out\")];\n\
         \x20       }} -> (cache_out);\n}}\n",
        header()
    );
    let dir = write_program(scratch, "kv_slice_update", &text, None);
    let initial = data(24, 50);
    let keys: Vec<Vec<f32>> = (0..3).map(|t| data(4, 60 + t)).collect();
    let mut steps: Vec<Step> = vec![vec![("cache", initial.clone()), ("k", keys[0].clone())]];
    steps.extend(keys[1..].iter().map(|k| vec![("k", k.clone())]));
    let trace = compare(engine, &dir, &[("cache_out", "cache")], &steps, agreement);
    let mut cache: Vec<f64> = initial.iter().map(|&v| round16(v as f64)).collect();
    for (step, k) in trace.iter().zip(&keys) {
        for (d, &kv) in k.iter().enumerate() {
            cache[3 * 4 + d] = round16(kv as f64);
        }
        near("kv cache (slice_update)", &step["cache_out"], &cache, 0.0);
    }
}

/// One gradient-descent step per execute on a resident weight: `w ← w − lr·xᵀ(xw − y)`.
pub fn training_step(engine: &Arc<AneEngine>, scratch: &Path, agreement: Agreement) {
    let text = format!(
        "{}    func main<ios18>(tensor<fp16, [4, 3]> w, tensor<fp16, [2, 4]> x, tensor<fp16, [2, 3]> y) {{\n\
         \x20           tensor<fp16, [2, 3]> pred = matmul(x = x, y = w, transpose_x = bool(false), transpose_y = bool(false))[name = string(\"pred\")];\n\
         \x20           tensor<fp16, [2, 3]> err = sub(x = pred, y = y)[name = string(\"err\")];\n\
         \x20           tensor<fp16, [4, 3]> grad = matmul(x = x, y = err, transpose_x = bool(true), transpose_y = bool(false))[name = string(\"grad\")];\n\
         \x20           fp16 lr = const()[name = string(\"lr\"), val = fp16(0x1p-3)];\n\
         \x20           tensor<fp16, [4, 3]> step = mul(x = grad, y = lr)[name = string(\"step\")];\n\
         \x20           tensor<fp16, [4, 3]> w_out = sub(x = w, y = step)[name = string(\"w_out\")];\n\
         \x20       }} -> (w_out, err);\n}}\n",
        header()
    );
    let dir = write_program(scratch, "training_step", &text, None);
    let w0 = data(12, 70);
    let batches: Vec<(Vec<f32>, Vec<f32>)> =
        (0..6).map(|s| (data(8, 80 + s), data(6, 90 + s))).collect();
    let mut steps: Vec<Step> = Vec::new();
    for (s, (x, y)) in batches.iter().enumerate() {
        let mut step = vec![("x", x.clone()), ("y", y.clone())];
        if s == 0 {
            step.push(("w", w0.clone()));
        }
        steps.push(step);
    }
    let trace = compare(engine, &dir, &[("w_out", "w")], &steps, agreement);
    // f64 reference of the same update (no fp16 rounding inside: a looser tolerance)
    let mut w: Vec<f64> = w0.iter().map(|&v| v as f64).collect();
    for (step, (x, y)) in trace.iter().zip(&batches) {
        let mut err = [0.0f64; 6];
        for i in 0..2 {
            for j in 0..3 {
                let p: f64 = (0..4).map(|k| x[i * 4 + k] as f64 * w[k * 3 + j]).sum();
                err[i * 3 + j] = p - y[i * 3 + j] as f64;
            }
        }
        for k in 0..4 {
            for j in 0..3 {
                let g: f64 = (0..2).map(|i| x[i * 4 + k] as f64 * err[i * 3 + j]).sum();
                w[k * 3 + j] -= 0.125 * g;
            }
        }
        near("training step w", &step["w_out"], &w, 2e-2);
    }
}

/// Misuse through the engine: an unknown port, sharing after the first execute.
pub fn misuse_is_reported(engine: &Arc<AneEngine>, scratch: &Path) {
    let text = format!(
        "{}    func main<ios18>(tensor<fp16, [4]> x, tensor<fp16, [4]> s) {{\n\
         \x20           tensor<fp16, [4]> s_out = add(x = s, y = x)[name = string(\"s_out\")];\n\
         \x20       }} -> (s_out);\n}}\n",
        header()
    );
    let dir = write_program(scratch, "misuse", &text, None);
    let mut program = engine.load_dir(&dir).unwrap();
    let err = program
        .set_input("nope", HostSlice::F32(&[0.0; 4]))
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Port(PortError::UnknownPort { .. })),
        "{err:?}"
    );
    program.set_input("x", HostSlice::F32(&[1.0; 4])).unwrap();
    program.execute().unwrap();
    let err = program.share_buffer("s_out", "s").unwrap_err();
    assert_eq!(
        err.to_string(),
        "share_buffer(s_out, s): must be called before the first execute"
    );
}
