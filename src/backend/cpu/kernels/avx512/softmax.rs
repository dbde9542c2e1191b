//! The AVX-512 path's softmax: the exponentials on 16 lanes (`exp`, `numerics::exp` instruction for instruction, as
//! the AVX2 path's is on 8), which on a core with 512-bit pipes (Zen 5, the Xeons) halves their instructions; an
//! attention row is up to a span of 1024 scores, and a long prompt spent 9 % of its samples here. The maximum and the
//! sum stay the AVX2 path's 8-lane reductions in chunk order (each 16-lane result is added as its low, then its high
//! half), so every output is the scalar path's bits.

use std::arch::x86_64::*;

use crate::backend::cpu::kernels::avx2::lanes::{hsum, load_8f, store_8f};
use crate::backend::cpu::kernels::avx2::softmax_max;
use crate::backend::cpu::kernels::numerics::{EXP_COEFFS, EXP_LN2_HI, EXP_LN2_LO, EXP_MAX_INPUT, EXP_MIN_INPUT};

/// `Kernels::softmax_inplace` on this path: the AVX2 kernel's steps (`avx2::elementwise::softmax_inplace`), its
/// exponentials two chunks at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
    let (xs, tail) = x.as_chunks_mut::<8>();
    let (max, tail_v) = softmax_max(xs, tail);
    let max_v = _mm512_set1_ps(max);
    let mut sum_v = _mm256_setzero_ps();
    let (pairs, odd) = xs.as_chunks_mut::<2>();
    for pair in pairs.iter_mut() {
        // SAFETY: the pair is 16 floats; `loadu`/`storeu` have no alignment requirement.
        let e = unsafe {
            let e = exp(_mm512_sub_ps(_mm512_loadu_ps(pair.as_ptr().cast()), max_v));
            _mm512_storeu_ps(pair.as_mut_ptr().cast(), e);
            e
        };
        sum_v = _mm256_add_ps(sum_v, _mm512_castps512_ps256(e));
        // The high half (`vextractf64x4`: AVX-512F's; `f32x8` needs DQ).
        sum_v = _mm256_add_ps(sum_v, _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e))));
    }
    // The odd last chunk, then the padded tail, each in the low half of a register.
    for v in odd.iter_mut() {
        let e = _mm512_castps512_ps256(exp(_mm512_sub_ps(_mm512_zextps256_ps512(load_8f(v)), max_v)));
        store_8f(v, e);
        sum_v = _mm256_add_ps(sum_v, e);
    }
    if !tail.is_empty() {
        let e = _mm512_castps512_ps256(exp(_mm512_sub_ps(_mm512_zextps256_ps512(tail_v), max_v)));
        sum_v = _mm256_add_ps(sum_v, e);
        let mut lanes = [0f32; 8];
        store_8f(&mut lanes, e);
        tail.copy_from_slice(&lanes[..tail.len()]);
    }
    let sum = hsum(sum_v);
    let inv = 1.0 / sum;
    let inv_v = _mm512_set1_ps(inv);
    for pair in pairs.iter_mut() {
        // SAFETY: the pair is 16 floats; `loadu`/`storeu` have no alignment requirement.
        unsafe {
            _mm512_storeu_ps(pair.as_mut_ptr().cast(), _mm512_mul_ps(_mm512_loadu_ps(pair.as_ptr().cast()), inv_v))
        };
    }
    for v in odd.iter_mut() {
        store_8f(v, _mm256_mul_ps(load_8f(v), _mm512_castps512_ps256(inv_v)));
    }
    for v in tail.iter_mut() {
        *v *= inv;
    }
    (max, sum)
}

/// `e^x` lane by lane, bit-identical to `numerics::exp`: the AVX2 path's `exp` on 16 lanes (the same operations;
/// `max`/`min` return their second operand when one is NaN, so NaN passes through, and the conversion rounds to
/// nearest as the AVX2 one does).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn exp(x: __m512) -> __m512 {
    let x = _mm512_min_ps(_mm512_set1_ps(EXP_MAX_INPUT), _mm512_max_ps(_mm512_set1_ps(EXP_MIN_INPUT), x));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
        x,
        _mm512_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x));
    let mut p = _mm512_set1_ps(EXP_COEFFS[0]);
    for &c in &EXP_COEFFS[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    // 2^n = 2^n1 · 2^n2 with n1 = ⌊n/2⌋: each factor's exponent stays within the normal range.
    let n = _mm512_cvtps_epi32(n);
    let n1 = _mm512_srai_epi32::<1>(n);
    let n2 = _mm512_sub_epi32(n, n1);
    _mm512_mul_ps(_mm512_mul_ps(p, pow2(n1)), pow2(n2))
}

/// `2^k` for integer lanes `k` in −126..=127, built from its exponent bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn pow2(k: __m512i) -> __m512 {
    _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(k, _mm512_set1_epi32(127))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::kernels::numerics;

    #[test]
    fn exp_equals_the_definition_bit_for_bit() {
        if !super::super::is_supported() {
            return;
        }
        numerics::check_exp_lanes::<16>(|inputs| {
            let mut lanes = [0f32; 16];
            // SAFETY: the AVX-512 path's features were detected above; both arrays hold 16 floats.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), exp(_mm512_loadu_ps(inputs.as_ptr()))) };
            lanes
        });
    }
}
