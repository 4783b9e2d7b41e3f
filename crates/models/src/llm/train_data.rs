//! Fine-tuning data: a plain text file packed into a token stream cut into sequences, or a chat
//! `.jsonl` file (one `{"messages": [{"role": ..., "content": ...}, ...]}` per line) rendered with
//! the model's chat template, with only the assistant answers trained (every other label is
//! [`IGNORE_INDEX`]).

use std::path::Path;

use super::chat::{ChatMessage, ChatTemplate};
use super::training::IGNORE_INDEX;
use super::{Llm, LlmError};

/// Training examples of exactly `seq` tokens each, with transformers-style labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Examples {
    pub seq: usize,
    pub ids: Vec<Vec<u32>>,
    pub labels: Vec<Vec<i64>>,
}

impl Examples {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The `batch` examples of step `step` (0-based), cycling through the data in order: ids and
    /// labels `[batch, seq]` row-major.
    pub fn batch(&self, step: u64, batch: usize) -> (Vec<u32>, Vec<i64>) {
        let n = self.ids.len() as u64;
        let mut ids = Vec::with_capacity(batch * self.seq);
        let mut labels = Vec::with_capacity(batch * self.seq);
        for r in 0..batch as u64 {
            let i = ((step * batch as u64 + r) % n) as usize;
            ids.extend_from_slice(&self.ids[i]);
            labels.extend_from_slice(&self.labels[i]);
        }
        (ids, labels)
    }
}

fn invalid(path: &Path, message: String) -> LlmError {
    LlmError::Invalid(format!("{}: {message}", path.display()))
}

/// Reads `path`: `.jsonl` as chat examples, anything else as plain text.
pub fn load(llm: &Llm, path: &Path, seq: usize) -> Result<Examples, LlmError> {
    let text = std::fs::read_to_string(path).map_err(|e| invalid(path, e.to_string()))?;
    if text.trim().is_empty() {
        return Err(invalid(path, "the data file is empty".into()));
    }
    if path.extension().is_some_and(|e| e == "jsonl") {
        chat_examples(llm, path, &text, seq)
    } else {
        let ids = llm.encode(&text)?;
        packed(path, &ids, seq)
    }
}

/// A token stream cut into consecutive sequences of `seq` tokens (the tail that does not fill
/// one is dropped); every position is trained.
pub fn packed(path: &Path, ids: &[u32], seq: usize) -> Result<Examples, LlmError> {
    if seq < 2 {
        return Err(invalid(
            path,
            format!("sequences of {seq} tokens predict nothing"),
        ));
    }
    if ids.len() < seq {
        return Err(invalid(
            path,
            format!(
                "{} tokens, fewer than one training sequence of {seq}; use more text or a \
                 shorter --seq",
                ids.len()
            ),
        ));
    }
    let ids: Vec<Vec<u32>> = ids.chunks_exact(seq).map(<[u32]>::to_vec).collect();
    let labels = ids
        .iter()
        .map(|r| r.iter().map(|&i| i64::from(i)).collect())
        .collect();
    Ok(Examples { seq, ids, labels })
}

#[derive(serde::Deserialize)]
struct ChatLine {
    messages: Vec<ChatMessage>,
}

/// The chat token ids of `messages` and, per token, whether it belongs to an assistant answer:
/// the tokens of the conversation up to answer `k` rendered with the generation prompt are a
/// prefix of those with answer `k`, and the difference is the answer (its end-of-turn tokens
/// included).
fn chat_tokens(
    llm: &Llm,
    template: &ChatTemplate,
    messages: &[ChatMessage],
) -> Result<(Vec<u32>, Vec<bool>), String> {
    let render = |m: &[ChatMessage], prompt: bool| -> Result<Vec<u32>, String> {
        let text = template.render(m, prompt).map_err(|e| e.to_string())?;
        llm.encode_raw(&text).map_err(|e| e.to_string())
    };
    let ids = render(messages, false)?;
    let mut answer = vec![false; ids.len()];
    let mut any = false;
    for (k, m) in messages.iter().enumerate() {
        if m.role != "assistant" {
            continue;
        }
        let before = render(&messages[..k], true)?;
        let with = render(&messages[..=k], false)?;
        if !with.starts_with(&before) || !ids.starts_with(&with) {
            return Err(format!(
                "the chat template's rendering of message {} does not extend the conversation \
                 before it token for token, so its answer cannot be located",
                k + 1
            ));
        }
        answer[before.len()..with.len()].fill(true);
        any = true;
    }
    if !any {
        return Err("no assistant message to train on".into());
    }
    Ok((ids, answer))
}

/// One example per line, padded to `seq` with untrained positions.
fn chat_examples(llm: &Llm, path: &Path, text: &str, seq: usize) -> Result<Examples, LlmError> {
    let template = llm.chat()?;
    let pad = llm.special.eos.first().map_or(0, |(id, _)| *id);
    let mut out = Examples {
        seq,
        ids: Vec::new(),
        labels: Vec::new(),
    };
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |m: String| invalid(path, format!("line {}: {m}", n + 1));
        let parsed: ChatLine = serde_json::from_str(line).map_err(|e| {
            at(format!(
                "{e}; expected {{\"messages\": [{{\"role\": ..., \"content\": ...}}, ...]}}"
            ))
        })?;
        let (mut ids, answer) = chat_tokens(llm, &template, &parsed.messages).map_err(at)?;
        if ids.len() > seq {
            return Err(at(format!(
                "the conversation is {} tokens, longer than the training sequence of {seq}; \
                 raise --seq (up to the model's context) or shorten it",
                ids.len()
            )));
        }
        let mut labels: Vec<i64> = ids
            .iter()
            .zip(&answer)
            .map(|(&id, &a)| if a { i64::from(id) } else { IGNORE_INDEX })
            .collect();
        ids.resize(seq, pad);
        labels.resize(seq, IGNORE_INDEX);
        out.ids.push(ids);
        out.labels.push(labels);
    }
    if out.is_empty() {
        return Err(invalid(path, "no conversations in the file".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_cuts_whole_sequences() {
        let p = Path::new("data.txt");
        let ex = packed(p, &[1, 2, 3, 4, 5, 6, 7], 3).unwrap();
        assert_eq!(ex.ids, vec![vec![1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(ex.labels[1], vec![4, 5, 6]);
        let (ids, _) = ex.batch(1, 3);
        // step 1 of batch 3 takes examples 3, 4, 5 mod 2 = 1, 0, 1
        assert_eq!(ids, vec![4, 5, 6, 1, 2, 3, 4, 5, 6]);
        let err = packed(p, &[1, 2], 3).unwrap_err().to_string();
        assert!(
            err.contains("data.txt") && err.contains("2 tokens"),
            "{err}"
        );
    }
}
