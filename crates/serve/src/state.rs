//! What the server serves: the models under the ids clients name, the generation scheduler, the
//! limits on requests, and the metrics.

use std::sync::Arc;

use aneforge_models::encoders::{CrossEncoder, SentenceEncoder};
use aneforge_models::llm::{ChatTemplate, Llm};

use crate::error::ApiError;
use crate::metrics::{Gauges, Metrics};
use crate::rag::ask::Rag;
use crate::scheduler::Scheduler;

/// Bounds on what one request may ask for.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Request bodies larger than this are refused (413).
    pub max_body_bytes: usize,
    /// The largest `max_tokens` a request may ask for.
    pub max_tokens: usize,
    /// `max_tokens` when a request gives none (capped by what the context has left).
    pub default_max_tokens: usize,
    /// Generations waiting for a worker; past it requests get 503.
    pub max_queue: usize,
    /// Texts per embeddings request and documents per rerank request.
    pub max_inputs: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 4 << 20,
            max_tokens: 4096,
            default_max_tokens: 256,
            max_queue: 256,
            max_inputs: 2048,
        }
    }
}

pub struct ChatModel {
    pub id: String,
    pub llm: Arc<Llm>,
    /// `None` for a model without a chat template (chat requests to it are refused).
    pub template: Option<ChatTemplate>,
    pub scheduler: Scheduler,
}

pub struct EmbedModel {
    pub id: String,
    pub encoder: Arc<SentenceEncoder>,
}

pub struct RerankModel {
    pub id: String,
    pub encoder: Arc<CrossEncoder>,
}

pub struct AppState {
    pub llm: Option<ChatModel>,
    pub embed: Option<EmbedModel>,
    pub rerank: Option<RerankModel>,
    /// Retrieval-augmented chat, served under [`Rag::id`].
    pub rag: Option<Arc<Rag>>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
}

impl AppState {
    /// Every model id this server answers to.
    pub fn model_ids(&self) -> Vec<String> {
        let mut ids = Vec::new();
        ids.extend(self.llm.as_ref().map(|m| m.id.clone()));
        ids.extend(self.rag.as_ref().map(|r| r.id.clone()));
        ids.extend(self.embed.as_ref().map(|m| m.id.clone()));
        ids.extend(self.rerank.as_ref().map(|m| m.id.clone()));
        ids
    }

    pub fn gauges(&self) -> Option<Gauges> {
        self.llm.as_ref().map(|m| Gauges {
            queued: m.scheduler.queued(),
            active: m.scheduler.active(),
            workers: m.scheduler.workers(),
        })
    }

    /// The generation model `model` names, or 404 (400 when it names a model of another kind).
    pub fn chat_model(&self, model: &str) -> Result<&ChatModel, ApiError> {
        match &self.llm {
            Some(m) if m.id == model => Ok(m),
            _ => Err(self.wrong_model(model, self.llm.iter().map(|m| m.id.clone()).collect())),
        }
    }

    pub fn embed_model(&self, model: &str) -> Result<&EmbedModel, ApiError> {
        match &self.embed {
            Some(m) if m.id == model => Ok(m),
            _ => Err(self.wrong_model(model, self.embed.iter().map(|m| m.id.clone()).collect())),
        }
    }

    pub fn rerank_model(&self, model: &str) -> Result<&RerankModel, ApiError> {
        match &self.rerank {
            Some(m) if m.id == model => Ok(m),
            _ => Err(self.wrong_model(model, self.rerank.iter().map(|m| m.id.clone()).collect())),
        }
    }

    fn wrong_model(&self, model: &str, here: Vec<String>) -> ApiError {
        if self.model_ids().iter().any(|id| id == model) {
            ApiError::invalid(
                "model",
                format!(
                    "The model `{model}` is served here but not by this endpoint; this endpoint \
                     serves: {}",
                    if here.is_empty() {
                        "no model".into()
                    } else {
                        here.join(", ")
                    }
                ),
            )
            .with_code("model_not_supported")
        } else {
            ApiError::model_not_found(model, &self.model_ids())
        }
    }
}
