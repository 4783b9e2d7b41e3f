//! Real ONNX models against onnxruntime on the same inputs (`tools/fixtures/onnx/real_models.py`):
//! RapidOCR's PP-OCRv4 detector and recognizer and its direction classifier on rendered text,
//! the int8 all-MiniLM-L6-v2 export (DynamicQuantizeLinear, MatMulInteger), and Silero VAD v6
//! (LSTM, an `If` on the sample rate, which is bound as a constant) on one chunk, on the CPU
//! target: the largest absolute error within 1e-4 of each output's largest magnitude.

use aneforge::engine::{HostSlice, HostTensor};
use aneforge::{compile_named, CompileOptions};
use aneforge_models::npy;
use aneforge_onnx::proto::{tensor_proto::DataType, TensorProto};
use aneforge_onnx::{const_from_proto, import_file, ImportOptions};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/onnx/out")
}

fn check(name: &str) {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("real_models.json")).expect("fixture json"),
    )
    .expect("fixture json parses");
    let case = meta
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["name"] == name)
        .expect("case");
    let Some(model) = aneforge_models::testing::model_or_skip(case["repo"].as_str().expect("repo"))
    else {
        return;
    };
    let path = model.dir().join(case["file"].as_str().expect("file"));
    let inputs: Vec<(String, Vec<usize>, HostTensor)> = case["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let file = fixtures().join(format!("real_{name}_input_{k}.npy"));
            let (shape, data) = npy::read_tensor(&file).expect("input npy");
            (n.as_str().expect("name").to_string(), shape, data)
        })
        .collect();
    // inputs the program is specialised on become constants (integers, as int64 tensors)
    let fixed: Vec<&str> = case["constant_inputs"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let constant_inputs = inputs
        .iter()
        .filter(|(n, _, _)| fixed.contains(&n.as_str()))
        .map(|(n, shape, data)| {
            let HostTensor::I32(v) = data else {
                panic!("constant input {n} is not integer data");
            };
            let t = TensorProto {
                name: Some(n.clone()),
                dims: shape.iter().map(|&d| d as i64).collect(),
                data_type: Some(DataType::Int64 as i32),
                int64_data: v.iter().map(|&x| i64::from(x)).collect(),
                ..TensorProto::default()
            };
            (n.clone(), const_from_proto(&t).expect("constant input"))
        })
        .collect();
    let options = ImportOptions {
        input_shapes: inputs
            .iter()
            .filter(|(n, _, _)| !fixed.contains(&n.as_str()))
            .map(|(n, s, _)| (n.clone(), s.clone()))
            .collect(),
        constant_inputs,
        ..ImportOptions::default()
    };
    let imported = import_file(&path, &options).expect("import");
    let mut program =
        compile_named(&imported.named_outputs(), &CompileOptions::default()).expect("compile");
    for (onnx_name, _, data) in inputs
        .iter()
        .filter(|(n, _, _)| !fixed.contains(&n.as_str()))
    {
        let port = imported
            .inputs
            .iter()
            .find(|i| &i.onnx_name == onnx_name)
            .expect("input port");
        let slice = match data {
            HostTensor::F32(v) => HostSlice::F32(v),
            HostTensor::I32(v) => HostSlice::I32(v),
            other => panic!("unexpected input {other:?}"),
        };
        program.set_input(&port.port, slice).expect("set input");
    }
    program.execute().expect("execute");
    for (k, o) in imported.outputs.iter().enumerate() {
        let (shape, want) =
            npy::read(fixtures().join(format!("real_{name}_output_{k}.npy"))).expect("output npy");
        assert_eq!(o.tensor.shape(), shape.as_slice(), "{name} {}", o.onnx_name);
        let got = program.read_output_f32(&o.port).expect("read output");
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        let rel = err / scale;
        eprintln!(
            "{name} {}: max |error| {err:.3e}, relative {rel:.3e}",
            o.onnx_name
        );
        assert!(
            rel <= 1e-4,
            "{name} {}: relative error {rel:.3e}",
            o.onnx_name
        );
    }
}

#[test]
fn rapidocr_det_matches_onnxruntime() {
    check("det");
}

#[test]
fn rapidocr_rec_matches_onnxruntime() {
    check("rec");
}

#[test]
fn rapidocr_cls_matches_onnxruntime() {
    check("cls");
}

#[test]
fn minilm_int8_matches_onnxruntime() {
    check("minilm_int8");
}

#[test]
fn silero_vad_chunk_and_state_match_onnxruntime() {
    check("silero_vad");
}
