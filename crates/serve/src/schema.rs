//! Request and response bodies of the OpenAI API (chat, completions, embeddings, models) and of
//! the Cohere/Jina rerank API, as far as this server implements them. Unknown request fields are
//! ignored, as OpenAI's server ignores them.

use serde::{Deserialize, Serialize};

/// `"text"` or `["text", ...]`.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// Message content: a string or a list of typed parts (only `text` parts are understood).
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Deserialize, Debug, Clone)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
}

#[derive(Deserialize, Debug, Clone, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The sampling and length fields chat and completions share.
#[derive(Deserialize, Debug, Clone, Default)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Signed so that a negative value is reported as such instead of as a parse error.
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub stop: Option<OneOrMany>,
    pub seed: Option<u64>,
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Deserialize, Debug, Clone)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: OneOrMany,
    #[serde(flatten)]
    pub sampling: Sampling,
    #[serde(default)]
    pub echo: bool,
}

#[derive(Deserialize, Debug, Clone)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: serde_json::Value,
    pub encoding_format: Option<String>,
    pub dimensions: Option<i64>,
}

/// A rerank document: a string (Cohere, Jina) or `{"text": ...}` (Jina, older Cohere).
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum RerankDocument {
    Text(String),
    Object { text: String },
}

impl RerankDocument {
    pub fn text(&self) -> &str {
        match self {
            RerankDocument::Text(t) | RerankDocument::Object { text: t } => t,
        }
    }
}

#[derive(Deserialize, Debug, Clone)]
pub struct RerankRequest {
    pub model: String,
    pub query: String,
    pub documents: Vec<RerankDocument>,
    pub top_n: Option<i64>,
    #[serde(default)]
    pub return_documents: bool,
}

#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }
    }
}

#[derive(Serialize, Debug)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: String,
}

#[derive(Serialize, Debug)]
pub struct ChatChoice {
    pub index: usize,
    pub message: AssistantMessage,
    pub finish_reason: &'static str,
    pub logprobs: Option<()>,
}

#[derive(Serialize, Debug)]
pub struct ChatResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Serialize, Debug, Default)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

#[derive(Serialize, Debug)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub finish_reason: Option<&'static str>,
    pub logprobs: Option<()>,
}

#[derive(Serialize, Debug)]
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Serialize, Debug)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub finish_reason: Option<&'static str>,
    pub logprobs: Option<()>,
}

/// A completion, or one chunk of a streamed completion (the same shape).
#[derive(Serialize, Debug)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Serialize, Debug)]
pub struct EmbeddingData {
    pub object: &'static str,
    pub index: usize,
    /// A list of floats, or base64 of their little-endian f32 bytes.
    pub embedding: serde_json::Value,
}

#[derive(Serialize, Debug)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Serialize, Debug)]
pub struct EmbeddingResponse {
    pub object: &'static str,
    pub data: Vec<EmbeddingData>,
    pub model: String,
    pub usage: EmbeddingUsage,
}

#[derive(Serialize, Debug)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
}

#[derive(Serialize, Debug)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[derive(Serialize, Debug)]
pub struct RerankText {
    pub text: String,
}

#[derive(Serialize, Debug)]
pub struct RerankResult {
    pub index: usize,
    pub relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankText>,
}

#[derive(Serialize, Debug)]
pub struct RerankResponse {
    pub id: String,
    pub model: String,
    pub results: Vec<RerankResult>,
}
