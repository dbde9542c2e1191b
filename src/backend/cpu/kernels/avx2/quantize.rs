//! AVX2 activation quantization, bit-identical to `q8a::quantize_row_q8a_scalar`: the maximum is exact in any
//! order, the scale comes from the same scalar function, and `x · id` is rounded to nearest-even like
//! `f32::round_ties_even`.

use std::arch::x86_64::*;

use super::lanes::{hmax, hsum_i32, load_8f, store_32};
use crate::backend::cpu::kernels::q8a::{scale_and_inverse, BlockQ8A};
use crate::model::gguf::blocks::QK;

/// The AVX2 `Kernels::quantize_row_q8a` (lengths checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn quantize_row_q8a(x: &[f32], out: &mut [BlockQ8A]) {
    let sign_bit = _mm256_set1_ps(-0.0);
    for (xs, block) in x.as_chunks::<QK>().0.iter().zip(out.iter_mut()) {
        let (e, _) = xs.as_chunks::<8>();
        let v = [load_8f(&e[0]), load_8f(&e[1]), load_8f(&e[2]), load_8f(&e[3])];
        let mut abs_max = _mm256_setzero_ps();
        for &v in &v {
            abs_max = _mm256_max_ps(abs_max, _mm256_andnot_ps(sign_bit, v));
        }
        let (d, id) = scale_and_inverse(hmax(abs_max));
        let id = _mm256_set1_ps(id);
        let mut q = [_mm256_setzero_si256(); 4];
        for i in 0..4 {
            let scaled = _mm256_mul_ps(v[i], id);
            q[i] = _mm256_cvtps_epi32(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(scaled));
        }
        // Packing works within 128-bit halves: after both packs the 4-byte groups are ordered
        // q0[0..4] q1[0..4] q2[0..4] q3[0..4] | q0[4..8] q1[4..8] q2[4..8] q3[4..8]; the permutation restores
        // element order. Values lie in −127..=127, so the saturating packs never saturate.
        let packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        store_32(&mut block.qs, _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        let (lo, hi) = (hsum_i32(_mm256_add_epi32(q[0], q[1])), hsum_i32(_mm256_add_epi32(q[2], q[3])));
        block.d = d;
        // |Σ| ≤ 16 · 127 fits i16; the sums are exact integers, as `BlockQ8A::set_sums` computes them.
        block.half_sums = [lo as i16, hi as i16];
        block.sum = lo + hi;
        block.s = d * block.sum as f32;
    }
}
