use crate::common;
use aneforge_mil::DType;
use common::*;

fn iota(n: usize) -> Vec<f64> {
    (0..n).map(|i| i as f64).collect()
}

fn check(p: &Prog, ins: &[(&str, DType, Vec<f64>)], out: &str, want: &[f64]) {
    let got = &run(p, ins)[out];
    assert_eq!(got, want, "{out}");
}

#[test]
fn reshape_squeeze_expand_transpose() {
    for &d in &[DType::Fp32, DType::Fp16, DType::Int32] {
        let s = [2, 3, 4];
        let mut p = Prog::new();
        let x = p.input("x", d, &s);
        let r = p.op(
            "reshape",
            &[("x", v(&x)), ("shape", A::Is(vec![0, -1, 2]))],
            d,
            &[2, 6, 2],
        );
        let e = p.op(
            "expand_dims",
            &[("x", v(&r)), ("axes", A::Is(vec![0, -1]))],
            d,
            &[1, 2, 6, 2, 1],
        );
        let q = p.op("squeeze", &[("x", v(&e))], d, &[2, 6, 2]);
        let t = p.op(
            "transpose",
            &[("x", v(&x)), ("perm", A::Is(vec![2, 0, 1]))],
            d,
            &[4, 2, 3],
        );
        for o in [&r, &e, &q, &t] {
            p.output(o);
        }
        let xv = iota(24);
        let out = run(&p, &[("x", d, xv.clone())]);
        assert_eq!(out[&r], xv);
        assert_eq!(out[&e], xv);
        assert_eq!(out[&q], xv);
        let want: Vec<f64> = (0..24)
            .map(|i| {
                let idx = unravel(i, &[4, 2, 3]);
                xv[ravel(&[idx[1], idx[2], idx[0]], &s)]
            })
            .collect();
        assert_eq!(out[&t], want);
    }
}

#[test]
fn concat_split_interleave() {
    let d = DType::Fp32;
    let mut p = Prog::new();
    let a = p.input("a", d, &[2, 2, 3]);
    let b = p.input("b", d, &[2, 1, 3]);
    let c = p.op(
        "concat",
        &[
            ("values", A::List(vec![a.clone(), b.clone()])),
            ("axis", A::I(1)),
        ],
        d,
        &[2, 3, 3],
    );
    let i = p.op(
        "concat",
        &[
            ("values", A::List(vec![a.clone(), a.clone()])),
            ("axis", A::I(-1)),
            ("interleave", A::B(true)),
        ],
        d,
        &[2, 2, 6],
    );
    let s = p.op_n(
        "split",
        &[
            ("x", v(&c)),
            ("split_sizes", A::Is(vec![1, 2])),
            ("axis", A::I(1)),
        ],
        &[(d, vec![2, 1, 3]), (d, vec![2, 2, 3])],
    );
    let e = p.op_n(
        "split",
        &[("x", v(&a)), ("num_splits", A::I(3)), ("axis", A::I(2))],
        &[(d, vec![2, 2, 1]), (d, vec![2, 2, 1]), (d, vec![2, 2, 1])],
    );
    for o in [&c, &i, &s[0], &s[1], &e[2]] {
        p.output(o);
    }
    let av = iota(12);
    let bv: Vec<f64> = (0..6).map(|x| 100.0 + x as f64).collect();
    let out = run(&p, &[("a", d, av.clone()), ("b", d, bv.clone())]);
    let mut want = Vec::new();
    for n in 0..2 {
        want.extend_from_slice(&av[n * 6..n * 6 + 6]);
        want.extend_from_slice(&bv[n * 3..n * 3 + 3]);
    }
    assert_eq!(out[&c], want);
    let wi: Vec<f64> = (0..24).map(|t| av[t / 2]).collect();
    assert_eq!(out[&i], wi);
    let w0: Vec<f64> = (0..2)
        .flat_map(|n| want[n * 9..n * 9 + 3].to_vec())
        .collect();
    let w1: Vec<f64> = (0..2)
        .flat_map(|n| want[n * 9 + 3..n * 9 + 9].to_vec())
        .collect();
    assert_eq!(out[&s[0]], w0);
    assert_eq!(out[&s[1]], w1);
    assert_eq!(out[&e[2]], vec![2.0, 5.0, 8.0, 11.0]);
}

fn py_range(b: i64, e: i64, s: i64, d: i64) -> Vec<i64> {
    let norm = |v: i64, lo: i64, hi: i64| (if v < 0 { v + d } else { v }).clamp(lo, hi);
    let (mut i, stop) = if s > 0 {
        (norm(b, 0, d), norm(e, 0, d))
    } else {
        (norm(b, -1, d - 1), norm(e, -1, d - 1))
    };
    let mut out = Vec::new();
    while (s > 0 && i < stop) || (s < 0 && i > stop) {
        out.push(i);
        i += s;
    }
    out
}

type SliceCase = (
    Vec<i64>,
    Vec<i64>,
    Vec<i64>,
    Vec<bool>,
    Vec<bool>,
    Vec<bool>,
);

#[test]
fn slice_by_index_masks_and_negative_strides() {
    let s = [4usize, 5, 6];
    let cases: Vec<SliceCase> = vec![
        (
            vec![1, 0, -1],
            vec![3, 5, 0],
            vec![1, 2, -2],
            vec![false; 3],
            vec![false, true, false],
            vec![false; 3],
        ),
        (
            vec![0, -2, 2],
            vec![4, 100, 5],
            vec![2, 1, 1],
            vec![true, false, false],
            vec![false; 3],
            vec![false, false, true],
        ),
        (
            vec![3, 4, 0],
            vec![0, 0, 6],
            vec![-1, -3, 3],
            vec![false; 3],
            vec![false, false, false],
            vec![false; 3],
        ),
    ];
    for (b, e, st, bm, em, sm) in cases {
        let ranges: Vec<Vec<i64>> = (0..3)
            .map(|i| {
                if sm[i] {
                    vec![if b[i] < 0 { b[i] + s[i] as i64 } else { b[i] }]
                } else {
                    let d = s[i] as i64;
                    let bb = if bm[i] {
                        if st[i] > 0 {
                            0
                        } else {
                            d - 1
                        }
                    } else {
                        b[i]
                    };
                    let ee = if em[i] {
                        if st[i] > 0 {
                            d
                        } else {
                            -d - 1
                        }
                    } else {
                        e[i]
                    };
                    py_range(bb, ee, st[i], d)
                }
            })
            .collect();
        let full: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
        let out_shape: Vec<usize> = (0..3).filter(|&i| !sm[i]).map(|i| full[i]).collect();
        let xv = iota(numel(&s));
        let want: Vec<f64> = (0..numel(&full))
            .map(|t| {
                let idx = unravel(t, &full);
                let src: Vec<usize> = (0..3).map(|a| ranges[a][idx[a]] as usize).collect();
                xv[ravel(&src, &s)]
            })
            .collect();
        let mut p = Prog::new();
        let x = p.input("x", DType::Fp32, &s);
        let y = p.op(
            "slice_by_index",
            &[
                ("x", v(&x)),
                ("begin", A::Is(b)),
                ("end", A::Is(e)),
                ("stride", A::Is(st)),
                ("begin_mask", A::Bs(bm)),
                ("end_mask", A::Bs(em)),
                ("squeeze_mask", A::Bs(sm)),
            ],
            DType::Fp32,
            &out_shape,
        );
        p.output(&y);
        check(&p, &[("x", DType::Fp32, xv)], &y, &want);
    }
}

#[test]
fn slice_by_size_update_tile_pad() {
    let d = DType::Fp16;
    let mut p = Prog::new();
    let x = p.input("x", d, &[3, 4]);
    let u = p.input("u", d, &[2, 2]);
    let sz = p.op(
        "slice_by_size",
        &[
            ("x", v(&x)),
            ("begin", A::Is(vec![1, 1])),
            ("size", A::Is(vec![-1, 2])),
        ],
        d,
        &[2, 2],
    );
    let up = p.op(
        "slice_update",
        &[
            ("x", v(&x)),
            ("update", v(&u)),
            ("begin", A::Is(vec![1, 0])),
            ("end", A::Is(vec![3, 4])),
            ("stride", A::Is(vec![1, 2])),
        ],
        d,
        &[3, 4],
    );
    let t = p.op(
        "tile",
        &[("x", v(&u)), ("reps", A::Is(vec![2, 3]))],
        d,
        &[4, 6],
    );
    let pc = p.op(
        "pad",
        &[
            ("x", v(&x)),
            ("pad", A::Is(vec![1, 0, 2, 1])),
            ("mode", A::S("constant")),
            ("constant_val", A::F(d, -1.0)),
        ],
        d,
        &[4, 7],
    );
    let pr = p.op(
        "pad",
        &[
            ("x", v(&x)),
            ("pad", A::Is(vec![2, 1])),
            ("mode", A::S("reflect")),
        ],
        d,
        &[3, 7],
    );
    let pp = p.op(
        "pad",
        &[
            ("x", v(&x)),
            ("pad", A::Is(vec![1, 1, 1, 2])),
            ("mode", A::S("replicate")),
        ],
        d,
        &[5, 7],
    );
    for o in [&sz, &up, &t, &pc, &pr, &pp] {
        p.output(o);
    }
    let xv = iota(12);
    let uv: Vec<f64> = vec![50.0, 51.0, 52.0, 53.0];
    let out = run(&p, &[("x", d, xv.clone()), ("u", d, uv.clone())]);
    assert_eq!(out[&sz], vec![5.0, 6.0, 9.0, 10.0]);
    let mut w = xv.clone();
    w[4] = 50.0;
    w[6] = 51.0;
    w[8] = 52.0;
    w[10] = 53.0;
    assert_eq!(out[&up], w);
    let wt: Vec<f64> = (0..24).map(|i| uv[(i / 6 % 2) * 2 + (i % 6) % 2]).collect();
    assert_eq!(out[&t], wt);
    let at = |r: i64, c: i64| xv[(r * 4 + c) as usize];
    let wc: Vec<f64> = (0..28)
        .map(|i| {
            let (r, c) = (i as i64 / 7 - 1, i as i64 % 7 - 2);
            if (0..3).contains(&r) && (0..4).contains(&c) {
                at(r, c)
            } else {
                -1.0
            }
        })
        .collect();
    assert_eq!(out[&pc], wc);
    let refl = |c: i64, n: i64| {
        if c < 0 {
            -c
        } else if c >= n {
            2 * (n - 1) - c
        } else {
            c
        }
    };
    let wr: Vec<f64> = (0..21)
        .map(|i| at(i as i64 / 7, refl(i as i64 % 7 - 2, 4)))
        .collect();
    assert_eq!(out[&pr], wr);
    let wp: Vec<f64> = (0..35)
        .map(|i| {
            at(
                (i as i64 / 7 - 1).clamp(0, 2),
                (i as i64 % 7 - 1).clamp(0, 3),
            )
        })
        .collect();
    assert_eq!(out[&pp], wp);
}

#[test]
fn space_depth_round_trip_matches_dcr_order() {
    let d = DType::Fp32;
    let (n, c, h, w, b) = (2usize, 3usize, 4usize, 6usize, 2usize);
    let mut p = Prog::new();
    let x = p.input("x", d, &[n, c, h, w]);
    let s = p.op(
        "space_to_depth",
        &[("x", v(&x)), ("block_size", A::I(b as i64))],
        d,
        &[n, c * b * b, h / b, w / b],
    );
    let back = p.op(
        "depth_to_space",
        &[("x", v(&s)), ("block_size", A::I(b as i64))],
        d,
        &[n, c, h, w],
    );
    p.output(&s);
    p.output(&back);
    let xv = iota(n * c * h * w);
    let out = run(&p, &[("x", d, xv.clone())]);
    let so = [n, c * b * b, h / b, w / b];
    let want: Vec<f64> = (0..numel(&so))
        .map(|t| {
            let [nn, cc, hh, ww] = unravel(t, &so)[..] else {
                unreachable!()
            };
            let (blk, ch) = (cc / c, cc % c);
            let (i, j) = (blk / b, blk % b);
            xv[ravel(&[nn, ch, hh * b + i, ww * b + j], &[n, c, h, w])]
        })
        .collect();
    assert_eq!(out[&s], want);
    assert_eq!(out[&back], xv);
}

#[test]
fn band_part_fill_range() {
    let d = DType::Fp32;
    let mut p = Prog::new();
    let x = p.input("x", d, &[2, 4, 4]);
    let y = p.op(
        "band_part",
        &[("x", v(&x)), ("lower", A::I(1)), ("upper", A::I(0))],
        d,
        &[2, 4, 4],
    );
    let f = p.op(
        "fill",
        &[("shape", A::Is(vec![2, 2])), ("value", A::F(d, 1.5))],
        d,
        &[2, 2],
    );
    let r = p.op(
        "range_1d",
        &[("end", A::I(10)), ("start", A::I(1)), ("step", A::I(3))],
        DType::Int32,
        &[3],
    );
    for o in [&y, &f, &r] {
        p.output(o);
    }
    let xv: Vec<f64> = (0..32).map(|i| i as f64 + 1.0).collect();
    let out = run(&p, &[("x", d, xv.clone())]);
    let want: Vec<f64> = (0..32)
        .map(|t| {
            let (i, j) = ((t / 4) % 4, t % 4);
            if i >= j && i - j <= 1 {
                xv[t]
            } else {
                0.0
            }
        })
        .collect();
    assert_eq!(out[&y], want);
    assert_eq!(out[&f], vec![1.5; 4]);
    assert_eq!(out[&r], vec![1.0, 4.0, 7.0]);
}

#[test]
fn empty_tensors_and_empty_conv_inputs() {
    let d = DType::Fp32;
    let mut p = Prog::new();
    let x = p.input("x", d, &[0, 3]);
    let y = p.op("relu", &[("x", v(&x))], d, &[0, 3]);
    let s = p.op(
        "reduce_sum",
        &[
            ("x", v(&x)),
            ("axes", A::Is(vec![1])),
            ("keep_dims", A::B(false)),
        ],
        d,
        &[0],
    );
    p.output(&y);
    p.output(&s);
    let out = run(&p, &[("x", d, vec![])]);
    assert!(out[&y].is_empty() && out[&s].is_empty());

    let mut p = Prog::new();
    let x = p.input("x", d, &[1, 2, 0, 4]);
    let w = p.konst(d, &[1, 2, 1, 1], &[1.0, 1.0]);
    let y = p.op("conv", &[("x", v(&x)), ("weight", v(&w))], d, &[1, 1, 0, 4]);
    p.output(&y);
    let e = aneforge_cpu::compile(&p.build(), "main", &Default::default(), &Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("empty"), "{e}");
}
