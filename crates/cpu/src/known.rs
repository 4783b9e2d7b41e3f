//! Compile-time constant data: inline literals and BLOBFILE payloads, decoded once.

use crate::kernels::quant_blocks::Storage;
use crate::tensor::{AlignedBuf, Elem};
use aneforge_mil::{BlobFile, DType, Literal, TensorData, TensorType};
use half::f16;
use std::collections::HashMap;
use std::sync::Arc;

pub type BlobStore = HashMap<String, BlobFile>;

/// f32 values: decoded here, or read in place from a weights blob. A view holds the blob's
/// storage, so the bytes it reads stay allocated (and cannot be reused by another program's blob)
/// for as long as any plan or constant holds the view. Clones share the values.
#[derive(Clone)]
pub(crate) enum Floats {
    Owned(Arc<Vec<f32>>),
    /// `len` f32 values at byte `start` of `bytes`, 4-byte aligned (checked when made).
    Blob {
        bytes: Storage,
        start: usize,
        len: usize,
    },
}

impl Floats {
    /// A view of `payload` (little-endian f32) at byte `start` of `bytes`, or `None` when the
    /// host is big-endian or the payload is not 4-byte aligned in memory.
    fn view(bytes: &Storage, start: usize, byte_len: usize) -> Option<Floats> {
        let all: &[u8] = (**bytes).as_ref();
        let payload = all.get(start..start.checked_add(byte_len)?)?;
        let aligned = bytemuck::try_cast_slice::<u8, f32>(payload).is_ok();
        (cfg!(target_endian = "little") && aligned).then(|| Floats::Blob {
            bytes: bytes.clone(),
            start,
            len: byte_len / 4,
        })
    }

    /// Bytes this value holds beyond the blob it may view.
    pub fn owned_bytes(&self) -> usize {
        match self {
            Floats::Owned(v) => v.len() * 4,
            Floats::Blob { .. } => 0,
        }
    }
}

impl From<Vec<f32>> for Floats {
    fn from(v: Vec<f32>) -> Floats {
        Floats::Owned(Arc::new(v))
    }
}

impl From<Arc<Vec<f32>>> for Floats {
    fn from(v: Arc<Vec<f32>>) -> Floats {
        Floats::Owned(v)
    }
}

impl std::ops::Deref for Floats {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            Floats::Owned(v) => v,
            Floats::Blob { bytes, start, len } => {
                let all: &[u8] = (**bytes).as_ref();
                // range and alignment were checked by `Floats::view`; the storage is immutable
                bytemuck::cast_slice(&all[*start..*start + *len * 4])
            }
        }
    }
}

impl std::fmt::Debug for Floats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Floats::Owned(v) => write!(f, "Owned({} values)", v.len()),
            Floats::Blob { start, len, .. } => write!(f, "Blob({len} values at byte {start})"),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Data {
    F32(Floats),
    F16(Vec<f16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    /// Block-quantized weights, kept in their storage (`constexpr_blockwise_shift_scale`).
    Quant(std::sync::Arc<crate::kernels::quant_blocks::QuantTensor>),
}

#[derive(Clone, Debug)]
pub(crate) struct Known {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Data,
}

impl Known {
    /// Numeric contents widened to f32; `None` for strings.
    pub fn f32s(&self) -> Option<Vec<f32>> {
        Some(match &self.data {
            Data::F32(v) => v.to_vec(),
            Data::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f32).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f32).collect(),
            Data::I8(v) => v.iter().map(|&x| x as f32).collect(),
            Data::U8(v) => v.iter().map(|&x| x as f32).collect(),
            Data::Bool(v) => v.iter().map(|&x| x as u8 as f32).collect(),
            Data::Quant(q) => q.dequantize(),
            Data::Str(_) => return None,
        })
    }

    /// Integer contents (bools as 0/1); `None` for floats and strings.
    pub fn i64s(&self) -> Option<Vec<i64>> {
        Some(match &self.data {
            Data::I32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I64(v) => v.clone(),
            Data::I8(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U8(v) => v.iter().map(|&x| x as i64).collect(),
            Data::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            _ => return None,
        })
    }

    pub fn bools(&self) -> Option<Vec<bool>> {
        match &self.data {
            Data::Bool(v) => Some(v.clone()),
            _ => None,
        }
    }

    pub fn strs(&self) -> Option<&[String]> {
        match &self.data {
            Data::Str(v) => Some(v),
            _ => None,
        }
    }

    /// Builds a constant of runtime dtype `elem` from f32 values (rounding to f16 where needed).
    pub fn from_f32(dtype: DType, shape: Vec<usize>, v: Vec<f32>) -> Known {
        let data = match dtype {
            DType::Fp16 => Data::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
            _ => Data::F32(v.into()),
        };
        Known { dtype, shape, data }
    }

    /// Runtime bytes in the storage format of this dtype; `None` if it has no runtime form.
    pub fn to_buffer(&self) -> Option<AlignedBuf> {
        let elem = Elem::from_dtype(self.dtype)?;
        if let Data::Quant(q) = &self.data {
            return Known::from_f32(self.dtype, self.shape.clone(), q.dequantize()).to_buffer();
        }
        Some(match (&self.data, elem) {
            (Data::F32(v), Elem::F32) => AlignedBuf::from_bytes(bytemuck::cast_slice(&v[..])),
            (Data::F16(v), Elem::F16) => AlignedBuf::from_bytes(bytemuck::cast_slice(v)),
            (Data::I32(v), Elem::I32) => AlignedBuf::from_bytes(bytemuck::cast_slice(v)),
            (Data::I64(v), Elem::I32) => {
                let w: Vec<i32> = v.iter().map(|&x| x as i32).collect();
                AlignedBuf::from_bytes(bytemuck::cast_slice(&w))
            }
            (Data::I8(v), Elem::I8) => AlignedBuf::from_bytes(bytemuck::cast_slice(v)),
            (Data::U8(v), Elem::U8) => AlignedBuf::from_bytes(v),
            (Data::Bool(v), Elem::Bool) => {
                let w: Vec<u8> = v.iter().map(|&x| x as u8).collect();
                AlignedBuf::from_bytes(&w)
            }
            _ => return None,
        })
    }
}

fn static_shape(ty: &TensorType) -> Result<Vec<usize>, String> {
    ty.static_shape()
        .ok_or_else(|| format!("{} has a symbolic shape", aneforge_mil::ty_string(ty)))
}

/// Decodes an inline or BLOBFILE tensor literal.
pub(crate) fn decode_literal(lit: &Literal, blobs: &BlobStore) -> Result<Known, String> {
    match lit {
        Literal::Tensor { ty, data } => {
            let shape = static_shape(ty)?;
            let n: usize = shape.iter().product();
            if data.len() != n {
                return Err(format!(
                    "literal of type {} holds {} elements, expected {n}",
                    aneforge_mil::ty_string(ty),
                    data.len()
                ));
            }
            let d = ty.dtype;
            let data = match data {
                TensorData::Float(v) => match d {
                    DType::Fp16 => Data::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
                    DType::Fp32 | DType::Fp64 | DType::Bf16 => {
                        Data::F32(v.iter().map(|&x| x as f32).collect::<Vec<f32>>().into())
                    }
                    _ => return Err(format!("float data for a {d} literal")),
                },
                TensorData::Int(v) => int_data(d, v)?,
                TensorData::Bool(v) => Data::Bool(v.clone()),
                TensorData::Str(v) => Data::Str(v.clone()),
            };
            Ok(Known {
                dtype: d,
                shape,
                data,
            })
        }
        Literal::Blob { ty, path, offset } => {
            let shape = static_shape(ty)?;
            let file = blobs.get(path).ok_or_else(|| {
                let mut have: Vec<&String> = blobs.keys().collect();
                have.sort();
                format!("BLOBFILE {path} is not in the blob store (have: {have:?})")
            })?;
            let payload = file.payload(*offset, ty).map_err(|e| e.to_string())?;
            let n: usize = shape.iter().product();
            let view = match ty.dtype {
                DType::Fp32 => {
                    let start = file.entry(*offset).map_err(|e| e.to_string())?.data_offset;
                    Floats::view(&file.shared_bytes(), start as usize, payload.len())
                }
                _ => None,
            };
            let data = match view {
                Some(v) => Data::F32(v),
                None => decode_payload(ty.dtype, payload, n)?,
            };
            Ok(Known {
                dtype: ty.dtype,
                shape,
                data,
            })
        }
        Literal::Tuple(_) | Literal::Dict { .. } => {
            Err("tuple and dict literals are not tensors".to_string())
        }
    }
}

fn int_data(d: DType, v: &[i64]) -> Result<Data, String> {
    if let Some((lo, hi)) = d.int_range() {
        if let Some(bad) = v.iter().find(|&&x| (x as i128) < lo || (x as i128) > hi) {
            return Err(format!("value {bad} does not fit {d}"));
        }
    }
    Ok(match d {
        DType::Int32 | DType::Int16 | DType::Uint16 => {
            Data::I32(v.iter().map(|&x| x as i32).collect())
        }
        DType::Int8 | DType::Int4 => Data::I8(v.iter().map(|&x| x as i8).collect()),
        DType::Uint8 | DType::Uint1 | DType::Uint2 | DType::Uint3 | DType::Uint4 | DType::Uint6 => {
            Data::U8(v.iter().map(|&x| x as u8).collect())
        }
        DType::Int64 | DType::Uint32 | DType::Uint64 => Data::I64(v.to_vec()),
        DType::Bool => Data::Bool(v.iter().map(|&x| x != 0).collect()),
        _ => return Err(format!("integer data for a {d} literal")),
    })
}

/// Unpacks `n` elements of `bits` each, low bits first.
pub(crate) fn unpack_bits(bytes: &[u8], bits: usize, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mask = (1u32 << bits) - 1;
    for i in 0..n {
        let bit = i * bits;
        let byte = bit / 8;
        let shift = bit % 8;
        let lo = *bytes.get(byte).unwrap_or(&0) as u32;
        let hi = *bytes.get(byte + 1).unwrap_or(&0) as u32;
        out.push((((lo | (hi << 8)) >> shift) & mask) as u8);
    }
    out
}

fn decode_payload(d: DType, p: &[u8], n: usize) -> Result<Data, String> {
    let le16 = |c: &[u8]| u16::from_le_bytes([c[0], c[1]]);
    let le32 = |c: &[u8]| u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    Ok(match d {
        DType::Fp16 => Data::F16(p.chunks_exact(2).map(|c| f16::from_bits(le16(c))).collect()),
        DType::Bf16 => Data::F32(
            p.chunks_exact(2)
                .map(|c| half::bf16::from_bits(le16(c)).to_f32())
                .collect::<Vec<f32>>()
                .into(),
        ),
        DType::Fp32 => Data::F32(
            p.chunks_exact(4)
                .map(|c| f32::from_bits(le32(c)))
                .collect::<Vec<f32>>()
                .into(),
        ),
        DType::Int8 => Data::I8(p.iter().map(|&b| b as i8).collect()),
        DType::Uint8 => Data::U8(p.to_vec()),
        DType::Int16 => Data::I32(p.chunks_exact(2).map(|c| le16(c) as i16 as i32).collect()),
        DType::Uint16 => Data::I32(p.chunks_exact(2).map(|c| le16(c) as i32).collect()),
        DType::Int32 => Data::I32(p.chunks_exact(4).map(|c| le32(c) as i32).collect()),
        DType::Uint32 => Data::I64(p.chunks_exact(4).map(|c| le32(c) as i64).collect()),
        DType::Int4 => Data::I8(
            unpack_bits(p, 4, n)
                .into_iter()
                .map(|x| ((x << 4) as i8) >> 4)
                .collect(),
        ),
        DType::Uint1 | DType::Uint2 | DType::Uint3 | DType::Uint4 | DType::Uint6 => {
            Data::U8(unpack_bits(p, d.bits().unwrap_or(8), n))
        }
        _ => return Err(format!("{d} blobs are not supported")),
    })
}
