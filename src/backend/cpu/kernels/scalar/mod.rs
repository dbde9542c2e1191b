//! The portable scalar path: the permanent reference every SIMD path is tested against, and the fallback on CPUs
//! without them. Written for clarity; each kernel is the plain loop its documentation describes.

mod elementwise;
mod matmul;

pub(super) use matmul::matmul_q8;

use super::q8a::quantize_row_q8a_scalar;
use super::table::Kernels;

pub(super) static KERNELS: Kernels = Kernels {
    name: "scalar",
    quantize_row_q8a: quantize_row_q8a_scalar,
    matmul_q8: matmul::matmul_q8,
    matmul_f32: matmul::matmul_f32,
    rms_norm: elementwise::rms_norm,
    silu_mul: elementwise::silu_mul,
    add_assign: elementwise::add_assign,
    softmax_inplace: elementwise::softmax_inplace,
    rope: elementwise::rope,
    attention_scores_f16: elementwise::attention_scores_f16,
    attention_values_f16: elementwise::attention_values_f16,
    argmax: elementwise::argmax,
};
