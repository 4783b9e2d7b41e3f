//! From a request's sampling fields to a queued generation, and from the worker's events to an
//! OpenAI response: one JSON body, or server-sent events ending in `data: [DONE]`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aneforge_models::llm::{FinishReason, GenerateOptions, SamplingOptions};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::scheduler::{Event, Finished, Job};
use crate::schema::{Sampling, Usage};
use crate::state::{ChatModel, Limits};

/// Most stop strings a request may give.
const MAX_STOPS: usize = 16;

pub fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A response id unique within this process: `prefix-<start time><counter>`.
pub fn response_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:x}{n:06x}", unix_seconds())
}

/// OpenAI's `finish_reason`: `stop` for end-of-sequence and stop strings, `length` for the token
/// limit and a full context.
pub fn finish_reason(finish: &FinishReason) -> &'static str {
    match finish {
        FinishReason::Eos(_) | FinishReason::Stop(_) => "stop",
        FinishReason::Length | FinishReason::ContextFull => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

/// Validates the sampling fields against the limits and the prompt's length. `prompt_param` is
/// the field the prompt came from (`messages` or `prompt`).
pub fn options(
    s: &Sampling,
    prompt_tokens: usize,
    context: usize,
    limits: &Limits,
    prompt_param: &str,
) -> Result<GenerateOptions, ApiError> {
    if let Some(n) = s.n {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                format!("n must be 1 on this server (one choice per request), got {n}"),
            ));
        }
    }
    let (param, requested) = match (s.max_completion_tokens, s.max_tokens) {
        (Some(v), _) => ("max_completion_tokens", Some(v)),
        (None, v) => ("max_tokens", v),
    };
    if prompt_tokens + 1 > context {
        return Err(ApiError::invalid(
            prompt_param,
            format!(
                "This model's maximum context length is {context} tokens, but the prompt has \
                 {prompt_tokens} tokens (at least one more is needed for the reply). Shorten the \
                 {prompt_param}."
            ),
        )
        .with_code("context_length_exceeded"));
    }
    let room = context - prompt_tokens;
    let max_new_tokens = match requested {
        Some(v) if v < 1 => {
            return Err(ApiError::invalid(
                param,
                format!("{param} must be at least 1, got {v}"),
            ))
        }
        Some(v) if v as u64 > limits.max_tokens as u64 => {
            return Err(ApiError::invalid(
                param,
                format!(
                    "{param} is {v}, more than this server's limit of {}",
                    limits.max_tokens
                ),
            ))
        }
        Some(v) => v as usize,
        None => limits.default_max_tokens.min(room),
    };
    let temperature = s.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature must be between 0 and 2, got {temperature}"),
        ));
    }
    let top_p = s.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            "top_p",
            format!("top_p must be greater than 0 and at most 1, got {top_p}"),
        ));
    }
    let stop = s.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stop.len() > MAX_STOPS {
        return Err(ApiError::invalid(
            "stop",
            format!("at most {MAX_STOPS} stop strings, got {}", stop.len()),
        ));
    }
    let seed = s.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    Ok(GenerateOptions {
        max_new_tokens,
        sampling: SamplingOptions {
            temperature,
            top_k: 0,
            top_p,
            min_p: 0.0,
            repetition_penalty: 1.0,
            seed,
        },
        stop,
        stop_at_eos: true,
    })
}

/// Queues the generation; its events arrive on the returned receiver. Dropping the receiver
/// cancels it.
pub fn submit(
    model: &ChatModel,
    prompt: Vec<u32>,
    options: GenerateOptions,
) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let job = Job {
        prompt,
        options,
        events: tx,
    };
    model
        .scheduler
        .submit(job)
        .map_err(|_| ApiError::busy("the generation queue is full; retry after a moment"))?;
    Ok(rx)
}

/// Waits for the whole generation: its text and how it ended.
pub async fn collect(
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<(String, Finished), ApiError> {
    let mut text = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Done(f) => return Ok((text, f)),
            Event::Failed(message) => return Err(ApiError::internal(message)),
        }
    }
    Err(stopped())
}

fn stopped() -> ApiError {
    ApiError::busy("the server is shutting down").with_status(StatusCode::SERVICE_UNAVAILABLE)
}

/// One step of a streamed generation, which the endpoint turns into its chunks' JSON.
pub enum Piece {
    Start,
    Text(String),
    Finish(&'static str, Usage),
}

enum Phase {
    Start,
    Running,
    End,
}

enum Step {
    Piece(Piece),
    Finish(Finished),
    Error(ApiError),
}

/// Server-sent events for a generation: `render` gives the `data:` payloads of each piece, an
/// error becomes an `{"error": ...}` event, and the stream ends with `[DONE]`. Dropping the
/// response (the client disconnected) drops the receiver, which cancels the generation.
pub fn sse(
    rx: mpsc::UnboundedReceiver<Event>,
    render: impl Fn(Piece) -> Vec<String> + Send + 'static,
) -> Response {
    let steps = stream::unfold((rx, Phase::Start), |(mut rx, phase)| async move {
        let step = match phase {
            Phase::End => return None,
            Phase::Start => return Some((Step::Piece(Piece::Start), (rx, Phase::Running))),
            Phase::Running => match rx.recv().await {
                Some(Event::Text(t)) => {
                    return Some((Step::Piece(Piece::Text(t)), (rx, Phase::Running)))
                }
                Some(Event::Done(f)) => Step::Finish(f),
                Some(Event::Failed(message)) => Step::Error(ApiError::internal(message)),
                None => Step::Error(stopped()),
            },
        };
        Some((step, (rx, Phase::End)))
    });
    let events = steps.flat_map(move |step| {
        let data = match step {
            Step::Piece(Piece::Text(t)) if t.is_empty() => Vec::new(),
            Step::Piece(p) => render(p),
            Step::Finish(f) => {
                let usage = Usage::new(f.prompt_tokens, f.completion_tokens);
                let mut data = render(Piece::Finish(finish_reason(&f.finish), usage));
                data.push("[DONE]".into());
                data
            }
            Step::Error(e) => vec![e.body_json(), "[DONE]".into()],
        };
        stream::iter(
            data.into_iter()
                .map(|d| Ok::<_, Infallible>(SseEvent::default().data(d))),
        )
    });
    Sse::new(events).into_response()
}
