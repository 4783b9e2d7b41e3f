//! Memory-mapped safetensors checkpoints: one file, or shards listed by
//! `model.safetensors.index.json`.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{Dtype, Metadata, SafeTensors};

use super::convert::{
    bf16_le_to_f32, f16_le_to_f32, f32_le_to_f32, f64_le_to_f32, int_le_to_i64, FloatLe,
};
use super::{similar_names, HostArray, TensorMeta, TensorSource, WeightError};

struct MappedFile {
    path: PathBuf,
    mmap: Mmap,
    data_start: usize,
    metadata: Metadata,
}

impl MappedFile {
    fn open(path: &Path) -> Result<Self, WeightError> {
        let io = |source| WeightError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; a file changed underneath by another process is outside
        // what any mmap-based reader can defend against.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (header_len, metadata) =
            SafeTensors::read_metadata(&mmap).map_err(|e| WeightError::Malformed {
                path: path.to_path_buf(),
                format: "safetensors",
                reason: describe_safetensors_error(&e, mmap.len()),
            })?;
        Ok(MappedFile {
            path: path.to_path_buf(),
            data_start: 8 + header_len,
            mmap,
            metadata,
        })
    }

    fn bytes(&self, name: &str) -> Option<(&[u8], Dtype, &[usize])> {
        let info = self.metadata.info(name)?;
        let (s, e) = info.data_offsets;
        let bytes = self
            .mmap
            .get(self.data_start.checked_add(s)?..self.data_start.checked_add(e)?)?;
        Some((bytes, info.dtype, &info.shape))
    }
}

fn describe_safetensors_error(e: &safetensors::SafeTensorError, file_len: usize) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::HeaderTooSmall => {
            format!("file is {file_len} bytes, too short for the 8-byte header length")
        }
        E::InvalidHeaderLength => {
            format!("header length runs past the end of the file ({file_len} bytes); truncated?")
        }
        E::MetadataIncompleteBuffer => format!(
            "tensor data does not end where the file ends ({file_len} bytes); truncated or padded?"
        ),
        other => other.to_string(),
    }
}

/// One or more mapped safetensors files seen as one set of tensors.
pub struct SafeTensorsFiles {
    files: Vec<MappedFile>,
    /// tensor name → index into `files`
    index: HashMap<String, usize>,
    describe: String,
}

#[derive(serde::Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

impl SafeTensorsFiles {
    /// One `.safetensors` file, or a `.safetensors.index.json` shard index.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, WeightError> {
        let path = path.as_ref();
        if path.to_string_lossy().ends_with(".index.json") {
            Self::open_sharded(path)
        } else {
            Self::open_files(&[path])
        }
    }

    /// The checkpoint in a model directory: `model.safetensors`, else
    /// `model.safetensors.index.json`.
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<Self, WeightError> {
        let dir = dir.as_ref();
        let single = dir.join("model.safetensors");
        let sharded = dir.join("model.safetensors.index.json");
        if single.is_file() {
            Self::open(single)
        } else if sharded.is_file() {
            Self::open_sharded(&sharded)
        } else {
            Err(WeightError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "neither model.safetensors nor model.safetensors.index.json is here",
                ),
            })
        }
    }

    /// Several files; a tensor name may appear in only one of them.
    pub fn open_files<P: AsRef<Path>>(paths: &[P]) -> Result<Self, WeightError> {
        let mut files = Vec::with_capacity(paths.len());
        let mut index = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let file = MappedFile::open(path.as_ref())?;
            for name in file.metadata.offset_keys() {
                if let Some(&prev) = index.get(&name) {
                    let prev: &MappedFile = &files[prev];
                    return Err(WeightError::Malformed {
                        path: file.path.clone(),
                        format: "safetensors",
                        reason: format!("tensor '{name}' is also in {}", prev.path.display()),
                    });
                }
                index.insert(name, i);
            }
            files.push(file);
        }
        let describe = match files.as_slice() {
            [one] => one.path.display().to_string(),
            _ => format!(
                "{} shards ({})",
                files.len(),
                files
                    .iter()
                    .map(|f| f.path.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Ok(SafeTensorsFiles {
            files,
            index,
            describe,
        })
    }

    fn open_sharded(index_path: &Path) -> Result<Self, WeightError> {
        let malformed = |reason: String| WeightError::Malformed {
            path: index_path.to_path_buf(),
            format: "safetensors index",
            reason,
        };
        let text = std::fs::read_to_string(index_path).map_err(|source| WeightError::Io {
            path: index_path.to_path_buf(),
            source,
        })?;
        let shard_index: ShardIndex =
            serde_json::from_str(&text).map_err(|e| malformed(e.to_string()))?;
        let dir = index_path.parent().unwrap_or(Path::new("."));
        let mut shard_names: Vec<&String> = shard_index.weight_map.values().collect();
        shard_names.sort();
        shard_names.dedup();
        for shard in &shard_names {
            if shard.contains('/') || shard.contains('\\') || shard.as_str() == ".." {
                return Err(malformed(format!(
                    "shard name '{shard}' is not a plain file name"
                )));
            }
        }
        let paths: Vec<PathBuf> = shard_names.iter().map(|s| dir.join(s)).collect();
        let files = Self::open_files(&paths)?;
        for (tensor, shard) in &shard_index.weight_map {
            let holder = files.index.get(tensor).map(|&i| &files.files[i].path);
            if holder != Some(&dir.join(shard)) {
                return Err(malformed(format!(
                    "maps tensor '{tensor}' to {shard}, which does not contain it"
                )));
            }
        }
        Ok(files)
    }

    /// Drops the mapped pages under `part` (a slice of tensor `name`'s bytes) from this
    /// process's resident set; a later read maps them again from the page cache.
    fn release(&self, name: &str, part: &[u8]) {
        let Some(file) = self.index.get(name).and_then(|&i| self.files.get(i)) else {
            return;
        };
        let offset = part.as_ptr() as usize - file.mmap.as_ptr() as usize;
        super::mapped::release_read(&file.mmap, offset, offset + part.len());
    }

    /// A tensor's bytes as stored (little-endian), with its dtype, shape and file.
    pub fn raw(&self, name: &str) -> Result<RawTensor<'_>, WeightError> {
        let file = self
            .index
            .get(name)
            .and_then(|&i| self.files.get(i))
            .ok_or_else(|| WeightError::MissingTensor {
                name: name.to_string(),
                source_desc: self.describe.clone(),
                similar: similar_names(name, &self.names(), 3),
            })?;
        let (bytes, dtype, shape) = file.bytes(name).ok_or_else(|| WeightError::BadTensor {
            name: name.to_string(),
            file: file.path.clone(),
            reason: "data offsets lie outside the file".into(),
        })?;
        Ok(RawTensor {
            file: &file.path,
            bytes,
            dtype,
            shape,
        })
    }
}

/// A tensor in a mapped safetensors file, not converted.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    pub file: &'a Path,
    pub bytes: &'a [u8],
    pub dtype: Dtype,
    pub shape: &'a [usize],
}

impl TensorSource for SafeTensorsFiles {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.index.keys().cloned().collect();
        names.sort();
        names
    }

    fn meta(&self, name: &str) -> Option<TensorMeta> {
        let file = self.files.get(*self.index.get(name)?)?;
        let info = file.metadata.info(name)?;
        Some(TensorMeta {
            shape: info.shape.clone(),
            dtype: format!("{:?}", info.dtype),
            file: file.path.clone(),
        })
    }

    fn read_f32(&self, name: &str) -> Result<HostArray<f32>, WeightError> {
        let RawTensor {
            file,
            bytes,
            dtype,
            shape,
        } = self.raw(name)?;
        float_le(name, file, dtype)?;
        let data = match dtype {
            Dtype::F32 => f32_le_to_f32(bytes),
            Dtype::F16 => f16_le_to_f32(bytes),
            Dtype::BF16 => bf16_le_to_f32(bytes),
            _ => f64_le_to_f32(bytes),
        };
        array(name, file, shape, data)
    }

    fn reads_ranges(&self) -> bool {
        true
    }

    /// Converts straight from the mapping, then lets the kernel drop the range's mapped pages
    /// from this process (they stay in the page cache): a model read once into a compiled
    /// program does not keep the file resident as well.
    fn read_f32_range(&self, name: &str, start: usize, out: &mut [f32]) -> Result<(), WeightError> {
        let RawTensor {
            file,
            bytes,
            dtype,
            shape,
        } = self.raw(name)?;
        let part = float_le(name, file, dtype)?
            .read_range(bytes, start, out)
            .ok_or_else(|| WeightError::BadTensor {
                name: name.to_string(),
                file: file.to_path_buf(),
                reason: format!(
                    "elements {start}..{} lie outside its shape {shape:?}",
                    start.saturating_add(out.len())
                ),
            })?;
        self.release(name, part);
        Ok(())
    }

    fn read_i64(&self, name: &str) -> Result<HostArray<i64>, WeightError> {
        let RawTensor {
            file,
            bytes,
            dtype,
            shape,
        } = self.raw(name)?;
        let data = match dtype {
            Dtype::I64 => int_le_to_i64(bytes, 8, true),
            Dtype::I32 => int_le_to_i64(bytes, 4, true),
            Dtype::I16 => int_le_to_i64(bytes, 2, true),
            Dtype::I8 => int_le_to_i64(bytes, 1, true),
            Dtype::U32 => int_le_to_i64(bytes, 4, false),
            Dtype::U16 => int_le_to_i64(bytes, 2, false),
            Dtype::U8 | Dtype::BOOL => int_le_to_i64(bytes, 1, false),
            other => {
                return Err(WeightError::WrongDtype {
                    name: name.to_string(),
                    file: file.to_path_buf(),
                    dtype: format!("{other:?}"),
                    wanted: "i64 (from I64, I32, I16, I8, U32, U16, U8 or BOOL)",
                })
            }
        };
        array(name, file, shape, data)
    }
}

fn array<T>(
    name: &str,
    file: &Path,
    shape: &[usize],
    data: Vec<T>,
) -> Result<HostArray<T>, WeightError> {
    let len = data.len();
    HostArray::new(shape.to_vec(), data).ok_or_else(|| WeightError::BadTensor {
        name: name.to_string(),
        file: file.to_path_buf(),
        reason: format!("shape {shape:?} does not match its {len} stored elements"),
    })
}

/// Bytes per element of a tensor read as f32 (F32, F16, BF16 or F64), or the error naming it.
fn float_le(name: &str, file: &Path, dtype: Dtype) -> Result<FloatLe, WeightError> {
    match dtype {
        Dtype::F32 => Ok(FloatLe::F32),
        Dtype::F16 => Ok(FloatLe::F16),
        Dtype::BF16 => Ok(FloatLe::Bf16),
        Dtype::F64 => Ok(FloatLe::F64),
        other => Err(WeightError::WrongDtype {
            name: name.to_string(),
            file: file.to_path_buf(),
            dtype: format!("{other:?}"),
            wanted: "f32 (from F32, F16, BF16 or F64)",
        }),
    }
}
