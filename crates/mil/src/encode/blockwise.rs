//! Block-wise int4 quantization (`constexpr_blockwise_shift_scale`, iOS18): symmetric int4 data
//! of the weight's shape and one fp16 scale per block of [`BLOCK`] consecutive values along the
//! input axis (axis 1; axis 0 for rank-1 weights), no offset. `scale = max|block| / 7`,
//! `q = clamp(round(w / scale), −8, 7)`, decoded `fp16(scale · q)`. When the axis is not a
//! multiple of [`BLOCK`], the block is the largest power of two that divides it.

use super::{f16_bytes, DeclineReason, Encoding, Payload, PayloadData, Placement, Weight};
use crate::ast::{DType, TensorType};
use half::f16;

/// Preferred block length along the input axis.
pub const BLOCK: usize = 32;
const QMAX: f64 = 7.0;

pub(crate) fn plan(weight: &Weight<'_>) -> Result<Encoding, DeclineReason> {
    if weight.shape.is_empty() {
        return Err(DeclineReason::NeedsRank1);
    }
    let axis = usize::from(weight.shape.len() >= 2);
    let dim = weight.shape[axis];
    let block = (0..=BLOCK.trailing_zeros())
        .rev()
        .map(|p| 1usize << p)
        .find(|&b| dim.is_multiple_of(b))
        .unwrap_or(1);
    let inner: usize = weight.shape[axis + 1..].iter().product();
    let outer: usize = weight.shape[..axis].iter().product();
    let blocks_per_row = dim / block;
    let mut scale_shape = weight.shape.to_vec();
    scale_shape[axis] = blocks_per_row;
    let flat = |o: usize, d: usize, i: usize| (o * dim + d) * inner + i;
    let mut scales = vec![f16::ZERO; outer * blocks_per_row * inner];
    for o in 0..outer {
        for b in 0..blocks_per_row {
            for i in 0..inner {
                let max = (b * block..(b + 1) * block)
                    .map(|d| (weight.values[flat(o, d, i)] as f64).abs())
                    .fold(0.0f64, f64::max);
                scales[(o * blocks_per_row + b) * inner + i] = f16::from_f64(max / QMAX);
            }
        }
    }
    let n = weight.values.len();
    let mut packed = vec![0u8; n.div_ceil(2)];
    let mut decoded = vec![0.0f64; n];
    for o in 0..outer {
        for d in 0..dim {
            for i in 0..inner {
                let at = flat(o, d, i);
                let s = scales[(o * blocks_per_row + d / block) * inner + i].to_f64();
                let q = if s > 0.0 && s.is_finite() {
                    (weight.values[at] as f64 / s)
                        .round()
                        .clamp(-QMAX - 1.0, QMAX)
                } else {
                    0.0
                };
                packed[at / 2] |= ((q as i8 as u8) & 0x0f) << (4 * (at % 2));
                decoded[at] = f16::from_f64(s * q).to_f64();
            }
        }
    }
    Ok(Encoding {
        payloads: vec![
            Payload {
                param: "data",
                ty: TensorType::new(DType::Int4, weight.shape),
                data: PayloadData::Blob(packed),
            },
            Payload {
                param: "scale",
                ty: TensorType::new(DType::Fp16, &scale_shape),
                data: PayloadData::Blob(f16_bytes(&scales)),
            },
        ],
        placement: Placement::Inputs,
        decoded,
    })
}
