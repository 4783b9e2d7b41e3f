//! Decoder LLMs: Llama (2/3, SmolLM2, TinyLlama), Mistral, Qwen2/2.5, Qwen3, Gemma and GPT-2 from
//! Hugging Face safetensors or GGUF; prefill and decode programs with resident KV caches; sampling,
//! generation with streaming and stop conditions, chat templates and exact speculative decoding.
//!
//! [`Llm`] is a loaded model (config, weights as graph constants, tokenizer, chat template);
//! [`Runner`] compiles its step programs and holds one sequence's KV state; [`generate`] drives a
//! runner with a [`Sampler`].

pub mod audit;
pub mod block;
pub mod cache;
pub mod chat;
pub mod config;
mod generate;
pub mod lora;
mod matrix;
mod runner;
pub mod sampling;
mod speculative;
pub mod step;
pub mod train_data;
pub mod training;
mod weights;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use audit::{audit_fp16, Fp16Audit, LogitsDrift, ProbeDrift};
pub use cache::KvStorage;
pub use chat::{ChatMessage, ChatTemplate, ChatTemplateError};
pub use config::{Family, LlmConfig, LlmConfigError};
pub use generate::{generate, FinishReason, GenerateOptions, Generation, StopStrings, TextStream};
pub use matrix::Matrix;
pub use runner::{Runner, RunnerOptions, StepTimings};
pub use sampling::{Sampler, SamplingOptions};
pub use speculative::{speculative_generate, SpeculativeStats};
pub use weights::{LoadOptions, ModelWeights, WeightFormat};

use crate::gguf::{GgufError, GgufFile, GgufTokenizer};
use crate::model_dir::ModelDir;
use crate::resolve::{ModelSource, ResolveError, ResolvedModel};
use crate::tokenizer::{TextTokenizer, TokenizerError};
use crate::weights::{VarBuilder, WeightError};

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Config(#[from] LlmConfigError),
    #[error(transparent)]
    HfConfig(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Weights(#[from] WeightError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    ChatTemplate(#[from] ChatTemplateError),
    #[error("building the model graph: {0}")]
    Graph(#[from] aneforge::GraphError),
    #[error("compiling the model: {0}")]
    Compile(#[from] aneforge::Error),
    #[error("token id {id} is out of range for a vocabulary of {vocab}")]
    TokenOutOfRange { id: u64, vocab: usize },
    #[error("{tokens} tokens do not fit the context of {context} positions{hint}")]
    ContextFull {
        tokens: usize,
        context: usize,
        hint: &'static str,
    },
    #[error("empty prompt: at least one token is needed")]
    EmptyPrompt,
    #[error(
        "the {target} program produced {bad} non-finite logits after {tokens} tokens (an fp16 \
         overflow): `aneforge check-fp16` names the first op that leaves fp16's range"
    )]
    NonFinite {
        target: String,
        bad: usize,
        tokens: usize,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("internal error (a bug): {0}")]
    Internal(String),
}

/// Special tokens a generation loop and a chat template need.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecialTokens {
    pub bos: Option<(u32, String)>,
    /// Generation stops at any of these.
    pub eos: Vec<(u32, String)>,
}

/// A loaded decoder model.
pub struct Llm {
    pub config: LlmConfig,
    pub weights: ModelWeights,
    pub tokenizer: TextTokenizer,
    pub chat_template: Option<String>,
    pub special: SpecialTokens,
    /// Where it was loaded from (a directory or a `.gguf` file).
    pub path: PathBuf,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llm")
            .field("family", &self.config.family)
            .field("path", &self.path)
            .finish()
    }
}

fn named(tok: &TextTokenizer, id: u32) -> (u32, String) {
    (id, tok.id_to_token(id).unwrap_or_default())
}

impl Llm {
    /// A model id (`ORG/NAME`, from the Hugging Face cache), a directory or a `.gguf` file.
    pub fn load(spec: &str, opts: LoadOptions) -> Result<Llm, LlmError> {
        let path = Path::new(spec);
        let resolved = if path.is_file() || path.is_dir() {
            ResolvedModel {
                source: if path.is_file() {
                    ModelSource::GgufFile(path.to_path_buf())
                } else {
                    ModelSource::Dir(path.to_path_buf())
                },
                repo_id: None,
                revision: None,
            }
        } else {
            crate::resolve(spec)?
        };
        Self::from_resolved(&resolved, opts)
    }

    pub fn from_resolved(model: &ResolvedModel, opts: LoadOptions) -> Result<Llm, LlmError> {
        match &model.source {
            ModelSource::GgufFile(file) => Self::from_gguf(file, opts),
            ModelSource::Dir(dir) if dir.join("config.json").is_file() => {
                Self::from_hf_dir(dir, opts)
            }
            ModelSource::Dir(_) => Self::from_gguf(&model.gguf_file()?, opts),
        }
    }

    /// A Hugging Face directory: `config.json`, safetensors (single or sharded), `tokenizer.json`,
    /// `tokenizer_config.json` (chat template, special tokens).
    pub fn from_hf_dir(dir: &Path, opts: LoadOptions) -> Result<Llm, LlmError> {
        Self::from_model_dir(&ModelDir::open(dir)?, opts)
    }

    /// [`Llm::from_hf_dir`] of an opened directory.
    pub fn from_model_dir(model: &ModelDir, opts: LoadOptions) -> Result<Llm, LlmError> {
        let dir = &model.path;
        let config = LlmConfig::from_hf(model.config()?)?;
        let vb = VarBuilder::from_dir(dir)?;
        let weights = weights::load_hf(&config, &vb, opts)?;
        let tokenizer = TextTokenizer::from_model_dir(model)?;
        let tc = &model.tokenizer_config;
        let mut eos: Vec<(u32, String)> = config
            .eos_token_ids
            .iter()
            .map(|&id| named(&tokenizer, id))
            .collect();
        if let Some(t) = &tc.eos_token {
            if let Some(id) = tokenizer.token_to_id(t.content()) {
                if !eos.iter().any(|(e, _)| *e == id) {
                    eos.push((id, t.content().to_string()));
                }
            }
        }
        let bos = match (&tc.bos_token, config.bos_token_id) {
            (Some(t), _) => tokenizer
                .token_to_id(t.content())
                .map(|id| (id, t.content().to_string())),
            (None, Some(id)) => Some(named(&tokenizer, id)),
            _ => None,
        };
        let llm = Llm {
            chat_template: tc.chat_template().map(str::to_string),
            special: SpecialTokens { bos, eos },
            config,
            weights,
            tokenizer,
            path: dir.to_path_buf(),
        };
        llm.check_vocab()?;
        Ok(llm)
    }

    /// A GGUF file: config from metadata, the vocabulary as tokenizer, `tokenizer.chat_template`.
    pub fn from_gguf(path: &Path, opts: LoadOptions) -> Result<Llm, LlmError> {
        let mut file = GgufFile::open(path)?;
        let config = LlmConfig::from_gguf(&file)?;
        let gt = GgufTokenizer::from_gguf(&file)?;
        // the weights (which keep the file to read their data when a program is compiled) need
        // none of the vocabulary's arrays
        file.drop_metadata_arrays();
        let file = Arc::new(file);
        let chat_template = gt.chat_template.clone();
        let bos = gt.bos.clone();
        let mut eos: Vec<(u32, String)> = gt.eos.clone().into_iter().collect();
        let tokenizer = gt.tokenizer;
        for &id in &config.eos_token_ids {
            if !eos.iter().any(|(e, _)| *e == id) {
                eos.push(named(&tokenizer, id));
            }
        }
        // chat models end a turn with <|im_end|> / <|eot_id|> / <end_of_turn> when the file's EOS
        // is another token
        for t in ["<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>"] {
            if let Some(id) = tokenizer.token_to_id(t) {
                let in_template = chat_template.as_deref().is_some_and(|c| c.contains(t));
                if in_template && !eos.iter().any(|(e, _)| *e == id) {
                    eos.push((id, t.to_string()));
                }
            }
        }
        let weights = weights::load_gguf(&config, &file, opts)?;
        // everything the weights still need from the file (the integers of the matrices kept
        // quantized, deferred dense values) is read again when a program is compiled, so the
        // pages read so far need not stay resident
        file.release_pages();
        let llm = Llm {
            config,
            weights,
            tokenizer,
            chat_template,
            special: SpecialTokens { bos, eos },
            path: path.to_path_buf(),
        };
        llm.check_vocab()?;
        Ok(llm)
    }

    fn check_vocab(&self) -> Result<(), LlmError> {
        let tv = self.tokenizer.vocab_size();
        if tv > self.config.vocab_size {
            return Err(LlmError::Invalid(format!(
                "{}: the tokenizer has {tv} tokens but the model's vocabulary is {}",
                self.path.display(),
                self.config.vocab_size
            )));
        }
        Ok(())
    }

    /// Token ids of a plain prompt (with the special tokens the tokenizer adds, e.g. BOS).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        Ok(self.tokenizer.encode(text)?.ids)
    }

    /// Token ids of text that already holds its special tokens (a rendered chat).
    pub fn encode_raw(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        Ok(self.tokenizer.encode_plain(text)?.ids)
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.special.eos.iter().any(|(e, _)| *e == id)
    }

    /// The chat template, ready to render.
    pub fn chat(&self) -> Result<ChatTemplate, LlmError> {
        let source = self.chat_template.as_deref().ok_or_else(|| {
            LlmError::Invalid(format!("{} has no chat template", self.path.display()))
        })?;
        Ok(ChatTemplate::new(
            source,
            self.special.bos.as_ref().map(|(_, t)| t.clone()),
            self.special.eos.first().map(|(_, t)| t.clone()),
        )?)
    }
}
