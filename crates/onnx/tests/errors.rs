//! Bad input gets an error naming the file, tensor, node, op or opset, never a panic: truncated
//! and malformed protobuf, missing external data, unknown ops, cycles, unbound symbolic shapes.

use aneforge_onnx::proto::{
    tensor_proto::{DataLocation, DataType},
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto,
};
use aneforge_onnx::{import_file, import_model, read_model, ImportOptions, OnnxError};
use prost::Message;
use std::path::Path;

mod common;
use common::value_info;

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..NodeProto::default()
    }
}

fn model(nodes: Vec<NodeProto>, initializers: Vec<TensorProto>, opset: i64) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: initializers,
            input: vec![value_info("x", &[Err("batch"), Ok(4)])],
            output: vec![value_info("y", &[Err("batch"), Ok(4)])],
            ..GraphProto::default()
        }),
        ..ModelProto::default()
    }
}

fn relu_model() -> ModelProto {
    model(vec![node("Relu", "act", &["x"], &["y"])], vec![], 17)
}

fn batch(n: usize) -> ImportOptions {
    ImportOptions {
        input_shapes: vec![("batch".into(), vec![n])],
        ..ImportOptions::default()
    }
}

fn write(dir: &Path, name: &str, m: &ModelProto) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, m.encode_to_vec()).expect("write model");
    path
}

#[test]
fn a_valid_model_imports_with_its_symbolic_batch_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "relu.onnx", &relu_model());
    let imported = import_file(&path, &batch(3)).expect("import");
    assert_eq!(imported.inputs[0].shape, vec![3, 4]);
    assert_eq!(imported.outputs[0].tensor.shape(), &[3, 4]);
}

#[test]
fn truncated_protobuf_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = relu_model().encode_to_vec();
    for cut in [1, bytes.len() / 2, bytes.len() - 1] {
        let path = dir.path().join("cut.onnx");
        std::fs::write(&path, &bytes[..cut]).expect("write");
        let err = read_model(&path).expect_err("truncated");
        assert!(matches!(err, OnnxError::Decode { .. }), "{err}");
        assert!(err.to_string().contains("cut.onnx"), "{err}");
    }
}

#[test]
fn malformed_and_empty_files_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, bytes) in [
        ("empty.onnx", Vec::new()),
        ("garbage.onnx", b"\xff\xff\xff\xff not protobuf".to_vec()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        let err = read_model(&path).expect_err("malformed");
        assert!(err.to_string().contains(name), "{err}");
    }
    let err = read_model(&dir.path().join("absent.onnx")).expect_err("absent");
    assert!(matches!(err, OnnxError::Io { .. }), "{err}");
}

fn external_weight(location: &str, offset: u64, length: u64) -> TensorProto {
    TensorProto {
        name: Some("w".into()),
        dims: vec![4],
        data_type: Some(DataType::Float as i32),
        data_location: Some(DataLocation::External as i32),
        external_data: [
            ("location", location.to_string()),
            ("offset", offset.to_string()),
            ("length", length.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        })
        .collect(),
        ..TensorProto::default()
    }
}

#[test]
fn external_data_loads_and_missing_or_short_files_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let values = [1.0f32, -2.0, 3.0, -4.0];
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(
        dir.path().join("weights.bin"),
        [vec![0u8; 8], bytes].concat(),
    )
    .expect("write");
    let add = |w: TensorProto| model(vec![node("Add", "add_w", &["x", "w"], &["y"])], vec![w], 17);

    let path = write(
        dir.path(),
        "ok.onnx",
        &add(external_weight("weights.bin", 8, 16)),
    );
    let m = read_model(&path).expect("external data loads");
    let w = &m.graph.as_ref().expect("graph").initializer[0];
    let loaded = aneforge_onnx::const_from_proto(w).expect("decodes");
    assert_eq!(loaded.data, aneforge_onnx::Data::F32(values.to_vec()));

    let path = write(
        dir.path(),
        "missing.onnx",
        &add(external_weight("nowhere.bin", 0, 16)),
    );
    let err = read_model(&path).expect_err("missing file");
    assert!(matches!(err, OnnxError::ExternalData { .. }), "{err}");
    assert!(
        err.to_string().contains("nowhere.bin") && err.to_string().contains("\"w\""),
        "{err}"
    );

    let path = write(
        dir.path(),
        "short.onnx",
        &add(external_weight("weights.bin", 8, 64)),
    );
    let err = read_model(&path).expect_err("short file");
    assert!(err.to_string().contains("outside"), "{err}");

    let path = write(
        dir.path(),
        "escape.onnx",
        &add(external_weight("../weights.bin", 0, 16)),
    );
    let err = read_model(&path).expect_err("escaping path");
    assert!(err.to_string().contains("relative path"), "{err}");
}

#[test]
fn an_unknown_op_names_op_node_and_opset() {
    let m = model(vec![node("FancyOp", "mystery", &["x"], &["y"])], vec![], 17);
    let err = import_model(&m, &batch(1)).expect_err("unknown op");
    assert!(matches!(err, OnnxError::Unsupported { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("FancyOp") && text.contains("mystery") && text.contains("opset 17"),
        "{text}"
    );
}

#[test]
fn a_cycle_names_its_nodes() {
    let m = model(
        vec![
            node("Relu", "a", &["y"], &["t"]),
            node("Relu", "b", &["t"], &["y"]),
        ],
        vec![],
        17,
    );
    let err = import_model(&m, &batch(1)).expect_err("cycle");
    assert!(matches!(err, OnnxError::Cycle { .. }), "{err}");
    assert!(
        err.to_string().contains("\"a\"") && err.to_string().contains("\"b\""),
        "{err}"
    );
}

#[test]
fn nodes_out_of_order_are_sorted() {
    let m = model(
        vec![
            node("Neg", "second", &["t"], &["y"]),
            node("Relu", "first", &["x"], &["t"]),
        ],
        vec![],
        17,
    );
    let imported = import_model(&m, &batch(2)).expect("sorted");
    assert_eq!(imported.outputs[0].tensor.op().name(), "neg");
}

#[test]
fn unbound_and_inconsistent_shapes_are_errors_naming_the_input_or_node() {
    let err = import_model(&relu_model(), &ImportOptions::default()).expect_err("unbound");
    assert!(
        err.to_string().contains("batch") && err.to_string().contains("\"x\""),
        "{err}"
    );

    let wrong = ImportOptions {
        input_shapes: vec![("x".into(), vec![2, 5])],
        ..ImportOptions::default()
    };
    let err = import_model(&relu_model(), &wrong).expect_err("fixed dim differs");
    assert!(err.to_string().contains("dimension 1 is 4"), "{err}");

    let bias = TensorProto {
        name: Some("b".into()),
        dims: vec![3],
        data_type: Some(DataType::Float as i32),
        float_data: vec![1.0, 2.0, 3.0],
        ..TensorProto::default()
    };
    let m = model(
        vec![node("Add", "add_b", &["x", "b"], &["y"])],
        vec![bias],
        17,
    );
    let err = import_model(&m, &batch(2)).expect_err("shapes do not broadcast");
    assert!(matches!(err, OnnxError::Node { .. }), "{err}");
    assert!(err.to_string().contains("add_b"), "{err}");
}

#[test]
fn opsets_beyond_22_ops_changed_since_opset_6_and_bad_tensor_data_are_errors() {
    let err = import_model(
        &model(vec![node("Relu", "act", &["x"], &["y"])], vec![], 6),
        &batch(1),
    )
    .expect_err("Relu at opset 6");
    assert!(
        err.to_string().contains("opset 6") && err.to_string().contains("Relu"),
        "{err}"
    );
    let err = import_model(
        &model(vec![node("Relu", "act", &["x"], &["y"])], vec![], 23),
        &batch(1),
    )
    .expect_err("opset 23");
    assert!(err.to_string().contains("opset 23"), "{err}");

    let short = TensorProto {
        name: Some("b".into()),
        dims: vec![4],
        data_type: Some(DataType::Float as i32),
        raw_data: Some(vec![0; 7]),
        ..TensorProto::default()
    };
    let m = model(
        vec![node("Add", "add_b", &["x", "b"], &["y"])],
        vec![short],
        17,
    );
    let err = import_model(&m, &batch(1)).expect_err("raw data too short");
    assert!(
        matches!(err, OnnxError::Tensor { .. }) && err.to_string().contains("\"b\""),
        "{err}"
    );

    let mut bad_attr = node("Transpose", "tr", &["x"], &["y"]);
    bad_attr.attribute.push(AttributeProto {
        name: Some("perm".into()),
        ints: vec![0, 0],
        ..AttributeProto::default()
    });
    let err = import_model(&model(vec![bad_attr], vec![], 17), &batch(1)).expect_err("bad perm");
    assert!(
        err.to_string().contains("tr") && err.to_string().contains("perm"),
        "{err}"
    );
}
