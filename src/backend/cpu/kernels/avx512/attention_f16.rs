//! The AVX-512 path's attention kernels over the f16 KV cache: the AVX2 path's bodies (`avx2::attention_f16`),
//! the same 256-bit arithmetic, compiled where AVX-512VL gives 32 vector registers, so that wider tiles fit: scores
//! of 4 positions × 4 heads and values slabs of 4 chunks × 4 heads (16 accumulators each). A group of 4 query heads
//! per KV head (Llama 3.2 1B, Gemma 3) then converts each cached element once. The same for the 8-bit and 4-bit
//! caches' kernels (`avx2::attention_quant`).

use half::f16;

use crate::backend::cpu::kernels::avx2::attention_f16::{
    scores_of, scores_unvectorized, subgroups, values_of, values_unvectorized,
};
use crate::backend::cpu::kernels::avx2::attention_quant::{self, SimdKvBlock};
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::table::CacheRun;
use crate::model::gguf::blocks::QK;

/// Most heads of a subgroup.
const MAX_HEADS: usize = 4;

/// `Kernels::attention_scores_f16` (arguments checked there).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn attention_scores_f16(queries: &[f32], keys: CacheRun<'_, f16>, out: &mut [f32], out_stride: usize) {
    if scores_unvectorized(queries, keys, out, out_stride) {
        return;
    }
    for (first, heads) in subgroups(queries.len() / keys.width, MAX_HEADS) {
        let queries = &queries[first * keys.width..][..heads * keys.width];
        let out = &mut out[first * out_stride..];
        // SAFETY: this function is compiled with (more than) the features the bodies' intrinsics need.
        unsafe {
            match heads {
                1 => scores_of::<1, 4>(queries, keys, out, out_stride),
                2 => scores_of::<2, 4>(queries, keys, out, out_stride),
                3 => scores_of::<3, 4>(queries, keys, out, out_stride),
                _ => scores_of::<4, 4>(queries, keys, out, out_stride),
            }
        }
    }
}

/// `Kernels::attention_values_f16` (arguments checked there).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn attention_values_f16(weights: &[f32], weight_stride: usize, values: CacheRun<'_, f16>, out: &mut [f32]) {
    if values_unvectorized(weights, weight_stride, values, out) {
        return;
    }
    let width = values.width;
    for (first, heads) in subgroups(out.len() / width, MAX_HEADS) {
        let weights = &weights[first * weight_stride..];
        let out = &mut out[first * width..][..heads * width];
        // SAFETY: this function is compiled with (more than) the features the bodies' intrinsics need.
        unsafe {
            match (heads, width.is_multiple_of(32)) {
                (1, true) => values_of::<1, 4>(weights, weight_stride, values, out),
                (2, true) => values_of::<2, 4>(weights, weight_stride, values, out),
                (3, true) => values_of::<3, 4>(weights, weight_stride, values, out),
                (_, true) => values_of::<4, 4>(weights, weight_stride, values, out),
                (1, false) => values_of::<1, 1>(weights, weight_stride, values, out),
                (2, false) => values_of::<2, 1>(weights, weight_stride, values, out),
                (3, false) => values_of::<3, 1>(weights, weight_stride, values, out),
                (_, false) => values_of::<4, 1>(weights, weight_stride, values, out),
            }
        }
    }
}

/// `Kernels::attention_scores_q8_0` / `_q4_0` (arguments checked there).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn attention_scores_q<B: SimdKvBlock>(
    queries: &[BlockQ8A],
    keys: CacheRun<'_, B>,
    out: &mut [f32],
    out_stride: usize,
) {
    for (first, heads) in subgroups(queries.len() / keys.width, MAX_HEADS) {
        let queries = &queries[first * keys.width..][..heads * keys.width];
        let out = &mut out[first * out_stride..];
        // SAFETY: this function is compiled with (more than) the features the bodies' intrinsics need.
        unsafe {
            match heads {
                1 => attention_quant::scores_of::<B, 1>(queries, keys, out, out_stride),
                2 => attention_quant::scores_of::<B, 2>(queries, keys, out, out_stride),
                3 => attention_quant::scores_of::<B, 3>(queries, keys, out, out_stride),
                _ => attention_quant::scores_of::<B, 4>(queries, keys, out, out_stride),
            }
        }
    }
}

/// `Kernels::attention_values_q8_0` / `_q4_0` (arguments checked there).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn attention_values_q<B: SimdKvBlock>(
    weights: &[f32],
    weight_stride: usize,
    values: CacheRun<'_, B>,
    out: &mut [f32],
) {
    let width = QK * values.width;
    for (first, heads) in subgroups(out.len() / width, MAX_HEADS) {
        let weights = &weights[first * weight_stride..];
        let out = &mut out[first * width..][..heads * width];
        // SAFETY: this function is compiled with (more than) the features the bodies' intrinsics need.
        unsafe {
            match heads {
                1 => attention_quant::values_of::<B, 1, 4>(weights, weight_stride, values, out),
                2 => attention_quant::values_of::<B, 2, 4>(weights, weight_stride, values, out),
                3 => attention_quant::values_of::<B, 3, 4>(weights, weight_stride, values, out),
                _ => attention_quant::values_of::<B, 4, 4>(weights, weight_stride, values, out),
            }
        }
    }
}
