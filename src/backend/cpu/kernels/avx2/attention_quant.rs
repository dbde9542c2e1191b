//! AVX2 kernels of attention over the 8-bit and 4-bit KV caches (`kv_quant`), with the arithmetic of
//! `scalar::attention_quant`, for all the query heads of a KV head at once (as `attention_f16` does for f16).
//!
//! Scores: 4 positions at a time; per key block each position's integers are made signed-magnitude once
//! (`vpsignb`), each head's dot product is `vpmaddubsw` (|key| · ±query, pairs at most 2·127·127, no saturation)
//! then `vpmaddwd`, and one `vphaddd` tree reduces the 4 positions' lanes (integers: exact in any order); the
//! dots then take the definition's `fma(d_key · d_query, dot, acc)` four positions to a register. Values: slabs of
//! `8·S` elements of each block stay in registers across the run, each position's integers converted to floats
//! once for the group.
//!
//! The bodies are generic over the block type and the tile sizes and inlined into this path's entry points and
//! the AVX-512 path's (`avx512::attention_f16`), which has 32 registers for wider tiles.

use std::arch::x86_64::*;

use super::attention_f16::{head_chunks, subgroups};
use super::lanes::{hsum_i32, load_32, load_8f, store_8f};
use crate::backend::cpu::kernels::kv_quant::KvBlock;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::table::CacheRun;
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ8_0, QK};

/// A cache block's integers as vectors.
pub(in crate::backend::cpu::kernels) trait SimdKvBlock: KvBlock {
    /// The 32 integers in order, one per byte.
    ///
    /// # Safety
    /// The caller is compiled with AVX2 (the body is inlined into it).
    unsafe fn integers(&self) -> __m256i;
    /// Integers `8c..8c + 8` as floats.
    ///
    /// # Safety
    /// As [`SimdKvBlock::integers`].
    unsafe fn chunk(&self, c: usize) -> __m256;
}

impl SimdKvBlock for BlockQ8_0 {
    #[inline(always)]
    unsafe fn integers(&self) -> __m256i {
        // SAFETY: the caller has AVX2 (see above).
        unsafe { load_32(&self.qs) }
    }

    #[inline(always)]
    unsafe fn chunk(&self, c: usize) -> __m256 {
        let bytes: &[i8; 8] = self.qs[8 * c..].first_chunk().expect("a chunk of a 32-element block");
        // SAFETY: `bytes` covers the 8 bytes `loadl` reads; the caller has AVX2.
        unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(bytes.as_ptr().cast()))) }
    }
}

impl SimdKvBlock for BlockQ4_0 {
    #[inline(always)]
    unsafe fn integers(&self) -> __m256i {
        // SAFETY: `qs` covers the 16 bytes `loadu` reads; the caller has AVX2.
        unsafe {
            let bytes = _mm_loadu_si128(self.qs.as_ptr().cast());
            let low = _mm_set1_epi8(0x0F);
            let (lo, hi) = (_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16::<4>(bytes), low));
            _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8))
        }
    }

    #[inline(always)]
    unsafe fn chunk(&self, c: usize) -> __m256 {
        let bytes: &[u8; 8] = self.qs[8 * (c % 2)..].first_chunk().expect("a chunk of a 16-byte block");
        // SAFETY: `bytes` covers the 8 bytes `loadl` reads; the caller has AVX2.
        unsafe {
            let wide = _mm256_cvtepu8_epi32(_mm_loadl_epi64(bytes.as_ptr().cast()));
            let nibbles =
                if c < 2 { _mm256_and_si256(wide, _mm256_set1_epi32(0x0F)) } else { _mm256_srli_epi32::<4>(wide) };
            _mm256_cvtepi32_ps(_mm256_sub_epi32(nibbles, _mm256_set1_epi32(8)))
        }
    }
}

/// Most heads of a subgroup on this path (scores and values).
const MAX_HEADS: usize = 3;

/// `Kernels::attention_scores_q8_0` / `_q4_0` (arguments checked there).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn attention_scores_q<B: SimdKvBlock>(
    queries: &[BlockQ8A],
    keys: CacheRun<'_, B>,
    out: &mut [f32],
    out_stride: usize,
) {
    for (first, heads) in subgroups(queries.len() / keys.width, MAX_HEADS) {
        let queries = &queries[first * keys.width..][..heads * keys.width];
        let out = &mut out[first * out_stride..];
        // SAFETY: this function is compiled with the features the bodies' intrinsics need.
        unsafe {
            match heads {
                1 => scores_of::<B, 1>(queries, keys, out, out_stride),
                2 => scores_of::<B, 2>(queries, keys, out, out_stride),
                _ => scores_of::<B, 3>(queries, keys, out, out_stride),
            }
        }
    }
}

/// `Kernels::attention_values_q8_0` / `_q4_0` (arguments checked there).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn attention_values_q<B: SimdKvBlock>(
    weights: &[f32],
    weight_stride: usize,
    values: CacheRun<'_, B>,
    out: &mut [f32],
) {
    let width = QK * values.width;
    for (first, heads) in subgroups(out.len() / width, MAX_HEADS) {
        let weights = &weights[first * weight_stride..];
        let out = &mut out[first * width..][..heads * width];
        // SAFETY: this function is compiled with the features the bodies' intrinsics need.
        unsafe {
            match heads {
                1 => values_of::<B, 1, 4>(weights, weight_stride, values, out),
                2 => values_of::<B, 2, 4>(weights, weight_stride, values, out),
                _ => values_of::<B, 3, 2>(weights, weight_stride, values, out),
            }
        }
    }
}

/// The exact integer dot product of a query block and a key block's integers (`key`), as 8 lanes of i32.
///
/// # Safety
/// The caller is compiled with AVX2 (the body is inlined into it).
#[inline(always)]
unsafe fn dot_lanes(key: __m256i, key_magnitude: __m256i, query: __m256i) -> __m256i {
    // SAFETY: the caller has AVX2.
    unsafe {
        _mm256_madd_epi16(_mm256_maddubs_epi16(key_magnitude, _mm256_sign_epi8(query, key)), _mm256_set1_epi16(1))
    }
}

/// Scores of `G` heads (`queries`: `G × keys.width` blocks), four positions at a time.
///
/// # Safety
/// The caller is compiled with AVX2, FMA and F16C (the body is inlined into it).
#[inline(always)]
pub(in crate::backend::cpu::kernels) unsafe fn scores_of<B: SimdKvBlock, const G: usize>(
    queries: &[BlockQ8A],
    keys: CacheRun<'_, B>,
    out: &mut [f32],
    out_stride: usize,
) {
    let width = keys.width;
    let q: [&[BlockQ8A]; G] = std::array::from_fn(|g| &queries[g * width..][..width]);
    let row = |i: usize| &keys.rows[i * keys.stride..][..width];
    let quads = keys.n / 4;
    // SAFETY (every intrinsic and lane helper below): the caller has the features, see above.
    unsafe {
        for quad in 0..quads {
            let i = quad * 4;
            let k: [&[B]; 4] = std::array::from_fn(|p| row(i + p));
            let mut acc = [_mm_setzero_ps(); G];
            for b in 0..width {
                let ints: [__m256i; 4] = std::array::from_fn(|p| k[p][b].integers());
                let magnitudes: [__m256i; 4] = std::array::from_fn(|p| _mm256_sign_epi8(ints[p], ints[p]));
                let key_scales = _mm_setr_ps(k[0][b].scale(), k[1][b].scale(), k[2][b].scale(), k[3][b].scale());
                for g in 0..G {
                    let query = load_32(&q[g][b].qs);
                    let dots: [__m256i; 4] = std::array::from_fn(|p| dot_lanes(ints[p], magnitudes[p], query));
                    let halves =
                        _mm256_hadd_epi32(_mm256_hadd_epi32(dots[0], dots[1]), _mm256_hadd_epi32(dots[2], dots[3]));
                    let sums = _mm_add_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256::<1>(halves));
                    let scales = _mm_mul_ps(key_scales, _mm_set1_ps(q[g][b].d));
                    acc[g] = _mm_fmadd_ps(scales, _mm_cvtepi32_ps(sums), acc[g]);
                }
            }
            for (g, acc) in acc.iter().enumerate() {
                let o = out[g * out_stride + i..].first_chunk_mut::<4>().expect("a whole quad");
                _mm_storeu_ps(o.as_mut_ptr(), *acc);
            }
        }
        for i in quads * 4..keys.n {
            let k = row(i);
            for g in 0..G {
                let mut acc = 0f32;
                for (qb, kb) in q[g].iter().zip(k) {
                    let ints = kb.integers();
                    let dot = hsum_i32(dot_lanes(ints, _mm256_sign_epi8(ints, ints), load_32(&qb.qs)));
                    acc = (kb.scale() * qb.d).mul_add(dot as f32, acc);
                }
                out[g * out_stride + i] = acc;
            }
        }
    }
}

/// Values of `G` heads in slabs of `S` (2 or 4) chunks of 8 within each block.
///
/// # Safety
/// The caller is compiled with AVX2, FMA and F16C (the body is inlined into it).
#[inline(always)]
pub(in crate::backend::cpu::kernels) unsafe fn values_of<B: SimdKvBlock, const G: usize, const S: usize>(
    weights: &[f32],
    weight_stride: usize,
    values: CacheRun<'_, B>,
    out: &mut [f32],
) {
    let width = QK * values.width;
    let mut heads = head_chunks::<G, 8>(out, width);
    let weights: [&[f32]; G] = std::array::from_fn(|g| &weights[g * weight_stride..][..values.n]);
    // SAFETY (every intrinsic and lane helper below): the caller has the features, see above.
    unsafe {
        for b in 0..values.width {
            for slab in 0..4 / S {
                let first_chunk = 4 * b + slab * S;
                let mut acc = [[_mm256_setzero_ps(); S]; G];
                for (acc, head) in acc.iter_mut().zip(heads.iter()) {
                    for (a, o) in acc.iter_mut().zip(&head[first_chunk..]) {
                        *a = load_8f(o);
                    }
                }
                for (i, block) in (0..values.n).map(|i| (i, &values.rows[i * values.stride + b])) {
                    let d = block.scale();
                    let w: [__m256; G] = std::array::from_fn(|g| _mm256_set1_ps(weights[g][i] * d));
                    let v: [__m256; S] = std::array::from_fn(|s| block.chunk(slab * S + s));
                    for (acc, w) in acc.iter_mut().zip(w) {
                        for (a, v) in acc.iter_mut().zip(v) {
                            *a = _mm256_fmadd_ps(w, v, *a);
                        }
                    }
                }
                for (acc, head) in acc.iter().zip(heads.iter_mut()) {
                    for (a, o) in acc.iter().zip(&mut head[first_chunk..]) {
                        store_8f(o, *a);
                    }
                }
            }
        }
    }
}
