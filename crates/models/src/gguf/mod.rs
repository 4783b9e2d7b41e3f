//! GGUF: a reader of our own for versions 2 and 3 (memory-mapped), dequantisation of the common
//! ggml types to f32, raw block access, and the tokenizer the metadata describes (model configs
//! from GGUF metadata: `llm::LlmConfig::from_gguf`).

mod blocks;
mod file;
mod tokenizer;
mod types;
mod value;

use std::path::PathBuf;

pub use blocks::{
    dequantize, k_scale_min, BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0,
    BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, QuantBlock,
    IQ4_VALUES,
};
pub use file::{GgufFile, TensorInfo};
pub use tokenizer::{GgufTokenizer, TokenizerModelKind};
pub use types::GgmlType;
pub use value::{MetaArray, MetaValue, ValueType};

use crate::weights::{HostArray, TensorMeta, TensorSource, WeightError};

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: malformed GGUF at byte {offset}, {field}: {reason}", path.display())]
    Malformed {
        path: PathBuf,
        field: String,
        offset: u64,
        reason: String,
    },
    #[error("{}: {what} not supported", path.display())]
    Unsupported { path: PathBuf, what: String },
    #[error("{}: tensor '{tensor}' has unknown ggml type id {type_id} (byte {offset})", path.display())]
    UnknownTensorType {
        path: PathBuf,
        tensor: String,
        type_id: u32,
        offset: u64,
    },
    #[error("{}: no tensor '{name}'", path.display())]
    MissingTensor { path: PathBuf, name: String },
    #[error("{}: tensor '{name}': {reason}", path.display())]
    Tensor {
        path: PathBuf,
        name: String,
        reason: String,
    },
    #[error("{}: metadata key '{key}' missing", path.display())]
    MissingKey { path: PathBuf, key: String },
    #[error("{}: metadata '{key}': expected {expected}, found {found}", path.display())]
    WrongType {
        path: PathBuf,
        key: String,
        expected: &'static str,
        found: ValueType,
    },
    #[error("{}: metadata '{key}': {reason}", path.display())]
    BadValue {
        path: PathBuf,
        key: String,
        reason: String,
    },
    #[error("{}: tokenizer: {reason}", path.display())]
    Tokenizer { path: PathBuf, reason: String },
}

impl GgufFile {
    /// A tensor converted to f32, with its row-major shape (ggml dims reversed).
    pub fn dequantize(&self, name: &str) -> Result<HostArray<f32>, GgufError> {
        let info = self.require_tensor(name)?;
        let data = dequantize(info.ggml_type, self.tensor_bytes(info)).ok_or_else(|| {
            GgufError::Tensor {
                path: self.path().to_path_buf(),
                name: name.to_string(),
                reason: format!("dequantisation of {} is not supported", info.ggml_type),
            }
        })?;
        HostArray::new(info.shape(), data).ok_or_else(|| GgufError::Tensor {
            path: self.path().to_path_buf(),
            name: name.to_string(),
            reason: "element count does not match the dims".into(),
        })
    }

    /// An integer tensor (I8/I16/I32/I64) widened to i64.
    pub fn read_ints(&self, name: &str) -> Result<HostArray<i64>, GgufError> {
        let info = self.require_tensor(name)?;
        let bytes = self.tensor_bytes(info);
        let data = match info.ggml_type {
            GgmlType::I8 => crate::weights::convert_ints(bytes, 1),
            GgmlType::I16 => crate::weights::convert_ints(bytes, 2),
            GgmlType::I32 => crate::weights::convert_ints(bytes, 4),
            GgmlType::I64 => crate::weights::convert_ints(bytes, 8),
            other => {
                return Err(GgufError::Tensor {
                    path: self.path().to_path_buf(),
                    name: name.to_string(),
                    reason: format!("type {other} is not an integer type"),
                })
            }
        };
        HostArray::new(info.shape(), data).ok_or_else(|| GgufError::Tensor {
            path: self.path().to_path_buf(),
            name: name.to_string(),
            reason: "element count does not match the dims".into(),
        })
    }

    /// A quantised tensor's data viewed as blocks, without copying. The tensor's type must be
    /// `B::TYPE`; blocks run along ggml's innermost dimension (row-major rows of
    /// `dims[0] / B::ELEMENTS` blocks).
    pub fn blocks<B: QuantBlock>(&self, name: &str) -> Result<&[B], GgufError> {
        let info = self.require_tensor(name)?;
        let err = |reason: String| GgufError::Tensor {
            path: self.path().to_path_buf(),
            name: name.to_string(),
            reason,
        };
        if info.ggml_type != B::TYPE {
            return Err(err(format!(
                "stored as {}, not {}",
                info.ggml_type,
                B::TYPE
            )));
        }
        bytemuck::try_cast_slice(self.tensor_bytes(info)).map_err(|e| {
            err(format!(
                "data cannot be viewed as {} blocks: {e:?}",
                B::TYPE
            ))
        })
    }
}

impl TensorSource for GgufFile {
    fn describe(&self) -> String {
        self.path().display().to_string()
    }

    fn names(&self) -> Vec<String> {
        self.tensors().iter().map(|t| t.name.clone()).collect()
    }

    fn meta(&self, name: &str) -> Option<TensorMeta> {
        self.tensor(name).map(|t| TensorMeta {
            shape: t.shape(),
            dtype: t.ggml_type.to_string(),
            file: self.path().to_path_buf(),
        })
    }

    fn read_f32(&self, name: &str) -> Result<HostArray<f32>, WeightError> {
        self.dequantize(name)
            .map_err(|e| self.weight_error(name, e))
    }

    fn read_i64(&self, name: &str) -> Result<HostArray<i64>, WeightError> {
        self.read_ints(name).map_err(|e| self.weight_error(name, e))
    }

    fn reads_ranges(&self) -> bool {
        true
    }

    /// F32, F16 and BF16 tensors convert straight from the mapping, whose pages for the range
    /// are then dropped from this process (as for safetensors); block types dequantize whole
    /// (no deferred matrix reads them: [`DeferredTensor`](crate::weights::DeferredTensor) takes
    /// float types only).
    fn read_f32_range(&self, name: &str, start: usize, out: &mut [f32]) -> Result<(), WeightError> {
        let info = self
            .require_tensor(name)
            .map_err(|e| self.weight_error(name, e))?;
        let end = start.saturating_add(out.len());
        let outside = || {
            self.weight_error(
                name,
                GgufError::Tensor {
                    path: self.path().to_path_buf(),
                    name: name.to_string(),
                    reason: format!(
                        "elements {start}..{end} lie outside its shape {:?}",
                        info.shape()
                    ),
                },
            )
        };
        let width = match info.ggml_type {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            _ => return crate::weights::read_range_of_whole(self, name, start, out),
        };
        let range = start.saturating_mul(width)..end.saturating_mul(width);
        let part = self
            .tensor_bytes(info)
            .get(range.clone())
            .ok_or_else(outside)?;
        for (o, c) in out.iter_mut().zip(part.chunks_exact(width)) {
            *o = match info.ggml_type {
                GgmlType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                GgmlType::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
                _ => half::bf16::from_le_bytes([c[0], c[1]]).to_f32(),
            };
        }
        self.release_read_range(info, range.clone());
        // a fault maps the file's pages around the one it needs (a whole large page-cache folio,
        // say), so the pages before a read's range may be mapped again: once the read reaches
        // the tensor's end, the whole tensor
        if range.end >= info.n_bytes {
            self.release_tensor_pages(info);
        }
        Ok(())
    }
}

impl GgufFile {
    fn weight_error(&self, name: &str, e: GgufError) -> WeightError {
        match e {
            GgufError::MissingTensor { .. } => WeightError::MissingTensor {
                name: name.to_string(),
                source_desc: self.describe(),
                similar: crate::weights::similar_names(name, &self.names(), 3),
            },
            other => WeightError::BadTensor {
                name: name.to_string(),
                file: self.path().to_path_buf(),
                reason: other.to_string(),
            },
        }
    }
}
