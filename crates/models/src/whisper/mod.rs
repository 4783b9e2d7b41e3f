//! Whisper speech recognition: checkpoints (transformers safetensors or CTranslate2 `model.bin`),
//! audio decoding and log-mel features, the encoder and decoder programs, and decoding.

pub mod audio;
pub mod config;
pub mod ct2;
pub mod decode;
pub mod fallback;
pub mod graph;
pub mod mel;
pub mod runtime;
pub mod tokens;
pub mod weights;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use config::WhisperConfig;
pub use ct2::Ct2Model;
pub use decode::{DecodeOptions, Segment, Transcript, Whisper, WindowTokens};
pub use fallback::{Fallback, WindowScores};
pub use runtime::WhisperOptions;
pub use weights::WhisperWeights;

use crate::weights::{SafeTensorsFiles, TensorSource, VarBuilder, WeightError};

#[derive(Debug, thiserror::Error)]
pub enum WhisperError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Resolve(#[from] crate::resolve::ResolveError),
    #[error(transparent)]
    Weights(#[from] WeightError),
    #[error("Whisper config: {0}")]
    Config(String),
    #[error("{}: {reason}", path.display())]
    Audio { path: PathBuf, reason: String },
    #[error(transparent)]
    Tokenizer(#[from] crate::TokenizerError),
    #[error("Whisper program: {0}")]
    Program(#[from] aneforge::Error),
    #[error("{0}")]
    Invalid(String),
}

impl From<aneforge::GraphError> for WhisperError {
    fn from(e: aneforge::GraphError) -> Self {
        WhisperError::Program(e.into())
    }
}

impl From<aneforge::engine::EngineError> for WhisperError {
    fn from(e: aneforge::engine::EngineError) -> Self {
        WhisperError::Program(e.into())
    }
}

/// Where a model directory keeps its files: transformers' layout at the top level, or a
/// CTranslate2 conversion (at the top level or under `ctranslate2/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointFiles {
    Transformers { dir: PathBuf },
    Ctranslate2 { dir: PathBuf },
}

impl CheckpointFiles {
    /// Finds the checkpoint in `dir`: `model.safetensors` with `config.json`, else `model.bin`
    /// (top level, then `ctranslate2/`).
    pub fn find(dir: &Path) -> Result<CheckpointFiles, WhisperError> {
        let has_safetensors = dir.join("model.safetensors").is_file()
            || dir.join("model.safetensors.index.json").is_file();
        if has_safetensors && dir.join("config.json").is_file() {
            return Ok(CheckpointFiles::Transformers {
                dir: dir.to_path_buf(),
            });
        }
        for sub in [dir.to_path_buf(), dir.join("ctranslate2")] {
            if sub.join("model.bin").is_file() {
                return Ok(CheckpointFiles::Ctranslate2 { dir: sub });
            }
        }
        Err(WhisperError::Config(format!(
            "{}: no Whisper checkpoint (model.safetensors with config.json, or a CTranslate2 \
             model.bin at the top level or under ctranslate2/)",
            dir.display()
        )))
    }

    /// The directory holding the checkpoint (and its tokenizer.json).
    pub fn dir(&self) -> &Path {
        match self {
            CheckpointFiles::Transformers { dir } | CheckpointFiles::Ctranslate2 { dir } => dir,
        }
    }

    /// The config and a tensor source with transformers' names.
    pub fn open(&self) -> Result<(WhisperConfig, VarBuilder), WhisperError> {
        match self {
            CheckpointFiles::Transformers { dir } => {
                let cfg = WhisperConfig::from_hf_json(&dir.join("config.json"))?;
                let source: Arc<dyn TensorSource> = Arc::new(SafeTensorsFiles::open_dir(dir)?);
                Ok((cfg, VarBuilder::new(source)))
            }
            CheckpointFiles::Ctranslate2 { dir } => {
                let model = Ct2Model::open(dir.join("model.bin"))?;
                let cfg = WhisperConfig::from_ct2(&model)?;
                Ok((cfg, VarBuilder::new(Arc::new(model))))
            }
        }
    }
}

/// Reads the config and every weight of the checkpoint in `dir`.
pub fn load_weights(dir: &Path) -> Result<(WhisperConfig, WhisperWeights), WhisperError> {
    let files = CheckpointFiles::find(dir)?;
    let (cfg, vb) = files.open()?;
    let weights = WhisperWeights::load(&vb, &cfg)?;
    Ok((cfg, weights))
}
