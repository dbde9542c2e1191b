//! The AVX-512 path's attention kernels over the f16 KV cache. Scores: the AVX2 path's bodies
//! (`avx2::attention_f16`), the same 256-bit arithmetic, compiled where AVX-512VL gives 32 vector registers, so that
//! wider tiles fit: 4 positions × 4 heads (16 accumulators). Values: the same arithmetic on 512-bit registers
//! (`values_zmm`: slabs of 4 × 16 elements of up to 4 heads), which halves the broadcasts and conversions per
//! element, over one run or several in one call (`attention_values_f16_runs`: a slab's sums stay in registers from
//! run to run). A group of 4 query heads per KV head (Llama 3.2 1B, Gemma 3) then converts each cached element once.
//! The 8-bit and 4-bit caches' kernels are `avx2::attention_quant`'s bodies, compiled here.

use std::arch::x86_64::*;

use half::f16;

use crate::backend::cpu::kernels::avx2::attention_f16::{
    head_chunks, scores_of, scores_unvectorized, subgroups, values_of, values_unvectorized,
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
            match (heads, width % 64, width % 16) {
                (1, 0, _) => values_zmm::<1, 4>(weights, weight_stride, &[values], out),
                (2, 0, _) => values_zmm::<2, 4>(weights, weight_stride, &[values], out),
                (3, 0, _) => values_zmm::<3, 4>(weights, weight_stride, &[values], out),
                (_, 0, _) => values_zmm::<4, 4>(weights, weight_stride, &[values], out),
                (1, _, 0) => values_zmm::<1, 1>(weights, weight_stride, &[values], out),
                (2, _, 0) => values_zmm::<2, 1>(weights, weight_stride, &[values], out),
                (3, _, 0) => values_zmm::<3, 1>(weights, weight_stride, &[values], out),
                (_, _, 0) => values_zmm::<4, 1>(weights, weight_stride, &[values], out),
                // A multiple of 8 only: the 256-bit body.
                (1, _, _) => values_of::<1, 1>(weights, weight_stride, values, out),
                (2, _, _) => values_of::<2, 1>(weights, weight_stride, values, out),
                (3, _, _) => values_of::<3, 1>(weights, weight_stride, values, out),
                (_, _, _) => values_of::<4, 1>(weights, weight_stride, values, out),
            }
        }
    }
}

/// `Kernels::attention_values_f16_runs` (arguments checked there): the runs in one call where the width is a
/// multiple of 64 (`values_zmm` keeps each slab's sums in registers from run to run), else run by run.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn attention_values_f16_runs(
    weights: &[f32],
    weight_stride: usize,
    runs: &[CacheRun<'_, f16>],
    out: &mut [f32],
) {
    let width = runs[0].width;
    if !width.is_multiple_of(64) {
        let mut done = 0;
        for run in runs {
            attention_values_f16(&weights[done..], weight_stride, *run, out);
            done += run.n;
        }
        return;
    }
    for (first, heads) in subgroups(out.len() / width, MAX_HEADS) {
        let weights = &weights[first * weight_stride..];
        let out = &mut out[first * width..][..heads * width];
        // SAFETY: this function is compiled with (more than) the features the bodies' intrinsics need.
        unsafe {
            match heads {
                1 => values_zmm::<1, 4>(weights, weight_stride, runs, out),
                2 => values_zmm::<2, 4>(weights, weight_stride, runs, out),
                3 => values_zmm::<3, 4>(weights, weight_stride, runs, out),
                _ => values_zmm::<4, 4>(weights, weight_stride, runs, out),
            }
        }
    }
}

/// Values of `G` heads over `runs` in order, in slabs of `S` vectors of 16 (the width a multiple of `16·S`): the
/// AVX2 body's arithmetic (`values_of`: each output element its own chain of FMAs in position order) on 512-bit
/// registers, so a position's weights are broadcast, and its row converted, once per 16·S elements instead of once
/// per 8·S; the lanes are independent, so the bits are the same. A slab's sums stay in registers across the runs
/// (run `k`'s weights follow those of the runs before it).
///
/// # Safety
/// The caller is compiled with AVX-512F and F16C (the body is inlined into it).
#[inline(always)]
unsafe fn values_zmm<const G: usize, const S: usize>(
    weights: &[f32],
    weight_stride: usize,
    runs: &[CacheRun<'_, f16>],
    out: &mut [f32],
) {
    let width = runs[0].width;
    let total: usize = runs.iter().map(|run| run.n).sum();
    let mut heads = head_chunks::<G, 16>(out, width);
    let weights: [&[f32]; G] = std::array::from_fn(|g| &weights[g * weight_stride..][..total]);
    // SAFETY (every intrinsic below): the caller has the features, see above; each load and store is of a whole
    // array reference (16 floats, or 16 halves), any alignment.
    unsafe {
        for slab in 0..width / (16 * S) {
            let mut acc = [[_mm512_setzero_ps(); S]; G];
            for (acc, head) in acc.iter_mut().zip(heads.iter()) {
                for (a, o) in acc.iter_mut().zip(&head[slab * S..]) {
                    *a = _mm512_loadu_ps(o.as_ptr());
                }
            }
            let mut done = 0;
            for run in runs {
                for (i, row) in (0..run.n).map(|i| (done + i, &run.rows[i * run.stride..])) {
                    let w: [__m512; G] = std::array::from_fn(|g| _mm512_set1_ps(weights[g][i]));
                    let row = row[slab * 16 * S..][..16 * S].as_chunks::<16>().0;
                    for (s, chunk) in row.iter().enumerate() {
                        let v = _mm512_cvtph_ps(_mm256_loadu_si256(chunk.as_ptr().cast()));
                        for g in 0..G {
                            acc[g][s] = _mm512_fmadd_ps(w[g], v, acc[g][s]);
                        }
                    }
                }
                done += run.n;
            }
            for (acc, head) in acc.iter().zip(heads.iter_mut()) {
                for (a, o) in acc.iter().zip(&mut head[slab * S..]) {
                    _mm512_storeu_ps(o.as_mut_ptr(), *a);
                }
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
