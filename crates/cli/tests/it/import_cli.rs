//! `aneforge import MODEL.onnx -o DIR`, then `aneforge run DIR`: an ONNX backend node case
//! (ONNX's own inputs and expected outputs) for the CPU target and h16, the real
//! paraphrase-MiniLM-L3-v2 export with `--input-shape` binding its symbolic dimensions (against
//! the onnxruntime fixture of `tools/fixtures/onnx/minilm_l3.py`), and an unknown op.

use crate::common;

use aneforge::engine::HostTensor;
use aneforge_models::npy;
use aneforge_onnx::proto::{
    tensor_proto::DataType, type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    TensorProto, TypeProto, ValueInfoProto,
};
use aneforge_onnx::{const_from_proto, Data};
use prost::Message;
use std::path::Path;

fn ok(args: &[&str]) -> String {
    let out = common::run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read_pb(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let t = TensorProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
    let c = const_from_proto(&t).unwrap();
    match c.data {
        Data::F32(v) => (c.shape, v),
        other => panic!("{}: not float data: {other:?}", path.display()),
    }
}

fn max_rel(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
    err / scale
}

#[test]
fn a_backend_node_case_imports_and_runs_for_cpu_and_h16() {
    let tests = aneforge_models::require_model!("onnx/backend-node-tests");
    let case = tests
        .dir()
        .join("node/test_conv_with_strides_and_asymmetric_padding");
    let tmp = tempfile::tempdir().unwrap();
    let mut feeds = Vec::new();
    for (k, name) in ["x", "W"].iter().enumerate() {
        let (shape, data) = read_pb(&case.join(format!("test_data_set_0/input_{k}.pb")));
        let file = tmp.path().join(format!("{name}.npy"));
        npy::write(&file, &shape, &data).unwrap();
        feeds.push(format!("{name}={}", file.display()));
    }
    let (want_shape, want) = read_pb(&case.join("test_data_set_0/output_0.pb"));
    for (target, tolerance) in [("cpu", 1e-6), ("h16", 1e-2)] {
        let dir = tmp.path().join(target);
        let out_dir = tmp.path().join(format!("{target}_out"));
        let model = case.join("model.onnx");
        let listing = ok(&[
            "import",
            model.to_str().unwrap(),
            "-o",
            dir.to_str().unwrap(),
            "--target",
            target,
        ]);
        assert!(listing.contains("output y"), "{listing}");
        let mut args = vec![
            "run",
            dir.to_str().unwrap(),
            "-o",
            out_dir.to_str().unwrap(),
        ];
        for f in &feeds {
            args.extend(["-i", f.as_str()]);
        }
        ok(&args);
        // h16 programs return fp16
        let (shape, got) = match npy::read_tensor(out_dir.join("y.npy")).unwrap() {
            (s, HostTensor::F32(v)) => (s, v),
            (s, HostTensor::F16(v)) => (s, v.iter().map(|x| x.to_f32()).collect()),
            (_, other) => panic!("{target}: unexpected output {other:?}"),
        };
        assert_eq!(shape, want_shape);
        let rel = max_rel(&got, &want);
        assert!(rel <= tolerance, "{target}: relative error {rel}");
    }
}

#[test]
fn minilm_l3_imports_with_bound_symbolic_dims_and_matches_onnxruntime() {
    let model = aneforge_models::require_model!("sentence-transformers/paraphrase-MiniLM-L3-v2");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/onnx/out");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("minilm_l3.json")).unwrap())
            .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut feeds = Vec::new();
    for key in ["input_ids", "attention_mask"] {
        let rows = meta[key].as_array().unwrap();
        let flat: Vec<i32> = rows
            .iter()
            .flat_map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_i64().unwrap() as i32)
            })
            .collect();
        let shape = [rows.len(), flat.len() / rows.len()];
        let file = tmp.path().join(format!("{key}.npy"));
        npy::write_tensor(&file, &shape, &HostTensor::I32(flat)).unwrap();
        feeds.push(format!("{key}={}", file.display()));
    }
    let dir = tmp.path().join("prog");
    let onnx = model.dir().join("onnx/model.onnx");
    ok(&[
        "import",
        onnx.to_str().unwrap(),
        "-o",
        dir.to_str().unwrap(),
        "--target",
        "cpu",
        "--input-shape",
        "input_ids=2,11",
    ]);
    let out_dir = tmp.path().join("out");
    ok(&[
        "run",
        dir.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "-i",
        &feeds[0],
        "-i",
        &feeds[1],
    ]);
    // output "461" (the mean-pooled sentence embedding) is port _461
    let pooled = meta["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "461")
        .unwrap();
    let (want_shape, want) = npy::read(fixtures.join(pooled["file"].as_str().unwrap())).unwrap();
    let (shape, got) = npy::read(out_dir.join("_461.npy")).unwrap();
    assert_eq!(shape, want_shape);
    let rel = max_rel(&got, &want);
    assert!(rel <= 1e-4, "relative error {rel}");
}

#[test]
fn an_unknown_op_fails_with_op_node_and_opset() {
    let float_input = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: None,
            })),
            ..TypeProto::default()
        }),
        ..ValueInfoProto::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(18),
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                op_type: Some("Frobnicate".into()),
                name: Some("frob_1".into()),
                input: vec!["x".into()],
                output: vec!["y".into()],
                ..NodeProto::default()
            }],
            input: vec![float_input("x")],
            output: vec![float_input("y")],
            ..GraphProto::default()
        }),
        ..ModelProto::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let out = common::run(&[
        "import",
        path.to_str().unwrap(),
        "-o",
        tmp.path().join("prog").to_str().unwrap(),
        "--input-shape",
        "x=2,3",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Frobnicate") && err.contains("frob_1") && err.contains("opset 18"),
        "{err}"
    );
}

/// `--constant W=FILE.npy` folds a graph input into the program: the convolution's weights become
/// a constant, the program takes only `x`, and the output still matches ONNX's.
#[test]
fn constant_binds_a_graph_input_to_npy_values() {
    let tests = aneforge_models::require_model!("onnx/backend-node-tests");
    let case = tests
        .dir()
        .join("node/test_conv_with_strides_and_asymmetric_padding");
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (k, name) in ["x", "W"].iter().enumerate() {
        let (shape, data) = read_pb(&case.join(format!("test_data_set_0/input_{k}.pb")));
        let file = tmp.path().join(format!("{name}.npy"));
        npy::write(&file, &shape, &data).unwrap();
        files.push(file.to_str().unwrap().to_string());
    }
    let (_, want) = read_pb(&case.join("test_data_set_0/output_0.pb"));
    let model = case.join("model.onnx");
    let model = model.to_str().unwrap();
    let dir = tmp.path().join("prog");
    let d = dir.to_str().unwrap();
    let w = format!("W={}", files[1]);
    let listing = ok(&[
        "import",
        model,
        "-o",
        d,
        "--target",
        "cpu",
        "--constant",
        &w,
    ]);
    assert!(
        listing.contains("input x") && !listing.contains("input W"),
        "{listing}"
    );
    let out_dir = tmp.path().join("out");
    let x = format!("x={}", files[0]);
    ok(&["run", d, "-i", &x, "-o", out_dir.to_str().unwrap()]);
    let (_, got) = npy::read(out_dir.join("y.npy")).unwrap();
    assert!(max_rel(&got, &want) <= 1e-6);
    for (spec, needle) in [
        ("W".to_string(), "--constant W: expected NAME=FILE.npy"),
        (format!("V={}", files[1]), "input \"V\": is no graph input"),
        ("W=missing.npy".to_string(), "missing.npy"),
    ] {
        let out = common::run(&["import", model, "-o", d, "--constant", &spec]);
        assert_eq!(out.status.code(), Some(1), "{spec}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{spec}: {err}");
    }
}
