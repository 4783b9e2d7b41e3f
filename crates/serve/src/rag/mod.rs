//! Retrieval-augmented answers: documents are cut into overlapping chunks ([`chunk`]), embedded
//! and stored with their sources in one SQLite file with a sqlite-vec index ([`store`]),
//! re-indexed incrementally by file hash ([`index`]); a question retrieves the nearest chunks,
//! optionally reranks them with a cross-encoder, and the LLM answers citing them ([`ask`], and as
//! a chat model of the server, [`chat`]).

pub mod ask;
pub mod chat;
pub mod chunk;
pub mod index;
pub mod store;
