//! The CUDA backend: the llama forward pass on an NVIDIA GPU through cudarc, compiled into every build.
//!
//! The CUDA libraries are loaded at run time (cudarc's dynamic loading), so ember builds and runs where no CUDA
//! exists: [`CudaBackend::new`] then fails with an error for which
//! [`is_unavailable`](CudaBackendError::is_unavailable) is true, and an engine asked for `"auto"` runs on the CPU.
//!
//! - `device.rs`: probing for the driver and a device, the panic boundary around cudarc;
//! - `module.rs`: the CUDA C kernels (`kernels/*.cu`), compiled by NVRTC once per process and architecture;
//! - `launch.rs`, `calls.rs`, `calls_moe.rs`, `calls_latent.rs`, `args.rs`, `device_array.rs`: one checked, typed
//!   Rust function per kernel;
//! - `packing.rs`, `weights.rs`, `experts.rs`, `latent.rs`: the weights, uploaded once and kept quantized (a
//!   mixture-of-experts block's experts and a latent-attention layer's per-head matrices as the file stacks them);
//! - `kv_cache.rs`, `buffers.rs`, `step_meta.rs`: device memory, allocated once;
//! - `ops.rs`, `execute.rs`, `execute_moe.rs`, `execute_latent.rs`, `graph.rs`: a step recorded, fused into few
//!   launches, replayed from a CUDA graph;
//! - `backend.rs`: [`CudaBackend`], the `LlamaBackend` these make up.

mod args;
mod backend;
mod buffers;
mod calls;
mod calls_latent;
mod calls_moe;
mod device;
mod device_array;
mod error;
mod execute;
mod execute_latent;
mod execute_moe;
mod experts;
mod graph;
mod kv_cache;
mod latent;
mod launch;
pub mod module;
mod ops;
pub mod packing;
mod step_meta;
mod weights;

pub use backend::{CudaBackend, CudaBackendOptions};
pub use calls::TOP_K_MAX;
pub use device::{driver_library_present, nvrtc_library_present, probe, DeviceInfo};
pub use error::CudaBackendError;
pub use launch::kernel_names;
pub use module::{
    compile, kernels_ptx, kernels_ptx_for, program_source, program_source_for, KernelTypes, KERNEL_FILES,
};
