//! The AVX-512 path: 512-bit VNNI integer dot products (`vpdpbusd`) for the matmuls, on Intel since Ice Lake /
//! Cascade Lake and AMD since Zen 4, each register holding two outputs' 8-lane vectors side by side so that the
//! arithmetic is the AVX2 and scalar paths' (`numerics`). The element-wise kernels and activation quantization are
//! the AVX2 ones (at the model's widths, 64 to 1536 floats, wider registers bought nothing measurable there), except
//! the softmax, whose exponentials over attention rows of up to 1024 scores run on 16 lanes (`softmax`).
//!
//! Every function here is compiled with `#[target_feature(enable =
//! "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]` and reached only through [`KERNELS`], which [`kernels`]
//! hands out after detecting all of those features.

mod amx;
mod attention_f16;
mod f32_tiles;
mod packed;
mod softmax;

use std::arch::x86_64::*;

use half::f16;

use super::avx2;
use super::avx2::lanes::f16_pair;
use super::table::Kernels;
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ8_0};

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
    matmul_q8: packed::matmul_q8_float,
    matmul_packed: packed::matmul_packed,
    matmul_f32: f32_tiles::matmul_f32,
    rms_norm: avx2::rms_norm,
    silu_mul: avx2::silu_mul,
    gelu_mul: avx2::gelu_mul,
    add_assign: avx2::add_assign,
    softmax_inplace: softmax::softmax_inplace,
    rope: avx2::rope,
    attention_scores_f16: attention_f16::attention_scores_f16,
    attention_values_f16: attention_f16::attention_values_f16,
    attention_values_f16_runs: Some(attention_f16::attention_values_f16_runs),
    attention_scores_q8_0: attention_f16::attention_scores_q::<BlockQ8_0>,
    attention_scores_q4_0: attention_f16::attention_scores_q::<BlockQ4_0>,
    attention_values_q8_0: attention_f16::attention_values_q::<BlockQ8_0>,
    attention_values_q4_0: attention_f16::attention_values_q::<BlockQ4_0>,
    argmax: avx2::argmax,
};

/// The `amx` path: the AVX-512 path with the batch matmuls' integer dots on AMX tiles (`amx`).
static KERNELS_AMX: Kernels = Kernels { name: "amx", matmul_packed: packed::matmul_packed_amx, ..KERNELS };

/// The AVX-512 kernels, when this CPU has the features.
pub(super) fn kernels() -> Option<&'static Kernels> {
    is_supported().then_some(&KERNELS)
}

/// The `amx` kernels, when this CPU has AVX-512's features and AMX-INT8 and the system grants the tiles.
pub(super) fn amx_kernels() -> Option<&'static Kernels> {
    (is_supported() && amx::is_supported()).then_some(&KERNELS_AMX)
}

/// Row pairs of a tile of up to 4 rows.
pub(super) const MAX_PAIRS: usize = 2;

/// Lanes 0..8 from lane `LO` of `x`, lanes 8..16 from lane `HI`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn spread<const LO: i32, const HI: i32>(x: __m128) -> __m512 {
    let index = _mm512_set_epi32(HI, HI, HI, HI, HI, HI, HI, HI, LO, LO, LO, LO, LO, LO, LO, LO);
    _mm512_permutexvar_ps(index, _mm512_castps128_ps512(x))
}

/// The scales of two blocks, `[d0, d1, 0, 0]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn two_scales(d0: f16, d1: f16) -> __m128 {
    _mm_cvtph_ps(f16_pair(d0, d1))
}

/// The sums of the two 8-lane halves of `v`, each by `numerics::sum_lanes`' tree.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn sum_halves(v: __m512) -> (f32, f32) {
    // Lane 2i: v[2i] + v[2i+1]; lane 4k: its group of four; lanes 0 and 8: their half (the 128-bit lanes of each
    // half swapped and added). Addition is commutative bit for bit, so the mirrored lanes hold the same sums.
    let pairs = _mm512_add_ps(v, _mm512_permute_ps::<0b10_11_00_01>(v));
    let quads = _mm512_add_ps(pairs, _mm512_permute_ps::<0b01_00_11_10>(pairs));
    let halves = _mm512_add_ps(quads, _mm512_shuffle_f32x4::<0b10_11_00_01>(quads, quads));
    (_mm512_cvtss_f32(halves), _mm_cvtss_f32(_mm512_extractf32x4_ps::<2>(halves)))
}

/// Writes the `R × C` results of a tile's accumulators `acc[c][p]` (row pair `p`, rows `2p` and `2p + 1`, of column
/// `c`): `out[c * R + r]`, each by [`sum_halves`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn store_pair_results<const R: usize, const C: usize>(acc: &[[__m512; MAX_PAIRS]; C], out: &mut [f32]) {
    for c in 0..C {
        for p in 0..R.div_ceil(2) {
            let (first, second) = sum_halves(acc[c][p]);
            out[c * R + 2 * p] = first;
            if 2 * p + 1 < R {
                out[c * R + 2 * p + 1] = second;
            }
        }
    }
}
