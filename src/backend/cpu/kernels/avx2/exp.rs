//! `e^x` on 8 lanes: `numerics::exp` (the definition, with its derivation) instruction for instruction.

use std::arch::x86_64::*;

use crate::backend::cpu::kernels::numerics::{EXP_COEFFS, EXP_LN2_HI, EXP_LN2_LO, EXP_MAX_INPUT, EXP_MIN_INPUT};

/// `e^x` lane by lane, bit-identical to `numerics::exp`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn exp(x: __m256) -> __m256 {
    // `max`/`min` return their second operand when one is NaN, so NaN passes through.
    let x = _mm256_min_ps(_mm256_set1_ps(EXP_MAX_INPUT), _mm256_max_ps(_mm256_set1_ps(EXP_MIN_INPUT), x));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x));
    let mut p = _mm256_set1_ps(EXP_COEFFS[0]);
    for &c in &EXP_COEFFS[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    // 2^n = 2^n1 · 2^n2 with n1 = ⌊n/2⌋: each factor's exponent stays within the normal range.
    let n = _mm256_cvtps_epi32(n);
    let n1 = _mm256_srai_epi32::<1>(n);
    let n2 = _mm256_sub_epi32(n, n1);
    _mm256_mul_ps(_mm256_mul_ps(p, pow2(n1)), pow2(n2))
}

/// `2^k` for integer lanes `k` in −126..=127, built from its exponent bits.
#[target_feature(enable = "avx2,fma,f16c")]
fn pow2(k: __m256i) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, _mm256_set1_epi32(127))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::kernels::numerics;

    #[test]
    fn equals_the_definition_bit_for_bit() {
        if !super::super::is_supported() {
            return;
        }
        numerics::check_exp_lanes::<8>(|inputs| {
            let mut lanes = [0f32; 8];
            // SAFETY: AVX2, FMA and F16C were detected above; both arrays hold 8 floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), exp(_mm256_loadu_ps(inputs.as_ptr()))) };
            lanes
        });
    }
}
