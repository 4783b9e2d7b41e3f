//! int8 symmetric per-output-channel quantization (`constexpr_affine_dequantize`, iOS16).

use super::{f16_bytes, DeclineReason, Encoding, Payload, PayloadData, Placement, Weight};
use crate::ast::{DType, Literal, TensorType};
use half::f16;

const QMAX: f64 = 127.0;

pub(crate) fn plan(weight: &Weight<'_>) -> Result<Encoding, DeclineReason> {
    let Some(&channels) = weight.shape.first() else {
        return Err(DeclineReason::NeedsRank1);
    };
    let row_len = weight.values.len() / channels;
    let mut quantized = Vec::with_capacity(weight.values.len());
    let mut scales = Vec::with_capacity(channels);
    let mut decoded = Vec::with_capacity(weight.values.len());
    for row in weight.values.chunks_exact(row_len) {
        let max = row.iter().fold(0.0f64, |m, &v| m.max((v as f64).abs()));
        let scale = f16::from_f64(max / QMAX);
        let s = scale.to_f64();
        for &v in row {
            let q = if s > 0.0 && s.is_finite() {
                (v as f64 / s).round().clamp(-QMAX, QMAX)
            } else {
                0.0
            };
            quantized.push(q as i8);
            decoded.push(f16::from_f64(s * q).to_f64());
        }
        scales.push(scale);
    }
    Ok(Encoding {
        payloads: vec![
            Payload {
                param: "quantized_data",
                ty: TensorType::new(DType::Int8, weight.shape),
                data: PayloadData::Blob(bytemuck::cast_slice(&quantized).to_vec()),
            },
            Payload {
                param: "zero_point",
                ty: TensorType::scalar(DType::Int8),
                data: PayloadData::Inline(Literal::int(DType::Int8, 0)),
            },
            Payload {
                param: "scale",
                ty: TensorType::new(DType::Fp16, &[channels]),
                data: PayloadData::Blob(f16_bytes(&scales)),
            },
            Payload {
                param: "axis",
                ty: TensorType::scalar(DType::Int32),
                data: PayloadData::Inline(Literal::int(DType::Int32, 0)),
            },
        ],
        placement: Placement::Attributes,
        decoded,
    })
}
