//! The host-facing API: what a host builds, submits and is refused. [`Engine`](handle::Engine) starts the engine
//! thread and owns it; `submit` validates a request (`request.rs`), compiles its constraint, admits it past the
//! bound on waiting requests (`waiting_limit.rs`), resolves its options once for all its choices
//! (`seq_options.rs`) and builds one sequence per choice for the engine thread. The configuration
//! (`config.rs`, `config_json.rs`) is read here too, and `generate.rs` runs one sequence without the engine thread
//! (tests, benchmarks, the command-line demo).
//!
//! Owns: the engine's configuration, the request options as submitted, and the request gauges (waiting,
//! running). What it sets of a sequence is set once, when it builds it.

pub mod config;
pub mod config_json;
pub mod generate;
pub(super) mod handle;
pub mod request;
pub mod seq_options;
pub mod waiting_limit;
