//! The llama architecture: hyperparameters from GGUF metadata and the tensors a model must provide.

pub mod config;

pub use config::{LlamaConfig, ModelConfigError};
