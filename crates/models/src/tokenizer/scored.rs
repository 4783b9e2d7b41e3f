//! SentencePiece BPE over a scored vocabulary: the model of a GGUF `llama` vocabulary that lists
//! no merges. Its merges are implied by the scores, and ranked here when a pair of adjacent
//! pieces is met, instead of being listed up front (Gemma 3's 262144 pieces imply 514847 merges,
//! whose listing and lookup table took longer to build than the model's programs take to compile).
//!
//! The ranking is transformers' `generate_merges` order, which its GGUF import hands to a BPE
//! model: two pieces whose concatenation is a piece merge into it; a merge ranks by the merged
//! piece's score (higher first), then by the left piece's length in characters (longer first),
//! then by the right piece's, then by the merged piece's first position in the vocabulary.
//! Candidates are taken as the `tokenizers` crate's BPE takes them: best rank first, leftmost
//! first among equals. Everything but the model (added tokens, normaliser, pre-tokeniser,
//! post-processor, decoder) stays with the `tokenizers` pipeline it is used in.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use tokenizers::{
    EncodeInput, Encoding, InputSequence, Model, OffsetType, PreTokenizer, Token, Tokenizer,
};

#[derive(Debug)]
pub(crate) struct ScoredPieces {
    /// every piece's text, one after another: piece `id` ends at `ends[id]`
    text: String,
    ends: Vec<u32>,
    /// by piece id; NaN ranks as -inf and -0 as 0 (the order must be total, and -0 == 0)
    scores: Vec<f64>,
    /// a repeated piece's first position (its id is its last one), for vocabularies that repeat
    /// pieces; otherwise a piece's first position is its id
    first: HashMap<u32, u32>,
    /// the pieces `<0x00>`..`<0xFF>` that spell a character the vocabulary lacks
    bytes: [Option<u32>; 256],
}

/// A symbol of the word being merged: a piece, and the bytes of the word it covers.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    /// bytes of the word; 0 once merged into the symbol on its left
    len: u32,
    /// characters of the piece's text (a byte piece `<0xE2>` has 6), the rank's second key
    chars: u32,
    prev: u32,
    next: u32,
}

const NONE: u32 = u32::MAX;

/// A merge of the symbol at `pos` with the one after it, into `merged`.
#[derive(Clone, Copy)]
struct Candidate {
    score: f64,
    left_chars: u32,
    right_chars: u32,
    first: u32,
    pos: u32,
    left: u32,
    right: u32,
    merged: u32,
}

impl Ord for Candidate {
    /// greater = taken first
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(self.left_chars.cmp(&other.left_chars))
            .then(self.right_chars.cmp(&other.right_chars))
            .then(other.first.cmp(&self.first))
            .then(other.pos.cmp(&self.pos))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

impl ScoredPieces {
    /// `tokens[id]` and `scores[id]` (of equal length), and the vocabulary's piece → id map
    /// (a repeated piece maps to its last id).
    pub(crate) fn new(
        tokens: &[String],
        scores: &[f64],
        id_of: impl Fn(&str) -> Option<u32>,
    ) -> Self {
        let mut text = String::with_capacity(tokens.iter().map(String::len).sum());
        let mut ends = Vec::with_capacity(tokens.len());
        let mut first = HashMap::new();
        for (i, t) in tokens.iter().enumerate() {
            text.push_str(t);
            ends.push(text.len() as u32);
            match id_of(t) {
                Some(last) if last as usize != i => {
                    first.entry(last).or_insert(i as u32);
                }
                _ => {}
            }
        }
        let scores = scores
            .iter()
            .map(|&s| match s {
                s if s.is_nan() => f64::NEG_INFINITY,
                s => s + 0.0,
            })
            .collect();
        let bytes = std::array::from_fn(|b| id_of(&format!("<0x{b:02X}>")));
        ScoredPieces {
            text,
            ends,
            scores,
            first,
            bytes,
        }
    }

    fn piece(&self, id: u32) -> &str {
        let id = id as usize;
        let start = if id == 0 {
            0
        } else {
            self.ends[id - 1] as usize
        };
        &self.text[start..self.ends[id] as usize]
    }

    /// The pieces of one pre-tokenised word, with their byte offsets in it. A character that is
    /// neither a piece nor spelled by byte pieces is dropped, as a BPE model without an unknown
    /// token drops it.
    fn tokenize(&self, model: &impl Model, word: &str) -> Vec<Token> {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(word.len());
        let push = |id: u32, len: usize, symbols: &mut Vec<Symbol>| {
            let at = symbols.len() as u32;
            if let Some(last) = symbols.last_mut() {
                last.next = at;
            }
            symbols.push(Symbol {
                id,
                len: len as u32,
                chars: self.piece(id).chars().count() as u32,
                prev: if at == 0 { NONE } else { at - 1 },
                next: NONE,
            });
        };
        for (i, c) in word.char_indices() {
            let s = &word[i..i + c.len_utf8()];
            if let Some(id) = model.token_to_id(s) {
                push(id, s.len(), &mut symbols);
            } else if let Some(ids) = s
                .bytes()
                .map(|b| self.bytes[b as usize])
                .collect::<Option<Vec<u32>>>()
            {
                for id in ids {
                    push(id, 1, &mut symbols);
                }
            }
        }

        let mut joined = String::new();
        let mut merged_id = |left: u32, right: u32| {
            joined.clear();
            joined.push_str(self.piece(left));
            joined.push_str(self.piece(right));
            model.token_to_id(&joined)
        };
        let candidate = |pos: u32,
                         symbols: &[Symbol],
                         merged_id: &mut dyn FnMut(u32, u32) -> Option<u32>|
         -> Option<Candidate> {
            let left = symbols[pos as usize];
            let right = symbols[left.next as usize];
            let merged = merged_id(left.id, right.id)?;
            Some(Candidate {
                score: self.scores[merged as usize],
                left_chars: left.chars,
                right_chars: right.chars,
                first: self.first.get(&merged).copied().unwrap_or(merged),
                pos,
                left: left.id,
                right: right.id,
                merged,
            })
        };
        let mut queue = BinaryHeap::with_capacity(symbols.len());
        for pos in 0..symbols.len().saturating_sub(1) {
            queue.extend(candidate(pos as u32, &symbols, &mut merged_id));
        }
        while let Some(top) = queue.pop() {
            let at = top.pos as usize;
            let left = symbols[at];
            if left.len == 0 || left.next == NONE {
                continue;
            }
            let right = symbols[left.next as usize];
            // a stale candidate still applies when the pair now there merges into the same piece
            let current = (left.id, right.id) == (top.left, top.right)
                || merged_id(left.id, right.id) == Some(top.merged);
            if !current {
                continue;
            }
            symbols[at] = Symbol {
                id: top.merged,
                len: left.len + right.len,
                chars: left.chars + right.chars,
                prev: left.prev,
                next: right.next,
            };
            symbols[left.next as usize].len = 0;
            if right.next != NONE {
                symbols[right.next as usize].prev = top.pos;
            }
            if left.prev != NONE {
                queue.extend(candidate(left.prev, &symbols, &mut merged_id));
            }
            if right.next != NONE {
                queue.extend(candidate(top.pos, &symbols, &mut merged_id));
            }
        }

        let mut offset = 0usize;
        symbols
            .iter()
            .filter(|s| s.len != 0)
            .map(|s| {
                let start = offset;
                offset += s.len as usize;
                Token::new(s.id, self.piece(s.id).to_string(), (start, offset))
            })
            .collect()
    }

    /// `tokenizer.encode(input, add_special_tokens)` with this model in place of the tokenizer's
    /// own: added tokens, normaliser and pre-tokeniser first, the post-processor after.
    pub(crate) fn encode(
        &self,
        tokenizer: &Tokenizer,
        input: EncodeInput<'_>,
        add_special_tokens: bool,
    ) -> tokenizers::Result<Encoding> {
        let (first, pair) = match input {
            EncodeInput::Single(a) => (a, None),
            EncodeInput::Dual(a, b) => (a, Some(b)),
        };
        let first = self.encode_sequence(tokenizer, first, 0)?;
        let pair = pair
            .map(|s| self.encode_sequence(tokenizer, s, 1))
            .transpose()?;
        tokenizer.post_process(first, pair, add_special_tokens)
    }

    fn encode_sequence(
        &self,
        tokenizer: &Tokenizer,
        sequence: InputSequence<'_>,
        type_id: u32,
    ) -> tokenizers::Result<Encoding> {
        let InputSequence::Raw(text) = sequence else {
            return Err("a scored vocabulary takes raw text, not pre-tokenized words".into());
        };
        let mut words = tokenizer
            .get_added_vocabulary()
            .extract_and_normalize(tokenizer.get_normalizer(), &text);
        if let Some(pre) = tokenizer.get_pre_tokenizer() {
            pre.pre_tokenize(&mut words)?;
        }
        let model = tokenizer.get_model();
        words.tokenize(|word| Ok(self.tokenize(model, word.get())))?;
        words.into_encoding(None, type_id, OffsetType::Byte)
    }
}
