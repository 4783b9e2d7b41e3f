//! Winograd F(2×2, 3×3) conv on AVX-512 (groups 1, stride 1, dilation 1, any padding): 16
//! multiplications per 2×2 output tile and channel pair instead of 36.
//!
//! The constant weight is transformed once at compile time, `U = G·g·Gᵀ` per (cout, cin), and
//! packed per transform position k into 16-output-channel blocks `[16][ceil(cout/16)][cin][16]`.
//! Per image: the zero-padded input's 4×4 patches (stride 2) are transformed, `V = Bᵀ·d·B`, into
//! `[16][cin][tiles]` (16 tiles per vector); the 16 products `M_k = U_k · V_k` run on
//! `conv_direct`'s register tiles as 1×1 convs over the tiles, into `[16][blocks][tiles][16]`; and
//! `Y = Aᵀ·M·A` plus bias and relu is written to NCHW, cropped to the output size.

use super::conv::Geometry;
use super::conv_direct::{self, arch as tiles, Epilogue, Tile, IC_BLOCK, LANES, MAX_PIXELS};
use super::conv_epilogue::Act;
use super::Cx;
use crate::tensor::SendPtr;

/// Target bytes of transformed input and products per chunk of tile rows: whole ResNet-50
/// stages (up to 6.4 MB at 56×56×64) measured fast, a 112×112×64 image at once did not.
const CHUNK_BYTES: usize = 4 << 20;

/// Whether this conv runs here: with fewer than 32 channels in or out the transforms cost more
/// than they save (measured slower than `conv_direct` at 16 channels, 32×32).
pub fn applies(g: &Geometry, transpose: bool) -> bool {
    conv_direct::is_plain_3x3(g, transpose)
        && g.sh == 1
        && g.sw == 1
        && g.dh == 1
        && g.dw == 1
        && g.cin >= 32
        && g.cout >= 32
        && g.n * g.oh * g.ow >= MIN_PIXELS
}

/// Output pixels (over the batch) below which the transformed weight, 16/9 the size of the
/// plain one, costs more to stream than the saved multiplications gain: each weight element
/// then serves too few products (ResNet-18's last stages at 64×64 input, 4×4 and 2×2 pixels,
/// ran about 2.5× slower than on `conv_direct`).
const MIN_PIXELS: usize = 64;

/// `U = G·g·Gᵀ` of a MIL conv weight `[cout, cin, 3, 3]`, packed `[16][blocks][cin][16]`.
pub fn pack(w: &[f32], g: &Geometry) -> Vec<f32> {
    const G: [[f64; 3]; 4] = [
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];
    let blocks = g.cout.div_ceil(LANES);
    let mut out = vec![0.0f32; 16 * blocks * g.cin * LANES];
    for (f, filt) in w.chunks_exact(9).enumerate().take(g.cout * g.cin) {
        let (co, ci) = (f / g.cin, f % g.cin);
        let mut t = [[0.0f64; 3]; 4];
        for i in 0..4 {
            for c in 0..3 {
                t[i][c] = (0..3).map(|r| G[i][r] * filt[r * 3 + c] as f64).sum();
            }
        }
        for i in 0..4 {
            for j in 0..4 {
                let u: f64 = (0..3).map(|c| t[i][c] * G[j][c]).sum();
                let k = 4 * i + j;
                out[((k * blocks + co / LANES) * g.cin + ci) * LANES + co % LANES] = u as f32;
            }
        }
    }
    out
}

struct Dims {
    /// Output tiles down and across.
    th: usize,
    tw: usize,
    /// Padded input rows and row length (tile columns rounded up to 16, so every 16-tile
    /// group reads inside the row).
    hp: usize,
    wp: usize,
    /// Tile rows transformed and multiplied together.
    chunk_rows: usize,
}

fn dims(g: &Geometry) -> Dims {
    let (th, tw) = (g.oh.div_ceil(2), g.ow.div_ceil(2));
    let per_row = tw * (g.cin + g.cout.div_ceil(LANES) * LANES) * 16 * 4;
    Dims {
        th,
        tw,
        hp: 2 * th + 2,
        wp: 2 * tw.div_ceil(LANES) * LANES + 2,
        chunk_rows: (CHUNK_BYTES / per_row).clamp(1, th),
    }
}

pub fn scratch_floats(g: &Geometry) -> usize {
    let d = dims(g);
    let tiles = d.chunk_rows * d.tw;
    g.cin * d.hp * d.wp + 16 * g.cin * tiles + 16 * g.cout.div_ceil(LANES) * LANES * tiles
}

/// Runs the conv of every image of `x` into `out` (NCHW).
///
/// # Safety
/// AVX-512 available (`applies`); `x` holds n·cin·h·w floats, `out` n·cout·oh·ow, `u` is
/// `pack(..)` of this geometry, `scratch` holds `scratch_floats(g)` floats, a non-null
/// `epilogue.bias` cout floats.
pub unsafe fn run(
    x: *const f32,
    u: &[f32],
    out: *mut f32,
    g: &Geometry,
    epilogue: Epilogue,
    scratch: &mut [f32],
    cx: &Cx,
) {
    let d = dims(g);
    let blocks = g.cout.div_ceil(LANES);
    let (xpad, rest) = scratch.split_at_mut(g.cin * d.hp * d.wp);
    let (v, m) = rest.split_at_mut(16 * g.cin * d.chunk_rows * d.tw);
    let (xs, vs, ms) = (
        SendPtr(xpad.as_mut_ptr()),
        SendPtr(v.as_mut_ptr()),
        SendPtr(m.as_mut_ptr()),
    );
    let par = |n: usize| if cx.threads > 1 { n } else { 1 };
    for b in 0..g.n {
        conv_direct::pad_image(x.add(b * g.cin * g.h * g.w), xpad, (d.hp, d.wp), g, cx);
        let ob = SendPtr(out.add(b * g.cout * g.oh * g.ow));
        for ty0 in (0..d.th).step_by(d.chunk_rows) {
            let rows = ty0..(ty0 + d.chunk_rows).min(d.th);
            let tiles = rows.len() * d.tw;
            // input transform, per input channel
            let tasks = par(g.cin);
            let per = g.cin.div_ceil(tasks);
            cx.par_for(tasks, &|t| {
                for ci in t * per..((t + 1) * per).min(g.cin) {
                    // SAFETY: channel ci's padded plane and V entries are in bounds and disjoint
                    // between tasks.
                    unsafe {
                        arch::input_transform(xs.get(), vs.get(), ci, g.cin, &d, rows.clone())
                    };
                }
            });
            // the 16 products, per (transform position, block pair)
            let pairs = blocks.div_ceil(2);
            let col_tiles = tiles.div_ceil(MAX_PIXELS);
            let col_width = tiles.div_ceil(col_tiles);
            cx.par_for(16 * pairs, &|t| {
                let (k, pair) = (t / pairs, t % pairs);
                let blk0 = 2 * pair;
                let nb = (blocks - blk0).min(2);
                for ic0 in (0..g.cin).step_by(IC_BLOCK) {
                    let mut t0 = 0;
                    while t0 < tiles {
                        let p = (tiles - t0).min(col_width);
                        let f =
                            tiles::select(nb, 1, 1, p).expect("tile shapes cover 1..=14 pixels");
                        // SAFETY: offsets stay inside V, U and this task's part of M.
                        unsafe {
                            let mk = ms.get().add(((k * blocks + blk0) * tiles + t0) * LANES);
                            let tile = Tile {
                                x: vs.get().add((k * g.cin + ic0) * tiles + t0),
                                plane: tiles,
                                row: 0,
                                row_step: 0,
                                w: u.as_ptr().add(((k * blocks + blk0) * g.cin + ic0) * LANES),
                                w_block: g.cin * LANES,
                                channels: (g.cin - ic0).min(IC_BLOCK),
                                kh: 1,
                                kw: 1,
                                dh: 1,
                                dw: 1,
                                src: if ic0 == 0 { std::ptr::null() } else { mk },
                                bias: std::ptr::null(),
                                dst: mk,
                                block: tiles * LANES,
                                block_row: 0,
                                out: std::ptr::null_mut(),
                                out_channel: 0,
                                out_row: 0,
                                lanes: [LANES; 2],
                                act: Act::None,
                            };
                            f(&tile);
                        }
                        t0 += p;
                    }
                }
            });
            // output transform, per block
            let bias = SendPtr(epilogue.bias as *mut f32);
            cx.par_for(par(blocks), &|t| {
                let per = blocks.div_ceil(par(blocks));
                for blk in t * per..((t + 1) * per).min(blocks) {
                    // SAFETY: block blk's M entries and output channels are in bounds and disjoint
                    // between tasks; the bias holds cout floats.
                    unsafe {
                        arch::output_transform(
                            ms.get(),
                            ob.get(),
                            blk,
                            blocks,
                            g,
                            &d,
                            rows.clone(),
                            bias.get(),
                            epilogue.act == Act::Relu,
                        )
                    };
                }
            });
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod arch {
    use super::{Dims, Geometry, LANES};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// V[k][ci][tile] = (Bᵀ·d·B)[k] for every 4×4 patch d of channel ci in tile rows `rows`, 16
    /// tiles at a time.
    ///
    /// # Safety
    /// AVX-512F; `xpad` holds cin·hp·wp floats, `v` 16·cin·th·tw.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn input_transform(
        xpad: *const f32,
        v: *mut f32,
        ci: usize,
        cin: usize,
        d: &Dims,
        rows: Range<usize>,
    ) {
        let tiles = rows.len() * d.tw;
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let plane = xpad.add(ci * d.hp * d.wp);
        for ty in rows.clone() {
            for tx0 in (0..d.tw).step_by(LANES) {
                let mask = ((1u32 << (d.tw - tx0).min(LANES)) - 1) as __mmask16;
                // p[r][c]: patch element (r, c) of 16 consecutive tiles
                let mut p = [[_mm512_setzero_ps(); 4]; 4];
                for (r, pr) in p.iter_mut().enumerate() {
                    let row = plane.add((2 * ty + r) * d.wp + 2 * tx0);
                    let (a, b) = (_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16)));
                    let (a2, b2) = (_mm512_loadu_ps(row.add(2)), _mm512_loadu_ps(row.add(18)));
                    pr[0] = _mm512_permutex2var_ps(a, even, b);
                    pr[1] = _mm512_permutex2var_ps(a, odd, b);
                    pr[2] = _mm512_permutex2var_ps(a2, even, b2);
                    pr[3] = _mm512_permutex2var_ps(a2, odd, b2);
                }
                let mut t = [[_mm512_setzero_ps(); 4]; 4];
                for c in 0..4 {
                    t[0][c] = _mm512_sub_ps(p[0][c], p[2][c]);
                    t[1][c] = _mm512_add_ps(p[1][c], p[2][c]);
                    t[2][c] = _mm512_sub_ps(p[2][c], p[1][c]);
                    t[3][c] = _mm512_sub_ps(p[1][c], p[3][c]);
                }
                let at = (ty - rows.start) * d.tw + tx0;
                for (i, ti) in t.iter().enumerate() {
                    let vi = [
                        _mm512_sub_ps(ti[0], ti[2]),
                        _mm512_add_ps(ti[1], ti[2]),
                        _mm512_sub_ps(ti[2], ti[1]),
                        _mm512_sub_ps(ti[1], ti[3]),
                    ];
                    for (j, &vv) in vi.iter().enumerate() {
                        let k = 4 * i + j;
                        _mm512_mask_storeu_ps(v.add((k * cin + ci) * tiles + at), mask, vv);
                    }
                }
            }
        }
    }

    /// out[blk·16 + lane] = relu?(Aᵀ·M·A + bias) for every tile of tile rows `rows`, cropped to
    /// oh × ow.
    ///
    /// # Safety
    /// AVX-512F; `m` holds 16·blocks·tiles·16 floats, `out` cout·oh·ow, a non-null `bias` cout.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn output_transform(
        m: *const f32,
        out: *mut f32,
        blk: usize,
        blocks: usize,
        g: &Geometry,
        d: &Dims,
        rows: Range<usize>,
        bias: *const f32,
        relu: bool,
    ) {
        let tiles = rows.len() * d.tw;
        let lanes = (g.cout - blk * LANES).min(LANES);
        let lane_mask = ((1u32 << lanes) - 1) as __mmask16;
        let bv = if bias.is_null() {
            _mm512_setzero_ps()
        } else {
            _mm512_maskz_loadu_ps(lane_mask, bias.add(blk * LANES))
        };
        let zero = _mm512_setzero_ps();
        let ohw = g.oh * g.ow;
        let mut stage = [0.0f32; 4 * LANES];
        for t in 0..tiles {
            let (ty, tx) = (rows.start + t / d.tw, t % d.tw);
            let mk: [__m512; 16] = std::array::from_fn(|k| {
                _mm512_loadu_ps(m.add(((k * blocks + blk) * tiles + t) * LANES))
            });
            let mut a = [[zero; 4]; 2];
            for j in 0..4 {
                a[0][j] = _mm512_add_ps(_mm512_add_ps(mk[j], mk[4 + j]), mk[8 + j]);
                a[1][j] = _mm512_sub_ps(_mm512_sub_ps(mk[4 + j], mk[8 + j]), mk[12 + j]);
            }
            for (r, ar) in a.iter().enumerate() {
                let y0 = _mm512_add_ps(_mm512_add_ps(ar[0], ar[1]), ar[2]);
                let y1 = _mm512_sub_ps(_mm512_sub_ps(ar[1], ar[2]), ar[3]);
                for (c, y) in [y0, y1].into_iter().enumerate() {
                    let mut y = _mm512_add_ps(y, bv);
                    if relu {
                        y = _mm512_max_ps(y, zero);
                    }
                    _mm512_storeu_ps(stage.as_mut_ptr().add((2 * r + c) * LANES), y);
                }
            }
            for r in 0..2 {
                let oy = 2 * ty + r;
                if oy >= g.oh {
                    break;
                }
                for c in 0..2 {
                    let ox = 2 * tx + c;
                    if ox >= g.ow {
                        break;
                    }
                    let dst = out.add(blk * LANES * ohw + oy * g.ow + ox);
                    for lane in 0..lanes {
                        *dst.add(lane * ohw) = stage[(2 * r + c) * LANES + lane];
                    }
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod arch {
    use super::{Dims, Geometry};
    use std::ops::Range;

    /// Never called: `applies` is false off x86-64.
    pub unsafe fn input_transform(
        _xpad: *const f32,
        _v: *mut f32,
        _ci: usize,
        _cin: usize,
        _d: &Dims,
        _rows: Range<usize>,
    ) {
        unreachable!("the Winograd conv needs AVX-512")
    }

    /// Never called: `applies` is false off x86-64.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn output_transform(
        _m: *const f32,
        _out: *mut f32,
        _blk: usize,
        _blocks: usize,
        _g: &Geometry,
        _d: &Dims,
        _rows: Range<usize>,
        _bias: *const f32,
        _relu: bool,
    ) {
        unreachable!("the Winograd conv needs AVX-512")
    }
}
