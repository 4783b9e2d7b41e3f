//! Exact speculative decoding (greedy): a small draft model proposes `K` tokens one at a time; the
//! target model scores the last accepted token and the `K` proposals in one program call
//! (`T` = K + 1, logits of every position) and keeps the proposals up to its first disagreement,
//! plus its own next token. The output is the target's greedy output; only the number of target
//! calls changes.

use std::time::Instant;

use super::generate::{
    final_text, FinishReason, GenerateOptions, Generation, StopStrings, TextStream,
};
use super::runner::Runner;
use super::sampling::argmax;
use super::LlmError;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpeculativeStats {
    /// Target program calls after the prompt.
    pub target_calls: usize,
    pub drafted: usize,
    pub accepted: usize,
}

impl SpeculativeStats {
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
}

/// Greedy generation of `target` accelerated by `draft` (same vocabulary). `target` must have
/// been built with `K + 1` in `RunnerOptions::all_logits_chunks`.
pub fn speculative_generate(
    target: &mut Runner,
    draft: &mut Runner,
    prompt: &[u32],
    k: usize,
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<(Generation, SpeculativeStats), LlmError> {
    if !opts.sampling.is_greedy() || opts.sampling.repetition_penalty != 1.0 {
        return Err(LlmError::Invalid(
            "speculative decoding is exact for greedy decoding only (temperature 0, no repetition penalty)".into(),
        ));
    }
    if k == 0 {
        return Err(LlmError::Invalid(
            "speculative decoding needs at least one draft token".into(),
        ));
    }
    if prompt.is_empty() {
        return Err(LlmError::EmptyPrompt);
    }
    let (tv, dv) = (
        target.llm().config.vocab_size,
        draft.llm().config.vocab_size,
    );
    if target.llm().tokenizer.vocab_size() != draft.llm().tokenizer.vocab_size()
        || tv.min(dv) < target.llm().tokenizer.vocab_size()
    {
        return Err(LlmError::Invalid(format!(
            "the draft model's vocabulary ({dv}) does not match the target's ({tv})"
        )));
    }
    let llm = target.llm().clone();
    target.reset();
    draft.reset();
    target.reset_timings();
    let started = Instant::now();
    let mut stats = SpeculativeStats::default();
    let logits = target.feed(prompt)?;
    draft.feed(prompt)?;
    let first_token_at = started.elapsed().as_secs_f64();
    let stops = StopStrings::new(&opts.stop);
    let mut stream = TextStream::new(&llm.tokenizer);
    let mut emitted = 0usize;
    let mut tokens: Vec<u32> = Vec::new();
    // the next token: chosen but not yet fed to either model
    let mut next = argmax(&logits);
    // a proposal the draft has not run yet (when all K were accepted)
    let mut draft_pending: Option<u32> = None;
    let mut accept = |tok: u32,
                      tokens: &mut Vec<u32>,
                      emitted: &mut usize,
                      on_text: &mut dyn FnMut(&str) -> bool|
     -> Result<Option<FinishReason>, LlmError> {
        if opts.stop_at_eos && llm.is_eos(tok) {
            return Ok(Some(FinishReason::Eos(tok)));
        }
        tokens.push(tok);
        stream.push(tok)?;
        let text = stream.text();
        if let Some((at, s)) = stops.find(text) {
            if at > *emitted && !on_text(&text[*emitted..at]) {
                return Ok(Some(FinishReason::Cancelled));
            }
            *emitted = at;
            return Ok(Some(FinishReason::Stop(s.to_string())));
        }
        let ready = text.len() - stops.pending(text);
        if ready > *emitted {
            let chunk = text[*emitted..ready].to_string();
            *emitted = ready;
            if !on_text(&chunk) {
                return Ok(Some(FinishReason::Cancelled));
            }
        }
        if tokens.len() >= opts.max_new_tokens {
            return Ok(Some(FinishReason::Length));
        }
        Ok(None)
    };
    let finish = 'outer: loop {
        if opts.max_new_tokens == 0 {
            break FinishReason::Length;
        }
        if let Some(f) = accept(next, &mut tokens, &mut emitted, on_text)? {
            break f;
        }
        if target.len() + 1 >= target.max_context() {
            break FinishReason::ContextFull;
        }
        let kk = k.min(draft.max_context().saturating_sub(draft.len() + 2));
        if kk == 0 || target.len() + k + 1 > target.max_context() {
            // too close to the end of a context to draft: plain target steps from here on
            let l = target.feed(&[next])?;
            stats.target_calls += 1;
            next = argmax(&l);
            continue;
        }
        if let Some(p) = draft_pending.take() {
            draft.feed(&[p])?;
        }
        let mut proposals = Vec::with_capacity(kk);
        let mut d = next;
        for i in 0..kk {
            let l = draft.feed(&[d])?;
            d = argmax(&l);
            proposals.push(d);
            if i + 1 == kk {
                break;
            }
        }
        stats.drafted += kk;
        let before = target.len();
        let mut verify = Vec::with_capacity(kk + 1);
        verify.push(next);
        verify.extend_from_slice(&proposals);
        let rows = target.feed_all(&verify)?;
        stats.target_calls += 1;
        let vocab = tv;
        let mut m = 0;
        while m < kk && argmax(&rows[m * vocab..(m + 1) * vocab]) == proposals[m] {
            m += 1;
        }
        stats.accepted += m;
        // keep `next` and the accepted proposals in both caches
        let draft_fed = draft.len();
        let draft_keep = (before + 1 + m.min(kk - 1)).min(draft_fed);
        // a ring keeps its window through a cut back by at most one step's tokens
        if target.truncate(before + 1 + m) != before + 1 + m
            || draft.truncate(draft_keep) != draft_keep
        {
            return Err(LlmError::Internal(
                "a speculative step's rejected tokens could not be dropped from the caches".into(),
            ));
        }
        if m == kk {
            draft_pending = Some(proposals[kk - 1]);
        }
        for &p in &proposals[..m] {
            if let Some(f) = accept(p, &mut tokens, &mut emitted, on_text)? {
                break 'outer f;
            }
        }
        next = argmax(&rows[m * vocab..(m + 1) * vocab]);
    };
    let (text, finish) = final_text(&mut stream, &stops, emitted, finish, on_text)?;
    let generation = Generation {
        tokens,
        text,
        finish,
        prefill_tokens: prompt.len(),
        prompt_tokens: prompt.len(),
        timings: target.timings(),
        seconds_to_first_token: first_token_at,
    };
    Ok((generation, stats))
}
