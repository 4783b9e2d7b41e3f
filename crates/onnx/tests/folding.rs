//! Shape arithmetic folds on the host: `Shape → Gather → Unsqueeze → Concat → Reshape` on a
//! bound input leaves a single reshape in the graph, and a symbolic batch bound to different
//! sizes gives different static shapes.

use aneforge::graph::Op;
use aneforge_onnx::proto::{
    tensor_proto::DataType, type_proto, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto,
};
use aneforge_onnx::{import_model, ImportOptions};

mod common;
use common::value_info;

fn ints(name: &str, dims: Vec<i64>, values: Vec<i64>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims,
        data_type: Some(DataType::Int64 as i32),
        int64_data: values,
        ..TensorProto::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute: attrs,
        ..NodeProto::default()
    }
}

/// `y = reshape(x, [shape(x)[0], -1])` for `x: [batch, 3, 4]`, spelled as exporters spell it.
fn model() -> ModelProto {
    let axes = AttributeProto {
        name: Some("axes".into()),
        ints: vec![0],
        ..AttributeProto::default()
    };
    ModelProto {
        ir_version: Some(7),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(11),
        }],
        graph: Some(GraphProto {
            node: vec![
                node("Shape", &["x"], "s", vec![]),
                node("Gather", &["s", "zero"], "b", vec![]),
                node("Unsqueeze", &["b"], "b1", vec![axes]),
                node(
                    "Concat",
                    &["b1", "minus_one"],
                    "target",
                    vec![AttributeProto {
                        name: Some("axis".into()),
                        i: Some(0),
                        ..AttributeProto::default()
                    }],
                ),
                node("Reshape", &["x", "target"], "y", vec![]),
            ],
            initializer: vec![
                ints("zero", vec![], vec![0]),
                ints("minus_one", vec![1], vec![-1]),
            ],
            input: vec![value_info("x", &[Err("batch"), Ok(3), Ok(4)])],
            output: vec![value_info("y", &[Err("batch"), Ok(12)])],
            ..GraphProto::default()
        }),
        ..ModelProto::default()
    }
}

#[test]
fn shape_arithmetic_folds_into_one_static_reshape() {
    for batch in [1usize, 5] {
        let options = ImportOptions {
            input_shapes: vec![("batch".into(), vec![batch])],
            ..ImportOptions::default()
        };
        let imported = import_model(&model(), &options).expect("import");
        let y = &imported.outputs[0].tensor;
        assert_eq!(y.shape(), &[batch, 12]);
        assert!(matches!(y.op(), Op::Reshape { .. }), "{:?}", y.op());
        assert!(
            matches!(y.srcs()[0].op(), Op::Input { .. }),
            "{:?}",
            y.srcs()[0].op()
        );
    }
}

/// `If(cond) then relu(x) else neg(x)`, the condition an input fixed to `cond` or left fed.
fn if_model() -> ModelProto {
    let branch = |op: &str, out: &str| GraphProto {
        node: vec![node(op, &["x"], out, vec![])],
        output: vec![value_info(out, &[Err("batch"), Ok(3), Ok(4)])],
        ..GraphProto::default()
    };
    let mut m = model();
    let g = m.graph.as_mut().expect("graph");
    g.node = vec![node(
        "If",
        &["cond"],
        "y",
        vec![
            AttributeProto {
                name: Some("then_branch".into()),
                g: Some(branch("Relu", "t")),
                ..AttributeProto::default()
            },
            AttributeProto {
                name: Some("else_branch".into()),
                g: Some(branch("Neg", "e")),
                ..AttributeProto::default()
            },
        ],
    )];
    g.initializer.clear();
    let mut cond = value_info("cond", &[]);
    if let Some(type_proto::Value::TensorType(t)) =
        cond.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(DataType::Bool as i32);
    }
    g.input.push(cond);
    g.output = vec![value_info("y", &[Err("batch"), Ok(3), Ok(4)])];
    m
}

/// `if_model`'s options with its graph input `cond` bound to `t`.
fn binding_cond(t: &TensorProto) -> ImportOptions {
    ImportOptions {
        input_shapes: vec![("batch".into(), vec![2])],
        constant_inputs: vec![(
            "cond".into(),
            aneforge_onnx::const_from_proto(t).expect("cond"),
        )],
        ..ImportOptions::default()
    }
}

#[test]
fn if_with_a_known_condition_imports_its_branch_and_a_fed_one_is_an_error() {
    for (cond, op) in [(true, "relu"), (false, "neg")] {
        let t = TensorProto {
            name: Some("cond".into()),
            data_type: Some(DataType::Bool as i32),
            int32_data: vec![i32::from(cond)],
            ..TensorProto::default()
        };
        let imported = import_model(&if_model(), &binding_cond(&t)).expect("import");
        assert_eq!(imported.outputs[0].tensor.op().name(), op);
    }
    let options = ImportOptions {
        input_shapes: vec![("batch".into(), vec![2])],
        ..ImportOptions::default()
    };
    let err = import_model(&if_model(), &options).expect_err("fed condition");
    assert!(
        err.to_string().contains("If") && err.to_string().contains("must be a constant"),
        "{err}"
    );
}

#[test]
fn a_constant_bound_to_an_input_must_match_its_declared_shape_and_kind() {
    let bad = [
        // a boolean scalar declared, a boolean vector given
        (
            TensorProto {
                name: Some("cond".into()),
                data_type: Some(DataType::Bool as i32),
                dims: vec![2],
                int32_data: vec![1, 0],
                ..TensorProto::default()
            },
            "declares shape []",
        ),
        // a boolean declared, a float given
        (
            TensorProto {
                name: Some("cond".into()),
                data_type: Some(DataType::Float as i32),
                float_data: vec![1.0],
                ..TensorProto::default()
            },
            "declares a boolean input (BOOL), the value given is floating-point",
        ),
    ];
    for (t, want) in bad {
        let err = import_model(&if_model(), &binding_cond(&t)).expect_err("mismatched constant");
        let text = err.to_string();
        assert!(text.contains("cond") && text.contains(want), "{text}");
    }
}
