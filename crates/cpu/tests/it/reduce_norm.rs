use crate::common;
use aneforge_mil::DType;
use common::*;

/// Reduces `x` (shape `s`) over `axes` with `f`, keep_dims layout.
fn reduce_ref(x: &[f64], s: &[usize], axes: &[usize], f: &dyn Fn(&[f64]) -> f64) -> Vec<f64> {
    let os: Vec<usize> = (0..s.len())
        .map(|a| if axes.contains(&a) { 1 } else { s[a] })
        .collect();
    (0..numel(&os))
        .map(|o| {
            let oi = unravel(o, &os);
            let vals: Vec<f64> = (0..numel(s))
                .filter(|&i| {
                    let ii = unravel(i, s);
                    (0..s.len()).all(|a| axes.contains(&a) || ii[a] == oi[a])
                })
                .map(|i| x[i])
                .collect();
            f(&vals)
        })
        .collect()
}

type RefFn = Box<dyn Fn(&[f64]) -> f64>;

#[test]
fn reductions_over_axis_sets() {
    let mut rng = Rng(17);
    let ops: Vec<(&str, RefFn)> = vec![
        ("reduce_sum", Box::new(|v: &[f64]| v.iter().sum())),
        (
            "reduce_mean",
            Box::new(|v: &[f64]| v.iter().sum::<f64>() / v.len() as f64),
        ),
        (
            "reduce_max",
            Box::new(|v: &[f64]| v.iter().cloned().fold(f64::MIN, f64::max)),
        ),
        (
            "reduce_min",
            Box::new(|v: &[f64]| v.iter().cloned().fold(f64::MAX, f64::min)),
        ),
        ("reduce_prod", Box::new(|v: &[f64]| v.iter().product())),
        (
            "reduce_log_sum_exp",
            Box::new(|v: &[f64]| v.iter().map(|x| x.exp()).sum::<f64>().ln()),
        ),
        (
            "reduce_l2_norm",
            Box::new(|v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt()),
        ),
        (
            "reduce_sum_square",
            Box::new(|v: &[f64]| v.iter().map(|x| x * x).sum()),
        ),
        (
            "reduce_l1_norm",
            Box::new(|v: &[f64]| v.iter().map(|x| x.abs()).sum()),
        ),
    ];
    let axis_sets: Vec<Vec<usize>> = vec![
        vec![2],
        vec![0],
        vec![1, 2],
        vec![0, 2],
        vec![0, 1, 2],
        vec![1],
    ];
    for &d in &[DType::Fp32, DType::Fp16] {
        for (name, f) in &ops {
            for axes in &axis_sets {
                for keep in [true, false] {
                    let s = [1 + rng.below(4), 1 + rng.below(5), 1 + rng.below(300)];
                    let xv = quantize(d, &rng.vec(numel(&s), 0.5, 1.5));
                    let ks: Vec<usize> = (0..3)
                        .map(|a| if axes.contains(&a) { 1 } else { s[a] })
                        .collect();
                    let os: Vec<usize> = (0..3)
                        .filter(|a| !axes.contains(a) || keep)
                        .map(|a| ks[a])
                        .collect();
                    let mut p = Prog::new();
                    let x = p.input("x", d, &s);
                    let y = p.op(
                        name,
                        &[
                            ("x", v(&x)),
                            ("axes", A::Is(axes.iter().map(|&a| a as i64).collect())),
                            ("keep_dims", A::B(keep)),
                        ],
                        d,
                        &os,
                    );
                    p.output(&y);
                    let got = &run(&p, &[("x", d, xv.clone())])[&y];
                    let want = quantize(d, &reduce_ref(&xv, &s, axes, f.as_ref()));
                    let scale = want.iter().fold(0.0f64, |a, b| a.max(b.abs()));
                    assert_close(
                        &format!("{name} {d} {s:?} {axes:?}"),
                        d,
                        got,
                        &want,
                        scale * 1e-1,
                    );
                }
            }
        }
    }
}

#[test]
fn argmax_argmin_first_occurrence() {
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp32, &[2, 4]);
    let a = p.op(
        "reduce_argmax",
        &[("x", v(&x)), ("axis", A::I(1)), ("keep_dims", A::B(false))],
        DType::Int32,
        &[2],
    );
    let b = p.op(
        "reduce_argmin",
        &[("x", v(&x)), ("axis", A::I(0)), ("keep_dims", A::B(true))],
        DType::Int32,
        &[1, 4],
    );
    p.output(&a);
    p.output(&b);
    let out = run(
        &p,
        &[(
            "x",
            DType::Fp32,
            vec![1.0, 3.0, 3.0, 0.0, 5.0, -1.0, 5.0, 2.0],
        )],
    );
    assert_eq!(out[&a], vec![1.0, 0.0]);
    assert_eq!(out[&b], vec![0.0, 1.0, 0.0, 0.0]);
}

fn softmax_ref(v: &[f64]) -> Vec<f64> {
    let m = v.iter().cloned().fold(f64::MIN, f64::max);
    let e: Vec<f64> = v.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

#[test]
fn softmax_layer_norm_l2_norm_instance_norm_batch_norm() {
    let mut rng = Rng(23);
    for &d in &[DType::Fp32, DType::Fp16] {
        let s = [2usize, 3, 5, 70];
        let n = numel(&s);
        let xv = quantize(d, &rng.vec(n, -3.0, 3.0));
        let gamma = quantize(d, &rng.vec(70, 0.5, 1.5));
        let beta = quantize(d, &rng.vec(70, -0.5, 0.5));
        let cg = quantize(d, &rng.vec(3, 0.5, 1.5));
        let cb = quantize(d, &rng.vec(3, -0.5, 0.5));
        let mean = quantize(d, &rng.vec(3, -0.5, 0.5));
        let var = quantize(d, &rng.vec(3, 0.5, 2.0));
        let mut p = Prog::new();
        let x = p.input("x", d, &s);
        let sm = p.op("softmax", &[("x", v(&x)), ("axis", A::I(-1))], d, &s);
        let sm1 = p.op("softmax", &[("x", v(&x)), ("axis", A::I(1))], d, &s);
        let g = p.konst(d, &[70], &gamma);
        let b = p.konst(d, &[70], &beta);
        let ln = p.op(
            "layer_norm",
            &[
                ("x", v(&x)),
                ("axes", A::Is(vec![-1])),
                ("gamma", v(&g)),
                ("beta", v(&b)),
                ("epsilon", A::F(d, 1e-5)),
            ],
            d,
            &s,
        );
        let l2 = p.op(
            "l2_norm",
            &[("x", v(&x)), ("epsilon", A::F(d, 1e-6))],
            d,
            &s,
        );
        let cgv = p.konst(d, &[3], &cg);
        let cbv = p.konst(d, &[3], &cb);
        let inn = p.op(
            "instance_norm",
            &[
                ("x", v(&x)),
                ("gamma", v(&cgv)),
                ("beta", v(&cbv)),
                ("epsilon", A::F(d, 1e-5)),
            ],
            d,
            &s,
        );
        let mv = p.konst(d, &[3], &mean);
        let vv = p.konst(d, &[3], &var);
        let bn = p.op(
            "batch_norm",
            &[
                ("x", v(&x)),
                ("mean", v(&mv)),
                ("variance", v(&vv)),
                ("gamma", v(&cgv)),
                ("beta", v(&cbv)),
                ("epsilon", A::F(d, 1e-5)),
            ],
            d,
            &s,
        );
        for o in [&sm, &sm1, &ln, &l2, &inn, &bn] {
            p.output(o);
        }
        let out = run(&p, &[("x", d, xv.clone())]);
        let rows: Vec<Vec<f64>> = xv.chunks(70).map(|c| c.to_vec()).collect();
        let want_sm: Vec<f64> = rows.iter().flat_map(|r| softmax_ref(r)).collect();
        assert_close("softmax last", d, &out[&sm], &quantize(d, &want_sm), 1e-2);
        let mut want_sm1 = vec![0.0; n];
        for b0 in 0..2 {
            for h in 0..5 {
                for w in 0..70 {
                    let col: Vec<f64> = (0..3).map(|c| xv[ravel(&[b0, c, h, w], &s)]).collect();
                    for (c, val) in softmax_ref(&col).into_iter().enumerate() {
                        want_sm1[ravel(&[b0, c, h, w], &s)] = val;
                    }
                }
            }
        }
        assert_close(
            "softmax axis 1",
            d,
            &out[&sm1],
            &quantize(d, &want_sm1),
            1e-2,
        );
        let want_ln: Vec<f64> = rows
            .iter()
            .flat_map(|r| {
                let (gamma, beta) = (&gamma, &beta);
                let m = r.iter().sum::<f64>() / 70.0;
                let var = r.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 70.0;
                r.iter()
                    .enumerate()
                    .map(move |(j, x)| (x - m) / (var + 1e-5).sqrt() * gamma[j] + beta[j])
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_close("layer_norm", d, &out[&ln], &quantize(d, &want_ln), 1.0);
        let per = n / 2;
        let want_l2: Vec<f64> = xv
            .chunks(per)
            .flat_map(|c| {
                let s2: f64 = c.iter().map(|x| x * x).sum();
                c.iter()
                    .map(move |x| x / (s2 + 1e-6).sqrt())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_close("l2_norm", d, &out[&l2], &quantize(d, &want_l2), 1e-2);
        let want_in: Vec<f64> = xv
            .chunks(350)
            .enumerate()
            .flat_map(|(q, c)| {
                let ch = q % 3;
                let m = c.iter().sum::<f64>() / 350.0;
                let var = c.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 350.0;
                let (g, b) = (cg[ch], cb[ch]);
                c.iter()
                    .map(move |x| (x - m) / (var + 1e-5).sqrt() * g + b)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_close("instance_norm", d, &out[&inn], &quantize(d, &want_in), 1.0);
        let want_bn: Vec<f64> = (0..n)
            .map(|i| {
                let c = unravel(i, &s)[1];
                (xv[i] - mean[c]) / (var[c] + 1e-5).sqrt() * cg[c] + cb[c]
            })
            .collect();
        assert_close("batch_norm", d, &out[&bn], &quantize(d, &want_bn), 1.0);
    }
}

#[test]
fn cumsum_topk_gather_one_hot() {
    let d = DType::Fp32;
    let mut p = Prog::new();
    let x = p.input("x", d, &[2, 5]);
    let idx = p.input("i", DType::Int32, &[3]);
    let c1 = p.op("cumsum", &[("x", v(&x)), ("axis", A::I(1))], d, &[2, 5]);
    let c2 = p.op(
        "cumsum",
        &[
            ("x", v(&x)),
            ("axis", A::I(1)),
            ("exclusive", A::B(true)),
            ("reverse", A::B(true)),
        ],
        d,
        &[2, 5],
    );
    let c3 = p.op("cumsum", &[("x", v(&x)), ("axis", A::I(0))], d, &[2, 5]);
    let tk = p.op_n(
        "topk",
        &[("x", v(&x)), ("k", A::I(2)), ("axis", A::I(-1))],
        &[(d, vec![2, 2]), (DType::Int32, vec![2, 2])],
    );
    let g = p.op(
        "gather",
        &[("x", v(&x)), ("indices", v(&idx)), ("axis", A::I(1))],
        d,
        &[2, 3],
    );
    let gi = p.konst(DType::Int32, &[2, 2], &[4.0, 0.0, 1.0, 1.0]);
    let ga = p.op(
        "gather_along_axis",
        &[("x", v(&x)), ("indices", v(&gi)), ("axis", A::I(1))],
        d,
        &[2, 2],
    );
    let oh = p.op(
        "one_hot",
        &[
            ("indices", v(&idx)),
            ("one_hot_vector_size", A::I(5)),
            ("axis", A::I(-1)),
            ("on_value", A::F(d, 2.0)),
            ("off_value", A::F(d, -1.0)),
        ],
        d,
        &[3, 5],
    );
    for o in [&c1, &c2, &c3, &tk[0], &tk[1], &g, &ga, &oh] {
        p.output(o);
    }
    let xv = vec![3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0];
    let iv = vec![4.0, -1.0, 0.0];
    let out = run(&p, &[("x", d, xv.clone()), ("i", DType::Int32, iv.clone())]);
    assert_eq!(
        out[&c1],
        vec![3.0, 4.0, 8.0, 9.0, 14.0, 9.0, 11.0, 17.0, 22.0, 25.0]
    );
    assert_eq!(
        out[&c2],
        vec![11.0, 10.0, 6.0, 5.0, 0.0, 16.0, 14.0, 8.0, 3.0, 0.0]
    );
    assert_eq!(
        out[&c3],
        vec![3.0, 1.0, 4.0, 1.0, 5.0, 12.0, 3.0, 10.0, 6.0, 8.0]
    );
    assert_eq!(out[&tk[0]], vec![5.0, 4.0, 9.0, 6.0]);
    assert_eq!(out[&tk[1]], vec![4.0, 2.0, 0.0, 2.0]);
    assert_eq!(out[&g], vec![5.0, 5.0, 3.0, 3.0, 3.0, 9.0]);
    assert_eq!(out[&ga], vec![5.0, 3.0, 2.0, 2.0]);
    let mut want = vec![-1.0; 15];
    // index -1 is outside [0, depth): an all-off row, as TensorFlow's one_hot defines it
    want[4] = 2.0;
    want[10] = 2.0;
    assert_eq!(out[&oh], want);
}

#[test]
fn gather_out_of_range_is_an_execute_error() {
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp32, &[4]);
    let i = p.input("i", DType::Int32, &[1]);
    let g = p.op(
        "gather",
        &[("x", v(&x)), ("indices", v(&i))],
        DType::Fp32,
        &[1],
    );
    p.output(&g);
    let plan = aneforge_cpu::compile(&p.build(), "main", &Default::default(), &Default::default())
        .unwrap();
    let mut inst = plan.instantiate();
    inst.set_input("i", aneforge_cpu::HostSlice::I32(&[7]))
        .unwrap();
    let e = inst.execute().unwrap_err().to_string();
    assert!(e.contains("gather") && e.contains("index 7"), "{e}");
}
