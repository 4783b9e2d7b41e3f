//! The roofline estimate: flops and bytes counted independently here from the shapes, time as
//! `overhead + Σ max(flops/peak, bytes/bandwidth)` with the chip's published figures.

use aneforge::arch::estimate::{estimate, figures, Bound, DISPATCH_US};
use aneforge::arch::AneArch;
use aneforge::graph::{constant, input, DType, HostArray};
use aneforge::lower::ParameterMode;
use aneforge::pipeline::compress;
use aneforge::Target;
use aneforge::{compile_artifact, Compress, ProgramOptions};

fn arch(n: &str) -> AneArch {
    AneArch::new(n).unwrap()
}

#[test]
fn a_large_matmul_is_compute_bound_with_the_expected_time() {
    let (m, k, n) = (512usize, 2048usize, 2048usize);
    let x = input("x", &[m, k], DType::F32).unwrap();
    let w = constant(HostArray::full(&[n, k], 0.01).unwrap());
    let y = x.linear(&w, None).unwrap();
    for a in ["h13", "h14", "h15", "h16", "h17"] {
        let program = compile_artifact(
            &[("y", &y)],
            &ProgramOptions::new(&Target::Ane(arch(a)), ParameterMode::Input),
        )
        .unwrap();
        let e = estimate(program.program(), arch(a));
        let op = e.ops.iter().find(|o| o.op_type == "linear").unwrap();
        let flops = 2.0 * (m * n * k) as f64 + (m * n) as f64;
        assert_eq!(op.flops, flops);
        let bytes = 2.0 * (m * k + n * k + m * n) as f64;
        assert_eq!(op.bytes, bytes);
        let f = figures(arch(a));
        let compute = flops / (f.peak_tflops * 1e12) * 1e6;
        let memory = bytes / (f.bandwidth_gbs * 1e9) * 1e6;
        assert_eq!(op.bound, Bound::Compute, "{a}");
        assert!((op.us - compute.max(memory)).abs() < 1e-9);
        let sum: f64 = e.ops.iter().map(|o| o.us).sum();
        assert!((e.total_us - DISPATCH_US - sum).abs() < 1e-9);
        assert!(e.to_string().contains("not a measurement"));
    }
}

#[test]
fn elementwise_work_is_memory_bound_and_newer_chips_are_faster() {
    let a = input("a", &[64, 4096], DType::F32).unwrap();
    let b = input("b", &[64, 4096], DType::F32).unwrap();
    let y = a.add(&b).unwrap().relu().unwrap();
    let mut last = f64::INFINITY;
    for name in ["m1", "m2", "m4", "m5"] {
        let p = compile_artifact(
            &[("y", &y)],
            &ProgramOptions::new(&Target::Ane(arch(name)), ParameterMode::Input),
        )
        .unwrap();
        let e = estimate(p.program(), arch(name));
        assert!(e.ops.iter().all(|o| o.bound == Bound::Memory), "{e}");
        let add = e.ops.iter().find(|o| o.op_type == "add").unwrap();
        assert_eq!(add.bytes, 3.0 * 2.0 * 64.0 * 4096.0);
        assert!(e.total_us <= last, "{name}: {e}");
        last = e.total_us;
    }
}

#[test]
fn natively_streamed_compression_cuts_the_bytes_of_a_weight_bound_gemv() {
    let x = input("x", &[1, 1024], DType::F32).unwrap();
    let values: Vec<f32> = (0..1024 * 1024)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 500.0)
        .collect();
    let w = constant(HostArray::from_f32(&[1024, 1024], values).unwrap());
    let y = x.linear(&w, None).unwrap();
    let lowered = |a: &str| {
        compile_artifact(
            &[("y", &y)],
            &ProgramOptions::new(&Target::Ane(arch(a)), ParameterMode::Input),
        )
        .unwrap()
    };
    let plain = estimate(lowered("h13").program(), arch("h13"));
    let (lut, _) = compress(lowered("h13"), Compress::Int4).unwrap();
    let native = estimate(lut.program(), arch("h13"));
    assert!(native.bytes() < plain.bytes() * 0.4, "{plain}\n{native}");
    assert!(native.total_us < plain.total_us);
    let (int8, _) = compress(lowered("h13"), Compress::Int8).unwrap();
    let expanded = estimate(int8.program(), arch("h13"));
    assert_eq!(
        expanded.bytes(),
        plain.bytes(),
        "int8 is not streamed on A13"
    );
    let (int8, _) = compress(lowered("h14"), Compress::Int8).unwrap();
    let streamed = estimate(int8.program(), arch("h14"));
    let plain14 = estimate(lowered("h14").program(), arch("h14"));
    assert!(streamed.bytes() < plain14.bytes() * 0.6);
}
