//! Sentence embeddings as `sentence_transformers.SentenceTransformer.encode` computes them:
//! prompt, tokenize (truncating to the model's maximum length), transformer, pooling, optional
//! normalisation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::graph::Head;
use super::pooling::Pooling;
use super::runtime::{EncoderOptions, Row};
use super::{load_parts, EncoderError, Loaded};
use crate::model_dir::ModelDir;
use crate::sentence_transformers::{ModuleKind, SentenceTransformerFiles};
use crate::tokenizer::TextTokenizer;

/// Row-major `[rows, dim]` embeddings.
#[derive(Clone, Debug, PartialEq)]
pub struct Embeddings {
    pub rows: usize,
    pub dim: usize,
    pub data: Vec<f32>,
}

impl Embeddings {
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        self.data.get(i * self.dim..(i + 1) * self.dim)
    }

    pub fn iter(&self) -> impl Iterator<Item = &[f32]> {
        self.data.chunks_exact(self.dim.max(1)).take(self.rows)
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }
}

/// Per-call choices; `Default` is `SentenceTransformer.encode`'s default behaviour.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodeOptions {
    /// A key of the model's `prompts` (`config_sentence_transformers.json`).
    pub prompt_name: Option<String>,
    /// A literal prompt; wins over `prompt_name`.
    pub prompt: Option<String>,
    /// L2-normalise even when the model has no Normalize module.
    pub normalize: bool,
    /// Pooling modes instead of the model's, concatenated in order.
    pub pooling: Option<Vec<Pooling>>,
    /// Texts per program execution instead of the encoder's `EncoderOptions::batch_size`.
    pub batch_size: Option<usize>,
}

/// A sentence-transformers model (or a bare transformers encoder, pooled by mean).
pub struct SentenceEncoder {
    loaded: Loaded,
    pooling: Vec<Pooling>,
    include_prompt: bool,
    normalize: bool,
    prompts: BTreeMap<String, String>,
    default_prompt_name: Option<String>,
    dir: PathBuf,
}

impl std::fmt::Debug for SentenceEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEncoder")
            .field("dir", &self.dir)
            .field("family", &self.loaded.runtime.cfg.family)
            .field("pooling", &self.pooling)
            .field("normalize", &self.normalize)
            .finish()
    }
}

impl SentenceEncoder {
    /// A model id (`ORG/NAME`, found in the Hugging Face cache) or a directory.
    pub fn load(spec: &str, options: EncoderOptions) -> Result<SentenceEncoder, EncoderError> {
        let resolved = crate::resolve(spec)?;
        SentenceEncoder::from_dir(resolved.dir(), options)
    }

    pub fn from_dir(
        dir: impl AsRef<Path>,
        options: EncoderOptions,
    ) -> Result<SentenceEncoder, EncoderError> {
        let dir = dir.as_ref();
        let model = ModelDir::open(dir)?;
        let st = if dir.join("modules.json").is_file() {
            Some(SentenceTransformerFiles::from_model_dir(&model)?)
        } else {
            None
        };
        if let Some(st) = &st {
            let unsupported: Vec<String> = st
                .modules
                .iter()
                .filter(|m| {
                    !matches!(
                        m.kind(),
                        ModuleKind::Transformer
                            | ModuleKind::Pooling
                            | ModuleKind::Normalize
                            | ModuleKind::Dropout
                    )
                })
                .map(|m| m.type_path.clone())
                .collect();
            if !unsupported.is_empty() {
                return Err(EncoderError::Unsupported(format!(
                    "{}: modules.json lists modules this encoder does not run: {} (supported: \
                     Transformer, Pooling, Normalize, Dropout)",
                    dir.join("modules.json").display(),
                    unsupported.join(", ")
                )));
            }
        }
        let loaded = load_parts(&model, &options, false)?;
        let pooling_module = st.as_ref().and_then(|s| {
            let m = s.modules.iter().find(|m| m.kind() == ModuleKind::Pooling)?;
            Some((dir.join(&m.path).join("config.json"), s.pooling.as_ref()?))
        });
        if let Some((path, p)) = &pooling_module {
            let hidden = loaded.runtime.cfg.hidden_size;
            if let Some(d) = p.embedding_dimension.filter(|&d| d != hidden) {
                return Err(EncoderError::Model {
                    path: path.clone(),
                    message: format!(
                        "word_embedding_dimension is {d}, but the transformer's hidden size is {hidden}"
                    ),
                });
            }
        }
        let (pooling, include_prompt) = match st.as_ref().and_then(|s| s.pooling.as_ref()) {
            Some(p) => (
                p.modes.iter().copied().map(Pooling::from).collect(),
                p.include_prompt,
            ),
            None => (vec![Pooling::Mean], true),
        };
        Ok(SentenceEncoder {
            loaded,
            pooling,
            include_prompt,
            normalize: st.as_ref().is_some_and(|s| s.normalizes()),
            prompts: st
                .as_ref()
                .map(|s| s.st.prompts.clone())
                .unwrap_or_default(),
            default_prompt_name: st.as_ref().and_then(|s| s.st.default_prompt_name.clone()),
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.loaded.tokenizer
    }

    pub fn pooling(&self) -> &[Pooling] {
        &self.pooling
    }

    /// Whether the model itself L2-normalises (a Normalize module).
    pub fn normalizes(&self) -> bool {
        self.normalize
    }

    pub fn prompts(&self) -> &BTreeMap<String, String> {
        &self.prompts
    }

    /// Tokens per text after truncation (special tokens included).
    pub fn max_length(&self) -> usize {
        self.loaded.runtime.max_length
    }

    /// The embedding width with the model's own pooling.
    pub fn dimension(&self) -> usize {
        self.pooling.len() * self.loaded.runtime.cfg.hidden_size
    }

    /// Compiled bucket programs currently held.
    pub fn cached_programs(&self) -> usize {
        self.loaded.runtime.cached_programs()
    }

    /// Bucket programs compiled since loading, evicted and recompiled ones included.
    pub fn compiled_programs(&self) -> usize {
        self.loaded.runtime.compiled_programs()
    }

    /// Bytes of weights of the compiled programs held (shows the effect of compression).
    pub fn program_weight_bytes(&self) -> usize {
        self.loaded.runtime.program_weight_bytes()
    }

    pub fn encode(&self, texts: &[&str]) -> Result<Embeddings, EncoderError> {
        self.encode_with(texts, &EncodeOptions::default(), &mut |_| {})
    }

    /// Embeds `texts`; `progress` is called with the number of texts each finished batch held.
    pub fn encode_with(
        &self,
        texts: &[&str],
        options: &EncodeOptions,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Embeddings, EncoderError> {
        let prompt = self.resolve_prompt(options)?;
        let modes = options
            .pooling
            .clone()
            .unwrap_or_else(|| self.pooling.clone());
        if modes.is_empty() {
            return Err(EncoderError::Unsupported(
                "at least one pooling mode is needed".into(),
            ));
        }
        let dim = modes.len() * self.loaded.runtime.cfg.hidden_size;
        if texts.is_empty() {
            return Ok(Embeddings {
                rows: 0,
                dim,
                data: Vec::new(),
            });
        }
        let tokenizer = &self.loaded.tokenizer;
        let prompt_len = match prompt.as_deref() {
            Some(p) if !self.include_prompt => self.loaded.prompt_length(p)?,
            _ => 0,
        };
        let mut rows = Vec::with_capacity(texts.len());
        for (index, text) in texts.iter().enumerate() {
            let full;
            let text = match prompt.as_deref() {
                Some(p) => {
                    full = format!("{p}{text}");
                    full.as_str()
                }
                None => text,
            };
            let t = tokenizer.encode(text).map_err(|e| EncoderError::Input {
                index,
                message: e.to_string(),
            })?;
            rows.push(Row {
                ids: t.ids,
                type_ids: t.type_ids,
                prompt_len,
            });
        }
        let head = Head::Pooled {
            modes,
            normalize: self.normalize || options.normalize,
        };
        let vectors = self
            .loaded
            .runtime
            .run(&rows, &head, options.batch_size, progress)?;
        let mut data = Vec::with_capacity(texts.len() * dim);
        for v in vectors {
            data.extend_from_slice(&v);
        }
        Ok(Embeddings {
            rows: texts.len(),
            dim,
            data,
        })
    }

    /// sentence-transformers' rule: an explicit prompt wins, then a named one (which must
    /// exist), then the model's default prompt; an empty prompt is no prompt.
    fn resolve_prompt(&self, options: &EncodeOptions) -> Result<Option<String>, EncoderError> {
        let prompt = match (&options.prompt, &options.prompt_name) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(name)) => Some(self.prompts.get(name).cloned().ok_or_else(|| {
                EncoderError::Unsupported(format!(
                    "prompt name '{name}' is not among the model's prompts {:?}",
                    self.prompts.keys().collect::<Vec<_>>()
                ))
            })?),
            (None, None) => self
                .default_prompt_name
                .as_ref()
                .and_then(|n| self.prompts.get(n).cloned()),
        };
        Ok(prompt.filter(|p| !p.is_empty()))
    }
}
