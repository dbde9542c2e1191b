//! Embeddings and reranking: an embedding model served to many host threads, their inputs packed into shared
//! forward passes (`embedder.rs`), with what a request asks for and gets back (`request.rs`). The model is an
//! encoder (`model::encoder`), or a decoder whose file declares a pooling (Qwen3-Embedding, Qwen3-Reranker;
//! `model.rs`).
//!
//! An embedding model generates nothing and keeps no KV cache beyond the step, so it has a thread of its own
//! rather than a place in the generation step: every input is encoded whole, once. An engine serves either
//! generation or embeddings (a decoder embedding model's file declares pooling; the engine option `pooling` turns a
//! chat model's file into an embedder), so the two never compete for one model's steps.

mod embedder;
mod metrics;
mod model;
mod request;

pub use embedder::{Embedder, EmbedderConfig};
pub use metrics::embed_timing_metrics;
pub use model::{EmbedShape, Loaded};
pub use request::{EmbedError, EmbedOutput, EmbedRequest, EmbedTiming};
