//! Observation: what the engine records and reports about its work, none of which changes it. Each request's
//! timestamped events (`stats.rs`), the metrics defined on them (`metrics.rs`, the contract of
//! `docs/per_request_metrics.md`), their engine-wide aggregates for a host's monitoring (`telemetry.rs`), a
//! prompt's progress as events before its first token (`prompt_progress.rs`), and the engine's log lines
//! (`log.rs`).
//!
//! Owns: the clock every timestamp is read from, the stats' and metrics' definitions, the telemetry, and each
//! sequence's progress reporter.

pub mod log;
pub mod metrics;
pub mod prompt_progress;
pub mod stats;
pub mod telemetry;
