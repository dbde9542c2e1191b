//! Attention of one layer on the CPU: RoPE, appending keys and values to the paged cache, then causal
//! grouped-query attention of every new token over its sequence's cache.
//!
//! Each query head is one task of the pool (9 tasks for SmolLM2: enough for 2 threads, and a head's output is a
//! disjoint column range of the output). A query at position `p` reads keys and values `0..=p` of its own
//! sequence from the cache, its own included: prefill and decode run exactly the same code per query, so a
//! token's result does not depend on whether it was computed in a prompt chunk or as a decode step.

use std::sync::Mutex;

use super::kernels::{Kernels, OutRows};
use super::kv_cache::CpuKvCache;
use super::pool::ThreadPool;
use super::step::StepLayout;
use crate::model::llama::LlamaConfig;

/// Most query heads a model may have (the per-head views live in a fixed array: no allocation per step).
pub const MAX_HEADS: usize = 256;

/// Per-head scratch: attention scores for up to `context` positions, and one head's query and output.
pub struct AttentionScratch {
    heads: Vec<Mutex<HeadScratch>>,
}

struct HeadScratch {
    /// `[context]`.
    scores: Vec<f32>,
    /// `[head_dim]`.
    query: Vec<f32>,
    /// `[head_dim]`.
    output: Vec<f32>,
}

impl AttentionScratch {
    pub fn new(config: &LlamaConfig) -> Self {
        let heads = (0..config.n_head)
            .map(|_| {
                Mutex::new(HeadScratch {
                    scores: vec![0.0; config.context_length],
                    query: vec![0.0; config.head_dim],
                    output: vec![0.0; config.head_dim],
                })
            })
            .collect();
        AttentionScratch { heads }
    }
}

/// The operands of one layer's attention.
pub struct AttentionIo<'a> {
    /// `[T][n_embd]`: queries before RoPE.
    pub q: &'a [f32],
    /// `[T][kv_dim]`: keys before RoPE (rotated in place, then stored).
    pub k: &'a mut [f32],
    /// `[T][kv_dim]`.
    pub v: &'a [f32],
    /// `[T][n_embd]`: the output.
    pub out: &'a mut [f32],
}

/// Runs attention of `layer` for the step described by `step`.
#[allow(clippy::too_many_arguments)]
pub fn attention_layer(
    pool: &ThreadPool,
    kernels: &Kernels,
    config: &LlamaConfig,
    step: &StepLayout,
    cache: &mut CpuKvCache,
    scratch: &AttentionScratch,
    layer: usize,
    io: AttentionIo<'_>,
) {
    let (hd, kv_dim, d) = (config.head_dim, config.kv_dim(), config.n_embd);
    let t_count = step.n_tokens();

    // RoPE on the new keys, then append keys and values to the cache.
    for t in 0..t_count {
        let (cos, sin) = step.rope(t);
        let key = &mut io.k[t * kv_dim..(t + 1) * kv_dim];
        for head in key.chunks_exact_mut(hd) {
            kernels.rope(&mut head[..config.rope_dim], cos, sin);
        }
        cache.store(layer, step.slot(t), key, &io.v[t * kv_dim..(t + 1) * kv_dim]);
    }

    // One task per query head; each writes its own column range of `out`.
    let views: [Mutex<Option<OutRows<'_>>>; MAX_HEADS] = std::array::from_fn(|_| Mutex::new(None));
    let mut rest = OutRows::new(&mut io.out[..t_count * d], t_count, d);
    for (h, slot) in views.iter().enumerate().take(config.n_head - 1) {
        let (head, tail) = rest.split_at((h + 1) * hd);
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(head);
        rest = tail;
    }
    *views[config.n_head - 1].lock().unwrap_or_else(|e| e.into_inner()) = Some(rest);
    let cache = &*cache;
    let q = io.q;
    let group = config.n_head / config.n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    pool.run(config.n_head, &|h| {
        let mut view = views[h].lock().unwrap_or_else(|e| e.into_inner()).take().expect("one task per head");
        let mut guard = scratch.heads[h].lock().unwrap_or_else(|e| e.into_inner());
        let HeadScratch { scores, query, output } = &mut *guard;
        let (keys, values) = cache.layer(layer);
        let kv_offset = (h / group) * hd;
        for seq in step.seqs() {
            for t in seq.rows.clone() {
                let pos = step.position(t);
                query.copy_from_slice(&q[t * d + h * hd..t * d + (h + 1) * hd]);
                let (cos, sin) = step.rope(t);
                kernels.rope(&mut query[..config.rope_dim], cos, sin);
                query.iter_mut().for_each(|x| *x *= scale);

                let scores = &mut scores[..=pos];
                for (j, score) in scores.iter_mut().enumerate() {
                    let at = cache.slot(seq.block_table, j) * kv_dim + kv_offset;
                    *score = kernels.dot_f16(query, &keys[at..at + hd]);
                }
                kernels.softmax_inplace(scores);
                output.iter_mut().for_each(|x| *x = 0.0);
                for (j, &p) in scores.iter().enumerate() {
                    let at = cache.slot(seq.block_table, j) * kv_dim + kv_offset;
                    kernels.axpy_f16(output, p, &values[at..at + hd]);
                }
                view.write(t, h * hd, output);
            }
        }
    });
}
