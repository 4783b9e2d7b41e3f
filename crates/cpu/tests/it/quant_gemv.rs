//! Decode GEMV against int8/int4 weights kept compressed (no f32 expansion).
use crate::common;
use aneforge_cpu::{compile, BlobStore, CompileOptions};
use aneforge_mil::DType;
use common::*;

struct Case {
    dtype: DType,
    lo: i64,
    hi: i64,
    block: usize,
    with_offset: bool,
}

#[test]
fn blockwise_and_affine_weights_run_compressed_for_m1() {
    let mut rng = Rng(81);
    let n = 40usize;
    let cases = [
        Case {
            dtype: DType::Int4,
            lo: -8,
            hi: 7,
            block: 32,
            with_offset: true,
        },
        Case {
            dtype: DType::Uint4,
            lo: 0,
            hi: 15,
            block: 96,
            with_offset: false,
        },
        Case {
            dtype: DType::Int8,
            lo: -128,
            hi: 127,
            block: 32,
            with_offset: true,
        },
        Case {
            dtype: DType::Uint8,
            lo: 0,
            hi: 255,
            block: 48,
            with_offset: true,
        },
    ];
    // 1248 columns: 39, 26 and 13 blocks, so the decode path's groups of 16 blocks and their
    // tails are both taken
    for k in [96usize, 1248] {
        for c in &cases {
            for rows in [1usize, 3] {
                let q: Vec<f64> = (0..n * k)
                    .map(|_| (c.lo + rng.below((c.hi - c.lo + 1) as usize) as i64) as f64)
                    .collect();
                let nb = k / c.block;
                let scale = quantize(DType::Fp32, &rng.vec(n * nb, 0.001, 0.02));
                let offset: Vec<f64> = (0..n * nb)
                    .map(|_| (c.lo + rng.below((c.hi - c.lo + 1) as usize) as i64) as f64)
                    .collect();
                let x = quantize(DType::Fp32, &rng.vec(rows * k, -1.0, 1.0));
                let mut p = Prog::new();
                let xi = p.input("x", DType::Fp32, &[rows, k]);
                let data = p.konst(c.dtype, &[n, k], &q);
                let sc = p.konst(DType::Fp32, &[n, nb], &scale);
                let mut args = vec![("data", v(&data)), ("scale", v(&sc))];
                let oc;
                if c.with_offset {
                    oc = p.konst(c.dtype, &[n, nb], &offset);
                    args.push(("offset", v(&oc)));
                }
                let w = p.op(
                    "constexpr_blockwise_shift_scale",
                    &args,
                    DType::Fp32,
                    &[n, k],
                );
                let y = p.op(
                    "linear",
                    &[("x", v(&xi)), ("weight", v(&w))],
                    DType::Fp32,
                    &[rows, n],
                );
                p.output(&y);
                let sched = compile(
                    &p.build(),
                    "main",
                    &BlobStore::new(),
                    &CompileOptions::default(),
                )
                .unwrap()
                .schedule()
                .join(" ");
                let bits = if matches!(c.dtype, DType::Int4 | DType::Uint4) {
                    4
                } else {
                    8
                };
                if rows == 1 {
                    assert!(
                        sched.contains(&format!("gemv-q{bits}")),
                        "{:?}: {sched}",
                        c.dtype
                    );
                } else {
                    assert!(!sched.contains("gemv-q"), "{sched}");
                }
                let got = &run(&p, &[("x", DType::Fp32, x.clone())])[&y];
                let want: Vec<f64> = (0..rows * n)
                    .map(|t| {
                        let (r, j) = (t / n, t % n);
                        (0..k)
                            .map(|kk| {
                                let b = j * nb + kk / c.block;
                                let o = if c.with_offset { offset[b] } else { 0.0 };
                                (scale[b] as f32 as f64) * (q[j * k + kk] - o) * x[r * k + kk]
                            })
                            .sum()
                    })
                    .collect();
                assert_close_rel(
                    &format!("{:?} k={k} rows={rows}", c.dtype),
                    got,
                    &want,
                    1e-4,
                    1.0,
                );
            }
        }
    }
}

#[test]
fn affine_int8_per_row_runs_compressed() {
    let mut rng = Rng(82);
    let (n, k) = (24usize, 50usize);
    let q: Vec<f64> = (0..n * k).map(|_| rng.below(256) as f64 - 128.0).collect();
    let scale = quantize(DType::Fp32, &rng.vec(n, 0.001, 0.02));
    let zp: Vec<f64> = (0..n).map(|_| rng.below(20) as f64 - 10.0).collect();
    let x = quantize(DType::Fp32, &rng.vec(k, -1.0, 1.0));
    let mut p = Prog::new();
    let xi = p.input("x", DType::Fp32, &[1, k]);
    let qc = p.konst(DType::Int8, &[n, k], &q);
    let zc = p.konst(DType::Int8, &[n], &zp);
    let sc = p.konst(DType::Fp32, &[n], &scale);
    let w = p.op(
        "constexpr_affine_dequantize",
        &[
            ("quantized_data", v(&qc)),
            ("zero_point", v(&zc)),
            ("scale", v(&sc)),
            ("axis", A::I(0)),
        ],
        DType::Fp32,
        &[n, k],
    );
    let y = p.op(
        "linear",
        &[("x", v(&xi)), ("weight", v(&w))],
        DType::Fp32,
        &[1, n],
    );
    p.output(&y);
    let sched = compile(
        &p.build(),
        "main",
        &BlobStore::new(),
        &CompileOptions::default(),
    )
    .unwrap()
    .schedule()
    .join(" ");
    assert!(sched.contains("gemv-q8"), "{sched}");
    let got = &run(&p, &[("x", DType::Fp32, x.clone())])[&y];
    let want: Vec<f64> = (0..n)
        .map(|j| {
            (0..k)
                .map(|kk| scale[j] * (q[j * k + kk] - zp[j]) * x[kk])
                .sum()
        })
        .collect();
    assert_close_rel("affine int8", got, &want, 1e-4, 1.0);
}
