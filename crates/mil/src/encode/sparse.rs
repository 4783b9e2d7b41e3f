//! Unstructured sparsity (`constexpr_sparse_to_dense`, iOS18): uint1 mask + fp16 nonzero values.

use super::{
    f16_bytes, DeclineReason, Encoding, Payload, PayloadData, Placement, Weight,
    SPARSE_MIN_ZERO_FRACTION,
};
use crate::ast::{DType, TensorType};
use half::f16;

pub(crate) fn plan(weight: &Weight<'_>) -> Result<Encoding, DeclineReason> {
    if weight.shape.is_empty() {
        return Err(DeclineReason::NeedsRank1);
    }
    let n = weight.values.len();
    let zeros = weight.values.iter().filter(|&&v| v == 0.0).count();
    let zero_fraction = zeros as f64 / n as f64;
    if zeros == n {
        return Err(DeclineReason::AllZero);
    }
    if zero_fraction < SPARSE_MIN_ZERO_FRACTION {
        return Err(DeclineReason::TooDense { zero_fraction });
    }
    let mut mask = vec![0u8; n.div_ceil(8)];
    let mut nonzero = Vec::with_capacity(n - zeros);
    let mut decoded = Vec::with_capacity(n);
    for (i, &v) in weight.values.iter().enumerate() {
        if v == 0.0 {
            decoded.push(0.0);
        } else {
            mask[i / 8] |= 1 << (i % 8);
            let h = f16::from_f32(v);
            nonzero.push(h);
            decoded.push(h.to_f64());
        }
    }
    Ok(Encoding {
        payloads: vec![
            Payload {
                param: "nonzero_data",
                ty: TensorType::new(DType::Fp16, &[nonzero.len()]),
                data: PayloadData::Blob(f16_bytes(&nonzero)),
            },
            Payload {
                param: "mask",
                ty: TensorType::new(DType::Uint1, weight.shape),
                data: PayloadData::Blob(mask),
            },
        ],
        placement: Placement::Inputs,
        decoded,
    })
}
