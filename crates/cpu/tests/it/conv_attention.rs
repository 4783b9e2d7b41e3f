use crate::common;
use aneforge_cpu::{compile, BlobStore, CompileOptions, MatmulPrecision};
use aneforge_mil::DType;
use common::*;

#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_ref(
    x: &[f64],
    xs: [usize; 4],
    w: &[f64],
    ws: [usize; 4],
    b: &[f64],
    groups: usize,
    s: [usize; 2],
    dl: [usize; 2],
    pad: [usize; 4],
    os: [usize; 4],
) -> Vec<f64> {
    let [n, _cin, h, wd] = xs;
    let [cout, cig, kh, kw] = ws;
    let cog = cout / groups;
    let mut out = vec![0.0; numel(&os)];
    for bn in 0..n {
        for co in 0..cout {
            let g = co / cog;
            for oy in 0..os[2] {
                for ox in 0..os[3] {
                    let mut acc = b[co];
                    for ci in 0..cig {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (oy * s[0] + i * dl[0]) as i64 - pad[0] as i64;
                                let ix = (ox * s[1] + j * dl[1]) as i64 - pad[2] as i64;
                                if iy >= 0 && iy < h as i64 && ix >= 0 && ix < wd as i64 {
                                    acc += x
                                        [ravel(&[bn, g * cig + ci, iy as usize, ix as usize], &xs)]
                                        * w[ravel(&[co, ci, i, j], &ws)];
                                }
                            }
                        }
                    }
                    out[ravel(&[bn, co, oy, ox], &os)] = acc;
                }
            }
        }
    }
    out
}

/// A `conv` of an input `x` [xs] in `d` with constant weight `wv` [cout, cin/groups, k, k] and
/// bias `bv`, stride `st`, dilation `dl` and padding `pt` ("valid", "custom" = [1, 2, 0, 1],
/// "same", "same_lower"): the program (no output marked), the conv's output, its padding [top,
/// bottom, left, right] and output shape.
fn conv_program(
    d: DType,
    xs: [usize; 4],
    (cout, k, st, dl, groups, pt): (usize, usize, usize, usize, usize, &'static str),
    wv: &[f64],
    bv: &[f64],
) -> (Prog, String, [usize; 4], [usize; 4]) {
    let [n, cin, h, w] = xs;
    let ek = (k - 1) * dl + 1;
    let pad: [usize; 4] = match pt {
        "valid" => [0; 4],
        "custom" => [1, 2, 0, 1],
        _ => {
            let t = |i: usize| (st * i.div_ceil(st) + ek).saturating_sub(i + st);
            let (th, tw) = (t(h), t(w));
            if pt == "same" {
                [th / 2, th - th / 2, tw / 2, tw - tw / 2]
            } else {
                [th - th / 2, th / 2, tw - tw / 2, tw / 2]
            }
        }
    };
    let oh = (h + pad[0] + pad[1] - ek) / st + 1;
    let ow = (w + pad[2] + pad[3] - ek) / st + 1;
    let os = [n, cout, oh, ow];
    let mut p = Prog::new();
    let x = p.input("x", d, &xs);
    let wc = p.konst(d, &[cout, cin / groups, k, k], wv);
    let bc = p.konst(d, &[cout], bv);
    let mut args = vec![
        ("x", v(&x)),
        ("weight", v(&wc)),
        ("bias", v(&bc)),
        ("strides", A::Is(vec![st as i64; 2])),
        ("pad_type", A::S(pt)),
        ("dilations", A::Is(vec![dl as i64; 2])),
        ("groups", A::I(groups as i64)),
    ];
    if pt == "custom" {
        args.push(("pad", A::Is(pad.iter().map(|&v| v as i64).collect())));
    }
    let y = p.op("conv", &args, d, &os);
    (p, y, pad, os)
}

#[test]
fn conv2d_strides_dilation_groups_padding_modes() {
    let mut rng = Rng(31);
    // (n, cin, h, w, cout, k, stride, dil, groups, pad_type)
    let cases = [
        (1, 3, 9, 11, 4, 3, 1, 1, 1, "valid"),
        (2, 4, 8, 8, 6, 3, 2, 1, 2, "same"),
        (1, 4, 7, 10, 4, 3, 1, 2, 4, "custom"),
        (1, 8, 6, 6, 5, 1, 1, 1, 1, "valid"),
        (1, 2, 5, 9, 3, 2, 2, 1, 1, "same_lower"),
        // depthwise (groups = cin = cout): strides 1-3, kernels 3 and 5, odd sizes
        (2, 6, 9, 13, 6, 3, 2, 1, 6, "same"),
        (1, 5, 11, 8, 5, 5, 2, 1, 5, "custom"),
        (1, 3, 7, 7, 3, 5, 1, 1, 3, "same"),
        (2, 4, 10, 9, 4, 3, 3, 1, 4, "valid"),
        (1, 4, 6, 12, 4, 3, 2, 1, 4, "same_lower"),
        // depthwise rows summed 32, 16, 8 and 1 columns at a time, dilated, and one large
        // enough to split over threads
        (1, 3, 5, 70, 3, 3, 1, 1, 3, "same"),
        (1, 2, 6, 57, 2, 5, 1, 2, 2, "custom"),
        (1, 16, 20, 40, 16, 5, 1, 1, 16, "same"),
        // rows of 16 and 33 columns summed straight into the output (a vector, then a vector
        // and an overlapping last one), of 40 at stride 2
        (1, 3, 6, 16, 3, 3, 1, 1, 3, "same"),
        (2, 5, 7, 33, 5, 3, 1, 1, 5, "same"),
        (1, 4, 9, 80, 4, 3, 2, 1, 4, "same"),
    ];
    for &d in &[DType::Fp32, DType::Fp16] {
        for &(n, cin, h, w, cout, k, st, dl, groups, pt) in &cases {
            let xs = [n, cin, h, w];
            let ws = [cout, cin / groups, k, k];
            let xv = quantize(d, &rng.vec(numel(&xs), -1.0, 1.0));
            let wv = quantize(d, &rng.vec(numel(&ws), -0.5, 0.5));
            let bv = quantize(d, &rng.vec(cout, -0.5, 0.5));
            let (mut p, y, pad, os) = conv_program(d, xs, (cout, k, st, dl, groups, pt), &wv, &bv);
            p.output(&y);
            let got = &run(&p, &[("x", d, xv.clone())])[&y];
            let want = quantize(
                d,
                &conv_ref(&xv, xs, &wv, ws, &bv, groups, [st, st], [dl, dl], pad, os),
            );
            assert_close(
                &format!("conv {d} {xs:?} k{k} s{st} d{dl} g{groups} {pt}"),
                d,
                got,
                &want,
                1.0,
            );
        }
    }
}

#[test]
fn conv1d_and_conv_transpose() {
    let mut rng = Rng(37);
    let d = DType::Fp32;
    // conv1d as conv2d with h = 1
    let (n, cin, w, cout, k) = (2, 3, 13, 4, 3);
    let xv = quantize(d, &rng.vec(n * cin * w, -1.0, 1.0));
    let wv = quantize(d, &rng.vec(cout * cin * k, -0.5, 0.5));
    let mut p = Prog::new();
    let x = p.input("x", d, &[n, cin, w]);
    let wc = p.konst(d, &[cout, cin, k], &wv);
    let y = p.op(
        "conv",
        &[
            ("x", v(&x)),
            ("weight", v(&wc)),
            ("strides", A::Is(vec![2])),
            ("pad_type", A::S("custom")),
            ("pad", A::Is(vec![1, 1])),
        ],
        d,
        &[n, cout, 7],
    );
    p.output(&y);
    let got = &run(&p, &[("x", d, xv.clone())])[&y];
    let want = conv_ref(
        &xv,
        [n, cin, 1, w],
        &wv,
        [cout, cin, 1, k],
        &[0.0; 4],
        1,
        [1, 2],
        [1, 1],
        [0, 0, 1, 1],
        [n, cout, 1, 7],
    );
    assert_close("conv1d", d, got, &want, 1.0);
}

/// conv_transpose (GEMM, then the columns scattered into the output) against a naive sum, over
/// overlapping windows (3×3 and 4×4 stride 2, padding 1), side-by-side ones (2×2 stride 2, the
/// interleaving path, also with a cropped top row) and a dilated 3×3, at 1 and 2 threads, with
/// enough output channels to split the scatter between threads.
#[test]
fn conv_transpose_matches_naive_sum() {
    let mut rng = Rng(38);
    let d = DType::Fp32;
    // (cin, h, w, cout, k, stride, dilation, pad top/bottom/left/right)
    let cases = [
        (
            3usize,
            4usize,
            5usize,
            2usize,
            3usize,
            2usize,
            1usize,
            [1usize, 1, 1, 1],
        ),
        (5, 8, 9, 16, 4, 2, 1, [1, 1, 1, 1]),
        (24, 8, 24, 24, 2, 2, 1, [0, 0, 0, 0]),
        (7, 9, 10, 17, 2, 2, 1, [1, 0, 0, 0]),
        (6, 5, 9, 20, 3, 1, 2, [0, 1, 2, 0]),
    ];
    for (cin, h, wd, cout, k, s, dl, pd) in cases {
        let ek = (k - 1) * dl + 1;
        let (oh, ow) = (
            (h - 1) * s + ek - pd[0] - pd[1],
            (wd - 1) * s + ek - pd[2] - pd[3],
        );
        let xv = quantize(d, &rng.vec(cin * h * wd, -1.0, 1.0));
        let wv = quantize(d, &rng.vec(cin * cout * k * k, -0.5, 0.5));
        let bv = quantize(d, &rng.vec(cout, -0.5, 0.5));
        let mut p = Prog::new();
        let x = p.input("x", d, &[1, cin, h, wd]);
        let wc = p.konst(d, &[cin, cout, k, k], &wv);
        let bc = p.konst(d, &[cout], &bv);
        let y = p.op(
            "conv_transpose",
            &[
                ("x", v(&x)),
                ("weight", v(&wc)),
                ("bias", v(&bc)),
                ("pad_type", A::S("custom")),
                ("pad", A::Is(pd.iter().map(|&v| v as i64).collect())),
                ("strides", A::Is(vec![s as i64; 2])),
                ("dilations", A::Is(vec![dl as i64; 2])),
            ],
            d,
            &[1, cout, oh, ow],
        );
        p.output(&y);
        // y[co, oy, ox] = bias[co] + Σ x[ci, iy, ix] · W[ci, co, ky, kx],
        // oy = iy·s + ky·dl − pad_top, ox = ix·s + kx·dl − pad_left
        let mut want = vec![0.0; cout * oh * ow];
        for co in 0..cout {
            for o in 0..oh * ow {
                want[co * oh * ow + o] = bv[co];
            }
            for ci in 0..cin {
                for iy in 0..h {
                    for ix in 0..wd {
                        for ky in 0..k {
                            for kx in 0..k {
                                let oy = (iy * s + ky * dl) as i64 - pd[0] as i64;
                                let ox = (ix * s + kx * dl) as i64 - pd[2] as i64;
                                if oy >= 0 && oy < oh as i64 && ox >= 0 && ox < ow as i64 {
                                    want[co * oh * ow + oy as usize * ow + ox as usize] += xv
                                        [(ci * h + iy) * wd + ix]
                                        * wv[((ci * cout + co) * k + ky) * k + kx];
                                }
                            }
                        }
                    }
                }
            }
        }
        for threads in [1, 2] {
            let what = format!(
                "conv_transpose {cin}x{h}x{wd} -> {cout}x{oh}x{ow}, kernel {k} stride {s} \
                 dilation {dl} pad {pd:?}, {threads} threads"
            );
            let (plan, _) = compile_threads(&p, threads, &what);
            let mut inst = plan.instantiate();
            set(&mut inst, "x", d, &xv);
            inst.execute().unwrap();
            let got = to_f64(&inst.read_output(&y).unwrap());
            assert_close(&what, d, &got, &want, 1.0);
        }
    }
}

/// Max pooling over enough planes (and outputs) to be split between threads, in fp32 and fp16:
/// 3×3 stride 2 with padding 1 (ResNet's), 2×2 stride 1 with asymmetric padding, 1×3 stride
/// [1, 3] without padding, against a naive max over each window's in-bounds values.
#[test]
fn max_pooling_over_many_planes_matches_naive_at_every_thread_count() {
    let mut rng = Rng(43);
    let (planes, h, w) = (48usize, 19usize, 23usize);
    // (kernel, strides, pad top/bottom/left/right)
    let cases = [
        ([3, 3], [2, 2], [1, 1, 1, 1]),
        ([2, 2], [1, 1], [0, 1, 1, 0]),
        ([1, 3], [1, 3], [0, 0, 0, 0]),
    ];
    for d in [DType::Fp32, DType::Fp16] {
        let xv = quantize(d, &rng.vec(planes * h * w, -4.0, 4.0));
        for (k, s, pad) in cases {
            let oh = (h + pad[0] + pad[1] - k[0]) / s[0] + 1;
            let ow = (w + pad[2] + pad[3] - k[1]) / s[1] + 1;
            let mut want = Vec::with_capacity(planes * oh * ow);
            for c in 0..planes {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut m = f64::NEG_INFINITY;
                        for i in 0..k[0] {
                            for j in 0..k[1] {
                                let y = (oy * s[0] + i) as i64 - pad[0] as i64;
                                let x = (ox * s[1] + j) as i64 - pad[2] as i64;
                                if (0..h as i64).contains(&y) && (0..w as i64).contains(&x) {
                                    m = m.max(xv[(c * h + y as usize) * w + x as usize]);
                                }
                            }
                        }
                        want.push(m);
                    }
                }
            }
            let mut p = Prog::new();
            let x = p.input("x", d, &[2, planes / 2, h, w]);
            let y = p.op(
                "max_pool",
                &[
                    ("x", v(&x)),
                    ("kernel_sizes", A::Is(k.iter().map(|&v| v as i64).collect())),
                    ("strides", A::Is(s.iter().map(|&v| v as i64).collect())),
                    ("pad_type", A::S("custom")),
                    ("pad", A::Is(pad.iter().map(|&v| v as i64).collect())),
                ],
                d,
                &[2, planes / 2, oh, ow],
            );
            p.output(&y);
            for threads in [1, 2, 3] {
                let what = format!(
                    "max_pool {d} kernel {k:?} strides {s:?} pad {pad:?}, {threads} threads"
                );
                let (plan, _) = compile_threads(&p, threads, &what);
                let mut inst = plan.instantiate();
                set(&mut inst, "x", d, &xv);
                inst.execute().unwrap();
                let got = to_f64(&inst.read_output(&y).unwrap());
                assert_eq!(got, want, "{what}");
            }
        }
    }
}

#[test]
fn pooling_and_upsampling() {
    let d = DType::Fp32;
    let mut rng = Rng(41);
    let (h, w) = (5usize, 7usize);
    let xv = quantize(d, &rng.vec(2 * h * w, -1.0, 1.0));
    let mut p = Prog::new();
    let x = p.input("x", d, &[1, 2, h, w]);
    let mp = p.op(
        "max_pool",
        &[
            ("x", v(&x)),
            ("kernel_sizes", A::Is(vec![3, 3])),
            ("strides", A::Is(vec![2, 2])),
            ("pad_type", A::S("custom")),
            ("pad", A::Is(vec![1, 1, 1, 1])),
        ],
        d,
        &[1, 2, 3, 4],
    );
    let ap = p.op(
        "avg_pool",
        &[
            ("x", v(&x)),
            ("kernel_sizes", A::Is(vec![2, 2])),
            ("strides", A::Is(vec![2, 2])),
            ("pad_type", A::S("valid")),
            ("ceil_mode", A::B(true)),
        ],
        d,
        &[1, 2, 3, 4],
    );
    let ae = p.op(
        "avg_pool",
        &[
            ("x", v(&x)),
            ("kernel_sizes", A::Is(vec![3, 3])),
            ("strides", A::Is(vec![1, 1])),
            ("pad_type", A::S("same")),
            ("exclude_padding_from_average", A::B(true)),
        ],
        d,
        &[1, 2, 5, 7],
    );
    let nn = p.op(
        "upsample_nearest_neighbor",
        &[
            ("x", v(&x)),
            ("scale_factor_height", A::F(DType::Fp32, 2.0)),
            ("scale_factor_width", A::F(DType::Fp32, 3.0)),
        ],
        d,
        &[1, 2, 10, 21],
    );
    let bl = p.op(
        "upsample_bilinear",
        &[
            ("x", v(&x)),
            ("scale_factor_height", A::F(DType::Fp32, 2.0)),
            ("scale_factor_width", A::F(DType::Fp32, 2.0)),
            ("align_corners", A::B(false)),
        ],
        d,
        &[1, 2, 10, 14],
    );
    let ba = p.op(
        "upsample_bilinear",
        &[
            ("x", v(&x)),
            ("scale_factor_height", A::F(DType::Fp32, 2.0)),
            ("scale_factor_width", A::F(DType::Fp32, 2.0)),
            ("align_corners", A::B(true)),
        ],
        d,
        &[1, 2, 10, 14],
    );
    for o in [&mp, &ap, &ae, &nn, &bl, &ba] {
        p.output(o);
    }
    let out = run(&p, &[("x", d, xv.clone())]);
    let at = |c: usize, y: i64, x: i64| -> Option<f64> {
        (y >= 0 && y < h as i64 && x >= 0 && x < w as i64)
            .then(|| xv[(c * h + y as usize) * w + x as usize])
    };
    let pool = |c: usize, y0: i64, x0: i64, k: i64| -> Vec<f64> {
        (0..k)
            .flat_map(|i| (0..k).filter_map(move |j| at(c, y0 + i, x0 + j)))
            .collect()
    };
    let mut want_mp = Vec::new();
    let mut want_ap = Vec::new();
    let mut want_ae = Vec::new();
    for c in 0..2 {
        for oy in 0..3 {
            for ox in 0..4 {
                want_mp.push(
                    pool(c, oy * 2 - 1, ox * 2 - 1, 3)
                        .into_iter()
                        .fold(f64::MIN, f64::max),
                );
            }
        }
        for oy in 0..3 {
            for ox in 0..4 {
                // ceil_mode windows past the input are clipped (PyTorch's divisor rule)
                let v = pool(c, oy * 2, ox * 2, 2);
                want_ap.push(v.iter().sum::<f64>() / v.len() as f64);
            }
        }
        for oy in 0..5 {
            for ox in 0..7 {
                let v = pool(c, oy - 1, ox - 1, 3);
                want_ae.push(v.iter().sum::<f64>() / v.len() as f64);
            }
        }
    }
    assert_close("max_pool", d, &out[&mp], &want_mp, 1.0);
    assert_close("avg_pool ceil", d, &out[&ap], &want_ap, 1.0);
    assert_close("avg_pool exclude pad", d, &out[&ae], &want_ae, 1.0);
    let want_nn: Vec<f64> = (0..2 * 10 * 21)
        .map(|i| {
            let (c, y, x) = (i / 210, (i / 21) % 10, i % 21);
            xv[(c * h + y / 2) * w + x / 3]
        })
        .collect();
    assert_eq!(out[&nn], want_nn);
    let bil = |align: bool| -> Vec<f64> {
        let src = |i: usize, n_in: usize, n_out: usize| -> f64 {
            let s = if align {
                i as f64 * (n_in - 1) as f64 / (n_out - 1) as f64
            } else {
                let sp = n_in as f64 / n_out as f64;
                i as f64 * sp + 0.5 * sp - 0.5
            };
            s.clamp(0.0, (n_in - 1) as f64)
        };
        (0..2 * 10 * 14)
            .map(|i| {
                let (c, oy, ox) = (i / 140, (i / 14) % 10, i % 14);
                let (sy, sx) = (src(oy, h, 10), src(ox, w, 14));
                let (y0, x0) = (sy.floor() as i64, sx.floor() as i64);
                let (y1, x1) = ((y0 + 1).min(h as i64 - 1), (x0 + 1).min(w as i64 - 1));
                let (fy, fx) = (sy - y0 as f64, sx - x0 as f64);
                let g = |y, x| at(c, y, x).unwrap_or(0.0);
                (g(y0, x0) * (1.0 - fx) + g(y0, x1) * fx) * (1.0 - fy)
                    + (g(y1, x0) * (1.0 - fx) + g(y1, x1) * fx) * fy
            })
            .collect()
    };
    assert_close("bilinear half-pixel", d, &out[&bl], &bil(false), 1.0);
    assert_close("bilinear align corners", d, &out[&ba], &bil(true), 1.0);
}

/// softmax(q·kᵀ/√e + mask)·v in f64.
#[allow(clippy::too_many_arguments)]
pub fn attention_ref(
    q: &[f64],
    k: &[f64],
    vv: &[f64],
    mask: Option<&[f64]>,
    b: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
) -> Vec<f64> {
    let mut out = vec![0.0; b * l * ev];
    for bi in 0..b {
        for i in 0..l {
            let mut sc: Vec<f64> = (0..s)
                .map(|j| {
                    (0..e)
                        .map(|t| q[(bi * l + i) * e + t] * k[(bi * s + j) * e + t])
                        .sum::<f64>()
                        / (e as f64).sqrt()
                })
                .collect();
            if let Some(m) = mask {
                for j in 0..s {
                    sc[j] += m[i * s + j];
                }
            }
            let mx = sc.iter().cloned().fold(f64::MIN, f64::max);
            let ex: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = ex.iter().sum();
            for t in 0..ev {
                out[(bi * l + i) * ev + t] = (0..s)
                    .map(|j| ex[j] / sum * vv[(bi * s + j) * ev + t])
                    .sum();
            }
        }
    }
    out
}

/// One `scaled_dot_product_attention` case: random q [b, l, e], k [b, s, e] (within ±`amp`),
/// v [b, s, ev] in `d`, and mask kind 0 (none), 1 (a causal-style bool constant: row i sees
/// keys j <= i + s - l) or 2 (an additive input `m` [1, l, s] in [-2, 0]). Returns the program, its output, the
/// inputs to feed, and the mask as added to the scores (`None` for kind 0).
#[allow(clippy::type_complexity)]
fn sdpa_case(
    rng: &mut Rng,
    d: DType,
    (b, l, s, e, ev): (usize, usize, usize, usize, usize),
    mask_kind: usize,
    amp: f64,
) -> (
    Prog,
    String,
    Vec<(&'static str, DType, Vec<f64>)>,
    Option<Vec<f64>>,
) {
    let qv = quantize(d, &rng.vec(b * l * e, -amp, amp));
    let kv = quantize(d, &rng.vec(b * s * e, -amp, amp));
    let vv = quantize(d, &rng.vec(b * s * ev, -1.0, 1.0));
    let bm: Vec<f64> = (0..l * s)
        .map(|t| ((t % s) <= t / s + s - l) as i32 as f64)
        .collect();
    let am: Vec<f64> = quantize(d, &rng.vec(l * s, -2.0, 0.0));
    let mut p = Prog::new();
    let q = p.input("q", d, &[b, l, e]);
    let k = p.input("k", d, &[b, s, e]);
    let vn = p.input("v", d, &[b, s, ev]);
    let mut args = vec![("query", v(&q)), ("key", v(&k)), ("value", v(&vn))];
    let mask_name;
    if mask_kind == 1 {
        mask_name = p.konst(DType::Bool, &[l, s], &bm);
        args.push(("attn_mask", v(&mask_name)));
    } else if mask_kind == 2 {
        mask_name = p.input("m", d, &[1, l, s]);
        args.push(("attn_mask", v(&mask_name)));
    }
    let y = p.op("scaled_dot_product_attention", &args, d, &[b, l, ev]);
    p.output(&y);
    let mut ins = vec![("q", d, qv), ("k", d, kv), ("v", d, vv)];
    if mask_kind == 2 {
        ins.push(("m", d, am.clone()));
    }
    let added = match mask_kind {
        1 => Some(
            bm.iter()
                .map(|&x| if x != 0.0 { 0.0 } else { f64::NEG_INFINITY })
                .collect(),
        ),
        2 => Some(am),
        _ => None,
    };
    (p, y, ins, added)
}

#[test]
fn sdpa_matches_reference_with_bool_and_additive_masks() {
    let mut rng = Rng(43);
    for &d in &[DType::Fp32, DType::Fp16] {
        for &(b, l, s, e, ev) in &[
            (2usize, 5usize, 7usize, 8usize, 4usize),
            (3, 70, 300, 16, 16),
            (1, 1, 129, 64, 64),
        ] {
            for mask_kind in 0..3 {
                let (p, y, ins, mask) = sdpa_case(&mut rng, d, (b, l, s, e, ev), mask_kind, 1.0);
                let got = &run(&p, &ins)[&y];
                let (qv, kv, vv) = (&ins[0].2, &ins[1].2, &ins[2].2);
                let want = quantize(
                    d,
                    &attention_ref(qv, kv, vv, mask.as_deref(), b, l, s, e, ev),
                );
                assert_close(
                    &format!("sdpa {d} b{b} l{l} s{s} mask{mask_kind}"),
                    d,
                    got,
                    &want,
                    0.5,
                );
            }
        }
    }
}

/// Few query rows (decode and verification steps) against a longer key axis: keys hidden from
/// every row (additive −∞ or bool false) at either end of the axis and in the middle, a row that
/// sees nothing (NaN, as the reference), head sizes that are not multiples of 16, key axes long
/// enough to be split into parts.
#[test]
fn sdpa_few_query_rows_match_reference_with_hidden_keys() {
    let mut rng = Rng(47);
    let d = DType::Fp32;
    for &(b, l, s, e, ev) in &[
        (3usize, 1usize, 300usize, 64usize, 64usize),
        (3, 3, 300, 64, 64),
        (2, 8, 37, 24, 40),
        (1, 16, 129, 20, 8),
        (2, 5, 1, 16, 16),
        // key axes split into parts of 1024 keys, merged: parts half or wholly hidden
        (2, 3, 2500, 64, 64),
        (1, 1, 2049, 32, 16),
    ] {
        for kind in 0..4 {
            let qv = quantize(d, &rng.vec(b * l * e, -1.0, 1.0));
            let kv = quantize(d, &rng.vec(b * s * e, -1.0, 1.0));
            let vv = quantize(d, &rng.vec(b * s * ev, -1.0, 1.0));
            let noise = quantize(d, &rng.vec(l * s, -2.0, 0.0));
            // row i sees keys lo..=live + i, hidden elsewhere (−∞)
            let (lo, live) = (s / 5, s / 2);
            let visible = |i: usize, j: usize| match kind {
                0 => j + l <= i + s,
                1 => j >= lo && j <= live + i,
                2 => (j <= live + i) && (j % 7 != 3 || j == 0),
                _ => i != l / 2 && j >= lo,
            };
            let add: Vec<f64> = (0..l * s)
                .map(|t| {
                    let (i, j) = (t / s, t % s);
                    if visible(i, j) {
                        noise[t]
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect();
            let mut p = Prog::new();
            let q = p.input("q", d, &[b, l, e]);
            let k = p.input("k", d, &[b, s, e]);
            let vn = p.input("v", d, &[b, s, ev]);
            let mut args = vec![("query", v(&q)), ("key", v(&k)), ("value", v(&vn))];
            let bool_mask = kind == 1;
            let mask_name = if bool_mask {
                let bm: Vec<f64> = (0..l * s)
                    .map(|t| f64::from(u8::from(visible(t / s, t % s))))
                    .collect();
                p.konst(DType::Bool, &[l, s], &bm)
            } else {
                p.input("m", d, &[1, l, s])
            };
            args.push(("attn_mask", v(&mask_name)));
            let y = p.op("scaled_dot_product_attention", &args, d, &[b, l, ev]);
            p.output(&y);
            let mut ins = vec![
                ("q", d, qv.clone()),
                ("k", d, kv.clone()),
                ("v", d, vv.clone()),
            ];
            let mask: Vec<f64> = if bool_mask {
                add.iter()
                    .map(|&x| if x.is_finite() { 0.0 } else { x })
                    .collect()
            } else {
                ins.push(("m", d, add.clone()));
                add
            };
            let plan = compile(
                &p.build(),
                "main",
                &BlobStore::new(),
                &CompileOptions::default(),
            )
            .unwrap();
            assert!(
                plan.schedule()
                    .iter()
                    .any(|k| k.ends_with(": attention-rows")),
                "{:?}",
                plan.schedule()
            );
            let got = &run(&p, &ins)[&y];
            let want = attention_ref(&qv, &kv, &vv, Some(&mask), b, l, s, e, ev);
            assert_close(
                &format!("few-row sdpa b{b} l{l} s{s} e{e} ev{ev} mask kind {kind}"),
                d,
                got,
                &want,
                0.5,
            );
        }
    }
}

/// Keys and values kept narrower than the query (KV caches in fp16 or as int8 blocks of 32 with
/// one scale each, llama.cpp's q8_0) and widened to f32 by the program's own ops before
/// `scaled_dot_product_attention`: the attention kernel reads them as stored (the widening ops
/// leave the schedule) and gives the attention of the widened values, for few query rows and
/// for query blocks, fp16 and f32 scales, at 1 and 2 threads.
#[test]
fn sdpa_reads_fp16_and_int8_block_operands_as_stored() {
    let mut rng = Rng(53);
    let f32d = DType::Fp32;
    for &(b, l, s, e, ev, int8_keys) in &[
        (2usize, 1usize, 300usize, 64usize, 64usize, false),
        (3, 5, 77, 32, 64, true),
        (1, 40, 150, 64, 32, false),
        (2, 70, 45, 32, 32, true),
        (3, 3, 2200, 64, 32, true),
        (1, 1, 3000, 64, 64, false),
    ] {
        let mut p = Prog::new();
        let q = p.input("q", f32d, &[b, l, e]);
        let m = p.input("m", f32d, &[1, l, s]);
        let mut ins = vec![
            ("q", f32d, quantize(f32d, &rng.vec(b * l * e, -2.0, 2.0))),
            ("m", f32d, quantize(f32d, &rng.vec(l * s, -2.0, 0.0))),
        ];
        // each operand stored as fp16, or as int8 blocks with scales, and widened by the program
        let mut widened = Vec::new();
        let mut names = Vec::new();
        for (name, width, int8) in [("k", e, int8_keys), ("v", ev, !int8_keys)] {
            let shape = [b, s, width];
            if !int8 {
                let x = p.input(name, DType::Fp16, &shape);
                let data = quantize(DType::Fp16, &rng.vec(b * s * width, -1.5, 1.5));
                widened.push(data.clone());
                ins.push((name, DType::Fp16, data));
                let cast = [("x", v(&x)), ("dtype", A::S("fp32"))];
                names.push(p_cast(&mut p, &cast, &shape));
                continue;
            }
            let nb = width / 32;
            let scale_dtype = if int8_keys { DType::Fp32 } else { DType::Fp16 };
            let qname: &'static str = if name == "k" { "k_q" } else { "v_q" };
            let dname: &'static str = if name == "k" { "k_d" } else { "v_d" };
            let xq = p.input(qname, DType::Int8, &shape);
            let xd = p.input(dname, scale_dtype, &[b, s, nb]);
            let qv: Vec<f64> = (0..b * s * width)
                .map(|_| rng.below(255) as f64 - 127.0)
                .collect();
            let dv = quantize(scale_dtype, &rng.vec(b * s * nb, 0.001, 0.02));
            widened.push(
                (0..b * s * width)
                    .map(|i| qv[i] * dv[i / 32])
                    .collect::<Vec<f64>>(),
            );
            ins.push((qname, DType::Int8, qv));
            ins.push((dname, scale_dtype, dv));
            let blocks = p.op(
                "reshape",
                &[
                    ("x", v(&xq)),
                    ("shape", A::Is(vec![b as i64, s as i64, nb as i64, 32])),
                ],
                DType::Int8,
                &[b, s, nb, 32],
            );
            let wide = p_cast(
                &mut p,
                &[("x", v(&blocks)), ("dtype", A::S("fp32"))],
                &[b, s, nb, 32],
            );
            let d = if scale_dtype == DType::Fp16 {
                p_cast(
                    &mut p,
                    &[("x", v(&xd)), ("dtype", A::S("fp32"))],
                    &[b, s, nb],
                )
            } else {
                xd
            };
            let d = p.op(
                "reshape",
                &[
                    ("x", v(&d)),
                    ("shape", A::Is(vec![b as i64, s as i64, nb as i64, 1])),
                ],
                f32d,
                &[b, s, nb, 1],
            );
            let prod = p.op(
                "mul",
                &[("x", v(&wide)), ("y", v(&d))],
                f32d,
                &[b, s, nb, 32],
            );
            let x = p.op(
                "reshape",
                &[
                    ("x", v(&prod)),
                    ("shape", A::Is(vec![b as i64, s as i64, width as i64])),
                ],
                f32d,
                &shape,
            );
            names.push(x);
        }
        let (kw, vw) = (&names[0], &names[1]);
        let args = [
            ("query", v(&q)),
            ("key", v(kw)),
            ("value", v(vw)),
            ("attn_mask", v(&m)),
        ];
        let y = p.op("scaled_dot_product_attention", &args, f32d, &[b, l, ev]);
        p.output(&y);
        let want = attention_ref(
            &ins[0].2,
            &widened[0],
            &widened[1],
            Some(&ins[1].2),
            b,
            l,
            s,
            e,
            ev,
        );
        for threads in [1, 2] {
            let what = format!("stored operands b{b} l{l} s{s} e{e} ev{ev} int8 keys {int8_keys}");
            let (_, schedule) = compile_threads(&p, threads, &what);
            let kind = if l <= 16 {
                "attention-rows"
            } else {
                "attention-flash"
            };
            assert!(
                schedule.lines().count() == 1
                    && schedule.contains("stored")
                    && schedule.contains(kind),
                "{what}: {schedule}"
            );
            let options = CompileOptions {
                threads: Some(threads),
                ..Default::default()
            };
            let got = &run_opts(&p, &ins, &options)[&y];
            assert_close(&what, f32d, got, &want, 0.5);
        }
    }
}

/// Query blocks skip the key blocks none of their rows sees: keys and values there may hold
/// anything (here NaN, as unwritten cache rows might) without reaching the output. Block 0 sees
/// keys from 256 on, block 1 from 0 (the loaded keys grow downwards), one row sees nothing
/// (NaN, as the reference), keys from 512 on are hidden from every row; bool and additive
/// masks, at 1 and 2 threads.
#[test]
fn sdpa_query_blocks_skip_key_blocks_no_row_sees() {
    let mut rng = Rng(61);
    let d = DType::Fp32;
    let (b, l, s, e, ev) = (2usize, 100usize, 700usize, 32usize, 24usize);
    let visible = |i: usize, j: usize| match i {
        99 => false,
        0..64 => (256..256 + i + 100).contains(&j),
        _ => j < 50 + i,
    };
    let hidden_everywhere = 512;
    let mut k = rng.vec(b * s * e, -1.5, 1.5);
    let mut vv = rng.vec(b * s * ev, -1.0, 1.0);
    let noise = rng.vec(l * s, -2.0, 0.0);
    let add: Vec<f64> = (0..l * s)
        .map(|t| {
            if visible(t / s, t % s) {
                noise[t]
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    let q = rng.vec(b * l * e, -2.0, 2.0);
    let want = attention_ref(&q, &k, &vv, Some(&add), b, l, s, e, ev);
    for (x, width) in [(&mut k, e), (&mut vv, ev)] {
        for (i, v) in x.iter_mut().enumerate() {
            if (i / width) % s >= hidden_everywhere {
                *v = f64::NAN;
            }
        }
    }
    for bool_mask in [false, true] {
        let mut p = Prog::new();
        let qn = p.input("q", d, &[b, l, e]);
        let kn = p.input("k", d, &[b, s, e]);
        let vn = p.input("v", d, &[b, s, ev]);
        let mut ins = vec![
            ("q", d, q.clone()),
            ("k", d, k.clone()),
            ("v", d, vv.clone()),
        ];
        let mask = if bool_mask {
            let keep: Vec<f64> = add
                .iter()
                .map(|x| f64::from(u8::from(x.is_finite())))
                .collect();
            p.konst(DType::Bool, &[l, s], &keep)
        } else {
            ins.push(("m", d, add.clone()));
            p.input("m", d, &[l, s])
        };
        let want = if bool_mask {
            let zeros: Vec<f64> = add
                .iter()
                .map(|&x| if x.is_finite() { 0.0 } else { x })
                .collect();
            let (k0, v0) = [(&k, e), (&vv, ev)]
                .map(|(x, w)| {
                    x.iter()
                        .enumerate()
                        .map(|(i, &v)| {
                            if (i / w) % s >= hidden_everywhere {
                                0.0
                            } else {
                                v
                            }
                        })
                        .collect::<Vec<f64>>()
                })
                .into();
            attention_ref(&q, &k0, &v0, Some(&zeros), b, l, s, e, ev)
        } else {
            want.clone()
        };
        let args = [
            ("query", v(&qn)),
            ("key", v(&kn)),
            ("value", v(&vn)),
            ("attn_mask", v(&mask)),
        ];
        let y = p.op("scaled_dot_product_attention", &args, d, &[b, l, ev]);
        p.output(&y);
        for threads in [1, 2] {
            let what = format!("skipped key blocks, bool mask {bool_mask}, {threads} threads");
            let (_, schedule) = compile_threads(&p, threads, &what);
            assert!(schedule.contains("attention-flash"), "{what}: {schedule}");
            let options = CompileOptions {
                threads: Some(threads),
                ..Default::default()
            };
            let got = &run_opts(&p, &ins, &options)[&y];
            assert!(got[99 * ev..100 * ev].iter().all(|x| x.is_nan()), "{what}");
            assert_close(&what, d, got, &want, 0.5);
        }
    }
}

/// Grouped query heads sharing one additive mask `[T, S]`, tiled to `[group·T, S]` by the
/// program (as the LLM steps do): the attention kernel reads the untiled mask, taking its rows
/// modulo `T` (the copy leaves the schedule), for few query rows and for query blocks that
/// straddle a period, at 1 and 2 threads. When the tiled mask is also an output the copy stays
/// and both are right.
#[test]
fn sdpa_reads_a_mask_tiled_over_query_groups_untiled() {
    let mut rng = Rng(59);
    let d = DType::Fp32;
    for &(kv, group, t, s, e, tiled_out) in &[
        (2usize, 3usize, 1usize, 300usize, 64usize, false),
        (3, 2, 5, 77, 32, false),
        (2, 3, 40, 150, 64, false),
        (1, 4, 33, 90, 32, true),
    ] {
        let l = group * t;
        let mut p = Prog::new();
        let q = p.input("q", d, &[kv, l, e]);
        let k = p.input("k", d, &[kv, s, e]);
        let vn = p.input("v", d, &[kv, s, e]);
        let m = p.input("m", d, &[t, s]);
        let m3 = p.op(
            "reshape",
            &[("x", v(&m)), ("shape", A::Is(vec![1, t as i64, s as i64]))],
            d,
            &[1, t, s],
        );
        let tiled = p.op(
            "tile",
            &[("x", v(&m3)), ("reps", A::Is(vec![group as i64, 1, 1]))],
            d,
            &[group, t, s],
        );
        let mask = p.op(
            "reshape",
            &[("x", v(&tiled)), ("shape", A::Is(vec![l as i64, s as i64]))],
            d,
            &[l, s],
        );
        let args = [
            ("query", v(&q)),
            ("key", v(&k)),
            ("value", v(&vn)),
            ("attn_mask", v(&mask)),
        ];
        let y = p.op("scaled_dot_product_attention", &args, d, &[kv, l, e]);
        p.output(&y);
        if tiled_out {
            p.output(&mask);
        }
        // row i of token i mod T sees keys j <= i mod T + s - T; noise elsewhere
        let noise = rng.vec(t * s, -2.0, 0.0);
        let small: Vec<f64> = (0..t * s)
            .map(|x| {
                let (i, j) = (x / s, x % s);
                if j <= i + s - t {
                    noise[x]
                } else {
                    f64::NEG_INFINITY
                }
            })
            .collect();
        let full: Vec<f64> = (0..l * s).map(|x| small[x % (t * s)]).collect();
        let ins = vec![
            ("q", d, quantize(d, &rng.vec(kv * l * e, -2.0, 2.0))),
            ("k", d, quantize(d, &rng.vec(kv * s * e, -1.5, 1.5))),
            ("v", d, quantize(d, &rng.vec(kv * s * e, -1.0, 1.0))),
            ("m", d, quantize(d, &small)),
        ];
        let want = attention_ref(
            &ins[0].2,
            &ins[1].2,
            &ins[2].2,
            Some(&quantize(d, &full)),
            kv,
            l,
            s,
            e,
            e,
        );
        for threads in [1, 2] {
            let what = format!("tiled mask kv{kv} group{group} t{t} s{s} e{e} output {tiled_out}");
            let (_, schedule) = compile_threads(&p, threads, &what);
            let copies = schedule.lines().filter(|k| k.contains("copy")).count();
            assert!(
                schedule.contains("periodic_mask") && copies == usize::from(tiled_out),
                "{what}: {schedule}"
            );
            let options = CompileOptions {
                threads: Some(threads),
                ..Default::default()
            };
            let got = run_opts(&p, &ins, &options);
            assert_close(&what, d, &got[&y], &want, 0.5);
            if tiled_out {
                assert_eq!(got[&mask], quantize(d, &full), "{what}: the tiled mask");
            }
        }
    }
}

/// A `cast` op of one output.
fn p_cast(p: &mut Prog, args: &[(&str, A)], shape: &[usize]) -> String {
    p.op("cast", args, DType::Fp32, shape)
}

/// `x` rounded to bfloat16 (to nearest, ties to even), computed apart from the engine's rounding.
fn bf16(x: f64) -> f64 {
    let b = (x as f32).to_bits();
    let (low, mut high) = (b & 0xffff, b >> 16);
    if low > 0x8000 || (low == 0x8000 && high & 1 == 1) {
        high += 1;
    }
    f32::from_bits(high << 16) as f64
}

/// Attention with bf16 products (`MatmulPrecision::Bf16`) on AMX: softmax(round(q/√e)·round(k)ᵀ +
/// mask) with the probabilities rounded before they weight round(v), against that definition in
/// f64, for masks of each kind, sizes off the 32-wide tiles, at 1 and 2 threads. Without AMX
/// attention keeps its f32 kernel, and the plain definition is the reference.
#[test]
fn sdpa_with_bf16_products_follows_the_rounded_definition() {
    let mut rng = Rng(47);
    let d = DType::Fp32;
    for threads in [1, 2] {
        let options = CompileOptions {
            threads: Some(threads),
            matmul: MatmulPrecision::Bf16,
            ..Default::default()
        };
        for &(b, l, s, e, ev) in &[
            (2usize, 70usize, 300usize, 64usize, 64usize),
            (1, 40, 45, 24, 40),
        ] {
            for mask_kind in 0..3 {
                let (p, y, ins, mask) = sdpa_case(&mut rng, d, (b, l, s, e, ev), mask_kind, 3.0);
                let got = &run_opts(&p, &ins, &options)[&y];
                let (qv, kv, vv) = (&ins[0].2, &ins[1].2, &ins[2].2);
                if !MatmulPrecision::bf16_on_amx() {
                    let want = attention_ref(qv, kv, vv, mask.as_deref(), b, l, s, e, ev);
                    assert_close("sdpa f32 without AMX", d, got, &want, 0.5);
                    continue;
                }
                let scale = 1.0 / (e as f32).sqrt();
                for bi in 0..b {
                    for i in 0..l {
                        let mut sc: Vec<f64> = (0..s)
                            .map(|j| {
                                (0..e)
                                    .map(|t| {
                                        let qx = (qv[(bi * l + i) * e + t] as f32 * scale) as f64;
                                        bf16(qx) * bf16(kv[(bi * s + j) * e + t])
                                    })
                                    .sum::<f64>()
                            })
                            .collect();
                        if let Some(m) = &mask {
                            sc.iter_mut()
                                .zip(&m[i * s..(i + 1) * s])
                                .for_each(|(x, a)| *x += a);
                        }
                        let mx = sc.iter().cloned().fold(f64::MIN, f64::max);
                        let ex: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
                        let sum: f64 = ex.iter().sum();
                        for t in 0..ev {
                            let want: f64 = (0..s)
                                .map(|j| bf16(ex[j]) * bf16(vv[(bi * s + j) * ev + t]))
                                .sum::<f64>()
                                / sum;
                            let g = got[(bi * l + i) * ev + t];
                            assert!(
                                (g - want).abs() <= 5e-5,
                                "{threads} threads b{b} l{l} s{s} e{e} ev{ev} mask {mask_kind} \
                                 ({bi}, {i}, {t}): {g} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Ungrouped convs with bf16 products (`MatmulPrecision::Bf16`): input and weight rounded to
/// bf16, sums in f32, the bias added after; pointwise (the input read in place), strided, padded
/// and dilated windows (im2col rows), a ReLU fused on the way out, at 1 and 2 threads; a conv
/// over fewer pixels than the threshold and a grouped one stay f32.
#[test]
fn conv_with_bf16_products_follows_the_rounded_definition() {
    let mut rng = Rng(53);
    let d = DType::Fp32;
    // (n, cin, h, w, cout, k, stride, dil, groups, pad_type, relu, rounded)
    let cases = [
        (1, 3, 9, 11, 4, 3, 1, 1, 1, "valid", false, true),
        (1, 40, 6, 7, 33, 1, 1, 1, 1, "valid", true, true),
        (2, 16, 20, 19, 40, 3, 2, 1, 1, "same", true, true),
        (1, 64, 14, 14, 70, 3, 1, 1, 1, "same", false, true),
        (1, 5, 12, 9, 6, 3, 1, 2, 1, "custom", false, true),
        (1, 8, 3, 4, 5, 1, 1, 1, 1, "valid", false, false),
        (1, 8, 10, 10, 8, 3, 1, 1, 2, "same", false, false),
    ];
    for threads in [1, 2] {
        let options = CompileOptions {
            threads: Some(threads),
            matmul: MatmulPrecision::Bf16,
            ..Default::default()
        };
        for &(n, cin, h, w, cout, k, st, dl, groups, pt, relu, rounded) in &cases {
            let xs = [n, cin, h, w];
            let ws = [cout, cin / groups, k, k];
            let xv = rng.vec(numel(&xs), -1.0, 1.0);
            let wv = rng.vec(numel(&ws), -0.5, 0.5);
            let bv = rng.vec(cout, -0.5, 0.5);
            let (mut p, mut y, pad, os) =
                conv_program(d, xs, (cout, k, st, dl, groups, pt), &wv, &bv);
            if relu {
                y = p.op("relu", &[("x", v(&y))], d, &os);
            }
            p.output(&y);
            let got = &run_opts(&p, &[("x", d, xv.clone())], &options)[&y];
            let r = |v: &[f64]| -> Vec<f64> {
                v.iter()
                    .map(|&x| if rounded { bf16(x) } else { x as f32 as f64 })
                    .collect()
            };
            let (xr, wr) = (r(&xv), r(&wv));
            let mut want = conv_ref(&xr, xs, &wr, ws, &bv, groups, [st, st], [dl, dl], pad, os);
            let absolute = conv_ref(
                &xr.iter().map(|x| x.abs()).collect::<Vec<_>>(),
                xs,
                &wr.iter().map(|x| x.abs()).collect::<Vec<_>>(),
                ws,
                &vec![0.0; cout],
                groups,
                [st, st],
                [dl, dl],
                pad,
                os,
            );
            if relu {
                want.iter_mut().for_each(|x| *x = x.max(0.0));
            }
            for (i, ((&g, &w), &s)) in got.iter().zip(&want).zip(&absolute).enumerate() {
                assert!(
                    (g - w).abs() <= 2e-6 * s + 1e-6,
                    "{threads} threads {xs:?} k{k} s{st} d{dl} g{groups} {pt} relu={relu} \
                     element {i}: {g} vs {w}"
                );
            }
        }
    }
}
