//! The APIs ember serves: request bodies in, response bodies and streaming chunks out, with `usage` and the
//! per-request `metrics`. Pure translation over the engine: JSON in and out, no I/O, no HTTP. See
//! `docs/protocol.md` (fields, shapes, errors) and `docs/per_request_metrics.md`.
//!
//! Each API is one folder: `chat/` (OpenAI's Chat Completions and Completions, the shape the others pass
//! through), `responses/`, `anthropic/`, `ollama/`, `llama_server/`. Under them, one request core: `request.rs`
//! (what a request becomes once read, the engine's options among it), `api_request.rs` (submitting it and handing
//! out its answers), `translate.rs` (another API's body to chat's, chat's answers to that API's), and the
//! features every API reaches through it (`prompt.rs`, `tools/`, `guided.rs`, `reasoning.rs`, ...).

mod anthropic;
mod api;
mod api_request;
mod chat;
mod chat_delta;
pub mod embeddings;
pub mod encoder_answer;
mod encoder_body;
mod error;
mod fields;
mod guided;
mod harmony;
mod json;
mod llama_server;
mod metrics_gate;
pub mod model_info;
mod ollama;
mod prediction;
pub mod prometheus;
mod prompt;
mod prompt_progress;
mod prompt_tokens;
mod reasoning;
mod request;
pub mod rerank;
pub mod responses;
mod template_options;
mod template_roles;
#[cfg(test)]
mod test_support;
pub mod tokenize;
mod tools;
mod translate;

pub use api::{Api, StreamFraming};
pub use api_request::ApiRequest;
pub use chat::{ChunkPoll, COMPLETION_DEFAULT_MAX_TOKENS, OPENAI_DEFAULT_TEMPERATURE};
pub use error::{ApiError, CONTEXT_LENGTH_EXCEEDED, DEADLINE, INVALID_REQUEST_ERROR, OVERLOADED, SERVER_ERROR};
pub use prompt_progress::prompt_progress_json;
pub use prompt_tokens::count_prompt_tokens;
pub use request::ApiKind;
