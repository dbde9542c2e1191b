//! Scalar reference element-wise kernels (arguments checked by `Kernels`' methods).

use half::f16;

pub(super) fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let sum_sq: f32 = x.iter().map(|&v| v * v).sum();
    let scale = 1.0 / (sum_sq / x.len() as f32 + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = v * scale * w;
    }
}

pub(super) fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
}

pub(super) fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

pub(super) fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

pub(super) fn rope(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
        let (x0, x1) = (pair[0], pair[1]);
        pair[0] = x0 * c - x1 * s;
        pair[1] = x0 * s + x1 * c;
    }
}

pub(super) fn attention_scores_f16(q: &[f32], keys: &[f16], stride: usize, out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = q.iter().zip(&keys[i * stride..][..q.len()]).map(|(&a, &b)| a * b.to_f32()).sum();
    }
}

pub(super) fn attention_values_f16(weights: &[f32], values: &[f16], stride: usize, out: &mut [f32]) {
    let hd = out.len();
    for (i, &w) in weights.iter().enumerate() {
        for (o, &v) in out.iter_mut().zip(&values[i * stride..][..hd]) {
            *o += w * v.to_f32();
        }
    }
}

/// The first index holding the maximum of the non-NaN values (0 when all are NaN).
pub(super) fn argmax(x: &[f32]) -> usize {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in x.iter().enumerate() {
        // `v > m` is false for NaN, so NaN never wins; the first non-NaN value starts the search.
        if best.is_none_or(|(_, m)| v > m) && !v.is_nan() {
            best = Some((i, v));
        }
    }
    best.map_or(0, |(i, _)| i)
}
