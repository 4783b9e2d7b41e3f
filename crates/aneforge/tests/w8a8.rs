//! W8A8: the `fake_quant` op (MIL `quantize` → `dequantize`) against coremltools' definition of
//! those ops, and the W8A8 compile (calibration, int8 weights, the accuracy gate) against a
//! PyTorch fake-quantized model (`tools/fixtures/w8a8/`).

mod common;

use aneforge::engine::{HostSlice, HostTensor};
use aneforge::graph::{constant, input, Conv2dParams, DType, HostArray, Tensor};
use aneforge::{
    compile_program, AneArch, Calibration, CompileError, Compiled, Compress, Engine, FunctionSpec,
    Model, ParameterMode, ProgramOptions, Quantize, Target, W8A8,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tools/fixtures/w8a8/out/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn run_one(outputs: &[(&str, &Tensor)], target: Target, x: &[f32]) -> Vec<f32> {
    let artifact = aneforge::compile_artifact(
        outputs,
        &ProgramOptions::new(&target, ParameterMode::Constant),
    )
    .unwrap();
    let mut m = Model::load(Arc::new(artifact), Engine::Cpu).unwrap();
    let out = m.run(&[("x", HostSlice::F32(x))]).unwrap();
    match &out[0] {
        HostTensor::F32(v) => v.clone(),
        HostTensor::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
        other => panic!("unexpected output {other:?}"),
    }
}

fn h16() -> AneArch {
    AneArch::new("h16").unwrap()
}

#[test]
fn fake_quant_equals_coremltools_quantize_dequantize_bit_for_bit() {
    let f = fixture("fake_quant.json");
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6);
    for case in cases {
        let (name, dtype) = (
            case["name"].as_str().unwrap(),
            case["dtype"].as_str().unwrap(),
        );
        let x = floats(&case["x"]);
        let want = floats(&case["y"]);
        let scale = case["scale"].as_f64().unwrap() as f32;
        let t = input("x", &[x.len()], DType::F32).unwrap();
        let y = t.fake_quant(scale).unwrap();
        let target = match dtype {
            "fp32" => Target::Cpu,
            _ => Target::Ane(h16()),
        };
        let got = run_one(&[("y", &y)], target, &x);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits() & 0x7fff_ffff,
                w.to_bits() & 0x7fff_ffff,
                "{name} {dtype} element {i}: x {} scale {scale}: got {g}, coremltools {w}",
                x[i]
            );
        }
    }
}

#[test]
fn fake_quant_emits_ios17_quantize_then_dequantize() {
    let x = input("x", &[2, 8], DType::F32).unwrap();
    let y = x.fake_quant(0.125).unwrap();
    let artifact = aneforge::compile_artifact(
        &[("y", &y)],
        &ProgramOptions::new(&Target::Ane(h16()), ParameterMode::Constant),
    )
    .unwrap();
    common::dump_package(&artifact, "w8a8_fake_quant_fp16");
    let text = artifact.mil_text();
    let q = text.find("tensor<int8, [2, 8]>").expect(text);
    let quantize = text.find("= quantize(input = x").expect(text);
    let dequantize = text.find("= dequantize(input = ").expect(text);
    assert!(q < quantize && quantize < dequantize, "{text}");
    assert!(text.contains("output_dtype = string(\"int8\")"), "{text}");
}

#[test]
fn fake_quant_below_the_a16_family_is_refused() {
    let x = input("x", &[2, 8], DType::F32).unwrap();
    let y = x.fake_quant(0.125).unwrap();
    let e = aneforge::compile_artifact(
        &[("y", &y)],
        &ProgramOptions::new(
            &Target::Ane(AneArch::new("m3").unwrap()),
            ParameterMode::Constant,
        ),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("fake_quant") && e.contains("A16"), "{e}");
    let e = x.fake_quant(0.0).unwrap_err().to_string();
    assert!(e.contains("scale 0"), "{e}");
}

/// A fixture network: its graph, calibration samples, test input and torch's outputs.
struct Net {
    y: Tensor,
    calibration: Calibration,
    test_x: Vec<f32>,
    fixture: Value,
}

fn net(name: &str) -> Net {
    let f = fixture(&format!("{name}.json"));
    let dims = |k: &str| -> Vec<usize> {
        f["shapes"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect()
    };
    let c = |k: &str, shape: &[usize]| constant(HostArray::from_f32(shape, floats(&f[k])).unwrap());
    let (s1, s2) = (dims("w1"), dims("w2"));
    let x = input("x", &dims("x"), DType::F32).unwrap();
    let (w1, b1) = (c("w1", &s1), c("b1", &[s1[0]]));
    let (w2, b2) = (c("w2", &s2), c("b2", &[s2[0]]));
    let y = if name == "conv" {
        let pad = Conv2dParams {
            padding: [1, 1],
            ..Conv2dParams::default()
        };
        let h = x.conv2d(&w1, Some(&b1), pad).unwrap().relu().unwrap();
        h.conv2d(&w2, Some(&b2), Conv2dParams::default()).unwrap()
    } else {
        let h = x.linear(&w1, Some(&b1)).unwrap().relu().unwrap();
        h.linear(&w2, Some(&b2)).unwrap()
    };
    let samples = f["shapes"]["samples"].as_u64().unwrap() as usize;
    let calibration = Calibration::stacked("x", samples, &floats(&f["calibration"])).unwrap();
    let test_x = floats(&f["x"]);
    Net {
        y,
        calibration,
        test_x,
        fixture: f,
    }
}

fn mlp() -> Net {
    net("mlp")
}

fn w8a8(
    y: &Tensor,
    target: &str,
    calibration: Calibration,
    min_cosine: f64,
) -> Result<Compiled, CompileError> {
    let mut w = W8A8::new(calibration);
    w.min_cosine = min_cosine;
    compile_program(
        &[FunctionSpec {
            name: "main",
            outputs: &[("y", y)],
        }],
        &ProgramOptions {
            target: Target::Ane(AneArch::new(target).unwrap()),
            parameters: ParameterMode::Constant,
            quantize: Quantize::W8A8(w),
            ..ProgramOptions::default()
        },
    )
}

/// Compiles fixture network `name` with W8A8 for h16 and compares it with torch's W8A8 model.
fn matches_torch(name: &str, ops: &[&str]) {
    let m = net(name);
    let compiled = w8a8(&m.y, "h16", m.calibration.clone(), 0.99).unwrap();
    let q = compiled.report.quantization.clone().unwrap();
    let want_scales = floats(&m.fixture["scales"]);
    let got_scales: Vec<f32> = q.activations.iter().map(|a| a.scale.unwrap()).collect();
    assert_eq!(got_scales, want_scales, "{q}");
    assert_eq!(q.activations[0].input.as_deref(), Some("x"));
    assert!(q.cosines[0].1 >= 0.99, "{q}");
    common::dump_package(&compiled.segments[0].artifact, &format!("w8a8_{name}"));
    let text = compiled.segments[0].artifact.mil_text().to_string();
    assert_eq!(text.matches("= quantize(").count(), 2, "{text}");
    for op in ops {
        assert_eq!(text.matches(&format!("= {op}(")).count(), 2, "{op}: {text}");
    }
    assert_eq!(
        text.matches("constexpr_affine_dequantize").count(),
        2,
        "{text}"
    );
    let feeds = HashMap::from([("x".to_string(), m.test_x.clone())]);
    let got = &compiled.run_cpu(&feeds).unwrap()["y"];
    assert_eq!(got.len(), floats(&m.fixture["y_w8a8"]).len());
    let want = floats(&m.fixture["y_w8a8"]);
    let max_y = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    let max_w2 = floats(&m.fixture["w2"])
        .iter()
        .fold(0f32, |a, v| a.max(v.abs()));
    let diff = |r: &[f32]| -> Vec<f32> { got.iter().zip(r).map(|(g, w)| (g - w).abs()).collect() };
    let to_w8a8 = diff(&want);
    let worst = to_w8a8.iter().copied().fold(0f32, f32::max);
    // The program computes in fp16, the reference in fp32 over the same quantized values: the
    // fp16 roundings (inputs, products s·q, outputs) stay within a few 2^-11 of max |y|, and a
    // hidden activation whose fp16 value crosses a rounding boundary of its quantizer moves one
    // quantum (s2), moving each output it feeds by at most s2 · max|w2|; two such crossings per
    // output are allowed.
    let s2 = want_scales[1];
    let tol = 4.0 * 2f32.powi(-11) * max_y + 2.0 * s2 * max_w2;
    assert!(worst <= tol, "max |aneforge - torch| {worst} > {tol}");
    // And the program computes the quantized function, not the float one: on average it is far
    // closer to torch's W8A8 model than torch's W8A8 model is to its fp32 model.
    let mean = |d: &[f32]| d.iter().map(|&v| f64::from(v)).sum::<f64>() / d.len() as f64;
    let want_fp32 = floats(&m.fixture["y_fp32"]);
    let quantization: Vec<f32> = want
        .iter()
        .zip(&want_fp32)
        .map(|(a, b)| (a - b).abs())
        .collect();
    assert!(
        mean(&to_w8a8) < 0.25 * mean(&quantization),
        "mean |aneforge - torch w8a8| {} vs mean |torch w8a8 - torch fp32| {}",
        mean(&to_w8a8),
        mean(&quantization)
    );
    eprintln!(
        "{name}: max |aneforge - torch w8a8| {worst} (bound {tol}); mean {} against {} for torch w8a8 vs fp32",
        mean(&to_w8a8),
        mean(&quantization)
    );
}

#[test]
fn w8a8_mlp_matches_torch_fake_quantization_with_the_same_scales() {
    matches_torch("mlp", &["linear", "constexpr_affine_dequantize"]);
}

#[test]
fn w8a8_conv_net_matches_torch_fake_quantization_with_the_same_scales() {
    matches_torch("conv", &["conv", "constexpr_affine_dequantize"]);
}

#[test]
fn the_gate_refuses_a_bound_the_program_misses_and_names_it() {
    let m = mlp();
    let e = w8a8(&m.y, "h16", m.calibration.clone(), 0.999_999_9).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, CompileError::QuantizeGate { .. }), "{text}");
    assert!(
        text.contains("output 'y'") && text.contains("0.9999999"),
        "{text}"
    );
    assert!(text.contains("'linear_"), "{text}");
}

#[test]
fn w8a8_refuses_targets_and_calibrations_it_cannot_use() {
    let m = mlp();
    let e = w8a8(&m.y, "m3", m.calibration.clone(), 0.99)
        .unwrap_err()
        .to_string();
    assert!(e.contains("m3") || e.contains("h15"), "{e}");
    assert!(e.contains("A16"), "{e}");
    let e = w8a8(
        &m.y,
        "h16",
        Calibration::stacked("x", 2, &[0.5; 10]).unwrap(),
        0.99,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("'x'") && e.contains("[4, 32]") && e.contains("got 5"),
        "{e}"
    );
    for (count, len) in [(3, 10), (0, 10), (2, 0)] {
        let e = Calibration::stacked("x", count, &vec![0.5; len])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{len} calibration values of input 'x'"))
                && e.contains(&format!("{count} equal samples")),
            "{e}"
        );
    }
    let e = w8a8(
        &m.y,
        "h16",
        Calibration::stacked("z", 1, &[0.5; 128]).unwrap(),
        0.99,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("'z'"), "{e}");
    let e = w8a8(&m.y, "h16", Calibration::new(), 0.99)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no samples"), "{e}");
    let e = compile_program(
        &[FunctionSpec {
            name: "main",
            outputs: &[("y", &m.y)],
        }],
        &ProgramOptions {
            target: Target::Ane(h16()),
            compress: Compress::Int4,
            quantize: Quantize::W8A8(W8A8::new(m.calibration.clone())),
            ..ProgramOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("Int4"), "{e}");
}

#[test]
fn the_op_catalog_and_the_legalizer_agree_on_fake_quant() {
    use aneforge::arch::Family;
    use aneforge::legalize::catalog::{graph_ops, Status};
    use aneforge::legalize::legalize;
    let x = input("x", &[2, 8], DType::F32).unwrap();
    let y = x.fake_quant(0.5).unwrap();
    for family in Family::ALL {
        let row = graph_ops(family)
            .into_iter()
            .find(|r| r.op == "fake_quant")
            .unwrap();
        let legal = legalize(&[("y", &y)], family.base_arch()).report.is_legal();
        assert_eq!(row.status == Status::Native, legal, "{family}: {row:?}");
        assert_eq!(legal, family >= Family::A16, "{family}");
    }
}

#[test]
fn fake_quant_gradient_is_pytorchs_straight_through_estimator() {
    let f = fixture("fake_quant.json");
    let mut checked = 0;
    for case in f["cases"].as_array().unwrap() {
        let Some(want) = case.get("torch_grad") else {
            continue;
        };
        let want = floats(want);
        let x = floats(&case["x"]);
        let scale = case["scale"].as_f64().unwrap() as f32;
        let t = input("x", &[x.len()], DType::F32).unwrap();
        let loss = t.fake_quant(scale).unwrap().sum(&[0], false).unwrap();
        let grad = aneforge::autograd::backward(&loss, std::slice::from_ref(&t)).unwrap();
        let got = run_one(&[("g", &grad[0])], Target::Cpu, &x);
        assert_eq!(got, want, "{}: x {x:?}", case["name"]);
        checked += 1;
    }
    assert_eq!(checked, 3);
}
