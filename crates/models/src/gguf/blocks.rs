//! Quantised block layouts (ggml's `block_*` structs) and their dequantisation to f32.
//!
//! The structs are `#[repr(C)]` and `Pod`, byte-identical to ggml's, so a tensor's data can be
//! viewed as `&[BlockQ4_0]` etc. without copying ([`super::GgufFile::blocks`]). Every dequantiser
//! performs the same f32 operations in the same order as gguf-py's numpy reference
//! (`gguf.quants`), so results agree bit for bit.

use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};

use super::types::GgmlType;

#[cfg(target_endian = "big")]
compile_error!("GGUF blocks are little-endian; big-endian hosts are not supported");

/// A quantised block type with a fixed number of elements.
pub trait QuantBlock: Pod {
    const TYPE: GgmlType;
    const ELEMENTS: usize;
    /// Writes the block's `ELEMENTS` values into `out[..ELEMENTS]`.
    fn dequantize_into(&self, out: &mut [f32]);
}

/// 32 weights: `x[j] = d·(q[j] − 8)`; `q[j]` is the low nibble of `qs[j]` for j < 16 and the high
/// nibble of `qs[j − 16]` otherwise.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; 16],
}

/// 32 weights: `x[j] = d·q[j] + m`, nibbles as in [`BlockQ4_0`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; 16],
}

/// 32 weights: `x[j] = d·(q[j] − 16)`; the low 4 bits as in [`BlockQ4_0`], bit 4 is bit j of
/// the little-endian u32 `qh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// 32 weights: `x[j] = d·q[j] + m`, 5-bit `q` as in [`BlockQ5_0`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// 32 weights: `x[j] = d·qs[j]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; 32],
}

/// 256 weights in 16 groups of 16: `x = (d·(sc & 15))·q − dmin·(sc >> 4)` with 2-bit `q`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ2K {
    pub scales: [u8; 16],
    pub qs: [u8; 64],
    pub d: f16,
    pub dmin: f16,
}

/// 256 weights in 16 groups of 16: `x = (d·(s − 32))·(q − 4·!h)` with 2-bit `q`, high bit `h`
/// from `hmask`, and 6-bit scales `s` packed in 12 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ3K {
    pub hmask: [u8; 32],
    pub qs: [u8; 64],
    pub scales: [u8; 12],
    pub d: f16,
}

/// 256 weights in 8 groups of 32: `x = (d·sc)·q − dmin·m` with 4-bit `q` and 6-bit `sc`, `m`
/// packed in 12 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; 128],
}

/// As [`BlockQ4K`] with a fifth bit per weight in `qh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}

/// 256 weights in 16 groups of 16: `x = (d·scales[g])·(q − 32)` with 6-bit `q` (4 bits in `ql`,
/// 2 in `qh`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub scales: [i8; 16],
    pub d: f16,
}

/// 32 weights: `x[j] = d·IQ4_VALUES[q[j]]`, 4-bit `q` in [`BlockQ4_0`]'s nibble order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockIq4Nl {
    pub d: f16,
    pub qs: [u8; 16],
}

/// 256 weights in 8 groups of 32: `x = (d·(s − 32))·IQ4_VALUES[q]`, 6-bit `s` (4 bits from
/// `scales_l`, 2 from `scales_h`), each group's 16 bytes of `qs` in [`BlockQ4_0`]'s nibble order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockIq4Xs {
    pub d: f16,
    pub scales_h: u16,
    pub scales_l: [u8; 4],
    pub qs: [u8; 128],
}

/// The non-uniform 4-bit codebook of IQ4_NL and IQ4_XS (ggml's `kvalues_iq4nl`).
pub const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// 256 weights: `x = d·qs[j]` (f32 scale); `bsums` are sums of groups of 16, for dot products.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; 256],
    pub bsums: [i16; 16],
}

impl QuantBlock for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    const ELEMENTS: usize = 32;
    fn dequantize_into(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (o, q) in out.iter_mut().zip(self.quants()) {
            *o = d * (q as i32 - 8) as f32;
        }
    }
}

impl QuantBlock for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    const ELEMENTS: usize = 32;
    fn dequantize_into(&self, out: &mut [f32]) {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        for (o, q) in out.iter_mut().zip(self.quants()) {
            *o = d * q as f32 + m;
        }
    }
}

/// The 32 nibbles of a block of 32 in element order: element `j` is the low nibble of `qs[j]`
/// for j < 16 and the high nibble of `qs[j − 16]` otherwise.
fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    std::array::from_fn(|j| {
        if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        }
    })
}

/// The 32 five-bit integers of Q5_0/Q5_1: nibbles as [`nibbles`], bit 4 is bit `j` of `qh`.
fn five_bits(qs: &[u8; 16], qh: [u8; 4]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let low = nibbles(qs);
    std::array::from_fn(|j| low[j] | ((((qh >> j) & 1) as u8) << 4))
}

impl BlockQ4_0 {
    /// The 4-bit integers (0..=15) in element order.
    pub fn quants(&self) -> [u8; 32] {
        nibbles(&self.qs)
    }
}

impl BlockQ4_1 {
    /// The 4-bit integers (0..=15) in element order.
    pub fn quants(&self) -> [u8; 32] {
        nibbles(&self.qs)
    }
}

impl BlockQ5_0 {
    /// The 5-bit integers (0..=31) in element order.
    pub fn quants(&self) -> [u8; 32] {
        five_bits(&self.qs, self.qh)
    }
}

impl BlockQ5_1 {
    /// The 5-bit integers (0..=31) in element order.
    pub fn quants(&self) -> [u8; 32] {
        five_bits(&self.qs, self.qh)
    }
}

impl QuantBlock for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
    const ELEMENTS: usize = 32;
    fn dequantize_into(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (o, q) in out.iter_mut().zip(self.quants()) {
            *o = d * (q as i32 - 16) as f32;
        }
    }
}

impl QuantBlock for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
    const ELEMENTS: usize = 32;
    fn dequantize_into(&self, out: &mut [f32]) {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        for (o, q) in out.iter_mut().zip(self.quants()) {
            *o = d * q as f32 + m;
        }
    }
}

impl QuantBlock for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    const ELEMENTS: usize = 32;
    fn dequantize_into(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = d * q as f32;
        }
    }
}

impl QuantBlock for BlockQ2K {
    const TYPE: GgmlType = GgmlType::Q2_K;
    const ELEMENTS: usize = 256;
    fn dequantize_into(&self, out: &mut [f32]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        for (e, (o, q)) in out.iter_mut().zip(self.quants()).enumerate() {
            let sc = self.scales[e / 16];
            let dl = d * (sc & 0x0F) as f32;
            let ml = dmin * (sc >> 4) as f32;
            *o = dl * q as f32 - ml;
        }
    }
}

impl BlockQ2K {
    /// The 2-bit integers (0..=3) in element order: element e = 128·half + 32·shift + l takes
    /// bits 2·shift of qs[32·half + l]. Group `e / 16` has scale `scales & 15`, min `scales >> 4`.
    pub fn quants(&self) -> [u8; 256] {
        std::array::from_fn(|e| {
            let (half, shift, l) = (e / 128, (e / 32) % 4, e % 32);
            (self.qs[32 * half + l] >> (2 * shift)) & 3
        })
    }
}

impl BlockQ3K {
    /// The signed 3-bit integers (−4..=3) in element order: the 2 low bits as Q2_K's, minus 4
    /// when the element's bit in `hmask` is clear.
    pub fn quants(&self) -> [i8; 256] {
        std::array::from_fn(|e| {
            let (half, shift, l) = (e / 128, (e / 32) % 4, e % 32);
            let low = ((self.qs[32 * half + l] >> (2 * shift)) & 3) as i8;
            let high_set = (self.hmask[l] >> (e / 32)) & 1 == 1;
            if high_set {
                low
            } else {
                low - 4
            }
        })
    }

    /// The 16 signed 6-bit group scales.
    pub fn group_scales(&self) -> [i8; 16] {
        let s = &self.scales;
        std::array::from_fn(|i| {
            let low = if i < 8 { s[i] & 0x0F } else { s[i - 8] >> 4 };
            let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
            (low | (high << 4)) as i8 - 32
        })
    }
}

impl QuantBlock for BlockQ3K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    const ELEMENTS: usize = 256;
    fn dequantize_into(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        let scales = self.group_scales();
        for (e, (o, q)) in out.iter_mut().zip(self.quants()).enumerate() {
            let dl = d * scales[e / 16] as f32;
            *o = dl * q as f32;
        }
    }
}

/// The 8 (scale, min) pairs of Q4_K / Q5_K, 6 bits each, packed in 12 bytes.
pub fn k_scale_min(scales: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let sc = std::array::from_fn(|j| {
        if j < 4 {
            scales[j] & 0x3F
        } else {
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 2) & 0x30)
        }
    });
    let m = std::array::from_fn(|j| {
        if j < 4 {
            scales[j + 4] & 0x3F
        } else {
            (scales[j + 4] >> 4) | ((scales[j] >> 2) & 0x30)
        }
    });
    (sc, m)
}

/// The 4-bit integers of Q4_K/Q5_K: group g = 2·chunk + nibble covers qs[32·chunk ..][..32],
/// low nibbles then high.
fn k_nibbles(qs: &[u8; 128]) -> [u8; 256] {
    std::array::from_fn(|e| {
        let (g, l) = (e / 32, e % 32);
        (qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0x0F
    })
}

impl BlockQ4K {
    /// The 4-bit integers (0..=15) in element order; group `e / 32` has the scale and min
    /// [`k_scale_min`] gives.
    pub fn quants(&self) -> [u8; 256] {
        k_nibbles(&self.qs)
    }
}

impl BlockQ5K {
    /// The 5-bit integers (0..=31) in element order: Q4_K's nibbles, bit 4 is bit `e / 32` of
    /// `qh[e % 32]`.
    pub fn quants(&self) -> [u8; 256] {
        let low = k_nibbles(&self.qs);
        std::array::from_fn(|e| low[e] | (((self.qh[e % 32] >> (e / 32)) & 1) << 4))
    }
}

impl BlockQ6K {
    /// The signed 6-bit integers (−32..=31) in element order: 4 bits from `ql`, 2 from `qh`;
    /// group `e / 16` has scale `scales[e / 16]`.
    pub fn quants(&self) -> [i8; 256] {
        std::array::from_fn(|e| {
            let (half, r) = (e / 128, e % 128);
            let low = (self.ql[64 * half + r % 64] >> (4 * (r / 64))) & 0x0F;
            let high = (self.qh[32 * half + r % 32] >> (2 * (r / 32))) & 3;
            (low | (high << 4)) as i8 - 32
        })
    }
}

impl QuantBlock for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4_K;
    const ELEMENTS: usize = 256;
    fn dequantize_into(&self, out: &mut [f32]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        let (sc, m) = k_scale_min(&self.scales);
        for (e, (o, q)) in out.iter_mut().zip(self.quants()).enumerate() {
            let g = e / 32;
            let dd = d * sc[g] as f32;
            let dm = dmin * m[g] as f32;
            *o = dd * q as f32 - dm;
        }
    }
}

impl QuantBlock for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    const ELEMENTS: usize = 256;
    fn dequantize_into(&self, out: &mut [f32]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        let (sc, m) = k_scale_min(&self.scales);
        for (e, (o, q)) in out.iter_mut().zip(self.quants()).enumerate() {
            let g = e / 32;
            let dd = d * sc[g] as f32;
            let dm = dmin * m[g] as f32;
            *o = dd * q as f32 - dm;
        }
    }
}

impl QuantBlock for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const ELEMENTS: usize = 256;
    fn dequantize_into(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (e, (o, q)) in out.iter_mut().zip(self.quants()).enumerate() {
            let dd = d * self.scales[e / 16] as f32;
            *o = dd * q as f32;
        }
    }
}

impl BlockIq4Nl {
    /// The codebook values in element order.
    pub fn quants(&self) -> [i8; 32] {
        nibbles(&self.qs).map(|q| IQ4_VALUES[q as usize])
    }
}

impl QuantBlock for BlockIq4Nl {
    const TYPE: GgmlType = GgmlType::IQ4_NL;
    const ELEMENTS: usize = 32;
    fn dequantize_into(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (o, q) in out.iter_mut().zip(self.quants()) {
            *o = d * q as f32;
        }
    }
}

impl BlockIq4Xs {
    /// The codebook values in element order.
    pub fn quants(&self) -> [i8; 256] {
        std::array::from_fn(|e| {
            let (g, l) = (e / 32, e % 32);
            let byte = self.qs[16 * g + l % 16];
            IQ4_VALUES[((byte >> (4 * (l / 16))) & 0x0F) as usize]
        })
    }

    /// The 8 signed 6-bit group scales `s − 32`.
    pub fn group_scales(&self) -> [i8; 8] {
        std::array::from_fn(|g| {
            let low = (self.scales_l[g / 2] >> (4 * (g % 2))) & 0x0F;
            let high = ((self.scales_h >> (2 * g)) & 3) as u8;
            (low | (high << 4)) as i8 - 32
        })
    }
}

impl QuantBlock for BlockIq4Xs {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
    const ELEMENTS: usize = 256;
    fn dequantize_into(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        let scales = self.group_scales();
        for (e, (o, q)) in out.iter_mut().zip(self.quants()).enumerate() {
            let dl = d * scales[e / 32] as f32;
            *o = dl * q as f32;
        }
    }
}

impl QuantBlock for BlockQ8K {
    const TYPE: GgmlType = GgmlType::Q8_K;
    const ELEMENTS: usize = 256;
    fn dequantize_into(&self, out: &mut [f32]) {
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = self.d * q as f32;
        }
    }
}

fn dequantize_blocks<B: QuantBlock>(bytes: &[u8], out: &mut [f32]) {
    let size = std::mem::size_of::<B>();
    for (chunk, dst) in bytes
        .chunks_exact(size)
        .zip(out.chunks_exact_mut(B::ELEMENTS))
    {
        let block: B = bytemuck::pod_read_unaligned(chunk);
        block.dequantize_into(dst);
    }
}

/// Converts `bytes` of type `ty` (whole blocks) to f32. `None` for types without a dequantiser
/// (see [`GgmlType::can_dequantize`]) or when `bytes` is not a whole number of blocks.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Option<Vec<f32>> {
    let (block, block_bytes) = ty.block_geometry();
    if !bytes.len().is_multiple_of(block_bytes) || !ty.can_dequantize() {
        return None;
    }
    let mut out = vec![0.0f32; bytes.len() / block_bytes * block];
    match ty {
        GgmlType::F32 => return Some(crate::weights::f32_le_to_f32(bytes)),
        GgmlType::F16 => return Some(crate::weights::f16_le_to_f32(bytes)),
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::F64 => return Some(crate::weights::f64_le_to_f32(bytes)),
        GgmlType::Q4_0 => dequantize_blocks::<BlockQ4_0>(bytes, &mut out),
        GgmlType::Q4_1 => dequantize_blocks::<BlockQ4_1>(bytes, &mut out),
        GgmlType::Q5_0 => dequantize_blocks::<BlockQ5_0>(bytes, &mut out),
        GgmlType::Q5_1 => dequantize_blocks::<BlockQ5_1>(bytes, &mut out),
        GgmlType::Q8_0 => dequantize_blocks::<BlockQ8_0>(bytes, &mut out),
        GgmlType::Q2_K => dequantize_blocks::<BlockQ2K>(bytes, &mut out),
        GgmlType::Q3_K => dequantize_blocks::<BlockQ3K>(bytes, &mut out),
        GgmlType::Q4_K => dequantize_blocks::<BlockQ4K>(bytes, &mut out),
        GgmlType::Q5_K => dequantize_blocks::<BlockQ5K>(bytes, &mut out),
        GgmlType::Q6_K => dequantize_blocks::<BlockQ6K>(bytes, &mut out),
        GgmlType::Q8_K => dequantize_blocks::<BlockQ8K>(bytes, &mut out),
        GgmlType::IQ4_NL => dequantize_blocks::<BlockIq4Nl>(bytes, &mut out),
        GgmlType::IQ4_XS => dequantize_blocks::<BlockIq4Xs>(bytes, &mut out),
        _ => return None,
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_structs_have_ggml_sizes() {
        fn check<B: QuantBlock>() {
            assert_eq!(
                std::mem::size_of::<B>(),
                B::TYPE.block_bytes(),
                "{}",
                B::TYPE
            );
            assert_eq!(B::ELEMENTS, B::TYPE.block_elements(), "{}", B::TYPE);
        }
        check::<BlockQ4_0>();
        check::<BlockQ4_1>();
        check::<BlockQ5_0>();
        check::<BlockQ5_1>();
        check::<BlockQ8_0>();
        check::<BlockQ2K>();
        check::<BlockQ3K>();
        check::<BlockQ4K>();
        check::<BlockQ5K>();
        check::<BlockQ6K>();
        check::<BlockQ8K>();
        check::<BlockIq4Nl>();
        check::<BlockIq4Xs>();
    }
}
