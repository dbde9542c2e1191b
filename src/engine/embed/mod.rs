//! Embeddings: an encoder model (`model::encoder`) served to many host threads, their inputs packed into shared
//! forward passes (`embedder.rs`), with what a request asks for and gets back (`request.rs`), and its timing
//! metrics under chat's names (`metrics.rs`).
//!
//! An encoder has no KV cache and generates nothing, so it has a thread of its own rather than a place in the
//! generation step: every input is encoded whole, once. Decoder embedders (Qwen3-Embedding), whose inputs would
//! share steps with generation, are not served yet.

mod embedder;
mod metrics;
mod request;

pub use embedder::{Embedder, EmbedderConfig};
pub use metrics::embed_timing_metrics;
pub use request::{EmbedError, EmbedOutput, EmbedRequest, EmbedTiming};
