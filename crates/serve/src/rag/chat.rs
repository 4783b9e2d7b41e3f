//! Retrieval-augmented chat on the server: a chat request naming the RAG model retrieves
//! passages for its last user message, the LLM answers from them (earlier user and assistant
//! turns kept; the client's system messages give way to the RAG instruction), and the reply ends
//! with the passages' sources.

use std::sync::Arc;

use axum::response::Response;

use super::ask::Rag;
use crate::error::ApiError;
use crate::routes::{chat_messages, chat_prompt, run_chat};
use crate::schema::ChatRequest;
use crate::state::AppState;

pub async fn answer(
    state: &Arc<AppState>,
    rag: Arc<Rag>,
    req: ChatRequest,
) -> Result<Response, ApiError> {
    let Some(model) = state.llm.as_ref() else {
        return Err(ApiError::invalid(
            "model",
            "retrieval chat needs an LLM (-m)",
        ));
    };
    let messages = chat_messages(&req.messages)?;
    let Some((last, earlier)) = messages.split_last().filter(|(m, _)| m.role == "user") else {
        return Err(ApiError::invalid(
            "messages",
            "the last message must be the user's question",
        ));
    };
    if last.content.trim().is_empty() {
        return Err(ApiError::invalid("messages", "the question is empty"));
    }
    let question = last.content.clone();
    let history: Vec<_> = earlier
        .iter()
        .filter(|m| m.role != "system")
        .cloned()
        .collect();
    let retriever = rag.clone();
    let sources = tokio::task::spawn_blocking(move || retriever.retrieve(&question))
        .await
        .map_err(|e| ApiError::internal(format!("the retrieval task failed: {e}")))?
        .map_err(|e| ApiError::internal(format!("retrieval failed: {e:#}")))?;
    let prompt = chat_prompt(model, &Rag::messages(&last.content, &sources, &history))?;
    run_chat(
        state,
        model,
        prompt,
        &req.sampling,
        req.model.clone(),
        Some(Rag::citations(&sources)),
    )
    .await
}
