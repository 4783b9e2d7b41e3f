//! `LLM`: a decoder model and one conversation's state (`aneforge_models::llm::{Llm, Runner}`),
//! driven by the library's `generate` with the CLI's defaults (`aneforge generate`).

use std::sync::{Arc, Mutex};

use aneforge_models::llm::{
    generate, ChatMessage, FinishReason, GenerateOptions, Generation as RsGeneration, KvStorage,
    Llm, LoadOptions, Runner, RunnerOptions, SamplingOptions, WeightFormat,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::{errors, options};

/// The outcome of one generation.
#[pyclass(module = "aneforge", frozen, get_all)]
pub struct Generation {
    /// The generated text (a stop string and what follows are cut).
    text: String,
    /// The generated token ids (without a final end-of-sequence token).
    tokens: Vec<u32>,
    /// `"length"`, `"eos"`, `"stop"`, `"context_full"` or `"cancelled"`.
    finish_reason: String,
    prompt_tokens: usize,
    /// Prompt tokens actually run (a prefix already in the cache is not run again).
    prefill_tokens: usize,
    prefill_tokens_per_second: f64,
    decode_tokens_per_second: f64,
}

impl From<RsGeneration> for Generation {
    fn from(g: RsGeneration) -> Generation {
        Generation {
            finish_reason: match &g.finish {
                FinishReason::Length => "length",
                FinishReason::Eos(_) => "eos",
                FinishReason::Stop(_) => "stop",
                FinishReason::ContextFull => "context_full",
                FinishReason::Cancelled => "cancelled",
            }
            .to_string(),
            prefill_tokens_per_second: g.prefill_tokens_per_second(),
            decode_tokens_per_second: g.decode_tokens_per_second(),
            text: g.text,
            tokens: g.tokens,
            prompt_tokens: g.prompt_tokens,
            prefill_tokens: g.prefill_tokens,
        }
    }
}

#[pymethods]
impl Generation {
    fn __repr__(&self) -> String {
        format!(
            "Generation(text={:?}, tokens={}, finish_reason={:?})",
            self.text,
            self.tokens.len(),
            self.finish_reason
        )
    }
}

/// A decoder LLM (Llama, Mistral, Qwen2/3, Gemma, GPT-2; safetensors or GGUF).
#[pyclass(module = "aneforge", name = "LLM", frozen, subclass)]
pub struct PyLlm {
    llm: Arc<Llm>,
    runner: Mutex<Runner>,
}

fn messages_of(messages: &Bound<'_, PyAny>) -> PyResult<Vec<ChatMessage>> {
    let mut out = Vec::new();
    for (i, m) in messages.try_iter()?.enumerate() {
        let m = m?;
        let d = m.cast::<PyDict>().map_err(|_| {
            errors::invalid(format!(
                "messages[{i}]: expected a dict with 'role' and 'content'"
            ))
        })?;
        let field = |key: &str| -> PyResult<String> {
            let v = d
                .get_item(key)?
                .ok_or_else(|| errors::invalid(format!("messages[{i}] has no '{key}'")))?;
            Ok(v.cast::<PyString>()
                .map_err(|_| errors::invalid(format!("messages[{i}]['{key}'] is not a str")))?
                .to_cow()?
                .to_string())
        };
        out.push(ChatMessage::new(&field("role")?, &field("content")?));
    }
    Ok(out)
}

/// The generation options; without a seed, one from the clock (as the CLI does).
fn generate_options(
    max_new_tokens: usize,
    sampling: SamplingOptions,
    seed: Option<u64>,
    stop: Vec<String>,
    stop_at_eos: bool,
) -> GenerateOptions {
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    GenerateOptions {
        max_new_tokens,
        sampling: SamplingOptions { seed, ..sampling },
        stop,
        stop_at_eos,
    }
}

impl PyLlm {
    fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> PyResult<String> {
        let template = self.llm.chat().map_err(errors::llm)?;
        template
            .render(messages, add_generation_prompt)
            .map_err(|e| errors::llm(e.into()))
    }

    /// Runs `generate` with the GIL released; `callback(text)` (if any) receives streamed text
    /// and stops the generation by returning `False` or raising (the exception is re-raised).
    fn run(
        &self,
        py: Python<'_>,
        prompt: &[u32],
        options: &GenerateOptions,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Generation> {
        let mut failure: Option<PyErr> = None;
        let result = py.detach(|| {
            let mut runner = self
                .runner
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut on_text = |text: &str| -> bool {
                let Some(cb) = &callback else {
                    return true;
                };
                Python::attach(|py| match cb.bind(py).call1((text,)) {
                    Ok(v) => !matches!(v.extract::<bool>(), Ok(false)),
                    Err(e) => {
                        failure = Some(e);
                        false
                    }
                })
            };
            generate(&mut runner, prompt, options, &mut on_text)
        });
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(result.map_err(errors::llm)?.into())
    }
}

#[pymethods]
impl PyLlm {
    /// Loads `model` (an id `ORG/NAME` from the Hugging Face cache, a directory or a `.gguf` file)
    /// and compiles its step programs, as `aneforge generate -m MODEL` does. `cache_type` is the
    /// KV cache storage, as the CLI's `--cache-type`: "f32", "f16" or "q8_0".
    #[new]
    #[pyo3(signature = (model, *, engine = "cpu", target = None, max_context = 2048, cache_type = "f32"))]
    fn new(
        py: Python<'_>,
        model: &str,
        engine: &str,
        target: Option<&str>,
        max_context: usize,
        cache_type: &str,
    ) -> PyResult<Self> {
        let (engine, target) = options::select(py, engine, target)?;
        let kv_cache = KvStorage::parse(cache_type).ok_or_else(|| {
            errors::invalid(format!(
                "cache_type {cache_type:?}: expected \"f32\", \"f16\" or \"q8_0\""
            ))
        })?;
        let spec = model.to_string();
        py.detach(move || {
            let llm = Arc::new(Llm::load(&spec, LoadOptions::new(WeightFormat::Stored))?);
            let mut opts = RunnerOptions {
                target: target.clone(),
                engine,
                max_context,
                kv_cache,
                ..RunnerOptions::default()
            };
            if target.is_ane() {
                opts.segment_bytes = Some(aneforge::pipeline::WEIGHT_CEILING as usize);
            }
            let runner = Runner::new(llm.clone(), opts)?;
            Ok(PyLlm {
                llm,
                runner: Mutex::new(runner),
            })
        })
        .map_err(errors::llm)
    }

    /// Generates a continuation; returns a `Generation` (text, tokens, finish reason, speeds).
    /// `prompt` is text (tokenized as `aneforge generate` does; with `chat=True` wrapped in the
    /// chat template as one user message after an optional `system` message) or token ids.
    /// Sampling defaults are the CLI's (llama.cpp's); `temperature=0` is greedy. `seed=None`
    /// takes one from the clock.
    #[pyo3(signature = (prompt, *, max_tokens = 256, temperature = 0.8, top_k = 40, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0, seed = None, stop = None, ignore_eos = false, chat = false, system = None, callback = None))]
    #[allow(clippy::too_many_arguments)]
    fn generate_details(
        &self,
        py: Python<'_>,
        prompt: &Bound<'_, PyAny>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        ignore_eos: bool,
        chat: bool,
        system: Option<String>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Generation> {
        let ids = if let Ok(text) = prompt.cast::<PyString>() {
            let text = text.to_cow()?;
            if chat {
                let mut messages = Vec::new();
                if let Some(s) = &system {
                    messages.push(ChatMessage::new("system", s));
                }
                messages.push(ChatMessage::new("user", &text));
                let rendered = self.render(&messages, true)?;
                self.llm.encode_raw(&rendered).map_err(errors::llm)?
            } else {
                if system.is_some() {
                    return Err(errors::invalid("system= needs chat=True"));
                }
                self.llm.encode(&text[..]).map_err(errors::llm)?
            }
        } else {
            if chat || system.is_some() {
                return Err(errors::invalid(
                    "chat= and system= apply to a text prompt, not token ids",
                ));
            }
            prompt
                .extract::<Vec<u32>>()
                .map_err(|_| errors::invalid("prompt: expected a str or a list of token ids"))?
        };
        let options = generate_options(
            max_tokens,
            SamplingOptions {
                temperature,
                top_k,
                top_p,
                min_p,
                repetition_penalty: repeat_penalty,
                seed: 0,
            },
            seed,
            stop.unwrap_or_default(),
            !ignore_eos,
        );
        self.run(py, &ids, &options, callback)
    }

    /// Continues a conversation: `messages` is a list of `{"role", "content"}` dicts, rendered
    /// with the model's chat template (the cached prefix of the previous turn is reused).
    #[pyo3(signature = (messages, *, max_tokens = 512, temperature = 0.8, top_k = 40, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0, seed = None, callback = None))]
    #[allow(clippy::too_many_arguments)]
    fn chat_details(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Generation> {
        let messages = messages_of(messages)?;
        let rendered = self.render(&messages, true)?;
        let ids = self.llm.encode_raw(&rendered).map_err(errors::llm)?;
        let options = generate_options(
            max_tokens,
            SamplingOptions {
                temperature,
                top_k,
                top_p,
                min_p,
                repetition_penalty: repeat_penalty,
                seed: 0,
            },
            seed,
            Vec::new(),
            true,
        );
        self.run(py, &ids, &options, callback)
    }

    /// The chat template applied to `messages` (text).
    #[pyo3(signature = (messages, *, add_generation_prompt = true))]
    fn apply_chat_template(
        &self,
        messages: &Bound<'_, PyAny>,
        add_generation_prompt: bool,
    ) -> PyResult<String> {
        self.render(&messages_of(messages)?, add_generation_prompt)
    }

    /// Token ids of `text`: with `special=True` the model's own additions (a BOS token, as
    /// `generate` uses), otherwise the text's tokens alone.
    #[pyo3(signature = (text, *, special = true))]
    fn encode(&self, text: &str, special: bool) -> PyResult<Vec<u32>> {
        if special {
            self.llm.encode(text)
        } else {
            self.llm.encode_raw(text)
        }
        .map_err(errors::llm)
    }

    /// The text of token ids (special tokens skipped).
    fn decode(&self, ids: Vec<u32>) -> PyResult<String> {
        self.llm
            .tokenizer
            .decode(&ids, true)
            .map_err(|e| errors::llm(e.into()))
    }

    /// Forgets the cached conversation.
    fn reset(&self) {
        self.runner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .reset();
    }

    #[getter]
    fn max_context(&self) -> usize {
        self.runner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .max_context()
    }

    fn __repr__(&self) -> String {
        format!(
            "LLM({:?}, family={}, layers={})",
            self.llm.path.display().to_string(),
            self.llm.config.family.name(),
            self.llm.config.n_layers
        )
    }
}
