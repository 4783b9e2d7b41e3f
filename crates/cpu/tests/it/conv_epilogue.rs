//! Conv epilogues — bias, relu/relu6/clip/h-swish, a residual add — applied by each conv schedule as it
//! writes (depthwise, pointwise over many and few pixels, grouped im2col, direct), or run as a
//! chain where the schedule cannot take them, against an f64 reference, at 1 and 2 threads.
use crate::common;
use crate::conv_attention::conv_ref;
use aneforge_mil::DType;
use common::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tail {
    Bias,
    BiasRelu6,
    BiasClip,
    BiasResidual,
    BiasResidualRelu,
    Relu,
    /// `x·clip(x + 3, 0, 6)/6`, as ops.
    BiasHardSwish,
    /// `x·hard_sigmoid(x)`, then a scalar scale and shift (PP-LCNetV3).
    BiasHardSwishAffine,
    /// Not a fusable form: stays an elementwise chain.
    BiasSigmoid,
}

const TAILS: [Tail; 9] = [
    Tail::Bias,
    Tail::BiasRelu6,
    Tail::BiasClip,
    Tail::BiasResidual,
    Tail::BiasResidualRelu,
    Tail::Relu,
    Tail::BiasHardSwish,
    Tail::BiasHardSwishAffine,
    Tail::BiasSigmoid,
];

#[test]
fn conv_epilogues_are_fused_into_every_schedule_and_match_f64() {
    let mut rng = Rng(53);
    let d = DType::Fp32;
    // (n, cin, h, w, cout, k, stride, groups): depthwise 3×3 s1 / s2 and 5×5 s2; pointwise over
    // 144 and 2 × 81 pixels (split into channel bands on 2 threads) and over 1024 pixels × 512
    // channels (several pixel chunks); pointwise over 49 pixels (packed); grouped 3×3 and
    // ungrouped 5×5 (im2col); ungrouped 3×3 (direct on AVX-512: stride 1 over 10 × 10, a stem's
    // stride 2 over three channels in tiles of eight columns; Winograd over 32 channels);
    // depthwise rows summed straight into the output (16 columns, 48 plus an overlapping tail)
    let cases = [
        (1, 24, 14, 14, 24, 3, 1, 24),
        (2, 16, 15, 15, 16, 3, 2, 16),
        (1, 8, 17, 12, 8, 5, 2, 8),
        (1, 24, 12, 12, 40, 1, 1, 1),
        (2, 16, 9, 9, 24, 1, 1, 1),
        (1, 8, 32, 32, 512, 1, 1, 1),
        (1, 32, 7, 7, 48, 1, 1, 1),
        (1, 8, 9, 9, 12, 3, 1, 2),
        (1, 4, 12, 12, 8, 5, 1, 1),
        (1, 8, 10, 10, 16, 3, 1, 1),
        (1, 3, 32, 32, 32, 3, 2, 1),
        (1, 32, 12, 12, 32, 3, 1, 1),
        (1, 16, 16, 16, 16, 3, 1, 16),
        (2, 8, 108, 108, 8, 3, 2, 8),
    ];
    for &(n, cin, h, w, cout, k, st, groups) in &cases {
        let direct = aneforge_cpu::simd::has_avx512() && k == 3 && groups == 1;
        let pad = (k - 1) / 2;
        let (oh, ow) = ((h + 2 * pad - k) / st + 1, (w + 2 * pad - k) / st + 1);
        let (xs, ws, os) = (
            [n, cin, h, w],
            [cout, cin / groups, k, k],
            [n, cout, oh, ow],
        );
        let xv = quantize(d, &rng.vec(numel(&xs), -1.0, 1.0));
        let wv = quantize(d, &rng.vec(numel(&ws), -0.5, 0.5));
        let bv = quantize(d, &rng.vec(cout, -0.5, 0.5));
        let rv = quantize(d, &rng.vec(numel(&os), -1.0, 1.0));
        for tail in TAILS {
            let bias = tail != Tail::Relu;
            let zero = vec![0.0; cout];
            let raw = conv_ref(
                &xv,
                xs,
                &wv,
                ws,
                if bias { &bv } else { &zero },
                groups,
                [st, st],
                [1, 1],
                [pad; 4],
                os,
            );
            let want: Vec<f64> = raw
                .iter()
                .zip(&rv)
                .map(|(&y, &r)| {
                    let y = y as f32 as f64;
                    match tail {
                        Tail::Bias => y,
                        Tail::BiasRelu6 => y.clamp(0.0, 6.0),
                        Tail::BiasClip => y.clamp(-0.3, 0.4),
                        Tail::BiasResidual => y + r,
                        Tail::BiasResidualRelu => (y + r).max(0.0),
                        Tail::Relu => y.max(0.0),
                        Tail::BiasHardSwish => y * (y + 3.0).clamp(0.0, 6.0) / 6.0,
                        Tail::BiasHardSwishAffine => {
                            y * (y + 3.0).clamp(0.0, 6.0) / 6.0 * 1.25 + 0.0625
                        }
                        Tail::BiasSigmoid => 1.0 / (1.0 + (-y).exp()),
                    }
                })
                .collect();
            let mut p = Prog::new();
            let x = p.input("x", d, &xs);
            let r = p.input("r", d, &os);
            let wc = p.konst(d, &ws, &wv);
            let bc = p.konst(d, &[cout], &bv);
            let mut args = vec![
                ("x", v(&x)),
                ("weight", v(&wc)),
                ("strides", A::Is(vec![st as i64; 2])),
                ("pad_type", A::S("custom")),
                ("pad", A::Is(vec![pad as i64; 4])),
                ("dilations", A::Is(vec![1, 1])),
                ("groups", A::I(groups as i64)),
            ];
            if bias {
                args.push(("bias", v(&bc)));
            }
            let mut y = p.op("conv", &args, d, &os);
            let un = |p: &mut Prog, op: &str, y: &str| p.op(op, &[("x", v(y))], d, &os);
            let add = |p: &mut Prog, y: &str| p.op("add", &[("x", v(y)), ("y", v(&r))], d, &os);
            let bin = |p: &mut Prog, op: &str, a: A, b: A| p.op(op, &[("x", a), ("y", b)], d, &os);
            y = match tail {
                Tail::Bias => y,
                Tail::BiasRelu6 => un(&mut p, "relu6", &y),
                Tail::BiasClip => p.op(
                    "clip",
                    &[
                        ("x", v(&y)),
                        ("alpha", A::F(d, -0.3)),
                        ("beta", A::F(d, 0.4)),
                    ],
                    d,
                    &os,
                ),
                Tail::BiasResidual => add(&mut p, &y),
                Tail::BiasResidualRelu => {
                    let s = add(&mut p, &y);
                    un(&mut p, "relu", &s)
                }
                Tail::Relu => un(&mut p, "relu", &y),
                Tail::BiasHardSwish => {
                    let t = bin(&mut p, "add", v(&y), A::F(d, 3.0));
                    let c = un(&mut p, "relu6", &t);
                    let m = bin(&mut p, "mul", v(&y), v(&c));
                    bin(&mut p, "real_div", v(&m), A::F(d, 6.0))
                }
                Tail::BiasHardSwishAffine => {
                    let g = p.op(
                        "sigmoid_hard",
                        &[
                            ("x", v(&y)),
                            ("alpha", A::F(d, 1.0 / 6.0)),
                            ("beta", A::F(d, 0.5)),
                        ],
                        d,
                        &os,
                    );
                    let h = bin(&mut p, "mul", v(&y), v(&g));
                    let h = bin(&mut p, "mul", A::F(d, 1.25), v(&h));
                    bin(&mut p, "add", v(&h), A::F(d, 0.0625))
                }
                Tail::BiasSigmoid => un(&mut p, "sigmoid", &y),
            };
            p.output(&y);
            for threads in [1, 2] {
                let what = format!(
                    "conv {xs:?} k{k} s{st} g{groups} → {os:?} then {tail:?}, {threads} threads"
                );
                let (plan, schedule) = compile_threads(&p, threads, &what);
                // the register-tiled kernels take a bias and an activation, Winograd only relu
                let winograd = schedule.contains("conv-winograd");
                assert_eq!(
                    winograd,
                    direct && cin >= 32 && st == 1,
                    "{what}: schedule:\n{schedule}"
                );
                let fused = match tail {
                    Tail::BiasSigmoid => false,
                    Tail::Bias | Tail::Relu => true,
                    Tail::BiasRelu6
                    | Tail::BiasClip
                    | Tail::BiasHardSwish
                    | Tail::BiasHardSwishAffine => !winograd,
                    Tail::BiasResidual | Tail::BiasResidualRelu => !direct,
                };
                assert_eq!(
                    schedule.contains("+fused"),
                    fused,
                    "{what}: schedule:\n{schedule}"
                );
                let mut inst = plan.instantiate();
                set(&mut inst, "x", d, &xv);
                set(&mut inst, "r", d, &rv);
                // twice: the second run starts from the first one's scratch
                for _ in 0..2 {
                    inst.execute().unwrap();
                    let got = to_f64(&inst.read_output(&y).unwrap());
                    assert_close(&what, d, &got, &want, 1.0);
                }
            }
        }
    }
}
