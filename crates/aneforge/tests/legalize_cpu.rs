//! Every ANE rewrite executed: the legalized fp16 program (ANE target) and the direct fp32
//! program (CPU target) of the same graph run on the CPU engine and agree to fp16 tolerance.

mod common;

use aneforge::arch::{check_program, AneArch};
use aneforge::graph::{constant, input, nn, ConvAttrs, DType, HostArray, ReduceOp, Tensor};
use aneforge::lower::{Artifact, ParameterMode, PortKind};
use aneforge::Target;
use aneforge::{compile_artifact, ProgramOptions};
use aneforge_cpu::{compile, CompileOptions, HostSlice};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;

#[derive(Clone)]
enum Feed {
    F32(Vec<f32>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
}

fn run(a: &Artifact, feeds: &HashMap<&str, Feed>) -> Vec<Vec<f32>> {
    let blobs = a.blob_store().unwrap();
    let plan = compile(a.program(), "main", &blobs, &CompileOptions::default())
        .unwrap_or_else(|e| panic!("engine compile: {e}\n{}", a.mil_text()));
    let mut inst = plan.instantiate();
    for port in a.inputs() {
        assert_eq!(port.kind, PortKind::Input);
        let feed = feeds[port.name.as_str()].clone();
        let is_float_port = port.mil_dtype.is_float();
        let converted: Vec<f32>;
        let slice = match &feed {
            Feed::F32(v) => HostSlice::F32(v),
            Feed::I32(v) if is_float_port => {
                converted = v.iter().map(|&x| x as f32).collect();
                HostSlice::F32(&converted)
            }
            Feed::I32(v) => HostSlice::I32(v),
            Feed::Bool(v) if is_float_port => {
                converted = v.iter().map(|&b| f32::from(u8::from(b))).collect();
                HostSlice::F32(&converted)
            }
            Feed::Bool(v) => HostSlice::Bool(v),
        };
        inst.set_input(&port.name, slice).unwrap();
    }
    inst.execute().unwrap();
    a.outputs()
        .iter()
        .map(|p| inst.read_output_f32(&p.name).unwrap())
        .collect()
}

/// Runs the graph for the CPU target and for `arch`; asserts agreement within
/// `tol · max(1, max|want|)` per output.
fn agree(outputs: &[(&str, &Tensor)], arch: &str, feeds: &HashMap<&str, Feed>, tol: f32) {
    agree_with(outputs, outputs, arch, feeds, tol)
}

/// As [`agree`], with the CPU-target reference built from `reference` (same output names).
fn agree_with(
    reference: &[(&str, &Tensor)],
    outputs: &[(&str, &Tensor)],
    arch: &str,
    feeds: &HashMap<&str, Feed>,
    tol: f32,
) {
    let arch = AneArch::new(arch).unwrap();
    let cpu = compile_artifact(
        reference,
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap();
    let ane = compile_artifact(
        outputs,
        &ProgramOptions::new(&Target::Ane(arch), ParameterMode::Input),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(check_program(ane.program(), arch).is_empty());
    common::dump_package(&ane, &format!("legalize_{}_{arch}", outputs[0].0));
    let want = run(&cpu, feeds);
    let got = run(&ane, feeds);
    for ((name, _), (w, g)) in outputs.iter().zip(want.iter().zip(&got)) {
        let scale = w.iter().fold(1f32, |m, v| m.max(v.abs()));
        let worst = w
            .iter()
            .zip(g)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= tol * scale,
            "{name} on {arch}: max diff {worst} > {}\nwant {w:?}\ngot  {g:?}",
            tol * scale
        );
    }
}

fn rand_vec(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

fn weight(rng: &mut StdRng, shape: &[usize], scale: f32) -> Tensor {
    let n = shape.iter().product();
    constant(HostArray::from_f32(shape, rand_vec(rng, n, -scale, scale)).unwrap())
}

fn feeds<const N: usize>(items: [(&'static str, Feed); N]) -> HashMap<&'static str, Feed> {
    items.into_iter().collect()
}

/// fp16 rounding of inputs in [-2, 2] plus a few roundings along the way.
const MOVE: f32 = 2e-3;
const COMPUTE: f32 = 1.5e-2;

#[test]
fn row_pick_and_static_gather() {
    let mut rng = StdRng::seed_from_u64(11);
    let table = input("table", &[40, 6], DType::F32).unwrap();
    let ids = input("ids", &[3], DType::I32).unwrap();
    let picked = table.gather(&ids, 0).unwrap();
    let fixed = constant(HostArray::from_i32(&[4], vec![3, 4, 5, 1]).unwrap());
    let cols = table.gather(&fixed, 1).unwrap();
    let f = feeds([
        ("table", Feed::F32(rand_vec(&mut rng, 240, -2.0, 2.0))),
        ("ids", Feed::I32(vec![39, 0, 17])),
    ]);
    agree(&[("picked", &picked), ("cols", &cols)], "h13", &f, MOVE);
}

#[test]
fn kv_write_and_runtime_window() {
    let mut rng = StdRng::seed_from_u64(12);
    let cache = input("cache", &[1, 2, 8, 4], DType::F32).unwrap();
    let k = input("k", &[1, 2, 1, 4], DType::F32).unwrap();
    let pos = input("pos", &[4], DType::I32).unwrap();
    let written = cache.dynamic_slice_update(&k, &pos).unwrap();
    let window = cache.dynamic_slice(&pos, &[1, 2, 3, 4]).unwrap();
    for p in [0, 4, 5] {
        let f = feeds([
            ("cache", Feed::F32(rand_vec(&mut rng, 64, -2.0, 2.0))),
            ("k", Feed::F32(rand_vec(&mut rng, 8, -2.0, 2.0))),
            ("pos", Feed::I32(vec![0, 0, p, 0])),
        ]);
        // The CPU engine takes only constant slice_update windows: the reference writes at `p`
        // statically.
        let at = [0, 0, p as usize, 0];
        let reference = cache.slice_update(&k, &at).unwrap();
        let static_window = cache
            .slice(&at, &[1, 2, p as usize + 3, 4], &[1; 4])
            .unwrap();
        agree_with(
            &[("written", &reference), ("window", &static_window)],
            &[("written", &written), ("window", &window)],
            "h14",
            &f,
            MOVE,
        );
    }
}

#[test]
fn cumsum_and_reduce_prod() {
    let mut rng = StdRng::seed_from_u64(13);
    let x = input("x", &[3, 7], DType::F32).unwrap();
    let c = x.cumsum(1, false, false).unwrap();
    let cr = x.cumsum(0, true, true).unwrap();
    let p = x.reduce(ReduceOp::Prod, &[1], false).unwrap();
    let mut data = rand_vec(&mut rng, 21, 0.5, 1.5);
    data[3] = -data[3];
    data[9] = 0.0;
    data[15] = -data[15];
    data[16] = -data[16];
    let f = feeds([("x", Feed::F32(data))]);
    agree(&[("c", &c), ("cr", &cr), ("p", &p)], "h16", &f, COMPUTE);
}

#[test]
fn patch_conv_on_a_narrow_kernel_family() {
    let mut rng = StdRng::seed_from_u64(14);
    let img = input("img", &[1, 3, 32, 32], DType::F32).unwrap();
    let w = weight(&mut rng, &[8, 3, 16, 16], 0.05);
    let b = weight(&mut rng, &[8], 0.5);
    let attrs = ConvAttrs {
        strides: vec![16, 16],
        pads: vec![(0, 0), (0, 0)],
        dilations: vec![1, 1],
        groups: 1,
    };
    let y = img.conv(&w, Some(&b), attrs).unwrap();
    let f = feeds([("img", Feed::F32(rand_vec(&mut rng, 3072, -1.0, 1.0)))]);
    agree(&[("patches", &y)], "h13", &f, COMPUTE);
}

#[test]
fn causal_gqa_attention() {
    let mut rng = StdRng::seed_from_u64(15);
    let (d, h, hkv, hd) = (16, 4, 2, 4);
    let w = nn::AttentionWeights {
        wq: weight(&mut rng, &[h * hd, d], 0.3),
        wk: weight(&mut rng, &[hkv * hd, d], 0.3),
        wv: weight(&mut rng, &[hkv * hd, d], 0.3),
        wo: weight(&mut rng, &[d, h * hd], 0.3),
        bq: None,
        bk: None,
        bv: None,
        bo: None,
        num_heads: h,
        num_kv_heads: hkv,
    };
    let x = input("x", &[1, 6, d], DType::F32).unwrap();
    let y = nn::mha(&x, &x, &w, None, true).unwrap();
    let f = feeds([("x", Feed::F32(rand_vec(&mut rng, 6 * d, -1.0, 1.0)))]);
    agree(&[("y", &y)], "h15", &f, COMPUTE);
}

#[test]
fn masked_attention_with_a_bool_mask() {
    let mut rng = StdRng::seed_from_u64(16);
    let q = input("q", &[1, 2, 5, 8], DType::F32).unwrap();
    let k = input("k", &[1, 2, 7, 8], DType::F32).unwrap();
    let v = input("v", &[1, 2, 7, 8], DType::F32).unwrap();
    let keep = input("keep", &[1, 1, 5, 7], DType::Bool).unwrap();
    let y = nn::sdpa(&q, &k, &v, Some(&keep), false, None).unwrap();
    let f = feeds([
        ("q", Feed::F32(rand_vec(&mut rng, 80, -1.0, 1.0))),
        ("k", Feed::F32(rand_vec(&mut rng, 112, -1.0, 1.0))),
        ("v", Feed::F32(rand_vec(&mut rng, 112, -1.0, 1.0))),
        ("keep", Feed::Bool((0..35).map(|i| i % 5 != 2).collect())),
    ]);
    agree(&[("y", &y)], "h16", &f, COMPUTE);
}

#[test]
fn workarounds_sin_cos_argmax_and_outputs() {
    let x = input("x", &[48], DType::F32).unwrap();
    let data: Vec<f32> = (0..48).map(|i| -12.0 + i as f32 * 0.51).collect();
    let outs = [
        x.square().unwrap(),
        x.floor().unwrap().mul_scalar(0.5).unwrap(),
        x.round().unwrap(),
        x.softplus().unwrap(),
        x.sin().unwrap(),
        x.cos().unwrap(),
        x.reshape(&[6, 8])
            .unwrap()
            .argmax(1, false)
            .unwrap()
            .cast(DType::F32)
            .unwrap(),
        x.clone(),
        constant(HostArray::from_f32(&[2], vec![0.25, -4.0]).unwrap()),
    ];
    let names = ["sq", "fl", "rd", "sp", "sin", "cos", "am", "same", "c"];
    let named: Vec<(&str, &Tensor)> = names.iter().copied().zip(&outs).collect();
    let f = feeds([("x", Feed::F32(data))]);
    agree(&named, "h14", &f, COMPUTE);
}
