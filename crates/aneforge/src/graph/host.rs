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

    /// Every value is an fp16 value (the source stores fp16), so an fp32 program may keep the
    /// constant as fp16 without rounding anything.
    fn exactly_f16(&self) -> bool {
        false
    }
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
