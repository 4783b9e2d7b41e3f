//! A weight matrix `[rows, cols]` as a model stores it: dense f32, or GGUF blocks kept quantized.
//! GGUF's Q4_0, Q4_1 and Q8_0 blocks of 32 map exactly onto MIL's blockwise shift-scale form:
//! Q4_0 `d·(q − 8)` as int4 `q − 8` with scale `d`; Q4_1 `d·q + m` as uint4 `q` with scale `d` and
//! offset `−m/d` (a block with `d = 0` holds `m` everywhere: `q = 1`, scale `m`, offset 0); Q8_0
//! `d·q` as int8. Nibbles are re-packed from ggml's order (byte `j` holds elements `j` and
//! `j + 16`) to MIL's (byte `i` holds elements `2i` and `2i + 1`).

use std::sync::Arc;

use aneforge::graph::{self, BlockQuantized, HostArray, QuantFormat, Tensor};

use super::LlmError;
use crate::gguf::{BlockQ4_0, BlockQ4_1, BlockQ8_0, GgmlType, GgufFile};

#[derive(Clone, Debug)]
pub enum Matrix {
    Dense(HostArray),
    Quant(BlockQuantized),
}

/// Packs 32 values (0..15) of one block in MIL's nibble order.
fn pack_nibbles(q: impl Fn(usize) -> u8, out: &mut Vec<u8>) {
    for i in 0..16 {
        out.push((q(2 * i) & 15) | ((q(2 * i + 1) & 15) << 4));
    }
}

/// ggml's nibble for element `e` of a 32-element block.
fn ggml_nibble(qs: &[u8; 16], e: usize) -> u8 {
    if e < 16 {
        qs[e] & 15
    } else {
        qs[e - 16] >> 4
    }
}

impl Matrix {
    pub fn rows(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.shape().first().copied().unwrap_or(0),
            Matrix::Quant(q) => q.rows(),
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.shape().get(1).copied().unwrap_or(0),
            Matrix::Quant(q) => q.cols(),
        }
    }

    /// Bytes a program stores for this matrix.
    pub fn stored_bytes(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.len() * 4,
            Matrix::Quant(q) => q.stored_bytes(),
        }
    }

    /// The quantized form of a GGUF tensor, or `None` when its type is not kept quantized.
    pub fn from_gguf_blocks(
        file: &Arc<GgufFile>,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<Matrix>, LlmError> {
        let info = file.require_tensor(name)?;
        if info.shape() != [rows, cols] || !cols.is_multiple_of(32) {
            return Ok(None);
        }
        let nb = rows * cols / 32;
        let mut data = Vec::with_capacity(rows * cols / 2);
        let mut scale = Vec::with_capacity(nb);
        let bad = |e: aneforge::GraphError| {
            LlmError::Invalid(format!("{}: tensor '{name}': {e}", file.path().display()))
        };
        let q = match info.ggml_type {
            GgmlType::Q4_0 => {
                for b in file.blocks::<BlockQ4_0>(name)? {
                    // int4 q − 8, two's complement nibbles
                    pack_nibbles(|e| ggml_nibble(&b.qs, e).wrapping_sub(8) & 15, &mut data);
                    scale.push(b.d.to_f32());
                }
                BlockQuantized::new(QuantFormat::I4, rows, cols, 32, data, scale, None)
                    .map_err(bad)?
            }
            GgmlType::Q4_1 => {
                let mut offset = Vec::with_capacity(nb);
                for b in file.blocks::<BlockQ4_1>(name)? {
                    let (d, m) = (b.d.to_f32(), b.m.to_f32());
                    if d == 0.0 || !(m / d).is_finite() {
                        pack_nibbles(|_| 1, &mut data);
                        scale.push(m);
                        offset.push(0.0);
                    } else {
                        pack_nibbles(|e| ggml_nibble(&b.qs, e), &mut data);
                        scale.push(d);
                        offset.push(-m / d);
                    }
                }
                BlockQuantized::new(
                    QuantFormat::U4,
                    rows,
                    cols,
                    32,
                    data,
                    scale,
                    Some(offset.into()),
                )
                .map_err(bad)?
            }
            GgmlType::Q8_0 => {
                for b in file.blocks::<BlockQ8_0>(name)? {
                    data.extend(b.qs.iter().map(|&v| v as u8));
                    scale.push(b.d.to_f32());
                }
                BlockQuantized::new(QuantFormat::I8, rows, cols, 32, data, scale, None)
                    .map_err(bad)?
            }
            _ => return Ok(None),
        };
        Ok(Some(Matrix::Quant(q)))
    }

    /// Symmetric block quantization (blocks of 32, one scale each, as ggml's Q8_0 and Q4_0):
    /// `d = max|x| / 127` for int8; for int4 `d = x_max / −8` with `x_max` the value of largest
    /// magnitude, `q = round(x / d)` (half to even) clamped to the format's range. Rows that do not split into
    /// blocks of 32 stay as they are.
    pub fn quantize(&self, format: QuantFormat) -> Result<Matrix, LlmError> {
        let (rows, cols) = (self.rows(), self.cols());
        if !cols.is_multiple_of(32)
            || format.bits() == 4 && format != QuantFormat::I4
            || format == QuantFormat::U8
        {
            return Ok(self.clone());
        }
        let dense = match self {
            Matrix::Dense(a) => a.as_f32().unwrap_or(&[]).to_vec(),
            Matrix::Quant(q) => q.dequantize(),
        };
        let (lo, hi) = format.range();
        let mut q = Vec::with_capacity(rows * cols);
        let mut scale = Vec::with_capacity(rows * cols / 32);
        for block in dense.chunks_exact(32) {
            let extreme = block
                .iter()
                .copied()
                .fold(0.0f32, |m, x| if x.abs() > m.abs() { x } else { m });
            let d = if format == QuantFormat::I8 {
                extreme.abs() / 127.0
            } else {
                extreme / -8.0
            };
            let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
            q.extend(
                block
                    .iter()
                    .map(|&x| ((x * inv).round_ties_even() as i32).clamp(lo, hi)),
            );
            scale.push(d);
        }
        let data: Vec<u8> = match format {
            QuantFormat::I4 => q
                .chunks_exact(2)
                .map(|p| ((p[0] & 15) | ((p[1] & 15) << 4)) as u8)
                .collect(),
            _ => q.iter().map(|&v| v as i8 as u8).collect(),
        };
        let bad = |e: aneforge::GraphError| {
            LlmError::Internal(format!("quantizing a {rows}x{cols} matrix: {e}"))
        };
        Ok(Matrix::Quant(
            BlockQuantized::new(format, rows, cols, 32, data, scale, None).map_err(bad)?,
        ))
    }

    /// The graph constant holding this matrix.
    pub fn constant(&self) -> Result<Tensor, LlmError> {
        match self {
            Matrix::Dense(a) => Ok(graph::constant(a.clone())),
            Matrix::Quant(q) => Ok(graph::constant(HostArray::from_block_quantized(q.clone())?)),
        }
    }

    /// Rows of all parts, in order (their column counts must agree).
    pub fn concat_rows(parts: &[Matrix]) -> Result<Matrix, LlmError> {
        let cols = parts.first().map_or(0, Matrix::cols);
        if parts.iter().any(|p| p.cols() != cols) {
            return Err(LlmError::Internal(format!(
                "concatenating matrices with column counts {:?}",
                parts.iter().map(Matrix::cols).collect::<Vec<_>>()
            )));
        }
        let quant: Vec<&BlockQuantized> = parts
            .iter()
            .filter_map(|p| match p {
                Matrix::Quant(q) => Some(q),
                Matrix::Dense(_) => None,
            })
            .collect();
        let compatible = quant.len() == parts.len()
            && quant.windows(2).all(|w| {
                w[0].format() == w[1].format()
                    && w[0].block() == w[1].block()
                    && w[0].offset().is_some() == w[1].offset().is_some()
            });
        if compatible {
            return Ok(Matrix::Quant(BlockQuantized::concat_rows(&quant)?));
        }
        // mixed storage: everything dense
        let rows: usize = parts.iter().map(Matrix::rows).sum();
        let mut data = Vec::with_capacity(rows * cols);
        for p in parts {
            match p {
                Matrix::Dense(a) => data.extend_from_slice(a.as_f32().unwrap_or(&[])),
                Matrix::Quant(q) => data.extend(q.dequantize()),
            }
        }
        Ok(Matrix::Dense(HostArray::from_f32(&[rows, cols], data)?))
    }

    /// Row `r` of the result is row `perm[r]` of `self`.
    pub fn permute_rows(&self, perm: &[usize]) -> Result<Matrix, LlmError> {
        let (rows, cols) = (self.rows(), self.cols());
        if perm.len() != rows || perm.iter().any(|&p| p >= rows) {
            return Err(LlmError::Internal(format!(
                "row permutation of {} rows for {rows}",
                perm.len()
            )));
        }
        match self {
            Matrix::Dense(a) => {
                let v = a.as_f32().unwrap_or(&[]);
                let mut out = Vec::with_capacity(rows * cols);
                for &p in perm {
                    out.extend_from_slice(&v[p * cols..(p + 1) * cols]);
                }
                Ok(Matrix::Dense(HostArray::from_f32(&[rows, cols], out)?))
            }
            Matrix::Quant(q) => Ok(Matrix::Quant(q.permute_rows(perm)?)),
        }
    }

    /// Row `r` as f32 (an embedding lookup on the host).
    pub fn row_f32(&self, r: usize, out: &mut [f32]) -> Result<(), LlmError> {
        let cols = self.cols();
        if r >= self.rows() || out.len() != cols {
            return Err(LlmError::TokenOutOfRange {
                id: r as u64,
                vocab: self.rows(),
            });
        }
        match self {
            Matrix::Dense(a) => {
                out.copy_from_slice(&a.as_f32().unwrap_or(&[])[r * cols..(r + 1) * cols]);
            }
            Matrix::Quant(q) => q.dequantize_row(r, out),
        }
        Ok(())
    }
}
