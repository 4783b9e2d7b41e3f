//! Text → token ids over the `tokenizers` crate: single texts and pairs, truncation to a maximum
//! length (longest-first, as transformers and sentence-transformers call it), padding to the
//! longest sequence of a batch or to a fixed length, attention masks and token type ids.

mod scored;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokenizers::normalizers::{Lowercase, NormalizerWrapper, Sequence};
use tokenizers::{
    EncodeInput, Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::config::ConfigError;
use crate::model_dir::ModelDir;
use crate::tokenizer_config::TokenizerConfig;
pub(crate) use scored::ScoredPieces;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("{}: cannot load tokenizer: {message}", path.display())]
    Load { path: PathBuf, message: String },
    #[error("tokenizer: {0}")]
    Config(#[from] ConfigError),
    #[error("tokenizing input {index}: {message}")]
    Encode { index: usize, message: String },
    #[error("decoding: {0}")]
    Decode(String),
    #[error("cannot pad: the tokenizer has no padding token (set one with with_pad_token)")]
    NoPadToken,
    #[error("token '{0}' is not in the vocabulary")]
    UnknownToken(String),
    #[error("max length {max_length} leaves no room for the {special} special tokens this tokenizer adds")]
    MaxLengthTooSmall { max_length: usize, special: usize },
    #[error("tokenizer: {0}")]
    Invalid(String),
}

/// The tokenizers crate deserializes a `TemplateProcessing` post-processor without the checks its
/// builder makes, then panics while encoding when a template names a special token that
/// `special_tokens` lacks. Check every template (nested `Sequence` processors included) up front.
fn check_post_processor(tokenizer: &Tokenizer) -> Result<(), String> {
    let Some(processor) = tokenizer.get_post_processor() else {
        return Ok(());
    };
    let value = serde_json::to_value(processor).map_err(|e| format!("post_processor: {e}"))?;
    check_template_value(&value)
}

fn check_template_value(value: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value;
    if let Some(processors) = value.get("processors").and_then(Value::as_array) {
        return processors.iter().try_for_each(check_template_value);
    }
    if value.get("type").and_then(Value::as_str) != Some("TemplateProcessing") {
        return Ok(());
    }
    let specials = value.get("special_tokens").and_then(Value::as_object);
    for (name, token) in specials.into_iter().flatten() {
        let len = |key: &str| token.get(key).and_then(Value::as_array).map(Vec::len);
        if len("ids") != len("tokens") {
            return Err(format!(
                "post_processor special token '{name}' has {:?} ids but {:?} tokens",
                len("ids"),
                len("tokens")
            ));
        }
    }
    for template in ["single", "pair"] {
        let pieces = value.get(template).and_then(Value::as_array);
        for piece in pieces.into_iter().flatten() {
            let Some(id) = piece.pointer("/SpecialToken/id").and_then(Value::as_str) else {
                continue;
            };
            if !specials.is_some_and(|s| s.contains_key(id)) {
                return Err(format!(
                    "post_processor template '{template}' uses special token '{id}', \
                     which post_processor.special_tokens does not define"
                ));
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// Every sequence padded to the longest in the batch (transformers' `padding=True`).
    Longest,
    /// Every sequence truncated and padded to exactly this length (static shapes).
    Fixed(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PaddingSide {
    #[default]
    Right,
    Left,
}

/// One tokenized sequence (or pair), truncated, unpadded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizedText {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    pub attention_mask: Vec<u32>,
}

/// A padded batch, row-major `[batch, seq_len]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEncoding {
    pub batch: usize,
    pub seq_len: usize,
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    pub attention_mask: Vec<u32>,
    /// Unpadded length of each row.
    pub lengths: Vec<usize>,
}

impl BatchEncoding {
    pub fn row_ids(&self, row: usize) -> &[u32] {
        self.ids
            .get(row * self.seq_len..(row + 1) * self.seq_len)
            .unwrap_or(&[])
    }

    pub fn row_mask(&self, row: usize) -> &[u32] {
        self.attention_mask
            .get(row * self.seq_len..(row + 1) * self.seq_len)
            .unwrap_or(&[])
    }

    pub fn row_type_ids(&self, row: usize) -> &[u32] {
        self.type_ids
            .get(row * self.seq_len..(row + 1) * self.seq_len)
            .unwrap_or(&[])
    }
}

#[derive(Debug, Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
    /// the model that encodes in place of `inner`'s (whose model then holds the vocabulary only)
    scored: Option<Arc<ScoredPieces>>,
    max_length: Option<usize>,
    pad: Option<(u32, String)>,
    padding_side: PaddingSide,
}

impl TextTokenizer {
    /// A `tokenizer.json`. The file's own truncation and padding settings are dropped: set them
    /// with [`TextTokenizer::with_max_length`] and per call.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        let load = |message: String| TokenizerError::Load {
            path: path.to_path_buf(),
            message,
        };
        let text = crate::config::read_text(path).map_err(|e| match e {
            crate::config::ConfigError::Io { source, .. } => load(source.to_string()),
            other => load(other.to_string()),
        })?;
        // the tokenizers crate panics on some malformed files (an `expect` in its decoder
        // deserializer); that is bad input, not a bug of the caller
        let parsed = std::panic::catch_unwind(|| text.parse::<Tokenizer>())
            .map_err(|_| load("malformed tokenizer (the tokenizers library gave up)".into()))?;
        let inner = parsed.map_err(|e: tokenizers::Error| load(e.to_string()))?;
        check_post_processor(&inner).map_err(|message| TokenizerError::Load {
            path: path.to_path_buf(),
            message,
        })?;
        Self::from_tokenizer(inner)
    }

    /// The pad token is taken from the tokenizer's own padding settings, if any.
    pub fn from_tokenizer(mut inner: Tokenizer) -> Result<Self, TokenizerError> {
        let pad = inner.get_padding().map(|p| (p.pad_id, p.pad_token.clone()));
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| TokenizerError::Invalid(e.to_string()))?;
        Ok(TextTokenizer {
            inner,
            scored: None,
            max_length: None,
            pad,
            padding_side: PaddingSide::Right,
        })
    }

    /// `dir/tokenizer.json` with the pad token and padding side of `tokenizer_config.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let dir = dir.as_ref();
        Self::with_config(dir, &TokenizerConfig::load_dir(dir)?)
    }

    /// [`TextTokenizer::from_dir`] of an opened model directory.
    pub fn from_model_dir(dir: &ModelDir) -> Result<Self, TokenizerError> {
        Self::with_config(&dir.path, &dir.tokenizer_config)
    }

    fn with_config(dir: &Path, config: &TokenizerConfig) -> Result<Self, TokenizerError> {
        let mut tokenizer = Self::from_file(dir.join("tokenizer.json"))?;
        if let Some(pad) = &config.pad_token {
            tokenizer = tokenizer.with_pad_token(pad.content())?;
        }
        if config.padding_side.as_deref() == Some("left") {
            tokenizer.padding_side = PaddingSide::Left;
        }
        Ok(tokenizer)
    }

    /// The tokenizer of a sentence-transformers model directory; see
    /// [`TextTokenizer::for_sentence_transformer_model`].
    pub fn for_sentence_transformer(dir: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        Self::for_sentence_transformer_model(&ModelDir::open(dir)?)
    }

    /// The tokenizer set up the way sentence-transformers sets it up: truncation to
    /// `max_seq_length` from `sentence_bert_config.json`, else to the smaller of `model_max_length`
    /// (`tokenizer_config.json`) and `max_position_embeddings` (`config.json`); lowercasing first
    /// when `do_lower_case` is set.
    pub fn for_sentence_transformer_model(dir: &ModelDir) -> Result<Self, TokenizerError> {
        let tokenizer = Self::from_model_dir(dir)?;
        let bert = &dir.sentence_bert;
        let max_length = match bert.max_seq_length {
            Some(n) => Some(n),
            None => {
                let from_tokenizer = dir.tokenizer_config.max_length();
                let from_model = match &dir.config {
                    Some(config) => config
                        .get::<i64>("max_position_embeddings")?
                        .filter(|&n| n > 0)
                        .map(|n| n as usize),
                    None => None,
                };
                match (from_tokenizer, from_model) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
        };
        tokenizer
            .with_max_length(max_length)?
            .with_lowercase(bert.do_lower_case)
    }

    /// Truncate every input (longest-first for pairs) so that, special tokens included, it has at
    /// most `max_length` tokens.
    pub fn with_max_length(mut self, max_length: Option<usize>) -> Result<Self, TokenizerError> {
        self.set_truncation(max_length)?;
        self.max_length = max_length;
        Ok(self)
    }

    fn set_truncation(&mut self, max_length: Option<usize>) -> Result<(), TokenizerError> {
        let params = max_length.map(|max_length| TruncationParams {
            direction: TruncationDirection::Right,
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
        });
        self.inner
            .with_truncation(params)
            .map_err(|e| TokenizerError::Invalid(e.to_string()))?;
        Ok(())
    }

    /// Lowercase text before the tokenizer's own normalizer (sentence-transformers'
    /// `do_lower_case`); a no-op when the normalizer already has a `Lowercase` step.
    pub fn with_lowercase(mut self, lowercase: bool) -> Result<Self, TokenizerError> {
        if !lowercase {
            return Ok(self);
        }
        let existing = self.inner.get_normalizer().cloned();
        let already = match &existing {
            Some(NormalizerWrapper::Lowercase(_)) => true,
            Some(NormalizerWrapper::Sequence(seq)) => seq
                .as_ref()
                .iter()
                .any(|n| matches!(n, NormalizerWrapper::Lowercase(_))),
            _ => false,
        };
        if already {
            return Ok(self);
        }
        let mut steps = vec![NormalizerWrapper::Lowercase(Lowercase)];
        match existing {
            Some(NormalizerWrapper::Sequence(seq)) => steps.extend(seq),
            Some(other) => steps.push(other),
            None => {}
        }
        self.inner
            .with_normalizer(Some(NormalizerWrapper::Sequence(Sequence::new(steps))))
            .map_err(|e| TokenizerError::Invalid(e.to_string()))?;
        Ok(self)
    }

    pub fn with_pad_token(mut self, token: &str) -> Result<Self, TokenizerError> {
        let id = self
            .inner
            .token_to_id(token)
            .ok_or_else(|| TokenizerError::UnknownToken(token.to_string()))?;
        self.pad = Some((id, token.to_string()));
        Ok(self)
    }

    pub fn with_padding_side(mut self, side: PaddingSide) -> Self {
        self.padding_side = side;
        self
    }

    pub fn max_length(&self) -> Option<usize> {
        self.max_length
    }

    pub fn pad_token(&self) -> Option<(u32, &str)> {
        self.pad.as_ref().map(|(id, t)| (*id, t.as_str()))
    }

    /// A scored SentencePiece vocabulary's tokenizer: `inner` keeps the vocabulary, added
    /// tokens and the rest of the pipeline; `scored` encodes.
    pub(crate) fn with_scored_pieces(mut self, scored: ScoredPieces) -> Self {
        self.scored = Some(Arc::new(scored));
        self
    }

    /// The `tokenizers` pipeline. Its `encode` is not this tokenizer's when a scored vocabulary
    /// encodes in place of its model: encode through [`TextTokenizer`].
    pub(crate) fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    fn encode_input(
        &self,
        tokenizer: &Tokenizer,
        input: EncodeInput<'_>,
        index: usize,
        add_special_tokens: bool,
    ) -> Result<TokenizedText, TokenizerError> {
        let encoding = match &self.scored {
            Some(scored) => scored.encode(tokenizer, input, add_special_tokens),
            None => tokenizer.encode(input, add_special_tokens),
        }
        .map_err(|e| TokenizerError::Encode {
            index,
            message: e.to_string(),
        })?;
        Ok(tokenized(&encoding))
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// One text with special tokens, truncated.
    pub fn encode(&self, text: &str) -> Result<TokenizedText, TokenizerError> {
        self.encode_with(EncodeInput::from(text), 0, true)
    }

    /// One text as is: no special tokens, truncated.
    pub fn encode_plain(&self, text: &str) -> Result<TokenizedText, TokenizerError> {
        self.encode_with(EncodeInput::from(text), 0, false)
    }

    /// A text pair with special tokens, truncated longest-first.
    pub fn encode_pair(&self, first: &str, second: &str) -> Result<TokenizedText, TokenizerError> {
        self.encode_with(EncodeInput::from((first, second)), 0, true)
    }

    fn encode_with(
        &self,
        input: EncodeInput<'_>,
        index: usize,
        add_special_tokens: bool,
    ) -> Result<TokenizedText, TokenizerError> {
        self.encode_input(&self.inner, input, index, add_special_tokens)
    }

    pub fn encode_batch(
        &self,
        texts: &[&str],
        padding: Padding,
    ) -> Result<BatchEncoding, TokenizerError> {
        let inputs = texts.iter().map(|&t| EncodeInput::from(t)).collect();
        self.batch(inputs, padding)
    }

    pub fn encode_pair_batch(
        &self,
        pairs: &[(&str, &str)],
        padding: Padding,
    ) -> Result<BatchEncoding, TokenizerError> {
        let inputs = pairs
            .iter()
            .map(|&(a, b)| EncodeInput::from((a, b)))
            .collect();
        self.batch(inputs, padding)
    }

    fn batch(
        &self,
        inputs: Vec<EncodeInput<'_>>,
        padding: Padding,
    ) -> Result<BatchEncoding, TokenizerError> {
        let encode = |tokenizer: &Tokenizer, inputs: Vec<EncodeInput<'_>>| {
            let mut out = Vec::with_capacity(inputs.len());
            for (index, input) in inputs.into_iter().enumerate() {
                out.push(self.encode_input(tokenizer, input, index, true)?);
            }
            Ok::<_, TokenizerError>(out)
        };
        let rows = match padding {
            Padding::Fixed(n) if self.max_length.is_none_or(|m| m > n) => {
                let mut narrowed = self.clone();
                narrowed.set_truncation(Some(n))?;
                encode(&narrowed.inner, inputs)?
            }
            _ => encode(&self.inner, inputs)?,
        };
        let lengths: Vec<usize> = rows.iter().map(|r| r.ids.len()).collect();
        let seq_len = match padding {
            Padding::Longest => lengths.iter().copied().max().unwrap_or(0),
            Padding::Fixed(n) => n,
        };
        let needs_pad = lengths.iter().any(|&l| l < seq_len);
        let (pad_id, _) = match (&self.pad, needs_pad) {
            (Some(pad), _) => pad.clone(),
            (None, false) => (0, String::new()),
            (None, true) => return Err(TokenizerError::NoPadToken),
        };
        let total = rows.len() * seq_len;
        let mut batch = BatchEncoding {
            batch: rows.len(),
            seq_len,
            ids: Vec::with_capacity(total),
            type_ids: Vec::with_capacity(total),
            attention_mask: Vec::with_capacity(total),
            lengths,
        };
        for row in rows {
            if row.ids.len() > seq_len {
                return Err(TokenizerError::MaxLengthTooSmall {
                    max_length: seq_len,
                    special: row.ids.len() - seq_len,
                });
            }
            let pad = seq_len - row.ids.len();
            let fill = |dst: &mut Vec<u32>, src: &[u32], value: u32| match self.padding_side {
                PaddingSide::Right => {
                    dst.extend_from_slice(src);
                    dst.extend(std::iter::repeat_n(value, pad));
                }
                PaddingSide::Left => {
                    dst.extend(std::iter::repeat_n(value, pad));
                    dst.extend_from_slice(src);
                }
            };
            fill(&mut batch.ids, &row.ids, pad_id);
            fill(&mut batch.type_ids, &row.type_ids, 0);
            fill(&mut batch.attention_mask, &row.attention_mask, 0);
        }
        Ok(batch)
    }

    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }
}

fn tokenized(encoding: &Encoding) -> TokenizedText {
    TokenizedText {
        ids: encoding.get_ids().to_vec(),
        type_ids: encoding.get_type_ids().to_vec(),
        attention_mask: encoding.get_attention_mask().to_vec(),
    }
}
