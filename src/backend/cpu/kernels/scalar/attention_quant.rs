//! Attention over the 8-bit and 4-bit KV caches (`kv_quant`): the definitions every SIMD path reproduces.
//!
//! Scores: each query head quantized to [`BlockQ8A`] blocks; per block of a key, the exact integer dot product of
//! the two blocks' integers, then `acc = fma(d_key · d_query, dot, acc)` over the head's blocks in order (the dot
//! is at most 32·127·127 in magnitude, exact in f32). Values: per position and block, `s = weight · d`, then
//! `out[j] = fma(s, v_j, out[j])`, positions in order.

use crate::backend::cpu::kernels::kv_quant::KvBlock;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::table::CacheRun;
use crate::model::gguf::blocks::QK;

/// The integer dot product of a query block and a key block.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn block_dot<B: KvBlock>(q: &BlockQ8A, k: &B) -> i32 {
    (0..QK).map(|j| i32::from(q.qs[j]) * i32::from(k.value(j))).sum()
}

/// `out[g·out_stride + i]` = head `g`'s score against position `i` (`queries`: `[heads][keys.width]` blocks).
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn attention_scores_q<B: KvBlock>(
    queries: &[BlockQ8A],
    keys: CacheRun<'_, B>,
    out: &mut [f32],
    out_stride: usize,
) {
    for (g, q) in queries.chunks_exact(keys.width).enumerate() {
        for (i, o) in out[g * out_stride..][..keys.n].iter_mut().enumerate() {
            let key = &keys.rows[i * keys.stride..][..keys.width];
            *o = q
                .iter()
                .zip(key)
                .fold(0f32, |acc, (qb, kb)| (kb.scale() * qb.d).mul_add(block_dot(qb, kb) as f32, acc));
        }
    }
}

/// `out[g·32·width + 32·b + j] += weights[g·weight_stride + i] · d · v_j` of block `b` of position `i`, as
/// `fma(weight · d, v_j, out)`, positions in order.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn attention_values_q<B: KvBlock>(
    weights: &[f32],
    weight_stride: usize,
    values: CacheRun<'_, B>,
    out: &mut [f32],
) {
    for (g, out) in out.chunks_exact_mut(QK * values.width).enumerate() {
        for (i, &w) in weights[g * weight_stride..][..values.n].iter().enumerate() {
            for (block, out) in values.rows[i * values.stride..][..values.width].iter().zip(out.chunks_exact_mut(QK)) {
                let s = w * block.scale();
                for (j, o) in out.iter_mut().enumerate() {
                    *o = s.mul_add(f32::from(block.value(j)), *o);
                }
            }
        }
    }
}
