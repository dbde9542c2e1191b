//! `e^x` on 8 lanes, for softmax and SiLU: within a few ulp of `f32::exp` over the whole f32 range.
//!
//! The classic reduction (as in Cephes' `expf`): `n = round(x / ln 2)`, `r = x − n·ln 2` with `ln 2` split in a
//! head exact in few bits and a tail, so `|r| ≤ ln 2 / 2`; then `e^x = 2^n · e^r` with `e^r` from its Taylor
//! polynomial to degree 7 (truncation error `r^8 / 8! < 6·10⁻⁹`, below half an ulp).

use std::arch::x86_64::*;

/// `ln 2 = LN2_HI + LN2_LO`; `LN2_HI` has 9 significant bits, so `n · LN2_HI` is exact for `|n| ≤ 2^15`.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `e^x` lane by lane: 0 below about −103.9, +inf above about 88.72, NaN for NaN.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn exp(x: __m256) -> __m256 {
    // Clamping keeps n in −150..=128, where 2^n is a product of two normal floats; results at the clamps are
    // already 0 and +inf. `max`/`min` return their second operand when one is NaN, so NaN passes through.
    let x = _mm256_min_ps(_mm256_set1_ps(88.73), _mm256_max_ps(_mm256_set1_ps(-104.0), x));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x));
    // Horner's rule from the highest coefficient: 1/7!, 1/6!, ..., 1/1!, 1/0!.
    const COEFFS: [f32; 8] = [1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];
    let mut p = _mm256_set1_ps(COEFFS[0]);
    for &c in &COEFFS[1..] {
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

    /// Relative error against the platform's `f32::exp`, over values from underflow to overflow.
    #[test]
    fn matches_std_exp_within_a_few_ulp() {
        if !super::super::is_supported() {
            return;
        }
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -110.0 + 200.0 * i as f32 / 200_000.0;
            let mut lanes = [0f32; 8];
            // SAFETY: AVX2, FMA and F16C were detected above; `lanes` holds 8 floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), exp(_mm256_set1_ps(x))) };
            let (got, want) = (lanes[0], x.exp());
            if want == 0.0 || want.is_infinite() {
                assert!(got == want || (want == 0.0 && got < 1e-44), "exp({x}) = {got}, want {want}");
                continue;
            }
            if want < f32::MIN_POSITIVE {
                assert!((got - want).abs() <= 2.0 * f32::from_bits(1), "exp({x}) = {got}, want {want}");
                continue;
            }
            worst = worst.max(((got as f64 - want as f64) / want as f64).abs());
        }
        assert!(worst < 4.0 * f32::EPSILON as f64, "worst relative error {worst:e}");
        // SAFETY: as above.
        let nan = unsafe { _mm256_cvtss_f32(exp(_mm256_set1_ps(f32::NAN))) };
        assert!(nan.is_nan());
    }
}
