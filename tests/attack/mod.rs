//! The attack suite's cases and its host (`tests/attack_suite.rs` runs them).

pub mod api_cases;
pub mod cases;
pub mod encoder_cases;
pub mod gguf_cases;
pub mod grammar_cases;
pub mod host;
pub mod request_cases;
pub mod template_cases;
