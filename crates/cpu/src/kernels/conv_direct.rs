//! Direct 3×3 conv on AVX-512 (groups 1, width stride 1 or 2, any height stride, dilation and
//! padding), without im2col; also 7×7 over at most 4 input channels (the stem of ResNets, whose
//! im2col rows of 147 values cost more to write than the product to read).
//!
//! The constant weight is packed once at compile time into 16-output-channel blocks
//! `[ceil(cout/16)][cin][kh][kw][16]` (zero-filled past cout). A register tile holds NB blocks ×
//! (R output rows × P output columns) accumulators, each one zmm of 16 output channels; per input
//! channel and tap it loads NB weight vectors and broadcasts one input scalar per pixel. The input
//! image is first copied zero-padded into scratch so no tap needs a bounds check. Input channels
//! are walked in blocks of `IC_BLOCK` with all tiles of a row chunk inside each block, so a
//! block's weights (NB·IC_BLOCK·9 vectors) stay in L2 while the chunk's tiles reuse them; partial
//! sums between blocks live in a blocked scratch `[ceil(cout/16)][oh·ow][16]`, and the last block
//! adds bias, applies the activation and writes NCHW through 16×16 transposes. `conv_winograd` runs its
//! products on the same register tiles.

use super::conv::Geometry;
use super::conv_epilogue::Act;
use super::Cx;
use crate::tensor::SendPtr;

pub(super) const LANES: usize = 16;
/// Input channels per partial sum: 64 measured a few per cent faster than 16 (fewer round trips
/// of the partial sums; the weights stream from L2 without stalling).
pub(super) const IC_BLOCK: usize = 64;
/// Pixels per register tile: NB=2 blocks × 14 pixels = 28 accumulators of the 32 zmm registers.
pub(super) const MAX_PIXELS: usize = 14;
/// Target bytes of padded input rows plus partial sums per row chunk (L2 is 1 MiB on Zen 4).
const CHUNK_BYTES: usize = 384 << 10;

/// Whether this conv runs here (the im2col + GEMM path serves every other case). ResNet-18's
/// stem (3 → 64 channels, 7×7 stride 2, 32 × 32 outputs) took 0.155 ms here against 0.339 through
/// im2col and the gemm crate on one Xeon core.
pub fn applies(g: &Geometry, transpose: bool) -> bool {
    let stem = crate::simd::has_avx512()
        && !transpose
        && g.groups == 1
        && (g.kh, g.kw) == (7, 7)
        && g.cin <= 4;
    let taps = is_plain_3x3(g, transpose) || stem;
    taps && (g.sw == 1 || g.sw == 2) && g.cout >= LANES
}

/// An ungrouped, non-transposed 3×3 conv on an AVX-512 CPU: what both register-tiled kernels
/// (this one and `conv_winograd`) require.
pub(super) fn is_plain_3x3(g: &Geometry, transpose: bool) -> bool {
    crate::simd::has_avx512() && !transpose && g.groups == 1 && g.kh == 3 && g.kw == 3
}

/// Packs a MIL conv weight `[cout, cin, kh, kw]` into `[ceil(cout/16)][cin][kh][kw][16]`.
pub fn pack(w: &[f32], g: &Geometry) -> Vec<f32> {
    let kk = g.kh * g.kw;
    let mut out = vec![0.0f32; g.cout.div_ceil(LANES) * g.cin * kk * LANES];
    for (co, filt) in w.chunks_exact(g.cin * kk).enumerate().take(g.cout) {
        let (blk, lane) = (co / LANES, co % LANES);
        for (i, &v) in filt.iter().enumerate() {
            out[(blk * g.cin * kk + i) * LANES + lane] = v;
        }
    }
    out
}

/// Height and width of the zero-padded input copy: exactly the rows and columns the taps read.
fn padded(g: &Geometry) -> (usize, usize) {
    (
        (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1,
        (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1,
    )
}

fn partial_len(g: &Geometry) -> usize {
    if g.cin > IC_BLOCK {
        g.cout.div_ceil(LANES) * LANES * g.oh * g.ow
    } else {
        0
    }
}

pub fn scratch_floats(g: &Geometry) -> usize {
    let (hp, wp) = padded(g);
    g.cin * hp * wp + partial_len(g)
}

/// Copies one image `[cin, h, w]` into `[cin, hp, wp]` with the conv's top and left zero
/// padding, zeros past the input.
///
/// # Safety
/// `x` holds cin·h·w floats; `xpad` cin·hp·wp.
pub(super) unsafe fn pad_image(
    x: *const f32,
    xpad: &mut [f32],
    (hp, wp): (usize, usize),
    g: &Geometry,
    cx: &Cx,
) {
    let xp = SendPtr(x as *mut f32);
    let dp = SendPtr(xpad.as_mut_ptr());
    let tasks = if cx.threads > 1 && g.cin * hp * wp >= 1 << 16 {
        cx.threads * 2
    } else {
        1
    };
    let per = g.cin.div_ceil(tasks);
    cx.par_for(tasks, &|t| {
        for ci in t * per..((t + 1) * per).min(g.cin) {
            // SAFETY: planes `ci` of the input and of the padded copy are in bounds and
            // disjoint between tasks.
            let (src, dst) = unsafe {
                (
                    std::slice::from_raw_parts(xp.get().add(ci * g.h * g.w), g.h * g.w),
                    std::slice::from_raw_parts_mut(dp.get().add(ci * hp * wp), hp * wp),
                )
            };
            pad_rows(src, dst, 0, wp, g);
        }
    });
}

/// Rows `iy0..iy0 + dst.len() / wp` of one channel's zero-padded plane (rows of `wp` floats,
/// the input `src` of `g.h × g.w` at row `g.pt`, column `g.pl`) into `dst`.
pub(super) fn pad_rows(src: &[f32], dst: &mut [f32], iy0: usize, wp: usize, g: &Geometry) {
    let lo = g.pl.min(wp);
    let n = g.w.min(wp - lo);
    for (i, row) in dst.chunks_exact_mut(wp).enumerate() {
        match ((iy0 + i) as isize - g.pt as isize).try_into() {
            Ok(sy) if sy < g.h => {
                let sy: usize = sy;
                row[..lo].fill(0.0);
                row[lo..lo + n].copy_from_slice(&src[sy * g.w..sy * g.w + n]);
                row[lo + n..].fill(0.0);
            }
            _ => row.fill(0.0),
        }
    }
}

/// One register tile's operands. Strides are in floats.
// read only by the x86-64 kernels
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) struct Tile {
    /// Padded input at (first input channel of the block, first input row, first input column).
    pub(super) x: *const f32,
    pub(super) plane: usize,
    pub(super) row: usize,
    /// Between the tile's output rows, in the padded input.
    pub(super) row_step: usize,
    /// Packed weight at (first block, first input channel of the block, tap 0).
    pub(super) w: *const f32,
    pub(super) w_block: usize,
    pub(super) channels: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) dh: usize,
    pub(super) dw: usize,
    /// Partial sums to start from (blocked layout), or null to start from `bias`.
    pub(super) src: *const f32,
    /// NB·16 bias values, or null for zero; read only when `src` is null.
    pub(super) bias: *const f32,
    /// Partial sums to write (blocked layout), or null to write the result to `out`.
    pub(super) dst: *mut f32,
    pub(super) block: usize,
    pub(super) block_row: usize,
    /// NCHW output at (first channel of the first block, first output row and column).
    pub(super) out: *mut f32,
    pub(super) out_channel: usize,
    pub(super) out_row: usize,
    /// Output channels of each block that exist (16 except in the last block).
    pub(super) lanes: [usize; 2],
    pub(super) act: Act,
}

pub(super) type TileFn = unsafe fn(&Tile);

/// What the kernel applies before writing the output: `act(conv + bias)`.
#[derive(Clone, Copy)]
pub struct Epilogue {
    /// `cout` floats, or null.
    pub bias: *const f32,
    pub act: Act,
}

/// Runs the conv of every image of `x` into `out` (NCHW).
///
/// # Safety
/// AVX-512 available (`applies`); `x` holds n·cin·h·w floats, `out` n·cout·oh·ow, `w` is
/// `pack(..)` of this geometry, `scratch` holds `scratch_floats(g)` floats, a non-null
/// `epilogue.bias` cout floats.
pub unsafe fn run(
    x: *const f32,
    w: &[f32],
    out: *mut f32,
    g: &Geometry,
    epilogue: Epilogue,
    scratch: &mut [f32],
    cx: &Cx,
) {
    let (hp, wp) = padded(g);
    let (xpad, partial) = scratch.split_at_mut(g.cin * hp * wp);
    let ohw = g.oh * g.ow;
    let blocks = g.cout.div_ceil(LANES);
    let pairs = blocks.div_ceil(2);
    // output rows per tile when whole rows fit in one tile
    let rows_per_tile = if g.ow < MAX_PIXELS {
        (MAX_PIXELS / g.ow).min(arch::MAX_ROWS[g.ow])
    } else {
        1
    };
    // one tile over the whole output where such a tile is compiled: each weight vector is then
    // loaded once per image, not once per row
    let rows_per_tile = if g.oh < rows_per_tile && arch::select(2, g.sw, g.oh, g.ow).is_some() {
        g.oh
    } else {
        rows_per_tile
    };
    let per_row = 4 * (g.cin * g.sh * wp + if partial.is_empty() { 0 } else { g.cout * g.ow });
    // rows per chunk: what fits CHUNK_BYTES, but few enough that every thread gets a task
    // when the blocks alone are fewer than the threads (24 output channels are one pair)
    let fit = (CHUNK_BYTES / per_row.max(1)).max(1);
    let share = g.oh.div_ceil(cx.threads.div_ceil(pairs));
    let chunk_rows = fit.min(share).div_ceil(rows_per_tile) * rows_per_tile;
    let chunks = g.oh.div_ceil(chunk_rows);
    let tasks = chunks * pairs;
    let xs = SendPtr(xpad.as_mut_ptr());
    let ps = SendPtr(partial.as_mut_ptr());
    let bias = SendPtr(epilogue.bias as *mut f32);
    for b in 0..g.n {
        pad_image(x.add(b * g.cin * g.h * g.w), xpad, (hp, wp), g, cx);
        let ob = SendPtr(out.add(b * g.cout * ohw));
        let task = |t: usize| {
            let (chunk, pair) = (t / pairs, t % pairs);
            let rows = chunk * chunk_rows..((chunk + 1) * chunk_rows).min(g.oh);
            let blk0 = pair * 2;
            let nb = (blocks - blk0).min(2);
            let oc0 = blk0 * LANES;
            let lanes = [
                (g.cout - oc0).min(LANES),
                (g.cout - oc0).saturating_sub(LANES).min(LANES),
            ];
            let mut pair_bias = [0.0f32; 2 * LANES];
            if !bias.get().is_null() {
                // SAFETY: the bias holds cout floats.
                let src = unsafe { std::slice::from_raw_parts(bias.get(), g.cout) };
                let n = lanes[0] + lanes[1];
                pair_bias[..n].copy_from_slice(&src[oc0..oc0 + n]);
            }
            let chunk = Chunk {
                rows,
                blk0,
                nb,
                lanes,
                rows_per_tile,
                bias: if bias.get().is_null() {
                    std::ptr::null()
                } else {
                    pair_bias.as_ptr()
                },
                act: epilogue.act,
            };
            // SAFETY: every task writes only its own blocks × rows of `partial` and `out`.
            unsafe { run_chunk(xs.get(), w.as_ptr(), ps.get(), ob.get(), g, &chunk) };
        };
        cx.par_for(tasks, &task);
    }
}

struct Chunk {
    rows: std::ops::Range<usize>,
    blk0: usize,
    nb: usize,
    lanes: [usize; 2],
    rows_per_tile: usize,
    bias: *const f32,
    act: Act,
}

/// Every input-channel block over every tile of output rows `c.rows` × blocks
/// `c.blk0..c.blk0+c.nb`.
unsafe fn run_chunk(
    xpad: *const f32,
    w: *const f32,
    partial: *mut f32,
    out: *mut f32,
    g: &Geometry,
    c: &Chunk,
) {
    let (hp, wp) = padded(g);
    let kk = g.kh * g.kw;
    let ohw = g.oh * g.ow;
    let ic_blocks = g.cin.div_ceil(IC_BLOCK);
    // column tiles of a row: 8 wide where 8 divides a row too wide for one tile, so each
    // transposed row of a tile is one store within a cache line (14-wide tiles' stores straddle
    // lines; 8-wide ones ran a 3 → 32-channel stride-2 conv of 224 × 224 images 1.25× faster);
    // else as even as possible, at most MAX_PIXELS wide
    let col_width = if g.ow > MAX_PIXELS && g.ow.is_multiple_of(8) {
        8
    } else {
        g.ow.div_ceil(g.ow.div_ceil(MAX_PIXELS))
    };
    for icb in 0..ic_blocks {
        let ic0 = icb * IC_BLOCK;
        let channels = (g.cin - ic0).min(IC_BLOCK);
        let last = icb + 1 == ic_blocks;
        let mut oy = c.rows.start;
        while oy < c.rows.end {
            let r = if c.rows.end - oy >= c.rows_per_tile {
                c.rows_per_tile
            } else {
                1
            };
            let mut ox = 0;
            while ox < g.ow {
                let p = (g.ow - ox).min(col_width);
                let f = arch::select(c.nb, g.sw, r, p).expect("tile shapes cover every width");
                let at = (c.blk0 * ohw + oy * g.ow + ox) * LANES;
                let tile = Tile {
                    x: xpad.add(ic0 * hp * wp + oy * g.sh * wp + ox * g.sw),
                    plane: hp * wp,
                    row: wp,
                    row_step: g.sh * wp,
                    w: w.add((c.blk0 * g.cin + ic0) * kk * LANES),
                    w_block: g.cin * kk * LANES,
                    channels,
                    kh: g.kh,
                    kw: g.kw,
                    dh: g.dh,
                    dw: g.dw,
                    src: if icb == 0 {
                        std::ptr::null()
                    } else {
                        partial.add(at)
                    },
                    bias: c.bias,
                    dst: if last {
                        std::ptr::null_mut()
                    } else {
                        partial.add(at)
                    },
                    block: ohw * LANES,
                    block_row: g.ow * LANES,
                    out: out.add(c.blk0 * LANES * ohw + oy * g.ow + ox),
                    out_channel: ohw,
                    out_row: g.ow,
                    lanes: c.lanes,
                    act: c.act,
                };
                f(&tile);
                ox += p;
            }
            oy += r;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod arch {
    use super::{Act, Tile, TileFn, LANES, MAX_PIXELS};
    use std::arch::x86_64::*;

    /// Rows per tile compiled for each output width below `MAX_PIXELS` (index = width).
    pub const MAX_ROWS: [usize; 14] = [1, 14, 7, 4, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1];
    /// How far ahead (in floats: eight input channels of 3×3 taps) each block's weight stream
    /// is prefetched. Over few pixels a weight vector serves only a few FMAs and the streams
    /// come from L3 or memory (512 → 512 channels over 2 × 2 pixels: 9.4 MB a conv); the
    /// prefetch took that conv from 0.415 to 0.39 ms on one Xeon core.
    const PF: usize = 8 * 9 * LANES;

    #[target_feature(enable = "avx512f")]
    unsafe fn tile<const NB: usize, const S: usize, const R: usize, const P: usize>(t: &Tile) {
        let mut acc = [[[_mm512_setzero_ps(); P]; R]; NB];
        if !t.src.is_null() {
            for b in 0..NB {
                for r in 0..R {
                    for p in 0..P {
                        acc[b][r][p] =
                            _mm512_loadu_ps(t.src.add(b * t.block + r * t.block_row + p * LANES));
                    }
                }
            }
        } else if !t.bias.is_null() {
            for b in 0..NB {
                let v = _mm512_loadu_ps(t.bias.add(b * LANES));
                for r in 0..R {
                    for p in 0..P {
                        acc[b][r][p] = v;
                    }
                }
            }
        }
        let kk = t.kh * t.kw;
        for ic in 0..t.channels {
            let xc = t.x.add(ic * t.plane);
            let wc = t.w.add(ic * kk * LANES);
            for ki in 0..t.kh {
                let xr = xc.add(ki * t.dh * t.row);
                for kj in 0..t.kw {
                    let xk = xr.add(kj * t.dw);
                    let wk = wc.add((ki * t.kw + kj) * LANES);
                    for b in 0..NB {
                        _mm_prefetch::<_MM_HINT_T0>(
                            wk.wrapping_add(b * t.w_block + PF) as *const i8
                        );
                    }
                    let wv: [__m512; NB] =
                        std::array::from_fn(|b| _mm512_loadu_ps(wk.add(b * t.w_block)));
                    for r in 0..R {
                        let xrow = xk.add(r * t.row_step);
                        for p in 0..P {
                            let xb = _mm512_set1_ps(*xrow.add(p * S));
                            for b in 0..NB {
                                acc[b][r][p] = _mm512_fmadd_ps(wv[b], xb, acc[b][r][p]);
                            }
                        }
                    }
                }
            }
        }
        // stores only through fully unrolled loops, so `acc` stays in registers
        let mut stage = std::mem::MaybeUninit::<[f32; 2 * MAX_PIXELS * LANES]>::uninit();
        let (dst, block, block_row) = if t.dst.is_null() {
            (stage.as_mut_ptr() as *mut f32, R * P * LANES, P * LANES)
        } else {
            (t.dst, t.block, t.block_row)
        };
        for b in 0..NB {
            for r in 0..R {
                for p in 0..P {
                    _mm512_storeu_ps(dst.add(b * block + r * block_row + p * LANES), acc[b][r][p]);
                }
            }
        }
        if t.dst.is_null() {
            write_out(stage.as_ptr() as *const f32, NB, R, P, t);
        }
    }

    /// Writes a staged tile `[nb][r][p][16 channels]` to NCHW through the tile's activation.
    ///
    /// # Safety
    /// `stage` holds the tile's nb·rows·pixels·16 floats.
    #[inline(never)]
    #[target_feature(enable = "avx512f")]
    unsafe fn write_out(stage: *const f32, nb: usize, rows: usize, pixels: usize, t: &Tile) {
        let zero = _mm512_setzero_ps();
        let mask = ((1u32 << pixels) - 1) as __mmask16;
        let act = t.act;
        for b in 0..nb {
            for r in 0..rows {
                let mut m = [zero; 16];
                for (p, v) in m.iter_mut().enumerate().take(pixels) {
                    let a = _mm512_loadu_ps(stage.add(((b * rows + r) * pixels + p) * LANES));
                    *v = match act {
                        Act::None => a,
                        // `v.max(0.0)`: a NaN lane gives the second operand, 0
                        Act::Relu => _mm512_max_ps(a, zero),
                        _ => {
                            let mut lanes = [0f32; LANES];
                            _mm512_storeu_ps(lanes.as_mut_ptr(), a);
                            for l in &mut lanes {
                                *l = act.apply(*l);
                            }
                            _mm512_loadu_ps(lanes.as_ptr())
                        }
                    };
                }
                // pixels × channels → channels × pixels
                transpose16(&mut m);
                let dst = t.out.add(b * LANES * t.out_channel + r * t.out_row);
                for (lane, v) in m.iter().enumerate().take(t.lanes[b]) {
                    _mm512_mask_storeu_ps(dst.add(lane * t.out_channel), mask, *v);
                }
            }
        }
    }

    /// Transposes a 16×16 matrix held as 16 rows.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(in crate::kernels) fn transpose16(m: &mut [__m512; 16]) {
        let mut t = [_mm512_setzero_ps(); 16];
        for k in 0..8 {
            t[2 * k] = _mm512_unpacklo_ps(m[2 * k], m[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_ps(m[2 * k], m[2 * k + 1]);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for k in 0..4 {
            let (a, b, c, d) = (
                _mm512_castps_pd(t[4 * k]),
                _mm512_castps_pd(t[4 * k + 1]),
                _mm512_castps_pd(t[4 * k + 2]),
                _mm512_castps_pd(t[4 * k + 3]),
            );
            u[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            u[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            u[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            u[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        // u[4k + j] holds, in 128-bit lane l, column 4l + j of rows 4k..4k+4
        for j in 0..4 {
            let x0 = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
            let x1 = _mm512_shuffle_f32x4::<0xDD>(u[j], u[4 + j]);
            let y0 = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
            let y1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + j], u[12 + j]);
            m[j] = _mm512_shuffle_f32x4::<0x88>(x0, y0);
            m[8 + j] = _mm512_shuffle_f32x4::<0xDD>(x0, y0);
            m[4 + j] = _mm512_shuffle_f32x4::<0x88>(x1, y1);
            m[12 + j] = _mm512_shuffle_f32x4::<0xDD>(x1, y1);
        }
    }

    macro_rules! select {
        ($(($r:literal, $p:literal)),* $(,)?) => {
            /// The tile kernel for `nb` blocks, width stride `s`, `r` rows × `p` columns.
            pub fn select(nb: usize, s: usize, r: usize, p: usize) -> Option<TileFn> {
                Some(match (nb, s, r, p) {
                    $(
                        (1, 1, $r, $p) => tile::<1, 1, $r, $p>,
                        (2, 1, $r, $p) => tile::<2, 1, $r, $p>,
                        (1, 2, $r, $p) => tile::<1, 2, $r, $p>,
                        (2, 2, $r, $p) => tile::<2, 2, $r, $p>,
                    )*
                    _ => return None,
                })
            }
        };
    }

    select!(
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (1, 6),
        (1, 7),
        (1, 8),
        (1, 9),
        (1, 10),
        (1, 11),
        (1, 12),
        (1, 13),
        (1, 14),
        (14, 1),
        (7, 2),
        (4, 3),
        (3, 4),
        (2, 5),
        (2, 6),
        (2, 7),
        (2, 2),
    );
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) mod arch {
    use super::TileFn;

    pub const MAX_ROWS: [usize; 14] = [1; 14];

    /// Never called: `applies` is false off x86-64.
    pub fn select(_nb: usize, _s: usize, _r: usize, _p: usize) -> Option<TileFn> {
        None
    }
}
