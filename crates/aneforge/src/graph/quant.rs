//! Block-quantized constant data: a `[rows, cols]` f32 constant stored as 4- or 8-bit integers
//! with one scale (and optionally one offset) per block of `block` columns,
//! `value = scale · (q − offset)` — MIL's `constexpr_blockwise_shift_scale`. Pre-quantized weights
//! (GGUF's block types) keep their form through lowering; engines that can compute on it do.

use std::sync::Arc;

use super::GraphError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    U4,
    I4,
    U8,
    I8,
}

impl QuantFormat {
    pub fn bits(self) -> usize {
        match self {
            QuantFormat::U4 | QuantFormat::I4 => 4,
            QuantFormat::U8 | QuantFormat::I8 => 8,
        }
    }

    /// The integer range of `q`.
    pub fn range(self) -> (i32, i32) {
        match self {
            QuantFormat::U4 => (0, 15),
            QuantFormat::I4 => (-8, 7),
            QuantFormat::U8 => (0, 255),
            QuantFormat::I8 => (-128, 127),
        }
    }
}

/// `rows · cols` values packed row-major as MIL stores them (4-bit: two per byte, the even column
/// in the low nibble), `scale` and `offset` row-major `[rows, cols / block]`.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockQuantized {
    format: QuantFormat,
    rows: usize,
    cols: usize,
    block: usize,
    data: Arc<[u8]>,
    scale: Arc<[f32]>,
    offset: Option<Arc<[f32]>>,
}

impl BlockQuantized {
    pub fn new(
        format: QuantFormat,
        rows: usize,
        cols: usize,
        block: usize,
        data: impl Into<Arc<[u8]>>,
        scale: impl Into<Arc<[f32]>>,
        offset: Option<Arc<[f32]>>,
    ) -> Result<BlockQuantized, GraphError> {
        let (data, scale) = (data.into(), scale.into());
        let bad = |message: String| GraphError::Attribute {
            op: "block_quantized",
            message,
        };
        if rows == 0 || cols == 0 || block == 0 || !cols.is_multiple_of(block) {
            return Err(bad(format!(
                "blocks of {block} must tile {cols} columns ({rows} rows)"
            )));
        }
        if format.bits() == 4 && !cols.is_multiple_of(2) {
            return Err(bad(format!(
                "4-bit rows need an even column count, found {cols}"
            )));
        }
        let bytes = rows
            .checked_mul(cols)
            .map(|n| n * format.bits() / 8)
            .ok_or_else(|| bad("element count overflows".into()))?;
        let blocks = rows * (cols / block);
        if data.len() != bytes {
            return Err(bad(format!(
                "{} data bytes for {rows}x{cols} {format:?} values, expected {bytes}",
                data.len()
            )));
        }
        if scale.len() != blocks || offset.as_ref().is_some_and(|o| o.len() != blocks) {
            return Err(bad(format!(
                "scales and offsets must hold {blocks} values (one per block)"
            )));
        }
        Ok(BlockQuantized {
            format,
            rows,
            cols,
            block,
            data,
            scale,
            offset,
        })
    }

    pub fn format(&self) -> QuantFormat {
        self.format
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn block(&self) -> usize {
        self.block
    }
    pub fn data(&self) -> &Arc<[u8]> {
        &self.data
    }
    pub fn scale(&self) -> &Arc<[f32]> {
        &self.scale
    }
    pub fn offset(&self) -> Option<&Arc<[f32]>> {
        self.offset.as_ref()
    }

    pub fn blocks_per_row(&self) -> usize {
        self.cols / self.block
    }

    pub fn row_bytes(&self) -> usize {
        self.cols * self.format.bits() / 8
    }

    /// Bytes of data, scales and offsets (scales and offsets as f32).
    pub fn stored_bytes(&self) -> usize {
        let blocks = self.rows * self.blocks_per_row();
        self.data.len() + 4 * blocks * (1 + usize::from(self.offset.is_some()))
    }

    /// The integer at (`r`, `c`).
    pub fn q(&self, r: usize, c: usize) -> i32 {
        let row = &self.data[r * self.row_bytes()..(r + 1) * self.row_bytes()];
        match self.format {
            QuantFormat::U4 => i32::from((row[c / 2] >> (4 * (c % 2))) & 15),
            QuantFormat::I4 => i32::from((((row[c / 2] >> (4 * (c % 2))) & 15) << 4) as i8 >> 4),
            QuantFormat::U8 => i32::from(row[c]),
            QuantFormat::I8 => i32::from(row[c] as i8),
        }
    }

    /// Row `r` as f32 into `out[..cols]`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let nb = self.blocks_per_row();
        for (c, o) in out.iter_mut().enumerate().take(self.cols) {
            let b = r * nb + c / self.block;
            let off = self.offset.as_ref().map_or(0.0, |o| o[b]);
            *o = self.scale[b] * (self.q(r, c) as f32 - off);
        }
    }

    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.rows * self.cols];
        for (r, row) in out.chunks_exact_mut(self.cols).enumerate() {
            self.dequantize_row(r, row);
        }
        out
    }

    /// Rows `start..start + len`.
    pub fn slice_rows(&self, start: usize, len: usize) -> Result<BlockQuantized, GraphError> {
        let rows: Vec<usize> = (start..start + len).collect();
        self.pick_rows(&rows)
    }

    /// Row `i` of the result is row `perm[i]` of `self`.
    pub fn permute_rows(&self, perm: &[usize]) -> Result<BlockQuantized, GraphError> {
        if perm.len() != self.rows {
            return Err(GraphError::Attribute {
                op: "block_quantized",
                message: format!(
                    "a permutation of {} rows given for {}",
                    perm.len(),
                    self.rows
                ),
            });
        }
        self.pick_rows(perm)
    }

    /// Row `i` of the result is row `rows[i]` of `self`.
    fn pick_rows(&self, perm: &[usize]) -> Result<BlockQuantized, GraphError> {
        if let Some(bad) = perm.iter().find(|&&p| p >= self.rows) {
            return Err(GraphError::Attribute {
                op: "block_quantized",
                message: format!("row {bad} picked from {} rows", self.rows),
            });
        }
        if perm.is_empty() {
            return Err(GraphError::Attribute {
                op: "block_quantized",
                message: "no rows picked".into(),
            });
        }
        let (rb, nb) = (self.row_bytes(), self.blocks_per_row());
        let data: Vec<u8> = perm
            .iter()
            .flat_map(|&p| self.data[p * rb..(p + 1) * rb].iter().copied())
            .collect();
        let pick = |v: &[f32]| -> Arc<[f32]> {
            perm.iter()
                .flat_map(|&p| v[p * nb..(p + 1) * nb].iter().copied())
                .collect()
        };
        BlockQuantized::new(
            self.format,
            perm.len(),
            self.cols,
            self.block,
            data,
            pick(&self.scale),
            self.offset.as_ref().map(|o| pick(o)),
        )
    }

    /// The rows of all parts, in order; they must share format, columns and block size.
    pub fn concat_rows(parts: &[&BlockQuantized]) -> Result<BlockQuantized, GraphError> {
        let first = parts.first().ok_or_else(|| GraphError::Attribute {
            op: "block_quantized",
            message: "nothing to concatenate".into(),
        })?;
        let same = parts.iter().all(|p| {
            p.format == first.format
                && p.cols == first.cols
                && p.block == first.block
                && p.offset.is_some() == first.offset.is_some()
        });
        if !same {
            return Err(GraphError::Attribute {
                op: "block_quantized",
                message: "concatenated parts differ in format, columns, block size or offsets"
                    .into(),
            });
        }
        let rows = parts.iter().map(|p| p.rows).sum();
        let data: Vec<u8> = parts.iter().flat_map(|p| p.data.iter().copied()).collect();
        let scale: Arc<[f32]> = parts.iter().flat_map(|p| p.scale.iter().copied()).collect();
        let offset: Option<Arc<[f32]>> = first.offset.as_ref().map(|_| {
            parts
                .iter()
                .flat_map(|p| p.offset.iter().flat_map(|o| o.iter().copied()))
                .collect()
        });
        BlockQuantized::new(
            first.format,
            rows,
            first.cols,
            first.block,
            data,
            scale,
            offset,
        )
    }
}
