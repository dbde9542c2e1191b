//! The CPU backend: SIMD quantized kernels chosen at run time, a persistent thread pool, the paged KV cache.

mod attention;
mod attention_spans;
mod backend;
mod decoder_embed;
mod encoder;
mod experts;
pub mod kernels;
pub mod kv_cache;
mod latent;
mod model_weights;
mod moe;
mod parallel;
pub mod pool;
mod step;

pub use backend::{default_threads, CpuBackend, CpuBackendError, CpuBackendOptions, Precision};
pub use decoder_embed::CpuDecoderEmbedder;
pub use encoder::{CpuEncoder, EncodeError};
