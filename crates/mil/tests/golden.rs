//! Golden snapshots: printed programs compared byte for byte with files under tests/golden/.
//! `UPDATE_GOLDEN=1 cargo test -p aneforge-mil --test golden` rewrites them.

use aneforge_mil::*;

fn check(name: &str, program: &Program) {
    let path = format!("{}/tests/golden/{name}.mil", env!("CARGO_MANIFEST_DIR"));
    let text = print(program);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (run with UPDATE_GOLDEN=1 to create it)"));
    assert_eq!(text, golden, "{path} differs from the printed program");
    assert_eq!(
        &parse(&golden).unwrap(),
        program,
        "{path} does not parse back"
    );
}

fn build_info() -> (String, Literal) {
    (
        "buildInfo".into(),
        Literal::Dict {
            key: DType::String,
            value: DType::String,
            entries: vec![
                (
                    Literal::string("coremltools-component-milinternal"),
                    Literal::string(""),
                ),
                (
                    Literal::string("coremltools-version"),
                    Literal::string("8.3.0"),
                ),
            ],
        },
    )
}

fn named(op: Operation, name: &str) -> Operation {
    op.with_attribute("name", Literal::string(name))
}

fn constant(name: &str, lit: Literal) -> Operation {
    let ty = lit.value_type();
    named(Operation::new("const").with_output(name, ty), name).with_attribute("val", lit)
}

fn blob(dtype: DType, shape: &[usize], offset: u64) -> Literal {
    Literal::Blob {
        ty: TensorType::new(dtype, shape),
        path: "@model_path/weights/weight.bin".into(),
        offset,
    }
}

#[test]
fn linear_softmax() {
    let x = TensorType::new(DType::Fp16, &[1, 64]);
    let y = TensorType::new(DType::Fp16, &[1, 32]);
    let mut f = Function::new("main", "ios18");
    f.inputs.push(NamedValue::new("x", x));
    f.body.operations = vec![
        constant("w", blob(DType::Fp16, &[32, 64], 64)),
        constant("b", blob(DType::Fp16, &[32], 4224)),
        named(
            Operation::new("linear")
                .with_input("x", Argument::name("x"))
                .with_input("weight", Argument::name("w"))
                .with_input("bias", Argument::name("b"))
                .with_output("h", y.clone()),
            "h",
        ),
        named(
            Operation::new("softmax")
                .with_input("x", Argument::name("h"))
                .with_input("axis", Argument::Literal(Literal::int(DType::Int32, -1)))
                .with_output("p", y),
            "p",
        ),
    ];
    f.body.outputs = vec!["p".into()];
    check(
        "linear_softmax",
        &Program {
            version: "1.3".into(),
            attributes: vec![build_info()],
            functions: vec![f],
        },
    );
}

#[test]
fn literals_and_multi_output() {
    let x = TensorType::new(DType::Fp32, &[2, 6]);
    let half = TensorType::new(DType::Fp32, &[2, 3]);
    let mut f = Function::new("main", "ios17");
    f.inputs.push(NamedValue::new("x", x.clone()));
    f.body.operations = vec![
        constant("flag", Literal::bool(true)),
        constant("mode", Literal::string("say \"hi\"\n")),
        constant("eps", Literal::float(DType::Fp32, 1e-8f32 as f64)),
        constant("tiny", Literal::float(DType::Fp16, 2f64.powi(-24))),
        constant(
            "edges",
            Literal::float_tensor(
                DType::Fp16,
                &[2, 3],
                vec![
                    65504.0,
                    -0.0,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    0.5,
                    -1023.0 * 2f64.powi(-24),
                ],
            ),
        ),
        constant(
            "perm",
            Literal::int_tensor(DType::Int32, &[2, 2], vec![1, 0, -3, 2147483647]),
        ),
        constant("mask", Literal::bool_tensor(&[3], vec![true, false, true])),
        named(
            Operation::new("split")
                .with_input("x", Argument::name("x"))
                .with_input(
                    "num_splits",
                    Argument::Literal(Literal::int(DType::Int32, 2)),
                )
                .with_input("axis", Argument::Literal(Literal::int(DType::Int32, 1)))
                .with_output("lo", half.clone())
                .with_output("hi", half),
            "split_0",
        ),
        named(
            Operation::new("concat")
                .with_input(
                    "values",
                    Argument::List(vec![Argument::name("hi"), Argument::name("lo")]),
                )
                .with_input("axis", Argument::Literal(Literal::int(DType::Int32, -1)))
                .with_input("interleave", Argument::Literal(Literal::bool(false)))
                .with_output("y", x),
            "concat_0",
        ),
    ];
    f.body.outputs = vec!["y".into(), "lo".into()];
    check(
        "literals_and_multi_output",
        &Program {
            version: "1.3".into(),
            attributes: vec![build_info()],
            functions: vec![f],
        },
    );
}

#[test]
fn int8_weights_two_functions() {
    let mut prefill = Function::new("prefill", "ios18");
    prefill
        .inputs
        .push(NamedValue::new("x", TensorType::new(DType::Fp16, &[8, 16])));
    prefill.body.operations = vec![
        named(
            Operation::new("constexpr_affine_dequantize")
                .with_output("w", TensorType::new(DType::Fp16, &[16, 16]))
                .with_attribute("quantized_data", blob(DType::Int8, &[16, 16], 64))
                .with_attribute("zero_point", Literal::int(DType::Int8, 0))
                .with_attribute(
                    "scale",
                    Literal::float_tensor(
                        DType::Fp16,
                        &[16],
                        (0..16).map(|i| (i + 1) as f64 / 1024.0).collect(),
                    ),
                )
                .with_attribute("axis", Literal::int(DType::Int32, 0)),
            "w",
        ),
        named(
            Operation::new("matmul")
                .with_input("x", Argument::name("x"))
                .with_input("y", Argument::name("w"))
                .with_input("transpose_x", Argument::Literal(Literal::bool(false)))
                .with_input("transpose_y", Argument::Literal(Literal::bool(true)))
                .with_output("y", TensorType::new(DType::Fp16, &[8, 16])),
            "y",
        ),
    ];
    prefill.body.outputs = vec!["y".into()];
    let mut decode = prefill.clone();
    decode.name = "decode".into();
    decode.inputs[0].ty = TensorType::new(DType::Fp16, &[1, 16]).into();
    decode.body.operations[1].outputs[0].ty = TensorType::new(DType::Fp16, &[1, 16]).into();
    check(
        "int8_weights_two_functions",
        &Program {
            version: "1.3".into(),
            attributes: vec![build_info()],
            functions: vec![prefill, decode],
        },
    );
}
