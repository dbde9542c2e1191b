//! Backends run the llama forward pass: `cpu` everywhere, `cuda` on NVIDIA GPUs.

pub mod cpu;
pub mod cuda;
pub mod kv_cache_type;

pub use kv_cache_type::{KvCacheType, KvCacheTypes};
