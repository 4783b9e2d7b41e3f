//! fp16 range rules: normalisations over rows whose squares are far past fp16's 65504 (LLM
//! residual streams reach 2.5e4) compiled for ANE targets and run with the CPU engine's fp16
//! semantics, against f64 references, with f32 and with fp16 accumulation.

use aneforge::engine::HostSlice;
use aneforge::engine::{Accumulation, EngineOptions};
use aneforge::graph::{input, HostArray};
use aneforge::pipeline::preflight;
use aneforge::{compile_named, AneArch, CompileOptions, Engine, Model, Target, Tensor};
use half::f16;

/// Rows of width `w`: one with a 3e4 "massive activation" channel among values near 1, one of
/// values near 1e-3, one of values near 300 (squares past fp16 everywhere), one ordinary row.
fn rows(w: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(4 * w);
    let wave = |j: usize, s: f32| s * ((j as f32 * 0.37).sin() + 0.3 * (j as f32 * 1.9).cos());
    for j in 0..w {
        v.push(if j == 7 { -3.0e4 } else { wave(j, 1.0) });
    }
    v.extend((0..w).map(|j| wave(j, 1e-3)));
    v.extend((0..w).map(|j| 300.0 + wave(j, 40.0)));
    v.extend((0..w).map(|j| wave(j, 2.0)));
    v.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
}

fn weight(w: usize) -> Vec<f32> {
    (0..w).map(|j| 0.5 + (j % 7) as f32 * 0.1).collect()
}

type Reference = fn(&[f64], &[f64]) -> Vec<f64>;

fn rms(x: &[f64], g: &[f64]) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + 1e-5).sqrt();
    x.iter().zip(g).map(|(v, g)| v * inv * g).collect()
}

fn rms_sum(x: &[f64], _: &[f64]) -> Vec<f64> {
    let s = x.iter().map(|v| v * v).sum::<f64>();
    let inv = 1.0 / (s + 1e-6).sqrt();
    x.iter().map(|v| v * inv).collect()
}

fn layer(x: &[f64], g: &[f64]) -> Vec<f64> {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let inv = 1.0 / (var + 1e-5).sqrt();
    x.iter()
        .zip(g)
        .map(|(v, g)| (v - mean) * inv * g + 0.25)
        .collect()
}

fn l2(x: &[f64], _: &[f64]) -> Vec<f64> {
    let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
    x.iter().map(|v| v / norm).collect()
}

fn graph(kind: &str, x: &Tensor, g: &Tensor) -> Tensor {
    let w = x.shape()[1];
    let beta = aneforge::graph::constant(HostArray::from_f32(&[w], vec![0.25; w]).unwrap());
    match kind {
        "rms_norm" => x.rms_norm(Some(g), 1e-5).unwrap(),
        // as ONNX exports write it: x / sqrt(mean(x·x) + eps) · g
        "onnx_rms" => x
            .div(
                &x.mul(x)
                    .unwrap()
                    .mean(&[-1], true)
                    .unwrap()
                    .add_scalar(1e-5)
                    .unwrap()
                    .sqrt()
                    .unwrap(),
            )
            .unwrap()
            .mul(g)
            .unwrap(),
        "sum_rms" => x
            .mul(
                &x.square()
                    .unwrap()
                    .sum(&[-1], true)
                    .unwrap()
                    .add_scalar(1e-6)
                    .unwrap()
                    .rsqrt()
                    .unwrap(),
            )
            .unwrap(),
        "layer_norm" => x.layer_norm(&[-1], Some(g), Some(&beta), 1e-5).unwrap(),
        "l2_normalize" => x.l2_normalize(-1, 1e-12).unwrap(),
        other => panic!("{other}"),
    }
}

fn run(model: &mut Model, x: &[f32]) -> Vec<f32> {
    model.set_input("x", HostSlice::F32(x)).unwrap();
    model.execute().unwrap();
    model.read_output_f32("y").unwrap()
}

#[test]
fn normalisations_of_rows_past_fp16_range_stay_accurate_on_ane_targets() {
    let cases: [(&str, Reference); 5] = [
        ("rms_norm", rms),
        ("onnx_rms", rms),
        ("sum_rms", rms_sum),
        ("layer_norm", layer),
        ("l2_normalize", l2),
    ];
    for w in [576, 1024] {
        let x = rows(w);
        // rows 0 and 2 have squares (row 2: sums of squares) past fp16's range, so an unscaled
        // program overflows on them
        let sum_sq = |r: usize| x[r * w..(r + 1) * w].iter().map(|v| v * v).sum::<f32>();
        assert!(f16::from_f32(sum_sq(0)).is_infinite() && f16::from_f32(sum_sq(2)).is_infinite());
        let gw = weight(w);
        for (kind, reference) in cases {
            let xt = input("x", &[4, w], aneforge::DType::F32).unwrap();
            let g = aneforge::graph::constant(HostArray::from_f32(&[w], gw.clone()).unwrap());
            let y = graph(kind, &xt, &g);
            for arch in ["h16", "m1"] {
                let target = Target::Ane(arch.parse::<AneArch>().unwrap());
                let opts = CompileOptions {
                    target,
                    engine: Engine::Cpu,
                    ..CompileOptions::default()
                };
                let model = compile_named(&[("y", &y)], &opts).unwrap();
                assert!(
                    model.mil_text().contains("reduce_max"),
                    "{kind} on {arch}: the row is not rescaled"
                );
                for acc in [Accumulation::F32, Accumulation::F16] {
                    let mut m = Model::load_function_with(
                        model.artifact().clone(),
                        "main",
                        Engine::Cpu,
                        EngineOptions {
                            accumulation: acc,
                            ..EngineOptions::default()
                        },
                    )
                    .unwrap();
                    let got = run(&mut m, &x);
                    let g64: Vec<f64> = gw.iter().map(|&v| f64::from(v)).collect();
                    for r in 0..4 {
                        let xr: Vec<f64> = x[r * w..(r + 1) * w]
                            .iter()
                            .map(|&v| f64::from(v))
                            .collect();
                        let want = reference(&xr, &g64);
                        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
                        let err = got[r * w..(r + 1) * w]
                            .iter()
                            .zip(&want)
                            .fold(0f64, |m, (&a, b)| m.max((f64::from(a) - b).abs()));
                        // fp16 keeps 11 significant bits and a handful of ops round each element;
                        // the row of 300 ± 40 loses most (its offset is rounded with it), and
                        // fp16 running sums lose more
                        let bound = if acc == Accumulation::F32 { 8e-3 } else { 2e-2 };
                        assert!(
                            err <= bound * scale,
                            "{kind} w={w} {arch} {acc:?} row {r}: max error {err:e} of {scale:e}"
                        );
                    }
                }
            }
        }
    }
}

/// Sums of squares the rules cannot rescale (their result itself is wanted) and unshifted `exp`
/// are named by preflight; rewritten normalisations are not.
#[test]
fn preflight_names_what_stays_unscaled() {
    let arch = AneArch::new("h16").unwrap();
    let x = input("x", &[4, 576], aneforge::DType::F32).unwrap();
    let energy = x.square().unwrap().sum(&[-1], true).unwrap();
    let report = preflight(&[("y", &energy)], arch).unwrap();
    let text = report.to_string();
    assert!(
        text.contains("reduce_sum of squares over 576 values is not rescaled")
            && text.contains("exceeds 11"),
        "{text}"
    );
    let report = preflight(&[("y", &x.exp().unwrap())], arch).unwrap();
    assert!(
        report.to_string().contains("exp of an unshifted value"),
        "{report}"
    );
    let normed = x.rms_norm(None, 1e-5).unwrap();
    let soft = x.log_softmax(-1).unwrap();
    let report = preflight(&[("y", &normed), ("z", &soft)], arch).unwrap();
    assert!(!report.to_string().contains("not rescaled"), "{report}");
    assert!(!report.to_string().contains("unshifted"), "{report}");
}
