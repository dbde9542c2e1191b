//! The rotation angles of RoPE, computed in portable f64 arithmetic: pair `i` of a head at position `p` turns by
//! `p · base^(−2i / rope_dim)`, and the backends need that angle's cosine and sine.
//!
//! The platform's `pow`, `sin` and `cos` would do, except that a C library may pick a different implementation per
//! CPU (glibc has FMA and non-FMA variants of each) whose last bits differ; a table entry rounded to f32 would then
//! differ now and then between machines, and so would the logits. Written here with IEEE operations only (add,
//! multiply, divide, no fused multiply-add), these functions give the same bits on every machine, which is what
//! lets the CPU kernel paths promise the same logits everywhere (`docs/architecture.md`, "Numerics"). They are
//! accurate to a few units in the last place of f64, far below the f32 the tables are stored in.

/// `base^(−2i / rope_dim)` for `i` in `0..rope_dim / 2`.
pub fn inv_frequencies(base: f64, rope_dim: usize) -> Vec<f64> {
    let ln_base = ln(base);
    (0..rope_dim / 2).map(|i| exp(-(2.0 * i as f64 / rope_dim as f64) * ln_base)).collect()
}

/// `(cos θ, sin θ)`, for `|θ|` up to about 10⁶ (the reduction by π/2 is exact below `2^20 · π/2`); NaN beyond, and
/// for NaN or infinite `θ`.
pub fn cos_sin(theta: f64) -> (f64, f64) {
    let k = (theta * std::f64::consts::FRAC_2_PI).round_ties_even();
    // NaN fails the comparison too.
    if k.is_nan() || k.abs() >= 1048576.0 {
        return (f64::NAN, f64::NAN);
    }
    // θ − k·π/2 with π/2 in three parts: the first two have 33 significant bits, so their products with k (an
    // integer below 2^20) are exact, and the first subtraction cancels exactly.
    let r = ((theta - k * PIO2_1) - k * PIO2_2) - k * PIO2_3;
    let (c, s) = (cos_reduced(r), sin_reduced(r));
    match (k as i64).rem_euclid(4) {
        0 => (c, s),
        1 => (-s, c),
        2 => (-c, -s),
        _ => (s, -c),
    }
}

/// π/2 = PIO2_1 + PIO2_2 + PIO2_3 (within 1e-37), the first two with 33 significant bits (computed from Machin's
/// formula in 80-digit decimal arithmetic).
const PIO2_1: f64 = 1.570_796_326_734_125_6;
const PIO2_2: f64 = 6.077_100_506_303_966e-11;
const PIO2_3: f64 = 2.022_266_248_795_950_6e-21;
/// ln 2 = LN2_HI + LN2_LO (within 1e-26), LN2_HI with 32 significant bits so that `k · LN2_HI` is exact.
const LN2_HI: f64 = 0.693_147_180_369_123_8;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

/// cos r for |r| ≤ π/4: its Taylor series to r¹⁸ (the next term is below 3e-20), by Horner's rule in r².
fn cos_reduced(r: f64) -> f64 {
    let r2 = r * r;
    let mut p = 0.0;
    for n in (1..=9).rev() {
        // Term n is (−1)^n r^2n / (2n)!: p ← 1 − r²/((2n−1)·2n) · p, innermost first.
        p = 1.0 - r2 / ((2 * n - 1) * 2 * n) as f64 * p;
    }
    p
}

/// sin r for |r| ≤ π/4: its Taylor series to r¹⁹, by Horner's rule in r².
fn sin_reduced(r: f64) -> f64 {
    let r2 = r * r;
    let mut p = 0.0;
    for n in (1..=9).rev() {
        p = 1.0 - r2 / ((2 * n) * (2 * n + 1)) as f64 * p;
    }
    r * p
}

/// e^x (0 below about −745, +inf above about 709.8, NaN for NaN).
fn exp(x: f64) -> f64 {
    let k = (x * std::f64::consts::LOG2_E).round_ties_even();
    if x.is_nan() {
        return f64::NAN;
    }
    if k.abs() > 2000.0 {
        return if x > 0.0 { f64::INFINITY } else { 0.0 };
    }
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // Taylor series to r¹⁴ for |r| ≤ ln 2 / 2 (the next term is below 4e-19).
    let mut p = 1.0;
    for n in (1..=14).rev() {
        p = 1.0 + r / n as f64 * p;
    }
    // 2^k as two normal factors (each exponent within ±1000), so that no subnormal has to be built from bits.
    let k = k as i64;
    let half = k / 2;
    p * pow2(half) * pow2(k - half)
}

/// 2^k for k in −1022..=1023.
fn pow2(k: i64) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// ln x for finite x > 0 (NaN for x ≤ 0 or NaN, inf for inf).
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        return f64::NAN;
    }
    if x.is_infinite() {
        return x;
    }
    // x = m · 2^e with m in [√½, √2): from the bits, after scaling a subnormal up.
    let (x, bias) = if x < f64::MIN_POSITIVE { (x * pow2(64), -64) } else { (x, 0) };
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023 + bias;
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        e += 1;
    }
    // ln m = 2·atanh(t) = 2·(t + t³/3 + t⁵/5 + …) with t = (m − 1)/(m + 1), |t| ≤ 0.172: to t²⁹ (next below 1e-24).
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    let mut p = 0.0;
    for n in (0..=14).rev() {
        p = 1.0 / (2 * n + 1) as f64 + t2 * p;
    }
    let e = e as f64;
    (e * LN2_HI + 2.0 * t * p) + e * LN2_LO
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within `ulps` units in the last place of f64 (relative to `scale`).
    fn close(got: f64, want: f64, scale: f64, ulps: f64) -> bool {
        (got - want).abs() <= ulps * f64::EPSILON * scale.max(f64::MIN_POSITIVE)
    }

    #[test]
    fn cos_sin_follow_the_c_library_closely() {
        let mut theta = -1000.0;
        while theta < 9000.0 {
            let (c, s) = cos_sin(theta);
            // Beyond |θ| of a few, the reference's own error in θ mod 2π dominates: scale by max(1, |θ|)·2^-20.
            let scale = 1.0f64.max(theta.abs() / 1e6);
            assert!(close(c, theta.cos(), scale, 8.0), "cos({theta}) = {c} vs {}", theta.cos());
            assert!(close(s, theta.sin(), scale, 8.0), "sin({theta}) = {s} vs {}", theta.sin());
            theta += 0.123_456_7;
        }
        assert_eq!(cos_sin(0.0), (1.0, 0.0));
        assert!(cos_sin(f64::NAN).0.is_nan() && cos_sin(f64::INFINITY).1.is_nan());
    }

    #[test]
    fn exp_and_ln_follow_the_c_library_closely() {
        for i in 0..20_000 {
            let x = -700.0 + 0.07 * i as f64;
            assert!(close(exp(x), x.exp(), x.exp(), 4.0), "exp({x}) = {} vs {}", exp(x), x.exp());
        }
        for &x in &[1e-300, 1e-10, 0.5, 0.999_999, 1.0, 1.000_001, 2.0, 10_000.0, 500_000.0, 1e6, 1e300, 5e-324] {
            assert!(close(ln(x), x.ln(), x.ln().abs().max(1e-300), 4.0), "ln({x}) = {} vs {}", ln(x), x.ln());
        }
        assert_eq!(ln(1.0), 0.0);
        assert!(ln(-1.0).is_nan() && ln(0.0).is_nan());
    }

    #[test]
    fn inv_frequencies_match_powf() {
        for base in [10_000.0, 100_000.0, 1_000_000.0] {
            for (i, f) in inv_frequencies(base, 64).into_iter().enumerate() {
                let want = f64::powf(base, -2.0 * i as f64 / 64.0);
                assert!(close(f, want, want, 16.0), "base {base}, pair {i}: {f} vs {want}");
            }
        }
    }
}
