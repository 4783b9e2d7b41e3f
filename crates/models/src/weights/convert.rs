//! Little-endian byte slices (possibly unaligned, e.g. inside an mmap) → f32.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// `bytes.len()` must be a multiple of 4; a trailing partial element is ignored.
pub fn f32_le_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `bytes.len()` must be a multiple of 2; a trailing partial element is ignored.
pub fn f16_le_to_f32(bytes: &[u8]) -> Vec<f32> {
    let halves: Vec<f16> = bytes
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]))
        .collect();
    let mut out = vec![0.0f32; halves.len()];
    halves.convert_to_f32_slice(&mut out);
    out
}

/// `bytes.len()` must be a multiple of 2; a trailing partial element is ignored.
pub fn bf16_le_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

pub(crate) fn f64_le_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            f64::from_le_bytes(a) as f32
        })
        .collect()
}

/// A little-endian float encoding of a weights file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatLe {
    F32,
    F16,
    Bf16,
    F64,
}

impl FloatLe {
    pub(crate) fn width(self) -> usize {
        match self {
            FloatLe::F32 => 4,
            FloatLe::F16 | FloatLe::Bf16 => 2,
            FloatLe::F64 => 8,
        }
    }

    /// Converts values `start..start + out.len()` of `bytes` into `out` and returns the bytes
    /// they were read from, or `None` (nothing read) when the range lies outside `bytes`.
    pub(crate) fn read_range<'a>(
        self,
        bytes: &'a [u8],
        start: usize,
        out: &mut [f32],
    ) -> Option<&'a [u8]> {
        let width = self.width();
        let end = start.checked_add(out.len())?.checked_mul(width)?;
        let part = bytes.get(start.checked_mul(width)?..end)?;
        self.read_into(part, out);
        Some(part)
    }

    /// Converts the first `out.len()` values of `bytes` (which holds at least that many).
    fn read_into(self, bytes: &[u8], out: &mut [f32]) {
        let chunks = bytes.chunks_exact(self.width());
        for (o, c) in out.iter_mut().zip(chunks) {
            *o = match self {
                FloatLe::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                FloatLe::F16 => f16::from_le_bytes([c[0], c[1]]).to_f32(),
                FloatLe::Bf16 => bf16::from_le_bytes([c[0], c[1]]).to_f32(),
                FloatLe::F64 => {
                    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                }
            };
        }
    }
}

pub(crate) fn int_le_to_i64(bytes: &[u8], width: usize, signed: bool) -> Vec<i64> {
    bytes
        .chunks_exact(width)
        .map(|c| {
            let mut a = [0u8; 8];
            a[..width].copy_from_slice(c);
            let raw = i64::from_le_bytes(a);
            if signed && width < 8 {
                let shift = 64 - 8 * width as u32;
                (raw << shift) >> shift
            } else {
                raw
            }
        })
        .collect()
}
