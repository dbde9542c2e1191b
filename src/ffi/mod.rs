//! ember's C ABI: the functions of `include/ember.h` (generated from this module by cbindgen; see
//! `docs/c_api.md`).
//!
//! This layer is mechanical and thin: argument checks, conversions, handle lookups and the panic boundary; the
//! behaviour is the engine's and the protocol's. Conventions, after rustls-ffi:
//! - every function returns an [`EmberStatus`] (or nothing, for the frees, or a static string), runs inside
//!   [`boundary::boundary`] so that no panic crosses into C, and leaves the detail of a failure in the
//!   thread's [`last_error`];
//! - outputs are written only on success;
//! - every pointer argument is checked for NULL, every string for UTF-8;
//! - handles are checked values, never dereferenced (`registry.rs`): a freed, stale, foreign or random handle
//!   is `EMBER_STATUS_INVALID_HANDLE`, a double free is harmless.
//!
//! Process-wide state, both documented where they live: the registry of handles and strings (`registry.rs`)
//! and the log callback for engines created next (`log.rs`). Everything else belongs to one engine.

#[cfg(test)]
mod api_tests;
mod args;
mod boundary;
pub mod embed;
pub mod embeddings;
pub mod engine;
pub mod event;
pub mod events;
#[cfg(test)]
mod events_tests;
pub mod json;
mod last_error;
pub mod log;
pub mod logprobs;
pub mod metrics;
pub mod metrics_text;
pub mod prompt_count;
mod registry;
pub mod request;
pub mod stats;
pub mod status;
pub mod tokenizer;
pub mod version;
mod versioned;

pub use embed::{engine_embed, engine_embed_vectors, engine_rerank, engine_rerank_scores};
pub use embeddings::{
    engine_embeddings_count, engine_embeddings_dimensions, engine_embeddings_floats, engine_embeddings_free,
    engine_embeddings_input_tokens, engine_embeddings_json, engine_get_embeddings_timing_metrics, EmberEmbeddings,
};
pub use engine::{engine_free, engine_new, engine_new_with_progress, EmberEngine, EmberLoadProgressCallback};
pub use event::{engine_poll, EmberEvent, EmberEventKind, EmberFinishReason};
#[cfg(unix)]
pub use events::engine_events_fd;
pub use events::{
    engine_events_wakeup, engine_submit_with_user_data, engine_wait_events, EmberEventRecord, EMBER_DELIVERY_CHUNKS,
    EMBER_DELIVERY_EVENTS,
};
pub use json::{engine_next_chunk_json, engine_request_warnings_json, engine_response_json, engine_string_free};
pub use last_error::engine_last_error_message;
pub use log::{engine_set_log_callback, EmberLogCallback, EmberLogLevel};
pub use logprobs::{engine_get_token_logprobs, EmberTokenLogprob};
pub use metrics::{
    engine_get_choice_timing_metrics, engine_get_extended_metrics, engine_get_timing_metrics,
    engine_get_token_timestamps, EmberExtendedTimingMetrics, EmberPerRequestTimingMetrics,
};
pub use metrics_text::engine_metrics_text;
pub use prompt_count::engine_count_prompt_tokens;
pub use request::{
    engine_cancel, engine_request_free, engine_submit, engine_submit_api, EmberRequest, EMBER_API_ANTHROPIC_MESSAGES,
    EMBER_API_CHAT_COMPLETIONS, EMBER_API_COMPLETIONS, EMBER_API_LLAMA_COMPLETION, EMBER_API_OLLAMA_CHAT,
    EMBER_API_OLLAMA_GENERATE, EMBER_API_OPENAI, EMBER_API_RESPONSES, EMBER_DELIVERY_POLL,
};
pub use stats::{engine_get_stats, EmberStats};
pub use status::{engine_status_message, EmberStatus};
pub use tokenizer::{
    engine_apply_chat_template, engine_detokenize, engine_model_info_json, engine_token_bytes, engine_tokenize,
};
pub use version::{engine_version, EMBER_VERSION_MAJOR, EMBER_VERSION_MINOR, EMBER_VERSION_PATCH};
