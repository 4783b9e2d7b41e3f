//! Products against a right-hand side stored along k: C[m, n] = A[m, k] · Bᵀ with B held as `n`
//! rows of `k` floats, as linear layers store their weights, read where they lie.
//!
//! A register tile of 4 rows of A × 4 rows of B keeps 16 vector sums over k (16 lanes each) in
//! zmm registers: per 16 values of k, 8 loads feed 16 FMAs. One transposing reduction per tile
//! (30 shuffles, 15 adds) then turns the 16 vectors into the tile's 16 outputs. Rows along k are
//! contiguous in both operands, so nothing is transposed and nothing is allocated, where the
//! general GEMM transposes the whole weight into freshly allocated panels on every call, which
//! over few rows costs more than the product (a CLIP ViT-B/32 image at batch 1, 50 rows per
//! linear layer, spent more time packing than multiplying).
//!
//! Every output is summed in one order, fixed by k alone: lane l of a 16-lane sum takes the
//! values of k ≡ l (mod 16) of one `KC` block in turn, the reduction adds lanes in a fixed tree,
//! and the blocks' totals are added in turn. Neither the row count, nor a row's place in its
//! tile, nor the split over threads changes it, so a row's result is a function of that row and
//! the weight alone: an embedding is the same bits however the inputs are batched. For that the
//! kernel serves products of every row count (past two, where the GEMV takes over), though over
//! many rows with short k the general GEMM's broadcast kernel, with fewer loads per FMA and no
//! reductions, is faster (docs/performance.md).
//!
//! Blocking: k in blocks of `KC` (later blocks add to C); A's rows in blocks of `MB`, which stay
//! in the level-2 cache while B's rows pass over them `NC` at a time, which stay in the level-1
//! cache while the block's rows of A pass over them four at a time. Where those `NC` rows would
//! crowd into the same level-1 cache sets (rows of a weight whose length is a multiple of 1,024
//! floats lie a multiple of 4 KiB apart, and evict each other: measured a third slower at k =
//! 512), they are copied side by side into a 16 KiB buffer first; otherwise they are read where
//! they lie.

use super::Cx;
use crate::tensor::SendPtr;

/// Rows of A per task when the product is split over threads.
const MC: usize = 64;
/// Outputs per tile side.
const T: usize = 4;

/// Whether this CPU runs the kernel (AVX-512, under the AVX-512 kernel schedule).
pub fn applies() -> bool {
    crate::simd::has_avx512()
}

/// `C = A · Bᵀ` for A `m × k` (rows `lda` apart), B `n × k` (rows `ldb` apart), C `m × n` (rows
/// `ldc` apart), split over the pool when the product is large.
///
/// # Safety
/// The CPU runs the kernel ([`applies`]);
/// the pointers address those matrices in bounds; C overlaps neither A nor B and nothing else
/// touches it during the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    a: *const f32,
    lda: usize,
    m: usize,
    b: *const f32,
    ldb: usize,
    n: usize,
    k: usize,
    c: *mut f32,
    ldc: usize,
    cx: &Cx,
) {
    let flops = 2 * m * n * k;
    let par = cx.threads > 1 && flops >= 1 << 20;
    let quads = n.div_ceil(T);
    let col_tasks = if par { quads.min(cx.threads * 2) } else { 1 };
    let row_tasks = if par { m.div_ceil(MC) } else { 1 };
    let per_col = quads.div_ceil(col_tasks) * T;
    let per_row = m.div_ceil(row_tasks);
    let (ap, bp, cp) = (SendPtr(a as *mut f32), SendPtr(b as *mut f32), SendPtr(c));
    cx.par_for(col_tasks * row_tasks, &|task| {
        let (ct, rt) = (task % col_tasks, task / col_tasks);
        let (j0, j1) = (ct * per_col, ((ct + 1) * per_col).min(n));
        let (i0, i1) = (rt * per_row, ((rt + 1) * per_row).min(m));
        if j0 < j1 && i0 < i1 {
            // SAFETY: tasks write disjoint (rows, columns) blocks of C; the caller vouches for
            // the rest.
            unsafe {
                block(
                    ap.get().add(i0 * lda),
                    lda,
                    i1 - i0,
                    bp.get().add(j0 * ldb),
                    ldb,
                    j1 - j0,
                    k,
                    cp.get().add(i0 * ldc + j0),
                    ldc,
                )
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
use x86::block;

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    _: *const f32,
    _: usize,
    _: usize,
    _: *const f32,
    _: usize,
    _: usize,
    _: usize,
    _: *mut f32,
    _: usize,
) {
    unreachable!("dots::applies holds on x86-64 only")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::T;
    use std::arch::x86_64::*;

    /// Values of k per block.
    const KC: usize = 512;
    /// Rows of B per block: 16 KiB at `KC`, with a tile's 4 rows of A 24 KiB of the level-1
    /// cache.
    const NC: usize = 8;
    /// Rows of A per block: 256 KiB of the level-2 cache, read by every block of B's rows.
    const MB: usize = 128;

    /// `NC` rows of B's k-block side by side, `kc` floats apart.
    #[repr(align(64))]
    struct Block([f32; NC * KC]);

    /// The whole product on the calling thread.
    #[target_feature(enable = "avx512f,avx512vl")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn block(
        a: *const f32,
        lda: usize,
        m: usize,
        b: *const f32,
        ldb: usize,
        n: usize,
        k: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        if k == 0 {
            for i in 0..m {
                std::slice::from_raw_parts_mut(c.add(i * ldc), n).fill(0.0);
            }
            return;
        }
        // zeroed only where it is used: a product runs once per layer and call
        let mut rows_of_b = if aliases(ldb) {
            Some(Block([0.0; NC * KC]))
        } else {
            None
        };
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            for m0 in (0..m).step_by(MB) {
                let m1 = (m0 + MB).min(m);
                for n0 in (0..n).step_by(NC) {
                    let n1 = (n0 + NC).min(n);
                    let (bb, ldbb) = match rows_of_b.as_mut() {
                        Some(side) => {
                            for j in n0..n1 {
                                std::ptr::copy_nonoverlapping(
                                    b.add(j * ldb + k0),
                                    side.0.as_mut_ptr().add((j - n0) * kc),
                                    kc,
                                );
                            }
                            (side.0.as_ptr(), kc)
                        }
                        None => (b.add(n0 * ldb + k0), ldb),
                    };
                    for i0 in (m0..m1).step_by(T) {
                        let rows = T.min(m1 - i0);
                        // rows past the end repeat the last one; their sums are dropped
                        let ar = std::array::from_fn(|r| a.add((i0 + r.min(rows - 1)) * lda + k0));
                        for j0 in (n0..n1).step_by(T) {
                            let cols = T.min(n1 - j0);
                            let br =
                                std::array::from_fn(|s| bb.add((j0 - n0 + s.min(cols - 1)) * ldbb));
                            let sums = tile(ar, br, kc);
                            let mask: __mmask8 = (1 << cols) - 1;
                            for r in 0..rows {
                                // quarter r holds row r's sums
                                let q = match r {
                                    0 => _mm512_castps512_ps128(sums),
                                    1 => _mm512_extractf32x4_ps::<1>(sums),
                                    2 => _mm512_extractf32x4_ps::<2>(sums),
                                    _ => _mm512_extractf32x4_ps::<3>(sums),
                                };
                                let crow = c.add((i0 + r) * ldc + j0);
                                let q = if k0 == 0 {
                                    q
                                } else {
                                    _mm_add_ps(q, _mm_maskz_loadu_ps(mask, crow))
                                };
                                _mm_mask_storeu_ps(crow, mask, q);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Whether `NC` rows `ldb` floats apart crowd into a quarter of the level-1 cache's sets
    /// (their starts lie within 1 KiB of each other modulo 4 KiB, so their first kilobytes map
    /// to the same sets): then they are copied side by side first.
    fn aliases(ldb: usize) -> bool {
        let starts = (0..NC).map(|j| j * ldb * 4 % 4096);
        let (lo, hi) = starts.fold((usize::MAX, 0), |(lo, hi), s| (lo.min(s), hi.max(s)));
        hi - lo < 1024
    }

    /// The 16 dot products of rows `a[r]` and `b[s]` over `k` values, sum (r, s) in lane 4r + s.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn tile(a: [*const f32; T], b: [*const f32; T], k: usize) -> __m512 {
        let mut acc = [[_mm512_setzero_ps(); T]; T];
        let mut t = 0;
        while t + 16 <= k {
            let av: [__m512; T] = std::array::from_fn(|r| _mm512_loadu_ps(a[r].add(t)));
            for (s, &bs) in b.iter().enumerate() {
                let bv = _mm512_loadu_ps(bs.add(t));
                for (r, &x) in av.iter().enumerate() {
                    acc[r][s] = _mm512_fmadd_ps(x, bv, acc[r][s]);
                }
            }
            t += 16;
        }
        if t < k {
            let mask: __mmask16 = (1u16 << (k - t)) - 1;
            let av: [__m512; T] = std::array::from_fn(|r| _mm512_maskz_loadu_ps(mask, a[r].add(t)));
            for (s, &bs) in b.iter().enumerate() {
                let bv = _mm512_maskz_loadu_ps(mask, bs.add(t));
                for (r, &x) in av.iter().enumerate() {
                    acc[r][s] = _mm512_fmadd_ps(x, bv, acc[r][s]);
                }
            }
        }
        // vector o = r + 4s; its total lands in lane 4(o mod 4) + o / 4 = 4r + s
        let o: [__m512; 16] = std::array::from_fn(|o| acc[o % T][o / T]);
        reduce16(o)
    }

    /// Lane `4l + e` of the result is the sum of the 16 lanes of `o[l + 4e]`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn reduce16(o: [__m512; 16]) -> __m512 {
        // 256-bit halves: low half of s[p] from o[2p], high half from o[2p + 1]
        let s: [__m512; 8] = std::array::from_fn(|p| {
            let (x, y) = (o[2 * p], o[2 * p + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x44>(x, y),
                _mm512_shuffle_f32x4::<0xEE>(x, y),
            )
        });
        // 128-bit quarters: quarter l of u[q] from o[4q + l]
        let u: [__m512; 4] = std::array::from_fn(|q| {
            let (x, y) = (s[2 * q], s[2 * q + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x88>(x, y),
                _mm512_shuffle_f32x4::<0xDD>(x, y),
            )
        });
        // pairs inside quarter l of w[h]: lanes 0-1 from o[8h + l], lanes 2-3 from o[8h + 4 + l]
        let w: [__m512; 2] = std::array::from_fn(|h| {
            let (x, y) = (u[2 * h], u[2 * h + 1]);
            _mm512_add_ps(
                _mm512_shuffle_ps::<0x44>(x, y),
                _mm512_shuffle_ps::<0xEE>(x, y),
            )
        });
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x88>(w[0], w[1]),
            _mm512_shuffle_ps::<0xDD>(w[0], w[1]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::packed::tests::{assert_product, values};
    use crate::kernels::with_test_cx;

    /// `C = A · Bᵀ` through the kernel, A `m × k` and B `n × k` contiguous.
    fn product(a: &[f32], m: usize, b: &[f32], n: usize, k: usize, threads: usize) -> Vec<f32> {
        let mut c = vec![f32::NAN; m * n];
        // SAFETY: the buffers hold the matrices, contiguous; the kernel runs here.
        with_test_cx(threads, |cx| unsafe {
            gemm(a.as_ptr(), k, m, b.as_ptr(), k, n, k, c.as_mut_ptr(), n, cx)
        });
        c
    }

    /// A row's outputs are the same bits whatever rows share its product, wherever it falls in
    /// a tile and on one thread or two: against all 150 rows at once on two threads, every row
    /// alone, and runs of 3, 5 and 64 rows starting at every offset mod 4, on one thread; with
    /// weight rows read in place (k = 1100) and copied side by side (k = 1024, 4 KiB apart).
    #[test]
    fn a_row_does_not_depend_on_the_rows_beside_it() {
        if !applies() {
            return;
        }
        for k in [1100, 1024] {
            rows_stand_alone(150, k, 37);
        }
    }

    fn rows_stand_alone(m: usize, k: usize, n: usize) {
        let mut next = values(9);
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let b: Vec<f32> = (0..n * k).map(|_| next()).collect();
        let all = product(&a, m, &b, n, k, 2);
        for (start, rows) in
            (0..m)
                .map(|i| (i, 1))
                .chain([(1, 3), (2, 5), (3, 64), (85, 64), (0, 64), (147, 3)])
        {
            let part = product(&a[start * k..(start + rows) * k], rows, &b, n, k, 1);
            for (r, got) in part.chunks(n).enumerate() {
                let want = &all[(start + r) * n..(start + r + 1) * n];
                assert!(
                    got.iter()
                        .zip(want)
                        .all(|(g, w)| g.to_bits() == w.to_bits()),
                    "k={k}: row {} computed among {rows} rows from {start} differs",
                    start + r
                );
            }
        }
    }

    /// Against an f64 loop, over tile edges (rows and columns not multiples of 4), k tails and
    /// k-blocks, B-row blocks, padded rows of A, B and C, on one thread and split over two.
    #[test]
    fn products_match_a_plain_loop() {
        if !applies() {
            return;
        }
        let mut next = values(5);
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 15, 5),
            (4, 16, 4),
            (7, 33, 9),
            (50, 768, 70),
            (130, 1030, 67),
            (9, 2500, 131),
        ] {
            // A [m, k] and B [k, n], stored with padded rows: A's rows lda apart, B's columns
            // as rows ldb apart
            let (lda, ldb, ldc) = (k + 3, k + 5, n + 2);
            let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
            let a_rows: Vec<f32> = (0..m * lda)
                .map(|x| {
                    if x % lda < k {
                        a[x / lda * k + x % lda]
                    } else {
                        f32::NAN
                    }
                })
                .collect();
            let b_rows: Vec<f32> = (0..n * ldb)
                .map(|x| {
                    if x % ldb < k {
                        b[x % ldb * n + x / ldb]
                    } else {
                        f32::NAN
                    }
                })
                .collect();
            for threads in [1, 2] {
                let mut c = vec![f32::NAN; m * ldc];
                // SAFETY: the buffers hold the matrices with these strides; the kernel runs here.
                with_test_cx(threads, |cx| unsafe {
                    gemm(
                        a_rows.as_ptr(),
                        lda,
                        m,
                        b_rows.as_ptr(),
                        ldb,
                        n,
                        k,
                        c.as_mut_ptr(),
                        ldc,
                        cx,
                    )
                });
                assert_product(&format!("threads={threads}"), &a, &b, &c, (m, k, n), ldc);
            }
        }
    }
}
