//! A pointwise conv computed by the depthwise conv that reads it: the expansion of an inverted
//! residual block (MobileNetV2/V3, EfficientNet), `act(conv1x1(x) + bias)` feeding a depthwise
//! conv. The depthwise kernel asks for its input planes `BLOCK` channels at a time and this
//! module computes them into a scratch block that stays in L2, so the expanded tensor (six
//! times the block's input, 38 MB for MobileNetV2's first expansion at batch 8) is never
//! written to memory and read back.
//!
//! Each plane element sums its `cin` products in input-channel order, then adds the bias and
//! applies the activation, as the unfused chain does after its product. AVX-512 CPUs only
//! (see [`applies`]).

use super::conv_epilogue::Act;
use crate::plan::Vid;

/// Output channels computed together: each input vector loaded feeds this many accumulators.
pub const BLOCK: usize = 12;

/// The fewest pixels a plane may have: the kernel works in whole 16-lane vectors, the last
/// one overlapping the one before it.
const MIN_PIXELS: usize = 16;

#[derive(Debug)]
pub struct Expand {
    /// The pointwise conv's input, `[n, cin, h, w]` f32.
    pub x: Vid,
    pub cin: usize,
    /// The weight `[cout, cin]` as `[⌈cout / BLOCK⌉][cin][BLOCK]`, zero past `cout`.
    pub weight: Vec<f32>,
    /// `cout` floats.
    pub bias: Option<Vid>,
    pub act: Act,
}

impl Expand {
    /// Packs a pointwise weight `[cout, cin]`.
    pub fn new(x: Vid, w: &[f32], cout: usize, cin: usize, bias: Option<Vid>, act: Act) -> Self {
        let mut weight = vec![0f32; cout.div_ceil(BLOCK) * cin * BLOCK];
        for (co, row) in w.chunks_exact(cin).take(cout).enumerate() {
            let block = &mut weight[co / BLOCK * cin * BLOCK..][..cin * BLOCK];
            for (k, &v) in row.iter().enumerate() {
                block[k * BLOCK + co % BLOCK] = v;
            }
        }
        Expand {
            x,
            cin,
            weight,
            bias,
            act,
        }
    }

    /// Block `b`'s packed weight, `cin·BLOCK` floats.
    pub fn block_weight(&self, b: usize) -> &[f32] {
        &self.weight[b * self.cin * BLOCK..][..self.cin * BLOCK]
    }
}

/// Whether a depthwise conv over `pixels` input pixels per plane can compute its input here.
/// AVX-512 only: with AVX2's 16 registers a block's rows are read three times over, and a
/// four-channel form measured no faster than the two convs apart (MobileNetV2, AVX2 schedule).
pub fn applies(pixels: usize) -> bool {
    crate::simd::has_avx512() && pixels >= MIN_PIXELS
}

/// Writes planes `c0..c0 + BLOCK` of the expansion of one image: `out[c·pix + i] =
/// act(Σ_k w[k][c]·x[k·pix + i] + bias[c])` for `c < BLOCK`, `i < pix`, each sum a chain of fused
/// multiply-adds over k in order.
/// `x` holds `cin` planes of `pix` floats, `w` the block's packed weight, `out` `BLOCK·pix`
/// floats; only called where [`applies`]`(pix)`.
pub fn planes(x: &[f32], pix: usize, w: &[f32], bias: &[f32; BLOCK], act: Act, out: &mut [f32]) {
    let cin = w.len() / BLOCK;
    assert!(
        applies(pix) && x.len() >= cin * pix && out.len() >= BLOCK * pix,
        "expansion block"
    );
    // SAFETY: `applies` checked AVX-512; the sizes were checked above.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        avx512::planes(x, pix, w, bias, act, out)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bias, act);
}

/// Twelve channels by 32 columns in 24 of AVX-512's 32 registers: two row loads and twelve
/// weight broadcasts feed 24 multiply-adds.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Act, BLOCK};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512F is available; the sizes are [`super::planes`]'s.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn planes(
        x: &[f32],
        pix: usize,
        w: &[f32],
        bias: &[f32; BLOCK],
        act: Act,
        out: &mut [f32],
    ) {
        crate::kernels::conv_epilogue::with_act!(act, |f| columns(x, pix, w, bias, out, f))
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn columns(
        x: &[f32],
        pix: usize,
        w: &[f32],
        bias: &[f32; BLOCK],
        out: &mut [f32],
        act: impl Fn(f32) -> f32 + Copy,
    ) {
        let mut at = 0;
        while at + 32 <= pix {
            column::<2>(x, pix, w, bias, at, out, act);
            at += 32;
        }
        while at + 16 <= pix {
            column::<1>(x, pix, w, bias, at, out, act);
            at += 16;
        }
        // the last 16 columns once more (they rewrite the same values)
        if at < pix {
            column::<1>(x, pix, w, bias, pix - 16, out, act);
        }
    }

    /// Columns `at..at + 16·V` of every channel of the block.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn column<const V: usize>(
        x: &[f32],
        pix: usize,
        w: &[f32],
        bias: &[f32; BLOCK],
        at: usize,
        out: &mut [f32],
        act: impl Fn(f32) -> f32,
    ) {
        let cin = w.len() / BLOCK;
        debug_assert!(at + 16 * V <= pix && x.len() >= cin * pix && out.len() >= BLOCK * pix);
        let mut acc = [[_mm512_setzero_ps(); V]; BLOCK];
        let (xp, wp) = (x.as_ptr().add(at), w.as_ptr());
        for k in 0..cin {
            let mut xv = [_mm512_setzero_ps(); V];
            for (v, xv) in xv.iter_mut().enumerate() {
                *xv = _mm512_loadu_ps(xp.add(k * pix + 16 * v));
            }
            for (c, acc) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_ps(*wp.add(k * BLOCK + c));
                for (a, &xv) in acc.iter_mut().zip(&xv) {
                    *a = _mm512_fmadd_ps(wv, xv, *a);
                }
            }
        }
        let mut lanes = [0f32; 16];
        for (c, acc) in acc.iter().enumerate() {
            let b = _mm512_set1_ps(bias[c]);
            for (v, &a) in acc.iter().enumerate() {
                _mm512_storeu_ps(lanes.as_mut_ptr(), _mm512_add_ps(a, b));
                let o = &mut out[c * pix + at + 16 * v..][..16];
                for (o, &l) in o.iter_mut().zip(&lanes) {
                    *o = act(l);
                }
            }
        }
    }
}
