//! AVX2 kernels of attention over the f16 KV cache, one call per run of consecutive cache slots (a cache block)
//! for all the query heads that share the run's KV head, so that each cached element is converted from f16 once
//! for the whole group rather than once per head: the conversion (`vcvtph2ps`), not the multiply-adds, bounded
//! the single-head kernels.
//!
//! Scores: `P` positions at a time for up to `G` heads (`P·G` accumulators, each a position's 8-lane vector for
//! one head), reduced by one transposing `hadd` tree per head and 2 or 4 positions instead of a horizontal sum per
//! position; the last positions of a run are reduced one by one. Larger groups run as balanced subgroups of at most
//! `G` heads. Values: slabs of `8·S` output elements of every head in the subgroup stay in registers across the
//! run, one conversion per cached element of the slab and one FMA per element, head and position, in position
//! order.
//!
//! The bodies are generic over those sizes and inlined into two entry points: this path's, sized for AVX2's 16
//! ymm registers, and the AVX-512 path's (`avx512::attention_f16`), which has 32 (AVX-512VL) and takes wider
//! tiles. Each score and output element gets the single-head arithmetic of `numerics` (the `hadd` tree adds each
//! position's lanes in `numerics::sum_lanes`' order, as `hsum` does for the last positions), so grouping and tile
//! sizes change speed, never bits. Rows whose width is not a multiple of 8 (no model we know) take the scalar
//! path's functions.

use std::arch::x86_64::*;

use half::f16;

use super::lanes::{hsum, load_8f, load_8h, store_8f};
use crate::backend::cpu::kernels::scalar::dot_f16;
use crate::backend::cpu::kernels::table::CacheRun;

/// Most heads of a subgroup on this path: scores of 2 positions × 3 heads and values slabs of 2 chunks × 3 heads
/// keep the accumulators, the keys or the heads' weights and a converted chunk within 16 registers (4 × 3 tiles
/// spilled to the stack, measured slower than the single-head kernels).
const MAX_HEADS: usize = 3;

/// The heads `0..heads` as balanced subgroups of at most `max`: `(first head, heads)`.
pub(in crate::backend::cpu::kernels) fn subgroups(heads: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let count = heads.div_ceil(max).max(1);
    (0..count).map(move |k| {
        let first = k * heads / count;
        (first, (k + 1) * heads / count - first)
    })
}

/// `out[g·out_stride + i] = queries[g] · keys.rows[i·keys.stride ..][..keys.width]` (arguments checked by
/// `Kernels`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn attention_scores_f16(
    queries: &[f32],
    keys: CacheRun<'_, f16>,
    out: &mut [f32],
    out_stride: usize,
) {
    if scores_unvectorized(queries, keys, out, out_stride) {
        return;
    }
    for (first, heads) in subgroups(queries.len() / keys.width, MAX_HEADS) {
        let queries = &queries[first * keys.width..][..heads * keys.width];
        let out = &mut out[first * out_stride..];
        // SAFETY: this function is compiled with the features the bodies' intrinsics need.
        unsafe {
            match heads {
                1 => scores_of::<1, 4>(queries, keys, out, out_stride),
                2 => scores_of::<2, 4>(queries, keys, out, out_stride),
                _ => scores_of::<3, 2>(queries, keys, out, out_stride),
            }
        }
    }
}

/// `out[g·width + j] += Σ_i weights[g·weight_stride + i] · values.rows[i·values.stride + j]`, position by position
/// (arguments checked by `Kernels`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn attention_values_f16(
    weights: &[f32],
    weight_stride: usize,
    values: CacheRun<'_, f16>,
    out: &mut [f32],
) {
    if values_unvectorized(weights, weight_stride, values, out) {
        return;
    }
    let width = values.width;
    for (first, heads) in subgroups(out.len() / width, MAX_HEADS) {
        let weights = &weights[first * weight_stride..];
        let out = &mut out[first * width..][..heads * width];
        // SAFETY: this function is compiled with the features the bodies' intrinsics need.
        unsafe {
            match (heads, width.is_multiple_of(16)) {
                (1, true) => values_of::<1, 2>(weights, weight_stride, values, out),
                (2, true) => values_of::<2, 2>(weights, weight_stride, values, out),
                (_, true) => values_of::<3, 2>(weights, weight_stride, values, out),
                (1, false) => values_of::<1, 1>(weights, weight_stride, values, out),
                (2, false) => values_of::<2, 1>(weights, weight_stride, values, out),
                (_, false) => values_of::<3, 1>(weights, weight_stride, values, out),
            }
        }
    }
}

/// The scalar path's scores where the width is not a multiple of 8; whether it was.
pub(in crate::backend::cpu::kernels) fn scores_unvectorized(
    queries: &[f32],
    keys: CacheRun<'_, f16>,
    out: &mut [f32],
    out_stride: usize,
) -> bool {
    let width = keys.width;
    if width.is_multiple_of(8) {
        return false;
    }
    for (g, q) in queries.chunks_exact(width).enumerate() {
        for (i, o) in out[g * out_stride..][..keys.n].iter_mut().enumerate() {
            *o = dot_f16(q, &keys.rows[i * keys.stride..][..width]);
        }
    }
    true
}

/// The scalar path's values where the width is not a multiple of 8; whether it was.
pub(in crate::backend::cpu::kernels) fn values_unvectorized(
    weights: &[f32],
    weight_stride: usize,
    values: CacheRun<'_, f16>,
    out: &mut [f32],
) -> bool {
    let width = values.width;
    if width.is_multiple_of(8) {
        return false;
    }
    for (g, out) in out.chunks_exact_mut(width).enumerate() {
        for (i, &w) in weights[g * weight_stride..][..values.n].iter().enumerate() {
            for (o, &v) in out.iter_mut().zip(&values.rows[i * values.stride..][..width]) {
                *o = w.mul_add(v.to_f32(), *o);
            }
        }
    }
    true
}

/// Scores of `G` heads (`queries`: `G × keys.width` floats, a multiple of 8), `P` (2 or 4) positions at a time.
///
/// # Safety
/// The caller is compiled with AVX2, FMA and F16C (the body is inlined into it).
#[inline(always)]
pub(in crate::backend::cpu::kernels) unsafe fn scores_of<const G: usize, const P: usize>(
    queries: &[f32],
    keys: CacheRun<'_, f16>,
    out: &mut [f32],
    out_stride: usize,
) {
    let width = keys.width;
    let q: [&[[f32; 8]]; G] = std::array::from_fn(|g| queries[g * width..][..width].as_chunks::<8>().0);
    let key_chunks = |i: usize| keys.rows[i * keys.stride..][..width].as_chunks::<8>().0;
    let tiles = keys.n / P;
    // SAFETY (every intrinsic and lane helper below): the caller has the features, see above.
    unsafe {
        for tile in 0..tiles {
            let i = tile * P;
            let k: [&[[f16; 8]]; P] = std::array::from_fn(|p| key_chunks(i + p));
            let mut acc = [[_mm256_setzero_ps(); P]; G];
            for c in 0..width / 8 {
                for p in 0..P {
                    let key = load_8h(&k[p][c]);
                    for g in 0..G {
                        acc[g][p] = _mm256_fmadd_ps(load_8f(&q[g][c]), key, acc[g][p]);
                    }
                }
            }
            for (g, acc) in acc.iter().enumerate() {
                // hadd pairs lanes within 128-bit halves: after two rounds, lane j of each half holds half of
                // position j's sum; adding the halves finishes them. With 2 positions, lanes 2 and 3 repeat 0 and 1.
                let pairs = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2 % P], acc[3 % P]));
                let sums = _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps::<1>(pairs));
                let mut four = [0f32; 4];
                _mm_storeu_ps(four.as_mut_ptr(), sums);
                out[g * out_stride + i..][..P].copy_from_slice(&four[..P]);
            }
        }
        for i in tiles * P..keys.n {
            let k = key_chunks(i);
            let mut acc = [_mm256_setzero_ps(); G];
            for (c, k_chunk) in k.iter().enumerate() {
                let key = load_8h(k_chunk);
                for g in 0..G {
                    acc[g] = _mm256_fmadd_ps(load_8f(&q[g][c]), key, acc[g]);
                }
            }
            for (g, acc) in acc.into_iter().enumerate() {
                out[g * out_stride + i] = hsum(acc);
            }
        }
    }
}

/// `out` (`G` heads of `width` floats, a multiple of `N`) as each head's chunks of `N` (8 for 256-bit registers,
/// 16 for 512-bit ones).
pub(in crate::backend::cpu::kernels) fn head_chunks<const G: usize, const N: usize>(
    out: &mut [f32],
    width: usize,
) -> [&mut [[f32; N]]; G] {
    let mut rest = out;
    std::array::from_fn(|_| {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(width);
        rest = tail;
        head.as_chunks_mut::<N>().0
    })
}

/// Values of `G` heads, in slabs of `S` chunks of 8 (the width a multiple of `8·S`).
///
/// # Safety
/// The caller is compiled with AVX2, FMA and F16C (the body is inlined into it).
#[inline(always)]
pub(in crate::backend::cpu::kernels) unsafe fn values_of<const G: usize, const S: usize>(
    weights: &[f32],
    weight_stride: usize,
    values: CacheRun<'_, f16>,
    out: &mut [f32],
) {
    let width = values.width;
    let mut heads = head_chunks::<G, 8>(out, width);
    let weights: [&[f32]; G] = std::array::from_fn(|g| &weights[g * weight_stride..][..values.n]);
    // SAFETY (every intrinsic and lane helper below): the caller has the features, see above.
    unsafe {
        for slab in 0..width / (8 * S) {
            let mut acc = [[_mm256_setzero_ps(); S]; G];
            for (acc, head) in acc.iter_mut().zip(heads.iter()) {
                for (a, o) in acc.iter_mut().zip(&head[slab * S..]) {
                    *a = load_8f(o);
                }
            }
            for (i, row) in (0..values.n).map(|i| (i, &values.rows[i * values.stride..])) {
                let w: [__m256; G] = std::array::from_fn(|g| _mm256_set1_ps(weights[g][i]));
                let row = row[slab * 8 * S..][..8 * S].as_chunks::<8>().0;
                for (s, chunk) in row.iter().enumerate() {
                    let v = load_8h(chunk);
                    for g in 0..G {
                        acc[g][s] = _mm256_fmadd_ps(w[g], v, acc[g][s]);
                    }
                }
            }
            for (acc, head) in acc.iter().zip(heads.iter_mut()) {
                for (a, o) in acc.iter().zip(&mut head[slab * S..]) {
                    store_8f(o, *a);
                }
            }
        }
    }
}
