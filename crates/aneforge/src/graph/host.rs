//! Host arrays: the data of constants and parameter initial values.

use super::{BlockQuantized, DType, GraphError, MAX_RANK};
use std::sync::Arc;

/// f32 values produced on demand (read from a weights file, say) instead of held in memory: a
/// constant that is only written into a program's weights blob then never exists as a second
/// copy. Every read of the same range returns the same values.
pub trait DeferredF32: Send + Sync + std::fmt::Debug {
    /// Number of values.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values `start..start + out.len()` into `out`; the error names where the values live.
    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String>;

    /// How an fp32 program may keep these values, read as a `[len / cols, cols]` matrix, in fp16
    /// without rounding any; `None` when it may not (or checking is not worth it: an f32 source).
    fn half_storage(&self, cols: usize) -> Option<HalfStorage> {
        let _ = cols;
        None
    }
}

/// fp16 storage that holds a matrix's values exactly.
#[derive(Clone, Debug, PartialEq)]
pub enum HalfStorage {
    /// Every value is an fp16 value (the source stores fp16).
    Exact,
    /// Every value of row `r` is `2^e[r]` times an fp16 value. A bf16 value has 8 significant
    /// bits and fp16 11, so a row of bf16 values fits once scaled into fp16's exponent range
    /// ([`scaled_half_rows`]).
    Scaled(Arc<[i32]>),
}

/// Exponents `e` with every value of row `r` of `source` (`[len / cols, cols]`) equal to
/// `2^e[r]` times an fp16 value, or `None` when some row has none. Each row's largest magnitude
/// is scaled into `[2^15, 2^16)`, where every 8-bit-significand value is an fp16 value; smaller
/// values of the row stay exact down to about 2^-32 of it (fp16's subnormals). Reads the
/// source once, a span of rows at a time.
pub fn scaled_half_rows(
    source: &dyn DeferredF32,
    cols: usize,
) -> Result<Option<Arc<[i32]>>, String> {
    let len = source.len();
    if cols == 0 || !len.is_multiple_of(cols) {
        return Ok(None);
    }
    let rows = len / cols;
    let span = (PICKED_SPAN / cols).max(1);
    let mut values = vec![0f32; span.min(rows) * cols];
    let mut exponents = Vec::with_capacity(rows);
    for first in (0..rows).step_by(span) {
        let n = span.min(rows - first);
        let v = &mut values[..n * cols];
        source.read(first * cols, v)?;
        for row in v.chunks_exact(cols) {
            match row_exponent(row) {
                Some(e) => exponents.push(e),
                None => return Ok(None),
            }
        }
    }
    Ok(Some(exponents.into()))
}

/// `2^e` for `e` in f32's normal range.
pub fn power_of_two(e: i32) -> f32 {
    debug_assert!((-126..=127).contains(&e));
    f32::from_bits(((127 + e) as u32) << 23)
}

/// The exponent [`scaled_half_rows`] picks for one row, if every value is exact under it.
fn row_exponent(row: &[f32]) -> Option<i32> {
    let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    if !max.is_finite() {
        return None;
    }
    if max == 0.0 {
        return Some(0);
    }
    // the unbiased exponent of a normal f32; subnormal maxima (below 2^-126) are not worth it
    let bits = (max.to_bits() >> 23) as i32;
    if bits == 0 {
        return None;
    }
    let e = bits - 127 - 15;
    // 2^e and 2^-e are both normal f32, so scaling either way is exact
    if !(-126..=126).contains(&e) {
        return None;
    }
    let (down, up) = (power_of_two(-e), power_of_two(e));
    row.iter()
        .all(|&v| half::f16::from_f32(v * down).to_f32() * up == v)
        .then_some(e)
}

#[derive(Clone, Debug)]
pub enum HostData {
    F32(Arc<[f32]>),
    I32(Arc<[i32]>),
    Bool(Arc<[bool]>),
    /// f32 values stored block-quantized (a `[rows, cols]` array).
    BlockQuantized(Arc<BlockQuantized>),
    /// f32 values read when needed ([`HostData::values_f32`]).
    Deferred(Arc<dyn DeferredF32>),
}

impl PartialEq for HostData {
    /// Held data compares by value; deferred data is equal only to the same source.
    fn eq(&self, other: &HostData) -> bool {
        match (self, other) {
            (HostData::F32(a), HostData::F32(b)) => a == b,
            (HostData::I32(a), HostData::I32(b)) => a == b,
            (HostData::Bool(a), HostData::Bool(b)) => a == b,
            (HostData::BlockQuantized(a), HostData::BlockQuantized(b)) => a == b,
            (HostData::Deferred(a), HostData::Deferred(b)) => {
                std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
            }
            _ => false,
        }
    }
}

impl HostData {
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::Bool(v) => v.len(),
            HostData::BlockQuantized(q) => q.rows() * q.cols(),
            HostData::Deferred(d) => d.len(),
        }
    }

    /// f32 contents (dequantized, or read if deferred); `None` for integer and bool data.
    pub fn values_f32(&self) -> Result<Option<Arc<[f32]>>, GraphError> {
        Ok(Some(match self {
            HostData::F32(v) => v.clone(),
            HostData::BlockQuantized(q) => q.dequantize()?.into(),
            HostData::Deferred(d) => {
                let mut v = vec![0f32; d.len()];
                d.read(0, &mut v).map_err(GraphError::ConstantData)?;
                v.into()
            }
            HostData::I32(_) | HostData::Bool(_) => return Ok(None),
        }))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held in memory: none for deferred data, the blocks for block-quantized data.
    pub fn held_bytes(&self) -> usize {
        match self {
            HostData::F32(v) => std::mem::size_of_val::<[f32]>(v),
            HostData::I32(v) => std::mem::size_of_val::<[i32]>(v),
            HostData::Bool(v) => v.len(),
            HostData::BlockQuantized(q) => q.stored_bytes(),
            HostData::Deferred(_) => 0,
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::I32(_) => DType::I32,
            HostData::Bool(_) => DType::Bool,
            HostData::BlockQuantized(_) | HostData::Deferred(_) => DType::F32,
        }
    }
}

/// A dense row-major array: `data.len()` equals the product of `shape` (1 for a scalar), every
/// dimension is at least 1 and the rank is at most [`MAX_RANK`].
#[derive(Clone, Debug, PartialEq)]
pub struct HostArray {
    shape: Vec<usize>,
    data: HostData,
}

impl HostArray {
    pub fn new(shape: &[usize], data: HostData) -> Result<HostArray, GraphError> {
        check_shape("constant", shape)?;
        let expected = shape.iter().product::<usize>();
        if data.len() != expected {
            return Err(GraphError::DataLength {
                shape: shape.to_vec(),
                len: data.len(),
                expected,
            });
        }
        Ok(HostArray {
            shape: shape.to_vec(),
            data,
        })
    }

    pub fn from_f32(shape: &[usize], data: impl Into<Arc<[f32]>>) -> Result<HostArray, GraphError> {
        HostArray::new(shape, HostData::F32(data.into()))
    }

    pub fn from_i32(shape: &[usize], data: impl Into<Arc<[i32]>>) -> Result<HostArray, GraphError> {
        HostArray::new(shape, HostData::I32(data.into()))
    }

    pub fn from_bool(
        shape: &[usize],
        data: impl Into<Arc<[bool]>>,
    ) -> Result<HostArray, GraphError> {
        HostArray::new(shape, HostData::Bool(data.into()))
    }

    /// A `[rows, cols]` f32 array stored block-quantized.
    pub fn from_block_quantized(q: BlockQuantized) -> Result<HostArray, GraphError> {
        let shape = [q.rows(), q.cols()];
        HostArray::new(&shape, HostData::BlockQuantized(Arc::new(q)))
    }

    pub fn scalar_f32(v: f32) -> HostArray {
        HostArray {
            shape: Vec::new(),
            data: HostData::F32(Arc::from([v])),
        }
    }

    pub fn scalar_i32(v: i32) -> HostArray {
        HostArray {
            shape: Vec::new(),
            data: HostData::I32(Arc::from([v])),
        }
    }

    /// Every element equal to `value`.
    pub fn full(shape: &[usize], value: f32) -> Result<HostArray, GraphError> {
        let n = checked_elements("constant", shape)?;
        HostArray::from_f32(shape, vec![value; n])
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn data(&self) -> &HostData {
        &self.data
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            HostData::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_block_quantized(&self) -> Option<&BlockQuantized> {
        match &self.data {
            HostData::BlockQuantized(q) => Some(q),
            _ => None,
        }
    }

    /// A `[len]`-element f32 array whose values are read on demand (see [`DeferredF32`]).
    pub fn from_deferred(
        shape: &[usize],
        data: Arc<dyn DeferredF32>,
    ) -> Result<HostArray, GraphError> {
        HostArray::new(shape, HostData::Deferred(data))
    }

    /// Whether the values are read on demand rather than held.
    pub fn is_deferred(&self) -> bool {
        matches!(self.data, HostData::Deferred(_))
    }

    /// f32 values, dequantized from block-quantized storage or read if deferred (`None` for
    /// integer and bool data, and for deferred data that cannot be read: use
    /// [`HostData::values_f32`] for the error).
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        match &self.data {
            HostData::F32(v) => Some(v.to_vec()),
            HostData::BlockQuantized(q) => q.dequantize().ok(),
            HostData::Deferred(d) => {
                let mut v = vec![0f32; d.len()];
                d.read(0, &mut v).ok().map(|()| v)
            }
            _ => None,
        }
    }

    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            HostData::I32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<&[bool]> {
        match &self.data {
            HostData::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The only element of a one-element array, widened.
    pub fn single_value(&self) -> Option<f64> {
        if self.len() != 1 {
            return None;
        }
        Some(match &self.data {
            HostData::F32(v) => f64::from(v[0]),
            HostData::I32(v) => f64::from(v[0]),
            HostData::Bool(v) => f64::from(u8::from(v[0])),
            HostData::BlockQuantized(q) => f64::from(*q.dequantize().ok()?.first()?),
            HostData::Deferred(d) => {
                let mut v = [0f32];
                d.read(0, &mut v).ok()?;
                f64::from(v[0])
            }
        })
    }
}

/// Rank at most [`MAX_RANK`], no zero-size dimension, element count fits `usize`.
pub(crate) fn check_shape(op: &'static str, shape: &[usize]) -> Result<(), GraphError> {
    checked_elements(op, shape).map(|_| ())
}

pub(crate) fn checked_elements(op: &'static str, shape: &[usize]) -> Result<usize, GraphError> {
    if shape.len() > MAX_RANK {
        return Err(GraphError::shape(
            op,
            &[shape],
            format!("rank {} exceeds the maximum rank {MAX_RANK}", shape.len()),
        ));
    }
    if shape.contains(&0) {
        return Err(GraphError::shape(
            op,
            &[shape],
            "zero-size dimensions are not supported",
        ));
    }
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| GraphError::shape(op, &[shape], "element count overflows"))
}

/// Values `start..start + out.len()` of the rows `rows` picked from a source of rows of
/// `row_len` values (row `i` of the result is source row `rows[i]`), read through `read(at,
/// out)`. Picked rows that lie close together in the source (a permutation within heads, say)
/// are read as one span of at most [`PICKED_SPAN`] values, so a source with a cost per read
/// (converting blocks, releasing file pages) pays it per span, not per row.
pub fn read_picked<T: Copy + Default>(
    rows: &[usize],
    row_len: usize,
    mut read: impl FnMut(usize, &mut [T]) -> Result<(), String>,
    start: usize,
    out: &mut [T],
) -> Result<(), String> {
    if row_len == 0 {
        return Ok(());
    }
    let end = start + out.len();
    if end > rows.len() * row_len {
        return Err(format!(
            "values {start}..{end} of {} picked rows of {row_len}",
            rows.len()
        ));
    }
    let mut span: Vec<T> = Vec::new();
    let mut i = start / row_len;
    while i * row_len < end {
        // the longest run of picked rows from i whose source rows fit one span
        let most = (PICKED_SPAN / row_len).max(1);
        let (mut lo, mut hi) = (rows[i], rows[i]);
        let mut j = i + 1;
        while j * row_len < end && j - i < most {
            let (l, h) = (lo.min(rows[j]), hi.max(rows[j]));
            if (h - l + 1) > most {
                break;
            }
            (lo, hi) = (l, h);
            j += 1;
        }
        let first = (i * row_len).max(start);
        if j - i == 1 {
            let within = first - i * row_len;
            let take = ((i + 1) * row_len).min(end) - first;
            read(
                rows[i] * row_len + within,
                &mut out[first - start..first - start + take],
            )?;
        } else {
            span.clear();
            span.resize((hi - lo + 1) * row_len, T::default());
            read(lo * row_len, &mut span)?;
            for (k, &row) in rows.iter().enumerate().take(j).skip(i) {
                let (a, b) = ((k * row_len).max(start), ((k + 1) * row_len).min(end));
                let from = (row - lo) * row_len + (a - k * row_len);
                out[a - start..b - start].copy_from_slice(&span[from..from + (b - a)]);
            }
        }
        i = j;
    }
    Ok(())
}

/// The most values [`read_picked`] reads in one span.
pub const PICKED_SPAN: usize = 1 << 18;

/// Reads `start..start + out.len()` of the concatenation of `parts` into `out`, each part of
/// `len(part)` elements read by `read(part, start_within, out_slice)`. Returns how many elements
/// were read: fewer than `out.len()` when the range runs past the parts' end.
pub fn read_concatenated<P, T>(
    parts: &[P],
    len: impl Fn(&P) -> usize,
    mut read: impl FnMut(&P, usize, &mut [T]) -> Result<(), String>,
    start: usize,
    out: &mut [T],
) -> Result<usize, String> {
    let (mut skip, mut done) = (start, 0);
    for p in parts {
        if done == out.len() {
            break;
        }
        let n = len(p);
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = (n - skip).min(out.len() - done);
        read(p, skip, &mut out[done..done + take])?;
        done += take;
        skip = 0;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every window of picked rows equals the rows picked one by one, for a permutation within
    /// heads (read as a few spans) and for rows scattered further apart than a span (read row by
    /// row), from any start and length.
    #[test]
    fn picked_rows_read_in_spans_equal_rows_read_one_by_one() {
        let row_len = 48;
        let heads = 40;
        // within each head of 8 rows: evens then odds (llama.cpp's q/k order undone)
        let within: Vec<usize> = (0..heads * 8)
            .map(|i| (i / 8) * 8 + [0, 2, 4, 6, 1, 3, 5, 7][i % 8])
            .collect();
        let far = PICKED_SPAN / row_len + 5;
        let scattered: Vec<usize> = (0..12).map(|i| (i * 7 % 12) * far).collect();
        for rows in [within, scattered] {
            let n = (rows.iter().max().unwrap() + 1) * row_len;
            let source: Vec<u32> = (0..n as u32).collect();
            let want: Vec<u32> = rows
                .iter()
                .flat_map(|&r| source[r * row_len..(r + 1) * row_len].iter().copied())
                .collect();
            let cases = [
                (0, want.len()),
                (5, 1),
                (47, 2),
                (100, 377),
                (13, want.len() - 13),
            ];
            for (start, len) in cases {
                let mut calls = 0;
                let mut out = vec![0u32; len];
                let read = |at: usize, o: &mut [u32]| {
                    calls += 1;
                    o.copy_from_slice(&source[at..at + o.len()]);
                    Ok(())
                };
                read_picked(&rows, row_len, read, start, &mut out).unwrap();
                assert_eq!(out, want[start..start + len], "start {start} len {len}");
                if rows.len() > 12 && len == want.len() {
                    assert!(calls <= 2, "{calls} reads for {} rows", rows.len());
                }
            }
            let mut out = vec![0u32; 2];
            let read = |_: usize, _: &mut [u32]| Ok(());
            assert!(read_picked(&rows, row_len, read, want.len() - 1, &mut out).is_err());
        }
    }
}
