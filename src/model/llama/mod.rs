//! The decoder-only transformer ember runs (llama, and gemma3 as data over the same layers): hyperparameters from
//! GGUF metadata, the tensors a model must provide, the forward pass over backend operations, and synthetic models
//! of any llama shape.

pub mod architecture;
pub mod batch;
pub mod config;
pub mod experts;
pub mod families;
pub mod forward;
pub mod latent;
pub mod multipliers;
pub mod rope;
pub mod rope_scaling;
pub mod synthetic;
mod synthetic_families;

pub use architecture::{ArchSpec, Architecture, FfnActivation, QkNorm};
pub use batch::{BatchError, SeqChunk, NO_BLOCK};
pub use config::{LayerAttention, LlamaConfig, ModelConfigError};
pub use experts::MoeConfig;
pub use forward::{forward, LlamaBackend};
pub use synthetic::{GraniteScales, SyntheticExperts, SyntheticSpec, TypeMix};
