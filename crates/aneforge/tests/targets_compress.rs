//! Weight compression of ANE programs: native formats per family under `auto`, explicit modes
//! honoured anywhere, the accuracy gate, and the blockwise format decoded independently from
//! its op definition (`constexpr_blockwise_shift_scale`: output = scale · data, block-repeated).

mod common;

use aneforge::arch::native_schemes;
use aneforge::arch::{check_program, AneArch, Family};
use aneforge::graph::{constant, input, DType, HostArray, Tensor};
use aneforge::lower::{Artifact, ParameterMode, BLOB_PATH};
use aneforge::pipeline::{compress, GATE_REL};
use aneforge::CompileError;
use aneforge::Target;
use aneforge::{compile_artifact, Compress, ProgramOptions};
use aneforge_mil::encode::Scheme;
use aneforge_mil::{Argument, BlobFile, Literal};
use half::f16;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

struct Model {
    x: Tensor,
    y: Tensor,
    dense: Vec<f32>,
}

/// `relu(x W1ᵀ) W2ᵀ` with a dense W1 [256, 128] and a W2 [64, 256] that is 75% zeros.
fn model(seed: u64) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    let dense: Vec<f32> = (0..256 * 128)
        .map(|_| rng.random_range(-0.5..0.5))
        .collect();
    let sparse: Vec<f32> = (0..64 * 256)
        .map(|i| {
            if i % 4 == 0 {
                rng.random_range(-0.5..0.5)
            } else {
                0.0
            }
        })
        .collect();
    let w1 = constant(HostArray::from_f32(&[256, 128], dense.clone()).unwrap());
    let w2 = constant(HostArray::from_f32(&[64, 256], sparse).unwrap());
    let x = input("x", &[2, 128], DType::F32).unwrap();
    let y = x
        .linear(&w1, None)
        .unwrap()
        .relu()
        .unwrap()
        .linear(&w2, None)
        .unwrap();
    Model { x, y, dense }
}

fn lowered(m: &Model, arch: &str) -> Artifact {
    let _ = &m.x;
    compile_artifact(
        &[("y", &m.y)],
        &ProgramOptions::new(
            &Target::Ane(AneArch::new(arch).unwrap()),
            ParameterMode::Input,
        ),
    )
    .unwrap()
}

#[test]
fn auto_picks_only_formats_the_family_streams() {
    let m = model(1);
    for (arch, family) in [
        ("h13", Family::A13),
        ("h14", Family::A14),
        ("h15", Family::A15),
        ("h16", Family::A16),
    ] {
        let plain = lowered(&m, arch);
        let before = plain.weights().len();
        let (c, report) = compress(plain, Compress::Auto).unwrap();
        assert_eq!(report.weights.len(), 2, "{report}");
        for w in &report.weights {
            assert!(
                w.scheme == Scheme::Fp16 || native_schemes(family).contains(&w.scheme),
                "{arch}: {report}"
            );
            assert!(w.native);
        }
        assert_eq!(report.weights[1].scheme, Scheme::Sparse, "{report}");
        assert!(c.weights().len() < before / 2, "{report}");
        assert!(check_program(c.program(), AneArch::new(arch).unwrap()).is_empty());
        aneforge_mil::parse(c.mil_text()).unwrap();
    }
}

#[test]
fn explicit_modes_are_honoured_on_any_family() {
    let m = model(2);
    for (mode, scheme) in [
        (Compress::Blockwise, Scheme::Blockwise),
        (Compress::Int8, Scheme::Int8),
        (Compress::Int4, Scheme::Int4Lut),
    ] {
        let (c, report) = compress(lowered(&m, "h13"), mode).unwrap();
        let w = &report.weights[0];
        assert_eq!(w.scheme, scheme, "{report}");
        assert_eq!(w.native, scheme == Scheme::Int4Lut, "{report}");
        assert!(w.max_abs_error <= GATE_REL * 0.5, "{report}");
        let ops: Vec<&str> = c.program().functions[0]
            .body
            .operations
            .iter()
            .map(|o| o.op_type.as_str())
            .collect();
        assert!(ops.contains(&scheme.op_type()), "{ops:?}");
    }
}

#[test]
fn blockwise_weights_decode_to_the_original_within_the_gate() {
    let m = model(3);
    let (c, report) = compress(lowered(&m, "h16"), Compress::Blockwise).unwrap();
    let blob = BlobFile::parse(BLOB_PATH, c.weights().clone()).unwrap();
    let op = c.program().functions[0]
        .body
        .operations
        .iter()
        .find(|o| o.op_type == "constexpr_blockwise_shift_scale")
        .expect("a blockwise weight");
    let payload = |name: &str| match op.input(name) {
        Some(Argument::Literal(Literal::Blob { ty, offset, .. })) => {
            (ty.clone(), blob.payload(*offset, ty).unwrap().to_vec())
        }
        other => panic!("{name}: {other:?}"),
    };
    let (data_ty, data) = payload("data");
    let (scale_ty, scale) = payload("scale");
    assert_eq!(data_ty.dtype, aneforge_mil::DType::Int4);
    let shape = data_ty.static_shape().unwrap();
    let sshape = scale_ty.static_shape().unwrap();
    assert_eq!(shape, [256, 128]);
    let block: Vec<usize> = shape.iter().zip(&sshape).map(|(d, s)| d / s).collect();
    let scales: Vec<f64> = scale
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64())
        .collect();
    let mut worst = 0f64;
    for r in 0..256 {
        for col in 0..128 {
            let i = r * 128 + col;
            let nibble = (data[i / 2] >> (4 * (i % 2))) & 0x0f;
            let q = f64::from(((nibble << 4) as i8) >> 4);
            let s = scales[(r / block[0]) * sshape[1] + col / block[1]];
            let decoded = f16::from_f64(s * q).to_f64();
            worst = worst.max((decoded - f64::from(m.dense[i])).abs());
        }
    }
    let max = m.dense.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs()));
    assert!(worst <= GATE_REL * max, "worst {worst}");
    // fp16 input rounding is the only difference from the encoder's own measurement.
    assert!(
        (worst - report.weights[0].max_abs_error).abs() < 1e-3,
        "{report}"
    );
}

#[test]
fn the_gate_declines_formats_that_lose_outliers() {
    let mut rng = StdRng::seed_from_u64(4);
    let mut values: Vec<f32> = (0..128 * 64)
        .map(|_| rng.random_range(-0.01..0.01))
        .collect();
    for i in (0..values.len()).step_by(97) {
        values[i] = if i % 2 == 0 { 1.0 } else { -0.7 };
    }
    let w = constant(HostArray::from_f32(&[128, 64], values).unwrap());
    let x = input("x", &[1, 64], DType::F32).unwrap();
    let y = x.linear(&w, None).unwrap();
    let plain = compile_artifact(
        &[("y", &y)],
        &ProgramOptions::new(
            &Target::Ane(AneArch::new("h14").unwrap()),
            ParameterMode::Input,
        ),
    )
    .unwrap();
    let (_, report) = compress(plain, Compress::Auto).unwrap();
    let choice = &report.weights[0];
    assert!(!choice.declines.is_empty(), "{report}");
    assert!(choice.max_abs_error <= GATE_REL, "{report}");
    assert!(report.to_string().contains("declined"), "{report}");
}

#[test]
fn cpu_programs_are_not_compressed() {
    let m = model(5);
    let cpu = compile_artifact(
        &[("y", &m.y)],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap();
    let err = compress(cpu, Compress::Auto).unwrap_err();
    assert!(matches!(err, CompileError::CompressCpu), "{err}");
    let cpu = compile_artifact(
        &[("y", &m.y)],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap();
    assert!(compress(cpu, Compress::None).is_ok());
}

fn run_cpu(a: &Artifact, x: &[f32]) -> Vec<f32> {
    let plan = aneforge_cpu::compile(
        a.program(),
        "main",
        &a.blob_store().unwrap(),
        &aneforge_cpu::CompileOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut inst = plan.instantiate();
    inst.set_input("x", aneforge_cpu::HostSlice::F32(x))
        .unwrap();
    inst.execute().unwrap();
    inst.read_output_f32("y").unwrap()
}

#[test]
fn compressed_programs_execute_within_the_gate_on_the_cpu_engine() {
    let mut rng = StdRng::seed_from_u64(6);
    let dense: Vec<f32> = (0..96 * 128).map(|_| rng.random_range(-0.5..0.5)).collect();
    let sparse: Vec<f32> = dense
        .iter()
        .enumerate()
        .map(|(i, &v)| if i % 3 == 0 { v } else { 0.0 })
        .collect();
    let x: Vec<f32> = (0..2 * 128).map(|_| rng.random_range(-1.0..1.0)).collect();
    for (weights, mode) in [
        (&dense, Compress::Int8),
        (&dense, Compress::Int4),
        (&dense, Compress::Blockwise),
        (&sparse, Compress::Sparse),
        (&dense, Compress::Auto),
    ] {
        let w = constant(HostArray::from_f32(&[96, 128], weights.clone()).unwrap());
        let input_x = input("x", &[2, 128], DType::F32).unwrap();
        let y = input_x.linear(&w, None).unwrap();
        let plain = compile_artifact(
            &[("y", &y)],
            &ProgramOptions::new(
                &Target::Ane(AneArch::new("h16").unwrap()),
                ParameterMode::Input,
            ),
        )
        .unwrap();
        let want = run_cpu(&plain, &x);
        let (c, report) = compress(plain, mode).unwrap();
        common::dump_package(&c, &format!("compress_{mode:?}"));
        let err = report.weights[0].max_abs_error;
        let got = run_cpu(&c, &x);
        let moved = got.iter().zip(&want).any(|(a, b)| a != b);
        assert_eq!(moved, err > 0.0, "{mode:?}: {report}");
        for row in 0..2 {
            let l1: f64 = x[row * 128..(row + 1) * 128]
                .iter()
                .map(|&v| f64::from(v).abs())
                .sum();
            for col in 0..96 {
                let i = row * 96 + col;
                let d = f64::from((got[i] - want[i]).abs());
                // Weight error through the dot product, plus fp16 rounding of the result.
                let bound = l1 * err + 1e-2 * f64::from(want[i].abs()).max(1.0);
                assert!(
                    d <= bound,
                    "{mode:?} y[{i}]: |{} - {}| > {bound}",
                    got[i],
                    want[i]
                );
            }
        }
    }
}

#[test]
fn compile_options_compress_ane_models() {
    use aneforge::engine::HostSlice;
    use aneforge::{compile_named, CompileOptions};
    let m = model(7);
    let ane = |compress| CompileOptions {
        target: Target::Ane(AneArch::new("h15").unwrap()),
        compress,
        ..CompileOptions::default()
    };
    let x: Vec<f32> = (0..256)
        .map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0)
        .collect();
    let mut outs = Vec::new();
    for mode in [Compress::None, Compress::Auto] {
        let mut model = compile_named(&[("y", &m.y)], &ane(mode)).unwrap();
        model.set_input("x", HostSlice::F32(&x)).unwrap();
        model.execute().unwrap();
        outs.push((model.weights().len(), model.read_output_f32("y").unwrap()));
    }
    assert!(outs[1].0 < outs[0].0 / 2, "auto must shrink the weights");
    let scale = outs[0].1.iter().fold(1f32, |a, v| a.max(v.abs()));
    let worst = outs[0]
        .1
        .iter()
        .zip(&outs[1].1)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 0.1 * scale, "worst {worst} of {scale}");
    let cpu = CompileOptions {
        compress: Compress::Auto,
        ..CompileOptions::default()
    };
    let err = compile_named(&[("y", &m.y)], &cpu).unwrap_err().to_string();
    assert!(err.contains("ANE programs"), "{err}");
}
