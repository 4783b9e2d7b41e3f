//! Reading JSON configuration files (`config.json` and friends) with errors that name the file,
//! the line and the field.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: unknown model_type '{found}' (supported: {})", path.display(), supported.join(", "))]
    UnknownModelType {
        path: PathBuf,
        found: String,
        supported: Vec<String>,
    },
    #[error("{}: field '{field}': {reason}", path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        reason: String,
    },
}

fn json_error(path: &Path, e: &serde_json::Error) -> ConfigError {
    let message = e.to_string();
    // serde_json appends " at line L column C"; the position is reported separately.
    let message = match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message,
    };
    ConfigError::Json {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message,
    }
}

/// The largest JSON file (configs, tokenizers) read: a FIFO or device is refused past it, or at
/// once when it starts with a NUL byte.
pub const MAX_JSON_BYTES: u64 = 256 << 20;

/// A JSON (UTF-8) file, bounded by [`MAX_JSON_BYTES`].
pub(crate) fn read_text(path: &Path) -> Result<String, ConfigError> {
    let io = |source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bytes = aneforge_mil::bounded::read_file(path, MAX_JSON_BYTES, "a JSON file", |b| match b
        .first()
    {
        Some(0) => Err("starts with a NUL byte: binary data, not JSON".into()),
        _ => Ok(()),
    })
    .map_err(io)?;
    String::from_utf8(bytes).map_err(|e| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
        ))
    })
}

/// Parses `text` (the contents of `path`) as `T`.
pub fn parse_json<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    serde_json::from_str(text).map_err(|e| json_error(path, &e))
}

/// Reads and parses a JSON file as `T`.
pub fn read_json<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<T, ConfigError> {
    let path = path.as_ref();
    parse_json(path, &read_text(path)?)
}

/// Reads a JSON file as `T` if it exists; `Ok(None)` when it does not.
pub fn read_json_if_exists<T: DeserializeOwned>(
    path: impl AsRef<Path>,
) -> Result<Option<T>, ConfigError> {
    let path = path.as_ref();
    match read_text(path) {
        Ok(text) => parse_json(path, &text).map(Some),
        Err(ConfigError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A Hugging Face `config.json`: its `model_type`, its `architectures`, and the text for parsing
/// into a model's own config struct.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    path: PathBuf,
    text: String,
    value: serde_json::Value,
    model_type: Option<String>,
    architectures: Vec<String>,
}

impl ModelConfig {
    /// `path` is a `config.json` file or a directory holding one.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let path = if path.is_dir() {
            path.join("config.json")
        } else {
            path.to_path_buf()
        };
        let text = read_text(&path)?;
        Self::from_text(path, text)
    }

    pub fn from_text(path: PathBuf, text: String) -> Result<Self, ConfigError> {
        let value: serde_json::Value = parse_json(&path, &text)?;
        let Some(object) = value.as_object() else {
            return Err(ConfigError::Invalid {
                path,
                field: "<root>".into(),
                reason: "expected a JSON object".into(),
            });
        };
        let model_type = match object.get("model_type") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(ConfigError::Invalid {
                    path,
                    field: "model_type".into(),
                    reason: format!("expected a string, found {other}"),
                })
            }
        };
        let architectures = match object.get("architectures") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(v) => serde_json::from_value(v.clone()).map_err(|_| ConfigError::Invalid {
                path: path.clone(),
                field: "architectures".into(),
                reason: format!("expected a list of strings, found {v}"),
            })?,
        };
        Ok(ModelConfig {
            path,
            text,
            value,
            model_type,
            architectures,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn model_type(&self) -> Option<&str> {
        self.model_type.as_deref()
    }

    pub fn architectures(&self) -> &[String] {
        &self.architectures
    }

    pub fn value(&self) -> &serde_json::Value {
        &self.value
    }

    /// The `model_type`, which must be one of `supported`.
    pub fn expect_model_type(&self, supported: &[&str]) -> Result<&str, ConfigError> {
        match self.model_type.as_deref() {
            Some(t) if supported.contains(&t) => Ok(t),
            found => Err(ConfigError::UnknownModelType {
                path: self.path.clone(),
                found: found.unwrap_or("<missing>").to_string(),
                supported: supported.iter().map(|s| s.to_string()).collect(),
            }),
        }
    }

    /// The whole file parsed as a model's config struct; errors give line, column and field.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        parse_json(&self.path, &self.text)
    }

    /// One optional field parsed as `T`.
    pub fn get<T: DeserializeOwned>(&self, field: &str) -> Result<Option<T>, ConfigError> {
        match self.value.get(field) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => {
                serde_json::from_value(v.clone())
                    .map(Some)
                    .map_err(|e| ConfigError::Invalid {
                        path: self.path.clone(),
                        field: field.to_string(),
                        reason: format!("{e} (value: {v})"),
                    })
            }
        }
    }

    /// One required field parsed as `T`.
    pub fn require<T: DeserializeOwned>(&self, field: &str) -> Result<T, ConfigError> {
        self.get(field)?.ok_or_else(|| ConfigError::Invalid {
            path: self.path.clone(),
            field: field.to_string(),
            reason: "missing".into(),
        })
    }
}
