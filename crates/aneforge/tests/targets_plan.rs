//! Compile plans: wide vocabulary heads tiled into separate ports and concatenated on the host,
//! weight-heavy graphs cut into segments that pass activations through the host; both executed
//! on the CPU engine against the direct fp32 program of the same graph.

use aneforge::arch::{check_program, AneArch};
use aneforge::graph::{constant, input, DType, HostArray, Tensor};
use aneforge::lower::ParameterMode;
use aneforge::pipeline::{Source, WEIGHT_CEILING};
use aneforge::{
    compile_artifact, compile_program, CompileError, Compiled, Compress, FunctionSpec,
    ProgramOptions, Target,
};
use aneforge_cpu::{compile, CompileOptions, HostSlice};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;

fn rand_vec(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

fn weight(rng: &mut StdRng, shape: &[usize], scale: f32) -> Tensor {
    let n = shape.iter().product();
    constant(HostArray::from_f32(shape, rand_vec(rng, n, -scale, scale)).unwrap())
}

/// The fp32 CPU-target program of the same outputs, run directly.
fn reference(outputs: &[(&str, &Tensor)], feeds: &HashMap<String, Vec<f32>>) -> Vec<Vec<f32>> {
    let a = compile_artifact(
        outputs,
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap();
    let plan = compile(
        a.program(),
        "main",
        &a.blob_store().unwrap(),
        &CompileOptions::default(),
    )
    .unwrap();
    let mut inst = plan.instantiate();
    for p in a.inputs() {
        inst.set_input(&p.name, HostSlice::F32(&feeds[&p.name]))
            .unwrap();
    }
    inst.execute().unwrap();
    a.outputs()
        .iter()
        .map(|p| inst.read_output_f32(&p.name).unwrap())
        .collect()
}

fn close(name: &str, want: &[f32], got: &[f32], tol: f32) {
    assert_eq!(want.len(), got.len(), "{name}");
    let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
    let worst = want
        .iter()
        .zip(got)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        worst <= tol * scale,
        "{name}: max diff {worst} (scale {scale})"
    );
}

#[test]
fn wide_vocabulary_heads_are_tiled_under_the_family_cap() {
    let mut rng = StdRng::seed_from_u64(21);
    let h = input("h", &[1, 2, 16], DType::F32).unwrap();
    for (vocab, arch, tiles) in [
        (50257, "h13", 4),
        (50257, "h16", 1),
        (151936, "h16", 3),
        (151936, "m1", 10),
    ] {
        let w = weight(&mut rng, &[vocab, 16], 0.2);
        let logits = h.linear(&w, None).unwrap();
        let arch = AneArch::new(arch).unwrap();
        let plan = compile_ane(&[("logits", &logits)], arch, WEIGHT_CEILING)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.segments.len(), 1);
        let out = &plan.outputs[0];
        assert_eq!(out.parts.len(), tiles, "{vocab} on {arch}");
        assert_eq!(out.shape, [1, 2, vocab]);
        let a = &plan.segments[0].artifact;
        assert!(check_program(a.program(), arch).is_empty());
        for p in a.outputs() {
            assert!(p.shape[2] <= aneforge::arch::Limits::of(arch.family()).max_spatial);
        }
        if tiles > 1 {
            assert!(
                plan.report.to_string().contains("wide matmul"),
                "{}",
                plan.report
            );
        }
        let feeds: HashMap<String, Vec<f32>> =
            [("h".to_string(), rand_vec(&mut rng, 32, -1.0, 1.0))].into();
        let got = plan.run_cpu(&feeds).unwrap();
        let want = reference(&[("logits", &logits)], &feeds);
        close("logits", &want[0], &got["logits"], 2e-2);
    }
}

#[test]
fn weights_over_the_ceiling_split_the_program_into_segments() {
    let mut rng = StdRng::seed_from_u64(22);
    let x = input("x", &[2, 64], DType::F32).unwrap();
    let mut h = x.clone();
    for _ in 0..6 {
        let w = weight(&mut rng, &[64, 64], 0.2);
        let b = weight(&mut rng, &[64], 0.1);
        h = h.linear(&w, Some(&b)).unwrap().tanh().unwrap();
    }
    // A residual from the input into the last layer crosses every cut.
    let y = h.add(&x).unwrap();
    let side = h.mul_scalar(2.0).unwrap();
    let outputs = [("y", &y), ("side", &side)];
    let per_layer = 64 * 64 * 2 + 64 * 2;
    let ceiling = (2 * per_layer + 100) as u64;
    let arch = AneArch::new("h14").unwrap();
    let plan = compile_ane(&outputs, arch, ceiling).unwrap();
    assert_eq!(plan.segments.len(), 3);
    for s in &plan.segments {
        assert!(check_program(s.artifact.program(), arch).is_empty());
        let consts: usize = s
            .artifact
            .program()
            .blob_references()
            .iter()
            .map(|(_, _, ty)| ty.num_elements().unwrap() * 2)
            .sum();
        assert!(consts as u64 <= ceiling, "{consts}");
    }
    for (i, s) in plan.segments.iter().enumerate().skip(1) {
        assert!(
            s.feeds.iter().any(
                |(_, src)| matches!(src, Source::Segment { segment, .. } if *segment == i - 1)
            ),
            "segment {i} takes nothing from segment {}",
            i - 1
        );
    }
    assert!(plan.segments[2]
        .feeds
        .iter()
        .any(|(_, src)| *src == Source::Input("x".into())));
    let feeds: HashMap<String, Vec<f32>> =
        [("x".to_string(), rand_vec(&mut rng, 128, -1.0, 1.0))].into();
    let got = plan.run_cpu(&feeds).unwrap();
    let want = reference(&outputs, &feeds);
    close("y", &want[0], &got["y"], 1e-2);
    close("side", &want[1], &got["side"], 1e-2);

    let whole = compile_ane(&outputs, arch, WEIGHT_CEILING).unwrap();
    assert_eq!(whole.segments.len(), 1);
}

#[test]
fn illegal_graphs_fail_with_the_preflight_report() {
    let table = constant(HostArray::full(&[30000, 4], 1.0).unwrap());
    let ids = input("ids", &[2], DType::I32).unwrap();
    let e = table.gather(&ids, 0).unwrap();
    let err = compile_ane(&[("e", &e)], AneArch::new("h15").unwrap(), WEIGHT_CEILING)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot run on h15") && err.contains("gather") && err.contains("host"),
        "{err}"
    );
}

/// One ANE compile under a weight ceiling, segmented if needed.
fn compile_ane(
    outputs: &[(&str, &Tensor)],
    arch: AneArch,
    ceiling: u64,
) -> Result<Compiled, CompileError> {
    compile_program(
        &[FunctionSpec {
            name: "main",
            outputs,
        }],
        &ProgramOptions {
            target: Target::Ane(arch),
            weight_ceiling: Some(ceiling),
            ..ProgramOptions::default()
        },
    )
}

#[test]
fn the_pipeline_runs_each_stage_once_per_function_and_reports_it() {
    let mut rng = StdRng::seed_from_u64(23);
    let x = input("x", &[2, 64], DType::F32).unwrap();
    let w = weight(&mut rng, &[64, 64], 0.2);
    let y = x.linear(&w, None).unwrap().tanh().unwrap();
    let arch = AneArch::new("h15").unwrap();
    let plan = compile_program(
        &[FunctionSpec {
            name: "main",
            outputs: &[("y", &y)],
        }],
        &ProgramOptions {
            target: Target::Ane(arch),
            compress: Compress::Int8,
            weight_ceiling: Some(WEIGHT_CEILING),
            ..ProgramOptions::default()
        },
    )
    .unwrap();
    let ran: Vec<(&str, usize)> = plan
        .report
        .stages
        .iter()
        .map(|s| (s.stage, s.runs))
        .collect();
    assert_eq!(
        ran,
        [
            ("tile", 1),
            ("canonicalize", 1),
            ("legalize", 1),
            ("split", 1),
            ("emit", 1),
            ("check", 1),
            ("compress", 1)
        ]
    );
    assert!(plan.report.legality.as_ref().is_some_and(|r| r.is_legal()));
    assert_eq!(plan.report.compression.weights.len(), 1);
    assert!(
        plan.report.to_string().contains("stages: tile"),
        "{}",
        plan.report
    );

    let cpu = compile_program(
        &[FunctionSpec {
            name: "main",
            outputs: &[("y", &y)],
        }],
        &ProgramOptions::default(),
    )
    .unwrap();
    let ran: Vec<&str> = cpu.report.stages.iter().map(|s| s.stage).collect();
    assert_eq!(ran, ["canonicalize", "emit", "check", "compress"]);
    assert!(cpu.report.legality.is_none());
}
