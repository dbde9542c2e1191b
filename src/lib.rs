//! ember: an LLM inference engine with exact per-request timing, embedded through a C ABI.
//!
//! Layers, each depending only on those below it (see `docs/architecture.md`):
//! `ffi` → `protocol` → `engine` → `backend` → `model` → `hub`.

pub mod backend;
mod cpu_clock;
pub mod engine;
pub mod ffi;
pub mod hub;
pub mod model;
pub mod protocol;
