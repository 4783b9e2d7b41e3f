//! Validation: each kind of problem is reported, naming the function and the op.

use aneforge_mil::*;
use std::collections::BTreeMap;

const HEAD: &str = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4]> x) {\n";

fn program(body: &str, outputs: &str) -> Program {
    let text = format!("{HEAD}{body}        }} -> ({outputs});\n}}");
    parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn problems(p: &Program) -> Vec<String> {
    match validate(p) {
        Ok(()) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

fn assert_one_problem(p: &Program, expected: &str) {
    let found = problems(p);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0], expected);
}

#[test]
fn a_well_formed_program_passes() {
    let p = program(
        "            tensor<fp16, [1, 4]> y = relu(x = x)[name = string(\"y\")];\n            \
         int32 ax = const()[name = string(\"ax\"), val = int32(-1)];\n            \
         tensor<fp16, [1, 4]> z = softmax(x = y, axis = ax)[name = string(\"z\")];\n            \
         tensor<fp16, [1, 2]> a, tensor<fp16, [1, 2]> b = split(x = z, num_splits = int32(2), axis = int32(1));\n",
        "z, a",
    );
    assert_eq!(problems(&p), Vec::<String>::new());
}

#[test]
fn undefined_value() {
    let p = program(
        "            tensor<fp16, [1, 4]> y = add(x = x, y = w)[name = string(\"y\")];\n",
        "y",
    );
    assert_one_problem(
        &p,
        "function 'main', op 'y' (add #0): argument 'y' uses 'w', which is not defined before this op",
    );
}

#[test]
fn use_before_definition() {
    let p = program(
        "            tensor<fp16, [1, 4]> y = relu(x = z);\n            tensor<fp16, [1, 4]> z = relu(x = x);\n",
        "y",
    );
    assert_one_problem(
        &p,
        "function 'main', op #0 (relu): argument 'x' uses 'z', which is not defined before this op",
    );
}

#[test]
fn duplicate_names() {
    let p = program(
        "            tensor<fp16, [1, 4]> x = relu(x = x)[name = string(\"r\")];\n",
        "x",
    );
    assert_one_problem(
        &p,
        "function 'main', op 'r' (relu #0): value 'x' is defined more than once",
    );
}

#[test]
fn undefined_function_output() {
    let p = program(
        "            tensor<fp16, [1, 4]> y = relu(x = x);\n",
        "y, q",
    );
    assert_one_problem(
        &p,
        "function 'main', outputs: output 'q' is not defined in the function",
    );
}

#[test]
fn wrong_arity() {
    let p = program(
        "            tensor<fp16, [1, 4]> a, tensor<fp16, [1, 4]> b = relu(x = x)[name = string(\"r\")];\n",
        "a",
    );
    assert_one_problem(
        &p,
        "function 'main', op 'r' (relu #0): relu produces 1 output, but the statement declares 2",
    );
    let p = program(
        "            tensor<fp16, [1, 4]> v = topk(x = x, k = int32(4));\n",
        "v",
    );
    assert_one_problem(
        &p,
        "function 'main', op #0 (topk): topk produces 2 outputs, but the statement declares 1",
    );
}

#[test]
fn unknown_ops_arguments_and_missing_arguments() {
    let p = program(
        "            tensor<fp16, [1, 4]> y = frobnicate(x = x);\n",
        "y",
    );
    assert_one_problem(
        &p,
        "function 'main', op #0 (frobnicate): unknown op type 'frobnicate'",
    );

    let p = program(
        "            tensor<fp16, [1, 4]> y = relu(x = x, alpha = x);\n",
        "y",
    );
    assert_one_problem(
        &p,
        "function 'main', op #0 (relu): relu has no argument 'alpha' (expected one of: x)",
    );

    let p = program(
        "            tensor<fp16, [1, 4]> y = clip(x = x, alpha = fp16(0x0p+0));\n",
        "y",
    );
    assert_one_problem(
        &p,
        "function 'main', op #0 (clip): required argument 'beta' of clip is missing",
    );
}

#[test]
fn op_newer_than_the_function_opset() {
    let text = "program(1.3)\n{\n    func main<ios17>(tensor<fp16, [1, 2, 4]> q) {\n            tensor<fp16, [1, 2, 4]> a = scaled_dot_product_attention(query = q, key = q, value = q);\n        } -> (a);\n}";
    let p = parse(text).unwrap();
    assert_one_problem(
        &p,
        "function 'main', op #0 (scaled_dot_product_attention): scaled_dot_product_attention needs opset ios18 or later, but the function is ios17",
    );
}

#[test]
fn literal_data_problems() {
    let mut p = program(
        "            tensor<int32, [3]> c = const()[val = tensor<int32, [3]>([1, 2, 3])];\n",
        "c",
    );
    let op = &mut p.functions[0].body.operations[0];
    op.attributes[0].1 = Literal::int_tensor(DType::Int32, &[3], vec![1, 2]);
    assert_one_problem(
        &p,
        "function 'main', op #0 (const): inline literal of tensor<int32, [3]> has 2 elements, expected 3",
    );
    let op = &mut p.functions[0].body.operations[0];
    op.attributes[0].1 = Literal::int_tensor(DType::Int32, &[3], vec![1, 2, 1 << 40]);
    assert_one_problem(
        &p,
        "function 'main', op #0 (const): element 2 of a tensor<int32, [3]> literal (1099511627776) is out of range for int32",
    );
    let mut f = Function::new("main", "ios18");
    f.body.operations.push(
        Operation::new("const")
            .with_output("c", TensorType::scalar(DType::Fp16))
            .with_attribute("val", Literal::float(DType::Fp16, 0.1)),
    );
    f.body.outputs.push("c".into());
    let p = Program {
        version: "1.3".into(),
        attributes: vec![],
        functions: vec![f],
    };
    assert_one_problem(
        &p,
        "function 'main', op #0 (const): element 0 of a fp16 literal (1e-1) is not exactly representable in fp16",
    );
}

#[test]
fn const_type_must_match_its_value() {
    let p = program("            tensor<fp16, [2]> c = const()[val = tensor<fp16, [3]>([0x0p+0, 0x0p+0, 0x0p+0])];\n", "c");
    assert_one_problem(
        &p,
        "function 'main', op #0 (const): const 'c' is declared tensor<fp16, [2]> but its value is tensor<fp16, [3]>",
    );
}

#[test]
fn constexpr_arguments_may_be_attributes() {
    let p = program(
        "            tensor<fp16, [2, 2]> w = constexpr_affine_dequantize()[axis = int32(0), quantized_data = tensor<int8, [2, 2]>([[1, 2], [3, 4]]), scale = fp16(0x1p-2), zero_point = int8(0)];\n",
        "w",
    );
    assert_eq!(problems(&p), Vec::<String>::new());
    let p = program(
        "            tensor<fp16, [2, 2]> w = constexpr_affine_dequantize()[axis = int32(0), scale = fp16(0x1p-2), zero_point = int8(0)];\n",
        "w",
    );
    assert_one_problem(
        &p,
        "function 'main', op #0 (constexpr_affine_dequantize): required argument 'quantized_data' of constexpr_affine_dequantize is missing",
    );
}

#[test]
fn blob_references_are_checked_against_descriptors() {
    let mut w = BlobWriter::new();
    let off = w.add_f16(&[half::f16::ONE; 8]);
    let weights = w.finish();
    let mut blobs = BTreeMap::new();
    blobs.insert(
        WEIGHTS_PATH.to_string(),
        BlobFile::from_vec("weight.bin", weights).unwrap(),
    );
    let body = |ty: &str, offset: u64| {
        format!("            {ty} w = const()[val = {ty}(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64({offset})))];\n")
    };
    let good = program(&body("tensor<fp16, [2, 4]>", off), "w");
    assert_eq!(validate_with_blobs(&good, &blobs), Ok(()));

    let wrong_size = program(&body("tensor<fp16, [3, 4]>", off), "w");
    let e = validate_with_blobs(&wrong_size, &blobs).unwrap_err();
    assert_eq!(
        e.0[0].to_string(),
        "function 'main', op #0 (const): BLOBFILE tensor<fp16, [3, 4]>: weight.bin: blob at offset 64 holds 16 payload bytes, but tensor<fp16, [3, 4]> needs 24"
    );
    let wrong_dtype = program(&body("tensor<fp32, [2, 2]>", off), "w");
    let e = validate_with_blobs(&wrong_dtype, &blobs).unwrap_err();
    assert!(
        e.0[0]
            .problem
            .contains("stores fp16, but the program declares fp32"),
        "{e}"
    );
    let wrong_offset = program(&body("tensor<fp16, [2, 4]>", 128), "w");
    let e = validate_with_blobs(&wrong_offset, &blobs).unwrap_err();
    assert!(
        e.0[0].problem.contains("no blob descriptor at offset 128"),
        "{e}"
    );
    let e = validate_with_blobs(&good, &BTreeMap::new()).unwrap_err();
    assert!(e.0[0].problem.contains("is not a loaded blob file"), "{e}");
}

#[test]
fn all_problems_are_reported_together() {
    let p = program(
        "            tensor<fp16, [1, 4]> y = relu(x = nope);\n            tensor<fp16, [1, 4]> y = mystery(x = x);\n",
        "gone",
    );
    let e = validate(&p).unwrap_err();
    assert_eq!(e.0.len(), 4, "{e}");
    assert!(
        e.to_string()
            .starts_with("4 problems:\n  function 'main', op #0 (relu)"),
        "{e}"
    );
}

#[test]
fn the_real_form_fixtures_validate() {
    for name in [
        "compiled_ios18.mil",
        "compiled_ios16_legacy.mil",
        "flexible_multifunction.mil",
        "quantized_constexpr.mil",
    ] {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        let p = parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(validate(&p), Ok(()), "{name}");
    }
}
