//! Models exported with torch.onnx.export against onnxruntime's outputs on the same inputs:
//! small-config Hugging Face ViT and GPT-2 (random weights at trained-model magnitudes;
//! `tools/fixtures/onnx/exported_models.py`) and torchvision's ResNet-18, whose 45 MB of weights
//! this test regenerates into a scratch directory from the generator `resnet18.py` documents
//! (`tools/fixtures/onnx/resnet18.py`): fp32 on the CPU target within a relative
//! error of 1e-4 (the largest absolute error over the largest magnitude of each output), and the
//! ANE-target (fp16) program, run on the CPU engine, within cosine 0.999 of onnxruntime on every
//! row of the last axis.

use aneforge::engine::{HostSlice, HostTensor};
use aneforge::{compile_named, AneArch, CompileOptions, Target};
use aneforge_models::npy;
use aneforge_onnx::proto::ModelProto;
use aneforge_onnx::{import_file, ImportOptions, Imported};
use prost::Message;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/onnx/out")
}

struct Case {
    model: PathBuf,
    /// the scratch directory holding the model with its regenerated weights
    _scratch: Option<tempfile::TempDir>,
    inputs: Vec<(String, Vec<usize>, HostTensor)>,
    /// onnxruntime's outputs: name, shape, values
    outputs: Vec<(String, Vec<usize>, Vec<f32>)>,
}

fn case(name: &str) -> Case {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("exported_models.json")).expect("fixture json"),
    )
    .expect("fixture json parses");
    let case = meta
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["name"] == name)
        .expect("case");
    let names = |key: &str| -> Vec<String> {
        case[key]
            .as_array()
            .expect(key)
            .iter()
            .map(|n| n.as_str().expect("name").to_string())
            .collect()
    };
    let inputs = names("inputs")
        .into_iter()
        .enumerate()
        .map(|(k, n)| {
            let file = fixtures().join(format!("exported_{name}_input_{k}.npy"));
            let (shape, data) = npy::read_tensor(&file).expect("input npy");
            (n, shape, data)
        })
        .collect();
    let outputs = names("outputs")
        .into_iter()
        .enumerate()
        .map(|(k, n)| {
            let file = fixtures().join(format!("exported_{name}_output_{k}.npy"));
            let (shape, data) = npy::read(&file).expect("output npy");
            (n, shape, data)
        })
        .collect();
    let model = fixtures().join(case["file"].as_str().expect("file"));
    let (model, scratch) = match case["generated_weights"].as_str() {
        Some(weights) => {
            let dir = tempfile::tempdir().expect("scratch directory");
            (
                with_generated_weights(&model, weights, dir.path()),
                Some(dir),
            )
        }
        None => (model, None),
    };
    Case {
        model,
        _scratch: scratch,
        inputs,
        outputs,
    }
}

/// splitmix64's next draw.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The values of float initializer `k` of `shape`, as `resnet18.py` generates them: draws from
/// the state `k << 32`, uniform in `[-bound, bound)`, bound `sqrt(6 / fan_in)` for rank 2 and
/// more, 0.1 otherwise.
fn generated(k: usize, shape: &[usize]) -> Vec<f32> {
    let count: usize = shape.iter().product();
    let fan_in: usize = shape.iter().skip(1).product();
    let bound = if shape.len() >= 2 {
        (6.0 / fan_in as f64).sqrt()
    } else {
        0.1
    };
    let mut state = (k as u64) << 32;
    (0..count)
        .map(|_| {
            let unit = (splitmix64(&mut state) >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            (unit * bound) as f32
        })
        .collect()
}

/// Copies `model` into `dir` and writes its external weights file `weights` there, every float
/// initializer stored in it filled by [`generated`] at its recorded offset.
fn with_generated_weights(model: &Path, weights: &str, dir: &Path) -> PathBuf {
    let bytes = std::fs::read(model).expect("model");
    let proto = ModelProto::decode(bytes.as_slice()).expect("model decodes");
    let graph = proto.graph.as_ref().expect("graph");
    let mut file = Vec::new();
    for (k, t) in graph.initializer.iter().enumerate() {
        let field = |key: &str| {
            t.external_data
                .iter()
                .find(|e| e.key() == key)
                .map(|e| e.value().to_string())
        };
        if field("location").as_deref() != Some(weights) {
            continue;
        }
        assert_eq!(t.data_type(), 1, "{}: a float initializer", t.name());
        let offset: usize = field("offset").map_or(0, |v| v.parse().expect("offset"));
        let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        let values = generated(k, &shape);
        let end = offset + 4 * values.len();
        if let Some(length) = field("length") {
            assert_eq!(length.parse::<usize>().expect("length"), end - offset);
        }
        if file.len() < end {
            file.resize(end, 0);
        }
        for (i, v) in values.iter().enumerate() {
            file[offset + 4 * i..offset + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    assert!(!file.is_empty(), "no initializer is stored in {weights}");
    std::fs::write(dir.join(weights), file).expect("write weights");
    let copy = dir.join(model.file_name().expect("model file name"));
    std::fs::write(&copy, bytes).expect("copy model");
    copy
}

fn import(case: &Case, host_gathers: bool) -> Imported {
    let options = ImportOptions {
        input_shapes: case
            .inputs
            .iter()
            .map(|(n, s, _)| (n.clone(), s.clone()))
            .collect(),
        host_gathers,
        ..ImportOptions::default()
    };
    import_file(&case.model, &options).expect("import")
}

/// Every output, as f32, in the model's output order.
fn run(imported: &Imported, case: &Case, target: Target) -> Vec<Vec<f32>> {
    let mut program = compile_named(
        &imported.named_outputs(),
        &CompileOptions {
            target,
            ..CompileOptions::default()
        },
    )
    .expect("compile");
    let fed = |onnx_name: &str| -> &HostTensor {
        &case
            .inputs
            .iter()
            .find(|(n, _, _)| n == onnx_name)
            .expect("fed input")
            .2
    };
    let ports: Vec<String> = program
        .input_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    for i in &imported.inputs {
        if !ports.contains(&i.port) {
            continue;
        }
        let slice = match fed(&i.onnx_name) {
            HostTensor::F32(v) => HostSlice::F32(v),
            HostTensor::I32(v) => HostSlice::I32(v),
            other => panic!("unexpected input {other:?}"),
        };
        program.set_input(&i.port, slice).expect("set input");
    }
    for g in &imported.host_gathers {
        let HostTensor::I32(ids) = fed(&g.indices_port) else {
            panic!("gather indices {} are not integers", g.indices_port);
        };
        let rows = g.rows(ids).expect("host gather");
        program
            .set_input(&g.port, HostSlice::F32(&rows))
            .expect("set gathered input");
    }
    program.execute().expect("execute");
    imported
        .outputs
        .iter()
        .map(|o| program.read_output_f32(&o.port).expect("read output"))
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn check(name: &str) {
    let case = case(name);
    let imported = import(&case, false);
    assert_eq!(
        imported.outputs.len(),
        case.outputs.len(),
        "{name}: outputs"
    );
    let fp32 = run(&imported, &case, Target::Cpu);
    for ((o, got), (want_name, shape, want)) in
        imported.outputs.iter().zip(&fp32).zip(&case.outputs)
    {
        assert_eq!(&o.onnx_name, want_name);
        assert_eq!(o.tensor.shape(), shape.as_slice(), "{name} {want_name}");
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        let rel = err / scale;
        eprintln!("{name} {want_name} fp32: max |error| {err:.3e}, relative {rel:.3e}");
        assert!(rel <= 1e-4, "{name} {want_name}: relative error {rel:.3e}");
    }

    let ane_import = import(&case, true);
    let arch = AneArch::new("h16").expect("h16");
    let fp16 = run(&ane_import, &case, Target::Ane(arch));
    for (got, (want_name, shape, want)) in fp16.iter().zip(&case.outputs) {
        let width = *shape.last().expect("rank >= 1");
        let c = got
            .chunks(width)
            .zip(want.chunks(width))
            .map(|(a, b)| cosine(a, b))
            .fold(1f64, f64::min);
        eprintln!("{name} {want_name}: ANE fp16 vs onnxruntime, lowest row cosine {c:.6}");
        assert!(c >= 0.999, "{name} {want_name}: cosine {c} < 0.999");
    }
}

#[test]
fn vit_matches_onnxruntime_fp32_and_ane_fp16() {
    check("vit");
}

#[test]
fn gpt2_matches_onnxruntime_fp32_and_ane_fp16() {
    check("gpt2");
}

#[test]
fn resnet18_matches_onnxruntime_fp32_and_ane_fp16() {
    check("resnet18");
}
