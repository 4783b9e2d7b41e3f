//! Per-family limits: the shapes, kernel sizes and dtypes an ANE family accepts.

use super::Family;
use aneforge_mil::DType;

/// What one family accepts. Axis terms follow the ANE's `[N, C, H, W]` view of a tensor: the last
/// axis is the width, the one before it the height (the spatial axes), the rest channel-like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest tensor rank.
    pub max_rank: usize,
    /// Largest size of any axis.
    pub max_axis: usize,
    /// Largest width/height of an activation, and largest contraction (matmul K, linear input).
    pub max_spatial: usize,
    /// Largest channel count (conv input/output channels, linear output features).
    pub max_channels: usize,
    /// Largest convolution kernel width.
    pub max_kernel_width: usize,
    /// Integers are carried in fp16 on the ANE, which is exact up to this magnitude.
    pub max_exact_int: usize,
}

impl Limits {
    pub fn of(family: Family) -> Limits {
        let newer = family >= Family::A16;
        Limits {
            max_rank: 5,
            max_axis: 65536,
            max_spatial: if newer { 65536 } else { 16384 },
            max_channels: 65536,
            max_kernel_width: if newer { 15 } else { 13 },
            max_exact_int: 2048,
        }
    }
}

/// Program inputs and outputs may only have these types.
pub const IO_DTYPES: [DType; 3] = [DType::Fp16, DType::Int8, DType::Uint8];

/// Computed values may only have these types (comparisons yield bool, consumed by `select`).
pub const COMPUTE_DTYPES: [DType; 2] = [DType::Fp16, DType::Bool];

/// What `quantize` produces (and `dequantize` reads) besides the compute dtypes.
pub const QUANTIZED_DTYPES: [DType; 2] = [DType::Int8, DType::Uint8];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_rises_at_a16() {
        assert_eq!(Limits::of(Family::A15).max_spatial, 16384);
        assert_eq!(Limits::of(Family::A16).max_spatial, 65536);
        assert_eq!(Limits::of(Family::A13).max_kernel_width, 13);
        assert_eq!(Limits::of(Family::A16).max_kernel_width, 15);
    }
}
