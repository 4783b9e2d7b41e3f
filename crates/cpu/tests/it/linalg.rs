use crate::common;
use aneforge_cpu::{compile, BlobStore, CompileOptions, MatmulPrecision};
use aneforge_mil::DType;
use common::*;

/// Naive f64 matmul with NumPy semantics (rank-1 promotion, batch broadcast, transposes).
fn matmul_ref(
    a: &[f64],
    sa: &[usize],
    b: &[f64],
    sb: &[usize],
    tx: bool,
    ty: bool,
) -> (Vec<f64>, Vec<usize>) {
    let (mut sa2, mut sb2) = (sa.to_vec(), sb.to_vec());
    let (a1, b1) = (sa.len() == 1, sb.len() == 1);
    if a1 {
        sa2.insert(0, 1);
    }
    if b1 {
        sb2.push(1);
    }
    let (ra, ca) = (sa2[sa2.len() - 2], sa2[sa2.len() - 1]);
    let (rb, cb) = (sb2[sb2.len() - 2], sb2[sb2.len() - 1]);
    let (m, k) = if tx { (ca, ra) } else { (ra, ca) };
    let n = if ty && !b1 { rb } else { cb };
    let ba = &sa2[..sa2.len() - 2];
    let bb = &sb2[..sb2.len() - 2];
    let batch = bshape(ba, bb);
    let nb = numel(&batch);
    let mut out = vec![0.0; nb * m * n];
    for bi in 0..nb {
        let idx = unravel(bi, &batch);
        let oa = {
            let off = idx.len() - ba.len();
            let j: Vec<usize> = (0..ba.len())
                .map(|t| if ba[t] == 1 { 0 } else { idx[off + t] })
                .collect();
            ravel(&j, ba) * ra * ca
        };
        let ob = {
            let off = idx.len() - bb.len();
            let j: Vec<usize> = (0..bb.len())
                .map(|t| if bb[t] == 1 { 0 } else { idx[off + t] })
                .collect();
            ravel(&j, bb) * rb * cb
        };
        for i in 0..m {
            for jn in 0..n {
                let mut s = 0.0;
                for kk in 0..k {
                    let av = if tx {
                        a[oa + kk * ca + i]
                    } else {
                        a[oa + i * ca + kk]
                    };
                    let bv = if ty && !b1 {
                        b[ob + jn * cb + kk]
                    } else {
                        b[ob + kk * cb + jn]
                    };
                    s += av * bv;
                }
                out[bi * m * n + i * n + jn] = s;
            }
        }
    }
    let mut shape = batch;
    shape.push(m);
    shape.push(n);
    if b1 {
        shape.pop();
    }
    if a1 {
        let r = shape.len();
        shape.remove(r - if b1 { 1 } else { 2 });
    }
    (out, shape)
}

#[test]
fn matmul_random_shapes_transposes_broadcast_and_const_rhs() {
    let mut rng = Rng(3);
    for &d in &[DType::Fp32, DType::Fp16] {
        for case in 0..40 {
            let (m, k, n) = (1 + rng.below(9), 1 + rng.below(40), 1 + rng.below(12));
            let tx = rng.below(2) == 0;
            let ty = rng.below(2) == 0;
            let batch_a: Vec<usize> = match case % 4 {
                0 => vec![],
                1 => vec![2],
                2 => vec![3, 1],
                _ => vec![1, 2],
            };
            let batch_b: Vec<usize> = match case % 3 {
                0 => vec![],
                1 => vec![1],
                _ => vec![2],
            };
            let mut sa = batch_a.clone();
            sa.extend(if tx { [k, m] } else { [m, k] });
            let mut sb = batch_b.clone();
            sb.extend(if ty { [n, k] } else { [k, n] });
            if case % 10 == 9 {
                sa = vec![k];
            }
            let tx = tx && sa.len() > 1;
            let const_b = case % 2 == 1;
            let av = quantize(d, &rng.vec(numel(&sa), -1.0, 1.0));
            let bv = quantize(d, &rng.vec(numel(&sb), -1.0, 1.0));
            let (want, so) = matmul_ref(&av, &sa, &bv, &sb, tx, ty);
            let mut p = Prog::new();
            let a = p.input("a", d, &sa);
            let b = if const_b {
                p.konst(d, &sb, &bv)
            } else {
                p.input("b", d, &sb)
            };
            let y = p.op(
                "matmul",
                &[
                    ("x", v(&a)),
                    ("y", v(&b)),
                    ("transpose_x", A::B(tx)),
                    ("transpose_y", A::B(ty)),
                ],
                d,
                &so,
            );
            p.output(&y);
            let mut ins = vec![("a", d, av.clone())];
            if !const_b {
                ins.push(("b", d, bv.clone()));
            }
            let got = &run(&p, &ins)[&y];
            let want = quantize(d, &want);
            assert_close(
                &format!("matmul {d} {sa:?}x{sb:?} tx={tx} ty={ty}"),
                d,
                got,
                &want,
                (k as f64).sqrt() * 0.5,
            );
        }
    }
}

#[test]
fn linear_with_bias_gemm_and_gemv_paths() {
    let mut rng = Rng(9);
    for &d in &[DType::Fp32, DType::Fp16] {
        for &(rows, k, n) in &[
            (1usize, 300usize, 513usize),
            (2, 64, 33),
            (37, 70, 129),
            (1, 7, 1),
        ] {
            let sx = vec![rows, k];
            let xv = quantize(d, &rng.vec(rows * k, -1.0, 1.0));
            let wv = quantize(d, &rng.vec(n * k, -0.2, 0.2));
            let bv = quantize(d, &rng.vec(n, -1.0, 1.0));
            let mut p = Prog::new();
            let x = p.input("x", d, &sx);
            let w = p.konst(d, &[n, k], &wv);
            let b = p.konst(d, &[n], &bv);
            let y = p.op(
                "linear",
                &[("x", v(&x)), ("weight", v(&w)), ("bias", v(&b))],
                d,
                &[rows, n],
            );
            p.output(&y);
            let got = &run(&p, &[("x", d, xv.clone())])[&y];
            let want: Vec<f64> = (0..rows * n)
                .map(|i| {
                    let (r, j) = (i / n, i % n);
                    let s: f64 = (0..k).map(|t| xv[r * k + t] * wv[j * k + t]).sum();
                    quantize(d, &[s + bv[j]])[0]
                })
                .collect();
            assert_close(&format!("linear {d} {rows}x{k}x{n}"), d, got, &want, 1.0);
        }
    }
}

#[test]
fn large_sgemm_uses_threads_and_stays_exact() {
    let mut rng = Rng(21);
    let (m, k, n) = (130, 257, 190);
    let av = quantize(DType::Fp32, &rng.vec(m * k, -1.0, 1.0));
    let bv = quantize(DType::Fp32, &rng.vec(k * n, -1.0, 1.0));
    let mut p = Prog::new();
    let a = p.input("a", DType::Fp32, &[m, k]);
    let b = p.input("b", DType::Fp32, &[k, n]);
    let y = p.op(
        "matmul",
        &[("x", v(&a)), ("y", v(&b))],
        DType::Fp32,
        &[m, n],
    );
    p.output(&y);
    let got = &run(
        &p,
        &[
            ("a", DType::Fp32, av.clone()),
            ("b", DType::Fp32, bv.clone()),
        ],
    )[&y];
    let (want, _) = matmul_ref(&av, &[m, k], &bv, &[k, n], false, false);
    assert_close("sgemm", DType::Fp32, got, &want, 16.0);
}

/// Constant right-hand sides stored `[k, n]` run on panels packed at compile time: row counts
/// across the register tile and row-block edges, depths across the k-block edge, widths across
/// the panel edge, a transposed and a batched x, on one and two threads.
#[test]
fn constant_rhs_packed_panels_match_across_tile_block_and_panel_edges() {
    let mut rng = Rng(33);
    let d = DType::Fp32;
    for &(batch, m, k, n, tx) in &[
        (1usize, 1usize, 5usize, 1usize, false),
        (1, 3, 255, 31, false),
        (1, 8, 256, 32, false),
        (1, 9, 257, 33, true),
        (2, 22, 384, 100, false),
        (1, 97, 600, 65, false),
        (3, 13, 70, 40, true),
        (1, 200, 40, 17, false),
    ] {
        let mut sa = if batch > 1 { vec![batch] } else { vec![] };
        sa.extend(if tx { [k, m] } else { [m, k] });
        let sb = [k, n];
        let av = rng.vec(numel(&sa), -1.0, 1.0);
        let bv = rng.vec(k * n, -1.0, 1.0);
        let (want, so) = matmul_ref(&av, &sa, &bv, &sb, tx, false);
        let mut p = Prog::new();
        let a = p.input("a", d, &sa);
        let b = p.konst(d, &sb, &bv);
        let y = p.op(
            "matmul",
            &[("x", v(&a)), ("y", v(&b)), ("transpose_x", A::B(tx))],
            d,
            &so,
        );
        p.output(&y);
        for threads in [1, 2] {
            let opts = CompileOptions {
                threads: Some(threads),
                ..Default::default()
            };
            let plan = compile(&p.build(), "main", &BlobStore::new(), &opts).unwrap();
            assert!(
                plan.schedule().iter().any(|s| s.contains("matmul-packed")),
                "{:?}",
                plan.schedule()
            );
            let got = &run_opts(&p, &[("a", d, av.clone())], &opts)[&y];
            assert_close(
                &format!("packed {sa:?}x{sb:?} tx={tx} threads={threads}"),
                d,
                got,
                &want,
                (k as f64).sqrt() * 0.5,
            );
        }
    }
}

/// `x` rounded to bfloat16 (to nearest, ties to even), computed apart from the engine's rounding.
fn bf16(x: f64) -> f64 {
    let b = (x as f32).to_bits();
    let low = b & 0xffff;
    let mut high = b >> 16;
    if low > 0x8000 || (low == 0x8000 && high & 1 == 1) {
        high += 1;
    }
    f32::from_bits(high << 16) as f64
}

#[test]
fn bf16_products_round_both_operands_of_many_row_products_only() {
    let mut rng = Rng(31);
    for threads in [1, 2] {
        let options = CompileOptions {
            threads: Some(threads),
            matmul: MatmulPrecision::Bf16,
            ..Default::default()
        };
        // linear (weight [n, k]), batched matmul against a constant [k, n], and rows below the
        // threshold, which stay f32.
        for &(batch, rows, k, n) in &[
            (1usize, 300usize, 385usize, 70usize),
            (3, 40, 64, 33),
            (1, MatmulPrecision::MIN_ROWS - 1, 96, 40),
        ] {
            let m = batch * rows;
            let xv = rng.vec(m * k, -2.0, 2.0);
            let wv = rng.vec(n * k, -0.5, 0.5);
            let bias = rng.vec(n, -1.0, 1.0);
            let mut p = Prog::new();
            let x = p.input("x", DType::Fp32, &[batch, rows, k]);
            let w = p.konst(DType::Fp32, &[n, k], &wv);
            let b = p.konst(DType::Fp32, &[n], &bias);
            let wkn: Vec<f64> = (0..k * n).map(|i| wv[(i % n) * k + i / n]).collect();
            let w2 = p.konst(DType::Fp32, &[k, n], &wkn);
            let lin = p.op(
                "linear",
                &[("x", v(&x)), ("weight", v(&w)), ("bias", v(&b))],
                DType::Fp32,
                &[batch, rows, n],
            );
            let mm = p.op(
                "matmul",
                &[("x", v(&x)), ("y", v(&w2))],
                DType::Fp32,
                &[batch, rows, n],
            );
            p.output(&lin);
            p.output(&mm);
            let plan = compile(&p.build(), "main", &BlobStore::new(), &options).unwrap();
            let mut inst = plan.instantiate();
            set(&mut inst, "x", DType::Fp32, &xv);
            inst.execute().unwrap();
            let rounded = m >= MatmulPrecision::MIN_ROWS;
            let r = |x: f64| if rounded { bf16(x) } else { x as f32 as f64 };
            for (out, with_bias) in [(&lin, true), (&mm, false)] {
                let got = to_f64(&inst.read_output(out).unwrap());
                for i in 0..m {
                    for j in 0..n {
                        let terms = (0..k).map(|t| r(xv[i * k + t]) * r(wv[j * k + t]));
                        let scale: f64 = terms.clone().map(f64::abs).sum();
                        let want = terms.sum::<f64>() + if with_bias { bias[j] } else { 0.0 };
                        let g = got[i * n + j];
                        assert!(
                            (g - want).abs() <= 2e-6 * scale + 1e-6,
                            "{out} {threads} threads {batch}x{rows}x{k}x{n} ({i}, {j}): {g} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
