//! `tokenizer_config.json` (special tokens, length limit, chat template) and the separate
//! `chat_template.jinja` / `chat_template.json` files newer transformers versions write.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::config::{read_json_if_exists, read_text, ConfigError};

/// A special token as written: a bare string or an `AddedToken` object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TokenSpec {
    Text(String),
    Added { content: String },
}

impl TokenSpec {
    pub fn content(&self) -> &str {
        match self {
            TokenSpec::Text(s) => s,
            TokenSpec::Added { content } => content,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NamedTemplate {
    pub name: String,
    pub template: String,
}

/// `chat_template` as written: one template, or several by name (`default`, `tool_use`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ChatTemplates {
    One(String),
    Named(Vec<NamedTemplate>),
}

impl ChatTemplates {
    /// The template named `name`, or the only/`default` one when `name` is `None`.
    pub fn get(&self, name: Option<&str>) -> Option<&str> {
        match (self, name) {
            (ChatTemplates::One(t), None | Some("default")) => Some(t),
            (ChatTemplates::One(_), Some(_)) => None,
            (ChatTemplates::Named(list), name) => list
                .iter()
                .find(|t| t.name == name.unwrap_or("default"))
                .map(|t| t.template.as_str()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AddedTokenEntry {
    pub content: String,
    #[serde(default)]
    pub special: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct TokenizerConfig {
    pub chat_template: Option<ChatTemplates>,
    pub bos_token: Option<TokenSpec>,
    pub eos_token: Option<TokenSpec>,
    pub unk_token: Option<TokenSpec>,
    pub pad_token: Option<TokenSpec>,
    pub sep_token: Option<TokenSpec>,
    pub cls_token: Option<TokenSpec>,
    pub mask_token: Option<TokenSpec>,
    pub add_bos_token: Option<bool>,
    pub add_eos_token: Option<bool>,
    pub do_lower_case: Option<bool>,
    /// transformers writes a huge float (1e30) for "no limit"; see [`TokenizerConfig::max_length`].
    pub model_max_length: Option<f64>,
    pub padding_side: Option<String>,
    pub tokenizer_class: Option<String>,
    #[serde(default)]
    pub added_tokens_decoder: BTreeMap<String, AddedTokenEntry>,
}

#[derive(Deserialize)]
struct ChatTemplateJson {
    chat_template: ChatTemplates,
}

impl TokenizerConfig {
    /// Reads `dir/tokenizer_config.json` (defaults when absent); a `chat_template.jinja` or
    /// `chat_template.json` next to it takes precedence for the chat template, as in transformers.
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let dir = dir.as_ref();
        let mut config: TokenizerConfig =
            read_json_if_exists(dir.join("tokenizer_config.json"))?.unwrap_or_default();
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            config.chat_template = Some(ChatTemplates::One(read_text(&jinja)?));
        } else if let Some(json) =
            read_json_if_exists::<ChatTemplateJson>(dir.join("chat_template.json"))?
        {
            config.chat_template = Some(json.chat_template);
        }
        Ok(config)
    }

    /// `model_max_length` when it is a real limit (transformers' "unlimited" is ~1e30).
    pub fn max_length(&self) -> Option<usize> {
        self.model_max_length
            .filter(|v| (0.0..1e15).contains(v))
            .map(|v| v as usize)
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_ref().and_then(|t| t.get(None))
    }
}
