//! The AVX2 path (with FMA and F16C): 256-bit integer dot products with `vpmaddubsw`, for x86-64 CPUs since
//! Haswell (2013) and Zen. Its element-wise kernels and activation quantization also serve the AVX-512 path.
//!
//! Every function here is compiled with `#[target_feature(enable = "avx2,fma,f16c")]` and reached only through
//! this path's table and the AVX-512 one, which are handed out after detecting those features (and more).

pub(super) mod attention_f16;
pub(super) mod attention_quant;
mod elementwise;
mod exp;
mod f32_tiles;
pub(super) mod lanes;
mod packed;
mod quantize;

use super::table::Kernels;
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ8_0};

pub(super) use attention_f16::{attention_scores_f16, attention_values_f16};
pub(super) use elementwise::{add_assign, argmax, gelu_mul, rms_norm, rope, silu_mul, softmax_inplace, softmax_max};
pub(super) use quantize::quantize_row_q8a;

/// Whether this CPU runs the AVX2 path (and thus the functions re-exported above).
pub(super) fn is_supported() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

static KERNELS: Kernels = Kernels {
    name: "avx2",
    quantize_row_q8a,
    matmul_q8: packed::matmul_q8_float,
    matmul_packed: packed::matmul_packed,
    matmul_f32: f32_tiles::matmul_f32,
    rms_norm,
    silu_mul,
    gelu_mul,
    add_assign,
    softmax_inplace,
    rope,
    attention_scores_f16,
    attention_values_f16,
    attention_values_f16_runs: None,
    attention_scores_q8_0: attention_quant::attention_scores_q::<BlockQ8_0>,
    attention_scores_q4_0: attention_quant::attention_scores_q::<BlockQ4_0>,
    attention_values_q8_0: attention_quant::attention_values_q::<BlockQ8_0>,
    attention_values_q4_0: attention_quant::attention_values_q::<BlockQ4_0>,
    argmax,
};

/// The AVX2 kernels, when this CPU has the features.
pub(super) fn kernels() -> Option<&'static Kernels> {
    is_supported().then_some(&KERNELS)
}
