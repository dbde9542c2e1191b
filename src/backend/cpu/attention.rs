//! Attention of one layer on the CPU: the heads' RMS norms where the architecture has them, RoPE (adjacent pairs,
//! or NEOX halves), appending keys and values to the paged cache, then causal grouped-query attention of every new
//! token over its sequence's cache, within the layer's sliding window where it has one.
//!
//! Work is split by key/value head and by ranges of the step's rows: a task takes one KV head and scores all the
//! query heads that share it (3 for SmolLM2) against each cached key, so the cache is read once per KV head rather
//! than once per query head. It walks the sequence's block table block by block (a windowed layer in the window
//! pool walks the window table). A query at position `p` reads keys and values `0..=p` of its own sequence
//! (`p + 1 − window..=p` in a windowed layer), its own included, with the same operations in the same order
//! whatever the task split: prefill and decode run the same code per query, so a token's result does not depend
//! on whether it was computed in a prompt chunk, as a decode step, or beside other sequences, nor on the pool its
//! layer's keys live in.
//!
//! Tasks write into a staging buffer laid out `[kv_head][part][row][part's heads × value width]`, where each task's
//! rows are one contiguous slice; one copy afterwards puts the heads in place in the `[row][n_head × value width]`
//! output. A part is the whole group, except in latent attention (`HeadLayout::split_group`), whose one KV head
//! serves every query head: there the group is split so that a decode step's one row still feeds every thread (each
//! query head's arithmetic is the same whichever part computes it).
//!
//! Latent attention (`latent.rs`) runs the same tasks through [`attend`] on queries it prepared itself, with values
//! that are the first `value_width` elements of each cached key row.

use std::sync::{Mutex, TryLockError};

use half::f16;

use super::kernels::numerics::soft_cap;
use super::kernels::{CacheRun, Kernels};
use super::kv_cache::{CpuKvCache, KvLayer};
use super::pool::ThreadPool;
use super::step::StepLayout;
use crate::model::llama::LlamaConfig;

/// Most tasks of one attention region (a fixed array of slots: nothing is allocated per step).
const MAX_TASKS: usize = 96;
/// Tasks each KV head's rows are split into, at most: enough for load balance on a few threads.
const TASKS_PER_KV_HEAD: usize = 16;

/// How the heads of a model's attention are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLayout {
    pub n_head_kv: usize,
    /// Query heads per KV head.
    pub group: usize,
    /// Width of a query head and of a cached key head (the dot products').
    pub key_width: usize,
    /// Width of a value head, and of an output head.
    pub value_width: usize,
    /// Split a KV head's query heads across tasks (latent attention's one KV head).
    pub split_group: bool,
}

impl HeadLayout {
    /// The layout of `config`'s attention: grouped-query heads of `head_dim`, or latent attention's one key row of
    /// `head_dim` whose first `kv_lora_rank` elements are the values.
    pub fn of(config: &LlamaConfig) -> Self {
        match &config.latent {
            Some(latent) => HeadLayout {
                n_head_kv: 1,
                group: config.n_head,
                key_width: config.head_dim,
                value_width: latent.kv_lora_rank,
                split_group: true,
            },
            None => HeadLayout {
                n_head_kv: config.n_head_kv,
                group: config.n_head / config.n_head_kv,
                key_width: config.head_dim,
                value_width: config.head_dim,
                split_group: false,
            },
        }
    }

    /// Width of a row of queries.
    fn query_width(&self) -> usize {
        self.n_head_kv * self.group * self.key_width
    }

    /// Width of a row of the output.
    fn output_width(&self) -> usize {
        self.n_head_kv * self.group * self.value_width
    }

    /// Parts each KV head's group is split into for a step of `rows` rows on `threads` threads: 1, or with
    /// `split_group` the smallest divisor of the group that gives every thread two tasks.
    fn parts(&self, rows: usize, threads: usize) -> usize {
        let row_tasks = TASKS_PER_KV_HEAD.min(rows).max(1);
        if !self.split_group || self.n_head_kv * row_tasks >= 2 * threads {
            return 1;
        }
        let wanted = (2 * threads).div_ceil(self.n_head_kv * row_tasks);
        (1..=self.group).find(|p| self.group.is_multiple_of(*p) && *p >= wanted).unwrap_or(self.group)
    }
}

/// A task's private working memory.
struct TaskScratch {
    /// `[group][context + 1]`: scores, then probabilities, of each query head of the group (the extra one is a
    /// head's attention sink, `LlamaConfig::attn_sinks`).
    scores: Vec<f32>,
    /// `[group][key_width]`: the rotated, scaled queries.
    queries: Vec<f32>,
    /// `[group][value_width]`: the weighted sums of values.
    outputs: Vec<f32>,
    /// `[key_width]`: a head being normalized or rotated.
    head: Vec<f32>,
}

/// Scratch memory of the attention: one working set per thread (at most that many tasks run at once) and the
/// staging buffer of the outputs.
pub struct AttentionScratch {
    tasks: Vec<Mutex<TaskScratch>>,
    /// `[n_head_kv][part][max_rows][part's heads × value_width]`.
    stage: Vec<f32>,
    /// `[key_width]`: a key head being normalized or rotated.
    key_head: Vec<f32>,
}

impl AttentionScratch {
    pub fn new(config: &LlamaConfig, threads: usize, max_rows: usize) -> Self {
        let layout = HeadLayout::of(config);
        let tasks = (0..threads.max(1))
            .map(|_| {
                Mutex::new(TaskScratch {
                    scores: vec![0.0; layout.group * score_stride(config)],
                    queries: vec![0.0; layout.group * layout.key_width],
                    outputs: vec![0.0; layout.group * layout.value_width],
                    head: vec![0.0; layout.key_width],
                })
            })
            .collect();
        AttentionScratch {
            tasks,
            stage: vec![0.0; max_rows * layout.output_width()],
            key_head: vec![0.0; layout.key_width],
        }
    }
}

/// The stride of one query head's scores in `TaskScratch::scores`: every position of the context and a sink.
fn score_stride(config: &LlamaConfig) -> usize {
    config.context_length + 1
}

/// The operands of one layer's attention.
pub struct AttentionIo<'a> {
    /// `[T][q_dim]`: queries before their norms and RoPE.
    pub q: &'a [f32],
    /// `[T][kv_dim]`: keys before RoPE (rotated in place, then stored).
    pub k: &'a mut [f32],
    /// `[T][kv_dim]`.
    pub v: &'a [f32],
    /// `[T][q_dim]`: the output.
    pub out: &'a mut [f32],
    /// The query and key heads' norm weights (`head_dim` each) when the architecture normalizes heads.
    pub head_norms: Option<(&'a [f32], &'a [f32])>,
    /// `[n_head]`: each query head's sink logit, or empty (`LlamaConfig::attn_sinks`).
    pub sinks: &'a [f32],
}

/// Prepares one query or key head in place: its RMS norm (`weight`, through `tmp`), then RoPE of its first
/// `rope_dim` dimensions, on adjacent pairs or, with `neox`, on dimensions `i` and `i + rope_dim / 2` (gathered
/// into pairs in `tmp`, rotated by the same kernel, scattered back: the same arithmetic per pair).
#[allow(clippy::too_many_arguments)]
pub(super) fn prepare_head(
    kernels: &Kernels,
    config: &LlamaConfig,
    head: &mut [f32],
    norm: Option<&[f32]>,
    cos: &[f32],
    sin: &[f32],
    tmp: &mut [f32],
) {
    if let Some(weight) = norm {
        kernels.rms_norm(head, weight, config.rms_eps, tmp);
        head.copy_from_slice(tmp);
    }
    let rot = &mut head[..config.rope_dim];
    if config.rope_neox {
        let half = rot.len() / 2;
        let pairs = &mut tmp[..rot.len()];
        for i in 0..half {
            (pairs[2 * i], pairs[2 * i + 1]) = (rot[i], rot[i + half]);
        }
        kernels.rope(pairs, cos, sin);
        for i in 0..half {
            (rot[i], rot[i + half]) = (pairs[2 * i], pairs[2 * i + 1]);
        }
    } else {
        kernels.rope(rot, cos, sin);
    }
}

/// A cache element type and what attention computes over a run of consecutive cache slots of it for the query
/// heads of one KV head (see `Kernels::attention_scores_f16` and `Kernels::attention_values_f16`).
trait KvElement: Copy {
    /// `out[g·out_stride + i] = queries[g] · keys.rows[i·keys.stride ..]`.
    fn scores(kernels: &Kernels, queries: &[f32], keys: CacheRun<'_, Self>, out: &mut [f32], out_stride: usize);
    /// `out[g] += Σ_i weights[g·weight_stride + i] · values.rows[i·values.stride ..]`, in position order.
    fn values(kernels: &Kernels, weights: &[f32], weight_stride: usize, values: CacheRun<'_, Self>, out: &mut [f32]);
}

impl KvElement for f16 {
    fn scores(kernels: &Kernels, queries: &[f32], keys: CacheRun<'_, f16>, out: &mut [f32], out_stride: usize) {
        kernels.attention_scores_f16(queries, keys, out, out_stride)
    }
    fn values(kernels: &Kernels, weights: &[f32], weight_stride: usize, values: CacheRun<'_, f16>, out: &mut [f32]) {
        kernels.attention_values_f16(weights, weight_stride, values, out)
    }
}

/// The precise path's f32 cache: plain loops (the compiler vectorizes them; this path is for checking, not speed).
impl KvElement for f32 {
    fn scores(_: &Kernels, queries: &[f32], keys: CacheRun<'_, f32>, out: &mut [f32], out_stride: usize) {
        for (g, q) in queries.chunks_exact(keys.width).enumerate() {
            for (i, o) in out[g * out_stride..][..keys.n].iter_mut().enumerate() {
                *o = q.iter().zip(&keys.rows[i * keys.stride..][..keys.width]).map(|(a, b)| a * b).sum();
            }
        }
    }
    fn values(_: &Kernels, weights: &[f32], weight_stride: usize, values: CacheRun<'_, f32>, out: &mut [f32]) {
        for (g, out) in out.chunks_exact_mut(values.width).enumerate() {
            for (i, &w) in weights[g * weight_stride..][..values.n].iter().enumerate() {
                out.iter_mut().zip(&values.rows[i * values.stride..][..values.width]).for_each(|(o, x)| *o += w * x);
            }
        }
    }
}

/// Runs attention of `layer` for the step described by `step`.
#[allow(clippy::too_many_arguments)]
pub fn attention_layer(
    pool: &ThreadPool,
    kernels: &Kernels,
    config: &LlamaConfig,
    step: &StepLayout,
    cache: &mut CpuKvCache,
    scratch: &mut AttentionScratch,
    layer: usize,
    io: AttentionIo<'_>,
) {
    let (hd, kv_dim) = (config.head_dim, config.kv_dim());
    let attends = config.layers[layer];
    let kv_pool = cache.pool_of(layer);
    let (q_norm, k_norm) = match io.head_norms {
        Some((q, k)) => (Some(q), Some(k)),
        None => (None, None),
    };

    // Norms and RoPE on the new keys, then append keys and values to the cache.
    for t in 0..step.n_tokens() {
        let (cos, sin) = step.rope(attends.rope, t);
        let key = &mut io.k[t * kv_dim..(t + 1) * kv_dim];
        for head in key.chunks_exact_mut(hd) {
            prepare_head(kernels, config, head, k_norm, cos, sin, &mut scratch.key_head);
        }
        cache.store(layer, step.slot(t, kv_pool), key, &io.v[t * kv_dim..(t + 1) * kv_dim]);
    }
    let queries = Queries::Raw { values: io.q, norm: q_norm };
    attend(pool, kernels, config, step, cache, scratch, layer, queries, io.sinks, io.out);
}

/// The queries [`attend`] reads, `[T][n_head × key_width]`.
pub enum Queries<'a> {
    /// Before their norms (`norm`, when the architecture has them) and RoPE, which each task applies.
    Raw { values: &'a [f32], norm: Option<&'a [f32]> },
    /// Rotated already (latent attention's); only the scale is still to apply.
    Rotated(&'a [f32]),
}

/// Causal attention of every row of the step over its sequence's cached keys and values of `layer` (stored
/// already, this step's included), into `out` (`[T][n_head × value_width]`, `HeadLayout::of(config)`).
#[allow(clippy::too_many_arguments)]
pub fn attend(
    pool: &ThreadPool,
    kernels: &Kernels,
    config: &LlamaConfig,
    step: &StepLayout,
    cache: &CpuKvCache,
    scratch: &mut AttentionScratch,
    layer: usize,
    queries: Queries<'_>,
    sinks: &[f32],
    out: &mut [f32],
) {
    let layout = HeadLayout::of(config);
    let (kw, vw) = (layout.key_width, layout.value_width);
    let (q_width, out_width) = (layout.query_width(), layout.output_width());
    let rows = step.n_tokens();
    let parts = layout.parts(rows, pool.threads());
    let part_heads = layout.group / parts;
    let part_width = part_heads * vw;
    let attends = config.layers[layer];
    let kv_pool = cache.pool_of(layer);

    // Tasks: (KV head, part of its group, contiguous rows), each owning its rows of that part's plane of the stage.
    let planes = layout.n_head_kv * parts;
    let per_plane = TASKS_PER_KV_HEAD.min(MAX_TASKS / planes).min(rows).max(1);
    let rows_per_task = rows.div_ceil(per_plane);
    type Slot<'s> = Mutex<Option<(usize, usize, &'s mut [f32])>>;
    let slots: [Slot<'_>; MAX_TASKS] = std::array::from_fn(|_| Mutex::new(None));
    let AttentionScratch { tasks, stage, .. } = scratch;
    let tasks = &*tasks;
    let mut n_tasks = 0;
    for (plane_index, plane) in stage[..planes * rows * part_width].chunks_mut(rows * part_width).enumerate() {
        for (i, piece) in plane.chunks_mut(rows_per_task * part_width).enumerate() {
            *slots[n_tasks].lock().unwrap_or_else(|e| e.into_inner()) = Some((plane_index, i * rows_per_task, piece));
            n_tasks += 1;
        }
    }

    let layer_kv = cache.layer(layer);
    let scale = config.attention_scale;
    pool.run(n_tasks, &|task| {
        let Some((plane, first_row, out)) = slots[task].lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let (kv_head, part) = (plane / parts, plane % parts);
        let first_head = kv_head * layout.group + part * part_heads;
        let mut guard = acquire(tasks);
        let work = &mut *guard;
        for (i, out_row) in out.chunks_exact_mut(part_width).enumerate() {
            let t = first_row + i;
            let (cos, sin) = step.rope(attends.rope, t);
            for (g, query) in work.queries[..part_heads * kw].chunks_exact_mut(kw).enumerate() {
                let h = first_head + g;
                match &queries {
                    Queries::Raw { values, norm } => {
                        query.copy_from_slice(&values[t * q_width + h * kw..][..kw]);
                        prepare_head(kernels, config, query, *norm, cos, sin, &mut work.head);
                    }
                    Queries::Rotated(values) => query.copy_from_slice(&values[t * q_width + h * kw..][..kw]),
                }
                query.iter_mut().for_each(|x| *x *= scale);
            }
            let positions = step.position(t) + 1;
            let row = RowAttention {
                kernels,
                cache,
                block_table: step.block_table_of_row(t, kv_pool),
                first: attends.window.map_or(0, |w| positions.saturating_sub(w)),
                positions,
                offset: kv_head * kw,
                kv_dim: layout.n_head_kv * kw,
                key_width: kw,
                value_width: vw,
                heads: part_heads,
                stride: score_stride(config),
                softcap: config.attn_softcap,
                sinks: if sinks.is_empty() { None } else { Some(&sinks[first_head..first_head + part_heads]) },
            };
            match layer_kv {
                KvLayer::F16 { keys, values } => row.run(keys, values, work),
                KvLayer::F32 { keys, values } => row.run(keys, values, work),
            }
            out_row.copy_from_slice(&work.outputs[..part_width]);
        }
    });

    // Put each plane's heads in place: out[t][first head of the plane × vw ..] = stage[plane][t].
    for (plane, staged_rows) in stage[..planes * rows * part_width].chunks(rows * part_width).enumerate() {
        let first_head = (plane / parts) * layout.group + (plane % parts) * part_heads;
        for (t, staged) in staged_rows.chunks_exact(part_width).enumerate() {
            let at = t * out_width + first_head * vw;
            out[at..at + part_width].copy_from_slice(staged);
        }
    }
}

/// A free working set: one always exists, because no more tasks run at once than there are threads.
///
/// A working set whose task panicked (its mutex poisoned) is taken like any other: it is scratch memory that every
/// task overwrites before reading, and skipping it would leave a later step spinning here for ever once every set
/// had been poisoned (the panic itself reaches the caller through the pool).
fn acquire(tasks: &[Mutex<TaskScratch>]) -> std::sync::MutexGuard<'_, TaskScratch> {
    loop {
        if let Some(guard) = try_acquire(tasks) {
            return guard;
        }
        std::hint::spin_loop();
    }
}

/// One pass of [`acquire`]: the first working set no other task holds.
fn try_acquire(tasks: &[Mutex<TaskScratch>]) -> Option<std::sync::MutexGuard<'_, TaskScratch>> {
    tasks.iter().find_map(|slot| match slot.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    })
}

/// Attention of one query row for the query heads of one KV head.
struct RowAttention<'a> {
    kernels: &'a Kernels,
    cache: &'a CpuKvCache,
    block_table: &'a [u32],
    /// Positions attended to: `first..positions` (the query's own, `positions − 1`, included).
    first: usize,
    positions: usize,
    /// Offset of the KV head within a cache row (of keys, and of values when they have a plane of their own).
    offset: usize,
    kv_dim: usize,
    /// Width of a key head (and of the queries).
    key_width: usize,
    /// Width of a value head (a prefix of the key head's when the values are the keys' plane).
    value_width: usize,
    /// Query heads in `TaskScratch::queries` (the part of the group this task computes).
    heads: usize,
    /// Stride of the per-head score rows in the scratch (`score_stride`).
    stride: usize,
    /// Gemma 2's cap on the scaled scores (`LlamaConfig::attn_softcap`).
    softcap: Option<f32>,
    /// The group's query heads' sink logits (gpt-oss): each joins its head's softmax as one more score, whose
    /// probability is dropped (it attends to no value), as ggml's `soft_max_ext` with sinks computes.
    sinks: Option<&'a [f32]>,
}

impl RowAttention<'_> {
    /// Scores every position against each query of `work.queries`, softmaxes, and sums the values into
    /// `work.outputs`. Keys and values are each read once, block by block.
    fn run<T: KvElement>(&self, keys: &[T], values: &[T], work: &mut TaskScratch) {
        let (kw, vw, first, n) = (self.key_width, self.value_width, self.first, self.positions);
        let TaskScratch { scores, queries, outputs, .. } = work;
        let (queries, outputs) = (&queries[..self.heads * kw], &mut outputs[..self.heads * vw]);
        // Score `i` belongs to position `first + i`.
        for (block, from, len, pos) in self.runs() {
            let keys = self.run_of(keys, block, from, len, kw);
            T::scores(self.kernels, queries, keys, &mut scores[pos - first..], self.stride);
        }
        for g in 0..self.heads {
            let row = &mut scores[g * self.stride..g * self.stride + n - first + 1];
            let (attended, sink) = row.split_at_mut(n - first);
            if let Some(cap) = self.softcap {
                attended.iter_mut().for_each(|s| *s = soft_cap(*s, cap));
            }
            match self.sinks {
                // The sink's score after the positions': the same softmax kernel, so the same bits on every path.
                Some(sinks) => {
                    sink[0] = sinks[g];
                    self.kernels.softmax_inplace(row);
                }
                None => self.kernels.softmax_inplace(attended),
            }
        }
        outputs.iter_mut().for_each(|x| *x = 0.0);
        for (block, from, len, pos) in self.runs() {
            let values = self.run_of(values, block, from, len, vw);
            T::values(self.kernels, &scores[pos - first..], self.stride, values, outputs);
        }
    }

    /// The attended positions as runs of cache slots, in position order: `(block, first slot, slots, position of
    /// the first slot)`.
    fn runs(&self) -> impl Iterator<Item = (u32, usize, usize, usize)> + '_ {
        let bs = self.cache.block_size();
        let (first, n) = (self.first, self.positions);
        (first / bs..n.div_ceil(bs)).map(move |b| {
            let from = first.max(b * bs) - b * bs;
            let to = n.min((b + 1) * bs) - b * bs;
            (self.block_table[b], from, to - from, b * bs + from)
        })
    }

    /// This KV head's rows in slots `from..from + len` of cache block `block` of one layer's `plane` (keys or
    /// values), `width` wide: from the head's first element in slot `from` to its `width`-th in slot
    /// `from + len − 1`, `kv_dim` apart.
    fn run_of<'p, T>(&self, plane: &'p [T], block: u32, from: usize, len: usize, width: usize) -> CacheRun<'p, T> {
        let first = (block as usize * self.cache.block_size() + from) * self.kv_dim + self.offset;
        CacheRun { rows: &plane[first..first + (len - 1) * self.kv_dim + width], width, stride: self.kv_dim, n: len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> Mutex<TaskScratch> {
        Mutex::new(TaskScratch { scores: Vec::new(), queries: Vec::new(), outputs: Vec::new(), head: Vec::new() })
    }

    #[test]
    fn a_working_set_poisoned_by_a_panicking_task_is_still_handed_out() {
        let tasks = [scratch()];
        let poison = std::panic::catch_unwind(|| {
            let _guard = tasks[0].lock().unwrap();
            panic!("a task panics while holding its working set");
        });
        assert!(poison.is_err() && tasks[0].is_poisoned());
        // Before, a poisoned set counted as busy: with every set poisoned, `acquire` spun for ever.
        let mut guard = try_acquire(&tasks).expect("the poisoned working set is free");
        guard.head.push(1.0);
        assert_eq!(guard.head, [1.0]);
        assert!(try_acquire(&tasks).is_none(), "a held set is not handed out twice");
    }
}
