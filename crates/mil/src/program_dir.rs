//! A program directory: `model.mil` plus the blob files its BLOBFILE literals reference
//! (`weights/weight.bin`), with `@model_path` standing for the directory.

use crate::ast::{DType, Program};
use crate::blob::{BlobError, BlobFile};
use crate::text::ParseError;
use crate::validate::{validate_with_blobs, ValidationErrors};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The BLOBFILE path programs use for their single weights file.
pub const WEIGHTS_PATH: &str = "@model_path/weights/weight.bin";
const MODEL_PATH_PREFIX: &str = "@model_path/";
const PROGRAM_FILE: &str = "model.mil";

#[derive(Debug, thiserror::Error)]
pub enum ProgramDirError {
    // The cause is part of the message (not a `source`), so error chains do not repeat it.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {error}")]
    Parse { path: PathBuf, error: ParseError },
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error("BLOBFILE path \"{path}\": {reason}")]
    BlobPath { path: String, reason: String },
    #[error("{path}: {errors}")]
    Invalid {
        path: PathBuf,
        errors: ValidationErrors,
    },
}

/// The largest `model.mil` read: MIL text holds the ops, the weights live in blob files.
pub const MAX_PROGRAM_TEXT: u64 = 256 << 20;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ProgramDirError + '_ {
    move |error| ProgramDirError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// A program and its blob files, keyed by the BLOBFILE path as written.
#[derive(Clone, Debug)]
pub struct ProgramDir {
    pub program: Program,
    pub blobs: BTreeMap<String, BlobFile>,
}

/// The path below the directory that a BLOBFILE path names; rejects anything that could leave
/// the directory.
fn relative_blob_path(path: &str) -> Result<PathBuf, ProgramDirError> {
    let bad = |reason: &str| ProgramDirError::BlobPath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    let rest = path
        .strip_prefix(MODEL_PATH_PREFIX)
        .ok_or_else(|| bad("expected a path starting with @model_path/"))?;
    let rel = PathBuf::from(rest);
    if rest.is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(bad("must name a file inside the program directory"));
    }
    Ok(rel)
}

impl ProgramDir {
    /// A program whose BLOBFILE literals all reference [`WEIGHTS_PATH`], with that file's bytes.
    pub fn with_weights(program: Program, weights: Vec<u8>) -> Result<ProgramDir, ProgramDirError> {
        let mut blobs = BTreeMap::new();
        blobs.insert(
            WEIGHTS_PATH.to_string(),
            BlobFile::from_vec(WEIGHTS_PATH, weights)?,
        );
        Ok(ProgramDir { program, blobs })
    }

    /// Reads `dir/model.mil`, maps every blob file it references, and validates the whole.
    pub fn load(dir: impl AsRef<Path>) -> Result<ProgramDir, ProgramDirError> {
        let dir = dir.as_ref();
        let mil_path = dir.join(PROGRAM_FILE);
        let bytes =
            crate::bounded::read_file(&mil_path, MAX_PROGRAM_TEXT, "MIL program text", |b| match b
                .iter()
                .position(|&c| c == 0)
            {
                Some(at) => Err(format!("a NUL byte at {at}: binary data, not MIL text")),
                None => Ok(()),
            })
            .map_err(io(&mil_path))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            io(&mil_path)(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
            ))
        })?;
        let program = crate::text::parse(&text).map_err(|error| ProgramDirError::Parse {
            path: mil_path.clone(),
            error,
        })?;
        let mut blobs = BTreeMap::new();
        for (path, _, _) in program.blob_references() {
            if blobs.contains_key(path) {
                continue;
            }
            let file_path = dir.join(relative_blob_path(path)?);
            blobs.insert(path.to_string(), map_blob_file(&file_path)?);
        }
        validate_with_blobs(&program, &blobs).map_err(|errors| ProgramDirError::Invalid {
            path: mil_path,
            errors,
        })?;
        Ok(ProgramDir { program, blobs })
    }

    /// Validates, then writes `model.mil` and every blob file into `dir`. The new contents are
    /// written into a fresh sibling directory and renamed into place, so `dir` never holds a
    /// partly written program; an existing `dir` is replaced.
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<(), ProgramDirError> {
        let dir = dir.as_ref();
        validate_with_blobs(&self.program, &self.blobs).map_err(|errors| {
            ProgramDirError::Invalid {
                path: dir.join(PROGRAM_FILE),
                errors,
            }
        })?;
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "program".into());
        let unique = format!(
            "{}.{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let staging = parent.join(format!(".{base}.tmp.{unique}"));
        let result = self.write_into(&staging).and_then(|()| {
            if dir.exists() {
                let old = parent.join(format!(".{base}.old.{unique}"));
                std::fs::rename(dir, &old).map_err(io(dir))?;
                std::fs::rename(&staging, dir).map_err(io(dir))?;
                std::fs::remove_dir_all(&old).map_err(io(&old))
            } else {
                std::fs::rename(&staging, dir).map_err(io(dir))
            }
        });
        if result.is_err() && staging.exists() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        result
    }

    fn write_into(&self, staging: &Path) -> Result<(), ProgramDirError> {
        std::fs::create_dir_all(staging).map_err(io(staging))?;
        write_synced(
            &staging.join(PROGRAM_FILE),
            crate::text::print(&self.program).as_bytes(),
        )?;
        for (path, blob) in &self.blobs {
            let file = staging.join(relative_blob_path(path)?);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            write_synced(&file, blob.bytes())?;
        }
        Ok(())
    }

    /// Counts for `aneforge mil check`: functions, ops by kind, weights by dtype.
    pub fn summary(&self) -> Summary {
        let mut ops_by_kind = BTreeMap::new();
        let functions = self
            .program
            .functions
            .iter()
            .map(|f| {
                for op in &f.body.operations {
                    *ops_by_kind.entry(op.op_type.clone()).or_insert(0) += 1;
                }
                FunctionSummary {
                    name: f.name.clone(),
                    opset: f.opset.clone(),
                    inputs: f.inputs.len(),
                    outputs: f.body.outputs.len(),
                    operations: f.body.operations.len(),
                }
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut parameters = 0u64;
        let mut bytes_by_dtype = BTreeMap::new();
        for (path, offset, ty) in self.program.blob_references() {
            if !seen.insert((path, offset)) {
                continue;
            }
            parameters += ty.num_elements().unwrap_or(0) as u64;
            *bytes_by_dtype.entry(ty.dtype).or_insert(0u64) +=
                ty.packed_bytes().unwrap_or(0) as u64;
        }
        Summary {
            functions,
            ops_by_kind,
            parameters,
            bytes_by_dtype,
            blob_files: self.blobs.len(),
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), ProgramDirError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

fn map_blob_file(path: &Path) -> Result<BlobFile, ProgramDirError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let len = file.metadata().map_err(io(path))?.len();
    let name = path.display().to_string();
    let bytes: Arc<dyn AsRef<[u8]> + Send + Sync> = if len == 0 {
        Arc::new(Vec::<u8>::new())
    } else {
        // SAFETY: the map is read-only; a program directory is not modified while loaded.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io(path))?;
        Arc::new(map)
    };
    Ok(BlobFile::parse(name, bytes)?)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSummary {
    pub name: String,
    pub opset: String,
    pub inputs: usize,
    pub outputs: usize,
    pub operations: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub functions: Vec<FunctionSummary>,
    pub ops_by_kind: BTreeMap<String, usize>,
    /// Elements of all distinct BLOBFILE tensors.
    pub parameters: u64,
    /// Payload bytes of all distinct BLOBFILE tensors, by dtype.
    pub bytes_by_dtype: BTreeMap<DType, u64>,
    pub blob_files: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "functions: {}", self.functions.len())?;
        for func in &self.functions {
            writeln!(
                f,
                "  {}<{}>: {} inputs, {} outputs, {} ops",
                func.name, func.opset, func.inputs, func.outputs, func.operations
            )?;
        }
        writeln!(f, "ops by kind:")?;
        for (kind, n) in &self.ops_by_kind {
            writeln!(f, "  {kind}: {n}")?;
        }
        writeln!(f, "parameters: {}", self.parameters)?;
        writeln!(f, "weight bytes by dtype:")?;
        for (dtype, n) in &self.bytes_by_dtype {
            writeln!(f, "  {dtype}: {n}")?;
        }
        write!(f, "blob files: {}", self.blob_files)
    }
}
