//! Whisper's special tokens and suppression lists, found by name in the model's tokenizer (ids
//! differ between English-only and multilingual vocabularies), and the lists from the
//! checkpoint's generation settings.

use std::path::Path;

use serde_json::Value;

use super::WhisperError;
use crate::tokenizer::TextTokenizer;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecialTokens {
    pub eot: u32,
    pub sot: u32,
    /// `<|startofprev|>`: opens the previous text a window's decoding is conditioned on.
    pub start_of_prev: u32,
    pub translate: u32,
    pub transcribe: u32,
    pub no_timestamps: u32,
    /// `<|nospeech|>` (`<|nocaptions|>` in older vocabularies): its probability after
    /// `<|startoftranscript|>` says the window holds no speech.
    pub no_speech: u32,
    /// `<|0.00|>`; timestamp `i` (0.02 s steps) is `timestamp_begin + i`.
    pub timestamp_begin: u32,
    /// `(code, id)` of every language token, in id order.
    pub languages: Vec<(String, u32)>,
    /// Vocabulary of 51865 or more: the multilingual models.
    pub multilingual: bool,
    /// Suppressed at every step.
    pub suppress: Vec<u32>,
    /// Suppressed at the first generated position.
    pub begin_suppress: Vec<u32>,
}

fn id(tok: &TextTokenizer, name: &str) -> Result<u32, WhisperError> {
    tok.token_to_id(name).ok_or_else(|| {
        WhisperError::Config(format!(
            "the tokenizer has no {name} token: not a Whisper tokenizer"
        ))
    })
}

fn ids(v: Option<&Value>) -> Option<Vec<u32>> {
    v?.as_array()?
        .iter()
        .map(|x| x.as_u64().map(|n| n as u32))
        .collect()
}

impl SpecialTokens {
    /// The tokens of `tok` for a model of `vocab_size`; suppression lists from
    /// `generation_config.json` (transformers) or `config.json` (CTranslate2) in `dir`.
    pub fn new(tok: &TextTokenizer, vocab_size: usize, dir: &Path) -> Result<Self, WhisperError> {
        let sot = id(tok, "<|startoftranscript|>")?;
        let translate = id(tok, "<|translate|>")?;
        let no_timestamps = id(tok, "<|notimestamps|>")?;
        let languages = (sot + 1..translate)
            .filter_map(|i| {
                let t = tok.id_to_token(i)?;
                let code = t.strip_prefix("<|")?.strip_suffix("|>")?.to_string();
                Some((code, i))
            })
            .collect();
        let read = |name: &str| -> Option<Value> {
            let text = std::fs::read_to_string(dir.join(name)).ok()?;
            serde_json::from_str(&text).ok()
        };
        let (suppress, begin_suppress) = if let Some(g) = read("generation_config.json") {
            (
                ids(g.get("suppress_tokens")),
                ids(g.get("begin_suppress_tokens")),
            )
        } else if let Some(c) = read("config.json") {
            (ids(c.get("suppress_ids")), ids(c.get("suppress_ids_begin")))
        } else {
            (None, None)
        };
        let eot = id(tok, "<|endoftext|>")?;
        let no_speech = tok
            .token_to_id("<|nospeech|>")
            .map_or_else(|| id(tok, "<|nocaptions|>"), Ok)?;
        let transcribe = id(tok, "<|transcribe|>")?;
        let suppress = suppress.ok_or_else(|| {
            WhisperError::Config(format!(
                "{}: no suppression list (generation_config.json suppress_tokens, or a \
                 CTranslate2 config.json suppress_ids)",
                dir.display()
            ))
        })?;
        Ok(SpecialTokens {
            eot,
            sot,
            start_of_prev: id(tok, "<|startofprev|>")?,
            translate,
            transcribe,
            no_timestamps,
            no_speech,
            timestamp_begin: no_timestamps + 1,
            languages,
            multilingual: vocab_size >= 51865,
            suppress,
            begin_suppress: begin_suppress
                .unwrap_or_else(|| tok.token_to_id("Ġ").into_iter().chain([eot]).collect()),
        })
    }

    /// The language token for a code such as `en`.
    pub fn language(&self, code: &str) -> Option<u32> {
        self.languages
            .iter()
            .find(|(c, _)| c == code)
            .map(|(_, i)| *i)
    }

    pub fn language_code(&self, id: u32) -> Option<&str> {
        self.languages
            .iter()
            .find(|(_, i)| *i == id)
            .map(|(c, _)| c.as_str())
    }

    pub fn is_timestamp(&self, id: u32) -> bool {
        id >= self.timestamp_begin
    }
}
