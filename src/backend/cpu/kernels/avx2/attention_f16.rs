//! AVX2 kernels of attention over the f16 KV cache, one call per run of consecutive cache slots (a cache block),
//! so that the per-position work is only the arithmetic.
//!
//! Scores: four positions at a time, each with its own 8-lane accumulator, reduced together by one transposing
//! `hadd` tree instead of four horizontal sums; the last 1–3 positions of a run are reduced one by one. Values: the
//! output row stays in registers across the run (one load and one store per run, not per position; rows wider than
//! 128 in slabs of 64), with one FMA per element and position, in position order.
//!
//! Rows whose width is not a multiple of 8 (no model we know) take the scalar path's functions. The quads' `hadd`
//! tree adds each position's lanes in `numerics::sum_lanes`' order, as `hsum` does for the last positions.

use std::arch::x86_64::*;

use half::f16;

use super::lanes::{hsum, load_8f, load_8h, store_8f};
use crate::backend::cpu::kernels::scalar::dot_f16;

/// Positions scored together: four accumulators, the key chunk and the query chunk fit the 16 ymm registers.
const POSITIONS_AT_ONCE: usize = 4;

/// `out[i] = q · keys[i·stride .. i·stride + q.len()]` for `i < out.len()` (arguments checked by `Kernels`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn attention_scores_f16(q: &[f32], keys: &[f16], stride: usize, out: &mut [f32]) {
    let hd = q.len();
    if !hd.is_multiple_of(8) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = dot_f16(q, &keys[i * stride..][..hd]);
        }
        return;
    }
    let q = q.as_chunks::<8>().0;
    let key_chunks = |i: usize| keys[i * stride..][..hd].as_chunks::<8>().0;
    let n = out.len();
    let quads = n / POSITIONS_AT_ONCE;
    for quad in 0..quads {
        let i = quad * POSITIONS_AT_ONCE;
        let (k0, k1, k2, k3) = (key_chunks(i), key_chunks(i + 1), key_chunks(i + 2), key_chunks(i + 3));
        let mut acc = [_mm256_setzero_ps(); POSITIONS_AT_ONCE];
        for (c, q_chunk) in q.iter().enumerate() {
            let q_v = load_8f(q_chunk);
            acc[0] = _mm256_fmadd_ps(q_v, load_8h(&k0[c]), acc[0]);
            acc[1] = _mm256_fmadd_ps(q_v, load_8h(&k1[c]), acc[1]);
            acc[2] = _mm256_fmadd_ps(q_v, load_8h(&k2[c]), acc[2]);
            acc[3] = _mm256_fmadd_ps(q_v, load_8h(&k3[c]), acc[3]);
        }
        // hadd pairs lanes within 128-bit halves: after two rounds, lane j of each half holds half of position j's
        // sum; adding the halves finishes all four.
        let pairs = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
        let sums = _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps::<1>(pairs));
        let o = out[i..].first_chunk_mut::<4>().expect("a whole quad");
        // SAFETY: `o` covers 4 writable floats; `storeu` has no alignment requirement.
        unsafe { _mm_storeu_ps(o.as_mut_ptr(), sums) };
    }
    for (i, o) in out.iter_mut().enumerate().skip(quads * POSITIONS_AT_ONCE) {
        let mut acc = _mm256_setzero_ps();
        for (q_chunk, k_chunk) in q.iter().zip(key_chunks(i)) {
            acc = _mm256_fmadd_ps(load_8f(q_chunk), load_8h(k_chunk), acc);
        }
        *o = hsum(acc);
    }
}

/// `out += Σ_i weights[i] · values[i·stride .. i·stride + out.len()]`, position by position (arguments checked
/// by `Kernels`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn attention_values_f16(
    weights: &[f32],
    values: &[f16],
    stride: usize,
    out: &mut [f32],
) {
    match out.len() {
        64 => values_in_registers::<8>(weights, values, stride, whole_chunks(out)),
        128 => values_in_registers::<16>(weights, values, stride, whole_chunks(out)),
        // Wider heads (Gemma 3: 256) in slabs of 64 outputs, each slab a pass over the positions: every output
        // still adds its positions in order, one FMA each.
        hd if hd.is_multiple_of(64) => {
            for (slab, out) in out.chunks_exact_mut(64).enumerate() {
                values_in_registers::<8>(weights, &values[slab * 64..], stride, whole_chunks(out));
            }
        }
        hd => {
            for (i, &w) in weights.iter().enumerate() {
                for (o, &v) in out.iter_mut().zip(&values[i * stride..][..hd]) {
                    *o = w.mul_add(v.to_f32(), *o);
                }
            }
        }
    }
}

/// `out` (exactly `8·N` floats) as `N` chunks of 8.
fn whole_chunks<const N: usize>(out: &mut [f32]) -> &mut [[f32; 8]; N] {
    out.as_chunks_mut::<8>().0.try_into().expect("a row of 8·N floats")
}

/// `attention_values_f16` for rows of `8·CHUNKS` floats, kept in registers.
#[target_feature(enable = "avx2,fma,f16c")]
fn values_in_registers<const CHUNKS: usize>(
    weights: &[f32],
    values: &[f16],
    stride: usize,
    out: &mut [[f32; 8]; CHUNKS],
) {
    let mut acc = [_mm256_setzero_ps(); CHUNKS];
    for (a, o) in acc.iter_mut().zip(out.iter()) {
        *a = load_8f(o);
    }
    for (i, &w) in weights.iter().enumerate() {
        let w_v = _mm256_set1_ps(w);
        let row = values[i * stride..][..8 * CHUNKS].as_chunks::<8>().0;
        for (a, v) in acc.iter_mut().zip(row) {
            *a = _mm256_fmadd_ps(w_v, load_8h(v), *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        store_8f(o, a);
    }
}
