//! A small register-blocked GEMM for the attention kernel's in-cache blocks:
//! C[rows, n] (+)= A[rows, k] · B[k, n], all row-major and contiguous. With AVX-512 a 4×32 tile
//! of C lives in eight zmm registers while k runs; other CPUs use a plain loop.

/// B's row `t` starts at `b[t * ldb]`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_rows(
    a: &[f32],
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    rows: usize,
    k: usize,
    n: usize,
    accumulate: bool,
) {
    assert!(
        a.len() >= rows * k
            && ldb >= n
            && (k == 0 || b.len() >= (k - 1) * ldb + n)
            && c.len() >= rows * n,
        "gemm_rows operand sizes"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if avx512() {
            // SAFETY: sizes asserted above; AVX-512F detected.
            unsafe {
                avx512::gemm_rows(
                    a.as_ptr(),
                    b.as_ptr(),
                    ldb,
                    c.as_mut_ptr(),
                    rows,
                    k,
                    n,
                    accumulate,
                )
            };
            return;
        }
    }
    for r in 0..rows {
        let crow = &mut c[r * n..(r + 1) * n];
        if !accumulate {
            crow.fill(0.0);
        }
        for t in 0..k {
            let av = a[r * k + t];
            for (cv, &bv) in crow.iter_mut().zip(&b[t * ldb..t * ldb + n]) {
                *cv += av * bv;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    crate::simd::has_avx512()
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512F available; `a` holds rows×k, `b` k×n, `c` rows×n floats.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_rows(
        a: *const f32,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        rows: usize,
        k: usize,
        n: usize,
        accumulate: bool,
    ) {
        let mut r0 = 0;
        while r0 < rows {
            let mr = (rows - r0).min(4);
            let mut j0 = 0;
            while j0 < n {
                let nr = (n - j0).min(32);
                let m0: __mmask16 = if nr >= 16 {
                    0xFFFF
                } else {
                    ((1u32 << nr) - 1) as u16
                };
                let m1: __mmask16 = if nr >= 32 {
                    0xFFFF
                } else if nr > 16 {
                    ((1u32 << (nr - 16)) - 1) as u16
                } else {
                    0
                };
                tile(
                    a.add(r0 * k),
                    k,
                    b.add(j0),
                    ldb,
                    c.add(r0 * n + j0),
                    n,
                    k,
                    mr,
                    m0,
                    m1,
                    accumulate,
                );
                j0 += nr;
            }
            r0 += mr;
        }
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
        k: usize,
        mr: usize,
        m0: __mmask16,
        m1: __mmask16,
        accumulate: bool,
    ) {
        // rows past `mr` read row 0 again (their results are never stored)
        let ar = |r: usize| if r < mr { a.add(r * lda) } else { a };
        let (a0, a1, a2, a3) = (ar(0), ar(1), ar(2), ar(3));
        let z = _mm512_setzero_ps();
        let (mut c00, mut c01, mut c10, mut c11, mut c20, mut c21, mut c30, mut c31) =
            (z, z, z, z, z, z, z, z);
        for t in 0..k {
            let b0 = _mm512_maskz_loadu_ps(m0, b.add(t * ldb));
            let b1 = _mm512_maskz_loadu_ps(m1, b.add(t * ldb + 16));
            let x = _mm512_set1_ps(*a0.add(t));
            c00 = _mm512_fmadd_ps(x, b0, c00);
            c01 = _mm512_fmadd_ps(x, b1, c01);
            let x = _mm512_set1_ps(*a1.add(t));
            c10 = _mm512_fmadd_ps(x, b0, c10);
            c11 = _mm512_fmadd_ps(x, b1, c11);
            let x = _mm512_set1_ps(*a2.add(t));
            c20 = _mm512_fmadd_ps(x, b0, c20);
            c21 = _mm512_fmadd_ps(x, b1, c21);
            let x = _mm512_set1_ps(*a3.add(t));
            c30 = _mm512_fmadd_ps(x, b0, c30);
            c31 = _mm512_fmadd_ps(x, b1, c31);
        }
        let out = [(c00, c01), (c10, c11), (c20, c21), (c30, c31)];
        for (r, &(lo, hi)) in out.iter().enumerate().take(mr) {
            let p = c.add(r * ldc);
            let (mut lo, mut hi) = (lo, hi);
            if accumulate {
                lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m0, p));
                hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m1, p.add(16)));
            }
            _mm512_mask_storeu_ps(p, m0, lo);
            _mm512_mask_storeu_ps(p.add(16), m1, hi);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_naive_on_ragged_sizes() {
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 17),
            (4, 64, 32),
            (7, 13, 45),
            (64, 64, 128),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.25)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.5)
                .collect();
            for acc in [false, true] {
                let mut c = vec![1.0f32; m * n];
                super::gemm_rows(&a, &b, n, &mut c, m, k, n, acc);
                for r in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|t| a[r * k + t] as f64 * b[t * n + j] as f64)
                            .sum::<f64>()
                            + if acc { 1.0 } else { 0.0 };
                        assert!(
                            (c[r * n + j] as f64 - want).abs() < 1e-3,
                            "{m}x{k}x{n} acc={acc} ({r},{j})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    #[ignore]
    fn micro_timings() {
        let (m, k, n) = (64, 64, 128);
        let a = vec![0.5f32; m * k];
        let b = vec![0.25f32; k * n];
        let mut c = vec![0f32; m * n];
        let t = std::time::Instant::now();
        for _ in 0..1000 {
            super::gemm_rows(&a, &b, n, &mut c, m, k, n, false);
        }
        let dt = t.elapsed().as_secs_f64() / 1000.0;
        println!(
            "gemm_rows 64x64x128: {:.2} us, {:.1} GFLOP/s",
            dt * 1e6,
            2.0 * (m * k * n) as f64 / dt / 1e9
        );
        let mut x = vec![0.1f32; 128 * 64];
        let t = std::time::Instant::now();
        let mut s = 0.0;
        for _ in 0..1000 {
            x.iter_mut().for_each(|v| *v = -0.3);
            s += crate::kernels::rows::exp_sub_sum(&mut x, 0.5);
        }
        let dt = t.elapsed().as_secs_f64() / 1000.0;
        println!(
            "exp 8192: {:.2} us ({:.2} ns/elem) {s}",
            dt * 1e6,
            dt * 1e9 / 8192.0
        );
    }
}
