//! A branch-free e^x for x ≤ 0, written so that the compiler vectorizes loops over it: the softmax over a
//! 49,152-entry row is the sampler's largest cost, and the C library's `expf` is a scalar call per element
//! (about three times slower on the rows measured in `benches/sampling.rs`).

use std::f32::consts::LOG2_E;

/// Below this, e^x is under f32's smallest normal number (2^-126 ≈ e^-87.34): the result is 0 instead, which
/// no probability of interest notices.
const MIN_ARG: f32 = -87.0;

/// 1.5 × 2^23: adding it to a float below 2^22 in magnitude rounds that float to an integer (the sum's ulp
/// is 1) and leaves the integer in the low mantissa bits. A vectorizable `round` without SSE4.1.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// ln 2 split in two (Cody and Waite's reduction) so that `n * LN2_HI` is exact for |n| < 2^9 (LN2_HI has 15
/// significant bits) and `LN2_HI + LN2_LO` is ln 2 within 6e-14: with ln 2 rounded to one f32, the error n × 3e-8
/// in r would reach 4e-6 relative at n = −126.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;

/// e^x for x ≤ 0, within 1.5e-7 relative error of the true value (checked against f64 in the tests); 0 when
/// x < −87 or x is NaN (a NaN logit then counts as impossible rather than poisoning the sum).
///
/// Method: x = n ln 2 + r with n an integer and |r| ≤ ln 2 / 2; e^r by its Taylor series to degree 7 (the
/// truncation error is below r^8/8! < 6e-9 relative; the rest is rounding); 2^n by writing n + 127 into the
/// exponent bits. Positive x up to 88 are within the same bound; the callers never pass one, since they subtract
/// the row maximum first.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    let in_range = x >= MIN_ARG;
    let x = if in_range { x } else { MIN_ARG };
    let shifted = x * LOG2_E + ROUND_MAGIC;
    let n = shifted - ROUND_MAGIC;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Horner form of 1 + r + r²/2! + … + r⁷/7!.
    let mut e_r = 1.0 / 5040.0;
    for inverse_factorial in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 1.0 / 2.0, 1.0, 1.0] {
        e_r = e_r * r + inverse_factorial;
    }
    // The integer n sits in the low mantissa bits of `shifted`; the difference of the bit patterns recovers it,
    // two's-complement wrapping included for negative n.
    let n_bits = shifted.to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
    let two_to_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    if in_range {
        e_r * two_to_n
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f32::consts::LN_2;

    #[test]
    fn relative_error_below_1_5e_7_over_the_whole_domain() {
        let mut worst = 0.0f64;
        let mut x = MIN_ARG;
        while x <= 0.0 {
            let exact = (x as f64).exp();
            let relative = ((exp_nonpositive(x) as f64 - exact) / exact).abs();
            worst = worst.max(relative);
            x += 0.000_731; // not a fraction of ln 2, so the reduced argument r covers its whole range
        }
        assert!(worst < 1.5e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn exact_at_zero_and_at_integer_multiples_of_ln2() {
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-0.0), 1.0);
        for n in 1..=125 {
            let x = -(n as f32) * LN_2;
            let relative = (exp_nonpositive(x) as f64 / (x as f64).exp() - 1.0).abs();
            assert!(relative < 1.5e-7, "n = {n}: relative error {relative:e}");
        }
    }

    #[test]
    fn underflow_and_nan_give_zero() {
        assert_eq!(exp_nonpositive(-87.5), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(f32::NAN), 0.0);
        assert!(exp_nonpositive(-86.9) > 0.0);
    }
}
