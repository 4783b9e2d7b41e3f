//! MIL `quantize` / `dequantize` (iOS17, per-tensor) against coremltools' own definition of the
//! ops (its value inference, `tools/fixtures/w8a8/fake_quant.py`): int8 and uint8 outputs, with
//! and without a zero point, fp32 and fp16 inputs, bit for bit.

use crate::common;
use aneforge_mil::{Argument, DType, Literal, Operation};
use common::*;

fn fixture() -> serde_json::Value {
    let path = format!(
        "{}/../../tools/fixtures/w8a8/out/fake_quant.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn numbers(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// `x → quantize → q → dequantize → y`, both outputs.
fn program(float: DType, int: DType, n: usize, scale: f64, zero: Option<i64>) -> Prog {
    let mut p = Prog::new();
    let x = p.input("x", float, &[n]);
    let lit = |a: Literal| Argument::Literal(a);
    let mut quantize = Operation::new("quantize").with_input("input", Argument::name(&x));
    let mut dequantize = Operation::new("dequantize").with_input("input", Argument::name("q"));
    if let Some(z) = zero {
        quantize = quantize.with_input("zero_point", lit(Literal::int(int, z)));
        dequantize = dequantize.with_input("zero_point", lit(Literal::int(int, z)));
    }
    quantize = quantize
        .with_input("scale", lit(Literal::float(float, scale)))
        .with_input("output_dtype", lit(Literal::string(int.name())))
        .with_output("q", aneforge_mil::TensorType::new(int, &[n]))
        .with_attribute("name", Literal::string("q"));
    dequantize = dequantize
        .with_input("scale", lit(Literal::float(float, scale)))
        .with_output("y", aneforge_mil::TensorType::new(float, &[n]))
        .with_attribute("name", Literal::string("y"));
    p.ops.push(quantize);
    p.ops.push(dequantize);
    p.output("q");
    p.output("y");
    p
}

fn dtype(name: &str) -> DType {
    match name {
        "fp32" => DType::Fp32,
        "fp16" => DType::Fp16,
        "int8" => DType::Int8,
        "uint8" => DType::Uint8,
        other => panic!("fixture dtype {other}"),
    }
}

#[test]
fn quantize_and_dequantize_equal_coremltools_bit_for_bit() {
    let f = fixture();
    let mut cases: Vec<(DType, DType, Option<i64>, &serde_json::Value)> = Vec::new();
    for c in f["cases"].as_array().unwrap() {
        cases.push((dtype(c["dtype"].as_str().unwrap()), DType::Int8, None, c));
    }
    for c in f["affine_cases"].as_array().unwrap() {
        cases.push((
            dtype(c["dtype"].as_str().unwrap()),
            dtype(c["output_dtype"].as_str().unwrap()),
            c["zero_point"].as_i64(),
            c,
        ));
    }
    assert_eq!(cases.len(), 10);
    for (float, int, zero, c) in cases {
        let x = numbers(&c["x"]);
        let p = program(float, int, x.len(), c["scale"].as_f64().unwrap(), zero);
        let out = run(&p, &[("x", float, x.clone())]);
        let what = format!("{float} -> {int}, zero point {zero:?}");
        assert_eq!(out["q"], numbers(&c["q"]), "{what}: q");
        // The fixture's values are f32 (or f16) exact; serde_json's parse may be an f64 ulp off.
        let (y, want) = (&out["y"], numbers(&c["y"]));
        for (i, (&g, &w)) in y.iter().zip(&want).enumerate() {
            assert!(
                g as f32 == w as f32,
                "{what}: y[{i}] = {g}, coremltools {w} (x {})",
                x[i]
            );
        }
    }
}

fn compile_error(p: &Prog) -> String {
    aneforge_cpu::compile(
        &p.build(),
        "main",
        &aneforge_cpu::BlobStore::new(),
        &aneforge_cpu::CompileOptions::default(),
    )
    .err()
    .unwrap()
    .to_string()
}

#[test]
fn per_axis_and_vector_parameters_are_refused_by_name() {
    let mut p = program(DType::Fp32, DType::Int8, 4, 0.5, None);
    p.ops[0] = p.ops[0]
        .clone()
        .with_input("axis", Argument::Literal(Literal::int(DType::Int32, 0)));
    let e = compile_error(&p);
    assert!(e.contains("per-axis") && e.contains("quantize"), "{e}");
    let mut p = program(DType::Fp32, DType::Int8, 4, 0.5, None);
    let vector = Literal::float_tensor(DType::Fp32, &[4], vec![0.5; 4]);
    p.ops[1].inputs.retain(|(k, _)| k != "scale");
    p.ops[1] = p.ops[1]
        .clone()
        .with_input("scale", Argument::Literal(vector));
    let e = compile_error(&p);
    assert!(
        e.contains("dequantize") && e.contains("scalar") && e.contains("[4]"),
        "{e}"
    );
}
