//! Rust errors as Python exceptions. The message is the error and its causes, as the CLI prints
//! them; the class says what kind of failure it is:
//!
//! - `ModelNotFoundError` (a `FileNotFoundError`): the model or one of its files is not there;
//! - `InvalidInputError` (a `ValueError`): the caller's data or arguments (shapes, dtypes, unknown
//!   ports, bad names, options out of range, a prompt that does not fit);
//! - `AneforgeError` (a `RuntimeError`): anything else (a model file that cannot be read, an
//!   engine or compile failure).

use std::error::Error;

use aneforge::engine::{EngineError, SelectError};
use aneforge_models::encoders::EncoderError;
use aneforge_models::llm::LlmError;
use aneforge_models::vision::{ImageError, VisionError};
use aneforge_models::whisper::WhisperError;
use aneforge_models::ResolveError;
use aneforge_onnx::OnnxError;
use pyo3::create_exception;
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

create_exception!(
    aneforge,
    AneforgeError,
    PyRuntimeError,
    "A failure inside aneforge (reading a model, compiling or running a program)."
);
create_exception!(
    aneforge,
    InvalidInputError,
    PyValueError,
    "Arguments or data aneforge cannot take: wrong shape or dtype, unknown port, bad option."
);
create_exception!(
    aneforge,
    ModelNotFoundError,
    PyFileNotFoundError,
    "The model (or a file it needs) is not where aneforge looked."
);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    NotFound,
    Invalid,
    Internal,
}

/// The error and every cause not already part of its text, joined by `: `.
pub fn chain(e: &dyn Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

pub fn raise(kind: Kind, message: String) -> PyErr {
    match kind {
        Kind::NotFound => ModelNotFoundError::new_err(message),
        Kind::Invalid => InvalidInputError::new_err(message),
        Kind::Internal => AneforgeError::new_err(message),
    }
}

pub fn invalid(message: impl Into<String>) -> PyErr {
    InvalidInputError::new_err(message.into())
}

fn resolve_kind(e: &ResolveError) -> Kind {
    match e {
        ResolveError::NotFound { .. } | ResolveError::MissingFile { .. } => Kind::NotFound,
        ResolveError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Kind::NotFound
        }
        ResolveError::BadSpec { .. } => Kind::Invalid,
        _ => Kind::Internal,
    }
}

fn engine_kind(e: &EngineError) -> Kind {
    match e {
        EngineError::Port(_) | EngineError::UnknownFunction { .. } => Kind::Invalid,
        _ => Kind::Internal,
    }
}

fn program_kind(e: &aneforge::Error) -> Kind {
    match e {
        aneforge::Error::Graph(_) => Kind::Invalid,
        aneforge::Error::Engine(e) => engine_kind(e),
        _ => Kind::Internal,
    }
}

pub fn program(e: aneforge::Error) -> PyErr {
    raise(program_kind(&e), chain(&e))
}

/// A compile failure of the model at `path`, naming it.
pub fn program_of(path: &std::path::Path, e: aneforge::Error) -> PyErr {
    raise(
        program_kind(&e),
        format!("compiling {}: {}", path.display(), chain(&e)),
    )
}

pub fn graph(e: aneforge::GraphError) -> PyErr {
    raise(Kind::Invalid, chain(&e))
}

pub fn select(e: SelectError) -> PyErr {
    let kind = match e {
        SelectError::Target { .. } | SelectError::CpuTargetOnAne => Kind::Invalid,
        _ => Kind::Internal,
    };
    raise(kind, chain(&e))
}

pub fn encoder(e: EncoderError) -> PyErr {
    let kind = match &e {
        EncoderError::Resolve(r) => resolve_kind(r),
        EncoderError::Input { .. } | EncoderError::Unsupported(_) => Kind::Invalid,
        EncoderError::Program(p) => program_kind(p),
        _ => Kind::Internal,
    };
    raise(kind, chain(&e))
}

pub fn llm(e: LlmError) -> PyErr {
    let kind = match &e {
        LlmError::Resolve(r) => resolve_kind(r),
        LlmError::Invalid(_)
        | LlmError::EmptyPrompt
        | LlmError::ContextFull { .. }
        | LlmError::TokenOutOfRange { .. } => Kind::Invalid,
        LlmError::Compile(p) => program_kind(p),
        _ => Kind::Internal,
    };
    raise(kind, chain(&e))
}

pub fn vision(e: VisionError) -> PyErr {
    let kind = match &e {
        VisionError::Resolve(r) => resolve_kind(r),
        VisionError::Image(ImageError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Kind::NotFound
        }
        VisionError::Image(_) | VisionError::Unsupported(_) => Kind::Invalid,
        VisionError::Program(p) => program_kind(p),
        _ => Kind::Internal,
    };
    raise(kind, chain(&e))
}

pub fn whisper(e: WhisperError) -> PyErr {
    let kind = match &e {
        WhisperError::Resolve(r) => resolve_kind(r),
        WhisperError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Kind::NotFound
        }
        WhisperError::Audio { .. } | WhisperError::Invalid(_) => Kind::Invalid,
        WhisperError::Program(p) => program_kind(p),
        _ => Kind::Internal,
    };
    raise(kind, chain(&e))
}

pub fn onnx(e: OnnxError) -> PyErr {
    let kind = match &e {
        OnnxError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Kind::NotFound
        }
        OnnxError::Decode { .. }
        | OnnxError::UnsupportedModel(_)
        | OnnxError::UnsupportedInput { .. }
        | OnnxError::Input { .. }
        | OnnxError::Unsupported { .. } => Kind::Invalid,
        _ => Kind::Internal,
    };
    // The importer names the CLI's option; `import_onnx` takes the same bindings as `input_shapes`.
    raise(kind, chain(&e).replace("--input-shape ", "input_shapes "))
}
