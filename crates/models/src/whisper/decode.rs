//! Greedy decoding of one 30 s window as transformers' `WhisperForConditionalGeneration.generate`
//! does it (begin-suppression, the suppression list, and with timestamps the timestamp rules),
//! beam search, sampling with temperature fallback, and long audio in sequential windows with
//! timestamp seeking, as openai-whisper does.

use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::audio::{AudioStream, SAMPLE_RATE};
use super::fallback::{compression_ratio, Fallback, WindowScores};
use super::mel::{LogMel, HOP, N_FFT, WINDOW_SAMPLES};
use super::runtime::{Programs, WhisperOptions};
use super::tokens::SpecialTokens;
use super::{load_weights, CheckpointFiles, WhisperConfig, WhisperError};
use crate::llm::sampling::argmax;
use crate::tokenizer::TextTokenizer;

/// Samples on each side of a window that its edge frames reach.
const CONTEXT: usize = N_FFT / 2;

/// What to decode.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodeOptions {
    /// A language code (`en`, `de`, ...) for multilingual models; `None` detects it per window.
    pub language: Option<String>,
    /// Translate to English instead of transcribing (multilingual models).
    pub translate: bool,
    /// Predict timestamp tokens (segments with times).
    pub timestamps: bool,
    /// Beam search with this many beams (transformers' `num_beams`, length penalty 1); 0 or 1
    /// decodes greedily.
    pub beam_size: usize,
    /// Temperatures, thresholds and sampling (default: one pass at temperature 0).
    pub fallback: Fallback,
    /// Long audio: each window's decoding is conditioned on the text of the windows before it
    /// (openai-whisper's `condition_on_previous_text`, transformers' `condition_on_prev_tokens`),
    /// until a window needs a temperature above 0.5.
    pub condition_on_previous_text: bool,
    /// Text the first window is conditioned on, as if it came before the audio
    /// (openai-whisper's `initial_prompt`, transformers' `prompt_ids`): names, spellings, style.
    pub initial_prompt: Option<String>,
}

/// One window's result: the prompt and the generated tokens (without the end token) of the
/// accepted (or last) decoding, with its scores.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowTokens {
    pub prompt: Vec<u32>,
    pub generated: Vec<u32>,
    pub language: Option<String>,
    pub scores: WindowScores,
    /// The temperature of the decoding returned.
    pub temperature: f32,
    /// The window holds no speech by the no-speech rule (its tokens are then not used).
    pub no_speech: bool,
}

/// One decoding's tokens (without the end token) and the summed log-probability of the tokens
/// it chose (the end token included), `scored` of them.
struct Decoded {
    tokens: Vec<u32>,
    sum_logprob: f64,
    scored: usize,
}

impl Decoded {
    fn avg_logprob(&self) -> f64 {
        self.sum_logprob / self.scored.max(1) as f64
    }
}

/// A piece of the transcript with its time span (seconds from the start of the file).
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub start: f64,
    pub end: f64,
    pub text: String,
    pub tokens: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    pub text: String,
    pub segments: Vec<Segment>,
    pub language: Option<String>,
    /// Seconds of audio.
    pub duration: f64,
}

/// A loaded Whisper model: tokenizer, special tokens and compiled programs.
pub struct Whisper {
    pub tokens: SpecialTokens,
    tokenizer: TextTokenizer,
    programs: Programs,
    mel: LogMel,
}

impl std::fmt::Debug for Whisper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Whisper")
            .field("config", self.programs.config())
            .finish()
    }
}

/// Seconds per timestamp token.
const TIME_PRECISION: f64 = 0.02;
/// Samples per encoder position (conv2's stride 2 over 160-sample hops).
const SAMPLES_PER_POSITION: usize = 2 * HOP;
/// transformers' `max_initial_timestamp_index`: the first timestamp is at most 1 s.
const MAX_INITIAL_TIMESTAMP: u32 = 50;

fn suppress(logits: &mut [f32], ids: &[u32]) {
    for &i in ids {
        if let Some(v) = logits.get_mut(i as usize) {
            *v = f32::NEG_INFINITY;
        }
    }
}

/// `v − logsumexp(v)` (f64 sums).
fn log_softmax(v: &[f32]) -> Vec<f32> {
    let lse = log_sum_exp(v);
    v.iter().map(|&x| (f64::from(x) - lse) as f32).collect()
}

/// A token drawn from `softmax(scores / temperature)` (suppressed scores are `-inf`: never).
fn draw(scores: &[f32], temperature: f32, rng: &mut StdRng) -> u32 {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let t = f64::from(temperature);
    let weight = |x: f32| (f64::from(x - max) / t).exp();
    let total: f64 = scores.iter().map(|&x| weight(x)).sum();
    let mut u = rng.random::<f64>() * total;
    let mut last = 0;
    for (i, &x) in scores.iter().enumerate() {
        let w = weight(x);
        if w > 0.0 {
            last = i;
            if u < w {
                return i as u32;
            }
            u -= w;
        }
    }
    // rounding left `u` past the sum: the last possible token
    last as u32
}

fn log_sum_exp(v: &[f32]) -> f64 {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let s: f64 = v.iter().map(|&x| f64::from(x - max).exp()).sum();
    f64::from(max) + s.ln()
}

impl Whisper {
    /// Finds the model `spec` names (a hub id in the local cache or a directory) and loads it.
    pub fn open(spec: &str, options: &WhisperOptions) -> Result<Whisper, WhisperError> {
        let model = crate::resolve(spec)?;
        Whisper::load(model.dir(), options)
    }

    /// Loads the checkpoint in `dir` (transformers or CTranslate2) and compiles its programs.
    pub fn load(dir: &Path, options: &WhisperOptions) -> Result<Whisper, WhisperError> {
        let files = CheckpointFiles::find(dir)?;
        let (cfg, weights) = load_weights(dir)?;
        let tok_path = files.dir().join("tokenizer.json");
        let tokenizer = TextTokenizer::from_file(&tok_path)?;
        let tokens = SpecialTokens::new(&tokenizer, cfg.vocab_size, files.dir())?;
        if tokens.timestamp_begin as usize + 1501 > cfg.vocab_size {
            return Err(WhisperError::Config(format!(
                "{}: the tokenizer's timestamp tokens start at {}, past what the model's \
                 {}-token vocabulary holds",
                tok_path.display(),
                tokens.timestamp_begin,
                cfg.vocab_size
            )));
        }
        let mel = LogMel::new(cfg.n_mels);
        let programs = Programs::new(cfg, Arc::new(weights), options)?;
        Ok(Whisper {
            tokens,
            tokenizer,
            programs,
            mel,
        })
    }

    pub fn config(&self) -> &WhisperConfig {
        self.programs.config()
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The log-mel features of up to 30 s of 16 kHz samples.
    pub fn features(&self, samples: &[f32]) -> Vec<f32> {
        self.mel.window(samples)
    }

    /// Text of `ids` without special and timestamp tokens.
    pub fn text(&self, ids: &[u32]) -> Result<String, WhisperError> {
        let plain: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&i| i < self.tokens.eot)
            .collect();
        Ok(self.tokenizer.decode(&plain, true)?)
    }

    /// The language probabilities of one window of features: the softmax over the language
    /// tokens of the decoder's first step after `<|startoftranscript|>`, as `(code, p)` in
    /// token order (empty for an English-only model).
    pub fn language_probabilities(
        &mut self,
        mel: &[f32],
    ) -> Result<Vec<(String, f64)>, WhisperError> {
        self.programs.encode(mel)?;
        self.encoded_language_probabilities()
    }

    fn encoded_language_probabilities(&mut self) -> Result<Vec<(String, f64)>, WhisperError> {
        let logits = self.programs.step(self.tokens.sot, 0)?;
        let picked: Vec<f32> = self
            .tokens
            .languages
            .iter()
            .map(|&(_, id)| logits[id as usize])
            .collect();
        let lp = log_softmax(&picked);
        Ok(self
            .tokens
            .languages
            .iter()
            .zip(lp)
            .map(|((code, _), l)| (code.clone(), f64::from(l).exp()))
            .collect())
    }

    /// The most likely language of the encoded window.
    fn detect_language(&mut self) -> Result<String, WhisperError> {
        let probs = self.encoded_language_probabilities()?;
        let best = probs
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .ok_or_else(|| WhisperError::Config("the tokenizer has no language tokens".into()))?;
        Ok(best.0.clone())
    }

    /// The decoder's prompt: `<|startofprev|>` and the last `context / 2 - 1` tokens of
    /// `previous` when there are any, then the start-of-transcript sequence.
    fn prompt(
        &mut self,
        opts: &DecodeOptions,
        previous: &[u32],
    ) -> Result<(Vec<u32>, Option<String>), WhisperError> {
        let t = &self.tokens;
        let mut prompt = Vec::new();
        if !previous.is_empty() {
            let keep = (self.programs.context() / 2).saturating_sub(1);
            prompt.push(t.start_of_prev);
            prompt.extend_from_slice(&previous[previous.len().saturating_sub(keep)..]);
        }
        prompt.push(t.sot);
        let mut language = None;
        if t.multilingual {
            let code = match &opts.language {
                Some(code) => code.clone(),
                None => self.detect_language()?,
            };
            let t = &self.tokens;
            let id = t
                .language(&code)
                .ok_or_else(|| WhisperError::Invalid(format!("unknown language code '{code}'")))?;
            prompt.push(id);
            prompt.push(if opts.translate {
                t.translate
            } else {
                t.transcribe
            });
            language = Some(code);
        } else if opts.language.as_deref().is_some_and(|l| l != "en") || opts.translate {
            return Err(WhisperError::Invalid(
                "an English-only model transcribes English only (no --language other than en, \
                 no translation)"
                    .into(),
            ));
        }
        if !opts.timestamps {
            prompt.push(self.tokens.no_timestamps);
        }
        Ok((prompt, language))
    }

    /// Feeds the prompt from position 0; returns the logits after it and the probability of
    /// `<|nospeech|>` after `<|startoftranscript|>` (raw logits, as openai-whisper and
    /// transformers' `WhisperNoSpeechDetection` take it).
    fn feed_prompt(&mut self, prompt: &[u32]) -> Result<(Vec<f32>, f64), WhisperError> {
        let mut logits = Vec::new();
        let mut no_speech_prob = 0.0;
        for (pos, &tok) in prompt.iter().enumerate() {
            logits = self.programs.step(tok, pos)?;
            if tok == self.tokens.sot {
                let lp = log_softmax(&logits);
                no_speech_prob = f64::from(lp[self.tokens.no_speech as usize]).exp();
            }
        }
        Ok((logits, no_speech_prob))
    }

    /// Decodes one window of features: at each temperature of `opts.fallback` in turn until a
    /// result passes its thresholds (greedy or beam search at 0, the best of `best_of` samples
    /// above). `on_logits(step, raw)` sees each step's raw logits, before any suppression, of
    /// the first greedy pass.
    pub fn decode_window(
        &mut self,
        mel: &[f32],
        opts: &DecodeOptions,
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<WindowTokens, WhisperError> {
        self.decode_window_after(mel, opts, &[], on_logits)
    }

    /// [`Whisper::decode_window`] conditioned on `previous`, the tokens of the text before this
    /// window (timestamps included, as they were generated).
    pub fn decode_window_after(
        &mut self,
        mel: &[f32],
        opts: &DecodeOptions,
        previous: &[u32],
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<WindowTokens, WhisperError> {
        let fallback = &opts.fallback;
        fallback.validate().map_err(WhisperError::Invalid)?;
        self.programs.encode(mel)?;
        let (prompt, language) = self.prompt(opts, previous)?;
        let mut rng = StdRng::seed_from_u64(fallback.seed);
        let mut on_logits = Some(on_logits);
        let (first, no_speech_prob) = self.feed_prompt(&prompt)?;
        // the logits after the prompt while the caches hold nothing else; each further decoding
        // feeds the prompt again
        let mut fed = Some(first);
        let mut last = None;
        for &temperature in &fallback.temperatures {
            let decoded = if temperature > 0.0 {
                let mut best: Option<(f64, Decoded)> = None;
                for _ in 0..fallback.best_of {
                    let first = match fed.take() {
                        Some(l) => l,
                        None => self.feed_prompt(&prompt)?.0,
                    };
                    let d = self.sample(
                        prompt.len(),
                        first,
                        opts,
                        temperature,
                        &mut rng,
                        &mut |_, _| {},
                    )?;
                    // openai-whisper's ranking: summed log-probability over the text length
                    let rank = d.sum_logprob / d.tokens.len().max(1) as f64;
                    if best.as_ref().is_none_or(|b| rank > b.0) {
                        best = Some((rank, d));
                    }
                }
                best.map(|b| b.1).ok_or_else(|| {
                    WhisperError::Invalid("best_of must be at least 1".to_string())
                })?
            } else {
                let first = match fed.take() {
                    Some(l) => l,
                    None => self.feed_prompt(&prompt)?.0,
                };
                if opts.beam_size > 1 {
                    self.beam_search(&prompt, first, opts)?
                } else {
                    let sink: &mut dyn FnMut(usize, &[f32]) = match on_logits.take() {
                        Some(f) => f,
                        None => &mut |_, _| {},
                    };
                    self.sample(prompt.len(), first, opts, 0.0, &mut rng, sink)?
                }
            };
            let scores = WindowScores {
                compression_ratio: compression_ratio(self.text(&decoded.tokens)?.trim()),
                avg_logprob: decoded.avg_logprob(),
                no_speech_prob,
            };
            let retry = fallback.needs_fallback(&scores);
            last = Some((decoded, scores, temperature));
            if !retry {
                break;
            }
        }
        let (decoded, scores, temperature) =
            last.ok_or_else(|| WhisperError::Invalid("no temperature to decode at".into()))?;
        Ok(WindowTokens {
            prompt,
            generated: decoded.tokens,
            language,
            no_speech: fallback.is_silent(&scores),
            scores,
            temperature,
        })
    }

    /// One decoding after the prompt (`first`: the logits after it): the most likely token at
    /// each step when `temperature` is 0, else a token drawn from the processed scores divided
    /// by `temperature`. The log-probabilities summed are those of the processed scores at
    /// temperature 1, as openai-whisper and transformers score a decoding.
    fn sample(
        &mut self,
        begin: usize,
        first: Vec<f32>,
        opts: &DecodeOptions,
        temperature: f32,
        rng: &mut StdRng,
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<Decoded, WhisperError> {
        let mut logits = first;
        let mut generated: Vec<u32> = Vec::new();
        let max = self.programs.context();
        let mut pos = begin;
        let mut sum_logprob = 0.0f64;
        let mut scored = 0usize;
        loop {
            on_logits(generated.len(), &logits);
            let mut scores = logits.clone();
            self.process(&mut scores, &generated, opts);
            let next = if temperature > 0.0 {
                draw(&scores, temperature, rng)
            } else {
                argmax(&scores)
            };
            sum_logprob += f64::from(scores[next as usize]) - log_sum_exp(&scores);
            scored += 1;
            if next == self.tokens.eot {
                break;
            }
            generated.push(next);
            if pos + 1 >= max {
                break;
            }
            logits = self.programs.step(next, pos)?;
            pos += 1;
        }
        Ok(Decoded {
            tokens: generated,
            sum_logprob,
            scored,
        })
    }

    /// transformers' logits processors for Whisper, in its order: begin-suppression, the
    /// suppression list, then the timestamp rules.
    fn process(&self, scores: &mut [f32], generated: &[u32], opts: &DecodeOptions) {
        if generated.is_empty() {
            suppress(scores, &self.tokens.begin_suppress);
        }
        suppress(scores, &self.tokens.suppress);
        if opts.timestamps {
            self.timestamp_rules(scores, generated);
        }
    }

    /// transformers' beam search (`num_beams` = `opts.beam_size`, length penalty 1, no early
    /// stopping): each step keeps the best `2·beams` continuations of all hypotheses by summed
    /// log-probability; those ending in `<|endoftext|>` among the first `beams` enter the
    /// finished set scored by sum / generated length; the best `beams` others continue, each
    /// decoder's caches reordered to its source hypothesis. `first` are the logits after the
    /// prompt (fed to hypothesis 0).
    fn beam_search(
        &mut self,
        prompt: &[u32],
        first: Vec<f32>,
        opts: &DecodeOptions,
    ) -> Result<Decoded, WhisperError> {
        const NEG: f32 = -1.0e9;
        let beams = opts.beam_size;
        self.programs.ensure_hypotheses(beams)?;
        let eot = self.tokens.eot;
        let plen = prompt.len();
        let max_len = self.programs.context();
        let mut running: Vec<(Vec<u32>, f32)> = (0..beams)
            .map(|i| (Vec::new(), if i == 0 { 0.0 } else { NEG }))
            .collect();
        let mut finished: Vec<(Vec<u32>, f32, bool)> = vec![(Vec::new(), NEG, false); beams];
        let mut logits: Vec<Vec<f32>> = vec![first];
        let mut cur_len = plen;
        let mut improvable = true;
        loop {
            // the best 2·beams (accumulated log-probability, hypothesis, token)
            let keep = 2 * beams;
            let mut top: Vec<(f32, usize, u32)> = Vec::with_capacity(keep + 1);
            for (i, (seq, score)) in running.iter().enumerate() {
                let Some(row) = logits.get(i) else { break };
                let mut lp = log_softmax(row);
                self.process(&mut lp, seq, opts);
                for (t, &v) in lp.iter().enumerate() {
                    let acc = v + score;
                    if top.len() == keep && acc <= top[keep - 1].0 {
                        continue;
                    }
                    let at = top.partition_point(|c| c.0 >= acc);
                    top.insert(at, (acc, i, t as u32));
                    top.truncate(keep);
                }
            }
            let hits: Vec<bool> = top
                .iter()
                .map(|&(_, _, t)| t == eot || cur_len + 1 >= max_len)
                .collect();
            let seq_of = |&(_, i, t): &(f32, usize, u32)| {
                let mut s = running[i].0.clone();
                s.push(t);
                s
            };
            // finished hypotheses: the top `beams` candidates that just ended
            let norm = (cur_len + 1 - plen) as f32;
            let mut merged = finished.clone();
            for (k, c) in top.iter().enumerate() {
                let done = hits[k] && k < beams;
                let mut score = c.0 / norm;
                if !improvable {
                    score += NEG;
                }
                if !done {
                    score += NEG;
                }
                merged.push((seq_of(c), score, done));
            }
            merged.sort_by(|a, b| b.1.total_cmp(&a.1));
            merged.truncate(beams);
            finished = merged;
            // the hypotheses that go on
            let mut order: Vec<usize> = (0..top.len()).collect();
            let adjusted = |k: usize| top[k].0 + if hits[k] { NEG } else { 0.0 };
            order.sort_by(|&a, &b| adjusted(b).total_cmp(&adjusted(a)));
            order.truncate(beams);
            let sources: Vec<usize> = order.iter().map(|&k| top[k].1).collect();
            let next: Vec<(Vec<u32>, f32)> = order
                .iter()
                .map(|&k| (seq_of(&top[k]), adjusted(k)))
                .collect();
            let all_hit = hits.iter().all(|&h| h);
            cur_len += 1;
            let best_possible = next[0].1 / (cur_len - plen) as f32;
            let worst_finished = finished.iter().map(|f| f.1).fold(f32::INFINITY, f32::min);
            improvable = improvable
                && finished
                    .iter()
                    .any(|f| best_possible > if f.2 { worst_finished } else { NEG });
            running = next;
            if !improvable || all_hit {
                break;
            }
            self.programs.reorder(&sources, cur_len - 1)?;
            logits.clear();
            for (i, (seq, _)) in running.iter().enumerate() {
                let last = *seq.last().unwrap_or(&eot);
                logits.push(self.programs.step_on(i, last, cur_len - 1)?);
            }
        }
        // the finished score is the summed log-probability over the generated length (end
        // token included)
        let (mut best, score, _) = finished.swap_remove(0);
        let scored = best.len();
        if best.last() == Some(&eot) {
            best.pop();
        }
        Ok(Decoded {
            tokens: best,
            sum_logprob: f64::from(score) * scored as f64,
            scored,
        })
    }

    /// transformers' `WhisperTimeStampLogitsProcessor`.
    fn timestamp_rules(&self, scores: &mut [f32], generated: &[u32]) {
        let t = &self.tokens;
        let ts = t.timestamp_begin as usize;
        scores[t.no_timestamps as usize] = f32::NEG_INFINITY;
        let last_ts = generated.last().is_some_and(|&x| t.is_timestamp(x));
        let penultimate_ts = generated.len() < 2 || t.is_timestamp(generated[generated.len() - 2]);
        if last_ts {
            if penultimate_ts {
                scores[ts..].fill(f32::NEG_INFINITY);
            } else {
                scores[..t.eot as usize].fill(f32::NEG_INFINITY);
            }
        }
        if let Some(&last) = generated.iter().rev().find(|&&x| t.is_timestamp(x)) {
            let upto = if last_ts && !penultimate_ts {
                last
            } else {
                last + 1
            } as usize;
            scores[ts..upto.max(ts)].fill(f32::NEG_INFINITY);
        }
        if generated.is_empty() {
            scores[..ts].fill(f32::NEG_INFINITY);
            let last_allowed = ts + MAX_INITIAL_TIMESTAMP as usize;
            if last_allowed + 1 < scores.len() {
                scores[last_allowed + 1..].fill(f32::NEG_INFINITY);
            }
        }
        // log-softmax is a shift of the scores: compare in score space
        let timestamp_mass = log_sum_exp(&scores[ts..]);
        let best_text = scores[..ts]
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        if timestamp_mass > f64::from(best_text) {
            scores[..ts].fill(f32::NEG_INFINITY);
        }
    }

    /// Transcribes a file as `aneforge transcribe` does: audio longer than one window (or of
    /// unknown length) is decoded with timestamps, so that each next window starts where the
    /// last complete segment ended.
    pub fn transcribe(
        &mut self,
        path: &Path,
        opts: &DecodeOptions,
        progress: &mut dyn FnMut(f64, Option<f64>),
    ) -> Result<Transcript, WhisperError> {
        let long = AudioStream::open(path)?
            .expected_samples()
            .is_none_or(|n| n > WINDOW_SAMPLES as u64);
        let opts = DecodeOptions {
            timestamps: opts.timestamps || long,
            ..opts.clone()
        };
        self.transcribe_file(path, &opts, progress)
    }

    /// Transcribes a file window by window (30 s each; with timestamps, each next window starts
    /// at the last complete segment's end). `progress(done_seconds, total_seconds)` is told after
    /// each window (the total when the container states it).
    pub fn transcribe_file(
        &mut self,
        path: &Path,
        opts: &DecodeOptions,
        progress: &mut dyn FnMut(f64, Option<f64>),
    ) -> Result<Transcript, WhisperError> {
        let mut stream = AudioStream::open(path)?;
        let total = stream
            .expected_samples()
            .map(|n| n as f64 / SAMPLE_RATE as f64);
        let file_max = self.mel.file_log10_max(path)?;
        let mut seek = 0usize;
        let mut segments = Vec::new();
        let mut language = None;
        // the samples just before `seek`: the left edge of the window's first frames
        let mut before: Vec<f32> = Vec::new();
        // the initial prompt's and the segments' tokens since conditioning last restarted
        let mut previous: Vec<u32> = match &opts.initial_prompt {
            Some(text) => {
                self.tokenizer
                    .encode_plain(&format!(" {}", text.trim()))?
                    .ids
            }
            None => Vec::new(),
        };
        loop {
            let mut window = stream.peek(WINDOW_SAMPLES + CONTEXT)?;
            if window.is_empty() {
                break;
            }
            let after = window.split_off(window.len().min(WINDOW_SAMPLES));
            let mut mel = self.mel.file_window(&before, &window, &after, file_max);
            if seek > 0 && window.len() < WINDOW_SAMPLES {
                LogMel::pad_tail(&mut mel, window.len() / HOP);
            }
            let out = self.decode_window_after(&mel, opts, &previous, &mut |_, _| {})?;
            if language.is_none() {
                language = out.language.clone();
            }
            let offset = seek as f64 / SAMPLE_RATE as f64;
            let window_secs = window.len() as f64 / SAMPLE_RATE as f64;
            let advance = if out.no_speech {
                // openai-whisper skips a silent window whole
                window.len()
            } else if opts.timestamps {
                let (segs, advance) =
                    self.timestamp_segments(&out.generated, offset, window.len())?;
                if opts.condition_on_previous_text {
                    for seg in &segs {
                        previous.extend_from_slice(self.conditioning_tokens(&seg.tokens));
                    }
                }
                segments.extend(segs);
                advance
            } else {
                let text = self.text(&out.generated)?;
                segments.push(Segment {
                    start: offset,
                    end: offset + window_secs,
                    text,
                    tokens: out.generated.clone(),
                });
                window.len()
            };
            // text decoded at a high temperature is too unreliable to condition on; without
            // conditioning, only the first window sees the initial prompt
            if out.temperature > 0.5 || !opts.condition_on_previous_text {
                previous.clear();
            }
            // always move forward, also when a window yields no complete segment
            let advance = advance.max(SAMPLES_PER_POSITION).min(window.len());
            seek += stream.consume(advance)?;
            before = window[advance.saturating_sub(CONTEXT)..advance].to_vec();
            progress(seek as f64 / SAMPLE_RATE as f64, total);
            if window.len() < WINDOW_SAMPLES && advance >= window.len() {
                break;
            }
        }
        Ok(Transcript {
            // the segments' texts: a window's unfinished last segment is decoded again by the next
            text: segments.iter().map(|s| s.text.as_str()).collect(),
            segments,
            language,
            duration: seek as f64 / SAMPLE_RATE as f64,
        })
    }

    /// The part of a segment's tokens that later windows are conditioned on: all of them, but
    /// the last of two closing timestamps (transformers' `skip_ending_double_timestamps`).
    fn conditioning_tokens<'a>(&self, tokens: &'a [u32]) -> &'a [u32] {
        match tokens {
            [.., penultimate, _] if tokens.len() > 2 && self.tokens.is_timestamp(*penultimate) => {
                &tokens[..tokens.len() - 1]
            }
            _ => tokens,
        }
    }

    /// openai-whisper's segmentation of one window's tokens: segments end at consecutive
    /// timestamp pairs; the next window starts at the last complete segment's end, or after the
    /// whole window when the tokens end with a single timestamp (nothing left mid-speech).
    fn timestamp_segments(
        &self,
        tokens: &[u32],
        offset: f64,
        window_len: usize,
    ) -> Result<(Vec<Segment>, usize), WhisperError> {
        let t = &self.tokens;
        let is_ts: Vec<bool> = tokens.iter().map(|&x| t.is_timestamp(x)).collect();
        let time = |x: u32| f64::from(x - t.timestamp_begin) * TIME_PRECISION;
        let single_ending = is_ts.len() >= 2 && !is_ts[is_ts.len() - 2] && is_ts[is_ts.len() - 1];
        let consecutive: Vec<usize> = (1..is_ts.len())
            .filter(|&i| is_ts[i - 1] && is_ts[i])
            .collect();
        let mut segments = Vec::new();
        if !consecutive.is_empty() {
            let mut slices = consecutive.clone();
            if single_ending {
                slices.push(tokens.len());
            }
            let mut last = 0;
            for &end in &slices {
                let part = &tokens[last..end];
                if part.len() >= 2 {
                    segments.push(Segment {
                        start: offset + time(part[0]),
                        end: offset + time(part[part.len() - 1]),
                        text: self.text(part)?,
                        tokens: part.to_vec(),
                    });
                }
                last = end;
            }
            let advance = if single_ending {
                window_len
            } else {
                let last_ts = tokens[last - 1];
                (last_ts - t.timestamp_begin) as usize * SAMPLES_PER_POSITION
            };
            Ok((segments, advance))
        } else {
            let stamps: Vec<u32> = tokens
                .iter()
                .copied()
                .filter(|&x| t.is_timestamp(x))
                .collect();
            let duration = match stamps.last() {
                Some(&x) if x != t.timestamp_begin => time(x),
                _ => window_len as f64 / SAMPLE_RATE as f64,
            };
            segments.push(Segment {
                start: offset,
                end: offset + duration,
                text: self.text(tokens)?,
                tokens: tokens.to_vec(),
            });
            Ok((segments, window_len))
        }
    }
}
