//! The arithmetic every kernel path computes, written once in portable Rust: the definition the scalar path runs
//! and the SIMD paths reproduce bit for bit (`docs/architecture.md`, "Numerics").
//!
//! The model is an 8-lane f32 vector. A reduction over `n` elements keeps 8 lane accumulators: element `i` goes to
//! lane `i mod 8`, in element order, and a last partial chunk is padded with the operation's identity (0 for sums,
//! −inf for maxima) exactly as a SIMD path pads its last register. The 8 lanes are then combined by one fixed tree,
//! [`sum_lanes`]. Multiply-adds are fused (`f32::mul_add`, one rounding, what `vfmadd` computes), and `exp` is one
//! polynomial ([`exp`]), never the platform's libm. So the width of a register decides how many *outputs* a path
//! computes at once, never the order in which one output's terms are added.
//!
//! Only IEEE-754 operations appear here (add, multiply, fused multiply-add, divide, square root, comparisons,
//! conversions), all of which are exactly specified, so these functions give the same bits on every machine,
//! whatever the compiler does: Rust never reassociates or contracts floating-point operations on its own.

/// Lanes of the model vector.
pub const LANES: usize = 8;

/// One model vector.
pub type Lanes = [f32; LANES];

/// `Σ v` by the pairwise tree `((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))`: every horizontal sum of every
/// path (a matmul output, a norm's sum of squares, a softmax denominator, an attention score).
#[inline(always)]
pub fn sum_lanes(v: Lanes) -> f32 {
    ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
}

/// `maxps` on one lane: `a` when `a > b`, else `b` (so `b` when either is NaN, and `b` between `+0` and `−0`).
#[inline(always)]
pub fn max_lane(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// `minps` on one lane: `a` when `a < b`, else `b`.
#[inline(always)]
pub fn min_lane(a: f32, b: f32) -> f32 {
    if a < b {
        a
    } else {
        b
    }
}

/// The largest lane, by the tree the SIMD paths use: `max(v[i], v[i + 4])`, then `max(m[i], m[i + 2])`, then
/// `max(m[0], m[1])`, each step with [`max_lane`]'s operand order.
#[inline(always)]
pub fn max_of_lanes(v: Lanes) -> f32 {
    let m4: [f32; 4] = std::array::from_fn(|i| max_lane(v[i], v[i + 4]));
    let m2: [f32; 2] = std::array::from_fn(|i| max_lane(m4[i], m4[i + 2]));
    max_lane(m2[0], m2[1])
}

/// Calls `f` with each chunk of 8 elements of `x`, the last one padded with `pad`: the chunks a SIMD path loads.
#[inline(always)]
pub fn for_each_chunk(x: &[f32], pad: f32, mut f: impl FnMut(&Lanes)) {
    let (chunks, tail) = x.as_chunks::<LANES>();
    for chunk in chunks {
        f(chunk);
    }
    if !tail.is_empty() {
        f(&padded(tail, pad));
    }
}

/// `tail` (at most 8 elements) followed by copies of `pad`.
#[inline(always)]
pub fn padded(tail: &[f32], pad: f32) -> Lanes {
    let mut v = [pad; LANES];
    v[..tail.len()].copy_from_slice(tail);
    v
}

/// `ln 2 = LN2_HI + LN2_LO`; `LN2_HI` has 9 significant bits, so `n · LN2_HI` is exact for `|n| ≤ 2^15`.
pub const EXP_LN2_HI: f32 = 0.693_359_4;
pub const EXP_LN2_LO: f32 = -2.121_944_4e-4;
/// Inputs are clamped to `[EXP_MIN_INPUT, EXP_MAX_INPUT]` first: `n` then stays in −150..=128, where `2^n` is a
/// product of two normal floats; results at the clamps are already 0 and +inf.
pub const EXP_MIN_INPUT: f32 = -104.0;
pub const EXP_MAX_INPUT: f32 = 88.73;
/// The Taylor coefficients of `e^r` from the highest degree down, for Horner's rule: 1/7!, 1/6!, ..., 1/1!, 1/0!.
pub const EXP_COEFFS: [f32; 8] = [1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];

/// `e^x`, within a few ulp of the exact value over the whole f32 range (0 below about −103.9, +inf above about
/// 88.72, NaN for NaN): the one exponential of softmax and SiLU on every path.
///
/// The classic reduction (as in Cephes' `expf`): `n = round(x · log2 e)` (ties to even), `r = x − n·ln 2` with
/// `ln 2` split in a head exact in few bits and a tail, so `|r| ≤ ln 2 / 2`; then `e^x = 2^n · e^r` with `e^r`
/// from its Taylor polynomial to degree 7 (truncation error `r^8 / 8! < 6·10⁻⁹`, below half an ulp), and `2^n`
/// applied as `2^⌊n/2⌋ · 2^(n − ⌊n/2⌋)` so that each factor is a normal float.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // The clamps in the SIMD order: `min(MAX, max(MIN, x))`, whose operand order passes NaN through.
    let x = min_lane(EXP_MAX_INPUT, max_lane(EXP_MIN_INPUT, x));
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    // `vfnmadd(a, b, c) = −(a·b) + c` with one rounding: `(−a).mul_add(b, c)`, since negation is exact.
    let r = (-n).mul_add(EXP_LN2_LO, (-n).mul_add(EXP_LN2_HI, x));
    let mut p = EXP_COEFFS[0];
    for &c in &EXP_COEFFS[1..] {
        p = p.mul_add(r, c);
    }
    // `n` is an integer in −150..=128 (NaN only for NaN input, which the SIMD conversion maps to i32::MIN).
    let n = if n.is_nan() { i32::MIN } else { n as i32 };
    let n1 = n >> 1;
    let n2 = n.wrapping_sub(n1);
    (p * pow2(n1)) * pow2(n2)
}

/// `√(2/π)`, GELU's tanh-approximation constant.
pub const GELU_SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The cubic coefficient of GELU's tanh approximation.
pub const GELU_CUBIC: f32 = 0.044_715;

/// GELU with the tanh approximation, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, with
/// `tanh(z) = 1 − 2 / (1 + e^{2z})` from [`exp`] (±1 where `e^{2z}` overflows or vanishes): plain f32 operations
/// and one shared exponential, so the same bits on every path. (llama.cpp reads GELU from an f16 table; this is
/// within f32 rounding of the formula instead.)
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    let z = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * (x * x * x));
    0.5 * x * (1.0 + tanh(z))
}

/// `tanh(z) = 1 − 2 / (1 + e^{2z})` from [`exp`] (±1 where `e^{2z}` overflows or vanishes): the same bits on
/// every path and machine.
#[inline(always)]
pub fn tanh(z: f32) -> f32 {
    1.0 - 2.0 / (1.0 + exp(2.0 * z))
}

/// Gemma 2's soft cap, `c · tanh(x / c)`: `x` squashed into (−c, c), nearly unchanged where `|x| ≪ c`.
#[inline(always)]
pub fn soft_cap(x: f32, c: f32) -> f32 {
    c * tanh(x / c)
}

/// `2^k` for `k` in −126..=127, built from its exponent bits (other `k` give what the SIMD bit operations give).
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits((k.wrapping_add(127) as u32) << 23)
}

/// Checks a vector `exp` of `N` lanes against [`exp`] bit for bit on every 61st f32 bit pattern (70 million inputs,
/// both signs, NaNs, infinities and subnormals included): the test each SIMD path's `exp` runs.
#[cfg(test)]
pub(in crate::backend::cpu::kernels) fn check_exp_lanes<const N: usize>(simd_exp: impl Fn(&[f32; N]) -> [f32; N]) {
    let mut inputs = [0f32; N];
    let mut filled = 0;
    for bits in (0..=u32::MAX).step_by(61) {
        inputs[filled] = f32::from_bits(bits);
        filled += 1;
        if filled == N {
            for (x, got) in inputs.iter().zip(simd_exp(&inputs)) {
                let want = exp(*x);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "exp({x:e}): {got:e} vs {want:e}"
                );
            }
            filled = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_a_few_ulp_of_the_exact_value() {
        let mut worst = 0f64;
        for i in 0..=400_000 {
            let x = -110.0 + 200.0 * i as f32 / 400_000.0;
            let (got, want) = (exp(x), f64::from(x).exp());
            if want < f64::from(f32::MIN_POSITIVE) {
                let tiny = f64::from(f32::from_bits(1));
                assert!((f64::from(got) - want).abs() <= 2.0 * tiny, "exp({x}) = {got}, want {want}");
                continue;
            }
            if want > f64::from(f32::MAX) {
                assert_eq!(got, f32::INFINITY, "exp({x})");
                continue;
            }
            worst = worst.max(((f64::from(got) - want) / want).abs());
        }
        assert!(worst < 4.0 * f64::from(f32::EPSILON), "worst relative error {worst:e}");
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn gelu_tanh_follows_its_formula() {
        for i in -2000..=2000 {
            let x = i as f64 / 100.0;
            let want = 0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x)).tanh());
            let got = f64::from(gelu_tanh(x as f32));
            assert!((got - want).abs() <= 1e-6 * (1.0 + want.abs()), "gelu({x}) = {got}, want {want}");
        }
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert_eq!(gelu_tanh(-100.0), 0.0);
        assert_eq!(gelu_tanh(100.0), 100.0);
    }

    #[test]
    fn the_lane_tree_adds_in_its_documented_order() {
        // 1e8 absorbs 1.0 unless the ones are added to each other first.
        let v = [1e8, -1e8, 1.0, 1.0, 0.5, 0.25, 0.125, 0.125];
        assert_eq!(sum_lanes(v), 3.0);
        assert_eq!(max_of_lanes([1.0, 9.0, -3.0, 4.0, 2.0, 8.0, 7.0, 0.0]), 9.0);
        assert_eq!(max_lane(f32::NAN, 1.0), 1.0);
        assert!(max_lane(1.0, f32::NAN).is_nan());
    }
}
