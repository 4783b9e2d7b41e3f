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
    /// Padded input row length (tile columns rounded up to 16, so every 16-tile group reads
    /// inside the row).
    wp: usize,
    /// Tile rows transformed and multiplied together.
    chunk_rows: usize,
}

impl Dims {
    /// Padded input rows a chunk of tile rows reads: two per tile row and the 2-row overlap.
    fn band_rows(&self) -> usize {
        2 * self.chunk_rows + 2
    }
}

fn dims(g: &Geometry) -> Dims {
    let (th, tw) = (g.oh.div_ceil(2), g.ow.div_ceil(2));
    let per_row = tw * (g.cin + g.cout.div_ceil(LANES) * LANES) * 16 * 4;
    Dims {
        th,
        tw,
        wp: 2 * tw.div_ceil(LANES) * LANES + 2,
        chunk_rows: (CHUNK_BYTES / per_row).clamp(1, th),
    }
}

/// Tasks an image is cut into, one per thread: bands of tile rows, or with few tiles ranges of
/// output-channel blocks (each task then transforms the whole input, 1/cout of the products'
/// work, instead of every task streaming the whole transformed weight for a few tiles).
fn tasks(g: &Geometry, d: &Dims, threads: usize) -> Split {
    let blocks = g.cout.div_ceil(LANES);
    if d.th * d.tw < FEW_TILES && blocks > 1 {
        Split::Blocks(threads.clamp(1, blocks))
    } else {
        Split::Rows(threads.clamp(1, d.th))
    }
}

/// Floats added between consecutive transform positions' planes of V and M. Unskewed, the
/// planes of a power-of-two geometry (64 channels × 64 tiles: 16 KiB) start at one L1 set, and
/// the input transform's 16 stores per tile group, like the output transform's 16 loads per
/// tile, all compete for its 12 ways.
const SKEW: usize = LANES;

/// Floats of V (`[16][cin][tiles]`) and of M (`[16][blocks][tiles][16]`) for `tiles` tiles, each
/// plane followed by `SKEW` unused floats.
fn v_floats(g: &Geometry, tiles: usize) -> usize {
    16 * (g.cin * tiles + SKEW)
}

fn m_floats(g: &Geometry, tiles: usize) -> usize {
    16 * (g.cout.div_ceil(LANES) * LANES * tiles + SKEW)
}

/// Tiles per image below which threads split the output channels (ResNet-18's 8×8 stage at
/// 64×64 input, 16 tiles, ran 1.3x slower on 2 threads than on 1 when split by tile rows).
const FEW_TILES: usize = 64;

#[derive(Clone, Copy)]
enum Split {
    Rows(usize),
    Blocks(usize),
}

impl Split {
    fn count(self) -> usize {
        match self {
            Split::Rows(n) | Split::Blocks(n) => n,
        }
    }
}

/// Scratch of one task: a chunk's padded input band, its transformed input V and products M.
fn task_floats(g: &Geometry, d: &Dims) -> usize {
    let tiles = d.chunk_rows * d.tw;
    g.cin * d.band_rows() * d.wp + v_floats(g, tiles) + m_floats(g, tiles)
}

pub fn scratch_floats(g: &Geometry, threads: usize) -> usize {
    let d = dims(g);
    tasks(g, &d, threads).count() * task_floats(g, &d)
}

/// Runs the conv of every image of `x` into `out` (NCHW). Each thread takes its part of an image
/// ([`tasks`]: a band of tile rows, or a range of output-channel blocks) through every step
/// (padding, input transform, the 16 products, output transform) in its own scratch: a step never
/// waits for the others or reads what another core wrote, which on small images cost more than
/// the step itself.
///
/// # Safety
/// AVX-512 available (`applies`); `x` holds n·cin·h·w floats, `out` n·cout·oh·ow, `u` is
/// `pack(..)` of this geometry, `scratch` holds `scratch_floats(g, cx.threads)` floats, a
/// non-null `epilogue.bias` cout floats.
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
    let split = tasks(g, &d, cx.threads);
    let per_task = task_floats(g, &d);
    assert!(
        split.count() * per_task <= scratch.len(),
        "Winograd scratch sized for fewer threads"
    );
    let blocks = g.cout.div_ceil(LANES);
    let sp = SendPtr(scratch.as_mut_ptr());
    let (bias, act) = (SendPtr(epilogue.bias as *mut f32), epilogue.act);
    for b in 0..g.n {
        let xb = SendPtr(x.add(b * g.cin * g.h * g.w) as *mut f32);
        let ob = SendPtr(out.add(b * g.cout * g.oh * g.ow));
        cx.par_for(split.count(), &|t| {
            // SAFETY: each task's scratch is its own; the input image holds cin·h·w floats.
            let (buf, image) = unsafe {
                (
                    std::slice::from_raw_parts_mut(sp.get().add(t * per_task), per_task),
                    std::slice::from_raw_parts(xb.get() as *const f32, g.cin * g.h * g.w),
                )
            };
            let band = d.band_rows() * d.wp;
            let (xband, rest) = buf.split_at_mut(g.cin * band);
            let (v, m) = rest.split_at_mut(v_floats(g, d.chunk_rows * d.tw));
            let part = |n: usize, of: usize| {
                let per = of.div_ceil(n);
                (t * per).min(of)..((t + 1) * per).min(of)
            };
            let (tile_rows, blks) = match split {
                Split::Rows(n) => (part(n, d.th), 0..blocks),
                Split::Blocks(n) => (0..d.th, part(n, blocks)),
            };
            if blks.is_empty() {
                return;
            }
            for ty0 in tile_rows.clone().step_by(d.chunk_rows) {
                let rows = ty0..(ty0 + d.chunk_rows).min(tile_rows.end);
                let used = (2 * rows.len() + 2) * d.wp;
                for (ci, plane) in xband.chunks_exact_mut(band).enumerate() {
                    let src = &image[ci * g.h * g.w..][..g.h * g.w];
                    conv_direct::pad_rows(src, &mut plane[..used], 2 * ty0, d.wp, g);
                }
                // SAFETY: the band, V and M are sized for a chunk of this geometry; the outputs
                // of tile rows `rows` and blocks `blks` belong to this task alone.
                unsafe {
                    let epilogue = Epilogue {
                        bias: bias.get(),
                        act,
                    };
                    chunk(
                        xband,
                        u,
                        v,
                        m,
                        ob.get(),
                        g,
                        &d,
                        rows,
                        blks.clone(),
                        epilogue,
                    );
                }
            }
        });
    }
}

/// Tile rows `rows` of one image from their padded input band `xband`: V, the 16 products into
/// M, and the output transform into `out`, for output-channel blocks `blks`.
///
/// # Safety
/// As [`run`]; `xband`, `v` and `m` are one task's scratch for a chunk of `d`.
#[allow(clippy::too_many_arguments)]
unsafe fn chunk(
    xband: &[f32],
    u: &[f32],
    v: &mut [f32],
    m: &mut [f32],
    out: *mut f32,
    g: &Geometry,
    d: &Dims,
    rows: std::ops::Range<usize>,
    blks: std::ops::Range<usize>,
    epilogue: Epilogue,
) {
    let blocks = g.cout.div_ceil(LANES);
    let tiles = rows.len() * d.tw;
    // plane strides of V and M
    let (vk, mk) = (g.cin * tiles + SKEW, blocks * tiles * LANES + SKEW);
    for ci in 0..g.cin {
        arch::input_transform(xband.as_ptr(), v.as_mut_ptr(), vk, ci, d, rows.clone());
    }
    // the 16 products, per (transform position, block pair), as 1×1 convs over the tiles
    let col_width = tiles.div_ceil(tiles.div_ceil(MAX_PIXELS));
    for k in 0..16 {
        for blk0 in blks.clone().step_by(2) {
            let nb = (blks.end - blk0).min(2);
            for ic0 in (0..g.cin).step_by(IC_BLOCK) {
                let mut t0 = 0;
                while t0 < tiles {
                    let p = (tiles - t0).min(col_width);
                    let f = tiles::select(nb, 1, 1, p).expect("tile shapes cover 1..=14 pixels");
                    let mt = m.as_mut_ptr().add(k * mk + (blk0 * tiles + t0) * LANES);
                    let tile = Tile {
                        x: v.as_ptr().add(k * vk + ic0 * tiles + t0),
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
                        src: if ic0 == 0 { std::ptr::null() } else { mt },
                        bias: std::ptr::null(),
                        dst: mt,
                        block: tiles * LANES,
                        block_row: 0,
                        out: std::ptr::null_mut(),
                        out_channel: 0,
                        out_row: 0,
                        lanes: [LANES; 2],
                        act: Act::None,
                    };
                    f(&tile);
                    t0 += p;
                }
            }
        }
    }
    for blk in blks {
        arch::output_transform(
            m.as_ptr(),
            mk,
            out,
            blk,
            g,
            d,
            rows.clone(),
            epilogue.bias,
            epilogue.act == Act::Relu,
        );
    }
}

#[cfg(target_arch = "x86_64")]
mod arch {
    use super::{Dims, Geometry, LANES};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// V[k][ci][tile] = (Bᵀ·d·B)[k] for every 4×4 patch d of channel ci in tile rows `rows`, 16
    /// tiles at a time; plane k starts at `k·vk`.
    ///
    /// # Safety
    /// AVX-512F; `xpad` holds cin planes of `d.band_rows()` padded rows from tile row
    /// `rows.start` on, `v` 16 planes of cin·rows.len()·tw floats `vk` apart.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn input_transform(
        xpad: *const f32,
        v: *mut f32,
        vk: usize,
        ci: usize,
        d: &Dims,
        rows: Range<usize>,
    ) {
        let tiles = rows.len() * d.tw;
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let plane = xpad.add(ci * d.band_rows() * d.wp);
        for ty in rows.clone() {
            for tx0 in (0..d.tw).step_by(LANES) {
                let mask = ((1u32 << (d.tw - tx0).min(LANES)) - 1) as __mmask16;
                // p[r][c]: patch element (r, c) of 16 consecutive tiles
                let mut p = [[_mm512_setzero_ps(); 4]; 4];
                for (r, pr) in p.iter_mut().enumerate() {
                    let row = plane.add((2 * (ty - rows.start) + r) * d.wp + 2 * tx0);
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
                        _mm512_mask_storeu_ps(v.add(k * vk + ci * tiles + at), mask, vv);
                    }
                }
            }
        }
    }

    /// out[blk·16 + lane] = relu?(Aᵀ·M·A + bias) for every tile of tile rows `rows`, cropped to
    /// oh × ow.
    ///
    /// # Safety
    /// AVX-512F; `m` holds 16 planes of blocks·tiles·16 floats `mk` apart, `out` cout·oh·ow, a
    /// non-null `bias` cout.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn output_transform(
        m: *const f32,
        mk: usize,
        out: *mut f32,
        blk: usize,
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
            let mk: [__m512; 16] =
                std::array::from_fn(|k| _mm512_loadu_ps(m.add(k * mk + (blk * tiles + t) * LANES)));
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
        _vk: usize,
        _ci: usize,
        _d: &Dims,
        _rows: Range<usize>,
    ) {
        unreachable!("the Winograd conv needs AVX-512")
    }

    /// Never called: `applies` is false off x86-64.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn output_transform(
        _m: *const f32,
        _mk: usize,
        _out: *mut f32,
        _blk: usize,
        _g: &Geometry,
        _d: &Dims,
        _rows: Range<usize>,
        _bias: *const f32,
        _relu: bool,
    ) {
        unreachable!("the Winograd conv needs AVX-512")
    }
}
