//! The tokenizer a GGUF file's metadata describes (`tokenizer.ggml.*`), assembled as a
//! `tokenizer.json` in memory and loaded by the `tokenizers` crate.
//!
//! The reference is transformers' GGUF import (`AutoTokenizer.from_pretrained(dir, gguf_file=..)`,
//! `transformers.integrations.gguf`): byte-level BPE for `gpt2` vocabularies, SentencePiece-style
//! BPE with byte fallback for `llama` ones (merges from the file, else ranked by the scores),
//! control tokens as special added tokens, user-defined tokens as plain added tokens, a BOS/EOS
//! template from `tokenizer.ggml.add_{bos,eos}_token`.

use std::collections::HashSet;

use serde_json::{json, Map};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::{AddedToken, Tokenizer};

use super::{GgufError, GgufFile, MetaArray};
use crate::tokenizer::{ScoredPieces, TextTokenizer};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerModelKind {
    /// `gpt2`: byte-level BPE with merges.
    ByteLevelBpe,
    /// `llama`: SentencePiece pieces (`▁` for spaces) with byte-fallback tokens.
    SentencePieceBpe,
}

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// Split patterns for byte-level vocabularies by `tokenizer.ggml.pre`, as transformers maps them.
/// Any other value keeps the GPT-2 byte-level split.
fn pre_tokenizer_split(pre: &str) -> Option<&'static str> {
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3,
        "tekken" => TEKKEN,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2,
        "qwen35" => QWEN35,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O,
        _ => return None,
    })
}

/// GPT-2's reversible byte → printable character map.
fn bytes_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            extra += 1;
            255 + extra
        };
        map[b as usize] = char::from_u32(c).unwrap_or('\u{FFFD}');
    }
    map
}

#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    /// With the file's padding token.
    pub tokenizer: TextTokenizer,
    pub kind: TokenizerModelKind,
    pub bos: Option<(u32, String)>,
    pub eos: Option<(u32, String)>,
    pub unk: Option<(u32, String)>,
    pub pad: Option<(u32, String)>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

impl GgufTokenizer {
    pub fn from_gguf(file: &GgufFile) -> Result<Self, GgufError> {
        let fail = |reason: String| GgufError::Tokenizer {
            path: file.path().to_path_buf(),
            reason,
        };
        let model = file.require_str("tokenizer.ggml.model")?;
        let arch = file.architecture()?;
        let kind = match model {
            "gpt2" => TokenizerModelKind::ByteLevelBpe,
            "llama" if arch == "phi3" => {
                return Err(fail(format!(
                    "the SentencePiece variant of architecture '{arch}' is not supported"
                )))
            }
            "llama" => TokenizerModelKind::SentencePieceBpe,
            other => {
                return Err(fail(format!(
                    "tokenizer.ggml.model '{other}' is not supported (gpt2 and llama are)"
                )))
            }
        };
        let tokens = match file.require_array("tokenizer.ggml.tokens")? {
            MetaArray::String(t) => t,
            other => {
                return Err(fail(format!(
                    "tokenizer.ggml.tokens holds {}, not strings",
                    other.element_type()
                )))
            }
        };
        let token_types = match file.get_array("tokenizer.ggml.token_type")? {
            Some(a) => a
                .to_i64s()
                .ok_or_else(|| fail("tokenizer.ggml.token_type is not an integer array".into()))?,
            None => Vec::new(),
        };
        if !token_types.is_empty() && token_types.len() != tokens.len() {
            return Err(fail(format!(
                "{} token types for {} tokens",
                token_types.len(),
                tokens.len()
            )));
        }
        let merges = match file.get_array("tokenizer.ggml.merges")? {
            Some(MetaArray::String(m)) => Some(
                m.iter()
                    .map(|merge| {
                        let mut parts = merge.split(' ');
                        match (parts.next(), parts.next(), parts.next()) {
                            (Some(a), Some(b), None) => Ok((a.to_string(), b.to_string())),
                            _ => Err(fail(format!(
                                "merge '{merge}' is not two tokens separated by one space"
                            ))),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(other) => {
                return Err(fail(format!(
                    "tokenizer.ggml.merges holds {}, not strings",
                    other.element_type()
                )))
            }
            None => None,
        };
        let special_id = |key: &str| -> Result<Option<(u32, String)>, GgufError> {
            let Some(id) = file.get_u64(key)? else {
                return Ok(None);
            };
            let token = usize::try_from(id)
                .ok()
                .and_then(|i| tokens.get(i))
                .ok_or_else(|| {
                    fail(format!(
                        "{key} = {id} is outside the {} tokens",
                        tokens.len()
                    ))
                })?;
            Ok(Some((id as u32, token.clone())))
        };
        let bos = special_id("tokenizer.ggml.bos_token_id")?;
        let eos = special_id("tokenizer.ggml.eos_token_id")?;
        let unk = special_id("tokenizer.ggml.unknown_token_id")?;
        let pad = special_id("tokenizer.ggml.padding_token_id")?;
        let default_add_bos = kind == TokenizerModelKind::SentencePieceBpe;
        let add_bos = file
            .get_bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(default_add_bos)
            && bos.is_some();
        let add_eos = file
            .get_bool("tokenizer.ggml.add_eos_token")?
            .unwrap_or(false)
            && eos.is_some();
        let pre = file.get_str("tokenizer.ggml.pre")?;
        // SentencePiece's dummy prefix: a space before the text (Llama), or none (Gemma)
        let space_prefix = file
            .get_bool("tokenizer.ggml.add_space_prefix")?
            .unwrap_or(!matches!(arch, "gemma" | "gemma2" | "gemma3"));

        // a scored vocabulary without merges encodes with its scores (ScoredPieces); the BPE
        // model then only holds the vocabulary
        let mut scored = None;
        let (vocab, merges) = match kind {
            TokenizerModelKind::ByteLevelBpe => {
                let merges = merges
                    .ok_or_else(|| fail("a gpt2 vocabulary needs tokenizer.ggml.merges".into()))?;
                (byte_level_vocab(tokens), merges)
            }
            TokenizerModelKind::SentencePieceBpe => {
                let vocab = plain_vocab(tokens);
                let merges = match merges {
                    Some(m) => m,
                    None => {
                        let scores = match file.get_array("tokenizer.ggml.scores")? {
                            Some(a) => a.to_f64s().ok_or_else(|| {
                                fail("tokenizer.ggml.scores is not numeric".into())
                            })?,
                            None => {
                                return Err(fail(
                                    "a llama vocabulary needs merges or scores".into(),
                                ))
                            }
                        };
                        if scores.len() != tokens.len() {
                            return Err(fail(format!(
                                "{} scores for {} tokens",
                                scores.len(),
                                tokens.len()
                            )));
                        }
                        scored = Some(ScoredPieces::new(tokens, &scores, |t| {
                            vocab.get(t).copied()
                        }));
                        Vec::new()
                    }
                };
                (vocab, merges)
            }
        };

        let mut added = AddedTokens::default();
        let byte_alphabet: Option<HashSet<char>> = (kind == TokenizerModelKind::ByteLevelBpe)
            .then(|| bytes_to_unicode().into_iter().collect());
        for (token, &ty) in tokens.iter().zip(&token_types) {
            let spelled = byte_alphabet
                .as_ref()
                .is_none_or(|a| token.chars().all(|c| a.contains(&c)));
            if ty == TOKEN_CONTROL && spelled {
                added.add(token, true);
            }
        }
        for (token, &ty) in tokens.iter().zip(&token_types) {
            if ty == TOKEN_USER_DEFINED && vocab.contains_key(token) {
                added.add(token, false);
            }
        }
        // transformers' GPT2Tokenizer registers its default special token first.
        if kind == TokenizerModelKind::ByteLevelBpe && vocab.contains_key("<|endoftext|>") {
            added.add("<|endoftext|>", true);
        }
        for (_, token) in [&bos, &eos, &unk, &pad].into_iter().flatten() {
            added.add(token, true);
        }

        let template = |bos_on: bool, eos_on: bool| {
            let special =
                |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
            let seq = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
            let bos_t = bos.as_ref().map(|(_, t)| t.as_str()).unwrap_or_default();
            let eos_t = eos.as_ref().map(|(_, t)| t.as_str()).unwrap_or_default();
            let mut single = Vec::new();
            let mut pair = Vec::new();
            for (out, (seq_id, type_id)) in [(&mut single, ("A", 0)), (&mut pair, ("A", 0))] {
                if bos_on {
                    out.push(special(bos_t, type_id));
                }
                out.push(seq(seq_id, type_id));
                if eos_on {
                    out.push(special(eos_t, type_id));
                }
            }
            if bos_on {
                pair.push(special(bos_t, 1));
            }
            pair.push(seq("B", 1));
            if eos_on {
                pair.push(special(eos_t, 1));
            }
            let mut specials = Map::new();
            for (on, tok) in [(bos_on, &bos), (eos_on, &eos)] {
                if let (true, Some((id, t))) = (on, tok) {
                    specials.insert(t.clone(), json!({"id": t, "ids": [id], "tokens": [t]}));
                }
            }
            json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials})
        };

        // the model is built directly: a JSON document of a large vocabulary (Gemma 3: 262144
        // tokens) parses through intermediate value trees of several hundred
        // MB, which the allocator then keeps as the process's resident memory
        let bpe = BPE::builder();
        let bpe = match kind {
            TokenizerModelKind::ByteLevelBpe => bpe
                .continuing_subword_prefix(String::new())
                .end_of_word_suffix(String::new())
                .fuse_unk(false)
                .byte_fallback(false),
            TokenizerModelKind::SentencePieceBpe => bpe.fuse_unk(true).byte_fallback(true),
        };
        let added_tokens = added.into_tokens();
        let model = bpe
            .ignore_merges(false)
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| fail(format!("the vocabulary does not form a BPE model: {e}")))?;
        let (pre_tokenizer, decoder) = match kind {
            TokenizerModelKind::ByteLevelBpe => {
                let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
                let pre_tokenizer = match pre.and_then(pre_tokenizer_split) {
                    Some(regex) => json!({"type": "Sequence", "pretokenizers": [
                        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
                        byte_level(false),
                    ]}),
                    None => byte_level(true),
                };
                (
                    pre_tokenizer,
                    json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}),
                )
            }
            TokenizerModelKind::SentencePieceBpe => (
                json!({"type": "Metaspace", "replacement": "\u{2581}",
                       "prepend_scheme": if space_prefix { "first" } else { "never" }, "split": false}),
                {
                    let mut decoders = vec![
                        json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
                        json!({"type": "ByteFallback"}),
                        json!({"type": "Fuse"}),
                    ];
                    if space_prefix {
                        decoders
                            .push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
                    }
                    json!({"type": "Sequence", "decoders": decoders})
                },
            ),
        };
        // everything but the model (and the added tokens, whose ids the model gives) as a
        // document, as tokenizer.json would hold it
        let document = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [],
            "normalizer": null,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": template(add_bos, add_eos),
            "decoder": decoder,
            "model": {"type": "BPE", "vocab": {}, "merges": []},
        });
        let mut tokenizer: Tokenizer = document
            .to_string()
            .parse()
            .map_err(|e| fail(format!("the assembled tokenizer does not load: {e}")))?;
        tokenizer.with_model(model);
        // as tokenizer.json's loader adds its `added_tokens`, once the model is in place
        tokenizer
            .add_tokens(added_tokens)
            .map_err(|e| fail(format!("the added tokens do not load: {e}")))?;
        let mut tokenizer = TextTokenizer::from_tokenizer(tokenizer)
            .map_err(|e| fail(format!("the assembled tokenizer does not load: {e}")))?;
        if let Some(scored) = scored {
            tokenizer = tokenizer.with_scored_pieces(scored);
        }
        if let Some((_, token)) = &pad {
            tokenizer = tokenizer
                .with_pad_token(token)
                .map_err(|e| fail(format!("the padding token: {e}")))?;
        }
        Ok(GgufTokenizer {
            tokenizer,
            kind,
            bos,
            eos,
            unk,
            pad,
            add_bos,
            add_eos,
            chat_template: file.get_str("tokenizer.chat_template")?.map(str::to_string),
        })
    }
}

impl GgufFile {
    /// `tokenizer.chat_template`, if the file has one.
    pub fn chat_template(&self) -> Result<Option<&str>, GgufError> {
        self.get_str("tokenizer.chat_template")
    }
}

/// token → id; a repeated token keeps its last id (as a Python dict built in order would).
fn plain_vocab(tokens: &[String]) -> Vocab {
    let mut vocab = Vocab::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), i as u32);
    }
    vocab
}

/// Tokens spelled in GPT-2's byte alphabet; any token with another character is respelled from
/// its UTF-8 bytes.
fn byte_level_vocab(tokens: &[String]) -> Vocab {
    let map = bytes_to_unicode();
    let alphabet: HashSet<char> = map.iter().copied().collect();
    let mut vocab = Vocab::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        let spelled = if t.chars().all(|c| alphabet.contains(&c)) {
            t.clone()
        } else {
            t.bytes().map(|b| map[b as usize]).collect()
        };
        vocab.insert(spelled, i as u32);
    }
    vocab
}

/// Added tokens in the order transformers adds them; a token is added once.
#[derive(Default)]
struct AddedTokens {
    entries: Vec<(String, bool)>,
    seen: HashSet<String>,
}

impl AddedTokens {
    fn add(&mut self, token: &str, special: bool) {
        if self.seen.insert(token.to_string()) {
            self.entries.push((token.to_string(), special));
        }
    }

    /// The tokens in the order added (their ids come from the model they are added to).
    fn into_tokens(self) -> Vec<AddedToken> {
        self.entries
            .into_iter()
            .map(|(content, special)| {
                AddedToken::from(content, special)
                    .single_word(false)
                    .lstrip(false)
                    .rstrip(false)
                    .normalized(false)
            })
            .collect()
    }
}
