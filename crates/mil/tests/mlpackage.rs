//! `.mlpackage` export: package layout, the protobuf read back with prost, blob checks,
//! reproducibility and atomic replacement. coremltools' own verdict on these packages comes from
//! `tools/coreml_check.py` over the `coreml_corpus` example (scripts/test.sh).

use aneforge_mil::encode::{encode, EncodeOptions, Scheme, Weight, WEIGHT_BLOB_PATH};
use aneforge_mil::mlpackage::proto::specification as pb;
use aneforge_mil::mlpackage::proto::specification::mil_spec as mil;
use aneforge_mil::mlpackage::{export, export_program_dir, model_spec, ExportError, ExportOptions};
use aneforge_mil::{
    Argument, BlobError, BlobFile, BlobWriter, Block, CompoundLiteral, CompoundType, CompoundValue,
    DType, Function, Literal, NamedValue, Operation, Program, ProgramDir, TensorType,
};
use prost::Message;
use std::path::Path;

fn t(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape)
}

/// `y = linear(x, w)` with an int8-encoded `w`, plus inline literal arguments of several dtypes.
fn sample() -> (Program, BlobFile) {
    let mut writer = BlobWriter::new();
    let values: Vec<f32> = (0..8 * 4).map(|i| (i as f32 - 16.0) / 40.0).collect();
    let encoded = encode(
        &mut writer,
        &Weight {
            name: "w",
            shape: &[8, 4],
            values: &values,
        },
        Scheme::Int8,
        &EncodeOptions::default(),
    )
    .unwrap();
    let mut ops = encoded.operations;
    ops.push(
        Operation::new("linear")
            .with_input("x", Argument::name("x"))
            .with_input("weight", Argument::name("w"))
            .with_output("h", t(DType::Fp16, &[2, 8]))
            .with_attribute("name", Literal::string("h")),
    );
    ops.push(
        Operation::new("clip")
            .with_input("x", Argument::name("h"))
            .with_input(
                "alpha",
                Argument::Literal(Literal::float(DType::Fp16, -0.5)),
            )
            .with_input("beta", Argument::Literal(Literal::float(DType::Fp16, 0.75)))
            .with_output("y", t(DType::Fp16, &[2, 8]))
            .with_attribute("name", Literal::string("y")),
    );
    ops.push(
        Operation::new("reduce_sum")
            .with_input("x", Argument::name("y"))
            .with_input(
                "axes",
                Argument::Literal(Literal::int_tensor(DType::Int32, &[1], vec![-1])),
            )
            .with_input("keep_dims", Argument::Literal(Literal::bool(true)))
            .with_output("s", t(DType::Fp16, &[2, 1]))
            .with_attribute("name", Literal::string("s")),
    );
    let program = Program {
        version: "1.3".into(),
        attributes: Vec::new(),
        functions: vec![Function {
            name: "main".into(),
            opset: "ios18".into(),
            inputs: vec![NamedValue::new("x", t(DType::Fp16, &[2, 4]))],
            attributes: Vec::new(),
            body: Block {
                inputs: Vec::new(),
                operations: ops,
                outputs: vec!["s".into()],
            },
        }],
    };
    (
        program,
        BlobFile::from_vec("weight.bin", writer.finish()).unwrap(),
    )
}

fn relu(opset: &str, dtype: DType) -> Program {
    Program {
        version: "1.3".into(),
        attributes: Vec::new(),
        functions: vec![Function {
            name: "main".into(),
            opset: opset.into(),
            inputs: vec![NamedValue::new("x", t(dtype, &[3]))],
            attributes: Vec::new(),
            body: Block {
                inputs: Vec::new(),
                operations: vec![Operation::new("relu")
                    .with_input("x", Argument::name("x"))
                    .with_output("y", t(dtype, &[3]))
                    .with_attribute("name", Literal::string("y"))],
                outputs: vec!["y".into()],
            },
        }],
    }
}

fn read_model(package: &Path) -> pb::Model {
    let bytes = std::fs::read(package.join("Data/com.apple.CoreML/model.mlmodel")).unwrap();
    pb::Model::decode(bytes.as_slice()).unwrap()
}

fn ml_program(model: &pb::Model) -> &mil::Program {
    match &model.r#type {
        Some(pb::model::Type::MlProgram(p)) => p,
        other => panic!("not an ML program: {other:?}"),
    }
}

#[test]
fn package_layout_manifest_and_model() {
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("sample.mlpackage");
    let (program, blobs) = sample();
    export(
        &program,
        &[(WEIGHT_BLOB_PATH, &blobs)],
        &package,
        &ExportOptions::default(),
    )
    .unwrap();

    let weights = std::fs::read(package.join("Data/com.apple.CoreML/weights/weight.bin")).unwrap();
    assert_eq!(weights, blobs.bytes());

    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(package.join("Manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["fileFormatVersion"], "1.0.0");
    let root = manifest["rootModelIdentifier"].as_str().unwrap();
    let entries = manifest["itemInfoEntries"].as_object().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[root]["path"], "com.apple.CoreML/model.mlmodel");
    assert_eq!(entries[root]["author"], "com.apple.CoreML");
    for id in entries.keys() {
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "version 4 UUID: {id}");
    }

    let model = read_model(&package);
    assert_eq!(model.specification_version, 9);
    let description = model.description.as_ref().unwrap();
    let feature = |f: &pb::FeatureDescription| match &f.r#type.as_ref().unwrap().r#type {
        Some(pb::feature_type::Type::MultiArrayType(a)) => {
            (f.name.clone(), a.shape.clone(), a.data_type)
        }
        other => panic!("{other:?}"),
    };
    let fp16 = pb::array_feature_type::ArrayDataType::Float16 as i32;
    assert_eq!(
        feature(&description.input[0]),
        ("x".into(), vec![2, 4], fp16)
    );
    assert_eq!(
        feature(&description.output[0]),
        ("s".into(), vec![2, 1], fp16)
    );

    let program = ml_program(&model);
    assert_eq!(program.version, 1);
    let main = &program.functions["main"];
    assert_eq!(main.opset, "CoreML8");
    let block = &main.block_specializations["CoreML8"];
    assert_eq!(block.outputs, ["s"]);
    let types: Vec<&str> = block.operations.iter().map(|o| o.r#type.as_str()).collect();
    assert_eq!(
        types,
        [
            "constexpr_affine_dequantize",
            "linear",
            "clip",
            "reduce_sum"
        ]
    );
    // iOS16 constexpr parameters are attributes; the blob ones point into weight.bin.
    let dequant = &block.operations[0];
    assert!(dequant.inputs.is_empty());
    let blob = |v: &mil::Value| match &v.value {
        Some(mil::value::Value::BlobFileValue(b)) => (b.file_name.clone(), b.offset),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        blob(&dequant.attributes["quantized_data"]),
        (WEIGHT_BLOB_PATH.to_string(), 64)
    );
    let immediate = |v: &mil::Value| match &v.value {
        Some(mil::value::Value::ImmediateValue(mil::value::ImmediateValue {
            value: Some(mil::value::immediate_value::Value::Tensor(t)),
        })) => t.value.clone().unwrap(),
        other => panic!("{other:?}"),
    };
    use mil::tensor_value::Value as T;
    assert_eq!(
        immediate(&dequant.attributes["zero_point"]),
        T::Bytes(mil::tensor_value::RepeatedBytes { values: vec![0] })
    );
    assert_eq!(
        immediate(&dequant.attributes["axis"]),
        T::Ints(mil::tensor_value::RepeatedInts { values: vec![0] })
    );
    // Inline arguments: fp16 as little-endian bytes, int32 as ints, bool as bools.
    let arg_value = |op: &mil::Operation, name: &str| match &op.inputs[name].arguments[0].binding {
        Some(mil::argument::binding::Binding::Value(v)) => immediate(v),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        arg_value(&block.operations[2], "beta"),
        T::Bytes(mil::tensor_value::RepeatedBytes {
            values: half::f16::from_f64(0.75).to_le_bytes().to_vec()
        })
    );
    assert_eq!(
        arg_value(&block.operations[3], "axes"),
        T::Ints(mil::tensor_value::RepeatedInts { values: vec![-1] })
    );
    assert_eq!(
        arg_value(&block.operations[3], "keep_dims"),
        T::Bools(mil::tensor_value::RepeatedBools { values: vec![true] })
    );
    let output_type = &block.operations[3].outputs[0].r#type;
    match output_type.as_ref().and_then(|t| t.r#type.as_ref()) {
        Some(mil::value_type::Type::TensorType(tt)) => {
            assert_eq!(tt.data_type, mil::DataType::Float16 as i32);
            assert_eq!(tt.rank, 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn spec_version_follows_the_opset() {
    for (opset, proto_opset, version) in [
        ("ios15", "CoreML5", 6),
        ("ios16", "CoreML6", 7),
        ("ios17", "CoreML7", 8),
        ("ios18", "CoreML8", 9),
        ("CoreML7", "CoreML7", 8),
    ] {
        let program = relu(opset, DType::Fp32);
        let model = model_spec(&program, &ExportOptions::default()).unwrap();
        assert_eq!(model.specification_version, version, "{opset}");
        assert!(ml_program(&model).functions["main"]
            .block_specializations
            .contains_key(proto_opset));
    }
    let program = relu("ios15", DType::Fp16);
    let err = model_spec(&program, &ExportOptions::default()).unwrap_err();
    assert!(
        matches!(err, ExportError::Fp16FeatureBeforeIos16(ref n) if n == "x"),
        "{err}"
    );
    let program = relu("ios19", DType::Fp16);
    assert!(matches!(
        model_spec(&program, &ExportOptions::default()),
        Err(ExportError::UnknownOpset { .. })
    ));
}

#[test]
fn export_is_reproducible_and_replaces_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("m.mlpackage");
    let (program, blobs) = sample();
    let read_all = |p: &Path| {
        ["Manifest.json", "Data/com.apple.CoreML/model.mlmodel"]
            .map(|f| std::fs::read(p.join(f)).unwrap())
    };
    export(
        &program,
        &[(WEIGHT_BLOB_PATH, &blobs)],
        &package,
        &ExportOptions::default(),
    )
    .unwrap();
    let first = read_all(&package);
    std::fs::write(package.join("stale.txt"), "from before").unwrap();
    export(
        &program,
        &[(WEIGHT_BLOB_PATH, &blobs)],
        &package,
        &ExportOptions::default(),
    )
    .unwrap();
    assert_eq!(read_all(&package), first);
    assert!(
        !package.join("stale.txt").exists(),
        "old package replaced whole"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["m.mlpackage"]);
}

#[test]
fn blob_references_are_checked_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("bad.mlpackage");
    let (program, blobs) = sample();
    let options = ExportOptions::default();

    let err = export(&program, &[], &package, &options).unwrap_err();
    assert!(
        matches!(err, ExportError::MissingBlobFile(ref p) if p == WEIGHT_BLOB_PATH),
        "{err}"
    );

    let short = BlobFile::from_vec("weight.bin", BlobWriter::new().finish()).unwrap();
    let err = export(&program, &[(WEIGHT_BLOB_PATH, &short)], &package, &options).unwrap_err();
    assert!(
        matches!(
            err,
            ExportError::Blob(BlobError::NoBlobAt { offset: 64, .. })
        ),
        "{err}"
    );

    let mut wrong = BlobWriter::new();
    wrong.add(DType::Uint8, 32, &[0; 32]).unwrap();
    let wrong = BlobFile::from_vec("weight.bin", wrong.finish()).unwrap();
    let err = export(&program, &[(WEIGHT_BLOB_PATH, &wrong)], &package, &options).unwrap_err();
    assert!(
        matches!(err, ExportError::Blob(BlobError::DtypeMismatch { .. })),
        "{err}"
    );

    let err = export(
        &program,
        &[
            (WEIGHT_BLOB_PATH, &blobs),
            ("@model_path/../escape.bin", &blobs),
        ],
        &package,
        &options,
    )
    .unwrap_err();
    assert!(matches!(err, ExportError::BlobPath(_)), "{err}");
    assert!(!package.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temp dirs left"
    );
}

/// coremltools' loader binds only immediate values to ordinary ops' inputs, so a BLOBFILE
/// argument becomes a `const` op of its own (constexpr ops keep theirs).
#[test]
fn blob_arguments_of_ordinary_ops_become_const_ops() {
    let mut writer = BlobWriter::new();
    let offset = writer.add_f16(&[half::f16::ONE; 12]);
    let weight = Literal::Blob {
        ty: t(DType::Fp16, &[3, 4]),
        path: WEIGHT_BLOB_PATH.into(),
        offset,
    };
    let program = Program {
        version: "1.3".into(),
        attributes: Vec::new(),
        functions: vec![Function {
            name: "main".into(),
            opset: "ios18".into(),
            inputs: vec![NamedValue::new("x", t(DType::Fp16, &[2, 4]))],
            attributes: Vec::new(),
            body: Block {
                inputs: Vec::new(),
                operations: vec![Operation::new("linear")
                    .with_input("x", Argument::name("x"))
                    .with_input("weight", Argument::Literal(weight))
                    .with_output("y", t(DType::Fp16, &[2, 3]))
                    .with_attribute("name", Literal::string("y"))],
                outputs: vec!["y".into()],
            },
        }],
    };
    let model = model_spec(&program, &ExportOptions::default()).unwrap();
    let ops = &ml_program(&model).functions["main"].block_specializations["CoreML8"].operations;
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0].r#type, "const");
    assert_eq!(ops[0].outputs[0].name, "y_weight");
    assert!(matches!(
        ops[0].attributes["val"].value,
        Some(mil::value::Value::BlobFileValue(_))
    ));
    assert_eq!(
        ops[1].inputs["weight"].arguments[0].binding,
        Some(mil::argument::binding::Binding::Name("y_weight".into()))
    );
}

#[test]
fn program_dirs_export_and_function_attributes_are_refused() {
    let (program, blobs) = sample();
    let program_dir = ProgramDir::with_weights(program.clone(), blobs.bytes().to_vec()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("pd.mlpackage");
    export_program_dir(&program_dir, &package, &ExportOptions::default()).unwrap();
    assert_eq!(
        read_model(&package),
        model_spec(&program, &ExportOptions::default()).unwrap()
    );

    let mut flexible = program;
    flexible.functions[0].attributes.push((
        "FlexibleShapeInformation".into(),
        CompoundLiteral {
            ty: CompoundType::Tensor(TensorType::scalar(DType::String)),
            value: CompoundValue::Str("x".into()),
        },
    ));
    let err = model_spec(&flexible, &ExportOptions::default()).unwrap_err();
    assert!(
        matches!(err, ExportError::FunctionAttribute { ref name, .. } if name == "FlexibleShapeInformation"),
        "{err}"
    );
}

#[test]
fn literal_length_mismatch_is_an_error() {
    let (mut program, _) = sample();
    let op = &mut program.functions[0].body.operations[3];
    op.inputs[1].1 = Argument::Literal(Literal::int_tensor(DType::Int32, &[2], vec![1]));
    let err = model_spec(&program, &ExportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("reduce_sum s.axes"), "{err}");
}
