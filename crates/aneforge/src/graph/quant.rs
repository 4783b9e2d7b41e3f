//! Block-quantized constant data: a `[rows, cols]` f32 constant stored as 4- or 8-bit integers
//! with one scale (and optionally one offset) per block of `block` columns,
//! `value = scale · (q − offset)` — MIL's `constexpr_blockwise_shift_scale`. Pre-quantized weights
//! (GGUF's block types) keep their form through lowering; engines that can compute on it do.

use std::sync::Arc;

use super::{DeferredF32, GraphError};

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

/// Values held in memory or read when needed: the packed integers (`u8`, [`DeferredBytes`]) and
/// the per-block scales and offsets (`f32`, [`DeferredF32`]).
#[derive(Debug)]
enum Stored<T: 'static, D: ?Sized> {
    Owned(Arc<[T]>),
    Deferred(Arc<D>),
}

impl<T, D: ?Sized> Clone for Stored<T, D> {
    fn clone(&self) -> Self {
        match self {
            Stored::Owned(v) => Stored::Owned(v.clone()),
            Stored::Deferred(d) => Stored::Deferred(d.clone()),
        }
    }
}

/// The packed integers.
type Data = Stored<u8, dyn DeferredBytes>;
/// Scales or offsets, row-major `[rows, cols / block]`.
type Params = Stored<f32, dyn DeferredF32>;

/// A deferred source of `T`s, read by range.
trait Source<T> {
    fn len(&self) -> usize;
    fn read(&self, start: usize, out: &mut [T]) -> Result<(), String>;
}

impl Source<u8> for dyn DeferredBytes {
    fn len(&self) -> usize {
        DeferredBytes::len(self)
    }
    fn read(&self, start: usize, out: &mut [u8]) -> Result<(), String> {
        DeferredBytes::read(self, start, out)
    }
}

impl Source<f32> for dyn DeferredF32 {
    fn len(&self) -> usize {
        DeferredF32::len(self)
    }
    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
        DeferredF32::read(self, start, out)
    }
}

impl<T: Copy + 'static, D: Source<T> + ?Sized> Stored<T, D> {
    fn len(&self) -> usize {
        match self {
            Stored::Owned(v) => v.len(),
            Stored::Deferred(d) => d.len(),
        }
    }

    fn read(&self, start: usize, out: &mut [T]) -> Result<(), GraphError> {
        match self {
            Stored::Owned(v) => {
                out.copy_from_slice(&v[start..start + out.len()]);
                Ok(())
            }
            Stored::Deferred(d) => d.read(start, out).map_err(GraphError::ConstantData),
        }
    }

    /// Every value (read, when deferred).
    fn all(&self) -> Result<Arc<[T]>, GraphError>
    where
        T: Default,
    {
        match self {
            Stored::Owned(v) => Ok(v.clone()),
            Stored::Deferred(_) => {
                let mut out = vec![T::default(); self.len()];
                self.read(0, &mut out)?;
                Ok(out.into())
            }
        }
    }

    /// Identifies the values (the same for clones of one source).
    fn key(&self) -> usize {
        match self {
            Stored::Owned(v) => Arc::as_ptr(v) as *const T as usize,
            Stored::Deferred(d) => Arc::as_ptr(d) as *const u8 as usize,
        }
    }

    /// Held values by value; deferred ones when they are the same source.
    fn same(&self, other: &Self) -> bool
    where
        T: PartialEq,
    {
        match (self, other) {
            (Stored::Owned(a), Stored::Owned(b)) => a == b,
            (Stored::Deferred(a), Stored::Deferred(b)) => {
                std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
            }
            _ => false,
        }
    }
}

/// Rows picked from deferred values (each `row_len` long), read on demand.
#[derive(Debug)]
struct PickedRows<S> {
    source: S,
    rows: Vec<usize>,
    row_len: usize,
}

impl<T: Copy + Default + 'static, D: Source<T> + ?Sized> PickedRows<Stored<T, D>> {
    fn len(&self) -> usize {
        self.rows.len() * self.row_len
    }

    fn read(&self, start: usize, out: &mut [T]) -> Result<(), String> {
        let source = |at: usize, o: &mut [T]| self.source.read(at, o).map_err(|e| e.to_string());
        super::read_picked(&self.rows, self.row_len, source, start, out)
    }
}

/// Parts read one after another.
#[derive(Debug)]
struct Stacked<S> {
    parts: Vec<S>,
}

impl<T: Copy + 'static, D: Source<T> + ?Sized> Stacked<Stored<T, D>> {
    fn len(&self) -> usize {
        self.parts.iter().map(Stored::len).sum()
    }

    fn read(&self, start: usize, out: &mut [T]) -> Result<(), String> {
        let done = super::read_concatenated(
            &self.parts,
            Stored::len,
            |p, at, o| p.read(at, o).map_err(|e| e.to_string()),
            start,
            out,
        )?;
        if done != out.len() {
            return Err(format!(
                "values {start}..{} lie past the {} stacked values",
                start + out.len(),
                self.len()
            ));
        }
        Ok(())
    }
}

macro_rules! deferred_impls {
    ($trait:ident, $t:ty) => {
        impl $trait for PickedRows<Stored<$t, dyn $trait>> {
            fn len(&self) -> usize {
                PickedRows::len(self)
            }
            fn read(&self, start: usize, out: &mut [$t]) -> Result<(), String> {
                PickedRows::read(self, start, out)
            }
        }
        impl $trait for Stacked<Stored<$t, dyn $trait>> {
            fn len(&self) -> usize {
                Stacked::len(self)
            }
            fn read(&self, start: usize, out: &mut [$t]) -> Result<(), String> {
                Stacked::read(self, start, out)
            }
        }
    };
}
deferred_impls!(DeferredBytes, u8);
deferred_impls!(DeferredF32, f32);

/// Scales or offsets for [`BlockQuantized`]: held, or read when needed (so that a program's
/// weights blob holds their only copy, as for deferred integers).
#[derive(Clone, Debug)]
pub enum BlockParams {
    Held(Arc<[f32]>),
    Deferred(Arc<dyn DeferredF32>),
}

impl From<Vec<f32>> for BlockParams {
    fn from(v: Vec<f32>) -> BlockParams {
        BlockParams::Held(v.into())
    }
}

impl From<Arc<[f32]>> for BlockParams {
    fn from(v: Arc<[f32]>) -> BlockParams {
        BlockParams::Held(v)
    }
}

impl From<Arc<dyn DeferredF32>> for BlockParams {
    fn from(v: Arc<dyn DeferredF32>) -> BlockParams {
        BlockParams::Deferred(v)
    }
}

impl From<BlockParams> for Params {
    fn from(p: BlockParams) -> Params {
        match p {
            BlockParams::Held(v) => Stored::Owned(v),
            BlockParams::Deferred(d) => Stored::Deferred(d),
        }
    }
}

/// `rows · cols` values packed row-major as MIL stores them (4-bit: two per byte, the even column
/// in the low nibble), `scale` and `offset` row-major `[rows, cols / block]`. Each is in memory or
/// deferred ([`BlockQuantized::deferred`], [`BlockParams::Deferred`]).
#[derive(Clone, Debug)]
pub struct BlockQuantized {
    format: QuantFormat,
    rows: usize,
    cols: usize,
    block: usize,
    data: Data,
    scale: Params,
    offset: Option<Params>,
}

/// Equal geometry, parameters and packed values; deferred values are equal when they are the
/// same source.
impl PartialEq for BlockQuantized {
    fn eq(&self, other: &Self) -> bool {
        let offsets = match (&self.offset, &other.offset) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same(b),
            _ => false,
        };
        self.data.same(&other.data)
            && (self.format, self.rows, self.cols, self.block)
                == (other.format, other.rows, other.cols, other.block)
            && self.scale.same(&other.scale)
            && offsets
    }
}

impl BlockQuantized {
    pub fn new(
        format: QuantFormat,
        rows: usize,
        cols: usize,
        block: usize,
        data: impl Into<Arc<[u8]>>,
        scale: impl Into<BlockParams>,
        offset: Option<BlockParams>,
    ) -> Result<BlockQuantized, GraphError> {
        let data = Data::Owned(data.into());
        let (scale, offset) = (scale.into().into(), offset.map(Into::into));
        Self::with_data(format, rows, cols, block, data, scale, offset)
    }

    /// [`BlockQuantized::new`] with the packed values read from `data` when needed.
    pub fn deferred(
        format: QuantFormat,
        rows: usize,
        cols: usize,
        block: usize,
        data: Arc<dyn DeferredBytes>,
        scale: impl Into<BlockParams>,
        offset: Option<BlockParams>,
    ) -> Result<BlockQuantized, GraphError> {
        let data = Data::Deferred(data);
        let (scale, offset) = (scale.into().into(), offset.map(Into::into));
        Self::with_data(format, rows, cols, block, data, scale, offset)
    }

    fn with_data(
        format: QuantFormat,
        rows: usize,
        cols: usize,
        block: usize,
        data: Data,
        scale: Params,
        offset: Option<Params>,
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
        self.data.key()
    }

    /// Identifies the scales and the offsets (0 without), as [`BlockQuantized::data_key`].
    pub fn params_keys(&self) -> [usize; 2] {
        [
            self.scale.key(),
            self.offset.as_ref().map_or(0, Params::key),
        ]
    }

    /// Whether the packed values are read when needed rather than held.
    pub fn is_deferred(&self) -> bool {
        matches!(self.data, Data::Deferred(_))
    }

    /// Whether the scales and offsets are read when needed rather than held.
    pub fn params_deferred(&self) -> bool {
        matches!(self.scale, Params::Deferred(_))
            || matches!(self.offset, Some(Params::Deferred(_)))
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

    /// Every block's scale (read, when deferred).
    pub fn scale(&self) -> Result<Arc<[f32]>, GraphError> {
        self.scale.all()
    }

    /// Every block's offset (read, when deferred), or `None` without offsets.
    pub fn offset(&self) -> Result<Option<Arc<[f32]>>, GraphError> {
        self.offset.as_ref().map(Params::all).transpose()
    }

    /// Scales (or, with `offsets`, offsets) `start..start + out.len()` into `out`; asking for the
    /// offsets of a matrix without them is an error.
    pub fn read_params(
        &self,
        offsets: bool,
        start: usize,
        out: &mut [f32],
    ) -> Result<(), GraphError> {
        let params = if offsets {
            self.offset.as_ref().ok_or_else(|| GraphError::Attribute {
                op: "block_quantized",
                message: "offsets read from a matrix without offsets".into(),
            })?
        } else {
            &self.scale
        };
        if start + out.len() > params.len() {
            return Err(GraphError::Attribute {
                op: "block_quantized",
                message: format!(
                    "parameters {start}..{} of {}",
                    start + out.len(),
                    params.len()
                ),
            });
        }
        params.read(start, out)
    }

    pub fn has_offset(&self) -> bool {
        self.offset.is_some()
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
        let nb = self.blocks_per_row();
        let mut scale = vec![0.0; nb];
        self.scale.read(r * nb, &mut scale)?;
        let offset = match &self.offset {
            Some(o) => {
                let mut v = vec![0.0; nb];
                o.read(r * nb, &mut v)?;
                Some(v)
            }
            None => None,
        };
        self.dequantize_packed(row, &scale, offset.as_deref(), out);
        Ok(())
    }

    /// A row whose packed values are `row` and whose blocks' parameters are `scale` and
    /// `offset`, as f32 into `out[..cols]`.
    fn dequantize_packed(
        &self,
        row: &[u8],
        scale: &[f32],
        offset: Option<&[f32]>,
        out: &mut [f32],
    ) {
        for (c, o) in out.iter_mut().enumerate().take(self.cols) {
            let b = c / self.block;
            let off = offset.map_or(0.0, |o| o[b]);
            *o = scale[b] * (self.q_in(row, c) as f32 - off);
        }
    }

    pub fn dequantize(&self) -> Result<Vec<f32>, GraphError> {
        let data = self.data()?;
        let (scale, offset) = (self.scale()?, self.offset()?);
        let (rb, nb) = (self.row_bytes(), self.blocks_per_row());
        let mut out = vec![0.0; self.rows * self.cols];
        for (r, row) in out.chunks_exact_mut(self.cols).enumerate() {
            let params = r * nb..(r + 1) * nb;
            let offset = offset.as_ref().map(|o| &o[params.clone()]);
            self.dequantize_packed(&data[r * rb..(r + 1) * rb], &scale[params], offset, row);
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
        let data = match &self.data {
            Data::Owned(v) => Data::Owned(pick(v, perm, self.row_bytes())),
            Data::Deferred(_) => Data::Deferred(Arc::new(PickedRows {
                source: self.data.clone(),
                rows: perm.to_vec(),
                row_len: self.row_bytes(),
            })),
        };
        let nb = self.blocks_per_row();
        let params = |p: &Params| -> Params {
            match p {
                Params::Owned(v) => Params::Owned(pick(v, perm, nb)),
                Params::Deferred(_) => Params::Deferred(Arc::new(PickedRows {
                    source: p.clone(),
                    rows: perm.to_vec(),
                    row_len: nb,
                })),
            }
        };
        Self::with_data(
            self.format,
            perm.len(),
            self.cols,
            self.block,
            data,
            params(&self.scale),
            self.offset.as_ref().map(params),
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
        let data = stack(parts.iter().map(|p| &p.data), |s| {
            Data::Deferred(Arc::new(s))
        });
        let scale = stack(parts.iter().map(|p| &p.scale), |s| {
            Params::Deferred(Arc::new(s))
        });
        let offset = first.offset.as_ref().map(|_| {
            let offsets = parts.iter().filter_map(|p| p.offset.as_ref());
            stack(offsets, |s| Params::Deferred(Arc::new(s)))
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

/// Rows `perm` (each `row_len` values) of `v`, in order.
fn pick<T: Copy>(v: &[T], perm: &[usize], row_len: usize) -> Arc<[T]> {
    perm.iter()
        .flat_map(|&p| v[p * row_len..(p + 1) * row_len].iter().copied())
        .collect()
}

/// `parts` one after another: held when every part is, else read part by part when needed.
fn stack<'a, T: Copy + 'static, D: ?Sized + 'a>(
    parts: impl Iterator<Item = &'a Stored<T, D>> + Clone,
    deferred: impl FnOnce(Stacked<Stored<T, D>>) -> Stored<T, D>,
) -> Stored<T, D> {
    let held: Option<Vec<&Arc<[T]>>> = parts
        .clone()
        .map(|p| match p {
            Stored::Owned(v) => Some(v),
            Stored::Deferred(_) => None,
        })
        .collect();
    match held {
        Some(vs) => Stored::Owned(vs.iter().flat_map(|v| v.iter().copied()).collect()),
        None => deferred(Stacked {
            parts: parts.cloned().collect(),
        }),
    }
}
