//! Bitwise ops on int32 values across the whole i32 range (beyond f32's exact 2^24), checked
//! against Rust's own `&`, `|`, `^` and `!` on the same values.

use aneforge::engine::{HostSlice, HostTensor};
use aneforge::{compile_named, CompileOptions};
use aneforge_onnx::proto::{
    tensor_proto::DataType, type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
};
use aneforge_onnx::{import_model, ImportOptions};

mod common;
use common::value_info;

fn int32(name: &str, n: i64) -> aneforge_onnx::proto::ValueInfoProto {
    let mut v = value_info(name, &[Ok(n)]);
    if let Some(type_proto::Value::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(DataType::Int32 as i32);
    }
    v
}

fn run(op: &str, a: &[i32], b: Option<&[i32]>) -> Vec<i32> {
    let n = a.len() as i64;
    let mut inputs = vec![int32("a", n)];
    let mut names = vec!["a".to_string()];
    if b.is_some() {
        inputs.push(int32("b", n));
        names.push("b".into());
    }
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(18),
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                op_type: Some(op.into()),
                input: names,
                output: vec!["y".into()],
                ..NodeProto::default()
            }],
            input: inputs,
            output: vec![int32("y", n)],
            ..GraphProto::default()
        }),
        ..ModelProto::default()
    };
    let imported = import_model(&model, &ImportOptions::default()).expect("import");
    let outputs: Vec<(&str, &aneforge::Tensor)> = imported
        .outputs
        .iter()
        .map(|o| (o.port.as_str(), &o.tensor))
        .collect();
    let mut program = compile_named(&outputs, &CompileOptions::default()).expect("compile");
    for port in &imported.inputs {
        let data = if port.onnx_name == "a" {
            a
        } else {
            b.expect("b")
        };
        program
            .set_input(&port.port, HostSlice::I32(data))
            .expect("input");
    }
    program.execute().expect("execute");
    match program
        .read_output(&imported.outputs[0].port)
        .expect("output")
    {
        HostTensor::I32(v) => v.to_vec(),
        other => panic!("i32 output expected, got {other:?}"),
    }
}

#[test]
fn bitwise_ops_are_exact_over_the_i32_range() {
    let a = [
        i32::MIN,
        -1,
        0x7fff_ffff,
        0x1234_5679,
        -0x0f0f_0f0f,
        16_777_217,
        5,
    ];
    let b = [
        -1,
        i32::MIN,
        0x5555_5555,
        -0x2468_ace1,
        0x0ff0_0ff0,
        16_777_215,
        -6,
    ];
    type Reference = fn(i32, i32) -> i32;
    let cases: [(&str, Reference); 3] = [
        ("BitwiseAnd", |x, y| x & y),
        ("BitwiseOr", |x, y| x | y),
        ("BitwiseXor", |x, y| x ^ y),
    ];
    for (op, f) in cases {
        let want: Vec<i32> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
        assert_eq!(run(op, &a, Some(&b)), want, "{op}");
    }
    let want: Vec<i32> = a.iter().map(|&x| !x).collect();
    assert_eq!(run("BitwiseNot", &a, None), want, "BitwiseNot");
}
