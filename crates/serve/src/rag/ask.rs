//! Answering a question from the index: the chunks whose units are nearest to the question's
//! embedding and the chunks whose units best match its words (BM25) are fused by reciprocal rank
//! (Cormack, Clarke and Buettcher, SIGIR 2009, with their constant 60), or the word search's
//! ranking is taken alone;
//! the candidates are reranked when a reranker is given (a cross-encoder, or a second embedding
//! model scoring by cosine), and the LLM answers from the best few as numbered passages; the
//! answer is followed by the passages' sources.

use std::path::Path;
use std::sync::{Arc, Mutex};

use aneforge_models::encoders::{cosine, CrossEncoder, EncodeOptions, SentenceEncoder};
use aneforge_models::llm::ChatMessage;
use anyhow::{bail, Context};

use super::store::{Hit, Store};

/// Which ranking the candidates come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CandidatePool {
    /// The embedding and word searches fused by reciprocal rank.
    Fused,
    /// The word search (BM25) alone; the question is not embedded by the index's model. The
    /// default: on the Shakespeare questions of docs/serve.md it cites more passages than the
    /// fusion with MiniLM-L6's ranking.
    #[default]
    Bm25,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskOptions {
    /// Passages given to the LLM (and cited).
    pub top_k: usize,
    /// Chunks taken from each search before fusing, and the candidates the reranker chooses from.
    pub candidates: usize,
    pub pool: CandidatePool,
}

impl Default for AskOptions {
    fn default() -> Self {
        AskOptions {
            top_k: 3,
            candidates: 20,
            pool: CandidatePool::Bm25,
        }
    }
}

/// A passage given to the LLM: the chunk and its score (the fused reciprocal-rank score, or the
/// reranker's score when reranked).
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

/// Reciprocal-rank fusion of rankings (each best first): a chunk scores the sum of
/// `1 / (60 + rank)` over the rankings it appears in (rank from 1); best first, ties by id.
pub fn fuse(rankings: &[Vec<Hit>]) -> Vec<(Hit, f32)> {
    let mut by_id: std::collections::BTreeMap<i64, (Hit, f32)> = Default::default();
    for ranking in rankings {
        for (i, hit) in ranking.iter().enumerate() {
            let add = 1.0 / (60.0 + (i + 1) as f32);
            by_id.entry(hit.id).or_insert_with(|| (hit.clone(), 0.0)).1 += add;
        }
    }
    let mut out: Vec<(Hit, f32)> = by_id.into_values().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.id.cmp(&b.0.id)));
    out
}

/// What reorders the fused candidates before the best `top_k` are kept.
#[derive(Clone)]
pub enum Reranker {
    /// A cross-encoder scores each (question, passage) pair.
    Cross(Arc<CrossEncoder>),
    /// An embedding model, usually larger than the index's, scores each passage by the cosine of
    /// its embedding to the question's (sentence-transformers' retrieve-and-rescore with a
    /// bi-encoder).
    Embedding(Arc<SentenceEncoder>),
}

impl Reranker {
    /// The best `top_k` of `texts` for `question` as `(index into texts, score)`, best first;
    /// equal scores keep the order of `texts`.
    pub fn rank(
        &self,
        question: &str,
        texts: &[&str],
        top_k: usize,
    ) -> anyhow::Result<Vec<(usize, f32)>> {
        match self {
            Reranker::Cross(model) => Ok(model
                .rank(question, texts, Some(top_k), false, &mut |_| {})
                .context("reranking the passages")?
                .iter()
                .map(|r| (r.corpus_id, r.score))
                .collect()),
            Reranker::Embedding(model) => {
                let mut all = Vec::with_capacity(texts.len() + 1);
                all.push(question);
                all.extend_from_slice(texts);
                let emb = model
                    .encode_with(&all, &EncodeOptions::default(), &mut |_| {})
                    .context("embedding the question and passages for rescoring")?;
                let q = emb
                    .row(0)
                    .context("the rescoring model returned no embedding")?;
                let mut scored = (0..texts.len())
                    .map(|i| {
                        let row = emb
                            .row(i + 1)
                            .context("the rescoring model returned too few embeddings")?;
                        Ok((i, cosine(q, row) as f32))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                scored.sort_by(|a, b| b.1.total_cmp(&a.1));
                scored.truncate(top_k);
                Ok(scored)
            }
        }
    }
}

/// An index with the models that search it; `id` is the model name the server answers to.
pub struct Rag {
    pub id: String,
    store: Mutex<Store>,
    encoder: Arc<SentenceEncoder>,
    reranker: Option<Reranker>,
    pub options: AskOptions,
}

impl Rag {
    /// Opens the index at `db`, which must have been built with `encoder_id`'s embeddings.
    pub fn open(
        id: &str,
        db: &Path,
        encoder_id: &str,
        encoder: Arc<SentenceEncoder>,
        reranker: Option<Reranker>,
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
        let wanted = self.options.candidates.max(self.options.top_k);
        let query = match self.options.pool {
            CandidatePool::Fused => Some(
                self.encoder
                    .encode_with(&[question], &EncodeOptions::default(), &mut |_| {})
                    .context("embedding the question")?,
            ),
            CandidatePool::Bm25 => None,
        };
        let mut hits = {
            let store = self
                .store
                .lock()
                .map_err(|_| anyhow::anyhow!("the index is unusable after a failed query"))?;
            let matching = store.search_words(question, wanted)?;
            match &query {
                Some(q) => {
                    let q = q.row(0).context("the encoder returned no embedding")?;
                    fuse(&[store.search(q, wanted)?, matching])
                }
                // Best first with BM25 as the score (higher is better, as for the fused one).
                None if matching.is_empty() => {
                    bail!("no chunk of the index has a word of the question (the candidates come from the word search alone)")
                }
                None => matching
                    .into_iter()
                    .map(|h| {
                        let score = -h.distance;
                        (h, score)
                    })
                    .collect(),
            }
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
            hits.truncate(self.options.top_k);
            return Ok(sources(hits));
        };
        hits.truncate(wanted);
        let texts: Vec<&str> = hits.iter().map(|(h, _)| h.text.as_str()).collect();
        let ranked = reranker.rank(question, &texts, self.options.top_k)?;
        Ok(sources(
            ranked
                .iter()
                .map(|&(i, score)| (hits[i].0.clone(), score))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(id: i64) -> Hit {
        Hit {
            id,
            path: format!("f{id}"),
            seq: 0,
            start_line: 1,
            end_line: 1,
            text: String::new(),
            distance: 0.0,
        }
    }

    #[test]
    fn fusion_favours_chunks_both_searches_rank_high() {
        let fused = fuse(&[vec![hit(1), hit(2), hit(3)], vec![hit(3), hit(4), hit(1)]]);
        let ids: Vec<i64> = fused.iter().map(|(h, _)| h.id).collect();
        // 1: 1/61 + 1/63, 3: 1/63 + 1/61 (tie, lower id first), then 2 and 4 at 1/62
        assert_eq!(ids, [1, 3, 2, 4]);
        assert_eq!(fused[0].1, 1.0 / 61.0 + 1.0 / 63.0);
    }
}
