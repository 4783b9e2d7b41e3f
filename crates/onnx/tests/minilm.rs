//! The real paraphrase-MiniLM-L3-v2 ONNX export (`scripts/fetch-models.sh minilm-l3-onnx`)
//! against onnxruntime's outputs on the same token ids (`tools/fixtures/onnx/minilm_l3.py`):
//! fp32 on the CPU target within a relative error of 1e-4 (the largest absolute error over the
//! largest magnitude of each output), and the ANE-target (fp16) program, run on the CPU engine,
//! within cosine 0.999 of the fp32 program on every row.

use aneforge::engine::{HostSlice, HostTensor};
use aneforge::{compile_named, AneArch, CompileOptions, Target};
use aneforge_onnx::{import_file, ImportOptions, Imported};
use std::path::{Path, PathBuf};

const MODEL: &str = "sentence-transformers/paraphrase-MiniLM-L3-v2";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/onnx/out")
}

struct Case {
    ids: Vec<i32>,
    mask: Vec<i32>,
    shape: Vec<usize>,
    meta: serde_json::Value,
}

fn case() -> Case {
    let text = std::fs::read_to_string(fixtures().join("minilm_l3.json")).expect("fixture json");
    let meta: serde_json::Value = serde_json::from_str(&text).expect("fixture json parses");
    let rows = |key: &str| -> Vec<Vec<i32>> {
        meta[key]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                r.as_array()
                    .expect("row")
                    .iter()
                    .map(|v| v.as_i64().expect("id") as i32)
                    .collect()
            })
            .collect()
    };
    let (ids, mask) = (rows("input_ids"), rows("attention_mask"));
    let shape = vec![ids.len(), ids[0].len()];
    Case {
        ids: ids.concat(),
        mask: mask.concat(),
        shape,
        meta,
    }
}

fn import(model_path: &Path, shape: &[usize], host_gathers: bool) -> Imported {
    let options = ImportOptions {
        input_shapes: vec![("input_ids".into(), shape.to_vec())],
        host_gathers,
        ..ImportOptions::default()
    };
    import_file(model_path, &options).expect("import")
}

/// Every output of the model, as f64, in the model's output order.
fn run(imported: &Imported, case: &Case, target: Target) -> Vec<Vec<f64>> {
    let mut program = compile_named(
        &imported.named_outputs(),
        &CompileOptions {
            target,
            ..CompileOptions::default()
        },
    )
    .expect("compile");
    let fed = |onnx_name: &str| match onnx_name {
        "input_ids" => &case.ids,
        "attention_mask" => &case.mask,
        other => panic!("unexpected input {other}"),
    };
    let ports = program.input_names().join(",");
    for i in &imported.inputs {
        if ports.split(',').any(|p| p == i.port) {
            program
                .set_input(&i.port, HostSlice::I32(fed(&i.onnx_name)))
                .expect("set input");
        }
    }
    for g in &imported.host_gathers {
        let rows = g.rows(fed(&g.indices_port)).expect("host gather");
        program
            .set_input(&g.port, HostSlice::F32(&rows))
            .expect("set gathered input");
    }
    program.execute().expect("execute");
    imported
        .outputs
        .iter()
        .map(
            |o| match program.read_output(&o.port).expect("read output") {
                HostTensor::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
                HostTensor::F16(v) => v.iter().map(|&x| f64::from(x.to_f32())).collect(),
                HostTensor::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
                other => panic!("unexpected output dtype {other:?}"),
            },
        )
        .collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn minilm_l3_matches_onnxruntime_fp32_and_ane_fp16() {
    let model = aneforge_models::require_model!(MODEL);
    let path = model.dir().join("onnx/model.onnx");
    let case = case();
    let imported = import(&path, &case.shape, false);
    let got = run(&imported, &case, Target::Cpu);
    let outputs = case.meta["outputs"].as_array().expect("outputs");
    assert_eq!(outputs.len(), imported.outputs.len());
    for (k, spec) in outputs.iter().enumerate() {
        let name = spec["name"].as_str().expect("name");
        assert_eq!(imported.outputs[k].onnx_name, name);
        let shape: Vec<usize> = spec["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|d| d.as_u64().expect("dim") as usize)
            .collect();
        assert_eq!(
            imported.outputs[k].tensor.shape(),
            shape.as_slice(),
            "{name}"
        );
        let want: Vec<f64> = match spec.get("file") {
            Some(file) => {
                let (s, v) =
                    aneforge_models::npy::read(fixtures().join(file.as_str().expect("file")))
                        .expect("fixture npy");
                assert_eq!(s, shape);
                v.iter().map(|&x| f64::from(x)).collect()
            }
            None => spec["values"]
                .as_array()
                .expect("values")
                .iter()
                .map(|v| v.as_f64().expect("value"))
                .collect(),
        };
        let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
        let err = got[k]
            .iter()
            .zip(&want)
            .fold(0f64, |m, (g, w)| m.max((g - w).abs()));
        let rel = err / scale.max(f64::MIN_POSITIVE);
        eprintln!("{name}: max |error| {err:.3e}, relative to max |value| {rel:.3e}");
        assert!(rel <= 1e-4, "{name}: relative error {rel:.3e} > 1e-4");
    }

    // the embedding lookups run on the host for the ANE (its gathers are walled); the integer
    // outputs (the fed ids and mask, passed through) are not part of the comparison
    let ane_import = import(&path, &case.shape, true);
    assert_eq!(
        ane_import.host_gathers.len(),
        1,
        "one word-embedding lookup"
    );
    let arch = AneArch::new("h16").expect("h16");
    let fp16 = run(&ane_import, &case, Target::Ane(arch));
    for (k, o) in imported.outputs.iter().enumerate() {
        if outputs[k]["dtype"] != "float32" {
            continue;
        }
        // per row of the last axis (each token's hidden state, each sentence's embedding)
        let width = *o.tensor.shape().last().expect("rank >= 1");
        let c = fp16[k]
            .chunks(width)
            .zip(got[k].chunks(width))
            .map(|(a, b)| cosine(a, b))
            .fold(1f64, f64::min);
        eprintln!(
            "{}: ANE fp16 vs fp32, lowest row cosine {c:.6}",
            o.onnx_name
        );
        assert!(c >= 0.999, "{}: cosine {c} < 0.999", o.onnx_name);
    }
}
