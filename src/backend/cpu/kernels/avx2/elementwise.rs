//! AVX2 element-wise kernels (lengths checked by `Kernels`' methods), bit-identical to the scalar ones: each works
//! on the 8 lanes of `numerics`, reductions take a row's last partial chunk as a padded register, and element-wise
//! tails use the scalar path's own formulas. The model's widths (576, 1536, 64) have no tail; attention's softmax
//! rows (one per context length) usually do.

use std::arch::x86_64::*;

use super::exp::exp;
use super::lanes::{hmax, hsum, load_8f, load_padded, store_8f};
use crate::backend::cpu::kernels::scalar::{rms_scale, rope_pair, silu_mul_one};

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let (xs, x_tail) = x.as_chunks::<8>();
    let mut acc = _mm256_setzero_ps();
    for v in xs {
        let v = load_8f(v);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    if !x_tail.is_empty() {
        let v = load_padded(x_tail, 0.0);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    let scale = rms_scale(hsum(acc), x.len(), eps);
    let scale_v = _mm256_set1_ps(scale);
    let (ws, w_tail) = weight.as_chunks::<8>();
    let (outs, out_tail) = out.as_chunks_mut::<8>();
    for ((o, v), w) in outs.iter_mut().zip(xs).zip(ws) {
        store_8f(o, _mm256_mul_ps(_mm256_mul_ps(load_8f(v), scale_v), load_8f(w)));
    }
    for ((o, &v), &w) in out_tail.iter_mut().zip(x_tail).zip(w_tail) {
        *o = v * scale * w;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let (gs, g_tail) = gate.as_chunks::<8>();
    let (us, u_tail) = up.as_chunks::<8>();
    let (outs, out_tail) = out.as_chunks_mut::<8>();
    let one = _mm256_set1_ps(1.0);
    for ((o, g), u) in outs.iter_mut().zip(gs).zip(us) {
        let g = load_8f(g);
        let sigmoid_denominator = _mm256_add_ps(one, exp(_mm256_sub_ps(_mm256_setzero_ps(), g)));
        store_8f(o, _mm256_mul_ps(_mm256_div_ps(g, sigmoid_denominator), load_8f(u)));
    }
    for ((o, &g), &u) in out_tail.iter_mut().zip(g_tail).zip(u_tail) {
        *o = silu_mul_one(g, u);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn add_assign(x: &mut [f32], y: &[f32]) {
    let (xs, x_tail) = x.as_chunks_mut::<8>();
    let (ys, y_tail) = y.as_chunks::<8>();
    for (a, b) in xs.iter_mut().zip(ys) {
        store_8f(a, _mm256_add_ps(load_8f(a), load_8f(b)));
    }
    for (a, &b) in x_tail.iter_mut().zip(y_tail) {
        *a += b;
    }
}

/// The softmax's first pass (this path's and the AVX-512 one's): the largest score of the chunks `xs` and the
/// partial `tail`, and the tail as a register padded with −inf (its unused lanes then add exp(−inf) = +0 to the sum).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn softmax_max(xs: &[[f32; 8]], tail: &[f32]) -> (f32, __m256) {
    let mut max_v = _mm256_set1_ps(f32::NEG_INFINITY);
    for v in xs {
        max_v = _mm256_max_ps(load_8f(v), max_v);
    }
    let tail_v = load_padded(tail, f32::NEG_INFINITY);
    if !tail.is_empty() {
        max_v = _mm256_max_ps(tail_v, max_v);
    }
    (hmax(max_v), tail_v)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
    let (xs, tail) = x.as_chunks_mut::<8>();
    let (max, tail_v) = softmax_max(xs, tail);
    let max_v = _mm256_set1_ps(max);
    let mut sum_v = _mm256_setzero_ps();
    for v in xs.iter_mut() {
        let e = exp(_mm256_sub_ps(load_8f(v), max_v));
        store_8f(v, e);
        sum_v = _mm256_add_ps(sum_v, e);
    }
    if !tail.is_empty() {
        let e = exp(_mm256_sub_ps(tail_v, max_v));
        sum_v = _mm256_add_ps(sum_v, e);
        let mut lanes = [0f32; 8];
        store_8f(&mut lanes, e);
        tail.copy_from_slice(&lanes[..tail.len()]);
    }
    let sum = hsum(sum_v);
    let inv = 1.0 / sum;
    let inv_v = _mm256_set1_ps(inv);
    for v in xs.iter_mut() {
        store_8f(v, _mm256_mul_ps(load_8f(v), inv_v));
    }
    for v in tail.iter_mut() {
        *v *= inv;
    }
    (max, sum)
}

/// `[a0, a0, a1, a1, a2, a2, a3, a3]`.
#[target_feature(enable = "avx2,fma,f16c")]
fn spread_pairs(a: &[f32; 4]) -> __m256 {
    // SAFETY: the reference covers 4 readable floats; `loadu` has no alignment requirement.
    let v = unsafe { _mm_loadu_ps(a.as_ptr()) };
    _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn rope(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    // 4 pairs per register: angles i..i+4 repeated for both members of their pair.
    let (heads, head_tail) = head.as_chunks_mut::<8>();
    let (coss, cos_tail) = cos.as_chunks::<4>();
    let (sins, sin_tail) = sin.as_chunks::<4>();
    for ((h, c), s) in heads.iter_mut().zip(coss).zip(sins) {
        let x = load_8f(h);
        let swapped = _mm256_permute_ps::<0b10_11_00_01>(x); // (x1, x0) in each pair
                                                             // Even lanes: x0·c − x1·s; odd lanes: x1·c + x0·s.
        store_8f(h, _mm256_fmaddsub_ps(x, spread_pairs(c), _mm256_mul_ps(swapped, spread_pairs(s))));
    }
    for ((pair, &c), &s) in head_tail.chunks_exact_mut(2).zip(cos_tail).zip(sin_tail) {
        (pair[0], pair[1]) = rope_pair(pair[0], pair[1], c, s);
    }
}

/// The first index holding the maximum of the non-NaN values (0 when all are NaN), as the scalar reference.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn argmax(x: &[f32]) -> usize {
    let (xs, tail) = x.as_chunks::<8>();
    // `max(v, m)` returns `m` when `v` is NaN, so NaN never enters the running maximum.
    let mut max_v = _mm256_set1_ps(f32::NEG_INFINITY);
    for v in xs {
        max_v = _mm256_max_ps(load_8f(v), max_v);
    }
    let max = tail.iter().fold(hmax(max_v), |m, &v| m.max(v));
    let max_v = _mm256_set1_ps(max);
    for (i, v) in xs.iter().enumerate() {
        let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(load_8f(v), max_v));
        if hits != 0 {
            return i * 8 + hits.trailing_zeros() as usize;
        }
    }
    tail.iter().position(|&v| v == max).map_or(0, |i| xs.len() * 8 + i)
}

/// `gelu(g) · u`: the scalar definition (`numerics::gelu_tanh`), compiled here with FMA; the same bits.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn gelu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    crate::backend::cpu::kernels::scalar::gelu_mul(gate, up, out)
}
