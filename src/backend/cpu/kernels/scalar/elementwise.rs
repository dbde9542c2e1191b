//! Scalar element-wise kernels (arguments checked by `Kernels`' methods): the definitions of `numerics`, one
//! model vector of 8 lanes at a time, so that every SIMD path computes exactly these values.

use half::f16;

use crate::backend::cpu::kernels::numerics::{self, for_each_chunk, max_lane, max_of_lanes, sum_lanes, Lanes, LANES};
use crate::backend::cpu::kernels::table::CacheRun;

/// `Σ x[i]²` with fused multiply-adds into 8 lanes (element `i` into lane `i mod 8`), then the lane tree.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn sum_of_squares(x: &[f32]) -> f32 {
    let mut acc: Lanes = [0.0; LANES];
    for_each_chunk(x, 0.0, |v| {
        for j in 0..LANES {
            acc[j] = v[j].mul_add(v[j], acc[j]);
        }
    });
    sum_lanes(acc)
}

/// `1 / sqrt(sum_sq / n + eps)`: the one scalar step of an RMS norm, shared by every path.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn rms_scale(sum_sq: f32, n: usize, eps: f32) -> f32 {
    1.0 / (sum_sq / n as f32 + eps).sqrt()
}

#[inline(always)]
pub(in crate::backend::cpu::kernels) fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let scale = rms_scale(sum_of_squares(x), x.len(), eps);
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v * scale) * w;
    }
}

/// `silu(g) · u = g / (1 + e^(0 − g)) · u`, with `numerics::exp`.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn silu_mul_one(g: f32, u: f32) -> f32 {
    (g / (1.0 + numerics::exp(0.0 - g))) * u
}

#[inline(always)]
pub(in crate::backend::cpu::kernels) fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu_mul_one(g, u);
    }
}

/// `gelu(g) · u` with `numerics::gelu_tanh`, element by element: the definition every path runs (the SIMD paths
/// run this code compiled with FMA, so no software `fmaf` is called).
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn gelu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = numerics::gelu_tanh(g) * u;
    }
}

#[inline(always)]
pub(in crate::backend::cpu::kernels) fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// The softmax's maximum: `max_lane(x[i], lane)` into 8 lanes starting at −inf, then the max tree.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn max_of(x: &[f32]) -> f32 {
    let mut acc: Lanes = [f32::NEG_INFINITY; LANES];
    for_each_chunk(x, f32::NEG_INFINITY, |v| {
        for j in 0..LANES {
            acc[j] = max_lane(v[j], acc[j]);
        }
    });
    max_of_lanes(acc)
}

/// `e^(x − max)` of one chunk into `v`, its lanes added to `acc`.
#[inline(always)]
fn exp_chunk(v: &mut Lanes, max: f32, acc: &mut Lanes) {
    for j in 0..LANES {
        v[j] = numerics::exp(v[j] - max);
        acc[j] += v[j];
    }
}

#[inline(always)]
pub(in crate::backend::cpu::kernels) fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
    let max = max_of(x);
    let mut acc: Lanes = [0.0; LANES];
    let (chunks, tail) = x.as_chunks_mut::<LANES>();
    for chunk in chunks {
        exp_chunk(chunk, max, &mut acc);
    }
    if !tail.is_empty() {
        // Padded with −inf, whose exponential adds +0 to the unused lanes, as in a SIMD path's last register.
        let mut v = numerics::padded(tail, f32::NEG_INFINITY);
        exp_chunk(&mut v, max, &mut acc);
        tail.copy_from_slice(&v[..tail.len()]);
    }
    let sum = sum_lanes(acc);
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
    (max, sum)
}

/// One pair's rotation as `vfmaddsub` computes it: `x0·c − (x1·s)` and `x1·c + (x0·s)`, each with one rounding
/// after its rounded product.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn rope_pair(x0: f32, x1: f32, c: f32, s: f32) -> (f32, f32) {
    (x0.mul_add(c, -(x1 * s)), x1.mul_add(c, x0 * s))
}

#[inline(always)]
pub(in crate::backend::cpu::kernels) fn rope(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
        (pair[0], pair[1]) = rope_pair(pair[0], pair[1], c, s);
    }
}

/// `q · key` with fused multiply-adds into 8 lanes (a padded last chunk adds `0·0`), then the lane tree.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn dot_f16(q: &[f32], key: &[f16]) -> f32 {
    let mut acc: Lanes = [0.0; LANES];
    let (q_chunks, q_tail) = q.as_chunks::<LANES>();
    let (k_chunks, k_tail) = key.as_chunks::<LANES>();
    for (qc, kc) in q_chunks.iter().zip(k_chunks) {
        for j in 0..LANES {
            acc[j] = qc[j].mul_add(kc[j].to_f32(), acc[j]);
        }
    }
    if !q_tail.is_empty() {
        let (mut qc, mut kc) = ([0f32; LANES], [0f32; LANES]);
        qc[..q_tail.len()].copy_from_slice(q_tail);
        for (k, &h) in kc.iter_mut().zip(k_tail) {
            *k = h.to_f32();
        }
        for j in 0..LANES {
            acc[j] = qc[j].mul_add(kc[j], acc[j]);
        }
    }
    sum_lanes(acc)
}

/// Each head's scores in turn, each the single-head dot product [`dot_f16`].
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn attention_scores_f16(
    queries: &[f32],
    keys: CacheRun<'_, f16>,
    out: &mut [f32],
    out_stride: usize,
) {
    for (g, q) in queries.chunks_exact(keys.width).enumerate() {
        for (i, o) in out[g * out_stride..][..keys.n].iter_mut().enumerate() {
            *o = dot_f16(q, &keys.rows[i * keys.stride..][..keys.width]);
        }
    }
}

/// Each head's `out[j] = w · v[j] + out[j]`, fused, position after position.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn attention_values_f16(
    weights: &[f32],
    weight_stride: usize,
    values: CacheRun<'_, f16>,
    out: &mut [f32],
) {
    for (g, out) in out.chunks_exact_mut(values.width).enumerate() {
        for (i, &w) in weights[g * weight_stride..][..values.n].iter().enumerate() {
            for (o, &v) in out.iter_mut().zip(&values.rows[i * values.stride..][..values.width]) {
                *o = w.mul_add(v.to_f32(), *o);
            }
        }
    }
}

/// The first index holding the maximum of the non-NaN values (0 when all are NaN).
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn argmax(x: &[f32]) -> usize {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in x.iter().enumerate() {
        // `v > m` is false for NaN, so NaN never wins; the first non-NaN value starts the search.
        if best.is_none_or(|(_, m)| v > m) && !v.is_nan() {
            best = Some((i, v));
        }
    }
    best.map_or(0, |(i, _)| i)
}
