//! GEMM against a constant right-hand side packed at compile time: C[m, n] = A[m, k] · B[k, n]
//! with B cut into k-blocks of `KC` rows and column panels of `nr` columns, each (block, panel)
//! stored contiguously row by row (`kc × nr` floats, the last panel zero-padded). A register
//! tile of `MR × nr` sums runs over one block while A's elements are broadcast from their rows
//! in place, so nothing is packed at run time: the cost that dominates a general GEMM on a few
//! rows (re-packing the whole weight every call) is paid once.
//!
//! Panel width and tile height follow the vector unit: AVX-512 keeps a 12 × 32 tile in 24 zmm
//! registers and prefetches the next panel block into L2 while it works (the first tile over a
//! panel otherwise waits on L3 for each of its rows), AVX2+FMA a 6 × 16 tile in twelve ymm
//! registers, aarch64 NEON a 6 × 16 tile in 24 q registers, and other CPUs run a 4 × 16 tile in
//! plain Rust that the compiler vectorises. A block's rows are shared evenly between the fewest
//! tiles (13 rows take 7 + 6, not 12 + 1).
//! The panel width is fixed when packing (on the machine that runs the program).

use super::Cx;
use crate::tensor::SendPtr;
use std::sync::Arc;

/// Rows of B per block: one `KC × 32` panel block is 32 KiB, inside the level-1 data cache.
const KC: usize = 256;
/// Rows of A per task: a `MC × KC` slice of A (96 KiB) stays in the level-2 cache while every
/// panel of a block passes over it.
const MC: usize = 96;

#[derive(Debug)]
pub struct PackedB {
    k: usize,
    n: usize,
    nr: usize,
    data: Arc<Vec<f32>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
    Neon,
    Portable,
}

/// Columns per panel for the tile kernel of `isa`.
fn width(isa: Isa) -> usize {
    if isa == Isa::Avx512 {
        32
    } else {
        16
    }
}

fn isa() -> Isa {
    if crate::simd::has_avx512() {
        Isa::Avx512
    } else if crate::simd::has_avx2_fma() {
        Isa::Avx2
    } else if crate::simd::has_neon() {
        Isa::Neon
    } else {
        Isa::Portable
    }
}

impl PackedB {
    /// Packs the `k × n` matrix whose element (row t, column j) is `at(t, j)`.
    pub fn pack(k: usize, n: usize, at: impl Fn(usize, usize) -> f32) -> PackedB {
        Self::pack_for(isa(), k, n, at)
    }

    fn pack_for(isa: Isa, k: usize, n: usize, at: impl Fn(usize, usize) -> f32) -> PackedB {
        let nr = width(isa);
        let mut data = vec![0f32; k * n.next_multiple_of(nr)];
        for t in 0..k {
            for j in 0..n {
                data[slot(k, n, nr, t, j)] = at(t, j);
            }
        }
        PackedB {
            k,
            n,
            nr,
            data: crate::shared_weights::share(data),
        }
    }

    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }

    fn panels(&self) -> usize {
        self.n.div_ceil(self.nr)
    }

    fn view(&self) -> Panels {
        Panels {
            data: self.data.as_ptr(),
            k: self.k,
            n: self.n,
            nr: self.nr,
        }
    }

    /// Element (row t, column j), for reference loops.
    pub fn at(&self, t: usize, j: usize) -> f32 {
        self.data[slot(self.k, self.n, self.nr, t, j)]
    }
}

/// `C = A · B` for `m` rows of A (row stride `a_rs`, column stride `a_cs`), writing `m` rows of
/// `n` floats at `c` (row stride `ldc`), split over the pool when the product is large.
///
/// # Safety
/// `a` addresses `m × k` floats through its strides; `c` holds `m` rows of `ldc ≥ n` floats that
/// nothing else touches during the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    m: usize,
    b: &PackedB,
    c: *mut f32,
    ldc: usize,
    cx: &Cx,
) {
    if b.k == 0 {
        for r in 0..m {
            std::slice::from_raw_parts_mut(c.add(r * ldc), b.n).fill(0.0);
        }
        return;
    }
    let panels = b.panels();
    let flops = 2 * m * b.k * b.n;
    let par = cx.threads > 1 && flops >= 1 << 20;
    let panel_tasks = if par { panels.min(cx.threads * 2) } else { 1 };
    let row_tasks = if par { m.div_ceil(MC) } else { 1 };
    let per_panel = panels.div_ceil(panel_tasks);
    let per_row = m.div_ceil(row_tasks);
    let (a, c) = (SendPtr(a as *mut f32), SendPtr(c));
    let isa = isa();
    cx.par_for(panel_tasks * row_tasks, &|task| {
        let (pt, rt) = (task % panel_tasks, task / panel_tasks);
        let (p0, p1) = (pt * per_panel, ((pt + 1) * per_panel).min(panels));
        let (r0, r1) = (rt * per_row, ((rt + 1) * per_row).min(m));
        // SAFETY: tasks write disjoint (row, panel) blocks of C; the caller vouches for the rest.
        unsafe {
            block(
                isa,
                a.get(),
                a_rs,
                a_cs,
                r0,
                r1,
                &b.view(),
                p0,
                p1,
                c.get(),
                ldc,
            )
        };
    });
}

/// Where element (row t, column j) of a `k × n` B lies in packed storage with panels `nr` wide:
/// k-blocks of `KC` rows, each holding its panels in turn, each panel row by row.
fn slot(k: usize, n: usize, nr: usize, t: usize, j: usize) -> usize {
    let (k0, panels) = (t / KC * KC, n.div_ceil(nr));
    let kcur = KC.min(k - k0);
    k0 * panels * nr + (j / nr * kcur + t - k0) * nr + j % nr
}

/// Packed storage of a `k × n` B in [`PackedB`]'s layout, with panels `nr` wide.
struct Panels {
    data: *const f32,
    k: usize,
    n: usize,
    nr: usize,
}

impl Panels {
    fn panels(&self) -> usize {
        self.n.div_ceil(self.nr)
    }
}

/// Columns per panel of [`gemm_on_panels`]'s storage on this CPU.
pub(crate) fn panel_width() -> usize {
    width(isa())
}

/// Floats of packed storage for a `k × n` B.
pub(crate) fn panels_len(k: usize, n: usize) -> usize {
    k * n.next_multiple_of(panel_width())
}

/// Writes column `j` of a `k × n` B (`col[t]` = B[t, j]) into packed storage `data`
/// ([`panels_len`] floats), for B packed at run time (weights decoded a tile at a time).
pub(crate) fn put_column(data: &mut [f32], k: usize, n: usize, j: usize, col: &[f32]) {
    let nr = panel_width();
    for k0 in (0..k).step_by(KC) {
        // rows of a k-block's panel are nr floats apart
        let base = slot(k, n, nr, k0, j);
        for (t, &v) in col[k0..(k0 + KC).min(k)].iter().enumerate() {
            data[base + t * nr] = v;
        }
    }
}

/// `C = A · B` on the calling thread for B in packed storage `data` written by [`put_column`]
/// (columns a padded panel does not have are computed and not stored).
///
/// # Safety
/// As [`gemm`]; `data` holds [`panels_len`]`(k, n)` floats.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_on_panels(
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    m: usize,
    data: &[f32],
    k: usize,
    n: usize,
    c: *mut f32,
    ldc: usize,
) {
    let panels = Panels {
        data: data.as_ptr(),
        k,
        n,
        nr: panel_width(),
    };
    debug_assert!(data.len() >= panels_len(k, n));
    block(
        isa(),
        a,
        a_rs,
        a_cs,
        0,
        m,
        &panels,
        0,
        panels.panels(),
        c,
        ldc,
    );
}

/// Rows `r0..r1` × panels `p0..p1` of C, every k-block in turn.
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    isa: Isa,
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    r0: usize,
    r1: usize,
    b: &Panels,
    p0: usize,
    p1: usize,
    c: *mut f32,
    ldc: usize,
) {
    let nr = b.nr;
    let mr = match isa {
        Isa::Avx512 => 12,
        Isa::Avx2 | Isa::Neon => 6,
        Isa::Portable => 4,
    };
    let panels = b.panels();
    for k0 in (0..b.k).step_by(KC) {
        let kcur = KC.min(b.k - k0);
        let accumulate = k0 > 0;
        let block = b.data.add(k0 * panels * nr);
        for m0 in (r0..r1).step_by(MC) {
            let m1 = (m0 + MC).min(r1);
            for p in p0..p1 {
                let bp = block.add(p * kcur * nr);
                let cols = nr.min(b.n - p * nr);
                // rows shared evenly between the fewest tiles
                let tiles = (m1 - m0).div_ceil(mr);
                let (base, extra) = ((m1 - m0) / tiles, (m1 - m0) % tiles);
                let mut i0 = m0;
                for ti in 0..tiles {
                    let rows = base + usize::from(ti < extra);
                    let ap = a.add(i0 * a_rs + k0 * a_cs);
                    let cp = c.add(i0 * ldc + p * nr);
                    let t = Tile {
                        k: kcur,
                        a: ap,
                        a_rs,
                        a_cs,
                        b: bp,
                        c: cp,
                        ldc,
                        cols,
                        accumulate,
                        next: kcur * nr,
                    };
                    match isa {
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx512 => x86::tile512(rows, &t),
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2 => x86::tile256(rows, &t),
                        #[cfg(target_arch = "aarch64")]
                        Isa::Neon => arm::tile128(rows, &t),
                        _ => portable(rows, &t),
                    }
                    i0 += rows;
                }
            }
        }
    }
}

/// One register tile: `rows` rows of A from `a` against one panel block at `b` (`k` rows of
/// `nr` floats), into the first `cols` columns of `rows` rows of C at `c`.
struct Tile {
    k: usize,
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    accumulate: bool,
    /// Floats from this panel block to the one the next tiles read (prefetched on x86).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    next: usize,
}

fn portable(rows: usize, t: &Tile) {
    match rows {
        1 => portable_tile::<1>(t),
        2 => portable_tile::<2>(t),
        3 => portable_tile::<3>(t),
        _ => portable_tile::<4>(t),
    }
}

fn portable_tile<const R: usize>(t: &Tile) {
    const NR: usize = 16;
    let mut acc = [[0f32; NR]; R];
    for kk in 0..t.k {
        // SAFETY: the tile's pointers address k rows of the block and R rows of A (see `gemm`).
        let bv: &[f32; NR] = unsafe { &*(t.b.add(kk * NR) as *const [f32; NR]) };
        for (i, row) in acc.iter_mut().enumerate() {
            let av = unsafe { *t.a.add(i * t.a_rs + kk * t.a_cs) };
            for (s, &w) in row.iter_mut().zip(bv) {
                *s += av * w;
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: C's row i holds at least `cols` floats from `c`.
        let out = unsafe { std::slice::from_raw_parts_mut(t.c.add(i * t.ldc), t.cols) };
        for (o, &s) in out.iter_mut().zip(row) {
            *o = if t.accumulate { *o + s } else { s };
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::Tile;
    use std::arch::aarch64::*;

    pub(super) unsafe fn tile128(rows: usize, t: &Tile) {
        match rows {
            1 => t128::<1>(t),
            2 => t128::<2>(t),
            3 => t128::<3>(t),
            4 => t128::<4>(t),
            5 => t128::<5>(t),
            _ => t128::<6>(t),
        }
    }

    /// A `R × 16` tile in `4R` q-registers (24 of the 32 at R = 6), the panel row in four more.
    #[inline(always)]
    unsafe fn t128<const R: usize>(t: &Tile) {
        let mut acc = [[vdupq_n_f32(0.0); 4]; R];
        let (mut ap, mut bp) = (t.a, t.b);
        for _ in 0..t.k {
            let b = [
                vld1q_f32(bp),
                vld1q_f32(bp.add(4)),
                vld1q_f32(bp.add(8)),
                vld1q_f32(bp.add(12)),
            ];
            for (i, s) in acc.iter_mut().enumerate() {
                let av = *ap.add(i * t.a_rs);
                for (q, &bq) in s.iter_mut().zip(&b) {
                    *q = vfmaq_n_f32(*q, bq, av);
                }
            }
            ap = ap.add(t.a_cs);
            bp = bp.add(16);
        }
        for (i, s) in acc.iter().enumerate() {
            let cp = t.c.add(i * t.ldc);
            if t.cols == 16 {
                for (q, &v) in s.iter().enumerate() {
                    let o = cp.add(4 * q);
                    let v = if t.accumulate {
                        vaddq_f32(v, vld1q_f32(o))
                    } else {
                        v
                    };
                    vst1q_f32(o, v);
                }
            } else {
                let mut row = [0f32; 16];
                for (q, &v) in s.iter().enumerate() {
                    vst1q_f32(row.as_mut_ptr().add(4 * q), v);
                }
                for (j, &v) in row.iter().enumerate().take(t.cols) {
                    let o = cp.add(j);
                    *o = if t.accumulate { *o + v } else { v };
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Tile;
    use std::arch::x86_64::*;

    pub(super) unsafe fn tile512(rows: usize, t: &Tile) {
        match rows {
            1 => t512::<1>(t),
            2 => t512::<2>(t),
            3 => t512::<3>(t),
            4 => t512::<4>(t),
            5 => t512::<5>(t),
            6 => t512::<6>(t),
            7 => t512::<7>(t),
            8 => t512::<8>(t),
            9 => t512::<9>(t),
            10 => t512::<10>(t),
            11 => t512::<11>(t),
            _ => t512::<12>(t),
        }
    }

    pub(super) unsafe fn tile256(rows: usize, t: &Tile) {
        match rows {
            1 => t256::<1>(t),
            2 => t256::<2>(t),
            3 => t256::<3>(t),
            4 => t256::<4>(t),
            5 => t256::<5>(t),
            _ => t256::<6>(t),
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn t512<const R: usize>(t: &Tile) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        let (mut ap, mut bp) = (t.a, t.b);
        for _ in 0..t.k {
            let b0 = _mm512_loadu_ps(bp);
            let b1 = _mm512_loadu_ps(bp.add(16));
            _mm_prefetch::<_MM_HINT_T1>(bp.wrapping_add(t.next) as *const i8);
            _mm_prefetch::<_MM_HINT_T1>(bp.wrapping_add(t.next + 16) as *const i8);
            for (i, s) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(i * t.a_rs));
                s[0] = _mm512_fmadd_ps(av, b0, s[0]);
                s[1] = _mm512_fmadd_ps(av, b1, s[1]);
            }
            ap = ap.add(t.a_cs);
            bp = bp.add(32);
        }
        let lo = t.cols.min(16);
        let hi = t.cols.saturating_sub(16);
        let m0: __mmask16 = if lo == 16 { 0xffff } else { (1u16 << lo) - 1 };
        let m1: __mmask16 = if hi == 16 { 0xffff } else { (1u16 << hi) - 1 };
        for (i, s) in acc.iter().enumerate() {
            let cp = t.c.add(i * t.ldc);
            let (mut v0, mut v1) = (s[0], s[1]);
            if t.accumulate {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cp));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cp.add(16)));
            }
            _mm512_mask_storeu_ps(cp, m0, v0);
            _mm512_mask_storeu_ps(cp.add(16), m1, v1);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn t256<const R: usize>(t: &Tile) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let (mut ap, mut bp) = (t.a, t.b);
        for _ in 0..t.k {
            let b0 = _mm256_loadu_ps(bp);
            let b1 = _mm256_loadu_ps(bp.add(8));
            for (i, s) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*ap.add(i * t.a_rs));
                s[0] = _mm256_fmadd_ps(av, b0, s[0]);
                s[1] = _mm256_fmadd_ps(av, b1, s[1]);
            }
            ap = ap.add(t.a_cs);
            bp = bp.add(16);
        }
        for (i, s) in acc.iter().enumerate() {
            let cp = t.c.add(i * t.ldc);
            if t.cols == 16 {
                let (mut v0, mut v1) = (s[0], s[1]);
                if t.accumulate {
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cp));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cp.add(8)));
                }
                _mm256_storeu_ps(cp, v0);
                _mm256_storeu_ps(cp.add(8), v1);
            } else {
                let mut row = [0f32; 16];
                _mm256_storeu_ps(row.as_mut_ptr(), s[0]);
                _mm256_storeu_ps(row.as_mut_ptr().add(8), s[1]);
                for (j, &v) in row.iter().enumerate().take(t.cols) {
                    let o = cp.add(j);
                    *o = if t.accumulate { *o + v } else { v };
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Uniform values in [-0.5, 0.5) from a linear congruential sequence.
    pub(crate) fn values(seed: u32) -> impl FnMut() -> f32 {
        let mut seed = seed;
        move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        }
    }

    /// `c` (rows of `ldc` floats, NaN beyond column `n`) holds `a [m, k] · b [k, n]` within f32
    /// rounding, and the padding is untouched.
    pub(crate) fn assert_product(
        what: &str,
        a: &[f32],
        b: &[f32],
        c: &[f32],
        (m, k, n): (usize, usize, usize),
        ldc: usize,
    ) {
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|t| a[i * k + t] as f64 * b[t * n + j] as f64)
                    .sum();
                let got = c[i * ldc + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * (k as f64).sqrt(),
                    "{what} {m}x{k}x{n}: ({i}, {j}) {got} vs {want}"
                );
            }
            assert!(
                c[i * ldc + n..(i + 1) * ldc].iter().all(|v| v.is_nan()),
                "{what}"
            );
        }
    }

    /// Every tile kernel this CPU can run against a plain loop, over edges of tiles, row
    /// blocks, k-blocks and panels, with a strided (transposed) A.
    #[test]
    fn every_available_tile_kernel_matches_a_plain_product() {
        let mut isas = vec![Isa::Portable];
        if crate::simd::has_avx2_fma() {
            isas.push(Isa::Avx2);
        }
        if crate::simd::has_avx512() {
            isas.push(Isa::Avx512);
        }
        if crate::simd::has_neon() {
            isas.push(Isa::Neon);
        }
        let mut next = values(7);
        for &(m, k, n) in &[
            (1, 1, 1),
            (7, 300, 33),
            (13, 256, 16),
            (22, 300, 33),
            (10, 40, 70),
            (9, 17, 32),
            (100, 513, 47),
        ] {
            let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
            for &isa in &isas {
                let packed = PackedB::pack_for(isa, k, n, |t, j| b[t * n + j]);
                for transposed in [false, true] {
                    // A stored [k, m] when transposed: element (i, t) at t * m + i
                    let at: Vec<f32> = if transposed {
                        (0..k * m).map(|x| a[(x % m) * k + x / m]).collect()
                    } else {
                        a.clone()
                    };
                    let (rs, cs) = if transposed { (1, m) } else { (k, 1) };
                    let mut c = vec![f32::NAN; m * (n + 3)];
                    let panels = packed.panels();
                    // SAFETY: a holds m × k, c holds m rows of n + 3 floats.
                    unsafe {
                        block(
                            isa,
                            at.as_ptr(),
                            rs,
                            cs,
                            0,
                            m,
                            &packed.view(),
                            0,
                            panels,
                            c.as_mut_ptr(),
                            n + 3,
                        )
                    };
                    let what = format!("{isa:?} transposed={transposed}");
                    assert_product(&what, &a, &b, &c, (m, k, n), n + 3);
                }
            }
        }
    }

    /// Columns written one at a time by `put_column` (weights decoded at run time) give the
    /// storage `PackedB::pack` gives, and `gemm_on_panels` over it the plain product.
    #[test]
    fn columns_put_at_run_time_pack_as_packed_b() {
        let mut next = values(11);
        for &(m, k, n) in &[(1, 1, 1), (9, 300, 33), (70, 513, 64), (17, 256, 5)] {
            let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
            let packed = PackedB::pack(k, n, |t, j| b[t * n + j]);
            let mut data = vec![0f32; panels_len(k, n)];
            for j in 0..n {
                let col: Vec<f32> = (0..k).map(|t| b[t * n + j]).collect();
                put_column(&mut data, k, n, j, &col);
            }
            assert_eq!(data, *packed.data, "{m}x{k}x{n}");
            let mut c = vec![f32::NAN; m * (n + 2)];
            // SAFETY: a holds m × k, c holds m rows of n + 2 floats, data the packed B.
            unsafe { gemm_on_panels(a.as_ptr(), k, 1, m, &data, k, n, c.as_mut_ptr(), n + 2) };
            assert_product("panels put at run time", &a, &b, &c, (m, k, n), n + 2);
        }
    }
}
