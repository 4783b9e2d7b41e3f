//! The HTTP endpoints: OpenAI's `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
//! `/v1/models`; Cohere/Jina's `/v1/rerank`; `/health` and Prometheus `/metrics`. Every error is
//! an [`ApiError`] body, including malformed JSON, oversized bodies and unknown paths.

use std::sync::Arc;
use std::time::Instant;

use aneforge_models::encoders::{EncodeOptions, EncoderError};
use aneforge_models::llm::ChatMessage;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::generation::{self, Piece};
use crate::schema::*;
use crate::state::{AppState, ChatModel};

pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.limits.max_body_bytes;
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/rerank", post(rerank))
        .route("/rerank", post(rerank))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(unknown_path)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), record))
        .with_state(state)
}

/// Counts every response by endpoint and status, with its latency to the response's headers
/// (for a stream: to its first byte).
async fn record(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", |p| p.as_str())
        .to_string();
    let started = Instant::now();
    let response = next.run(req).await;
    state.metrics.request(
        &endpoint,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

async fn unknown_path() -> ApiError {
    ApiError::not_found("Unknown path: see /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank, /health, /metrics")
}

async fn wrong_method() -> ApiError {
    ApiError::bad_request("This path does not take this HTTP method")
        .with_status(StatusCode::METHOD_NOT_ALLOWED)
}

/// The body as `T`; a body that is too large, not JSON or not of `T`'s shape is a 4xx.
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|e| {
        let status = e.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "The request body is larger than this server accepts (--max-body-bytes)".to_string()
        } else {
            format!("Could not read the request body: {e}")
        };
        ApiError::bad_request(message).with_status(status)
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "We could not parse the JSON body of your request: {e}"
        ))
    })
}

fn text_of(i: usize, m: &Message) -> Result<String, ApiError> {
    match &m.content {
        None => Ok(String::new()),
        Some(Content::Text(t)) => Ok(t.clone()),
        Some(Content::Parts(parts)) => {
            let mut out = String::new();
            for p in parts {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => out.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::invalid(
                            &format!("messages[{i}].content"),
                            format!("only text content parts are supported, got a `{kind}` part"),
                        ))
                    }
                }
            }
            Ok(out)
        }
    }
}

/// The chat template's rendering of the messages, as token ids.
pub fn chat_prompt(model: &ChatModel, messages: &[ChatMessage]) -> Result<Vec<u32>, ApiError> {
    let template = model.template.as_ref().ok_or_else(|| {
        ApiError::invalid(
            "model",
            format!("`{}` has no chat template: use /v1/completions", model.id),
        )
    })?;
    let text = template
        .render(messages, true)
        .map_err(|e| ApiError::invalid("messages", format!("the chat template failed: {e}")))?;
    model
        .llm
        .encode_raw(&text)
        .map_err(|e| ApiError::internal(format!("tokenizing the prompt: {e}")))
}

pub fn chat_messages(messages: &[Message]) -> Result<Vec<ChatMessage>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| match m.role.as_str() {
            "system" | "developer" | "user" | "assistant" => {
                let role = if m.role == "developer" {
                    "system"
                } else {
                    &m.role
                };
                Ok(ChatMessage::new(role, &text_of(i, m)?))
            }
            other => Err(ApiError::invalid(
                &format!("messages[{i}].role"),
                format!("role must be system, developer, user or assistant, got `{other}`"),
            )),
        })
        .collect()
}

async fn chat(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(body)?;
    if let Some(rag) = state.rag.as_ref().filter(|r| r.id == req.model) {
        return crate::rag::chat::answer(&state, rag.clone(), req).await;
    }
    let model = state.chat_model(&req.model)?;
    let messages = chat_messages(&req.messages)?;
    let prompt = chat_prompt(model, &messages)?;
    run_chat(
        &state,
        model,
        prompt,
        &req.sampling,
        req.model.clone(),
        None,
    )
    .await
}

/// Generates a chat reply to `prompt`; `appendix` is text appended to the reply after generation
/// (the sources of a retrieval-augmented answer).
pub async fn run_chat(
    state: &AppState,
    model: &ChatModel,
    prompt: Vec<u32>,
    sampling: &Sampling,
    model_name: String,
    appendix: Option<String>,
) -> Result<Response, ApiError> {
    let options = generation::options(
        sampling,
        prompt.len(),
        model.scheduler.context(),
        &state.limits,
        "messages",
    )?;
    let rx = generation::submit(model, prompt, options)?;
    let id = generation::response_id("chatcmpl");
    let created = generation::unix_seconds();
    if sampling.stream {
        let include_usage = sampling
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        let chunk = move |choices: Vec<ChatChunkChoice>, usage: Option<Usage>| {
            serde_json::to_string(&ChatChunk {
                id: id.clone(),
                object: "chat.completion.chunk",
                created,
                model: model_name.clone(),
                choices,
                usage,
            })
            .unwrap_or_default()
        };
        let choice = |delta: Delta, finish_reason| ChatChunkChoice {
            index: 0,
            delta,
            finish_reason,
            logprobs: None,
        };
        return Ok(generation::sse(rx, move |piece| match piece {
            Piece::Start => vec![chunk(
                vec![choice(
                    Delta {
                        role: Some("assistant"),
                        content: Some(String::new()),
                    },
                    None,
                )],
                None,
            )],
            Piece::Text(t) => vec![chunk(
                vec![choice(
                    Delta {
                        role: None,
                        content: Some(t),
                    },
                    None,
                )],
                None,
            )],
            Piece::Finish(reason, usage) => {
                let mut out = Vec::new();
                if let Some(a) = &appendix {
                    out.push(chunk(
                        vec![choice(
                            Delta {
                                role: None,
                                content: Some(a.clone()),
                            },
                            None,
                        )],
                        None,
                    ));
                }
                out.push(chunk(vec![choice(Delta::default(), Some(reason))], None));
                if include_usage {
                    out.push(chunk(Vec::new(), Some(usage)));
                }
                out
            }
        }));
    }
    let (mut text, finished) = generation::collect(rx).await?;
    text.push_str(appendix.as_deref().unwrap_or_default());
    Ok(Json(ChatResponse {
        id,
        object: "chat.completion",
        created,
        model: model_name,
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content: text,
            },
            finish_reason: generation::finish_reason(&finished.finish),
            logprobs: None,
        }],
        usage: Usage::new(finished.prompt_tokens, finished.completion_tokens),
    })
    .into_response())
}

async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(body)?;
    let model = state.chat_model(&req.model)?;
    if req.echo {
        return Err(ApiError::invalid("echo", "echo is not supported"));
    }
    let prompts = req.prompt.into_vec();
    let [text] = prompts.as_slice() else {
        return Err(ApiError::invalid(
            "prompt",
            format!(
                "exactly one prompt per request is supported, got {}",
                prompts.len()
            ),
        ));
    };
    let prompt = model
        .llm
        .encode(text)
        .map_err(|e| ApiError::internal(format!("tokenizing the prompt: {e}")))?;
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt has no tokens"));
    }
    let options = generation::options(
        &req.sampling,
        prompt.len(),
        model.scheduler.context(),
        &state.limits,
        "prompt",
    )?;
    let rx = generation::submit(model, prompt, options)?;
    let id = generation::response_id("cmpl");
    let created = generation::unix_seconds();
    let name = req.model.clone();
    let response = move |text: String, finish_reason, usage| CompletionResponse {
        id: id.clone(),
        object: "text_completion",
        created,
        model: name.clone(),
        choices: vec![CompletionChoice {
            index: 0,
            text,
            finish_reason,
            logprobs: None,
        }],
        usage,
    };
    if req.sampling.stream {
        let include_usage = req
            .sampling
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        return Ok(generation::sse(rx, move |piece| {
            let body = match piece {
                Piece::Start => return Vec::new(),
                Piece::Text(t) => response(t, None, None),
                Piece::Finish(reason, usage) => {
                    response(String::new(), Some(reason), include_usage.then_some(usage))
                }
            };
            vec![serde_json::to_string(&body).unwrap_or_default()]
        }));
    }
    let (text, finished) = generation::collect(rx).await?;
    let usage = Usage::new(finished.prompt_tokens, finished.completion_tokens);
    Ok(Json(response(
        text,
        Some(generation::finish_reason(&finished.finish)),
        Some(usage),
    ))
    .into_response())
}

fn encoder_error(e: EncoderError) -> ApiError {
    match e {
        EncoderError::Input { .. } => ApiError::invalid("input", e.to_string()),
        e => ApiError::internal(e.to_string()),
    }
}

fn embedding_inputs(input: &serde_json::Value) -> Result<Vec<String>, ApiError> {
    let unsupported = || {
        ApiError::invalid(
            "input",
            "input must be a string or a list of strings (token-id inputs are not supported)",
        )
    };
    match input {
        serde_json::Value::String(s) => Ok(vec![s.clone()]),
        serde_json::Value::Array(items) if items.is_empty() => Err(ApiError::invalid(
            "input",
            "input must not be an empty list",
        )),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(unsupported))
            .collect(),
        _ => Err(unsupported()),
    }
}

async fn embeddings(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: EmbeddingRequest = parse(body)?;
    let model = state.embed_model(&req.model)?;
    let texts = embedding_inputs(&req.input)?;
    if texts.len() > state.limits.max_inputs {
        return Err(ApiError::invalid(
            "input",
            format!(
                "at most {} inputs per request, got {}",
                state.limits.max_inputs,
                texts.len()
            ),
        ));
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("encoding_format must be float or base64, got `{other}`"),
            ))
        }
    };
    let encoder = model.encoder.clone();
    if let Some(d) = req.dimensions {
        if d as u64 != encoder.dimension() as u64 {
            return Err(ApiError::invalid(
                "dimensions",
                format!(
                    "`{}` has {} dimensions and cannot be shortened to {d}",
                    model.id,
                    encoder.dimension()
                ),
            ));
        }
    }
    let (embeddings, tokens) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let tokens: usize = texts
            .iter()
            .map(|t| encoder.tokenizer().encode(t).map_or(0, |e| e.ids.len()))
            .sum();
        encoder
            .encode_with(&refs, &EncodeOptions::default(), &mut |_| {})
            .map(|e| (e, tokens))
    })
    .await
    .map_err(|e| ApiError::internal(format!("the embedding task failed: {e}")))?
    .map_err(encoder_error)?;
    let data = embeddings
        .iter()
        .enumerate()
        .map(|(index, row)| EmbeddingData {
            object: "embedding",
            index,
            embedding: if base64 {
                let bytes: Vec<u8> = row.iter().flat_map(|x| x.to_le_bytes()).collect();
                serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                serde_json::json!(row)
            },
        })
        .collect();
    Ok(Json(EmbeddingResponse {
        object: "list",
        data,
        model: req.model,
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    })
    .into_response())
}

async fn rerank(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: RerankRequest = parse(body)?;
    let model = state.rerank_model(&req.model)?;
    if req.documents.is_empty() {
        return Err(ApiError::invalid(
            "documents",
            "documents must not be empty",
        ));
    }
    if req.documents.len() > state.limits.max_inputs {
        return Err(ApiError::invalid(
            "documents",
            format!(
                "at most {} documents per request, got {}",
                state.limits.max_inputs,
                req.documents.len()
            ),
        ));
    }
    let top_n = match req.top_n {
        Some(n) if n < 1 => {
            return Err(ApiError::invalid(
                "top_n",
                format!("top_n must be at least 1, got {n}"),
            ))
        }
        Some(n) => Some(n as usize),
        None => None,
    };
    let encoder = model.encoder.clone();
    let docs: Vec<String> = req.documents.iter().map(|d| d.text().to_string()).collect();
    let query = req.query.clone();
    let ranked = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        encoder.rank(&query, &refs, top_n, false, &mut |_| {})
    })
    .await
    .map_err(|e| ApiError::internal(format!("the rerank task failed: {e}")))?
    .map_err(encoder_error)?;
    let results = ranked
        .iter()
        .map(|r| RerankResult {
            index: r.corpus_id,
            relevance_score: r.score,
            document: req.return_documents.then(|| RerankText {
                text: req.documents[r.corpus_id].text().to_string(),
            }),
        })
        .collect();
    Ok(Json(RerankResponse {
        id: generation::response_id("rerank"),
        model: req.model,
        results,
    })
    .into_response())
}

async fn models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: state
            .model_ids()
            .into_iter()
            .map(|id| ModelCard {
                id,
                object: "model",
                created: 0,
                owned_by: "aneforge",
            })
            .collect(),
    })
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(state.gauges()),
    )
        .into_response()
}
