//! Multi-function programs: several functions lowered into one program share its weights blob, and
//! each loads and runs on its own.

use aneforge::engine::HostSlice;
use aneforge::graph::{constant, input, DType, DeferredF32, HostArray};
use aneforge::{compile_functions, ProgramOptions};
use aneforge::{Engine, FunctionSpec, Model, ParameterMode, Target};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const N: usize = 24;
const K: usize = 16;

fn weight() -> HostArray {
    let w: Vec<f32> = (0..N * K)
        .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
        .collect();
    HostArray::from_f32(&[N, K], w).unwrap()
}

/// `x @ w^T` in f64, row-major `x[m, K]`.
fn reference(x: &[f32], w: &HostArray, m: usize) -> Vec<f64> {
    let w = w.as_f32().unwrap();
    let mut out = vec![0.0; m * N];
    for i in 0..m {
        for j in 0..N {
            out[i * N + j] = (0..K)
                .map(|k| f64::from(x[i * K + k]) * f64::from(w[j * K + k]))
                .sum();
        }
    }
    out
}

#[test]
fn functions_share_one_copy_of_their_weights() {
    let w = weight();
    // two graphs over the same constant data (separate nodes, equal content)
    let x1 = input("x", &[1, K], DType::F32).unwrap();
    let y1 = x1.linear(&constant(w.clone()), None).unwrap();
    let x4 = input("x", &[4, K], DType::F32).unwrap();
    let y4 = x4
        .linear(&constant(w.clone()), None)
        .unwrap()
        .relu()
        .unwrap();
    let single = compile_functions(
        &[FunctionSpec {
            name: "decode",
            outputs: &[("y", &y1)],
        }],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap();
    let both = compile_functions(
        &[
            FunctionSpec {
                name: "decode",
                outputs: &[("y", &y1)],
            },
            FunctionSpec {
                name: "prefill",
                outputs: &[("y", &y4)],
            },
        ],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap();
    assert_eq!(both.weights().len(), single.weights().len());
    assert!(both.weights().len() >= N * K * 4);
    assert_eq!(both.functions().len(), 2);
    assert_eq!(both.function("prefill").unwrap().inputs[0].shape, [4, K]);
    assert!(both.mil_text().contains("func decode<ios18>"));
    assert!(both.mil_text().contains("func prefill<ios18>"));
    // a function is loaded from a directory holding it alone, over the same blob
    let dir = both.function_dir("prefill").unwrap();
    let names: Vec<&str> = dir
        .program
        .functions
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(names, ["prefill"]);
    assert_eq!(
        dir.program.function("prefill"),
        both.program().function("prefill")
    );
    assert_eq!(dir.blobs.len(), 1);

    let both = Arc::new(both);
    let mut decode = Model::load_function(both.clone(), "decode", Engine::Cpu).unwrap();
    let mut prefill = Model::load_function(both.clone(), "prefill", Engine::Cpu).unwrap();
    assert_eq!(prefill.function_name(), "prefill");
    let x: Vec<f32> = (0..4 * K).map(|i| (i as f32 * 0.37).sin()).collect();
    let got = prefill.run_f32(&[("x", HostSlice::F32(&x))]).unwrap();
    let want = reference(&x, &w, 4);
    for (g, r) in got[0].iter().zip(&want) {
        assert!((f64::from(*g) - r.max(0.0)).abs() < 1e-5, "{g} vs {r}");
    }
    let got = decode.run_f32(&[("x", HostSlice::F32(&x[..K]))]).unwrap();
    for (g, r) in got[0].iter().zip(&want[..N]) {
        assert!((f64::from(*g) - r).abs() < 1e-5, "{g} vs {r}");
    }
}

#[test]
fn function_names_are_checked() {
    let x = input("x", &[1, K], DType::F32).unwrap();
    let y = x.relu().unwrap();
    let outputs: &[(&str, &aneforge::Tensor)] = &[("y", &y)];
    let bad = |name: &'static str| {
        compile_functions(
            &[FunctionSpec { name, outputs }],
            &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
        )
        .unwrap_err()
        .to_string()
    };
    assert!(bad("no spaces").contains("function name"));
    let twice = compile_functions(
        &[
            FunctionSpec { name: "f", outputs },
            FunctionSpec { name: "f", outputs },
        ],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap_err()
    .to_string();
    assert!(twice.contains("\"f\""), "{twice}");
    let one = Arc::new(
        compile_functions(
            &[FunctionSpec { name: "f", outputs }],
            &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
        )
        .unwrap(),
    );
    let e = Model::load_function(one, "g", Engine::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no function \"g\"") && e.contains("\"f\""),
        "{e}"
    );
}

/// Values served on demand, counting the reads; `broken` fails every read as a damaged file would.
#[derive(Debug)]
struct Served {
    values: Vec<f32>,
    reads: AtomicUsize,
    broken: bool,
}

impl DeferredF32 for Served {
    fn len(&self) -> usize {
        self.values.len()
    }

    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if self.broken {
            return Err("weights.safetensors: tensor 'w' is truncated".into());
        }
        out.copy_from_slice(&self.values[start..start + out.len()]);
        Ok(())
    }
}

/// Decode and prefill functions over `w` (two constant nodes of the same data).
fn two_functions(w: &HostArray) -> Result<aneforge::Artifact, aneforge::CompileError> {
    let x1 = input("x", &[1, K], DType::F32).unwrap();
    let y1 = x1.linear(&constant(w.clone()), None).unwrap();
    let x4 = input("x", &[4, K], DType::F32).unwrap();
    let y4 = x4.linear(&constant(w.clone()), None).unwrap();
    compile_functions(
        &[
            FunctionSpec {
                name: "decode",
                outputs: &[("y", &y1)],
            },
            FunctionSpec {
                name: "prefill",
                outputs: &[("y", &y4)],
            },
        ],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Constant),
    )
}

#[test]
fn deferred_weights_are_read_once_and_lower_like_held_ones() {
    let held = weight();
    let served = Arc::new(Served {
        values: held.as_f32().unwrap().to_vec(),
        reads: AtomicUsize::new(0),
        broken: false,
    });
    let deferred = HostArray::from_deferred(&[N, K], served.clone()).unwrap();
    let a = two_functions(&held).unwrap();
    let b = two_functions(&deferred).unwrap();
    assert_eq!(
        served.reads.load(Ordering::Relaxed),
        1,
        "read once per program"
    );
    assert_eq!(a.weights(), b.weights());
    assert_eq!(a.mil_text(), b.mil_text());
    let x: Vec<f32> = (0..4 * K).map(|i| (i as f32 * 0.37).cos()).collect();
    let run = |art: aneforge::Artifact| {
        let mut m = Model::load_function(Arc::new(art), "prefill", Engine::Cpu).unwrap();
        m.run_f32(&[("x", HostSlice::F32(&x))]).unwrap()
    };
    assert_eq!(run(a), run(b));

    let broken = Arc::new(Served {
        values: Vec::new(),
        reads: AtomicUsize::new(0),
        broken: false,
    });
    assert!(
        HostArray::from_deferred(&[N, K], broken).is_err(),
        "length is checked"
    );
    let broken = Arc::new(Served {
        values: vec![0.0; N * K],
        reads: AtomicUsize::new(0),
        broken: true,
    });
    let e = two_functions(&HostArray::from_deferred(&[N, K], broken).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("tensor 'w' is truncated"), "{e}");
}
