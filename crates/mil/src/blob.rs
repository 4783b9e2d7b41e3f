//! `weights.bin`: the MIL blob storage file (coremltools `MILBlob` storage format, version 2).
//!
//! Layout, little-endian, every region 64-byte aligned:
//! - file header (64 bytes): `u32 count`, `u32 version = 2`, zeros;
//! - per blob, a descriptor (64 bytes): `u32 0xDEADBEEF`, `u32 dtype code`, `u64 payload bytes`,
//!   `u64 absolute payload offset`, `u64 padding bits` (unused bits at the end of a sub-byte payload),
//!   zeros; then the payload, zero-padded to the next 64-byte boundary.
//!
//! A `BLOBFILE(..., offset = uint64(N))` reference points at the descriptor, not the payload.

use crate::ast::{DType, TensorType};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const HEADER_BYTES: u64 = 64;
pub const DESCRIPTOR_BYTES: u64 = 64;
pub const ALIGNMENT: u64 = 64;
pub const SENTINEL: u32 = 0xDEAD_BEEF;
pub const VERSION: u32 = 2;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BlobError {
    #[error("{file}: {len} bytes is shorter than the 64-byte weights.bin header")]
    TruncatedHeader { file: String, len: u64 },
    #[error("{file}: header version {found}, expected 2")]
    BadVersion { file: String, found: u32 },
    #[error("{file}: header says {count} blobs but the descriptor chain ended after {found}")]
    CountMismatch {
        file: String,
        count: u32,
        found: u32,
    },
    #[error("{file}: descriptor at offset {offset} has magic {found:#010x}, expected 0xdeadbeef")]
    BadMagic {
        file: String,
        offset: u64,
        found: u32,
    },
    #[error("{file}: descriptor at offset {offset} has unknown dtype code {code}")]
    UnknownDtype {
        file: String,
        offset: u64,
        code: u32,
    },
    #[error("{file}: blob at offset {offset} spans bytes {start}..{end}, past the end of the {len}-byte file")]
    OutOfBounds {
        file: String,
        offset: u64,
        start: u64,
        end: u64,
        len: u64,
    },
    #[error("{file}: offset {offset} is not 64-byte aligned")]
    Misaligned { file: String, offset: u64 },
    #[error(
        "{file}: blob at offset {offset} overlaps the previous region (which ends at {prev_end})"
    )]
    Overlap {
        file: String,
        offset: u64,
        prev_end: u64,
    },
    #[error("{file}: no blob descriptor at offset {offset}")]
    NoBlobAt { file: String, offset: u64 },
    #[error("{file}: blob at offset {offset} stores {found}, but the program declares {expected}")]
    DtypeMismatch {
        file: String,
        offset: u64,
        found: DType,
        expected: DType,
    },
    #[error(
        "{file}: blob at offset {offset} holds {found} payload bytes, but {ty} needs {expected}"
    )]
    SizeMismatch {
        file: String,
        offset: u64,
        found: u64,
        expected: u64,
        ty: String,
    },
    #[error("{dtype} cannot be stored in a weights.bin blob")]
    UnsupportedDtype { dtype: DType },
}

/// The dtype code a blob descriptor stores (coremltools `BlobDataType`).
pub fn dtype_code(dtype: DType) -> Option<u32> {
    Some(match dtype {
        DType::Fp16 => 1,
        DType::Fp32 => 2,
        DType::Uint8 => 3,
        DType::Int8 => 4,
        DType::Bf16 => 5,
        DType::Int16 => 6,
        DType::Uint16 => 7,
        DType::Int4 => 8,
        DType::Uint1 => 9,
        DType::Uint2 => 10,
        DType::Uint4 => 11,
        DType::Uint3 => 12,
        DType::Uint6 => 13,
        DType::Int32 => 14,
        DType::Uint32 => 15,
        _ => return None,
    })
}

pub fn dtype_from_code(code: u32) -> Option<DType> {
    DType::ALL
        .iter()
        .copied()
        .find(|&d| dtype_code(d) == Some(code))
}

fn align_up(n: u64) -> u64 {
    n.div_ceil(ALIGNMENT) * ALIGNMENT
}

/// Builds a `weights.bin` in memory. Offsets returned by [`BlobWriter::add`] are descriptor offsets,
/// ready for a `BLOBFILE(... offset = uint64(N))` literal.
#[derive(Debug)]
pub struct BlobWriter {
    bytes: Vec<u8>,
    count: u32,
}

impl Default for BlobWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl BlobWriter {
    pub fn new() -> BlobWriter {
        Self::with_buffer(Vec::new())
    }

    /// A writer that fills `bytes` (emptied first): a buffer reserved for the whole file, set up
    /// the way the caller wants its memory backed.
    pub fn with_buffer(mut bytes: Vec<u8>) -> BlobWriter {
        bytes.clear();
        bytes.resize(HEADER_BYTES as usize, 0);
        bytes[4..8].copy_from_slice(&VERSION.to_le_bytes());
        BlobWriter { bytes, count: 0 }
    }

    /// Appends one blob of `elements` values of `dtype` packed in `payload` (sub-byte types packed
    /// low bits first); returns the descriptor offset.
    pub fn add(&mut self, dtype: DType, elements: usize, payload: &[u8]) -> Result<u64, BlobError> {
        let (descriptor, bytes) = self.add_in_place(dtype, elements, payload.len())?;
        bytes.copy_from_slice(payload);
        Ok(descriptor)
    }

    /// [`BlobWriter::add`] of a `len`-byte payload the caller writes in place (zeros until then),
    /// so a large payload is never held twice: the descriptor offset and the payload's bytes.
    pub fn add_in_place(
        &mut self,
        dtype: DType,
        elements: usize,
        len: usize,
    ) -> Result<(u64, &mut [u8]), BlobError> {
        let code = dtype_code(dtype).ok_or(BlobError::UnsupportedDtype { dtype })?;
        let bits = dtype.bits().ok_or(BlobError::UnsupportedDtype { dtype })? as u64;
        let used_bits = elements as u64 * bits;
        debug_assert_eq!(len as u64, used_bits.div_ceil(8));
        let padding_bits = len as u64 * 8 - used_bits.min(len as u64 * 8);
        let descriptor = self.bytes.len() as u64;
        let data_offset = descriptor + DESCRIPTOR_BYTES;
        let mut desc = [0u8; DESCRIPTOR_BYTES as usize];
        desc[0..4].copy_from_slice(&SENTINEL.to_le_bytes());
        desc[4..8].copy_from_slice(&code.to_le_bytes());
        desc[8..16].copy_from_slice(&(len as u64).to_le_bytes());
        desc[16..24].copy_from_slice(&data_offset.to_le_bytes());
        desc[24..32].copy_from_slice(&padding_bits.to_le_bytes());
        let grow = desc.len() + len + ALIGNMENT as usize;
        if self.bytes.capacity() - self.bytes.len() < grow {
            // a quarter more, not double: a model's blob is most of its process's memory
            self.bytes.reserve_exact(grow.max(self.bytes.len() / 4));
        }
        self.bytes.extend_from_slice(&desc);
        let end = align_up(data_offset + len as u64) as usize;
        self.bytes.resize(end, 0);
        self.count += 1;
        self.bytes[0..4].copy_from_slice(&self.count.to_le_bytes());
        let start = data_offset as usize;
        Ok((descriptor, &mut self.bytes[start..start + len]))
    }

    /// Removes the blob added last, at `descriptor` (one found to repeat an earlier one).
    pub fn remove_last(&mut self, descriptor: u64) {
        if self.count > 0 && (HEADER_BYTES..self.bytes.len() as u64).contains(&descriptor) {
            self.bytes.truncate(descriptor as usize);
            self.count -= 1;
            self.bytes[0..4].copy_from_slice(&self.count.to_le_bytes());
        }
    }

    pub fn add_f16(&mut self, values: &[half::f16]) -> u64 {
        self.add(DType::Fp16, values.len(), bytemuck::cast_slice(values))
            .expect("fp16 is a blob dtype")
    }

    pub fn add_f32(&mut self, values: &[f32]) -> u64 {
        self.add(DType::Fp32, values.len(), bytemuck::cast_slice(values))
            .expect("fp32 is a blob dtype")
    }

    pub fn blob_count(&self) -> u32 {
        self.count
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The file's bytes, without spare capacity (a program's blob lives as long as the program).
    pub fn finish(mut self) -> Vec<u8> {
        self.bytes.shrink_to_fit();
        self.bytes
    }
}

/// One blob of a parsed file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobEntry {
    pub descriptor_offset: u64,
    pub dtype: DType,
    pub data_offset: u64,
    pub data_len: u64,
    pub padding_bits: u64,
}

/// A validated `weights.bin`: every descriptor checked, payloads inside the file, no overlaps.
#[derive(Clone)]
pub struct BlobFile {
    name: String,
    bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    entries: BTreeMap<u64, BlobEntry>,
}

impl std::fmt::Debug for BlobFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobFile")
            .field("name", &self.name)
            .field("len", &self.bytes().len())
            .field("entries", &self.entries)
            .finish()
    }
}

impl BlobFile {
    /// Parses and validates; `name` is used in error messages (usually the file path).
    pub fn parse(
        name: impl Into<String>,
        bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Result<BlobFile, BlobError> {
        let file = name.into();
        let data: &[u8] = (*bytes).as_ref();
        let len = data.len() as u64;
        if len < HEADER_BYTES {
            return Err(BlobError::TruncatedHeader { file, len });
        }
        let count = u32::from_le_bytes(data[0..4].try_into().unwrap());
        let version = u32::from_le_bytes(data[4..8].try_into().unwrap());
        if version != VERSION {
            return Err(BlobError::BadVersion {
                file,
                found: version,
            });
        }
        let mut entries = BTreeMap::new();
        let mut cursor = HEADER_BYTES;
        for found in 0..count {
            if cursor + DESCRIPTOR_BYTES > len {
                return Err(BlobError::CountMismatch { file, count, found });
            }
            let d = &data[cursor as usize..(cursor + DESCRIPTOR_BYTES) as usize];
            let magic = u32::from_le_bytes(d[0..4].try_into().unwrap());
            if magic != SENTINEL {
                return Err(BlobError::BadMagic {
                    file,
                    offset: cursor,
                    found: magic,
                });
            }
            let code = u32::from_le_bytes(d[4..8].try_into().unwrap());
            let dtype = dtype_from_code(code).ok_or_else(|| BlobError::UnknownDtype {
                file: file.clone(),
                offset: cursor,
                code,
            })?;
            let data_len = u64::from_le_bytes(d[8..16].try_into().unwrap());
            let data_offset = u64::from_le_bytes(d[16..24].try_into().unwrap());
            let padding_bits = u64::from_le_bytes(d[24..32].try_into().unwrap());
            if data_offset % ALIGNMENT != 0 {
                return Err(BlobError::Misaligned {
                    file,
                    offset: data_offset,
                });
            }
            let desc_end = cursor + DESCRIPTOR_BYTES;
            if data_offset < desc_end {
                return Err(BlobError::Overlap {
                    file,
                    offset: cursor,
                    prev_end: desc_end,
                });
            }
            let end = data_offset.saturating_add(data_len);
            if end > len {
                return Err(BlobError::OutOfBounds {
                    file,
                    offset: cursor,
                    start: data_offset,
                    end,
                    len,
                });
            }
            entries.insert(
                cursor,
                BlobEntry {
                    descriptor_offset: cursor,
                    dtype,
                    data_offset,
                    data_len,
                    padding_bits,
                },
            );
            cursor = align_up(end);
        }
        Ok(BlobFile {
            name: file,
            bytes,
            entries,
        })
    }

    pub fn from_vec(name: impl Into<String>, bytes: Vec<u8>) -> Result<BlobFile, BlobError> {
        BlobFile::parse(name, Arc::new(bytes))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    /// The file's bytes as shared storage, for readers that keep payloads without copying them.
    pub fn shared_bytes(&self) -> Arc<dyn AsRef<[u8]> + Send + Sync> {
        self.bytes.clone()
    }

    pub fn entries(&self) -> impl Iterator<Item = &BlobEntry> {
        self.entries.values()
    }

    pub fn entry(&self, descriptor_offset: u64) -> Result<&BlobEntry, BlobError> {
        self.entries
            .get(&descriptor_offset)
            .ok_or_else(|| BlobError::NoBlobAt {
                file: self.name.clone(),
                offset: descriptor_offset,
            })
    }

    /// The payload bytes of the blob at `descriptor_offset`, checked against the declared type.
    pub fn payload(&self, descriptor_offset: u64, ty: &TensorType) -> Result<&[u8], BlobError> {
        let e = *self.entry(descriptor_offset)?;
        if e.dtype != ty.dtype {
            return Err(BlobError::DtypeMismatch {
                file: self.name.clone(),
                offset: descriptor_offset,
                found: e.dtype,
                expected: ty.dtype,
            });
        }
        let expected = ty.packed_bytes().map(|b| b as u64);
        if expected != Some(e.data_len) {
            return Err(BlobError::SizeMismatch {
                file: self.name.clone(),
                offset: descriptor_offset,
                found: e.data_len,
                expected: expected.unwrap_or(u64::MAX),
                ty: crate::ty_string(ty),
            });
        }
        Ok(&self.bytes()[e.data_offset as usize..(e.data_offset + e.data_len) as usize])
    }
}
