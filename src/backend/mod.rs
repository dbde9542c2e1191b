//! Backends run the llama forward pass: `cpu` everywhere, `cuda` on NVIDIA GPUs.

pub mod cpu;
pub mod cuda;
