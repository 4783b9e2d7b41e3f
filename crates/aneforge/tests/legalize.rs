//! Each ANE rewrite: the report names it, the original op is gone, the emitted program passes
//! the family checker, and the rewritten graph evaluates to what the original evaluates to
//! (naive f64 evaluation of both graphs, independent of the legalizer).

mod legalize_support;

use aneforge::arch::{check_program, AneArch, FindingKind};
use aneforge::graph::{
    self, constant, input, nn, scalar, CompareOp, ConvAttrs, DType, HostArray, Op, ReduceOp, Tensor,
};
use aneforge::legalize::{legalize, Legalized};
use aneforge::lower::ParameterMode;
use aneforge::Target;
use aneforge::{compile_artifact, graph::topo_order, ProgramOptions};
use legalize_support::{eval, max_diff, V};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;

fn arch(name: &str) -> AneArch {
    AneArch::new(name).unwrap()
}

fn rand_f32(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

fn weight(rng: &mut StdRng, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    constant(HostArray::from_f32(shape, rand_f32(rng, n, -1.0, 1.0)).unwrap())
}

struct Feeds(HashMap<String, V>);

impl Feeds {
    fn new() -> Feeds {
        Feeds(HashMap::new())
    }
    fn set(&mut self, name: &str, shape: &[usize], data: Vec<f64>) -> &mut Feeds {
        self.0.insert(name.into(), V::new(shape, data));
        self
    }
    fn random(&mut self, rng: &mut StdRng, name: &str, shape: &[usize]) -> &mut Feeds {
        let n = shape.iter().product();
        let data = rand_f32(rng, n, -2.0, 2.0)
            .into_iter()
            .map(f64::from)
            .collect();
        self.set(name, shape, data)
    }
}

/// Legalizes, asserts legality, the named rewrite and the emitted program's acceptance, and
/// returns the legalized graph.
fn legal(outputs: &[(&str, &Tensor)], a: &str, rewrite: &str) -> Legalized {
    let l = legalize(outputs, arch(a));
    assert!(l.report.is_legal(), "{}", l.report);
    if !rewrite.is_empty() {
        assert!(
            l.report.findings.iter().any(|f| matches!(
                &f.kind,
                FindingKind::Rewritten { rewrite: r } if r.contains(rewrite)
            )),
            "no '{rewrite}' in\n{}",
            l.report
        );
    }
    let artifact = compile_artifact(
        outputs,
        &ProgramOptions::new(&Target::Ane(arch(a)), ParameterMode::Input),
    )
    .unwrap_or_else(|e| panic!("lowering for {a}: {e}"));
    assert!(check_program(artifact.program(), arch(a)).is_empty());
    l
}

/// Both graphs evaluate (f64) to within `tol` of each other.
fn same(original: &[Tensor], legalized: &[Tensor], feeds: &Feeds, tol: f64) {
    let want = eval(original, &feeds.0);
    let got = eval(legalized, &feeds.0);
    for (w, g) in want.iter().zip(&got) {
        let d = max_diff(w, g);
        assert!(
            d <= tol,
            "max diff {d} > {tol}\nwant {:?}\ngot  {:?}",
            w.data,
            g.data
        );
    }
}

fn ops(outputs: &[Tensor]) -> Vec<&'static str> {
    topo_order(outputs).iter().map(|t| t.op().name()).collect()
}

#[test]
fn row_pick_with_a_runtime_index_becomes_a_one_hot_matmul() {
    let mut rng = StdRng::seed_from_u64(1);
    let table = weight(&mut rng, &[40, 6]);
    let idx = input("ids", &[3], DType::I32).unwrap();
    let rows = table.gather(&idx, 0).unwrap();
    let l = legal(&[("rows", &rows)], "h13", "row pick");
    assert!(!ops(&l.outputs).contains(&"gather"));
    assert!(l.retyped.contains(&("ids".to_string(), DType::I32)));
    let mut f = Feeds::new();
    f.set("ids", &[3], vec![0.0, 39.0, 17.0]);
    same(&[rows], &l.outputs, &f, 0.0);
}

#[test]
fn a_dynamic_gather_over_a_vocabulary_is_rejected_for_the_host() {
    let table = constant(HostArray::full(&[50257, 8], 0.5).unwrap());
    let idx = input("ids", &[1, 4], DType::I32).unwrap();
    let emb = table.gather(&idx, 0).unwrap();
    let l = legalize(&[("emb", &emb)], arch("h16"));
    assert!(!l.report.is_legal());
    let f = l.report.blocking().next().unwrap();
    assert_eq!(f.op, "gather");
    assert_eq!(f.shape, [1, 4, 8]);
    assert!(f.node.contains("output 'emb'"), "{}", f.node);
    assert!(
        f.to_string().contains("50257") && f.to_string().contains("host"),
        "{f}"
    );
    let err = compile_artifact(
        &[("emb", &emb)],
        &ProgramOptions::new(&Target::Ane(arch("h16")), ParameterMode::Input),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("gather") && err.contains("h16"), "{err}");
}

#[test]
fn static_gathers_become_slices_and_concat_off_the_last_axis() {
    let mut rng = StdRng::seed_from_u64(2);
    let x = input("x", &[5, 7], DType::F32).unwrap();
    let row_picks = constant(HostArray::from_i32(&[2, 3], vec![1, 2, 3, 4, 0, 0]).unwrap());
    let col_picks = constant(HostArray::from_i32(&[2, 3], vec![1, 2, 3, 6, 0, 0]).unwrap());
    let rows = x.gather(&row_picks, 0).unwrap();
    let cols = x.gather(&col_picks, 1).unwrap();
    let l = legal(
        &[("rows", &rows), ("cols", &cols)],
        "h14",
        "slice(s) + concat",
    );
    let names = ops(&l.outputs);
    assert!(!names.contains(&"gather"));
    for node in topo_order(&l.outputs) {
        if let Op::Concat { axis } = node.op() {
            assert!(axis + 1 < node.rank(), "concat on the last axis");
        }
    }
    let mut f = Feeds::new();
    f.random(&mut rng, "x", &[5, 7]);
    same(&[rows, cols], &l.outputs, &f, 0.0);

    let v = input("v", &[9], DType::F32).unwrap();
    let scattered: Vec<i32> = (0..70).map(|i| i * 7 % 9).collect();
    let many = v
        .gather(&constant(HostArray::from_i32(&[70], scattered).unwrap()), 0)
        .unwrap();
    let l = legal(&[("many", &many)], "h13", "constant 0/1 matmul");
    let mut f = Feeds::new();
    f.random(&mut rng, "v", &[9]);
    same(&[many], &l.outputs, &f, 0.0);
}

#[test]
fn patch_convolution_becomes_space_to_depth_and_a_pointwise_conv() {
    let mut rng = StdRng::seed_from_u64(3);
    for (p, h, w) in [(16, 32, 48), (4, 9, 10), (2, 4, 4)] {
        let x = input("img", &[2, 3, h, w], DType::F32).unwrap();
        let wt = weight(&mut rng, &[5, 3, p, p]);
        let b = weight(&mut rng, &[5]);
        let attrs = ConvAttrs {
            strides: vec![p, p],
            pads: vec![(0, 0), (0, 0)],
            dilations: vec![1, 1],
            groups: 1,
        };
        let y = x.conv(&wt, Some(&b), attrs).unwrap();
        let l = legal(&[("patches", &y)], "h13", "space_to_depth");
        for node in topo_order(&l.outputs) {
            if let Op::Conv { .. } = node.op() {
                assert_eq!(&node.srcs()[1].shape()[2..], [1, 1]);
            }
        }
        let mut f = Feeds::new();
        f.random(&mut rng, "img", &[2, 3, h, w]);
        same(&[y], &l.outputs, &f, 1e-9);
    }
}

#[test]
fn a_wide_kernel_that_is_not_a_patch_is_oversized_below_a16() {
    let x = input("x", &[1, 1, 8, 40], DType::F32).unwrap();
    let wt = constant(HostArray::full(&[1, 1, 1, 14], 0.1).unwrap());
    let y = x.conv2d(&wt, None, nn::Conv2dParams::default()).unwrap();
    let l = legalize(&[("y", &y)], arch("h15"));
    let f = l.report.blocking().next().expect("kernel width 14 > 13");
    assert!(f.to_string().contains("kernel width 14 > 13"), "{f}");
    assert!(legalize(&[("y", &y)], arch("h16")).report.is_legal());
}

#[test]
fn cumsum_becomes_a_triangular_matmul() {
    let mut rng = StdRng::seed_from_u64(4);
    let x = input("x", &[3, 6, 4], DType::F32).unwrap();
    let mut outs = Vec::new();
    for axis in [0isize, 1, 2] {
        for (ex, rev) in [(false, false), (true, false), (false, true), (true, true)] {
            outs.push(x.cumsum(axis, ex, rev).unwrap());
        }
    }
    let names: Vec<String> = (0..outs.len()).map(|i| format!("c{i}")).collect();
    let named: Vec<(&str, &Tensor)> = names.iter().map(|n| n.as_str()).zip(&outs).collect();
    let l = legal(&named, "h16", "triangular matmul");
    assert!(!ops(&l.outputs).contains(&"cumsum"));
    let mut f = Feeds::new();
    f.random(&mut rng, "x", &[3, 6, 4]);
    same(&outs, &l.outputs, &f, 1e-12);
}

#[test]
fn reduce_prod_handles_signs_and_zeros() {
    let x = input("x", &[4, 5], DType::F32).unwrap();
    let p1 = x.reduce(ReduceOp::Prod, &[1], false).unwrap();
    let p0 = x.reduce(ReduceOp::Prod, &[0], true).unwrap();
    let l = legal(&[("p1", &p1), ("p0", &p0)], "h16", "reduce_prod");
    assert!(!ops(&l.outputs).contains(&"reduce_prod"));
    let data = vec![
        1.5, -2.0, 0.5, 3.0, -1.0, // four factors, two negative
        -1.5, 2.0, 0.5, 3.0, 1.0, // one negative
        0.0, 2.0, -3.0, 1.0, 1.0, // a zero
        -0.5, -0.5, -0.5, -4.0, 2.0, // four negative
    ];
    let mut f = Feeds::new();
    f.set("x", &[4, 5], data);
    same(&[p1, p0], &l.outputs, &f, 1e-12);
}

#[test]
fn kv_write_at_a_runtime_position_becomes_a_masked_blend() {
    let mut rng = StdRng::seed_from_u64(5);
    let cache = input("k_cache", &[1, 2, 8, 4], DType::F32).unwrap();
    let k = input("k", &[1, 2, 1, 4], DType::F32).unwrap();
    let pos = input("pos", &[4], DType::I32).unwrap();
    let written = cache.dynamic_slice_update(&k, &pos).unwrap();
    let block = input("block", &[1, 2, 3, 4], DType::F32).unwrap();
    let wide = cache.dynamic_slice_update(&block, &pos).unwrap();
    let l = legal(
        &[("k_new", &written), ("wide", &wide)],
        "h13",
        "K·(1−onehot)",
    );
    assert!(!ops(&l.outputs).contains(&"dynamic_slice_update"));
    for p in [0.0, 3.0, 5.0] {
        let mut f = Feeds::new();
        f.random(&mut rng, "k_cache", &[1, 2, 8, 4])
            .random(&mut rng, "k", &[1, 2, 1, 4])
            .random(&mut rng, "block", &[1, 2, 3, 4])
            .set("pos", &[4], vec![0.0, 0.0, p, 0.0]);
        same(&[written.clone(), wide.clone()], &l.outputs, &f, 0.0);
    }
}

#[test]
fn a_window_at_a_runtime_position_becomes_one_hot_matmuls() {
    let mut rng = StdRng::seed_from_u64(6);
    let x = input("x", &[2, 9, 5], DType::F32).unwrap();
    let at = input("at", &[3], DType::I32).unwrap();
    let w = x.dynamic_slice(&at, &[2, 3, 2]).unwrap();
    let l = legal(&[("w", &w)], "h14", "one-hot matmul");
    assert!(!ops(&l.outputs).contains(&"dynamic_slice"));
    for (a, b) in [(0.0, 0.0), (6.0, 3.0), (2.0, 1.0)] {
        let mut f = Feeds::new();
        f.random(&mut rng, "x", &[2, 9, 5])
            .set("at", &[3], vec![0.0, a, b]);
        same(std::slice::from_ref(&w), &l.outputs, &f, 0.0);
    }
}

#[test]
fn masked_and_causal_attention_are_decomposed_with_a_clamped_mask() {
    let mut rng = StdRng::seed_from_u64(7);
    let q = input("q", &[1, 2, 5, 8], DType::F32).unwrap();
    let k = input("k", &[1, 2, 7, 8], DType::F32).unwrap();
    let v = input("v", &[1, 2, 7, 8], DType::F32).unwrap();
    let keep = input("keep", &[1, 1, 5, 7], DType::Bool).unwrap();
    let causal = nn::sdpa(&q, &k, &v, None, true, None).unwrap();
    let masked = nn::sdpa(&q, &k, &v, Some(&keep), false, Some(0.3)).unwrap();
    let plain = nn::sdpa(&q, &k, &v, None, false, None).unwrap();
    let l = legal(
        &[("causal", &causal), ("masked", &masked), ("plain", &plain)],
        "h15",
        "additive mask (−1e4)",
    );
    for node in topo_order(&l.outputs) {
        if let Op::Sdpa {
            has_mask, causal, ..
        } = node.op()
        {
            assert!(!has_mask && !causal, "a masked native attention remains");
        }
        if let Some(c) = node.constant_value().and_then(|c| c.as_f32()) {
            assert!(c.iter().all(|&m| m >= -1.0e4), "mask below -1e4");
        }
    }
    let mut f = Feeds::new();
    f.random(&mut rng, "q", &[1, 2, 5, 8])
        .random(&mut rng, "k", &[1, 2, 7, 8])
        .random(&mut rng, "v", &[1, 2, 7, 8]);
    let keep_data: Vec<f64> = (0..35).map(|i| f64::from(u8::from(i % 7 != 3))).collect();
    f.set("keep", &[1, 1, 5, 7], keep_data);
    // The scales are f32 constants (1/√8, 0.3): equal to f32 precision.
    same(&[causal, masked, plain], &l.outputs, &f, 1e-6);
}

#[test]
fn grouped_query_head_repeat_becomes_an_expansion_matmul() {
    let mut rng = StdRng::seed_from_u64(8);
    let (d, h, hkv, hd) = (16, 4, 2, 4);
    let w = nn::AttentionWeights {
        wq: weight(&mut rng, &[h * hd, d]),
        wk: weight(&mut rng, &[hkv * hd, d]),
        wv: weight(&mut rng, &[hkv * hd, d]),
        wo: weight(&mut rng, &[d, h * hd]),
        bq: None,
        bk: None,
        bv: None,
        bo: None,
        num_heads: h,
        num_kv_heads: hkv,
    };
    let x = input("x", &[1, 6, d], DType::F32).unwrap();
    let y = nn::mha(&x, &x, &w, None, true).unwrap();
    assert!(ops(std::slice::from_ref(&y)).contains(&"tile"));
    let l = legal(&[("y", &y)], "h16", "expansion matmul");
    assert!(!ops(&l.outputs).contains(&"tile"));
    assert!(topo_order(&l.outputs).iter().all(|t| t.rank() <= 4));
    let mut f = Feeds::new();
    f.random(&mut rng, "x", &[1, 6, d]);
    same(&[y], &l.outputs, &f, 1e-12);
}

#[test]
fn hardware_workarounds_preserve_values() {
    let x = input("x", &[12], DType::F32).unwrap();
    let sq = x.square().unwrap();
    let floored = x
        .floor()
        .unwrap()
        .mul_scalar(3.0)
        .unwrap()
        .add(&x.ceil().unwrap().neg().unwrap())
        .unwrap();
    let rounded = x.round().unwrap();
    let soft = x.softplus().unwrap();
    let outs = [sq, floored, rounded, soft];
    let l = legal(
        &[
            ("sq", &outs[0]),
            ("fl", &outs[1]),
            ("rd", &outs[2]),
            ("sp", &outs[3]),
        ],
        "h13",
        "",
    );
    for r in [
        "square → mul",
        "full-shape",
        "round guarded",
        "softplus split",
    ] {
        assert!(
            l.report.to_string().contains(r),
            "{r} missing:\n{}",
            l.report
        );
    }
    assert!(!ops(&l.outputs).contains(&"square"));
    for node in topo_order(&l.outputs) {
        if node.op().name() == "mul" {
            let s = node.srcs();
            if matches!(s[0].op().name(), "floor" | "ceil" | "round") {
                assert_eq!(s[1].shape(), node.shape());
            }
        }
    }
    let data = vec![
        -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1023.5, 1500.0, -2047.0, 9.5, 10.5, 30.0,
    ];
    let mut f = Feeds::new();
    f.set("x", &[12], data);
    let want = eval(&outs, &f.0);
    let got = eval(&l.outputs, &f.0);
    for i in 0..3 {
        assert_eq!(max_diff(&want[i], &got[i]), 0.0, "output {i}");
    }
    // Above 10 the split returns x; softplus(x) − x = log1p(e^−x) < 5e-5 there.
    assert!(max_diff(&want[3], &got[3]) < 5e-5);
}

#[test]
fn sin_and_cos_are_decomposed_below_a15_only() {
    let x = input("x", &[64], DType::F32).unwrap();
    let s = x.sin().unwrap();
    let c = x.cos().unwrap();
    let l = legal(&[("s", &s), ("c", &c)], "h14", "range reduction");
    assert!(!ops(&l.outputs).contains(&"sin") && !ops(&l.outputs).contains(&"cos"));
    let data: Vec<f64> = (0..64).map(|i| -20.0 + i as f64 * 0.63).collect();
    let mut f = Feeds::new();
    f.set("x", &[64], data);
    same(&[s.clone(), c.clone()], &l.outputs, &f, 2e-4);
    let native = legal(&[("s", &s), ("c", &c)], "h15", "");
    assert!(ops(&native.outputs).contains(&"sin"));
}

#[test]
fn argmax_and_integer_casts_are_carried_in_fp16() {
    let x = input("x", &[3, 5], DType::F32).unwrap();
    let am = x.argmax(1, false).unwrap();
    let t = x.mul_scalar(3.0).unwrap().cast(DType::I32).unwrap();
    let back = t
        .add(&constant(HostArray::scalar_i32(2)))
        .unwrap()
        .cast(DType::F32)
        .unwrap();
    let l = legal(&[("am", &am), ("t", &t), ("back", &back)], "h16", "argmax");
    assert!(l.retyped.contains(&("am".to_string(), DType::I32)));
    assert!(topo_order(&l.outputs)
        .iter()
        .all(|n| n.dtype() != DType::I32));
    let data = vec![
        1.0, 3.0, 3.0, -1.0, 0.0, // tie: first wins
        -1.5, -0.2, -0.7, -0.2, -3.0, //
        0.9, -0.9, 0.34, 2.0, 1.99,
    ];
    let mut f = Feeds::new();
    f.set("x", &[3, 5], data);
    same(&[am, t, back], &l.outputs, &f, 0.0);
}

#[test]
fn outputs_that_are_inputs_constants_or_repeats_are_computed() {
    let x = input("x", &[2, 3], DType::F32).unwrap();
    let c = constant(HostArray::from_f32(&[3], vec![1.0, 2.0, 3.0]).unwrap());
    let y = x.relu().unwrap();
    let flag = x.gt(&scalar(0.0)).unwrap();
    let l = legal(
        &[
            ("same", &x),
            ("c", &c),
            ("y", &y),
            ("y2", &y),
            ("flag", &flag),
        ],
        "h13",
        "x * 1",
    );
    let report = l.report.to_string();
    assert!(
        report.contains("(t − t) + c") && report.contains("repeats"),
        "{report}"
    );
    assert!(l.retyped.contains(&("flag".to_string(), DType::Bool)));
    for o in &l.outputs {
        assert!(!o.op().is_leaf());
    }
    assert_ne!(l.outputs[2], l.outputs[3]);
    let mut f = Feeds::new();
    f.set("x", &[2, 3], vec![-1.0, 2.0, 0.0, 4.0, -5.0, 0.5]);
    same(&[x, c, y.clone(), y, flag], &l.outputs, &f, 0.0);
}

#[test]
fn oversized_contractions_are_reported_with_the_family_cap() {
    let a = input("a", &[2, 20000], DType::F32).unwrap();
    let b = input("b", &[20000, 8], DType::F32).unwrap();
    let y = a.matmul(&b).unwrap();
    let l = legalize(&[("y", &y)], arch("m3"));
    let msgs: Vec<String> = l.report.blocking().map(|f| f.to_string()).collect();
    assert!(
        msgs.iter().any(|m| m.contains("contraction 20000 > 16384")),
        "{msgs:?}"
    );
    assert!(msgs.iter().any(|m| m.contains("input 'a'")), "{msgs:?}");
    assert!(legalize(&[("y", &y)], arch("m4")).report.is_legal());
}

#[test]
fn bool_inputs_are_fed_as_fp16() {
    let m = input("m", &[4], DType::Bool).unwrap();
    let x = input("x", &[4], DType::F32).unwrap();
    let y = m.select(&x, &graph::scalar(-1.0)).unwrap();
    let z = x
        .compare_scalar(CompareOp::Less, 0.5)
        .unwrap()
        .cast(DType::F32)
        .unwrap();
    let l = legal(&[("y", &y), ("z", &z)], "h13", "");
    assert!(l.retyped.contains(&("m".to_string(), DType::Bool)));
    let artifact = compile_artifact(
        &[("y", &y), ("z", &z)],
        &ProgramOptions::new(&Target::Ane(arch("h13")), ParameterMode::Input),
    )
    .unwrap();
    let m_port = artifact.inputs().iter().find(|p| p.name == "m").unwrap();
    assert_eq!(m_port.dtype, DType::Bool);
    assert_eq!(m_port.mil_dtype, aneforge_mil::DType::Fp16);
    let mut f = Feeds::new();
    f.set("m", &[4], vec![1.0, 0.0, 1.0, 0.0])
        .set("x", &[4], vec![0.25, 0.5, 0.75, -1.0]);
    same(&[y, z], &l.outputs, &f, 0.0);
}

#[test]
fn the_op_catalog_matches_what_the_legalizer_does() {
    use aneforge::arch::Family;
    use aneforge::graph::{BinaryOp, UnaryOp};
    use aneforge::legalize::catalog::{graph_ops, Status};
    for family in Family::ALL {
        let rows = graph_ops(family);
        let status = |op: &str| rows.iter().find(|r| r.op == op).unwrap().status;
        let x = input("x", &[4, 8], DType::F32).unwrap();
        let mut cases: Vec<(&str, Tensor)> = UnaryOp::ALL
            .iter()
            .map(|&u| (u.name(), x.unary(u).unwrap()))
            .collect();
        cases.extend(
            BinaryOp::ALL
                .iter()
                .map(|&b| (b.name(), x.binary(b, &x.abs().unwrap()).unwrap())),
        );
        cases.push(("argmax", x.argmax(1, false).unwrap()));
        cases.push(("cumsum", x.cumsum(1, false, false).unwrap()));
        cases.push((
            "reduce_prod",
            x.reduce(ReduceOp::Prod, &[1], false).unwrap(),
        ));
        cases.push(("reduce_sum", x.sum(&[1], false).unwrap()));
        cases.push(("softmax", x.softmax(1).unwrap()));
        cases.push(("barrier", x.barrier(&[x.abs().unwrap()]).unwrap()));
        let w = aneforge::graph::constant(
            aneforge::graph::HostArray::from_f32(&[3 * 5, 8], vec![0.5; 3 * 5 * 8]).unwrap(),
        );
        let ids = input("ids", &[4, 2], DType::I32).unwrap();
        let xe = x.reshape(&[4, 1, 8]).unwrap();
        cases.push(("linear_experts", xe.linear_experts(&w, &ids, 3).unwrap()));
        for (op, t) in cases {
            let l = legalize(&[("y", &t)], family.base_arch());
            assert!(l.report.is_legal(), "{op} on {family}: {}", l.report);
            let rewritten = l
                .report
                .findings
                .iter()
                .any(|f| f.op == op && matches!(f.kind, FindingKind::Rewritten { .. }));
            assert_eq!(
                rewritten,
                status(op) == Status::Rewritten,
                "{op} on {family}: catalog says {:?}\n{}",
                status(op),
                l.report
            );
        }
    }
}
