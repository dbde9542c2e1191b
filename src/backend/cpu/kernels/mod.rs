//! ember's CPU compute kernels: quantized matmuls, the precise f32 matmul, and the element-wise operations of a
//! llama forward pass, with a portable scalar path and SIMD paths chosen at run time.
//!
//! - [`Kernels`] is one path's table; [`kernels`] gives the best this CPU runs (or the one `EMBER_CPU_KERNELS`
//!   forces), [`kernels_named`] a given one. Paths: `scalar` (the permanent reference), `avx2` (AVX2 + FMA +
//!   F16C, `vpmaddubsw`), `avx512` (AVX-512 F/BW/VL + VNNI, `vpdpbusd`, 512-bit), `amx` (`avx512` with
//!   the batch matmuls' integer dots on AMX-INT8 tiles, `tdpbssd`).
//! - Activations enter the quantized matmul as [`BlockQ8A`] blocks ([`quantize_row_q8a`]); weights as a
//!   [`WeightMatrix`] over the GGUF file's own blocks, without copying; results leave through [`OutRows`], which a
//!   thread pool splits by rows.
//! - Within a path, every output is bit-identical whatever the batch around it and however rows are split across
//!   threads (see `tiling`); kernels neither allocate nor lock.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod kv_quant;
pub mod numerics;
mod out_rows;
pub mod packed;
mod q8a;
mod read_probe;
mod scalar;
mod select;
mod table;
mod tiling;
mod weights;

pub use out_rows::OutRows;
pub use packed::PackedMatrix;
pub use q8a::{quantize_row_q8a, quantize_row_q8a_scalar, BlockQ8A};
pub use read_probe::read_probe;
pub use select::{
    kernel_selection, kernels, kernels_named, supported_kernels, KernelSelection, KERNELS_ENV_VAR, KERNEL_NAMES,
};
pub use table::{CacheRun, KernelOverrides, Kernels};
pub use weights::{WeightData, WeightMatrix, WeightShapeError};
