//! A pointwise conv (bias, activation) read only by a depthwise conv is computed by the
//! depthwise kernel block by block (`conv-expanded`, AVX-512 only), against an f64 reference,
//! at 1 and 2 threads; where the pattern does not hold the two convs stay apart.
use crate::common;
use crate::conv_attention::conv_ref;
use aneforge_mil::DType;
use common::*;

#[derive(Clone, Copy, Debug)]
enum Act {
    None,
    Relu6,
    Clip,
    Sigmoid,
}

fn act_ref(a: Act, y: f64) -> f64 {
    match a {
        Act::None => y,
        Act::Relu6 => y.clamp(0.0, 6.0),
        Act::Clip => y.clamp(-0.3, 0.4),
        Act::Sigmoid => 1.0 / (1.0 + (-y).exp()),
    }
}

fn act_op(p: &mut Prog, a: Act, y: String, shape: &[usize]) -> String {
    let d = DType::Fp32;
    match a {
        Act::None => y,
        Act::Relu6 => p.op("relu6", &[("x", v(&y))], d, shape),
        Act::Clip => p.op(
            "clip",
            &[
                ("x", v(&y)),
                ("alpha", A::F(d, -0.3)),
                ("beta", A::F(d, 0.4)),
            ],
            d,
            shape,
        ),
        Act::Sigmoid => p.op("sigmoid", &[("x", v(&y))], d, shape),
    }
}

struct Case {
    n: usize,
    cin: usize,
    h: usize,
    w: usize,
    /// The expanded channels.
    c: usize,
    k: usize,
    stride: usize,
    /// The pointwise conv's bias and activation.
    bias: bool,
    act: Act,
    /// The depthwise conv's activation (after its bias).
    dw_act: Act,
    /// The expanded tensor is also an output of the program.
    shared: bool,
    /// Whether the pair must be fused.
    fused: bool,
}

#[test]
fn a_pointwise_conv_read_only_by_a_depthwise_conv_is_computed_by_it_and_matches_f64() {
    let mut rng = Rng(71);
    let d = DType::Fp32;
    let case = |n, cin, h, w, c, k, stride, act, dw_act| Case {
        n,
        cin,
        h,
        w,
        c,
        k,
        stride,
        bias: true,
        act,
        dw_act,
        shared: false,
        fused: true,
    };
    let cases = [
        // 400 pixels: 32-lane columns plus an overlapping last one; stride 2
        case(1, 16, 20, 20, 48, 3, 2, Act::Relu6, Act::Relu6),
        // 20 channels: the last block of twelve is partly past the channels
        case(2, 24, 14, 14, 20, 3, 1, Act::Clip, Act::None),
        // 9 × 9 pixels, a 5 × 5 stride-2 depthwise conv
        case(1, 8, 9, 9, 16, 5, 2, Act::None, Act::Relu6),
        // rows of 28 summed straight into the output, batch 2 over several tasks
        case(2, 16, 33, 28, 24, 3, 1, Act::Relu6, Act::Relu6),
        // no bias and no activation: the depthwise conv reads the product itself
        Case {
            bias: false,
            ..case(1, 8, 12, 12, 16, 3, 1, Act::None, Act::None)
        },
        // over 7 × 7 pixels the pointwise conv keeps its own packed product
        Case {
            fused: false,
            ..case(1, 8, 7, 7, 16, 3, 1, Act::Relu6, Act::Relu6)
        },
        // an activation the conv epilogue does not take
        Case {
            fused: false,
            ..case(1, 8, 12, 12, 16, 3, 1, Act::Sigmoid, Act::None)
        },
        // the expanded tensor is read by someone else too
        Case {
            shared: true,
            fused: false,
            ..case(1, 8, 12, 12, 16, 3, 1, Act::Relu6, Act::None)
        },
    ];
    for c in &cases {
        let pad = (c.k - 1) / 2;
        let (oh, ow) = (
            (c.h + 2 * pad - c.k) / c.stride + 1,
            (c.w + 2 * pad - c.k) / c.stride + 1,
        );
        let (xs, es, os) = (
            [c.n, c.cin, c.h, c.w],
            [c.n, c.c, c.h, c.w],
            [c.n, c.c, oh, ow],
        );
        let (w1s, w2s) = ([c.c, c.cin, 1, 1], [c.c, 1, c.k, c.k]);
        let xv = rng.vec(numel(&xs), -1.0, 1.0);
        let w1 = rng.vec(numel(&w1s), -0.5, 0.5);
        let b1 = if c.bias {
            rng.vec(c.c, -0.5, 0.5)
        } else {
            vec![0.0; c.c]
        };
        let w2 = rng.vec(numel(&w2s), -0.5, 0.5);
        let b2 = rng.vec(c.c, -0.5, 0.5);
        let pw = conv_ref(&xv, xs, &w1, w1s, &b1, 1, [1, 1], [1, 1], [0; 4], es);
        let e: Vec<f64> = pw
            .iter()
            .map(|&y| act_ref(c.act, y) as f32 as f64)
            .collect();
        let dw = conv_ref(
            &e,
            es,
            &w2,
            w2s,
            &b2,
            c.c,
            [c.stride; 2],
            [1, 1],
            [pad; 4],
            os,
        );
        let want: Vec<f64> = dw.iter().map(|&y| act_ref(c.dw_act, y)).collect();

        let mut p = Prog::new();
        let x = p.input("x", d, &xs);
        let (w1c, b1c) = (p.konst(d, &w1s, &w1), p.konst(d, &[c.c], &b1));
        let (w2c, b2c) = (p.konst(d, &w2s, &w2), p.konst(d, &[c.c], &b2));
        let conv = |p: &mut Prog, x: &str, w: &str, b: Option<&str>, s, pad, groups, shape| {
            let mut args = vec![
                ("x", v(x)),
                ("weight", v(w)),
                ("strides", A::Is(vec![s as i64; 2])),
                ("pad_type", A::S("custom")),
                ("pad", A::Is(vec![pad as i64; 4])),
                ("dilations", A::Is(vec![1, 1])),
                ("groups", A::I(groups as i64)),
            ];
            if let Some(b) = b {
                args.push(("bias", v(b)));
            }
            p.op("conv", &args, d, shape)
        };
        let y = conv(&mut p, &x, &w1c, c.bias.then_some(&*b1c), 1, 0, 1, &es);
        let y = act_op(&mut p, c.act, y, &es);
        let z = conv(&mut p, &y, &w2c, Some(&b2c), c.stride, pad, c.c, &os);
        let z = act_op(&mut p, c.dw_act, z, &os);
        p.output(&z);
        if c.shared {
            p.output(&y);
        }
        for threads in [1, 2] {
            let what = format!(
                "pointwise {xs:?} → {es:?} bias {} {:?}, depthwise k{} s{} {:?} → {os:?}, \
                 {threads} threads",
                c.bias, c.act, c.k, c.stride, c.dw_act
            );
            let (plan, schedule) = compile_threads(&p, threads, &what);
            assert_eq!(
                schedule.contains("conv-expanded"),
                c.fused && aneforge_cpu::simd::has_avx512(),
                "{what}: schedule:\n{schedule}"
            );
            let mut inst = plan.instantiate();
            set(&mut inst, "x", d, &xv);
            // twice: the second run starts from the first one's scratch
            for _ in 0..2 {
                inst.execute().unwrap();
                let got = to_f64(&inst.read_output(&z).unwrap());
                assert_close(&what, d, &got, &want, 1.0);
                if c.shared {
                    let got = to_f64(&inst.read_output(&y).unwrap());
                    assert_close(&what, d, &got, &e, 1.0);
                }
            }
        }
    }
}
