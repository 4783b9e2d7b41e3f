//! The generation loop: prefill the prompt (reusing whatever prefix the runner's caches already
//! hold), then sample and decode one token at a time until EOS, a stop string, the token limit or
//! the end of the context. Text streams out as it becomes valid UTF-8 and cannot be the start of a
//! stop string.

use std::time::Instant;

use super::runner::{Runner, StepTimings};
use super::sampling::{Sampler, SamplingOptions};
use super::LlmError;
use crate::tokenizer::TextTokenizer;

#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: SamplingOptions,
    /// Generation stops when the text contains one of these (which is not part of the output).
    pub stop: Vec<String>,
    /// Stop at the model's end-of-sequence tokens.
    pub stop_at_eos: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 256,
            sampling: SamplingOptions::default(),
            stop: Vec::new(),
            stop_at_eos: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_new_tokens` were generated.
    Length,
    /// An end-of-sequence token (not included in the output).
    Eos(u32),
    /// A stop string (not included in the text).
    Stop(String),
    /// The context is full.
    ContextFull,
    /// The streaming callback asked to stop.
    Cancelled,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// Generated tokens (without a final EOS).
    pub tokens: Vec<u32>,
    pub text: String,
    pub finish: FinishReason,
    /// Prompt tokens actually run (a cached prefix is not run again).
    pub prefill_tokens: usize,
    pub prompt_tokens: usize,
    pub timings: StepTimings,
    pub seconds_to_first_token: f64,
}

impl Generation {
    pub fn prefill_tokens_per_second(&self) -> f64 {
        rate(
            self.timings.prefill_tokens,
            self.timings.prefill.as_secs_f64(),
        )
    }

    pub fn decode_tokens_per_second(&self) -> f64 {
        rate(
            self.timings.decode_tokens,
            self.timings.decode.as_secs_f64(),
        )
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// Stop strings and the text they may hold back.
#[derive(Clone, Debug, Default)]
pub struct StopStrings {
    stops: Vec<String>,
}

impl StopStrings {
    pub fn new(stops: &[String]) -> StopStrings {
        StopStrings {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
        }
    }

    /// The byte offset of the earliest stop string in `text` and the stop string.
    pub fn find(&self, text: &str) -> Option<(usize, &str)> {
        self.stops
            .iter()
            .filter_map(|s| text.find(s.as_str()).map(|at| (at, s.as_str())))
            .min_by_key(|(at, _)| *at)
    }

    /// Bytes at the end of `text` that could begin a stop string (held back from streaming).
    pub fn pending(&self, text: &str) -> usize {
        let mut best = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if text.ends_with(&s[..i]) {
                    best = best.max(i);
                }
            }
        }
        best
    }
}

/// Incremental detokenisation: text appears once the tokens decode to complete characters.
pub struct TextStream<'t> {
    tokenizer: &'t TextTokenizer,
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    text: String,
}

impl<'t> TextStream<'t> {
    pub fn new(tokenizer: &'t TextTokenizer) -> TextStream<'t> {
        TextStream {
            tokenizer,
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
            text: String::new(),
        }
    }

    /// The text of the tokens from `prefix_offset` up to `read_offset` (already emitted) and up
    /// to the last token.
    fn held_text(&self) -> Result<(String, String), LlmError> {
        let tail = &self.ids[self.prefix_offset..];
        let prefix = self
            .tokenizer
            .decode(&tail[..self.read_offset - self.prefix_offset], true)?;
        Ok((prefix, self.tokenizer.decode(tail, true)?))
    }

    /// Adds a token; returns the text it completes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, LlmError> {
        self.ids.push(id);
        let (prefix, full) = self.held_text()?;
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') && full.starts_with(&prefix) {
            let delta = full[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            self.text.push_str(&delta);
            return Ok(delta);
        }
        Ok(String::new())
    }

    /// Flushes the tokens still held back (an incomplete or invalid UTF-8 tail decodes with
    /// replacement characters, as a whole-sequence decode would); returns the text it adds.
    pub fn finish(&mut self) -> Result<String, LlmError> {
        if self.read_offset >= self.ids.len() {
            return Ok(String::new());
        }
        let (prefix, full) = self.held_text()?;
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        let delta = match full.strip_prefix(prefix.as_str()) {
            Some(rest) => rest.to_string(),
            None => String::new(),
        };
        self.text.push_str(&delta);
        Ok(delta)
    }

    /// All text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

/// The text of a finished generation: a stop string cuts it, cancellation keeps what was decoded,
/// any other end flushes the held-back tail to `on_text` (where a stop string may still appear).
pub(crate) fn final_text(
    stream: &mut TextStream<'_>,
    stops: &StopStrings,
    emitted: usize,
    finish: FinishReason,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<(String, FinishReason), LlmError> {
    match finish {
        FinishReason::Cancelled => Ok((stream.text().to_string(), finish)),
        FinishReason::Stop(_) => Ok((stream.text()[..emitted].to_string(), finish)),
        _ => {
            stream.finish()?;
            let text = stream.text();
            let (end, finish) = match stops.find(text) {
                Some((at, s)) if at >= emitted => (at, FinishReason::Stop(s.to_string())),
                _ => (text.len(), finish),
            };
            if end > emitted {
                on_text(&text[emitted..end]);
            }
            Ok((text[..end].to_string(), finish))
        }
    }
}

/// Generates a continuation of `prompt`. `on_text` receives streamed text and returns `false` to
/// stop. The runner keeps the sequence (prompt and output) in its caches afterwards.
pub fn generate(
    runner: &mut Runner,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation, LlmError> {
    opts.sampling.validate().map_err(LlmError::Invalid)?;
    if prompt.is_empty() {
        return Err(LlmError::EmptyPrompt);
    }
    let llm = runner.llm().clone();
    if prompt.len() + usize::from(opts.max_new_tokens > 0) > runner.max_context() {
        return Err(LlmError::ContextFull {
            tokens: prompt.len(),
            context: runner.max_context(),
            hint: " (the prompt alone; shorten it or raise the context)",
        });
    }
    runner.reset_timings();
    let started = Instant::now();
    // reuse the cached prefix; at least one prompt token is run to get logits
    let common = runner
        .history()
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count()
        .min(prompt.len() - 1);
    let kept = runner.truncate(common);
    let mut logits = runner.feed_prompt(&prompt[kept..])?;
    let first_token_at = started.elapsed().as_secs_f64();
    let mut sampler = Sampler::new(opts.sampling.clone());
    let stops = StopStrings::new(&opts.stop);
    let mut stream = TextStream::new(&llm.tokenizer);
    let mut history: Vec<u32> = prompt.to_vec();
    let mut emitted = 0usize;
    let mut tokens = Vec::new();
    let finish = loop {
        if tokens.len() >= opts.max_new_tokens {
            break FinishReason::Length;
        }
        let next = sampler.sample(&mut logits, &history);
        if opts.stop_at_eos && llm.is_eos(next) {
            break FinishReason::Eos(next);
        }
        tokens.push(next);
        history.push(next);
        stream.push(next)?;
        let text = stream.text();
        if let Some((at, s)) = stops.find(text) {
            if at > emitted && !on_text(&text[emitted..at]) {
                break FinishReason::Cancelled;
            }
            emitted = at;
            break FinishReason::Stop(s.to_string());
        }
        let ready = text.len() - stops.pending(text);
        if ready > emitted {
            let chunk = &text[emitted..ready];
            emitted = ready;
            if !on_text(chunk) {
                break FinishReason::Cancelled;
            }
        }
        if tokens.len() >= opts.max_new_tokens {
            break FinishReason::Length;
        }
        if runner.len() >= runner.max_context() {
            break FinishReason::ContextFull;
        }
        logits = runner.feed(&[next])?;
    };
    let (text, finish) = final_text(&mut stream, &stops, emitted, finish, on_text)?;
    Ok(Generation {
        tokens,
        text,
        finish,
        prefill_tokens: prompt.len() - common,
        prompt_tokens: prompt.len(),
        timings: runner.timings(),
        seconds_to_first_token: first_token_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_hold_back_possible_starts() {
        let s = StopStrings::new(&["</s>".to_string(), "\n\n".to_string()]);
        assert_eq!(s.pending("hello </"), 2);
        assert_eq!(s.pending("hello\n"), 1);
        assert_eq!(s.pending("hello"), 0);
        assert_eq!(s.find("a\n\nb</s>"), Some((1, "\n\n")));
    }
}
