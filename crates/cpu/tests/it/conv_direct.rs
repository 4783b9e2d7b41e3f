//! The direct and Winograd 3×3 conv kernels (AVX-512) against a naive f64 conv, over shapes that
//! reach every tile shape and edge: channel counts off multiples of 16, widths off the pixel and
//! Winograd tiles, several output rows per tile, padding 0/1/asymmetric, strides 1/2, dilation,
//! bias, fused relu, batch > 1, several input-channel blocks.
use crate::common;
use aneforge_mil::DType;
use common::*;

struct Case {
    n: usize,
    cin: usize,
    h: usize,
    w: usize,
    cout: usize,
    /// kernel height and width
    k: usize,
    stride: [usize; 2],
    dilation: usize,
    /// top, bottom, left, right
    pad: [usize; 4],
    bias: bool,
    relu: bool,
}

/// y[b, co, oy, ox] = bias[co] + Σ x[b, ci, oy·sh + i·d − pt, ox·sw + j·d − pl] · w[co, ci, i, j]
fn naive_conv(c: &Case, x: &[f64], w: &[f64], bias: &[f64], oh: usize, ow: usize) -> Vec<f64> {
    let mut y = Vec::with_capacity(c.n * c.cout * oh * ow);
    for b in 0..c.n {
        for co in 0..c.cout {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = if c.bias { bias[co] } else { 0.0 };
                    for ci in 0..c.cin {
                        for i in 0..c.k {
                            for j in 0..c.k {
                                let iy =
                                    (oy * c.stride[0] + i * c.dilation) as i64 - c.pad[0] as i64;
                                let ix =
                                    (ox * c.stride[1] + j * c.dilation) as i64 - c.pad[2] as i64;
                                if (0..c.h as i64).contains(&iy) && (0..c.w as i64).contains(&ix) {
                                    let xi =
                                        ((b * c.cin + ci) * c.h + iy as usize) * c.w + ix as usize;
                                    acc += x[xi] * w[((co * c.cin + ci) * c.k + i) * c.k + j];
                                }
                            }
                        }
                    }
                    y.push(if c.relu { acc.max(0.0) } else { acc });
                }
            }
        }
    }
    y
}

fn check(c: &Case, d: DType, threads: usize, rng: &mut Rng) {
    let ek = (c.k - 1) * c.dilation + 1;
    let oh = (c.h + c.pad[0] + c.pad[1] - ek) / c.stride[0] + 1;
    let ow = (c.w + c.pad[2] + c.pad[3] - ek) / c.stride[1] + 1;
    let xs = [c.n, c.cin, c.h, c.w];
    let ws = [c.cout, c.cin, c.k, c.k];
    let xv = quantize(d, &rng.vec(numel(&xs), -1.0, 1.0));
    let wv = quantize(d, &rng.vec(numel(&ws), -0.5, 0.5));
    let bv = quantize(d, &rng.vec(c.cout, -0.5, 0.5));
    let mut p = Prog::new();
    let x = p.input("x", d, &xs);
    let wc = p.konst(d, &ws, &wv);
    let mut args = vec![
        ("x", v(&x)),
        ("weight", v(&wc)),
        (
            "strides",
            A::Is(c.stride.iter().map(|&s| s as i64).collect()),
        ),
        ("pad_type", A::S("custom")),
        ("pad", A::Is(c.pad.iter().map(|&s| s as i64).collect())),
        ("dilations", A::Is(vec![c.dilation as i64; 2])),
        ("groups", A::I(1)),
    ];
    if c.bias {
        let bc = p.konst(d, &[c.cout], &bv);
        args.push(("bias", v(&bc)));
    }
    let os = [c.n, c.cout, oh, ow];
    let mut y = p.op("conv", &args, d, &os);
    if c.relu {
        y = p.op("relu", &[("x", v(&y))], d, &os);
    }
    p.output(&y);
    let what = format!(
        "conv {d} x {xs:?} → {os:?} kernel {k}x{k} stride {:?} dilation {} pad {:?} bias {} relu {}, \
         {threads} threads",
        c.stride,
        c.dilation,
        c.pad,
        c.bias,
        c.relu,
        k = c.k
    );
    let (plan, schedule) = compile_threads(&p, threads, &what);
    if aneforge_cpu::simd::has_avx512() {
        // Winograd needs 32 channels each way and 64 output pixels over the batch
        let kernel = if c.k == 3
            && c.stride == [1, 1]
            && c.dilation == 1
            && c.cin >= 32
            && c.cout >= 32
            && c.n * oh * ow >= 64
        {
            "conv-winograd"
        } else {
            "conv-direct"
        };
        assert!(
            schedule.contains(kernel),
            "{what}: expected {kernel}, schedule:\n{schedule}"
        );
    }
    let mut inst = plan.instantiate();
    set(&mut inst, "x", d, &xv);
    // twice: the second execute starts from the first one's scratch contents
    for _ in 0..2 {
        inst.execute().unwrap();
        let got = to_f64(&inst.read_output(&y).unwrap());
        let want = quantize(d, &naive_conv(c, &xv, &wv, &bv, oh, ow));
        assert_close(&what, d, &got, &want, 1.0);
    }
}

#[allow(clippy::too_many_arguments)]
fn case(
    n: usize,
    cin: usize,
    h: usize,
    w: usize,
    cout: usize,
    stride: [usize; 2],
    dilation: usize,
    pad: [usize; 4],
    bias: bool,
    relu: bool,
) -> Case {
    Case {
        n,
        cin,
        h,
        w,
        cout,
        k: 3,
        stride,
        dilation,
        pad,
        bias,
        relu,
    }
}

#[test]
fn direct_and_winograd_convs_match_naive_f64_over_every_tile_edge() {
    let mut rng = Rng(77);
    let cases = [
        // cin below one channel block, cout 20 = one full block + a 4-lane tail in one pair
        case(1, 5, 9, 11, 20, [1, 1], 1, [1, 1, 1, 1], true, false),
        // batch 2, three channel blocks with a tail, cout 33 = a pair and a lone 1-lane block,
        // width 29 → column tiles 10, 10, 9
        case(2, 37, 13, 29, 33, [1, 1], 1, [1, 1, 1, 1], true, true),
        // width 7: two output rows per tile and a leftover row
        case(1, 18, 7, 7, 48, [1, 1], 1, [1, 1, 1, 1], false, true),
        // width 14 exactly and 15 (8 + 7), no padding
        case(1, 16, 6, 16, 16, [1, 1], 1, [0, 0, 0, 0], true, false),
        case(1, 17, 5, 17, 32, [1, 1], 1, [0, 0, 0, 0], false, false),
        // width 56: seven 8-pixel tiles (a width past one tile that is a multiple of 8)
        case(1, 8, 4, 56, 16, [1, 1], 1, [1, 1, 1, 1], true, true),
        // stride 2 with padding 1 and valid
        case(1, 16, 6, 5, 32, [2, 2], 1, [1, 1, 1, 1], true, false),
        case(2, 20, 12, 17, 16, [2, 2], 1, [0, 0, 0, 0], true, true),
        case(1, 40, 29, 29, 17, [2, 2], 1, [1, 1, 1, 1], false, false),
        // height stride 2, width stride 1
        case(1, 16, 9, 8, 16, [2, 1], 1, [1, 1, 1, 1], true, false),
        // dilation 2
        case(1, 17, 10, 10, 24, [1, 1], 2, [2, 2, 2, 2], true, false),
        // asymmetric padding, tiny spatial sizes: width 1 (14 rows per tile), 2, 3, 4, 5, 6
        case(1, 32, 3, 3, 16, [1, 1], 1, [0, 2, 2, 0], true, false),
        case(1, 19, 20, 1, 16, [1, 1], 1, [1, 1, 1, 1], true, false),
        case(1, 19, 16, 2, 16, [1, 1], 1, [1, 1, 1, 1], false, false),
        case(1, 19, 9, 3, 16, [1, 1], 1, [1, 1, 1, 1], true, false),
        case(1, 19, 7, 4, 16, [1, 1], 1, [1, 1, 1, 1], true, false),
        case(1, 19, 5, 5, 16, [1, 1], 1, [1, 1, 1, 1], true, false),
        case(1, 19, 5, 6, 16, [1, 1], 1, [1, 1, 1, 1], true, false),
        // ResNet-like stage with many channel blocks
        case(1, 64, 14, 14, 64, [1, 1], 1, [1, 1, 1, 1], true, true),
        // three input-channel blocks of 64 (partial sums), cout tail of 8
        case(1, 130, 10, 12, 40, [1, 1], 1, [1, 1, 1, 1], true, true),
        case(1, 130, 9, 9, 24, [2, 2], 1, [1, 1, 1, 1], true, false),
        // Winograd: odd output sizes (cropped tiles), asymmetric padding, more than two groups
        // of 16 tiles across a row with a tail, several chunks of tile rows
        case(1, 33, 9, 11, 40, [1, 1], 1, [1, 1, 1, 1], true, true),
        case(1, 40, 9, 9, 32, [1, 1], 1, [0, 2, 2, 0], true, false),
        // below 64 output pixels the same shapes run direct (one image of 25, two of 36)
        case(1, 40, 5, 5, 32, [1, 1], 1, [0, 2, 2, 0], true, false),
        case(2, 32, 4, 4, 32, [1, 1], 1, [1, 1, 1, 1], true, true),
        case(1, 32, 6, 70, 48, [1, 1], 1, [1, 1, 1, 1], true, false),
        case(1, 32, 70, 70, 32, [1, 1], 1, [1, 1, 1, 1], true, true),
        // direct: a row of 70 pixels, few channels
        case(1, 3, 6, 70, 16, [1, 1], 1, [1, 1, 1, 1], true, false),
        // outputs of 2 × 2 pixels, one tile over the whole image: several input-channel
        // blocks, a pair and a lone block, stride 1 and 2, batch 2
        case(1, 130, 2, 2, 48, [1, 1], 1, [1, 1, 1, 1], true, true),
        case(2, 70, 4, 4, 40, [2, 2], 1, [1, 1, 1, 1], true, false),
        // long sums: 256 input channels, direct (36 pixels) and Winograd (64)
        case(1, 256, 6, 6, 32, [1, 1], 1, [1, 1, 1, 1], false, false),
        case(1, 256, 8, 8, 32, [1, 1], 1, [1, 1, 1, 1], false, false),
        // 7×7 over 3 channels (the ResNet stem): stride 2 with padding 3, 8-wide column tiles
        // and a tail; stride 1 over a width below one tile
        Case {
            k: 7,
            ..case(2, 3, 21, 37, 64, [2, 2], 1, [3, 3, 3, 3], true, true)
        },
        Case {
            k: 7,
            ..case(1, 4, 11, 9, 20, [1, 1], 1, [3, 2, 1, 0], false, false)
        },
    ];
    // on several threads each takes a band of tile rows (3 threads: bands of unequal length)
    for threads in [1, 2, 3] {
        for c in &cases {
            check(c, DType::Fp32, threads, &mut rng);
        }
    }
    for c in &cases[..3] {
        check(c, DType::Fp16, 2, &mut rng);
    }
}

/// Ungrouped convs over at most 64 pixels per image that the 3×3 kernels do not serve take the
/// packed-weight GEMM with the pixels as rows (1×1 convs reading the input in place, others their
/// im2col rows); more pixels keep the gemm crate. Both against a naive f64 conv, at 1 and 2
/// threads, with batches of 2 and 3 (images side by side on 2 threads), channel counts off the
/// panel width, bias and relu.
#[test]
fn convs_over_few_pixels_run_on_packed_weights_and_match_naive_f64() {
    let mut rng = Rng(91);
    // (n, cin, h, w, cout, kernel, stride, packed)
    let cases = [
        (2, 37, 2, 5, 45, [1, 1], [1, 1], true),
        (3, 24, 6, 6, 20, [1, 1], [1, 1], true),
        (1, 256, 8, 8, 96, [1, 1], [1, 1], true),
        (1, 19, 1, 1, 33, [1, 1], [1, 1], true),
        (2, 24, 9, 8, 40, [1, 1], [1, 1], false),
        // windows the 3×3 kernels do not take: 2×2 stride 2 (7×7 = 49 pixels), 1×3 over 3×20
        (2, 21, 14, 14, 35, [2, 2], [2, 2], true),
        (1, 40, 3, 22, 24, [1, 3], [1, 1], true),
        (1, 16, 10, 12, 20, [1, 3], [1, 1], false),
    ];
    let d = DType::Fp32;
    for (n, cin, h, w, cout, [kh, kw], [sh, sw], packed) in cases {
        let (oh, ow) = ((h - kh) / sh + 1, (w - kw) / sw + 1);
        let pix = oh * ow;
        let xs = [n, cin, h, w];
        let xv = rng.vec(numel(&xs), -1.0, 1.0);
        let wv = rng.vec(cout * cin * kh * kw, -0.5, 0.5);
        let bv = rng.vec(cout, -0.5, 0.5);
        let mut want = vec![0.0f64; n * cout * pix];
        for b in 0..n {
            for co in 0..cout {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = bv[co];
                        for ci in 0..cin {
                            for i in 0..kh {
                                for j in 0..kw {
                                    let xi = ((b * cin + ci) * h + oy * sh + i) * w + ox * sw + j;
                                    acc += xv[xi] * wv[((co * cin + ci) * kh + i) * kw + j];
                                }
                            }
                        }
                        want[(b * cout + co) * pix + oy * ow + ox] = acc.max(0.0);
                    }
                }
            }
        }
        for threads in [1, 2] {
            let mut p = Prog::new();
            let x = p.input("x", d, &xs);
            let wc = p.konst(d, &[cout, cin, kh, kw], &wv);
            let bc = p.konst(d, &[cout], &bv);
            let os = [n, cout, oh, ow];
            let y = p.op(
                "conv",
                &[
                    ("x", v(&x)),
                    ("weight", v(&wc)),
                    ("bias", v(&bc)),
                    ("strides", A::Is(vec![sh as i64, sw as i64])),
                    ("pad_type", A::S("valid")),
                    ("dilations", A::Is(vec![1, 1])),
                    ("groups", A::I(1)),
                ],
                d,
                &os,
            );
            let y = p.op("relu", &[("x", v(&y))], d, &os);
            p.output(&y);
            let what = format!("{kh}x{kw} conv stride {sh} {xs:?} -> {os:?}, {threads} threads");
            let (plan, schedule) = compile_threads(&p, threads, &what);
            assert_eq!(
                schedule.contains("conv-packed"),
                packed,
                "{what}: schedule:\n{schedule}"
            );
            let mut inst = plan.instantiate();
            set(&mut inst, "x", d, &xv);
            inst.execute().unwrap();
            let got = to_f64(&inst.read_output(&y).unwrap());
            assert_close(&what, d, &got, &want, 1.0);
        }
    }
}
