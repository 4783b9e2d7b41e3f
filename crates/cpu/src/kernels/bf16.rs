//! Products in bfloat16 (`MatmulPrecision::Bf16`): C[m, n] = A[m, k] · B[k, n] with both
//! operands rounded to bf16 (to nearest, ties to even) and the products summed in f32, against a
//! constant B packed at compile time.
//!
//! On CPUs with AMX (Intel Sapphire Rapids and later, with a Linux kernel that grants the tile
//! state) the product runs on the tile unit: `tdpbf16ps` multiplies a 16 × 32 bf16 tile of A by a
//! 32 × 16 tile of B (stored as 16 rows of k-pairs) into a 16 × 16 f32 tile, 8192 multiply-adds
//! an instruction. A 32 × 32 block of C lives in four accumulator tiles (tmm0-3) while two tiles
//! of A (tmm4-5) and two of B (tmm6-7) stream over k. B is packed per 32-column panel, 32 k at a
//! time, as the two B tiles; A is rounded into scratch at run time, rows padded to 32 and k to
//! 32 with zeros (zero terms change no sum).
//!
//! Elsewhere the same rounded operands run through the f32 packed GEMM (`packed`): the same
//! terms, summed in another order.

use super::packed::PackedB;
use super::Cx;
use crate::tensor::SendPtr;
use std::sync::Arc;

/// Rows and columns of one block of C (two tiles each way).
const BLOCK: usize = 32;

/// `x` rounded to bfloat16 (to nearest, ties to even; NaN stays NaN), as bits.
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// `x` rounded to bfloat16, as the f32 of the same value.
#[inline(always)]
pub fn round(x: f32) -> f32 {
    f32::from_bits((to_bf16(x) as u32) << 16)
}

/// A constant right-hand side in bf16.
#[derive(Debug)]
pub struct Bf16B {
    k: usize,
    n: usize,
    layout: Layout,
}

#[derive(Debug)]
enum Layout {
    /// AMX tiles: panel p (columns 32p..32p+32) holds `kp / 32` chunks of two 512-element tiles;
    /// tile t of chunk c has row r = pair of k (32c + 2r, 32c + 2r + 1) and, in it, column
    /// 32p + 16t + j at elements 2j and 2j + 1.
    Tiles { kp: usize, words: Arc<Vec<f32>> },
    /// bf16 values widened to f32, in the f32 packed layout.
    Rounded(PackedB),
}

impl Bf16B {
    /// Packs the `k × n` matrix whose element (row t, column j) is `at(t, j)`, rounded to bf16.
    pub fn pack(k: usize, n: usize, at: impl Fn(usize, usize) -> f32) -> Bf16B {
        Self::pack_for(amx::available(), k, n, at)
    }

    fn pack_for(tiles: bool, k: usize, n: usize, at: impl Fn(usize, usize) -> f32) -> Bf16B {
        if !tiles {
            let layout = Layout::Rounded(PackedB::pack(k, n, |t, j| round(at(t, j))));
            return Bf16B { k, n, layout };
        }
        let kp = k.div_ceil(BLOCK) * BLOCK;
        let mut words = vec![0f32; tile_words(k, n)];
        pack_tiles(k, n, at, bytemuck::cast_slice_mut(&mut words));
        Bf16B {
            k,
            n,
            layout: Layout::Tiles {
                kp,
                words: crate::shared_weights::share(words),
            },
        }
    }

    pub fn bytes(&self) -> usize {
        match &self.layout {
            Layout::Tiles { words, .. } => words.len() * 4,
            Layout::Rounded(p) => p.bytes(),
        }
    }

    /// Element (row t, column j) as stored (a bf16 value), for reference loops.
    pub fn at(&self, t: usize, j: usize) -> f32 {
        match &self.layout {
            Layout::Tiles { kp, words } => {
                let (p, col) = (j / BLOCK, j % BLOCK);
                let (c, kk) = (t / BLOCK, t % BLOCK);
                let i = p * BLOCK * kp / 2
                    + c * BLOCK * BLOCK / 2
                    + (col / 16) * 256
                    + (kk / 2) * 16
                    + col % 16;
                let w = words[i].to_bits();
                f32::from_bits(if kk % 2 == 0 {
                    w << 16
                } else {
                    w & 0xffff_0000
                })
            }
            Layout::Rounded(p) => p.at(t, j),
        }
    }

    /// Scratch floats [`gemm`] needs for `m` rows of A.
    pub fn scratch_floats(&self, m: usize) -> usize {
        match &self.layout {
            Layout::Tiles { kp, .. } => (m.div_ceil(BLOCK) * BLOCK * kp).div_ceil(2),
            Layout::Rounded(_) => m * self.k,
        }
    }
}

/// Words (pairs of bf16) that [`pack_tiles`] writes for a `k × n` matrix.
pub(crate) fn tile_words(k: usize, n: usize) -> usize {
    n.div_ceil(BLOCK) * k.div_ceil(BLOCK) * BLOCK * BLOCK / 2
}

/// Packs the `k × n` matrix `at` rounded to bf16 as AMX B tiles (the `Tiles` layout: panels of
/// 32 columns, each `kp / 32` chunks of two tiles of 16 k-pairs × 16 columns) into `words`, one
/// word per (k pair, column) with the even k in its low half; zeros outside the matrix.
pub(crate) fn pack_tiles(k: usize, n: usize, at: impl Fn(usize, usize) -> f32, words: &mut [u32]) {
    let kp = k.div_ceil(BLOCK) * BLOCK;
    let half = |kk: usize, col: usize| -> u32 {
        if kk < k && col < n {
            to_bf16(at(kk, col)) as u32
        } else {
            0
        }
    };
    let words = &mut words[..tile_words(k, n)];
    for (p, panel) in words.chunks_exact_mut(BLOCK * kp / 2).enumerate() {
        for (c, chunk) in panel.chunks_exact_mut(BLOCK * BLOCK / 2).enumerate() {
            for (t, tile) in chunk.chunks_exact_mut(256).enumerate() {
                for (i, w) in tile.iter_mut().enumerate() {
                    let (r, j) = (i / 16, i % 16);
                    let (kk, col) = (c * BLOCK + 2 * r, p * BLOCK + 16 * t + j);
                    *w = half(kk, col) | (half(kk + 1, col) << 16);
                }
            }
        }
    }
}

/// `C = A · B` on one thread from bf16 A (`m` rows padded with zeros to a multiple of 32, row
/// stride `kp`) and B packed by [`pack_tiles`] (`n` columns), into `m` rows of `n` floats at
/// `c` (row stride `ldc`).
///
/// # Safety
/// AMX is available ([`uses_amx`]); the operands are as described; `c` is exclusively the
/// caller's.
pub(crate) unsafe fn tile_gemm(
    a: *const u16,
    kp: usize,
    m: usize,
    b: *const u16,
    n: usize,
    c: *mut f32,
    ldc: usize,
) {
    amx::Tiles::with(|tiles| {
        tiles.blocks(
            a,
            kp,
            m,
            0..m.div_ceil(BLOCK),
            b,
            n,
            0..n.div_ceil(BLOCK),
            c,
            ldc,
        )
    });
}

/// `C = round(A) · B` for `m` rows of A (row stride `a_rs`, column stride `a_cs`), writing `m`
/// rows of `n` floats at `c` (row stride `ldc`); `scratch` holds [`Bf16B::scratch_floats`].
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
    b: &Bf16B,
    c: *mut f32,
    ldc: usize,
    cx: &Cx,
    scratch: &mut [f32],
) {
    let k = b.k;
    match &b.layout {
        Layout::Rounded(p) => {
            let ar = &mut scratch[..m * k];
            for i in 0..m {
                for (t, v) in ar[i * k..(i + 1) * k].iter_mut().enumerate() {
                    *v = round(*a.add(i * a_rs + t * a_cs));
                }
            }
            super::packed::gemm(ar.as_ptr(), k, 1, m, p, c, ldc, cx);
        }
        Layout::Tiles { kp, words } => {
            let kp = *kp;
            let blocks = m.div_ceil(BLOCK);
            let ab = std::slice::from_raw_parts_mut(
                scratch.as_mut_ptr() as *mut u16,
                blocks * BLOCK * kp,
            );
            let par = cx.threads > 1 && 2 * m * k * b.n >= 1 << 22;
            let (src, dst) = (SendPtr(a as *mut f32), SendPtr(ab.as_mut_ptr()));
            let convert = |blk: usize| {
                // SAFETY: each block converts its own rows of the scratch; A is as the caller
                // vouches.
                unsafe {
                    let rows =
                        std::slice::from_raw_parts_mut(dst.get().add(blk * BLOCK * kp), BLOCK * kp);
                    round_rows(src.get(), a_rs, a_cs, m, k, blk * BLOCK, rows, kp);
                }
            };
            let panels = b.n.div_ceil(BLOCK);
            // Row blocks outer (their A stays in the nearer caches), panels inner; tasks take
            // runs of row blocks, or of panels when there are fewer row blocks than threads.
            let (row_tasks, panel_tasks) = if !par {
                (1, 1)
            } else if blocks >= 2 * cx.threads {
                (blocks.min(cx.threads * 4), 1)
            } else {
                (blocks, panels.min(cx.threads * 2))
            };
            let per_row = blocks.div_ceil(row_tasks);
            let per_panel = panels.div_ceil(panel_tasks);
            let bp = SendPtr(words.as_ptr() as *mut u16);
            let cp = SendPtr(c);
            let n = b.n;
            if par {
                cx.par_for(blocks, &convert);
            } else {
                (0..blocks).for_each(convert);
            }
            let work = |task: usize| {
                let (rt, pt) = (task / panel_tasks, task % panel_tasks);
                let (r0, r1) = (rt * per_row, ((rt + 1) * per_row).min(blocks));
                let (p0, p1) = (pt * per_panel, ((pt + 1) * per_panel).min(panels));
                // SAFETY: tasks write disjoint blocks of C; AMX was granted (Tiles layout).
                unsafe {
                    amx::Tiles::with(|tiles| {
                        let a = dst.get() as *const u16;
                        tiles.blocks(a, kp, m, r0..r1, bp.get(), n, p0..p1, cp.get(), ldc)
                    })
                };
            };
            if par {
                cx.par_for(row_tasks * panel_tasks, &work);
            } else {
                work(0);
            }
        }
    }
}

/// A constant left-hand side in bf16 for AMX tiles: `m` rows of `k` values, stored row-major
/// with rows padded to a multiple of 32 and columns to `kp` (a multiple of 32), zeros in the
/// padding. Built only where AMX is available ([`uses_amx`]).
#[derive(Debug)]
pub struct Bf16A {
    m: usize,
    k: usize,
    kp: usize,
    /// Pairs of bf16 (the even column in the low half), `m.div_ceil(32) · 32 · kp / 2` words.
    words: Arc<Vec<f32>>,
}

impl Bf16A {
    /// Packs the `m × k` matrix whose element (row i, column t) is `at(i, t)`, rounded to bf16.
    pub fn pack(m: usize, k: usize, at: impl Fn(usize, usize) -> f32) -> Bf16A {
        let kp = k.div_ceil(BLOCK) * BLOCK;
        let rows = m.div_ceil(BLOCK) * BLOCK;
        let mut words = vec![0f32; rows * kp / 2];
        {
            let halves: &mut [u16] = bytemuck::cast_slice_mut(&mut words);
            for i in 0..m {
                for t in 0..k {
                    halves[i * kp + t] = to_bf16(at(i, t));
                }
            }
        }
        Bf16A {
            m,
            k,
            kp,
            words: crate::shared_weights::share(words),
        }
    }

    pub fn bytes(&self) -> usize {
        self.words.len() * 4
    }

    /// Scratch floats [`gemm_a`] needs for `n` columns of B.
    pub fn scratch_floats(&self, n: usize) -> usize {
        tile_words(self.k, n)
    }
}

/// `C = A · round(B)` for a constant `A` (`m × k`) and `B` given as `k` rows of `n` floats
/// (row stride `ldb`), writing `m` rows of `n` floats at `c` (row stride `ldc`): B is packed into
/// tiles in `scratch` ([`Bf16A::scratch_floats`]), split over the pool when the product is large.
/// C's rows are A's, so a conv's output channels come out as planes.
///
/// # Safety
/// AMX is available (a [`Bf16A`] exists); `b` addresses `k × n` floats through `ldb`; `c` holds
/// `m` rows of `ldc ≥ n` floats that nothing else touches during the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_a(
    a: &Bf16A,
    b: *const f32,
    ldb: usize,
    n: usize,
    c: *mut f32,
    ldc: usize,
    cx: &Cx,
    scratch: &mut [f32],
) {
    let (m, k, kp) = (a.m, a.k, a.kp);
    let panels = n.div_ceil(BLOCK);
    let words = &mut scratch[..tile_words(k, n)];
    let par = cx.threads > 1 && 2 * m * k * n >= 1 << 22;
    let (src, dst) = (SendPtr(b as *mut f32), SendPtr(words.as_mut_ptr()));
    let pack = |p: usize| {
        // SAFETY: each task packs its own panel of the scratch; B is as the caller vouches.
        unsafe {
            let panel = std::slice::from_raw_parts_mut(
                dst.get().add(p * BLOCK * kp / 2) as *mut u32,
                BLOCK * kp / 2,
            );
            pack_panel(src.get(), ldb, k, n, p, panel);
        }
    };
    if par {
        cx.par_for(panels, &pack);
    } else {
        (0..panels).for_each(pack);
    }
    let blocks = m.div_ceil(BLOCK);
    let tasks = if par { panels.min(cx.threads * 4) } else { 1 };
    let per = panels.div_ceil(tasks);
    let (ap, bp, cp) = (
        SendPtr(a.words.as_ptr() as *mut u16),
        SendPtr(dst.get() as *mut u16),
        SendPtr(c),
    );
    // panels outer (one panel of B in the nearest cache), A's row blocks inner
    let work = |task: usize| {
        let (p0, p1) = (task * per, ((task + 1) * per).min(panels));
        // SAFETY: tasks write disjoint column blocks of C; AMX is available.
        unsafe {
            amx::Tiles::with(|tiles| {
                for p in p0..p1 {
                    let (a, b, c) = (ap.get(), bp.get(), cp.get());
                    tiles.blocks(a, kp, m, 0..blocks, b, n, p..p + 1, c, ldc);
                }
            })
        };
    };
    if par {
        cx.par_for(tasks, &work);
    } else {
        work(0);
    }
}

/// Panel `p` (columns 32p..32p + 32) of the row-major `k × n` f32 matrix at `b` (row stride
/// `ldb`) as B tiles (the [`pack_tiles`] layout), zeros past `k` and `n`.
unsafe fn pack_panel(b: *const f32, ldb: usize, k: usize, n: usize, p: usize, out: &mut [u32]) {
    let j0 = p * BLOCK;
    let cols = BLOCK.min(n - j0);
    let mut even = [0f32; BLOCK];
    let mut odd = [0f32; BLOCK];
    for (c, chunk) in out.chunks_exact_mut(BLOCK * BLOCK / 2).enumerate() {
        let (left, right) = chunk.split_at_mut(256);
        for r in 0..16 {
            let (t0, t1) = (c * BLOCK + 2 * r, c * BLOCK + 2 * r + 1);
            let (lo, hi) = (
                &mut left[r * 16..r * 16 + 16],
                &mut right[r * 16..r * 16 + 16],
            );
            if cols == BLOCK && t1 < k {
                // whole rows in place: the common case, no copies
                let row = |t: usize| &*(b.add(t * ldb + j0) as *const [f32; BLOCK]);
                interleave(row(t0), row(t1), lo, hi);
                continue;
            }
            even.fill(0.0);
            odd.fill(0.0);
            if t0 < k {
                even[..cols]
                    .copy_from_slice(std::slice::from_raw_parts(b.add(t0 * ldb + j0), cols));
            }
            if t1 < k {
                odd[..cols].copy_from_slice(std::slice::from_raw_parts(b.add(t1 * ldb + j0), cols));
            }
            interleave(&even, &odd, lo, hi);
        }
    }
}

crate::simd_dispatch! {
    /// Tile rows of two k-rows' 32 columns: word j of `lo` (columns 0-15) and of `hi` (16-31)
    /// holds the even row's bf16 in its low half and the odd row's in its high half.
    fn interleave(even: &[f32; 32], odd: &[f32; 32], lo: &mut [u32], hi: &mut [u32]) {
        for j in 0..16 {
            lo[j] = to_bf16(even[j]) as u32 | (to_bf16(odd[j]) as u32) << 16;
            hi[j] = to_bf16(even[16 + j]) as u32 | (to_bf16(odd[16 + j]) as u32) << 16;
        }
    }
}

/// Rounds rows `i0..i0 + 32` of A (those below `m`) to bf16 into `dst` (32 rows of `kp`),
/// zeros past `k` and past `m`.
#[allow(clippy::too_many_arguments)]
unsafe fn round_rows(
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    m: usize,
    k: usize,
    i0: usize,
    dst: &mut [u16],
    kp: usize,
) {
    if a_rs == 1 && a_cs != 1 {
        // A stored column by column (im2col rows, NCHW pixels): read each column's 32 rows
        // together and scatter them across the block's rows.
        let rows = BLOCK.min(m.saturating_sub(i0));
        dst.fill(0);
        for t in 0..k {
            let col = std::slice::from_raw_parts(a.add(i0 + t * a_cs), rows);
            for (r, &v) in col.iter().enumerate() {
                dst[r * kp + t] = to_bf16(v);
            }
        }
        return;
    }
    for (r, row) in dst.chunks_exact_mut(kp).enumerate() {
        let i = i0 + r;
        if i >= m {
            row.fill(0);
            continue;
        }
        if a_cs == 1 {
            round_slice(
                std::slice::from_raw_parts(a.add(i * a_rs), k),
                &mut row[..k],
            );
        } else {
            for (t, v) in row[..k].iter_mut().enumerate() {
                *v = to_bf16(*a.add(i * a_rs + t * a_cs));
            }
        }
        row[k..].fill(0);
    }
}

crate::simd_dispatch! {
    /// `dst[i]` = `src[i]` rounded to bf16.
    pub(crate) fn round_slice(src: &[f32], dst: &mut [u16]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = to_bf16(*s);
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx {
    use super::BLOCK;
    use std::arch::asm;
    use std::sync::OnceLock;

    /// Whether the CPU has AMX tiles with bf16 and the kernel granted this process the tile
    /// state (Linux asks each process to request it, `ARCH_REQ_XCOMP_PERM`). Off when the
    /// kernel schedule is narrowed below AVX-512 (`ANEFORGE_CPU_KERNELS`).
    pub fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| crate::simd::has_avx512() && detect() && request())
    }

    fn detect() -> bool {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        // cpuid exists on every x86-64 CPU; leaf 7 is read only when the CPU has it.
        let max = __cpuid(0).eax;
        if max < 7 {
            return false;
        }
        let edx = __cpuid_count(7, 0).edx;
        const AMX_BF16: u32 = 1 << 22;
        const AMX_TILE: u32 = 1 << 24;
        edx & (AMX_BF16 | AMX_TILE) == AMX_BF16 | AMX_TILE
    }

    fn request() -> bool {
        const SYS_ARCH_PRCTL: usize = 158;
        const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
        const XFEATURE_XTILEDATA: usize = 18;
        let ret: isize;
        // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM) only changes which state the kernel saves for
        // this process; the syscall clobbers rcx and r11.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret == 0
    }

    /// Palette 1, all eight tiles 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    const CONFIG: Config = {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < 8 {
            c[16 + 2 * t] = 64;
            c[48 + t] = 16;
            t += 1;
        }
        Config(c)
    };

    /// The tile registers configured on this thread for the duration of [`Tiles::with`].
    pub struct Tiles {
        edge: [f32; BLOCK * BLOCK],
    }

    impl Tiles {
        /// Configures the tiles, runs `f`, and releases them (the thread's tile state returns
        /// to its initial, unsaved form).
        ///
        /// # Safety
        /// [`available`] returned true.
        pub unsafe fn with(f: impl FnOnce(&mut Tiles)) {
            asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
            let mut t = Tiles {
                edge: [0.0; BLOCK * BLOCK],
            };
            f(&mut t);
            asm!("tilerelease", options(nostack, nomem));
        }

        /// Row blocks `rows` (of A, 32 rows each, row stride `kp`) × panels `panels` (of B, 32
        /// columns each) of `C = A · B` for an `m × n` C at `c` (row stride `ldc`), row blocks
        /// outer.
        ///
        /// # Safety
        /// As [`Tiles::block`] for every block in the ranges.
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn blocks(
            &mut self,
            a: *const u16,
            kp: usize,
            m: usize,
            rows: std::ops::Range<usize>,
            b: *const u16,
            n: usize,
            panels: std::ops::Range<usize>,
            c: *mut f32,
            ldc: usize,
        ) {
            for blk in rows {
                for p in panels.clone() {
                    self.block(
                        a.add(blk * BLOCK * kp),
                        kp,
                        b.add(p * BLOCK * kp),
                        c.add(blk * BLOCK * ldc + p * BLOCK),
                        ldc,
                        BLOCK.min(m - blk * BLOCK),
                        BLOCK.min(n - p * BLOCK),
                    );
                }
            }
        }

        /// One 32 × 32 block of C: `rows` × `cols` of it stored at `c` (row stride `ldc`
        /// floats) from 32 rows of bf16 A at `a` (row stride `kp` elements) and one panel of B.
        ///
        /// # Safety
        /// `a` holds 32 rows of `kp` elements, `b` one panel of `kp / 2` tile rows, `c` the
        /// `rows × cols` corner of a row-major matrix.
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn block(
            &mut self,
            a: *const u16,
            kp: usize,
            b: *const u16,
            c: *mut f32,
            ldc: usize,
            rows: usize,
            cols: usize,
        ) {
            let a_stride = kp * 2;
            let a_low = a.add(16 * kp);
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for chunk in 0..kp / BLOCK {
                let (ap, al, bp) = (
                    a.add(chunk * 32),
                    a_low.add(chunk * 32),
                    b.add(chunk * 1024),
                );
                asm!(
                    "tileloadd tmm4, [{a} + {s}*1]",
                    "tileloadd tmm5, [{al} + {s}*1]",
                    "tileloadd tmm6, [{b} + {bs}*1]",
                    "tileloadd tmm7, [{b2} + {bs}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a = in(reg) ap,
                    al = in(reg) al,
                    s = in(reg) a_stride,
                    b = in(reg) bp,
                    b2 = in(reg) bp.add(512),
                    bs = in(reg) 64usize,
                    options(nostack, readonly)
                );
            }
            let full = rows == BLOCK && cols == BLOCK;
            let (dst, stride) = if full {
                (c, ldc * 4)
            } else {
                (self.edge.as_mut_ptr(), BLOCK * 4)
            };
            let lower = dst.byte_add(16 * stride);
            asm!(
                "tilestored [{c} + {s}*1], tmm0",
                "tilestored [{c2} + {s}*1], tmm1",
                "tilestored [{l} + {s}*1], tmm2",
                "tilestored [{l2} + {s}*1], tmm3",
                c = in(reg) dst,
                c2 = in(reg) dst.add(16),
                l = in(reg) lower,
                l2 = in(reg) lower.add(16),
                s = in(reg) stride,
                options(nostack)
            );
            if !full {
                for r in 0..rows {
                    std::ptr::copy_nonoverlapping(
                        self.edge.as_ptr().add(r * BLOCK),
                        c.add(r * ldc),
                        cols,
                    );
                }
            }
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod amx {
    /// AMX is used on x86-64 Linux only.
    pub fn available() -> bool {
        false
    }

    pub struct Tiles;

    impl Tiles {
        pub unsafe fn with(_: impl FnOnce(&mut Tiles)) {
            unreachable!("the tile layout is packed only where AMX is available")
        }

        #[allow(clippy::too_many_arguments)]
        pub unsafe fn blocks(
            &mut self,
            _: *const u16,
            _: usize,
            _: usize,
            _: std::ops::Range<usize>,
            _: *const u16,
            _: usize,
            _: std::ops::Range<usize>,
            _: *mut f32,
            _: usize,
        ) {
        }
    }
}

/// Whether bf16 products run on AMX tiles in this process.
pub fn uses_amx() -> bool {
    amx::available()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|t| round(a[i * k + t]) as f64 * round(b[t * n + j]) as f64)
                    .sum();
            }
        }
        c
    }

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: ties go up to the even one.
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 0x3f81);
        assert!(round(f32::NAN).is_nan());
        assert_eq!(round(f32::INFINITY), f32::INFINITY);
        assert_eq!(round(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn products_follow_the_definition_in_both_layouts() {
        for tiles in [false, true] {
            if tiles && !amx::available() {
                continue;
            }
            for &(m, k, n) in &[
                (1, 1, 1),
                (5, 7, 3),
                (32, 32, 32),
                (33, 65, 47),
                (70, 384, 100),
            ] {
                let (a, bm) = (values(m * k, 1), values(k * n, 2));
                let b = Bf16B::pack_for(tiles, k, n, |t, j| bm[t * n + j]);
                for t in 0..k {
                    for j in 0..n {
                        assert_eq!(b.at(t, j), round(bm[t * n + j]));
                    }
                }
                let want = reference(&a, &bm, m, k, n);
                let ldc = n + 3;
                let mut c = vec![f32::NAN; m * ldc];
                let mut scratch = vec![0f32; b.scratch_floats(m)];
                // SAFETY: a is m × k row-major, c holds m rows of ldc floats.
                crate::kernels::with_test_cx(1, |cx| unsafe {
                    gemm(
                        a.as_ptr(),
                        k,
                        1,
                        m,
                        &b,
                        c.as_mut_ptr(),
                        ldc,
                        cx,
                        &mut scratch,
                    )
                });
                for i in 0..m {
                    for j in 0..n {
                        let (got, w) = (c[i * ldc + j] as f64, want[i * n + j]);
                        let scale: f64 = (0..k)
                            .map(|t| (round(a[i * k + t]) * round(bm[t * n + j])).abs() as f64)
                            .sum();
                        assert!(
                            (got - w).abs() <= 1e-6 * scale.max(1e-30),
                            "tiles={tiles} {m}x{k}x{n} ({i},{j}): {got} vs {w}"
                        );
                    }
                    for j in n..ldc {
                        assert!(c[i * ldc + j].is_nan(), "wrote past column {n}");
                    }
                }
            }
        }
    }
}
