//! Core ML `.mlpackage` export: a [`Program`] and its blob files become
//!
//! ```text
//! NAME.mlpackage/
//!   Manifest.json
//!   Data/com.apple.CoreML/model.mlmodel        Core ML `Model` protobuf with an ML Program
//!   Data/com.apple.CoreML/weights/weight.bin   the program's blob file(s), unchanged
//! ```
//!
//! as coremltools writes them, so coremltools (and Core ML) can load what aneforge emits. The
//! package is written to a temporary sibling directory and renamed into place.

pub mod proto;
mod spec;

pub use spec::{data_type, opset_spec};

use crate::ast::Program;
use crate::blob::{BlobError, BlobFile};
use prost::Message;
use std::path::{Path, PathBuf};

/// Where blob files live inside a package, relative to `Data/com.apple.CoreML`.
pub const WEIGHTS_DIR: &str = "weights";
const CORE_ML_DIR: &str = "com.apple.CoreML";
const MODEL_FILE: &str = "model.mlmodel";
const BLOB_PREFIX: &str = "@model_path/weights/";

#[derive(Clone, Debug, PartialEq)]
pub struct ExportOptions {
    /// The function Core ML runs by default (the only one described for single-function programs).
    pub default_function: String,
    pub author: String,
    pub short_description: String,
    pub version: String,
    pub license: String,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            default_function: "main".to_string(),
            author: String::new(),
            short_description: String::new(),
            version: String::new(),
            license: String::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("the program has no functions")]
    NoFunctions,
    #[error("function {function}: opset {opset} is not one of ios15, ios16, ios17, ios18")]
    UnknownOpset { function: String, opset: String },
    #[error("function {function} uses opset {opset} but the program's first function uses {first}; a package has one opset")]
    MixedOpsets {
        first: String,
        function: String,
        opset: String,
    },
    #[error("no function named {0} to be the package's default function")]
    NoDefaultFunction(String),
    #[error("a package with several functions needs opset ios18 (Core ML 8), not {0}")]
    MultiFunctionOpset(String),
    /// Function attributes (such as a compiled model's `FlexibleShapeInformation`) have no ML
    /// Program protobuf form; flexible shapes are exported from symbolic dimensions instead.
    #[error("function {function}: attribute {name} cannot be exported (ML Program functions carry no attributes; use symbolic dimensions for flexible shapes)")]
    FunctionAttribute { function: String, name: String },
    #[error("function {function}: output {name} is not a value of the function")]
    UnknownOutput { function: String, name: String },
    #[error("function {function}: input/output {name} has type {found}; ML Program features must be fp32, fp16 or int32 tensors")]
    FeatureType {
        function: String,
        name: String,
        found: String,
    },
    #[error("input/output {0} is fp16, which Core ML accepts as a feature only from ios16")]
    Fp16FeatureBeforeIos16(String),
    #[error("{context}: literal of type {ty} holds {found} values")]
    LiteralLength {
        context: String,
        ty: String,
        found: usize,
    },
    #[error("{context}: literal data does not fit its type {ty}")]
    LiteralData { context: String, ty: String },
    #[error("{0}: nested argument lists have no Core ML form")]
    NestedList(String),
    #[error("BLOBFILE path {0} is not under @model_path/weights/")]
    BlobPath(String),
    #[error("the program references {0} but no such blob file was given")]
    MissingBlobFile(String),
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The Core ML `Model` message for `program` (what `model.mlmodel` holds).
pub fn model_spec(
    program: &Program,
    options: &ExportOptions,
) -> Result<proto::specification::Model, ExportError> {
    spec::model(program, options)
}

/// Writes `program` as a `.mlpackage` directory at `dir` (replacing a previous one).
/// `blobs` maps BLOBFILE paths as the program writes them (`@model_path/weights/weight.bin`) to
/// their files; every reference must resolve to a blob of the declared dtype and size.
pub fn export(
    program: &Program,
    blobs: &[(&str, &BlobFile)],
    dir: &Path,
    options: &ExportOptions,
) -> Result<(), ExportError> {
    for (path, offset, ty) in program.blob_references() {
        let (_, file) = blobs
            .iter()
            .find(|(p, _)| *p == path)
            .ok_or_else(|| ExportError::MissingBlobFile(path.to_string()))?;
        file.payload(offset, ty)?;
    }
    let mut files = Vec::with_capacity(blobs.len());
    for (path, file) in blobs {
        let name = path
            .strip_prefix(BLOB_PREFIX)
            .filter(|n| !n.is_empty() && !n.contains('/') && *n != "." && *n != "..")
            .ok_or_else(|| ExportError::BlobPath(path.to_string()))?;
        files.push((name, file.bytes()));
    }
    let model = spec::model(program, options)?.encode_to_vec();
    let manifest = manifest(&model);
    write_atomically(dir, |tmp| {
        let data = tmp.join("Data").join(CORE_ML_DIR);
        let weights = data.join(WEIGHTS_DIR);
        create_dir_all(&weights)?;
        write(&data.join(MODEL_FILE), &model)?;
        for (name, bytes) in &files {
            write(&weights.join(name), bytes)?;
        }
        write(&tmp.join("Manifest.json"), manifest.as_bytes())
    })
}

/// [`export`] of a program directory (`model.mil` + its blob files).
pub fn export_program_dir(
    program_dir: &crate::ProgramDir,
    dir: &Path,
    options: &ExportOptions,
) -> Result<(), ExportError> {
    let blobs: Vec<(&str, &BlobFile)> = program_dir
        .blobs
        .iter()
        .map(|(path, file)| (path.as_str(), file))
        .collect();
    export(&program_dir.program, &blobs, dir, options)
}

/// `Manifest.json` as coremltools' model-package library writes it: one item for the model
/// specification (the root) and one for the weights directory, keyed by UUIDs.
fn manifest(model: &[u8]) -> String {
    let model_id = uuid_from(b"model", model);
    let weights_id = uuid_from(b"weights", model);
    let item = |name: &str, description: &str| {
        serde_json::json!({
            "author": CORE_ML_DIR,
            "description": description,
            "name": name,
            "path": format!("{CORE_ML_DIR}/{name}"),
        })
    };
    let mut entries = serde_json::Map::new();
    entries.insert(
        model_id.clone(),
        item(MODEL_FILE, "CoreML Model Specification"),
    );
    entries.insert(weights_id, item(WEIGHTS_DIR, "CoreML Model Weights"));
    let manifest = serde_json::json!({
        "fileFormatVersion": "1.0.0",
        "itemInfoEntries": entries,
        "rootModelIdentifier": model_id,
    });
    let mut text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    text.push('\n');
    text
}

/// A version-4-formatted UUID derived from the content (FNV-1a, two lanes), so exporting the
/// same program twice gives identical packages.
fn uuid_from(label: &[u8], content: &[u8]) -> String {
    let fnv = |seed: u64| {
        let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
        for &b in label.iter().chain([0u8].iter()).chain(content) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&fnv(0).to_be_bytes());
    bytes[8..].copy_from_slice(&fnv(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn create_dir_all(path: &Path) -> Result<(), ExportError> {
    std::fs::create_dir_all(path).map_err(io_error(path))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    std::fs::write(path, bytes).map_err(io_error(path))
}

/// Fills a fresh sibling directory of `dir`, then renames it to `dir`; an existing `dir` is moved
/// aside first and removed after the swap. On failure the temporary directory is removed.
fn write_atomically(
    dir: &Path,
    fill: impl FnOnce(&Path) -> Result<(), ExportError>,
) -> Result<(), ExportError> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = dir
        .file_name()
        .ok_or_else(|| ExportError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a directory name"),
        })?
        .to_string_lossy()
        .into_owned();
    create_dir_all(&parent)?;
    let unique = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let tmp = parent.join(format!(".{file_name}.tmp-{unique}"));
    let old = parent.join(format!(".{file_name}.old-{unique}"));
    std::fs::create_dir(&tmp).map_err(io_error(&tmp))?;
    let result = fill(&tmp).and_then(|()| {
        let existed = dir.exists();
        if existed {
            std::fs::rename(dir, &old).map_err(io_error(dir))?;
        }
        if let Err(source) = std::fs::rename(&tmp, dir) {
            if existed {
                let _ = std::fs::rename(&old, dir);
            }
            return Err(ExportError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
        if existed {
            std::fs::remove_dir_all(&old).map_err(io_error(&old))?;
        }
        Ok(())
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}
