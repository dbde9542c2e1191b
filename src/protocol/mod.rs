//! The OpenAI-compatible protocol: Chat Completions and Completions request bodies in, response bodies and
//! streaming chunks out, with `usage` and the per-request `metrics`. Pure translation over the engine: JSON in
//! and out, no I/O, no HTTP. See `docs/protocol.md` (fields, shapes, errors) and `docs/per_request_metrics.md`.

mod anthropic;
mod api;
mod api_request;
pub mod embeddings;
pub mod encoder_answer;
mod encoder_body;
mod error;
mod fields;
mod guided;
mod harmony;
mod json;
mod llama_server;
mod logprobs;
mod metrics_gate;
pub mod model_info;
mod ollama;
mod prediction;
pub mod prometheus;
mod prompt;
mod prompt_logprobs;
mod prompt_progress;
mod prompt_tokens;
mod reasoning;
mod request;
mod request_fields;
pub mod rerank;
mod response;
pub mod responses;
mod stream;
mod template_options;
mod template_roles;
#[cfg(test)]
mod test_support;
pub mod tokenize;
mod tools;
mod translate;

pub use api::{Api, StreamFraming};
pub use api_request::ApiRequest;
pub use error::{ApiError, CONTEXT_LENGTH_EXCEEDED, DEADLINE, INVALID_REQUEST_ERROR, OVERLOADED, SERVER_ERROR};
pub use prompt_progress::prompt_progress_json;
pub use prompt_tokens::count_prompt_tokens;
pub use request::{ApiKind, COMPLETION_DEFAULT_MAX_TOKENS, OPENAI_DEFAULT_TEMPERATURE};
pub use stream::ChunkPoll;
