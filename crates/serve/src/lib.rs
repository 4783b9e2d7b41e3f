//! An OpenAI-compatible HTTP server over aneforge's models (chat and text completions with
//! streaming, embeddings, Cohere/Jina-style reranking, health and Prometheus metrics), and
//! retrieval-augmented answers over a document index stored in SQLite with sqlite-vec.

pub mod energy;
pub mod error;
pub mod generation;
pub mod metrics;
pub mod rag;
pub mod routes;
pub mod scheduler;
pub mod schema;
pub mod server;
pub mod state;

pub use error::ApiError;
pub use metrics::Metrics;
pub use scheduler::Scheduler;
pub use server::{serve, shutdown_signal};
pub use state::{AppState, ChatModel, EmbedModel, Limits, RerankModel};
