//! Small AVX2 helpers shared by the x86 kernels: loads from typed references (so callers need no pointer
//! arithmetic) and horizontal reductions with a fixed order.

use std::arch::x86_64::*;

use half::f16;

/// The 16 bytes of `bytes` (any alignment).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn load_16(bytes: &[u8; 16]) -> __m128i {
    // SAFETY: the reference covers 16 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
}

/// The 32 bytes of `bytes` (any alignment).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn load_32(bytes: &[i8; 32]) -> __m256i {
    // SAFETY: the reference covers 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// The 8 floats of `x` (any alignment).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn load_8f(x: &[f32; 8]) -> __m256 {
    // SAFETY: the reference covers 8 readable floats; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(x.as_ptr()) }
}

/// Stores 8 floats to `x` (any alignment).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn store_8f(x: &mut [f32; 8], v: __m256) {
    // SAFETY: the reference covers 8 writable floats; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_ps(x.as_mut_ptr(), v) }
}

/// 8 halves of `x` converted to f32 (exact: every f16 is an f32).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn load_8h(x: &[f16; 8]) -> __m256 {
    // SAFETY: the reference covers 16 readable bytes; `loadu` has no alignment requirement.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(x.as_ptr().cast()) })
}

/// Two f16 values as the low 32 bits of a vector, ready for `vcvtph2ps`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn f16_pair(lo: f16, hi: f16) -> __m128i {
    _mm_cvtsi32_si128((u32::from(lo.to_bits()) | (u32::from(hi.to_bits()) << 16)) as i32)
}

/// `Σ v` by `numerics::sum_lanes`' tree, `((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))`: every horizontal
/// sum of every path follows it, which is part of what makes paths agree and results batch-invariant.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn hsum(v: __m256) -> f32 {
    // Lane 2i holds v[2i] + v[2i+1] (and lane 2i+1 the same sum: addition is commutative bit for bit).
    let pairs = _mm256_add_ps(v, _mm256_permute_ps::<0b10_11_00_01>(v));
    // Lane 4k holds the sum of its group of four.
    let quads = _mm256_add_ps(pairs, _mm256_permute_ps::<0b01_00_11_10>(pairs));
    let halves = _mm_add_ss(_mm256_castps256_ps128(quads), _mm256_extractf128_ps::<1>(quads));
    _mm_cvtss_f32(halves)
}

/// The largest lane of `v`, by `numerics::max_of_lanes`' tree and operand order (which decide the result between
/// `+0` and `−0`, and when a lane is NaN).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn hmax(v: __m256) -> f32 {
    let x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    let x = _mm_max_ss(x, _mm_movehdup_ps(x));
    _mm_cvtss_f32(x)
}

/// The 8 floats of a chunk of at most 8, padded with `pad` (the last chunk of a row whose length is not a multiple
/// of 8, as `numerics::padded`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn load_padded(tail: &[f32], pad: f32) -> __m256 {
    load_8f(&crate::backend::cpu::kernels::numerics::padded(tail, pad))
}

/// Stores 32 bytes to `bytes` (any alignment).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn store_32(bytes: &mut [i8; 32], v: __m256i) {
    // SAFETY: the reference covers 32 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_si256(bytes.as_mut_ptr().cast(), v) }
}

/// `Σ v` over 8 i32 lanes (exact while it fits, which callers ensure).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn hsum_i32(v: __m256i) -> i32 {
    let x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
    let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b01>(x));
    _mm_cvtsi128_si32(x)
}
