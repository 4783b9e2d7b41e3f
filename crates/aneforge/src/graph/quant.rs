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

/// Quantized integers produced on demand (converted from a model file's blocks, say) instead of
/// held in memory, so that a program's weights blob holds the only copy (as [`super::DeferredF32`]
/// does for f32 values). Every read of the same range returns the same bytes.
pub trait DeferredBytes: Send + Sync + std::fmt::Debug {
    /// Number of bytes.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `start..start + out.len()` into `out`; the error names where the bytes live.
    fn read(&self, start: usize, out: &mut [u8]) -> Result<(), String>;
}

/// The packed integers: in memory, or read when needed.
#[derive(Clone, Debug)]
enum Data {
    Owned(Arc<[u8]>),
    Deferred(Arc<dyn DeferredBytes>),
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::Owned(v) => v.len(),
            Data::Deferred(d) => d.len(),
        }
    }

    fn read(&self, start: usize, out: &mut [u8]) -> Result<(), GraphError> {
        match self {
            Data::Owned(v) => {
                out.copy_from_slice(&v[start..start + out.len()]);
                Ok(())
            }
            Data::Deferred(d) => d.read(start, out).map_err(GraphError::ConstantData),
        }
    }
}

/// Rows picked from deferred data (each `row_bytes` long), read on demand.
#[derive(Debug)]
struct PickedRows {
    source: Data,
    rows: Vec<usize>,
    row_bytes: usize,
}

/// Deferred parts read one after another.
#[derive(Debug)]
struct Stacked {
    parts: Vec<Data>,
}

impl DeferredBytes for PickedRows {
    fn len(&self) -> usize {
        self.rows.len() * self.row_bytes
    }

    fn read(&self, start: usize, out: &mut [u8]) -> Result<(), String> {
        let rb = self.row_bytes;
        let mut at = start;
        let mut done = 0;
        while done < out.len() {
            let (i, within) = (at / rb, at % rb);
            let row = *self
                .rows
                .get(i)
                .ok_or_else(|| format!("byte {at} past {} picked rows", self.rows.len()))?;
            let take = (rb - within).min(out.len() - done);
            self.source
                .read(row * rb + within, &mut out[done..done + take])
                .map_err(|e| e.to_string())?;
            done += take;
            at += take;
        }
        Ok(())
    }
}

impl DeferredBytes for Stacked {
    fn len(&self) -> usize {
        self.parts.iter().map(Data::len).sum()
    }

    fn read(&self, start: usize, out: &mut [u8]) -> Result<(), String> {
        let done = super::read_concatenated(
            &self.parts,
            Data::len,
            |p, at, o| p.read(at, o).map_err(|e| e.to_string()),
            start,
            out,
        )?;
        if done != out.len() {
            return Err(format!(
                "bytes {start}..{} lie past the {} stacked bytes",
                start + out.len(),
                self.len()
            ));
        }
        Ok(())
    }
}

/// `rows · cols` values packed row-major as MIL stores them (4-bit: two per byte, the even column
/// in the low nibble), `scale` and `offset` row-major `[rows, cols / block]`. The packed values
/// are in memory or deferred ([`BlockQuantized::deferred`]); scales and offsets are in memory.
#[derive(Clone, Debug)]
pub struct BlockQuantized {
    format: QuantFormat,
    rows: usize,
    cols: usize,
    block: usize,
    data: Data,
    scale: Arc<[f32]>,
    offset: Option<Arc<[f32]>>,
}

/// Equal geometry, parameters and packed values; deferred values are equal when they are the
/// same source.
impl PartialEq for BlockQuantized {
    fn eq(&self, other: &Self) -> bool {
        let data = match (&self.data, &other.data) {
            (Data::Owned(a), Data::Owned(b)) => a == b,
            (Data::Deferred(a), Data::Deferred(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        data && (self.format, self.rows, self.cols, self.block)
            == (other.format, other.rows, other.cols, other.block)
            && self.scale == other.scale
            && self.offset == other.offset
    }
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
        let data = Data::Owned(data.into());
        Self::with_data(format, rows, cols, block, data, scale.into(), offset)
    }

    /// [`BlockQuantized::new`] with the packed values read from `data` when needed.
    pub fn deferred(
        format: QuantFormat,
        rows: usize,
        cols: usize,
        block: usize,
        data: Arc<dyn DeferredBytes>,
        scale: impl Into<Arc<[f32]>>,
        offset: Option<Arc<[f32]>>,
    ) -> Result<BlockQuantized, GraphError> {
        let data = Data::Deferred(data);
        Self::with_data(format, rows, cols, block, data, scale.into(), offset)
    }

    fn with_data(
        format: QuantFormat,
        rows: usize,
        cols: usize,
        block: usize,
        data: Data,
        scale: Arc<[f32]>,
        offset: Option<Arc<[f32]>>,
    ) -> Result<BlockQuantized, GraphError> {
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
    /// Identifies the packed values (the same for clones and reshapes of one matrix).
    pub fn data_key(&self) -> usize {
        match &self.data {
            Data::Owned(v) => Arc::as_ptr(v) as *const u8 as usize,
            Data::Deferred(d) => Arc::as_ptr(d) as *const u8 as usize,
        }
    }

    /// Whether the packed values are read when needed rather than held.
    pub fn is_deferred(&self) -> bool {
        matches!(self.data, Data::Deferred(_))
    }

    /// The packed values (read, when deferred).
    pub fn data(&self) -> Result<Vec<u8>, GraphError> {
        let mut out = vec![0; self.data.len()];
        self.data.read(0, &mut out)?;
        Ok(out)
    }

    /// The packed values of rows `start..start + out.len() / row_bytes`.
    pub fn read_rows(&self, start: usize, out: &mut [u8]) -> Result<(), GraphError> {
        self.data.read(start * self.row_bytes(), out)
    }

    /// The same values as `[rows, cols]`, which must hold the same elements in whole blocks
    /// (rows are stored one after another, so nothing moves).
    pub fn reshaped(&self, rows: usize, cols: usize) -> Result<BlockQuantized, GraphError> {
        if rows * cols != self.rows * self.cols {
            return Err(GraphError::Attribute {
                op: "block_quantized",
                message: format!("{}x{} values viewed as {rows}x{cols}", self.rows, self.cols),
            });
        }
        Self::with_data(
            self.format,
            rows,
            cols,
            self.block,
            self.data.clone(),
            self.scale.clone(),
            self.offset.clone(),
        )
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

    /// The integer at column `c` of a row's packed values.
    pub fn q_in(&self, row: &[u8], c: usize) -> i32 {
        match self.format {
            QuantFormat::U4 => i32::from((row[c / 2] >> (4 * (c % 2))) & 15),
            QuantFormat::I4 => i32::from((((row[c / 2] >> (4 * (c % 2))) & 15) << 4) as i8 >> 4),
            QuantFormat::U8 => i32::from(row[c]),
            QuantFormat::I8 => i32::from(row[c] as i8),
        }
    }

    /// The integer at (`r`, `c`) (reads the row when deferred).
    pub fn q(&self, r: usize, c: usize) -> Result<i32, GraphError> {
        let rb = self.row_bytes();
        let v = match &self.data {
            Data::Owned(v) => self.q_in(&v[r * rb..(r + 1) * rb], c),
            Data::Deferred(_) => {
                let mut row = vec![0; rb];
                self.read_rows(r, &mut row)?;
                self.q_in(&row, c)
            }
        };
        Ok(v)
    }

    /// Row `r` as f32 into `out[..cols]`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), GraphError> {
        let rb = self.row_bytes();
        let mut read;
        let row: &[u8] = match &self.data {
            Data::Owned(v) => &v[r * rb..(r + 1) * rb],
            Data::Deferred(_) => {
                read = vec![0; rb];
                self.read_rows(r, &mut read)?;
                &read
            }
        };
        self.dequantize_packed(r, row, out);
        Ok(())
    }

    /// Row `r`, whose packed values are `row`, as f32 into `out[..cols]`.
    fn dequantize_packed(&self, r: usize, row: &[u8], out: &mut [f32]) {
        let nb = self.blocks_per_row();
        for (c, o) in out.iter_mut().enumerate().take(self.cols) {
            let b = r * nb + c / self.block;
            let off = self.offset.as_ref().map_or(0.0, |o| o[b]);
            *o = self.scale[b] * (self.q_in(row, c) as f32 - off);
        }
    }

    pub fn dequantize(&self) -> Result<Vec<f32>, GraphError> {
        let data = self.data()?;
        let rb = self.row_bytes();
        let mut out = vec![0.0; self.rows * self.cols];
        for (r, row) in out.chunks_exact_mut(self.cols).enumerate() {
            self.dequantize_packed(r, &data[r * rb..(r + 1) * rb], row);
        }
        Ok(out)
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
        let data = match &self.data {
            Data::Owned(v) => Data::Owned(
                perm.iter()
                    .flat_map(|&p| v[p * rb..(p + 1) * rb].iter().copied())
                    .collect(),
            ),
            Data::Deferred(_) => Data::Deferred(Arc::new(PickedRows {
                source: self.data.clone(),
                rows: perm.to_vec(),
                row_bytes: rb,
            })),
        };
        let pick = |v: &[f32]| -> Arc<[f32]> {
            perm.iter()
                .flat_map(|&p| v[p * nb..(p + 1) * nb].iter().copied())
                .collect()
        };
        Self::with_data(
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
        let owned: Option<Vec<&Arc<[u8]>>> = parts
            .iter()
            .map(|p| match &p.data {
                Data::Owned(v) => Some(v),
                Data::Deferred(_) => None,
            })
            .collect();
        let data = match owned {
            Some(vs) => Data::Owned(vs.iter().flat_map(|v| v.iter().copied()).collect()),
            None => Data::Deferred(Arc::new(Stacked {
                parts: parts.iter().map(|p| p.data.clone()).collect(),
            })),
        };
        let scale: Arc<[f32]> = parts.iter().flat_map(|p| p.scale.iter().copied()).collect();
        let offset: Option<Arc<[f32]>> = first.offset.as_ref().map(|_| {
            parts
                .iter()
                .flat_map(|p| p.offset.iter().flat_map(|o| o.iter().copied()))
                .collect()
        });
        Self::with_data(
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
