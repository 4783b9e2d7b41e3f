use crate::common;
use aneforge_mil::DType;
use common::*;

pub(crate) fn erf64(x: f64) -> f64 {
    // Series / continued fraction, accurate to ~1e-15 for the test range.
    let t = x.abs();
    let r = if t < 2.5 {
        let mut sum = t;
        let mut term = t;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -t * t / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() < 1e-17 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (t + f);
        }
        1.0 - (-t * t).exp() / (std::f64::consts::PI.sqrt() * (t + f))
    };
    r.copysign(x)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn unary_ref(op: &str, x: f64) -> f64 {
    match op {
        "relu" => x.max(0.0),
        "relu6" => x.clamp(0.0, 6.0),
        "gelu_exact" => 0.5 * x * (1.0 + erf64(x / 2f64.sqrt())),
        "gelu_tanh" => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        "gelu_sigmoid" => x * sigmoid(1.702 * x),
        "silu" => x * sigmoid(x),
        "sigmoid" => sigmoid(x),
        "sigmoid_hard" => (0.2 * x + 0.5).clamp(0.0, 1.0),
        "tanh" => x.tanh(),
        "exp" => x.exp(),
        "exp2" => x.exp2(),
        "log" => (x.abs() + 0.1).ln(),
        "sqrt" => (x.abs()).sqrt(),
        "rsqrt" => 1.0 / (x.abs() + 0.1 + 1e-12).sqrt(),
        "inverse" => 1.0 / (x + 1e-4),
        "abs" => x.abs(),
        "sign" => x.signum(),
        "square" => x * x,
        "sin" => x.sin(),
        "cos" => x.cos(),
        "erf" => erf64(x),
        "softplus" => x.exp().ln_1p(),
        "softsign" => x / (1.0 + x.abs()),
        "clip" => x.clamp(-0.5, 0.75),
        "leaky_relu" => {
            if x >= 0.0 {
                x
            } else {
                0.01 * x
            }
        }
        "elu" => {
            if x > 0.0 {
                x
            } else {
                x.exp() - 1.0
            }
        }
        "floor" => x.floor(),
        "ceil" => x.ceil(),
        "round" => x.round_ties_even(),
        _ => unreachable!(),
    }
}

const UNARY: &[&str] = &[
    "relu",
    "relu6",
    "gelu_exact",
    "gelu_tanh",
    "gelu_sigmoid",
    "silu",
    "sigmoid",
    "sigmoid_hard",
    "tanh",
    "exp",
    "exp2",
    "log",
    "sqrt",
    "rsqrt",
    "inverse",
    "abs",
    "sign",
    "square",
    "sin",
    "cos",
    "erf",
    "softplus",
    "softsign",
    "clip",
    "leaky_relu",
    "elu",
    "floor",
    "ceil",
    "round",
];

#[test]
fn unary_ops_match_f64_reference() {
    let mut rng = Rng(7);
    for &d in &[DType::Fp32, DType::Fp16] {
        for &name in UNARY {
            let shape = [1 + rng.below(3), 1 + rng.below(70), 1 + rng.below(9)];
            let mut p = Prog::new();
            let x = p.input("x", d, &shape);
            // inputs for log/sqrt/rsqrt are made positive in the program via abs + 0.1
            let src = if matches!(name, "log" | "sqrt" | "rsqrt") {
                let a = p.op("abs", &[("x", v(&x))], d, &shape);
                if name == "sqrt" {
                    a
                } else {
                    p.op("add", &[("x", v(&a)), ("y", A::F(d, 0.1))], d, &shape)
                }
            } else {
                x.clone()
            };
            let (op, extra): (&str, Vec<(&str, A)>) = match name {
                "gelu_exact" => ("gelu", vec![("mode", A::S("EXACT"))]),
                "gelu_tanh" => ("gelu", vec![("mode", A::S("TANH_APPROXIMATION"))]),
                "gelu_sigmoid" => ("gelu", vec![("mode", A::S("SIGMOID_APPROXIMATION"))]),
                "clip" => (
                    "clip",
                    vec![("alpha", A::F(d, -0.5)), ("beta", A::F(d, 0.75))],
                ),
                n => (n, vec![]),
            };
            let mut args = vec![("x", v(&src))];
            args.extend(extra);
            let y = p.op(op, &args, d, &shape);
            p.output(&y);
            let xs = quantize(d, &rng.vec(numel(&shape), -4.0, 4.0));
            let got = &run(&p, &[("x", d, xs.clone())])[&y];
            let want: Vec<f64> = xs
                .iter()
                .map(|&x| {
                    // mirror the program's fp16 rounding of the helper ops
                    let x_in = match name {
                        "log" | "rsqrt" => {
                            quantize(d, &[quantize(d, &[x.abs()])[0] + 0.1])[0] - 0.1
                        }
                        _ => x,
                    };
                    quantize(d, &[unary_ref(name, x_in)])[0]
                })
                .collect();
            // floor/ceil/round/sign are exact; transcendental f32 within a few ulp
            assert_close(&format!("{name} {d}"), d, got, &want, 1e-3);
        }
    }
}

fn binary_ref(op: &str, a: f64, b: f64) -> f64 {
    let t = |c: bool| c as i32 as f64;
    match op {
        "add" => a + b,
        "sub" => a - b,
        "mul" => a * b,
        "real_div" => a / b,
        "pow" => a.abs().powf(b),
        "maximum" => a.max(b),
        "minimum" => a.min(b),
        "floor_div" => (a / b).floor(),
        "mod" => a - (a / b).floor() * b,
        "equal" => t(a == b),
        "not_equal" => t(a != b),
        "greater" => t(a > b),
        "greater_equal" => t(a >= b),
        "less" => t(a < b),
        "less_equal" => t(a <= b),
        _ => unreachable!(),
    }
}

fn random_pair(rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let rank = 1 + rng.below(4);
    let full: Vec<usize> = (0..rank).map(|_| 1 + rng.below(6)).collect();
    let mut a = full.clone();
    let mut b = full.clone();
    for i in 0..rank {
        match rng.below(4) {
            0 => a[i] = 1,
            1 => b[i] = 1,
            _ => {}
        }
    }
    let drop = rng.below(rank);
    if rng.below(2) == 0 {
        b.drain(..drop);
    }
    (a, b)
}

#[test]
fn binary_ops_broadcast_like_numpy() {
    let mut rng = Rng(11);
    let ops = [
        "add",
        "sub",
        "mul",
        "real_div",
        "pow",
        "maximum",
        "minimum",
        "floor_div",
        "mod",
        "equal",
        "not_equal",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
    ];
    for &d in &[DType::Fp32, DType::Fp16] {
        for op in ops {
            for _ in 0..4 {
                let (sa, sb) = random_pair(&mut rng);
                let so = bshape(&sa, &sb);
                let mut p = Prog::new();
                let a = p.input("a", d, &sa);
                let b = p.input("b", d, &sb);
                let cmp = matches!(
                    op,
                    "equal" | "not_equal" | "greater" | "greater_equal" | "less" | "less_equal"
                );
                let od = if cmp { DType::Bool } else { d };
                let x = if op == "pow" {
                    p.op("abs", &[("x", v(&a))], d, &sa)
                } else {
                    a.clone()
                };
                let y = p.op(op, &[("x", v(&x)), ("y", v(&b))], od, &so);
                p.output(&y);
                let mut av = quantize(d, &rng.vec(numel(&sa), -3.0, 3.0));
                let mut bv = quantize(d, &rng.vec(numel(&sb), -3.0, 3.0));
                if cmp {
                    // force some equal pairs
                    av.iter_mut().for_each(|x| *x = x.round());
                    bv.iter_mut().for_each(|x| *x = x.round());
                }
                if matches!(op, "real_div" | "floor_div" | "mod") {
                    bv.iter_mut().for_each(|x| {
                        if x.abs() < 0.25 {
                            *x = 0.5
                        }
                    });
                }
                let got = &run(&p, &[("a", d, av.clone()), ("b", d, bv.clone())])[&y];
                let want: Vec<f64> = (0..numel(&so))
                    .map(|i| {
                        let idx = unravel(i, &so);
                        let r = binary_ref(op, bcast(&av, &sa, &idx), bcast(&bv, &sb, &idx));
                        quantize(od, &[r])[0]
                    })
                    .collect();
                assert_close(&format!("{op} {d} {sa:?} {sb:?}"), d, got, &want, 1e-2);
            }
        }
    }
}

#[test]
fn fp16_overflows_to_infinity_like_the_ane() {
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp16, &[2]);
    let y = p.op(
        "mul",
        &[("x", v(&x)), ("y", A::F(DType::Fp16, 1000.0))],
        DType::Fp16,
        &[2],
    );
    p.output(&y);
    let got = &run(&p, &[("x", DType::Fp16, vec![100.0, -70.0])])[&y];
    assert_eq!(got[0], f64::INFINITY);
    assert_eq!(got[1], f64::NEG_INFINITY);
}

#[test]
fn select_logical_and_int_ops() {
    let mut rng = Rng(5);
    let mut p = Prog::new();
    let c = p.input("c", DType::Bool, &[3, 1]);
    let a = p.input("a", DType::Fp32, &[3, 4]);
    let b = p.input("b", DType::Fp32, &[4]);
    let s = p.op(
        "select",
        &[("cond", v(&c)), ("a", v(&a)), ("b", v(&b))],
        DType::Fp32,
        &[3, 4],
    );
    let i = p.input("i", DType::Int32, &[5]);
    let j = p.op(
        "add",
        &[("x", v(&i)), ("y", A::I(16_777_217))],
        DType::Int32,
        &[5],
    );
    let k = p.op(
        "floor_div",
        &[("x", v(&i)), ("y", A::I(3))],
        DType::Int32,
        &[5],
    );
    let m = p.op("mod", &[("x", v(&i)), ("y", A::I(3))], DType::Int32, &[5]);
    let f = p.op(
        "cast",
        &[("x", v(&a)), ("dtype", A::S("int32"))],
        DType::Int32,
        &[3, 4],
    );
    let n = p.op("logical_not", &[("x", v(&c))], DType::Bool, &[3, 1]);
    let x = p.op(
        "logical_xor",
        &[("x", v(&n)), ("y", v(&c))],
        DType::Bool,
        &[3, 1],
    );
    for o in [&s, &j, &k, &m, &f, &n, &x] {
        p.output(o);
    }
    let cv = vec![1.0, 0.0, 1.0];
    let av = rng
        .vec(12, -5.0, 5.0)
        .iter()
        .map(|&x| x as f32 as f64)
        .collect::<Vec<_>>();
    let bv = rng
        .vec(4, -5.0, 5.0)
        .iter()
        .map(|&x| x as f32 as f64)
        .collect::<Vec<_>>();
    let iv = vec![-7.0, -1.0, 0.0, 4.0, 8.0];
    let out = run(
        &p,
        &[
            ("c", DType::Bool, cv.clone()),
            ("a", DType::Fp32, av.clone()),
            ("b", DType::Fp32, bv.clone()),
            ("i", DType::Int32, iv.clone()),
        ],
    );
    for r in 0..3 {
        for q in 0..4 {
            let want = if cv[r] != 0.0 { av[r * 4 + q] } else { bv[q] };
            assert_eq!(out[&s][r * 4 + q], want);
            assert_eq!(out[&f][r * 4 + q], av[r * 4 + q].trunc());
        }
    }
    for (t, &x) in iv.iter().enumerate() {
        assert_eq!(out[&j][t] as i64, x as i64 + 16_777_217);
        assert_eq!(out[&k][t], (x / 3.0f64).floor());
        assert_eq!(out[&m][t], x - (x / 3.0f64).floor() * 3.0);
    }
    assert_eq!(out[&n], vec![0.0, 1.0, 0.0]);
    assert_eq!(out[&x], vec![1.0, 1.0, 1.0]);
}

/// An int32 or int8 tensor cast to fp32 rounds once, as `x as f32` does (2^24 + 1 and
/// -(2^31 - 1) are not representable), and runs as a float chain that a product reading it
/// joins (a mean pooling's mask times the hidden states).
#[test]
fn integer_casts_to_fp32_round_once_and_fuse() {
    let mut p = Prog::new();
    let i = p.input("i", DType::Int32, &[2, 3]);
    let q = p.input("q", DType::Int8, &[2, 3]);
    let h = p.input("h", DType::Fp32, &[2, 3]);
    let cast = |p: &mut Prog, x: &str| {
        p.op(
            "cast",
            &[("x", v(x)), ("dtype", A::S("fp32"))],
            DType::Fp32,
            &[2, 3],
        )
    };
    let fi = cast(&mut p, &i);
    let fq = cast(&mut p, &q);
    let m = p.op("mul", &[("x", v(&h)), ("y", v(&fi))], DType::Fp32, &[2, 3]);
    let y = p.op("add", &[("x", v(&m)), ("y", v(&fq))], DType::Fp32, &[2, 3]);
    p.output(&y);
    let sched = compile_threads(&p, 1, "casts").1;
    assert!(
        sched.contains("elementwise[") && !sched.contains("elementwise-int"),
        "{sched}"
    );
    let iv = [16_777_217.0, -2_147_483_647.0, 3.0, -5.0, 0.0, 33_554_435.0];
    let qv = [-128.0, 127.0, 0.0, -1.0, 5.0, 9.0];
    let hv = [1.0, 0.5, -2.0, 0.25, 3.0, 1.0];
    let out = run(
        &p,
        &[
            ("i", DType::Int32, iv.to_vec()),
            ("q", DType::Int8, qv.to_vec()),
            ("h", DType::Fp32, hv.to_vec()),
        ],
    );
    for t in 0..6 {
        let want = (hv[t] as f32 * iv[t] as i32 as f32) + qv[t] as f32;
        assert_eq!(out[&y][t], want as f64, "element {t}");
    }
}

/// `pow` by a constant 2, 3 or 4 runs as products (negative bases included, as in GELU's tanh
/// form); other constants and mixed exponents keep `powf`. Against f64 powers, fp32 and fp16.
#[test]
fn pow_by_small_constant_exponents_matches_f64() {
    let mut rng = Rng(12);
    let shape = [3, 37];
    // one exponent for all (shape [1]) or one per row (shape [3, 1])
    let cases: [&[f64]; 6] = [
        &[2.0],
        &[3.0],
        &[4.0],
        &[3.0, 3.0, 3.0],
        &[2.5],
        &[3.0, 2.0, 3.0],
    ];
    for &d in &[DType::Fp32, DType::Fp16] {
        for exps in cases {
            let mut p = Prog::new();
            let a = p.input("a", d, &shape);
            let es: &[usize] = if exps.len() == 1 { &[1] } else { &[3, 1] };
            let e = p.konst(d, es, exps);
            let fractional = exps.iter().any(|c| c.fract() != 0.0);
            let x = if fractional {
                p.op("abs", &[("x", v(&a))], d, &shape)
            } else {
                a.clone()
            };
            let y = p.op("pow", &[("x", v(&x)), ("y", v(&e))], d, &shape);
            p.output(&y);
            let av = quantize(d, &rng.vec(numel(&shape), -3.0, 3.0));
            let got = &run(&p, &[("a", d, av.clone())])[&y];
            let want: Vec<f64> = av
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let c = exps[if exps.len() == 1 { 0 } else { i / shape[1] }];
                    let base = if fractional { x.abs() } else { x };
                    quantize(d, &[base.powf(c)])[0]
                })
                .collect();
            assert_close(&format!("pow {d} by {exps:?}"), d, got, &want, 1e-2);
        }
    }
}
