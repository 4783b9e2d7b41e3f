//! Named weight tensors read into host arrays: safetensors files (single or sharded), PyTorch
//! `torch.save` state_dicts and GGUF files behind one [`TensorSource`] trait, addressed through a
//! prefixing [`VarBuilder`].

mod convert;
pub(crate) mod mapped;
mod safetensors_files;
mod torch_pickle;
mod varbuilder;

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use aneforge::graph::HalfStorage;

pub use convert::{bf16_le_to_f32, f16_le_to_f32, f32_le_to_f32};
pub(crate) use convert::{f64_le_to_f32, FloatLe};

/// Signed little-endian integers of `width` bytes widened to i64.
pub(crate) fn convert_ints(bytes: &[u8], width: usize) -> Vec<i64> {
    convert::int_le_to_i64(bytes, width, true)
}
pub use safetensors_files::{RawTensor, SafeTensorsFiles};
pub use torch_pickle::TorchCheckpoint;
pub use varbuilder::VarBuilder;

/// A dense row-major host array; `data.len()` always equals the product of `shape`.
#[derive(Debug, Clone, PartialEq)]
pub struct HostArray<T> {
    shape: Vec<usize>,
    data: Vec<T>,
}

impl<T> HostArray<T> {
    /// `None` when the element count of `shape` differs from `data.len()`.
    pub fn new(shape: Vec<usize>, data: Vec<T>) -> Option<Self> {
        let count = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
        (count == data.len()).then_some(HostArray { shape, data })
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn data(&self) -> &[T] {
        &self.data
    }

    pub fn into_data(self) -> Vec<T> {
        self.data
    }

    pub fn into_parts(self) -> (Vec<usize>, Vec<T>) {
        (self.shape, self.data)
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// What a source says about one tensor without reading its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Row-major shape (outermost dimension first), also for GGUF.
    pub shape: Vec<usize>,
    /// The stored element type as the file names it (`F32`, `BF16`, `Q4_1`, ...).
    pub dtype: String,
    /// The file holding the tensor.
    pub file: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: malformed {format} file: {reason}", path.display())]
    Malformed {
        path: PathBuf,
        format: &'static str,
        reason: String,
    },
    #[error("tensor '{name}' not found in {source_desc}{}", Suggestions(similar))]
    MissingTensor {
        name: String,
        source_desc: String,
        similar: Vec<String>,
    },
    #[error("tensor '{name}' in {}: expected shape {expected:?}, found {found:?}", file.display())]
    WrongShape {
        name: String,
        file: PathBuf,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor '{name}' in {}: dtype {dtype} cannot be read as {wanted}", file.display())]
    WrongDtype {
        name: String,
        file: PathBuf,
        dtype: String,
        wanted: &'static str,
    },
    #[error("tensor '{name}' in {}: {reason}", file.display())]
    BadTensor {
        name: String,
        file: PathBuf,
        reason: String,
    },
}

struct Suggestions<'a>(&'a [String]);

impl fmt::Display for Suggestions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.is_empty() {
            write!(f, "; similar names: {}", self.0.join(", "))?;
        }
        Ok(())
    }
}

/// A set of named tensors (one file, shards of one checkpoint, a GGUF file).
pub trait TensorSource: Send + Sync {
    /// The file or files, for error messages.
    fn describe(&self) -> String;
    fn names(&self) -> Vec<String>;
    fn meta(&self, name: &str) -> Option<TensorMeta>;
    /// The tensor converted to f32 (floating types and quantised blocks).
    fn read_f32(&self, name: &str) -> Result<HostArray<f32>, WeightError>;
    /// The tensor as i64 (integer types only).
    fn read_i64(&self, name: &str) -> Result<HostArray<i64>, WeightError>;

    /// Whether [`TensorSource::read_f32_range`] reads only the range (else it reads the whole
    /// tensor each time).
    fn reads_ranges(&self) -> bool {
        false
    }

    /// Elements `start..start + out.len()` of the tensor (row-major) converted to f32, into
    /// `out`. Sources that can read a range without the rest override this.
    fn read_f32_range(&self, name: &str, start: usize, out: &mut [f32]) -> Result<(), WeightError> {
        read_range_of_whole(self, name, start, out)
    }
}

/// [`TensorSource::read_f32_range`] by reading the whole tensor (for tensors a source cannot
/// convert a part of).
pub(crate) fn read_range_of_whole<S: TensorSource + ?Sized>(
    source: &S,
    name: &str,
    start: usize,
    out: &mut [f32],
) -> Result<(), WeightError> {
    let all = source.read_f32(name)?;
    let (shape, data) = all.into_parts();
    let range = data
        .get(start..start.saturating_add(out.len()))
        .ok_or_else(|| WeightError::BadTensor {
            name: name.to_string(),
            file: source.meta(name).map(|m| m.file).unwrap_or_default(),
            reason: format!(
                "elements {start}..{} lie outside its shape {shape:?}",
                start.saturating_add(out.len())
            ),
        })?;
    out.copy_from_slice(range);
    Ok(())
}

/// A floating-point tensor of a source, read when a program is compiled instead of held (see
/// [`aneforge::graph::DeferredF32`]): a model's weights then live in the compiled program's blob
/// only. Holds the source (and so its file mapping) alive.
#[derive(Clone)]
pub struct DeferredTensor {
    source: Arc<dyn TensorSource>,
    name: String,
    len: usize,
    stored: Stored,
    /// The fp16 storage found for a bf16 matrix of some column count, once looked for (it
    /// reads the whole tensor).
    scaled: Arc<OnceLock<(usize, Option<HalfStorage>)>>,
}

/// The float type a tensor is stored in, as far as fp16 storage cares.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stored {
    F16,
    Bf16,
    Wider,
}

impl DeferredTensor {
    /// The tensor `name` of `source`, if it is there with a floating-point dtype and the source
    /// reads ranges.
    pub fn new(source: &Arc<dyn TensorSource>, name: &str) -> Option<DeferredTensor> {
        let meta = source.meta(name)?;
        if !source.reads_ranges() {
            return None;
        }
        let stored = match meta.dtype.as_str() {
            "F16" => Stored::F16,
            "BF16" => Stored::Bf16,
            "F32" | "F64" => Stored::Wider,
            _ => return None,
        };
        Some(DeferredTensor {
            source: source.clone(),
            name: name.to_string(),
            len: meta.shape.iter().product(),
            stored,
            scaled: Arc::default(),
        })
    }
}

impl DeferredTensor {
    /// Kept as f32 in an fp32 program even when the file stores 16-bit floats.
    pub fn widened(mut self) -> DeferredTensor {
        self.stored = Stored::Wider;
        self
    }
}

impl fmt::Debug for DeferredTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", self.name, self.source.describe())
    }
}

impl aneforge::graph::DeferredF32 for DeferredTensor {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
        self.source
            .read_f32_range(&self.name, start, out)
            .map_err(|e| e.to_string())
    }

    fn half_storage(&self, cols: usize) -> Option<HalfStorage> {
        match self.stored {
            Stored::F16 => Some(HalfStorage::Exact),
            Stored::Wider => None,
            Stored::Bf16 => {
                let scan = || {
                    // a tensor that cannot be read is reported when the program reads it again
                    let rows = aneforge::graph::scaled_half_rows(self, cols).ok().flatten();
                    (cols, rows.map(HalfStorage::Scaled))
                };
                match self.scaled.get_or_init(scan) {
                    (c, found) if *c == cols => found.clone(),
                    _ => scan().1,
                }
            }
        }
    }
}

/// Up to `limit` names from `names` that look like `wanted`: the same last two components, or the
/// same last component under the longest shared prefix.
pub(crate) fn similar_names(wanted: &str, names: &[String], limit: usize) -> Vec<String> {
    let tail = |s: &str, n: usize| -> String {
        let parts: Vec<&str> = s.rsplitn(n + 1, '.').collect();
        parts.into_iter().take(n).collect::<Vec<_>>().join(".")
    };
    let shared_prefix =
        |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let wanted_tail = tail(wanted, 2);
    let wanted_last = tail(wanted, 1);
    let mut scored: Vec<(usize, usize, &String)> = names
        .iter()
        .filter_map(|n| {
            let rank = if tail(n, 2) == wanted_tail {
                0
            } else if tail(n, 1) == wanted_last {
                1
            } else {
                return None;
            };
            Some((rank, usize::MAX - shared_prefix(n, wanted), n))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(limit)
        .map(|(_, _, n)| n.clone())
        .collect()
}
