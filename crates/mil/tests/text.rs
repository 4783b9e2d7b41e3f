//! MIL text: parsing real-form `model.mil` texts (fixtures written in the form Apple's compiler
//! emits), printing, and the error messages for malformed text.

use aneforge_mil::*;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn parse_ok(text: &str) -> Program {
    parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn op<'a>(f: &'a Function, output: &str) -> &'a Operation {
    f.body
        .operations
        .iter()
        .find(|o| o.outputs.iter().any(|v| v.name == output))
        .unwrap_or_else(|| panic!("no op defines {output}"))
}

#[test]
fn canonical_compiled_text_prints_back_byte_for_byte() {
    let text = fixture("compiled_ios18.mil");
    let text = text.trim_end();
    let program = parse_ok(text);
    assert_eq!(print(&program), text);
}

#[test]
fn reads_a_program_1_3_compiled_file() {
    let p = parse_ok(&fixture("compiled_ios18.mil"));
    assert_eq!(p.version, "1.3");
    let Some(Literal::Dict {
        key,
        value,
        entries,
    }) = p.attributes.first().map(|(_, l)| l)
    else {
        panic!("buildInfo")
    };
    assert_eq!((*key, *value), (DType::String, DType::String));
    assert_eq!(entries.len(), 4);
    assert_eq!(
        entries[2].0.as_str(),
        Some("coremltools-component-milinternal")
    );
    assert_eq!(entries[2].1.as_str(), Some(""));

    let f = p.function("main").expect("main");
    assert_eq!(f.opset, "ios18");
    assert_eq!(f.inputs.len(), 2);
    assert_eq!(f.body.outputs, vec!["scaled", "var_9"]);

    let c = op(f, "var_4");
    assert_eq!(c.op_type, "const");
    assert_eq!(c.name(), Some("op_4"));
    assert_eq!(c.attribute("val"), Some(&Literal::int(DType::Int32, -1)));

    let eps = op(f, "ln_eps").attribute("val").unwrap();
    assert_eq!(eps, &Literal::float(DType::Fp16, 168.0 * 2f64.powi(-24)));

    let gamma = op(f, "ln_gamma").attribute("val").unwrap();
    assert_eq!(
        gamma,
        &Literal::Blob {
            ty: TensorType::new(DType::Fp16, &[32]),
            path: "@model_path/weights/weight.bin".into(),
            offset: 64
        }
    );

    let split = op(f, "half_a");
    assert_eq!(split.outputs.len(), 2);
    assert_eq!(split.outputs[1].name, "half_b");
    assert_eq!(
        split.input("num_splits"),
        Some(&Argument::Literal(Literal::int(DType::Int32, 2)))
    );

    let concat = op(f, "joined");
    assert_eq!(
        concat.input("values"),
        Some(&Argument::List(vec![
            Argument::name("half_b"),
            Argument::name("half_a")
        ]))
    );

    let small = op(f, "small").attribute("val").unwrap();
    assert_eq!(
        small,
        &Literal::float_tensor(DType::Fp16, &[2, 2], vec![1.0, -0.75, f64::INFINITY, -0.0])
    );
    let Literal::Tensor {
        data: TensorData::Float(v),
        ..
    } = small
    else {
        panic!()
    };
    assert!(v[3].is_sign_negative());
}

#[test]
fn reads_the_program_1_0_spellings() {
    let p = parse_ok(&fixture("compiled_ios16_legacy.mil"));
    assert_eq!(p.version, "1.0");
    let Some(Literal::Dict { key, entries, .. }) = p.attributes.first().map(|(_, l)| l) else {
        panic!("buildInfo")
    };
    assert_eq!(*key, DType::String);
    assert_eq!(entries[3].1.as_str(), Some("7.1"));
    let f = &p.functions[0];
    assert_eq!(f.opset, "ios16");
    // `tensor<string, []>` is the old spelling of the scalar type `string`.
    let pad_type = op(f, "var_10_pad_type_0");
    assert_eq!(
        pad_type.outputs[0].ty,
        TensorType::scalar(DType::String).into()
    );
    assert_eq!(pad_type.attribute("val"), Some(&Literal::string("custom")));
    assert_eq!(pad_type.name(), Some("op_10_pad_type_0"));
    assert_eq!(
        op(f, "var_10_groups_0").attribute("val"),
        Some(&Literal::int(DType::Int32, 1))
    );
    assert_eq!(op(f, "keep").attribute("val"), Some(&Literal::bool(true)));
    assert_eq!(
        op(f, "var_12_epsilon_0").attribute("val"),
        Some(&Literal::float(DType::Fp32, 2f64.powi(-149)))
    );
    assert_eq!(
        op(f, "conv_bias_to_fp16").attribute("val"),
        Some(&Literal::float_tensor(
            DType::Fp16,
            &[4],
            vec![0.125, -(0x199 as f64) * 2f64.powi(-12), 0.0, 3.0]
        ))
    );
    let Some(Literal::Blob { offset, path, .. }) = op(f, "conv_weight_to_fp16").attribute("val")
    else {
        panic!("blob")
    };
    assert_eq!(
        (*offset, path.as_str()),
        (64, "@model_path/weights/weight.bin")
    );
    let reduce = op(f, "pooled_cast_fp16");
    assert_eq!(
        reduce.input("axes"),
        Some(&Argument::Literal(Literal::int_tensor(
            DType::Int32,
            &[2],
            vec![2, 3]
        )))
    );
    // Printing uses the program(1.3) spellings; the program is unchanged by the trip.
    let printed = print(&p);
    assert!(printed.contains("string var_10_pad_type_0 = const()[name = string(\"op_10_pad_type_0\"), val = string(\"custom\")];"));
    assert!(!printed.contains("tensor<string, []>"));
    assert_eq!(parse_ok(&printed), p);
}

#[test]
fn reads_function_attributes_symbolic_dims_and_ops_without_names() {
    let p = parse_ok(&fixture("flexible_multifunction.mil"));
    assert_eq!(p.functions.len(), 2);
    let prefill = p.function("prefill").unwrap();
    assert_eq!(prefill.opset, "CoreML8");
    assert_eq!(
        prefill.inputs[0].ty,
        ValueType::Tensor(TensorType {
            dtype: DType::Fp32,
            shape: vec![Dim::Symbol("?".into()), Dim::Fixed(16)]
        })
    );
    let (name, attr) = &prefill.attributes[0];
    assert_eq!(name, "FlexibleShapeInformation");
    let CompoundType::Tuple(parts) = &attr.ty else {
        panic!()
    };
    assert_eq!(parts.len(), 2);
    let CompoundValue::Tuple(values) = &attr.value else {
        panic!()
    };
    assert_eq!(
        values[1],
        CompoundValue::Tuple(vec![
            CompoundValue::Str("RangeDims".into()),
            CompoundValue::Dict(vec![(
                CompoundValue::Str("tokens".into()),
                CompoundValue::List(vec![
                    CompoundValue::List(vec![CompoundValue::Int(1), CompoundValue::Int(64)]),
                    CompoundValue::List(vec![CompoundValue::Int(16), CompoundValue::Int(16)]),
                ])
            )])
        ])
    );
    let relu = op(prefill, "activated");
    assert!(relu.attributes.is_empty());
    assert_eq!(relu.name(), None);
    assert!(op(prefill, "offset").name().is_none());

    let decode = p.function("decode").unwrap();
    let split = op(decode, "lo");
    assert_eq!(split.outputs.len(), 2, "parenthesized multi-output form");
    let select = op(decode, "gated");
    assert_eq!(
        select.input("b"),
        Some(&Argument::Literal(Literal::float(
            DType::Fp32,
            f64::NEG_INFINITY
        )))
    );
    let printed = print(&p);
    assert!(printed.contains("tensor<fp32, [1, 8]> lo, tensor<fp32, [1, 8]> hi = split("));
    assert_eq!(parse_ok(&printed), p);
    assert_eq!(print(&parse_ok(&printed)), printed);
}

#[test]
fn reads_constexpr_ops_whose_inputs_are_attributes() {
    let p = parse_ok(&fixture("quantized_constexpr.mil"));
    let f = &p.functions[0];
    let w = op(f, "w");
    assert_eq!(w.op_type, "constexpr_affine_dequantize");
    assert!(w.inputs.is_empty());
    assert_eq!(
        w.attribute("zero_point"),
        Some(&Literal::int(DType::Int8, -3))
    );
    assert_eq!(
        w.attribute("scale"),
        Some(&Literal::float(DType::Fp32, 2f64.powi(-7)))
    );
}

#[test]
fn accepts_decimal_floats_comments_and_loose_whitespace() {
    let text = "program(1.0)\n// a comment\n{func main<ios15>(fp32 x){\n  fp32 y=mul(x=x,y=fp32(0.1));\n  fp32 z = add(x = y, y = fp32(1e3)); // trailing\n}->(z,y);}";
    let p = parse_ok(text);
    let f = &p.functions[0];
    assert_eq!(
        op(f, "y").input("y"),
        Some(&Argument::Literal(Literal::float(
            DType::Fp32,
            0.1f32 as f64
        )))
    );
    assert_eq!(
        op(f, "z").input("y"),
        Some(&Argument::Literal(Literal::float(DType::Fp32, 1000.0)))
    );
    assert!(p.attributes.is_empty());
    assert!(print(&p).starts_with("program(1.0)\n{\n    func main<ios15>(fp32 x) {\n"));
}

#[test]
fn decimal_literals_round_to_the_declared_dtype() {
    let p = parse_ok("program(1.3)\n{\n    func main<ios18>() {\n            fp16 a = const()[val = fp16(0.1)];\n        } -> (a);\n}");
    let expected = half::f16::from_f64(0.1).to_f64();
    assert_eq!(
        op(&p.functions[0], "a").attribute("val"),
        Some(&Literal::float(DType::Fp16, expected))
    );
}

#[test]
fn string_escapes_round_trip() {
    let mut op = Operation::new("const")
        .with_output("s", TensorType::scalar(DType::String))
        .with_attribute(
            "name",
            Literal::string("quote\" back\\slash\nnew\ttab\u{1}é"),
        )
        .with_attribute("val", Literal::string(""));
    op.attributes
        .push(("extra".into(), Literal::string("plain")));
    let mut f = Function::new("main", "ios18");
    f.body.operations.push(op);
    f.body.outputs.push("s".into());
    let p = Program {
        version: "1.3".into(),
        attributes: vec![],
        functions: vec![f],
    };
    let text = print(&p);
    assert!(
        text.contains(r#"string("quote\" back\\slash\nnew\ttab\x01é")"#),
        "{text}"
    );
    assert_eq!(parse_ok(&text), p);
}

fn parse_err(text: &str) -> ParseError {
    match parse(text) {
        Ok(p) => panic!("parsed: {p:?}"),
        Err(e) => e,
    }
}

const HEAD: &str = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4]> x) {\n";

#[test]
fn errors_name_line_column_and_what_was_expected() {
    let e = parse_err(&format!(
        "{HEAD}            tensor<fp16, [1 x]> y = relu(x = x);\n        }} -> (y);\n}}"
    ));
    assert_eq!((e.line, e.column), (4, 29));
    assert_eq!(e.message, "expected ',' or ']' in a shape, found 'x'");
    assert_eq!(
        e.to_string(),
        "line 4, column 29: expected ',' or ']' in a shape, found 'x'"
    );

    let e = parse_err(&format!(
        "{HEAD}            tensor<fp16, [1, 4]> y = relu(x = x)\n        }} -> (y);\n}}"
    ));
    assert_eq!((e.line, e.column), (5, 9));
    assert!(
        e.message.contains("';' at the end of the relu statement"),
        "{e}"
    );

    let e = parse_err(&format!(
        "{HEAD}            tensor<fp16, [1, 4]> y = relu(x = 3);\n        }} -> (y);\n}}"
    ));
    assert!(e.message.contains("untyped"), "{e}");

    let e = parse_err(&format!(
        "{HEAD}            tensor<fp17, [1, 4]> y = relu(x = x);\n        }} -> (y);\n}}"
    ));
    assert_eq!(e.message, "unknown element type 'fp17'");

    let e = parse_err(&format!(
        "{HEAD}            int8 y = const()[val = int8(200)];\n        }} -> (y);\n}}"
    ));
    assert_eq!((e.line, e.column), (4, 41));
    assert!(e.message.contains("200 is out of range for int8"), "{e}");

    let e = parse_err(&format!("{HEAD}            tensor<int32, [3]> y = const()[val = tensor<int32, [3]>([1, 2])];\n        }} -> (y);\n}}"));
    assert!(e.message.contains("expected 3 elements"), "{e}");

    let e = parse_err(&format!(
        "{HEAD}            string y = const()[val = string(\"abc)];\n        }} -> (y);\n}}"
    ));
    assert_eq!(e.line, 4);
    assert!(e.message.contains("unterminated string"), "{e}");

    let e = parse_err(&format!(
        "{HEAD}            fp16 y = const()[val = fp16(0x1.8)];\n        }} -> (y);\n}}"
    ));
    assert!(e.message.contains("'p' exponent"), "{e}");

    let e = parse_err("program(1.3)\n{\n    func main<ios18>(fp16 x) {\n");
    assert_eq!(e.line, 4);
    assert!(e.message.contains("the end of the input"), "{e}");

    let e = parse_err("program(1.3)\n{\n}\ntrailing");
    assert_eq!((e.line, e.column), (4, 1));

    let e = parse_err(&format!("{HEAD}            state<tensor<fp16, [1]>> s = read_state(input = x);\n        }} -> (s);\n}}"));
    assert!(e.message.contains("not supported"), "{e}");
}
