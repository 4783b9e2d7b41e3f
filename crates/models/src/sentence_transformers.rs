//! The sentence-transformers files next to a model: `modules.json`, the pooling module's
//! `config.json`, `sentence_bert_config.json`, `config_sentence_transformers.json`, and Dense
//! modules' `config.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{read_json, read_json_if_exists, ConfigError};
use crate::model_dir::ModelDir;

/// One entry of `modules.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ModuleEntry {
    pub idx: usize,
    pub name: String,
    /// Directory relative to the model (empty for the transformer itself).
    pub path: String,
    /// Python class path, e.g. `sentence_transformers.models.Pooling`.
    #[serde(rename = "type")]
    pub type_path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleKind {
    Transformer,
    Pooling,
    Normalize,
    Dense,
    LayerNorm,
    Dropout,
    /// Any other class, by its last path component.
    Other(String),
}

impl ModuleEntry {
    pub fn kind(&self) -> ModuleKind {
        let class = self.type_path.rsplit('.').next().unwrap_or(&self.type_path);
        match class {
            "Transformer" => ModuleKind::Transformer,
            "Pooling" => ModuleKind::Pooling,
            "Normalize" => ModuleKind::Normalize,
            "Dense" => ModuleKind::Dense,
            "LayerNorm" => ModuleKind::LayerNorm,
            "Dropout" => ModuleKind::Dropout,
            other => ModuleKind::Other(other.to_string()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolingMode {
    Cls,
    Max,
    Mean,
    MeanSqrtLen,
    WeightedMean,
    LastToken,
}

impl PoolingMode {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "cls" => PoolingMode::Cls,
            "max" => PoolingMode::Max,
            "mean" => PoolingMode::Mean,
            "mean_sqrt_len_tokens" => PoolingMode::MeanSqrtLen,
            "weightedmean" => PoolingMode::WeightedMean,
            "lasttoken" => PoolingMode::LastToken,
            _ => return None,
        })
    }
}

/// The pooling module's config, in either the current form (`pooling_mode`) or the legacy one
/// (`pooling_mode_*_tokens` flags). Several modes are concatenated in the listed order.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolingConfig {
    pub embedding_dimension: Option<usize>,
    pub modes: Vec<PoolingMode>,
    pub include_prompt: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct RawPooling {
    embedding_dimension: Option<usize>,
    word_embedding_dimension: Option<usize>,
    pooling_mode: Option<OneOrMany>,
    include_prompt: Option<bool>,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

/// Legacy flags, in sentence-transformers' concatenation order.
const LEGACY_POOLING_FLAGS: [(&str, PoolingMode); 6] = [
    ("pooling_mode_cls_token", PoolingMode::Cls),
    ("pooling_mode_max_tokens", PoolingMode::Max),
    ("pooling_mode_mean_tokens", PoolingMode::Mean),
    (
        "pooling_mode_mean_sqrt_len_tokens",
        PoolingMode::MeanSqrtLen,
    ),
    (
        "pooling_mode_weightedmean_tokens",
        PoolingMode::WeightedMean,
    ),
    ("pooling_mode_lasttoken", PoolingMode::LastToken),
];

impl PoolingConfig {
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let raw: RawPooling = read_json(path)?;
        let invalid = |reason: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            field: "pooling_mode".into(),
            reason,
        };
        let modes = match raw.pooling_mode {
            Some(OneOrMany::One(s)) => vec![s],
            Some(OneOrMany::Many(list)) => list,
            None => Vec::new(),
        };
        let mut modes = modes
            .iter()
            .map(|m| {
                PoolingMode::parse(m).ok_or_else(|| invalid(format!("unknown pooling mode '{m}'")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if modes.is_empty() {
            for (flag, mode) in LEGACY_POOLING_FLAGS {
                match raw.rest.get(flag) {
                    None | Some(serde_json::Value::Bool(false)) | Some(serde_json::Value::Null) => {
                    }
                    Some(serde_json::Value::Bool(true)) => modes.push(mode),
                    Some(other) => {
                        return Err(ConfigError::Invalid {
                            path: path.to_path_buf(),
                            field: flag.into(),
                            reason: format!("expected true or false, found {other}"),
                        })
                    }
                }
            }
        }
        if modes.is_empty() {
            modes.push(PoolingMode::Mean);
        }
        Ok(PoolingConfig {
            embedding_dimension: raw.embedding_dimension.or(raw.word_embedding_dimension),
            modes,
            include_prompt: raw.include_prompt.unwrap_or(true),
        })
    }
}

/// `sentence_bert_config.json`: the transformer module's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SentenceBertConfig {
    pub max_seq_length: Option<usize>,
    #[serde(default)]
    pub do_lower_case: bool,
}

/// `config_sentence_transformers.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SentenceTransformersConfig {
    #[serde(default)]
    pub prompts: BTreeMap<String, String>,
    pub default_prompt_name: Option<String>,
    /// `cosine`, `dot`, `euclidean` or `manhattan`; sentence-transformers assumes cosine when unset.
    pub similarity_fn_name: Option<String>,
}

/// A Dense module's `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DenseConfig {
    pub in_features: usize,
    pub out_features: usize,
    #[serde(default = "default_true")]
    pub bias: bool,
    /// Python class path, e.g. `torch.nn.modules.activation.Tanh`.
    pub activation_function: Option<String>,
    #[serde(default)]
    pub use_residual: bool,
}

fn default_true() -> bool {
    true
}

/// Every sentence-transformers file of a model directory; files that are absent take the
/// defaults sentence-transformers itself uses.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceTransformerFiles {
    pub dir: PathBuf,
    pub modules: Vec<ModuleEntry>,
    pub bert: SentenceBertConfig,
    pub st: SentenceTransformersConfig,
    /// The Pooling module's config, if `modules.json` lists one.
    pub pooling: Option<PoolingConfig>,
}

impl SentenceTransformerFiles {
    /// `modules.json` is required (it is what makes a directory a sentence-transformers model).
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let dir = dir.as_ref();
        let bert = read_json_if_exists(dir.join("sentence_bert_config.json"))?.unwrap_or_default();
        Self::load_with(dir, bert)
    }

    /// The files of an opened model directory, whose `sentence_bert_config.json` is parsed already.
    pub fn from_model_dir(dir: &ModelDir) -> Result<Self, ConfigError> {
        Self::load_with(&dir.path, dir.sentence_bert.clone())
    }

    fn load_with(dir: &Path, bert: SentenceBertConfig) -> Result<Self, ConfigError> {
        let modules_path = dir.join("modules.json");
        let mut modules: Vec<ModuleEntry> = read_json(&modules_path)?;
        modules.sort_by_key(|m| m.idx);
        for m in &modules {
            if m.path.split(['/', '\\']).any(|c| c == "..") || Path::new(&m.path).is_absolute() {
                return Err(ConfigError::Invalid {
                    path: modules_path,
                    field: format!("[{}].path", m.idx),
                    reason: format!("'{}' leaves the model directory", m.path),
                });
            }
        }
        let st =
            read_json_if_exists(dir.join("config_sentence_transformers.json"))?.unwrap_or_default();
        let pooling = match modules.iter().find(|m| m.kind() == ModuleKind::Pooling) {
            Some(m) => Some(PoolingConfig::load(dir.join(&m.path).join("config.json"))?),
            None => None,
        };
        Ok(SentenceTransformerFiles {
            dir: dir.to_path_buf(),
            modules,
            bert,
            st,
            pooling,
        })
    }

    /// The config of the Dense module `entry`.
    pub fn dense_config(&self, entry: &ModuleEntry) -> Result<DenseConfig, ConfigError> {
        read_json(self.dir.join(&entry.path).join("config.json"))
    }

    pub fn normalizes(&self) -> bool {
        self.modules
            .iter()
            .any(|m| m.kind() == ModuleKind::Normalize)
    }

    /// The prompt to prepend by default, if the model names one.
    pub fn default_prompt(&self) -> Option<&str> {
        let name = self.st.default_prompt_name.as_ref()?;
        self.st.prompts.get(name).map(String::as_str)
    }
}
