//! The llama architecture: hyperparameters from GGUF metadata, the tensors a model must provide, the forward pass
//! over backend operations, and synthetic models of any llama shape.

pub mod batch;
pub mod config;
pub mod forward;
pub mod rope;
pub mod synthetic;

pub use batch::{BatchError, SeqChunk};
pub use config::{LlamaConfig, ModelConfigError};
pub use forward::{forward, LlamaBackend};
pub use synthetic::SyntheticSpec;
