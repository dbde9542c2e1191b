//! Activation blocks: 32 activations quantized to 8 bits with their scale and scaled sum, the right-hand operand of
//! every quantized matmul, and the scalar reference of their quantization.
//!
//! The layout is ggml's `block_q8_1` with f32 instead of f16 scales (`ggml-common.h`): `s` lets Q4_1's minimum
//! (`m · Σ x`) and Q4_0's offset (`−8 · d · Σ x`) be applied once per block instead of once per element.

use bytemuck::{Pod, Zeroable};

use crate::model::gguf::blocks::QK;

/// 32 consecutive activations `x[j] ≈ d · qs[j]`.
///
/// Invariants (what [`quantize_row_q8a`] produces, and what the SIMD kernels rely on for exact integer sums):
/// `qs[j]` lies in `-127..=127`, `sum == Σ qs`, `half_sums == [Σ qs[0..16], Σ qs[16..32]]` and
/// `s == d * (sum as f32)` computed in f32.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8A {
    /// Scale: `max |x| / 127` over the block.
    pub d: f32,
    /// `d · Σ qs`: the block's sum as the integer kernels see it.
    pub s: f32,
    /// `Σ qs`: a weight type stored with an offset (`u − OFFSET`) subtracts `OFFSET · sum` in integers.
    pub sum: i32,
    /// `Σ qs` over each half of 16: the offsets and minima of the K-quants with a scale per 16 elements.
    pub half_sums: [i16; 2],
    pub qs: [i8; QK],
}

// The kernels load `qs` at byte offset 16 (16-byte aligned in a 16-byte aligned array) and step over blocks 48
// bytes at a time.
const _: () = assert!(std::mem::size_of::<BlockQ8A>() == 48);
const _: () = assert!(std::mem::offset_of!(BlockQ8A, qs) == 16);

impl BlockQ8A {
    /// An all-zero block (`d = 0`).
    pub const ZERO: BlockQ8A = BlockQ8A { d: 0.0, s: 0.0, sum: 0, half_sums: [0; 2], qs: [0; QK] };

    /// Sets `sum`, `half_sums` and `s` from `qs` and `d` (integer sums: the same on every path).
    #[inline(always)]
    pub(super) fn set_sums(&mut self) {
        let half = |h: usize| self.qs[16 * h..16 * h + 16].iter().map(|&q| i32::from(q)).sum::<i32>();
        let (lo, hi) = (half(0), half(1));
        // |Σ| ≤ 16 · 127 fits i16.
        self.half_sums = [lo as i16, hi as i16];
        self.sum = lo + hi;
        self.s = self.d * self.sum as f32;
    }
}

/// The per-block scale and its inverse, as every path computes them (scalar code, so every path agrees bit for bit).
///
/// `d = amax / 127` and `id = 1 / d` (0 for an all-zero block) follow ggml's `quantize_row_q8_1_ref`.
pub(super) fn scale_and_inverse(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    (d, id)
}

/// Quantizes `x` to activation blocks: `out.len() * 32 == x.len()`.
///
/// Blocks are independent, so a token-major `n_cols × row_len` activation matrix is quantized by one call into
/// `n_cols × row_len / 32` blocks. Each value is `x · (1/d)` rounded to the nearest integer, ties to even (what
/// `vcvtps2dq` does under the default rounding mode, so the SIMD paths are bit-identical to this one). `x` must be
/// finite: NaN or infinity give unspecified (but memory-safe) blocks.
///
/// This is the scalar reference; [`super::Kernels::quantize_row_q8a`] runs the fastest path, with identical results.
///
/// # Panics
/// When the lengths do not match.
pub fn quantize_row_q8a_scalar(x: &[f32], out: &mut [BlockQ8A]) {
    assert_eq!(x.len(), out.len() * QK, "quantize_row_q8a: x must hold 32 values per output block");
    for (xs, block) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xs.iter().fold(0f32, |m, &v| m.max(v.abs()));
        let (d, id) = scale_and_inverse(amax);
        for (q, &v) in block.qs.iter_mut().zip(xs) {
            *q = (v * id).round_ties_even() as i8;
        }
        block.d = d;
        block.set_sums();
    }
}

/// Quantizes `x` to activation blocks with the fastest kernels of this CPU ([`super::kernels`]); bit-identical to
/// [`quantize_row_q8a_scalar`].
///
/// # Panics
/// When `out.len() * 32 != x.len()`.
pub fn quantize_row_q8a(x: &[f32], out: &mut [BlockQ8A]) {
    super::kernels().quantize_row_q8a(x, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_with_ties_to_even() {
        // amax = 127 makes d = 1 exactly, so the ties below are exact ties.
        let mut x = [0.25f32; QK];
        x[3] = -127.0;
        x[7] = 63.5;
        x[8] = 62.5;
        x[9] = -0.5;
        x[10] = 0.75;
        let mut out = [BlockQ8A::zeroed()];
        quantize_row_q8a_scalar(&x, &mut out);
        let b = out[0];
        assert_eq!(b.d, 1.0);
        assert_eq!((b.qs[3], b.qs[7], b.qs[8], b.qs[9], b.qs[10], b.qs[0]), (-127, 64, 62, 0, 1, 0));
        let sum: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
        assert_eq!((b.sum, b.s), (sum, b.d * sum as f32));
        let lo: i32 = b.qs[..16].iter().map(|&q| i32::from(q)).sum();
        assert_eq!(b.half_sums, [lo as i16, (sum - lo) as i16]);
    }

    #[test]
    fn zero_block_has_zero_scale() {
        let mut out = [BlockQ8A { d: 1.0, s: 1.0, sum: 1, half_sums: [1; 2], qs: [1; QK] }];
        quantize_row_q8a_scalar(&[0.0; QK], &mut out);
        assert_eq!(out[0], BlockQ8A::ZERO);
    }
}
