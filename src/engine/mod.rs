//! The engine: a background thread that serves many requests at once (continuous batching over a paged KV
//! cache), samples, detokenizes, matches stops and records each request's timing.

pub mod config;
pub mod config_json;
mod core;
pub mod cpu_threads;
pub mod finish;
pub mod generate;
pub mod guided;
#[cfg(test)]
mod guided_step_tests;
mod handle;
pub mod kv_blocks;
pub mod kv_pools;
pub mod kv_prefix;
#[cfg(test)]
mod kv_prefix_tests;
pub mod kv_window;
pub mod log;
pub mod metrics;
pub mod output;
#[cfg(test)]
mod output_tests;
pub mod prompt_logprobs;
pub mod prompt_progress;
pub mod ready_queue;
pub mod request;
pub mod runner;
pub mod sampling;
pub mod scheduler;
pub mod seq_options;
pub mod sequence;
pub mod speculative;
#[cfg(test)]
mod speculative_step_tests;
pub mod stats;
pub mod step;
pub mod step_budget;
#[cfg(test)]
mod step_budget_tests;
pub mod step_cost;
pub mod step_runner;
pub mod stop;
pub mod telemetry;
pub mod text_output;
pub mod waiting_limit;
#[cfg(test)]
mod window_pool_tests;

pub use config::{BackendKind, ConfigError, EngineConfig};
pub use finish::FinishReason;
pub use handle::{Engine, EngineError, PrefixCacheCounters, SpeculationCounters};
pub use log::{LogLevel, Logger};
pub use output::{ChoiceOutput, EventPoll, RequestEvent, RequestHandle};
pub use prompt_progress::PromptProgress;
pub use ready_queue::{Ready, ReadyQueue};
pub use request::{RequestOptions, SubmitError, SubmitRequest};
