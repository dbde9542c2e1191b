//! The engine: a background thread that serves many requests at once (continuous batching over a paged KV
//! cache), samples, detokenizes, matches stops and records each request's timing.
//!
//! Its modules follow a request through the engine, one folder per stage:
//! - `api/`: the host-facing side: [`Engine`], what a host submits and how it is refused, the configuration,
//!   backpressure; and `generate`, one sequence without the engine thread;
//! - `step/`: the engine thread and its step: the scheduler, the step runner over a backend, the step budget
//!   and the step costs;
//! - `kv/`: the KV cache's block bookkeeping: the block pools, the prefix cache, the sliding-window layers' pool,
//!   and each sequence's blocks in them;
//! - `output/`: a request's output side: the detokenizer and stop strings of each sequence, the event queue the
//!   host polls, the engine-wide waiting point, why a choice ended;
//! - `observe/`: what is recorded and reported: per-request stats and metrics, engine-wide telemetry, prompt
//!   progress, the log;
//! - `embed/`: embeddings of an encoder model, on a thread of their own (no KV cache, nothing generated);
//! - `sampling/`, `speculative/`, `guided/`: the sampler and log probabilities, n-gram speculative decoding and
//!   structured outputs, which the stages above use.
//!
//! `sequence.rs` is what they share: one choice of a request, with one part per stage that changes it, each
//! part's fields private to its stage.

pub mod api;
pub mod embed;
pub mod guided;
pub mod kv;
pub mod observe;
pub mod output;
pub mod sampling;
mod sequence;
pub mod speculative;
pub mod step;

// The paths these modules had before the engine was grouped by stage, which the crate's users (the protocol and
// ffi layers, the binaries, tests and benches) name.
pub use api::{config, config_json, generate, request};
pub use kv::kv_window;
pub use observe::{metrics, stats, telemetry};
pub use sampling::prompt_logprobs;
pub use step::step_budget;

pub use api::config::{BackendKind, ConfigError, EngineConfig};
pub use api::handle::{Engine, EngineError, PrefixCacheCounters, SpeculationCounters};
pub use api::request::{RequestOptions, SubmitError, SubmitRequest};
pub use observe::log::{LogLevel, Logger};
pub use observe::prompt_progress::PromptProgress;
pub use output::finish::FinishReason;
pub use output::ready_queue::{Ready, ReadyQueue};
pub use output::{ChoiceOutput, EventPoll, OutputMark, RequestEvent, RequestHandle};
