//! Quantized weights kept compressed for the decode GEMV: int8 or 4-bit values with a float
//! scale and offset per (output row, k-block), from constexpr_blockwise_shift_scale /
//! constexpr_affine_dequantize. y[j] = Σ_b scale[j,b]·(Σ_k q[j,k]·x[k] − offset[j,b]·Σ_k x[k]).

/// Compressed `[n, k]` weight.
#[derive(Debug, Clone)]
pub struct QuantWeight {
    pub n: usize,
    pub k: usize,
    /// k-elements per scale block (divides k).
    pub block: usize,
    pub bits: u8,
    /// 8 bits: one i8 per element, row-major. 4 bits: per 32-element group 16 bytes, element i in
    /// the low nibble of byte i and element 16 + i in the high nibble (values 0..15).
    pub data: Vec<u8>,
    pub scale: Vec<f32>,
    pub offset: Vec<f32>,
}

impl QuantWeight {
    pub fn blocks(&self) -> usize {
        self.k / self.block
    }

    pub fn bytes(&self) -> usize {
        self.data.len() + 8 * self.scale.len()
    }

    /// Builds from per-element integer values (row-major [n, k]) and per-(row, block) scale and
    /// offset. 4-bit storage needs values in 0..15 and k, block multiples of 32; otherwise 8-bit
    /// storage is used (values must then fit i8 after shifting, see `shift`).
    pub fn new(
        n: usize,
        k: usize,
        block: usize,
        values: &[i32],
        scale: Vec<f32>,
        mut offset: Vec<f32>,
        four_bit: bool,
    ) -> Option<QuantWeight> {
        if block == 0 || !k.is_multiple_of(block) || values.len() != n * k {
            return None;
        }
        if four_bit
            && k.is_multiple_of(32)
            && block.is_multiple_of(32)
            && values.iter().all(|&v| (0..16).contains(&v))
        {
            let mut data = vec![0u8; n * k / 2];
            for row in 0..n {
                for g in 0..k / 32 {
                    for i in 0..16 {
                        let lo = values[row * k + g * 32 + i] as u8;
                        let hi = values[row * k + g * 32 + 16 + i] as u8;
                        data[(row * k + g * 32) / 2 + i] = lo | (hi << 4);
                    }
                }
            }
            return Some(QuantWeight {
                n,
                k,
                block,
                bits: 4,
                data,
                scale,
                offset,
            });
        }
        // 8-bit: shift into i8 range and fold the shift into the offset
        let (lo, hi) = values
            .iter()
            .fold((i32::MAX, i32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        let shift = if lo >= -128 && hi <= 127 {
            0
        } else if lo >= 0 && hi <= 255 {
            128
        } else {
            return None;
        };
        let data = values.iter().map(|&v| (v - shift) as i8 as u8).collect();
        offset.iter_mut().for_each(|o| *o -= shift as f32);
        Some(QuantWeight {
            n,
            k,
            block,
            bits: 8,
            data,
            scale,
            offset,
        })
    }

    /// y[j] for j in `j0..j1` given x (length k) and per-block sums of x.
    pub fn rows(&self, x: &[f32], xsum: &[f32], y: &mut [f32], j0: usize, j1: usize) {
        rows_impl(self, x, xsum, y, j0, j1)
    }
}

crate::simd_dispatch! {
    fn rows_impl(w: &QuantWeight, x: &[f32], xsum: &[f32], y: &mut [f32], j0: usize, j1: usize) {
        let nb = w.blocks();
        let bl = w.block;
        for j in j0..j1 {
            // Σ_b s_b·(q·x)_b accumulated lane-wise (one horizontal sum per row), minus Σ_b s_b·o_b·Σx_b
            let mut acc = [0f32; 32];
            let mut tail = 0.0f32;
            let mut corr = 0.0f32;
            for b in 0..nb {
                let sb = w.scale[j * nb + b];
                corr += sb * w.offset[j * nb + b] * xsum[b];
                let xb = &x[b * bl..(b + 1) * bl];
                if w.bits == 8 {
                    let q: &[i8] = bytemuck::cast_slice(&w.data[j * w.k + b * bl..j * w.k + (b + 1) * bl]);
                    let mut qi = q.chunks_exact(32);
                    let mut xi = xb.chunks_exact(32);
                    for (qs, xs) in (&mut qi).zip(&mut xi) {
                        let qs: &[i8; 32] = qs.try_into().unwrap_or(&[0; 32]);
                        let xs: &[f32; 32] = xs.try_into().unwrap_or(&[0.0; 32]);
                        let mut qf = [0f32; 32];
                        for t in 0..32 {
                            qf[t] = qs[t] as i32 as f32;
                        }
                        for t in 0..32 {
                            acc[t] = (qf[t] * xs[t]).mul_add(sb, acc[t]);
                        }
                    }
                    for (a, v) in qi.remainder().iter().zip(xi.remainder()) {
                        tail += sb * (*a as f32 * v);
                    }
                } else {
                    let q = &w.data[(j * w.k + b * bl) / 2..(j * w.k + (b + 1) * bl) / 2];
                    for (qs, xs) in q.chunks_exact(16).zip(xb.chunks_exact(32)) {
                        let qs: &[u8; 16] = qs.try_into().unwrap_or(&[0; 16]);
                        let xs: &[f32; 32] = xs.try_into().unwrap_or(&[0.0; 32]);
                        for t in 0..16 {
                            acc[t] = ((qs[t] & 15) as f32 * xs[t]).mul_add(sb, acc[t]);
                            acc[16 + t] = ((qs[t] >> 4) as f32 * xs[16 + t]).mul_add(sb, acc[16 + t]);
                        }
                    }
                }
            }
            let mut total = tail - corr;
            for a in acc {
                total += a;
            }
            y[j] = total;
        }
    }
}
