//! The AVX-512 path: 512-bit VNNI integer dot products (`vpdpbusd`) for the matmuls, on Intel since Ice Lake /
//! Cascade Lake and AMD since Zen 4, each register holding two outputs' 8-lane vectors side by side so that the
//! arithmetic is the AVX2 and scalar paths' (`numerics`). The element-wise kernels and activation quantization are
//! the AVX2 ones: at the model's widths (64 to 1536 floats) wider registers buy nothing measurable there.
//!
//! Every function here is compiled with `#[target_feature(enable =
//! "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]` and reached only through [`KERNELS`], which [`kernels`]
//! hands out after detecting all of those features.

mod f32_tiles;
mod q8_tiles;

use std::arch::x86_64::*;

use super::avx2;
use super::table::Kernels;

/// Whether this CPU runs the AVX-512 path (its own features plus the AVX2 path's, whose functions it borrows).
fn is_supported() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
        && avx2::is_supported()
}

static KERNELS: Kernels = Kernels {
    name: "avx512",
    quantize_row_q8a: avx2::quantize_row_q8a,
    matmul_q8: q8_tiles::matmul_q8,
    matmul_f32: f32_tiles::matmul_f32,
    rms_norm: avx2::rms_norm,
    silu_mul: avx2::silu_mul,
    add_assign: avx2::add_assign,
    softmax_inplace: avx2::softmax_inplace,
    rope: avx2::rope,
    attention_scores_f16: avx2::attention_scores_f16,
    attention_values_f16: avx2::attention_values_f16,
    argmax: avx2::argmax,
};

/// The AVX-512 kernels, when this CPU has the features.
pub(super) fn kernels() -> Option<&'static Kernels> {
    is_supported().then_some(&KERNELS)
}

/// 32 bytes from `lo` and 32 from `hi` as one register, `lo` in the low half.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn load_two_32(lo: &[i8; 32], hi: &[i8; 32]) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(avx2::lanes::load_32(lo)), avx2::lanes::load_32(hi))
}
