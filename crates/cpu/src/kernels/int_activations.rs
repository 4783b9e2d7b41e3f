//! Few-row products against block-quantized weights with integer activations
//! ([`crate::Activations::Int8`], llama.cpp's scheme for its quantized dot products, and
//! [`crate::Activations::Int16`]): each activation row is quantized per 32 columns to
//! `x ≈ s_x·q_x`, `s_x = max|x| / qmax`, `q_x = round_half_even(x / s_x)` (f32 arithmetic), and
//! each 32-column chunk `c` of weight row `j` contributes
//! `s_w·s_x·(Σ q_w·q_x − o_w·Σ q_x)` with the integer sum exact (AVX-512 VNNI `vpdpbusd`).
//!
//! 8-bit activations have `qmax = 127`. 15-bit ones have `qmax = 127·128` and are kept as two
//! byte planes, `q_x = 128·h + l` with `h = ⌊(q_x + 64) / 128⌋ ∈ [−127, 127]` and
//! `l ∈ [−64, 63]`; a lane's sum is `(Σ u·h)·128 + Σ u·l`, one more `vpdpbusd` and a shift. A
//! `vpdpbusd` lane sums four products of at most 255·127, so that sum stays below 2²⁴ and its
//! conversion to f32 is exact.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, so signed weights are biased to unsigned
//! (`u = q_w + 8` for int4, `+ 128` for int8) and the bias joins the offset:
//! `Σ q_w·q_x − o_w·Σ q_x = Σ u·q_x − (bias + o_w)·Σ q_x`.
//!
//! Weights in blocks of 16 (GGUF's Q2_K, Q3_K and Q6_K) keep the activation chunks of 32: a
//! chunk meets two weight blocks, each `vpdpbusd` lane lies inside one of them (4 bytes of one
//! 16-column half), so each lane is scaled by its own block's `s_w`, and the offset term uses
//! `s_x·Σ q_x` per 16 columns.
//!
//! A chunk holding a NaN or infinity gets a NaN scale, so the products it feeds are NaN.
//!
//! Runs only for weights compiled with integer activations, block sizes that are multiples of
//! 32 or exactly 16 (with whole 32-column chunks), on CPUs with AVX-512 VNNI; everything else
//! takes the f32-activation GEMV.

// Only the x86-64 VNNI kernels use the layout and row views; other targets keep the f32 path.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use super::quant_blocks::{ParamSlice, QFormat, QuantTensor, GEMV_MAX_ROWS};
use crate::Activations;

const CHUNK: usize = 32;
/// The one block size under a chunk the kernels take: a chunk holds two such blocks.
const HALF: usize = 16;
/// Bytes of weight data requested ahead of use.
const PREFETCH: usize = 4096;

/// Whether [`gemv_row`] runs for `q` on this machine.
pub fn applies(q: &QuantTensor) -> bool {
    q.activations != Activations::F32
        && q.format.bits() <= 8
        && (q.block.is_multiple_of(CHUNK) || (q.block == HALF && q.cols.is_multiple_of(CHUNK)))
        && vnni()
}

fn vnni() -> bool {
    crate::simd::has_avx512_vnni()
}

/// Floats of one prepared activation row for `q`: the quantized bytes (one plane of `k` bytes
/// per 8 bits, the high plane first), per chunk pair the two scales spread over 8 lanes each,
/// per chunk the scale and `s_x·Σ q_x`, per 16 columns `s_x·Σ q_x`.
pub fn row_floats(q: &QuantTensor) -> usize {
    let k = q.cols;
    let chunks = k / CHUNK;
    q.activations.planes() * k / 4 + chunks / 2 * 16 + 4 * chunks
}

/// `qmax` of the activations of `planes` byte planes.
fn qmax(planes: usize) -> f32 {
    if planes == 2 {
        127.0 * 128.0
    } else {
        127.0
    }
}

struct Layout {
    chunks: usize,
    pairs: usize,
    planes: usize,
}

impl Layout {
    fn of(k: usize, planes: usize) -> Layout {
        let chunks = k / CHUNK;
        Layout {
            chunks,
            pairs: chunks / 2,
            planes,
        }
    }
    fn spread(&self, k: usize) -> usize {
        self.planes * k / 4
    }
    fn scales(&self, k: usize) -> usize {
        self.spread(k) + self.pairs * 16
    }
    fn sums(&self, k: usize) -> usize {
        self.scales(k) + self.chunks
    }
    fn half_sums(&self, k: usize) -> usize {
        self.sums(k) + self.chunks
    }
}

/// Quantizes `x[..cols]` into `out[..row_floats(q)]`. 4-bit weights get each chunk as its 16
/// even then 16 odd columns (the low and high nibbles of a byte).
pub fn prepare(x: &[f32], q: &QuantTensor, out: &mut [f32]) {
    let k = q.cols;
    let planes = q.activations.planes();
    let l = Layout::of(k, planes);
    let (qbytes, rest) = out.split_at_mut(l.spread(k));
    let qbytes: &mut [i8] = bytemuck::cast_slice_mut(qbytes);
    let (high, low) = qbytes.split_at_mut(k);
    let (spread, rest) = rest.split_at_mut(l.pairs * 16);
    let (scales, rest) = rest.split_at_mut(l.chunks);
    let (sums, rest) = rest.split_at_mut(l.chunks);
    let half_sums = &mut rest[..2 * l.chunks];
    let four = q.format.bits() == 4;
    #[cfg(target_arch = "x86_64")]
    if vnni() {
        for (c, src) in x[..k].chunks_exact(CHUNK).enumerate() {
            let at = c * CHUNK..(c + 1) * CHUNK;
            let low = (planes == 2).then(|| &mut low[at.clone()]);
            // SAFETY: AVX-512 was detected; `src` holds 32 floats and each plane 32 bytes.
            let (s, lo, hi) = unsafe { quantize_chunk_avx512(src, &mut high[at], low, four) };
            scales[c] = s;
            sums[c] = s * (lo + hi) as f32;
            half_sums[2 * c] = s * lo as f32;
            half_sums[2 * c + 1] = s * hi as f32;
        }
        spread_scales(scales, spread);
        return;
    }
    for (c, src) in x[..k].chunks_exact(CHUNK).enumerate() {
        let amax = src.iter().fold(0.0f32, |a, v| {
            if v.is_nan() || a.is_nan() {
                f32::NAN
            } else {
                a.max(v.abs())
            }
        });
        let s = if amax.is_finite() {
            amax / qmax(planes)
        } else {
            f32::NAN
        };
        let mut halves = [0i32; 2];
        for (i, v) in src.iter().enumerate() {
            let qv = if s.is_finite() && s > 0.0 {
                (v / s).round_ties_even() as i32
            } else {
                0
            };
            halves[i / HALF] += qv;
            let at = c * CHUNK + if four { i / 2 + (i % 2) * 16 } else { i };
            if planes == 2 {
                let h = (qv + 64) >> 7;
                high[at] = h as i8;
                low[at] = (qv - 128 * h) as i8;
            } else {
                high[at] = qv as i8;
            }
        }
        scales[c] = s;
        sums[c] = s * (halves[0] + halves[1]) as f32;
        half_sums[2 * c] = s * halves[0] as f32;
        half_sums[2 * c + 1] = s * halves[1] as f32;
    }
    spread_scales(scales, spread);
}

fn spread_scales(scales: &[f32], spread: &mut [f32]) {
    for (p, lanes) in spread.chunks_exact_mut(16).enumerate() {
        lanes[..8].fill(scales[2 * p]);
        lanes[8..].fill(scales[2 * p + 1]);
    }
}

/// One chunk of [`prepare`] into its high plane and, for 15-bit activations, its low plane:
/// its scale and `Σ q` over its first and its last 16 columns. `f32::round_ties_even` is a libm
/// call without SSE4.1 in the baseline target, so the vector form rounds with the instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn quantize_chunk_avx512(
    src: &[f32],
    high: &mut [i8],
    low: Option<&mut [i8]>,
    four: bool,
) -> (f32, i32, i32) {
    use std::arch::x86_64::*;
    let (a, b) = (
        _mm512_loadu_ps(src.as_ptr()),
        _mm512_loadu_ps(src.as_ptr().add(16)),
    );
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(b, b);
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    let planes = if low.is_some() { 2 } else { 1 };
    let s = if nan != 0 {
        f32::NAN
    } else {
        amax / qmax(planes)
    };
    if !s.is_finite() || s == 0.0 {
        high[..CHUNK].fill(0);
        if let Some(low) = low {
            low[..CHUNK].fill(0);
        }
        return (if s == 0.0 { 0.0 } else { f32::NAN }, 0, 0);
    }
    let sv = _mm512_set1_ps(s);
    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    let mut qa = _mm512_cvt_roundps_epi32::<NEAREST>(_mm512_div_ps(a, sv));
    let mut qb = _mm512_cvt_roundps_epi32::<NEAREST>(_mm512_div_ps(b, sv));
    let halves = (_mm512_reduce_add_epi32(qa), _mm512_reduce_add_epi32(qb));
    if four {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        (qa, qb) = (
            _mm512_permutex2var_epi32(qa, even, qb),
            _mm512_permutex2var_epi32(qa, odd, qb),
        );
    }
    let store = |dst: &mut [i8], a: __m512i, b: __m512i| {
        _mm_storeu_si128(dst.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(a));
        _mm_storeu_si128(
            dst.as_mut_ptr().add(16) as *mut __m128i,
            _mm512_cvtepi32_epi8(b),
        );
    };
    match low {
        Some(low) => {
            let half = _mm512_set1_epi32(64);
            let (ha, hb) = (
                _mm512_srai_epi32(_mm512_add_epi32(qa, half), 7),
                _mm512_srai_epi32(_mm512_add_epi32(qb, half), 7),
            );
            store(high, ha, hb);
            store(
                low,
                _mm512_sub_epi32(qa, _mm512_slli_epi32(ha, 7)),
                _mm512_sub_epi32(qb, _mm512_slli_epi32(hb, 7)),
            );
        }
        None => store(high, qa, qb),
    }
    (s, halves.0, halves.1)
}

/// A quantized matrix's data and parameters, resolved once per product.
pub struct Rows<'a> {
    q: &'a QuantTensor,
    data: &'a [u8],
    scale: ParamSlice<'a>,
    offset: Option<ParamSlice<'a>>,
}

impl<'a> Rows<'a> {
    pub fn of(q: &'a QuantTensor) -> Rows<'a> {
        Rows {
            q,
            data: q.data_all(),
            scale: q.params_all(q.scale_params()),
            offset: q.offset_params().map(|p| q.params_all(p)),
        }
    }
}

/// `acc[i] = Σ_c w[j, c]·x_i[c]` for the `m` prepared rows (stride `stride` floats).
pub fn gemv_row(
    rows: &Rows<'_>,
    j: usize,
    prep: &[f32],
    stride: usize,
    m: usize,
    acc: &mut [f32; GEMV_MAX_ROWS],
) {
    debug_assert!(m <= GEMV_MAX_ROWS && prep.len() >= m * stride);
    let q = rows.q;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `applies` checked the CPU features; slices are sized by the tensor's geometry.
    unsafe {
        let four = q.format.bits() == 4;
        let half = q.block == HALF;
        let two = q.activations.planes() == 2;
        let f = match (four, half, two) {
            (true, false, false) => gemv_row_by_m::<true, false, 1>,
            (false, false, false) => gemv_row_by_m::<false, false, 1>,
            (true, true, false) => gemv_row_by_m::<true, true, 1>,
            (false, true, false) => gemv_row_by_m::<false, true, 1>,
            (true, false, true) => gemv_row_by_m::<true, false, 2>,
            (false, false, true) => gemv_row_by_m::<false, false, 2>,
            (true, true, true) => gemv_row_by_m::<true, true, 2>,
            (false, true, true) => gemv_row_by_m::<false, true, 2>,
        };
        f(rows, j, prep, stride, m, acc)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (q, j, stride, acc);
        unreachable!("applies() is false off x86-64");
    }
}

/// [`gemv_row_vnni`] instantiated for the activation-row count `m` (1 to [`GEMV_MAX_ROWS`]).
#[cfg(target_arch = "x86_64")]
unsafe fn gemv_row_by_m<const FOUR: bool, const HALVES: bool, const PLANES: usize>(
    rows: &Rows<'_>,
    j: usize,
    prep: &[f32],
    stride: usize,
    m: usize,
    acc: &mut [f32; GEMV_MAX_ROWS],
) {
    macro_rules! rows {
        ($($m:literal)*) => {
            match m {
                $($m => gemv_row_vnni::<FOUR, HALVES, $m, PLANES>(rows, j, prep, stride, acc),)*
                _ => unreachable!("at most GEMV_MAX_ROWS rows"),
            }
        };
    }
    rows!(1 2 3 4 5 6 7 8)
}

fn bias(format: QFormat) -> (i32, u8) {
    match format {
        QFormat::U4 | QFormat::U8 => (0, 0),
        QFormat::I4 => (8, 8),
        QFormat::I8 => (128, 0x80),
        QFormat::F16 => unreachable!("applies() is false for fp16 data"),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn gemv_row_vnni<
    const FOUR: bool,
    const HALVES: bool,
    const M: usize,
    const PLANES: usize,
>(
    rows: &Rows<'_>,
    j: usize,
    prep: &[f32],
    stride: usize,
    acc: &mut [f32; GEMV_MAX_ROWS],
) {
    use super::quant_blocks::params16;
    use std::arch::x86_64::*;
    let q = rows.q;
    let k = q.cols;
    let l = Layout::of(k, PLANES);
    // chunks per weight block (blocks of 32·n), or 0 for blocks of 16 (two per chunk)
    let per_block = q.block / CHUNK;
    let (bias, flip) = bias(q.format);
    let (rb, nb) = (q.row_bytes(), q.blocks_per_row());
    let row = &rows.data[j * rb..(j + 1) * rb];
    let scale = rows.scale.sub(j * nb, nb);
    let offset = rows.offset.as_ref().map(|p| p.sub(j * nb, nb));
    let rp = row.as_ptr();
    let base = prep.as_ptr();
    let x_bytes = |i: usize| base.add(i * stride) as *const u8;
    let x_spread = |i: usize| base.add(i * stride + l.spread(k));
    let x_scales = |i: usize| base.add(i * stride + l.scales(k));
    let x_sums = |i: usize| base.add(i * stride + l.sums(k));
    let x_half_sums = |i: usize| base.add(i * stride + l.half_sums(k));

    let nibble = _mm256_set1_epi8(0x0F);
    let flipv = _mm512_set1_epi8(flip as i8);
    let two = _mm512_set1_epi32(2);
    // the weight-scale lane of each `vpdpbusd` lane of a chunk pair: a chunk per 8 lanes, or
    // with blocks of 16 the block (of the group's 32 scales, two per chunk) each lane lies in
    // (4-bit chunks are 16 even then 16 odd columns, so lanes alternate between the halves)
    let (first_pair, step) = match (HALVES, FOUR) {
        (false, _) => (
            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
            two,
        ),
        (true, false) => (
            _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
            _mm512_set1_epi32(4),
        ),
        (true, true) => (
            _mm512_setr_epi32(0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3),
            _mm512_set1_epi32(4),
        ),
    };
    let mut sums = [_mm512_setzero_ps(); M];
    let mut corrections = [_mm512_setzero_ps(); M];
    let mut tails = [0.0f32; M];
    let mut sw = [0.0f32; 16];
    let mut bo = [0.0f32; 16];
    let mut g = 0;
    while g < l.chunks {
        let len = (l.chunks - g).min(16);
        let live = ((1u32 << len) - 1) as __mmask16;
        // blocks of 16: the group's 2·len block scales as two vectors (lanes past them zero)
        let mut sw_hi = _mm512_setzero_ps();
        let (swv, bov) = if HALVES {
            let lo_live = ((1u32 << (2 * len).min(16)) - 1) as __mmask16;
            let hi_live = ((1u32 << (2 * len).saturating_sub(16)) - 1) as __mmask16;
            let load = |p: &ParamSlice<'_>, at: usize, live: __mmask16| {
                match live {
                    0xFFFF => params16(p, at),
                    // `at` may lie past the row's blocks
                    0 => _mm512_setzero_ps(),
                    _ => params_masked(p, at, live),
                }
            };
            let biasv = _mm512_set1_ps(bias as f32);
            let (s_lo, s_hi) = (
                load(&scale, 2 * g, lo_live),
                load(&scale, 2 * g + 16, hi_live),
            );
            let (b_lo, b_hi) = match offset.as_ref() {
                Some(o) => (
                    _mm512_add_ps(load(o, 2 * g, lo_live), biasv),
                    _mm512_add_ps(load(o, 2 * g + 16, hi_live), biasv),
                ),
                None => (biasv, biasv),
            };
            let (sb_lo, sb_hi) = (_mm512_mul_ps(s_lo, b_lo), _mm512_mul_ps(s_hi, b_hi));
            for i in 0..M {
                let t_lo = _mm512_maskz_loadu_ps(lo_live, x_half_sums(i).add(2 * g));
                corrections[i] = _mm512_fmadd_ps(sb_lo, t_lo, corrections[i]);
                if hi_live != 0 {
                    let t_hi = _mm512_maskz_loadu_ps(hi_live, x_half_sums(i).add(2 * g + 16));
                    corrections[i] = _mm512_fmadd_ps(sb_hi, t_hi, corrections[i]);
                }
            }
            sw_hi = s_hi;
            (s_lo, _mm512_setzero_ps())
        } else if per_block == 1 {
            let load = |p: &ParamSlice<'_>| {
                if len == 16 {
                    params16(p, g)
                } else {
                    params_masked(p, g, live)
                }
            };
            let o = offset.as_ref().map_or(_mm512_setzero_ps(), load);
            (load(&scale), _mm512_add_ps(o, _mm512_set1_ps(bias as f32)))
        } else {
            sw.fill(0.0);
            bo.fill(0.0);
            for t in 0..len {
                let b = (g + t) / per_block;
                sw[t] = scale.get(b);
                bo[t] = bias as f32 + offset.as_ref().map_or(0.0, |o| o.get(b));
            }
            (_mm512_loadu_ps(sw.as_ptr()), _mm512_loadu_ps(bo.as_ptr()))
        };
        if !HALVES {
            let swbo = _mm512_mul_ps(swv, bov);
            for i in 0..M {
                let t = _mm512_maskz_loadu_ps(live, x_sums(i).add(g));
                corrections[i] = _mm512_fmadd_ps(swbo, t, corrections[i]);
            }
        }
        let mut lanes = first_pair;
        let mut p = 0;
        while p + 1 < len {
            let c0 = g + p;
            // the weight stream is the bound: ask for it ahead (rows are contiguous)
            let at = if FOUR { c0 * 16 } else { c0 * CHUNK };
            _mm_prefetch::<_MM_HINT_T0>(rp.add(at + PREFETCH) as *const i8);
            let w = if FOUR {
                let v = _mm256_loadu_si256(rp.add(c0 * 16) as *const __m256i);
                let lo = _mm256_and_si256(v, nibble);
                let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                let w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                // [lo c0, lo c1, hi c0, hi c1] → [lo c0, hi c0, lo c1, hi c1]
                _mm512_shuffle_i64x2(w, w, 0b11_01_10_00)
            } else {
                _mm512_loadu_si512(rp.add(c0 * CHUNK) as *const _)
            };
            let w = if flip != 0 {
                _mm512_xor_si512(w, flipv)
            } else {
                w
            };
            let s = if HALVES {
                _mm512_permutex2var_ps(swv, lanes, sw_hi)
            } else {
                _mm512_permutexvar_ps(lanes, swv)
            };
            for i in 0..M {
                let x = _mm512_loadu_si512(x_bytes(i).add(c0 * CHUNK) as *const _);
                let mut d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
                if PLANES == 2 {
                    let x = _mm512_loadu_si512(x_bytes(i).add(k + c0 * CHUNK) as *const _);
                    d = _mm512_dpbusd_epi32(_mm512_slli_epi32(d, 7), w, x);
                }
                let sx = _mm512_loadu_ps(x_spread(i).add(c0 / 2 * 16));
                sums[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d), sx), s, sums[i]);
            }
            lanes = _mm512_add_epi32(lanes, step);
            p += 2;
        }
        if p < len {
            let c = g + p;
            // each half's weight scale (the same one unless blocks are of 16)
            let s_w = if HALVES {
                [scale.get(2 * c), scale.get(2 * c + 1)]
            } else {
                [scale.get(c / per_block); 2]
            };
            for i in 0..M {
                let x = x_bytes(i).add(c * CHUNK) as *const i8;
                // the activation of prepared byte t, both planes
                let x_at = |t: usize| {
                    if PLANES == 2 {
                        128 * *x.add(t) as i32 + *x.add(k + t) as i32
                    } else {
                        *x.add(t) as i32
                    }
                };
                let mut dot = [0i32; 2];
                for t in 0..CHUNK {
                    // byte t of a prepared chunk is column t, or for 4-bit data column 2t of
                    // the chunk (t < 16) or 2(t − 16) + 1
                    let (u, col) = if FOUR {
                        let byte = *rp.add(c * 16 + t % 16);
                        let u = (if t < 16 { byte & 15 } else { byte >> 4 }) ^ flip;
                        (u, if t < 16 { 2 * t } else { 2 * (t - 16) + 1 })
                    } else {
                        (*rp.add(c * CHUNK + t) ^ flip, t)
                    };
                    dot[col / HALF] += u as i32 * x_at(t);
                }
                let s_x = *x_scales(i).add(c);
                tails[i] += s_w[0] * s_x * dot[0] as f32 + s_w[1] * s_x * dot[1] as f32;
            }
        }
        g += len;
    }
    for i in 0..M {
        acc[i] = _mm512_reduce_add_ps(sums[i]) + tails[i] - _mm512_reduce_add_ps(corrections[i]);
    }
}

/// Weight rows [`gemv_rows4`] computes together.
pub const ROWS4: usize = 4;
/// Bytes past the end of [`gemv_rows4`]'s four rows that it requests ahead of use.
const AHEAD4: usize = 1024;

/// Whether [`gemv_rows4`] runs for `q` with `m` activation rows.
pub fn rows4_applies(q: &QuantTensor, m: usize) -> bool {
    m == 1 && q.block == CHUNK
}

/// `acc[r] = Σ_c w[j + r, c]·x[c]` for one prepared activation row and the four weight rows
/// `j..j + 4` (blocks of 32 columns, see [`rows4_applies`]): the activation bytes are loaded once
/// for the four rows, and each row's block scale is combined with the activation's chunk scale
/// 16 chunks at a time, so a chunk pair costs each row one weight load, one `vpdpbusd` per plane, a
/// conversion, a lane permutation and one FMA.
pub fn gemv_rows4(rows: &Rows<'_>, j: usize, prep: &[f32], acc: &mut [f32; ROWS4]) {
    debug_assert!(rows4_applies(rows.q, 1) && j + ROWS4 <= rows.q.rows);
    debug_assert!(prep.len() >= row_floats(rows.q));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `applies` checked the CPU features; slices are sized by the tensor's geometry.
    unsafe {
        match (rows.q.format.bits() == 4, rows.q.activations.planes() == 2) {
            (true, false) => gemv_rows4_vnni::<true, 1>(rows, j, prep, acc),
            (false, false) => gemv_rows4_vnni::<false, 1>(rows, j, prep, acc),
            (true, true) => gemv_rows4_vnni::<true, 2>(rows, j, prep, acc),
            (false, true) => gemv_rows4_vnni::<false, 2>(rows, j, prep, acc),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (rows, j, prep, acc);
        unreachable!("applies() is false off x86-64");
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn gemv_rows4_vnni<const FOUR: bool, const PLANES: usize>(
    rows: &Rows<'_>,
    j: usize,
    prep: &[f32],
    acc: &mut [f32; ROWS4],
) {
    use std::arch::x86_64::*;
    const R: usize = ROWS4;
    let q = rows.q;
    let k = q.cols;
    let l = Layout::of(k, PLANES);
    let (bias, flip) = bias(q.format);
    let (rb, nb) = (q.row_bytes(), q.blocks_per_row());
    // bytes of one chunk in a weight row
    let cb = if FOUR { CHUNK / 2 } else { CHUNK };
    let rp: [*const u8; R] = std::array::from_fn(|r| rows.data[(j + r) * rb..].as_ptr());
    let scale: [ParamSlice<'_>; R] = std::array::from_fn(|r| rows.scale.sub((j + r) * nb, nb));
    let offset: [Option<ParamSlice<'_>>; R] =
        std::array::from_fn(|r| rows.offset.as_ref().map(|p| p.sub((j + r) * nb, nb)));
    let base = prep.as_ptr();
    let x_bytes = base as *const u8;
    let x_scales = base.add(l.scales(k));
    let x_sums = base.add(l.sums(k));

    let nibble = _mm256_set1_epi8(0x0F);
    let flipv = _mm512_set1_epi8(flip as i8);
    let biasv = _mm512_set1_ps(bias as f32);
    let two = _mm512_set1_epi32(2);
    let first_pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let mut sums = [_mm512_setzero_ps(); R];
    // masked loads only for a lone last chunk: they are slow where they cross a cache line
    // (GGUF aligns tensors to 32 bytes only)
    let load_w = |p: *const u8, pair: bool| -> __m512i {
        let w = if FOUR {
            let v = if pair {
                _mm256_loadu_si256(p as *const __m256i)
            } else {
                _mm256_maskz_loadu_epi8(0xFFFF, p as *const i8)
            };
            let lo = _mm256_and_si256(v, nibble);
            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
            let w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            // [lo c0, lo c1, hi c0, hi c1] → [lo c0, hi c0, lo c1, hi c1]
            _mm512_shuffle_i64x2(w, w, 0b11_01_10_00)
        } else if pair {
            _mm512_loadu_si512(p as *const _)
        } else {
            _mm512_maskz_loadu_epi8(0xFFFF_FFFF, p as *const i8)
        };
        if flip != 0 {
            _mm512_xor_si512(w, flipv)
        } else {
            w
        }
    };
    let mut g = 0;
    while g < l.chunks {
        let len = (l.chunks - g).min(16);
        let live = ((1u32 << len) - 1) as __mmask16;
        let xs = _mm512_maskz_loadu_ps(live, x_scales.add(g));
        let xsum = _mm512_maskz_loadu_ps(live, x_sums.add(g));
        let load = |p: &ParamSlice<'_>| {
            if len == 16 {
                super::quant_blocks::params16(p, g)
            } else {
                params_masked(p, g, live)
            }
        };
        // per row: s_w·s_x per chunk, and the offset term Σ_c s_w·(bias + o_w)·s_x·Σ q_x
        let mut prod = [_mm512_setzero_ps(); R];
        for r in 0..R {
            let sw = load(&scale[r]);
            prod[r] = _mm512_mul_ps(sw, xs);
            let bo = match &offset[r] {
                Some(o) => _mm512_add_ps(load(o), biasv),
                None => biasv,
            };
            sums[r] = _mm512_fnmadd_ps(_mm512_mul_ps(sw, bo), xsum, sums[r]);
        }
        let mut lanes = first_pair;
        let mut p = 0;
        while p < len {
            let c0 = g + p;
            // a lone last chunk reads only its own bytes; its upper lanes multiply zeros
            let pair = p + 1 < len;
            let load_x = |at: usize| {
                if pair {
                    _mm512_loadu_si512(x_bytes.add(at) as *const _)
                } else {
                    _mm512_maskz_loadu_epi8(0xFFFF_FFFF, x_bytes.add(at) as *const i8)
                }
            };
            let x = load_x(c0 * CHUNK);
            let x_low = if PLANES == 2 {
                load_x(k + c0 * CHUNK)
            } else {
                _mm512_setzero_si512()
            };
            for r in 0..R {
                let at = rp[r].add(c0 * cb);
                // the four rows are one contiguous region read as four interleaved streams,
                // which the hardware prefetcher follows poorly: request the bytes past the
                // region at the rate they are consumed
                _mm_prefetch::<_MM_HINT_T0>(
                    rp[0].add(R * rb + AHEAD4 + R * c0 * cb + r * 2 * cb) as *const i8
                );
                let w = load_w(at, pair);
                let mut d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
                if PLANES == 2 {
                    d = _mm512_dpbusd_epi32(_mm512_slli_epi32(d, 7), w, x_low);
                }
                let s = _mm512_permutexvar_ps(lanes, prod[r]);
                sums[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, sums[r]);
            }
            lanes = _mm512_add_epi32(lanes, two);
            p += 2;
        }
        g += len;
    }
    for r in 0..R {
        acc[r] = _mm512_reduce_add_ps(sums[r]);
    }
}

/// Per-block parameters `b..b + 16` under `live` as f32 (zero elsewhere, nothing read there).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
#[inline]
unsafe fn params_masked(
    p: &ParamSlice<'_>,
    b: usize,
    live: std::arch::x86_64::__mmask16,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    match p {
        ParamSlice::F32(v) => _mm512_maskz_loadu_ps(live, v[b..].as_ptr()),
        ParamSlice::F16(v) => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
            live,
            v[b..].as_ptr() as *const i16,
        )),
    }
}
