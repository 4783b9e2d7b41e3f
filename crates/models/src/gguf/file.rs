//! The GGUF container (versions 2 and 3): header, metadata, tensor infos, aligned tensor data.
//! The file is memory-mapped; tensor data is never copied until it is converted.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::types::GgmlType;
use super::value::{MetaArray, MetaValue, ValueType};
use super::GgufError;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
/// Nesting depth allowed for arrays of arrays (the format allows any; real files use none).
const MAX_ARRAY_DEPTH: usize = 4;

enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// One tensor's description from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Byte length of the data (whole blocks).
    pub n_bytes: usize,
    pub n_elements: usize,
}

impl TensorInfo {
    /// Row-major shape (outermost first): `dims` reversed.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

pub struct GgufFile {
    path: PathBuf,
    storage: Storage,
    version: u32,
    alignment: u64,
    data_offset: usize,
    metadata: Vec<(String, MetaValue)>,
    metadata_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn malformed(&self, field: &str, reason: String) -> GgufError {
        GgufError::Malformed {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            offset: self.pos as u64,
            reason,
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], GgufError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(self.malformed(
                field,
                format!("truncated: needs {n} bytes, {} left", self.remaining()),
            )),
        }
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn u32(&mut self, field: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A count of items each at least `min_item` bytes long, checked against the bytes left.
    fn count(&mut self, field: &str, min_item: usize) -> Result<usize, GgufError> {
        let at = self.pos;
        let n = self.u64(field)?;
        let fits = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(min_item.max(1)))
            .is_some_and(|need| need <= self.remaining());
        if !fits {
            self.pos = at;
            return Err(self.malformed(
                field,
                format!(
                    "count {n} cannot fit in the {} bytes left in the file",
                    self.remaining().saturating_sub(8)
                ),
            ));
        }
        Ok(n as usize)
    }

    fn string(&mut self, field: &str) -> Result<String, GgufError> {
        let len = self.count(field, 1)?;
        let at = self.pos;
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| GgufError::Malformed {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            offset: at as u64,
            reason: format!("string is not UTF-8: {e}"),
        })
    }

    fn value_type(&mut self, field: &str) -> Result<ValueType, GgufError> {
        let at = self.pos;
        let id = self.u32(field)?;
        ValueType::from_id(id).ok_or_else(|| GgufError::Malformed {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            offset: at as u64,
            reason: format!("unknown metadata value type {id}"),
        })
    }

    fn value(&mut self, ty: ValueType, field: &str, depth: usize) -> Result<MetaValue, GgufError> {
        Ok(match ty {
            ValueType::U8 => MetaValue::U8(self.array::<1>(field)?[0]),
            ValueType::I8 => MetaValue::I8(self.array::<1>(field)?[0] as i8),
            ValueType::U16 => MetaValue::U16(u16::from_le_bytes(self.array(field)?)),
            ValueType::I16 => MetaValue::I16(i16::from_le_bytes(self.array(field)?)),
            ValueType::U32 => MetaValue::U32(self.u32(field)?),
            ValueType::I32 => MetaValue::I32(i32::from_le_bytes(self.array(field)?)),
            ValueType::F32 => MetaValue::F32(f32::from_le_bytes(self.array(field)?)),
            ValueType::U64 => MetaValue::U64(self.u64(field)?),
            ValueType::I64 => MetaValue::I64(i64::from_le_bytes(self.array(field)?)),
            ValueType::F64 => MetaValue::F64(f64::from_le_bytes(self.array(field)?)),
            ValueType::Bool => MetaValue::Bool(self.bool(field)?),
            ValueType::String => MetaValue::String(self.string(field)?),
            ValueType::Array => MetaValue::Array(self.meta_array(field, depth)?),
        })
    }

    fn bool(&mut self, field: &str) -> Result<bool, GgufError> {
        let at = self.pos;
        match self.array::<1>(field)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(GgufError::Malformed {
                path: self.path.to_path_buf(),
                field: field.to_string(),
                offset: at as u64,
                reason: format!("bool must be 0 or 1, found {other}"),
            }),
        }
    }

    fn meta_array(&mut self, field: &str, depth: usize) -> Result<MetaArray, GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.malformed(
                field,
                format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"),
            ));
        }
        let ty = self.value_type(field)?;
        let n = self.count(field, ty.min_size())?;
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                const W: usize = std::mem::size_of::<$t>();
                let bytes = self.take(n * W, field)?;
                MetaArray::$variant(
                    bytes
                        .chunks_exact(W)
                        .map(|c| {
                            let mut a = [0u8; W];
                            a.copy_from_slice(c);
                            <$t>::from_le_bytes(a)
                        })
                        .collect(),
                )
            }};
        }
        Ok(match ty {
            ValueType::U8 => MetaArray::U8(self.take(n, field)?.to_vec()),
            ValueType::I8 => MetaArray::I8(self.take(n, field)?.iter().map(|&b| b as i8).collect()),
            ValueType::U16 => fixed!(U16, u16),
            ValueType::I16 => fixed!(I16, i16),
            ValueType::U32 => fixed!(U32, u32),
            ValueType::I32 => fixed!(I32, i32),
            ValueType::F32 => fixed!(F32, f32),
            ValueType::U64 => fixed!(U64, u64),
            ValueType::I64 => fixed!(I64, i64),
            ValueType::F64 => fixed!(F64, f64),
            ValueType::Bool => {
                MetaArray::Bool((0..n).map(|_| self.bool(field)).collect::<Result<_, _>>()?)
            }
            ValueType::String => MetaArray::String(
                (0..n)
                    .map(|_| self.string(field))
                    .collect::<Result<_, _>>()?,
            ),
            ValueType::Array => MetaArray::Array(
                (0..n)
                    .map(|_| self.meta_array(field, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
        })
    }
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: read-only map; see SafeTensorsFiles for the same caveat.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::parse(path.to_path_buf(), Storage::Mapped(mmap))
    }

    /// Parses an in-memory file; `name` stands for its path in errors.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::parse(name.into(), Storage::Owned(bytes))
    }

    fn parse(path: PathBuf, storage: Storage) -> Result<Self, GgufError> {
        let bytes = storage.bytes();
        let mut c = Cursor {
            bytes,
            pos: 0,
            path: &path,
        };
        let magic = c.array::<4>("magic")?;
        if &magic != MAGIC {
            return Err(GgufError::Malformed {
                path: path.clone(),
                field: "magic".into(),
                offset: 0,
                reason: format!("expected \"GGUF\", found {magic:?}; not a GGUF file"),
            });
        }
        let version = c.u32("version")?;
        if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            return Err(GgufError::Unsupported {
                path: path.clone(),
                what: "big-endian GGUF files".into(),
            });
        }
        if version != 2 && version != 3 {
            return Err(GgufError::Unsupported {
                path: path.clone(),
                what: format!("GGUF version {version} (versions 2 and 3 are read)"),
            });
        }
        // A tensor info takes at least 8 (name) + 4 (n_dims) + 4 (type) + 8 (offset) bytes; a
        // key/value pair at least 8 (key) + 4 (type) + 1.
        let tensor_count = c.count("tensor_count", 24)?;
        let kv_count = c.count("metadata_kv_count", 13)?;

        let mut metadata = Vec::with_capacity(kv_count);
        let mut metadata_index = HashMap::with_capacity(kv_count);
        for i in 0..kv_count {
            let key = c.string(&format!("metadata[{i}].key"))?;
            let ty = c.value_type(&format!("metadata '{key}' type"))?;
            let value = c.value(ty, &format!("metadata '{key}'"), 0)?;
            if metadata_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(c.malformed(&format!("metadata '{key}'"), "duplicate key".into()));
            }
            metadata.push((key, value));
        }

        let alignment = match metadata_index
            .get("general.alignment")
            .map(|&i| &metadata[i].1)
        {
            None => DEFAULT_ALIGNMENT,
            Some(MetaValue::U32(a)) if *a > 0 && a.is_power_of_two() => u64::from(*a),
            Some(other) => {
                return Err(GgufError::Malformed {
                    path: path.clone(),
                    field: "general.alignment".into(),
                    offset: 0,
                    reason: format!("must be a power-of-two u32, found {other:?}"),
                })
            }
        };

        let mut tensors = Vec::with_capacity(tensor_count);
        let mut tensor_index = HashMap::with_capacity(tensor_count);
        for i in 0..tensor_count {
            let name = c.string(&format!("tensor[{i}].name"))?;
            let field = |what: &str| format!("tensor '{name}' {what}");
            let n_dims = c.u32(&field("n_dims"))?;
            if n_dims > MAX_DIMS {
                return Err(c.malformed(
                    &field("n_dims"),
                    format!("{n_dims} dimensions (at most {MAX_DIMS})"),
                ));
            }
            let dims = (0..n_dims)
                .map(|_| c.u64(&field("dims")))
                .collect::<Result<Vec<_>, _>>()?;
            let type_at = c.pos;
            let type_id = c.u32(&field("type"))?;
            let ggml_type =
                GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
                    path: path.clone(),
                    tensor: name.clone(),
                    type_id,
                    offset: type_at as u64,
                })?;
            let offset = c.u64(&field("offset"))?;
            let (n_elements, n_bytes) = tensor_size(&dims, ggml_type).map_err(|reason| {
                c.malformed(
                    &field("dims"),
                    format!("{reason} (dims {dims:?}, type {ggml_type})"),
                )
            })?;
            if offset % alignment != 0 {
                return Err(c.malformed(
                    &field("offset"),
                    format!("{offset} is not a multiple of the alignment {alignment}"),
                ));
            }
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                return Err(c.malformed(&field("name"), "duplicate tensor name".into()));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
                n_bytes,
                n_elements,
            });
        }

        let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
        let file_len = bytes.len() as u64;
        for t in &tensors {
            let end = data_offset
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.n_bytes as u64));
            if end.is_none_or(|e| e > file_len) {
                return Err(GgufError::Malformed {
                    path: path.clone(),
                    field: format!("tensor '{}' offset", t.name),
                    offset: data_offset,
                    reason: format!(
                        "data [{} + {}, {} bytes) runs past the end of the file ({file_len} bytes); truncated?",
                        data_offset, t.offset, t.n_bytes
                    ),
                });
            }
        }
        let data_offset = data_offset as usize;
        Ok(GgufFile {
            path,
            storage,
            version,
            alignment,
            data_offset,
            metadata,
            metadata_index,
            tensors,
            tensor_index,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drops the mapped file's pages from this process's resident memory (a mapped file read
    /// once counts in full against its resident size until then). Later reads map them again
    /// from the page cache or the file; in-memory files keep their bytes.
    pub fn release_pages(&self) {
        self.release_range(0, self.storage.bytes().len());
    }

    /// [`GgufFile::release_pages`] for the pages holding one tensor's data.
    pub fn release_tensor_pages(&self, info: &TensorInfo) {
        self.release_range(self.data_offset + info.offset as usize, info.n_bytes);
    }

    /// [`GgufFile::release_pages`] for the pages holding bytes `range` of one tensor's data.
    pub fn release_tensor_range(&self, info: &TensorInfo, range: std::ops::Range<usize>) {
        let end = range.end.min(info.n_bytes);
        if range.start < end {
            let start = self.data_offset + info.offset as usize + range.start;
            self.release_range(start, end - range.start);
        }
    }

    /// [`GgufFile::release_tensor_range`] for data read front to back through the mapping
    /// (see [`crate::weights::mapped::release_read`]).
    pub(crate) fn release_read_range(&self, info: &TensorInfo, range: std::ops::Range<usize>) {
        if let Storage::Mapped(m) = &self.storage {
            let base = self.data_offset + info.offset as usize;
            let end = range.end.min(info.n_bytes);
            if range.start < end {
                crate::weights::mapped::release_read(m, base + range.start, base + end);
            }
        }
    }

    fn release_range(&self, start: usize, len: usize) {
        #[cfg(unix)]
        if let Storage::Mapped(m) = &self.storage {
            if start.checked_add(len).is_some_and(|e| e <= m.len()) {
                // SAFETY: the mapping is read-only and file-backed, so dropping its pages
                // loses nothing: the next access reads the same bytes back. An error leaves
                // them resident.
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len)
                };
            }
        }
        #[cfg(not(unix))]
        let _ = (start, len);
    }

    /// Forgets the metadata arrays (a vocabulary's tokens, scores, types and merges: tens of MB
    /// for a 262k-token vocabulary), keeping the scalars and the tensors. For a file whose
    /// tokenizer is built and whose tensors are read later.
    pub fn drop_metadata_arrays(&mut self) {
        self.metadata
            .retain(|(_, v)| !matches!(v, MetaValue::Array(_)));
        self.metadata.shrink_to_fit();
        self.metadata_index = self
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the tensor data section.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Key/value pairs in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    pub(crate) fn require_tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor(name).ok_or_else(|| GgufError::MissingTensor {
            path: self.path.clone(),
            name: name.to_string(),
        })
    }

    /// The stored bytes of a tensor (whole blocks, little-endian).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let start = self.data_offset + info.offset as usize;
        // In bounds: checked for every tensor when the file was parsed.
        self.storage
            .bytes()
            .get(start..start + info.n_bytes)
            .unwrap_or(&[])
    }

    // Typed metadata accessors: errors name the file and key.

    pub fn require(&self, key: &str) -> Result<&MetaValue, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            path: self.path.clone(),
            key: key.to_string(),
        })
    }

    fn wrong_type(&self, key: &str, expected: &'static str, found: &MetaValue) -> GgufError {
        GgufError::WrongType {
            path: self.path.clone(),
            key: key.to_string(),
            expected,
            found: found.value_type(),
        }
    }

    pub fn get_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.get(key)
            .map(|v| v.as_str().ok_or_else(|| self.wrong_type(key, "string", v)))
            .transpose()
    }

    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.get(key)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| self.wrong_type(key, "non-negative integer", v))
            })
            .transpose()
    }

    pub fn get_f64(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.get(key)
            .map(|v| v.as_f64().ok_or_else(|| self.wrong_type(key, "number", v)))
            .transpose()
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.get(key)
            .map(|v| v.as_bool().ok_or_else(|| self.wrong_type(key, "bool", v)))
            .transpose()
    }

    pub fn get_array(&self, key: &str) -> Result<Option<&MetaArray>, GgufError> {
        self.get(key)
            .map(|v| v.as_array().ok_or_else(|| self.wrong_type(key, "array", v)))
            .transpose()
    }

    pub fn require_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| self.wrong_type(key, "string", v))
    }

    pub fn require_u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| self.wrong_type(key, "non-negative integer", v))
    }

    pub fn require_f64(&self, key: &str) -> Result<f64, GgufError> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| self.wrong_type(key, "number", v))
    }

    pub fn require_array(&self, key: &str) -> Result<&MetaArray, GgufError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| self.wrong_type(key, "array", v))
    }

    /// `general.architecture` (e.g. `llama`).
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.require_str("general.architecture")
    }
}

/// (elements, bytes) of a tensor, or why the dims are impossible.
fn tensor_size(dims: &[u64], ty: GgmlType) -> Result<(usize, usize), String> {
    let n = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or("element count overflows")?;
    let (block, block_bytes) = ty.block_geometry();
    let inner = dims.first().copied().unwrap_or(1);
    if inner % block as u64 != 0 {
        return Err(format!(
            "innermost dimension {inner} is not a multiple of the block size {block}"
        ));
    }
    let bytes = (n / block)
        .checked_mul(block_bytes)
        .ok_or("byte size overflows")?;
    Ok((n, bytes))
}
