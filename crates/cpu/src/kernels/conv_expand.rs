//! A pointwise conv computed by the depthwise conv that reads it: the expansion of an inverted
//! residual block (MobileNetV2/V3, EfficientNet), `act(conv1x1(x) + bias)` feeding a depthwise
//! conv. The depthwise kernel asks for its input planes `BLOCK` channels at a time and this
//! module computes them into a scratch block that stays in L2, so the expanded tensor (six
//! times the block's input, 38 MB for MobileNetV2's first expansion at batch 8) is never
//! written to memory and read back.
//!
//! Each plane element sums its `cin` products in input-channel order, then adds the bias and
//! applies the activation, as the unfused chain does after its product.

use super::conv_epilogue::Act;
use crate::plan::Vid;

/// Output channels computed together: each input vector loaded feeds this many accumulators.
pub const BLOCK: usize = 8;

/// The fewest pixels a plane may have: the kernel works in whole 16-lane vectors, the last
/// one overlapping the one before it.
pub const MIN_PIXELS: usize = 16;

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

crate::simd_dispatch! {
    /// Writes planes `c0..c0 + BLOCK` of the expansion of one image: `out[c·pix + i] =
    /// act(Σ_k w[k][c]·x[k·pix + i] + bias[c])` for `c < BLOCK`, `i < pix`.
    /// `x` holds `cin` planes of `pix` floats (`pix` ≥ `MIN_PIXELS`), `w` the block's packed
    /// weight, `out` `BLOCK·pix` floats.
    pub fn planes(x: &[f32], pix: usize, w: &[f32], bias: &[f32; BLOCK], act: Act, out: &mut [f32]) {
        assert!(pix >= MIN_PIXELS && out.len() >= BLOCK * pix, "expansion block");
        // 32 lanes a row keep 16 accumulators in AVX-512's 32 registers; AVX2 and NEON have 16
        let wide = crate::simd::has_avx512() && pix >= 32;
        match act {
            Act::None => columns(wide, x, pix, w, bias, out, |v| v),
            Act::Relu => columns(wide, x, pix, w, bias, out, |v| Act::Relu.apply(v)),
            Act::Relu6 => columns(wide, x, pix, w, bias, out, |v| Act::Relu6.apply(v)),
            Act::Clip(lo, hi) => columns(wide, x, pix, w, bias, out, |v| Act::Clip(lo, hi).apply(v)),
        }
    }
}

#[inline(always)]
fn columns(
    wide: bool,
    x: &[f32],
    pix: usize,
    w: &[f32],
    bias: &[f32; BLOCK],
    out: &mut [f32],
    act: impl Fn(f32) -> f32 + Copy,
) {
    let mut at = 0;
    if wide {
        while at + 32 <= pix {
            column::<32>(x, pix, w, bias, at, out, act);
            at += 32;
        }
    }
    while at + 16 <= pix {
        column::<16>(x, pix, w, bias, at, out, act);
        at += 16;
    }
    // the last 16 columns once more (they rewrite the same values)
    if at < pix {
        column::<16>(x, pix, w, bias, pix - 16, out, act);
    }
}

#[inline(always)]
fn column<const W: usize>(
    x: &[f32],
    pix: usize,
    w: &[f32],
    bias: &[f32; BLOCK],
    at: usize,
    out: &mut [f32],
    act: impl Fn(f32) -> f32,
) {
    let mut acc = [[0f32; W]; BLOCK];
    for (k, wk) in w.chunks_exact(BLOCK).enumerate() {
        let xs: &[f32; W] = x[k * pix + at..][..W].try_into().expect("column width");
        let wk: &[f32; BLOCK] = wk.try_into().expect("block width");
        // written out channel by channel: a loop over the channels gets vectorized across
        // them (gathers) instead of along the row
        let [a0, a1, a2, a3, a4, a5, a6, a7] = &mut acc;
        fma_row(a0, wk[0], xs);
        fma_row(a1, wk[1], xs);
        fma_row(a2, wk[2], xs);
        fma_row(a3, wk[3], xs);
        fma_row(a4, wk[4], xs);
        fma_row(a5, wk[5], xs);
        fma_row(a6, wk[6], xs);
        fma_row(a7, wk[7], xs);
    }
    for ((c, a), &b) in acc.iter().enumerate().zip(bias) {
        let o = &mut out[c * pix + at..][..W];
        for (o, &a) in o.iter_mut().zip(a) {
            *o = act(a + b);
        }
    }
}

#[inline(always)]
fn fma_row<const W: usize>(a: &mut [f32; W], w: f32, x: &[f32; W]) {
    for (a, &v) in a.iter_mut().zip(x) {
        *a = w.mul_add(v, *a);
    }
}
