//! A Hugging Face model directory's shared JSON files, each read and parsed once; the config, the
//! tokenizer and the weight loaders all take this instead of re-reading the directory.

use std::path::{Path, PathBuf};

use crate::config::{read_json_if_exists, ConfigError, ModelConfig};
use crate::sentence_transformers::SentenceBertConfig;
use crate::tokenizer_config::TokenizerConfig;

#[derive(Debug, Clone)]
pub struct ModelDir {
    pub path: PathBuf,
    /// `config.json`, when the directory has one.
    pub config: Option<ModelConfig>,
    /// `tokenizer_config.json` and the chat template files beside it (defaults when absent).
    pub tokenizer_config: TokenizerConfig,
    /// `sentence_bert_config.json` (defaults when absent).
    pub sentence_bert: SentenceBertConfig,
}

impl ModelDir {
    pub fn open(dir: impl AsRef<Path>) -> Result<ModelDir, ConfigError> {
        let path = dir.as_ref().to_path_buf();
        let config_path = path.join("config.json");
        let config = if config_path.is_file() {
            Some(ModelConfig::load(&config_path)?)
        } else {
            None
        };
        Ok(ModelDir {
            config,
            tokenizer_config: TokenizerConfig::load_dir(&path)?,
            sentence_bert: read_json_if_exists(path.join("sentence_bert_config.json"))?
                .unwrap_or_default(),
            path,
        })
    }

    /// `config.json`, which every model loader needs.
    pub fn config(&self) -> Result<&ModelConfig, ConfigError> {
        self.config.as_ref().ok_or_else(|| ConfigError::Io {
            path: self.path.join("config.json"),
            source: std::io::ErrorKind::NotFound.into(),
        })
    }
}
