//! 4-bit palettization (`constexpr_lut_to_dense`, iOS18): one 16-entry fp16 LUT per tensor.
//!
//! The LUT comes from 1-D k-means over the sorted values: centroids start at the quantiles
//! `(j + ½) / 16`, clusters are the contiguous runs between centroid midpoints (a value on a
//! midpoint joins the lower centroid), an empty cluster keeps its centroid, and the loop runs at
//! most [`ITERATIONS`] times. With 16 or fewer distinct values the LUT is those values. The result
//! is rounded to fp16, and every weight maps to its nearest fp16 entry (ties: lower index).

use super::{f16_bytes, DeclineReason, Encoding, Payload, PayloadData, Placement, Weight};
use crate::ast::{DType, TensorType};
use half::f16;

pub const ENTRIES: usize = 16;
pub const ITERATIONS: usize = 30;

pub(crate) fn plan(weight: &Weight<'_>) -> Result<Encoding, DeclineReason> {
    if weight.shape.is_empty() {
        return Err(DeclineReason::NeedsRank1);
    }
    let lut = palette(weight.values);
    let bounds = midpoints(&lut);
    let mut indices = vec![0u8; weight.values.len().div_ceil(2)];
    let mut decoded = Vec::with_capacity(weight.values.len());
    for (i, &v) in weight.values.iter().enumerate() {
        let index = bounds.partition_point(|&b| b < v as f64);
        indices[i / 2] |= (index as u8) << (4 * (i % 2));
        decoded.push(lut[index].to_f64());
    }
    let mut lut_shape = vec![1usize; weight.shape.len()];
    lut_shape.extend([ENTRIES, 1]);
    Ok(Encoding {
        payloads: vec![
            Payload {
                param: "indices",
                ty: TensorType::new(DType::Uint4, weight.shape),
                data: PayloadData::Blob(indices),
            },
            Payload {
                param: "lut",
                ty: TensorType::new(DType::Fp16, &lut_shape),
                data: PayloadData::Blob(f16_bytes(&lut)),
            },
        ],
        placement: Placement::Inputs,
        decoded,
    })
}

/// Midpoints between consecutive (sorted) LUT entries; exact in f64 for fp16 entries.
fn midpoints(lut: &[f16; ENTRIES]) -> [f64; ENTRIES - 1] {
    std::array::from_fn(|j| (lut[j].to_f64() + lut[j + 1].to_f64()) / 2.0)
}

/// The sorted fp16 LUT for `values` (non-empty, finite).
pub(crate) fn palette(values: &[f32]) -> [f16; ENTRIES] {
    let mut sorted: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    sorted.sort_by(f64::total_cmp);
    let mut distinct = sorted.clone();
    distinct.dedup();
    let centroids = if distinct.len() <= ENTRIES {
        std::array::from_fn(|j| distinct[j.min(distinct.len() - 1)])
    } else {
        kmeans(&sorted)
    };
    let mut lut = centroids.map(f16::from_f64);
    lut.sort_by(|a, b| a.to_f64().total_cmp(&b.to_f64()));
    lut
}

fn kmeans(sorted: &[f64]) -> [f64; ENTRIES] {
    let n = sorted.len();
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0.0f64);
    for &v in sorted {
        prefix.push(prefix[prefix.len() - 1] + v);
    }
    let mut centroids: [f64; ENTRIES] =
        std::array::from_fn(|j| sorted[((2 * j + 1) * n / (2 * ENTRIES)).min(n - 1)]);
    for _ in 0..ITERATIONS {
        let mut next = centroids;
        let mut start = 0usize;
        for j in 0..ENTRIES {
            let end = if j + 1 == ENTRIES {
                n
            } else {
                let bound = (centroids[j] + centroids[j + 1]) / 2.0;
                start + sorted[start..].partition_point(|&v| v <= bound)
            };
            if end > start {
                next[j] = (prefix[end] - prefix[start]) / (end - start) as f64;
            }
            start = end;
        }
        next.sort_by(f64::total_cmp);
        if next == centroids {
            break;
        }
        centroids = next;
    }
    centroids
}
