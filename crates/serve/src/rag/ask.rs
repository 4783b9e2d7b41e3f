//! Answering a question from the index: embed it, take the nearest chunks, rerank them with a
//! cross-encoder when one is given, and ask the LLM to answer from the numbered passages; the
//! answer is followed by the passages' sources.

use std::path::Path;
use std::sync::{Arc, Mutex};

use aneforge_models::encoders::{CrossEncoder, EncodeOptions, SentenceEncoder};
use aneforge_models::llm::ChatMessage;
use anyhow::{bail, Context};

use super::store::{Hit, Store};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskOptions {
    /// Passages given to the LLM (and cited).
    pub top_k: usize,
    /// Nearest chunks the reranker chooses the passages from (without a reranker, `top_k` are
    /// taken directly).
    pub candidates: usize,
}

impl Default for AskOptions {
    fn default() -> Self {
        AskOptions {
            top_k: 3,
            candidates: 20,
        }
    }
}

/// A passage given to the LLM: the chunk and its score (cosine similarity, or the reranker's
/// score when reranked).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Source {
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    pub score: f32,
}

impl Source {
    /// `path:start-end`.
    pub fn location(&self) -> String {
        format!("{}:{}-{}", self.path, self.start_line, self.end_line)
    }
}

const INSTRUCTION: &str = "Answer the question using only the numbered passages. Cite the \
    passages you use by their numbers in brackets, like [1]. If the passages do not contain the \
    answer, say so.";

/// An index with the models that search it; `id` is the model name the server answers to.
pub struct Rag {
    pub id: String,
    store: Mutex<Store>,
    encoder: Arc<SentenceEncoder>,
    reranker: Option<Arc<CrossEncoder>>,
    pub options: AskOptions,
}

impl Rag {
    /// Opens the index at `db`, which must have been built with `encoder_id`'s embeddings.
    pub fn open(
        id: &str,
        db: &Path,
        encoder_id: &str,
        encoder: Arc<SentenceEncoder>,
        reranker: Option<Arc<CrossEncoder>>,
        options: AskOptions,
    ) -> anyhow::Result<Rag> {
        if options.top_k == 0 {
            bail!("top-k must be at least 1");
        }
        let store = Store::open_existing(db)?;
        let (model, dim) = store.model();
        if model != encoder_id || dim != encoder.dimension() {
            bail!(
                "{} was indexed with {model} ({dim} dimensions): answer with --embed-model {model}",
                db.display()
            );
        }
        Ok(Rag {
            id: id.to_string(),
            store: Mutex::new(store),
            encoder,
            reranker,
            options,
        })
    }

    /// The passages for `question`, best first.
    pub fn retrieve(&self, question: &str) -> anyhow::Result<Vec<Source>> {
        if question.trim().is_empty() {
            bail!("the question is empty");
        }
        let q = self
            .encoder
            .encode_with(&[question], &EncodeOptions::default(), &mut |_| {})
            .context("embedding the question")?;
        let query = q.row(0).context("the encoder returned no embedding")?;
        let wanted = if self.reranker.is_some() {
            self.options.candidates.max(self.options.top_k)
        } else {
            self.options.top_k
        };
        let hits: Vec<Hit> = {
            let store = self
                .store
                .lock()
                .map_err(|_| anyhow::anyhow!("the index is unusable after a failed query"))?;
            store.search(query, wanted)?
        };
        let sources = |hits: Vec<(Hit, f32)>| -> Vec<Source> {
            hits.into_iter()
                .map(|(h, score)| Source {
                    path: h.path,
                    start_line: h.start_line,
                    end_line: h.end_line,
                    text: h.text,
                    score,
                })
                .collect()
        };
        let Some(reranker) = &self.reranker else {
            return Ok(sources(
                hits.into_iter()
                    .map(|h| {
                        let s = 1.0 - h.distance;
                        (h, s)
                    })
                    .collect(),
            ));
        };
        let texts: Vec<&str> = hits.iter().map(|h| h.text.as_str()).collect();
        let ranked = reranker
            .rank(
                question,
                &texts,
                Some(self.options.top_k),
                false,
                &mut |_| {},
            )
            .context("reranking the passages")?;
        Ok(sources(
            ranked
                .iter()
                .map(|r| (hits[r.corpus_id].clone(), r.score))
                .collect(),
        ))
    }

    /// The chat the LLM answers: an instruction (as a system message), the numbered passages
    /// and the question. `history` holds earlier turns of a conversation.
    pub fn messages(
        question: &str,
        sources: &[Source],
        history: &[ChatMessage],
    ) -> Vec<ChatMessage> {
        let mut user = String::from("Passages:\n");
        for (i, s) in sources.iter().enumerate() {
            user.push_str(&format!("\n[{}] ({})\n{}\n", i + 1, s.location(), s.text));
        }
        user.push_str(&format!("\nQuestion: {question}"));
        let mut out = vec![ChatMessage::new("system", INSTRUCTION)];
        out.extend(history.iter().cloned());
        out.push(ChatMessage::new("user", &user));
        out
    }

    /// The sources block appended to an answer.
    pub fn citations(sources: &[Source]) -> String {
        let mut out = String::from("\n\nSources:");
        for (i, s) in sources.iter().enumerate() {
            out.push_str(&format!("\n[{}] {}", i + 1, s.location()));
        }
        out
    }
}
