//! Attention of one layer on the CPU: the heads' RMS norms where the architecture has them, RoPE (adjacent pairs,
//! or NEOX halves), appending keys and values to the paged cache, then causal grouped-query attention of every new
//! token over its sequence's cache, within the layer's sliding window where it has one.
//!
//! Each query's attention is computed span by span (`attention_spans.rs`: spans of 1024 positions at fixed cuts,
//! each with its own softmax, merged in order), for all the query heads that share a KV head at once (3 for
//! SmolLM2), so the cache is read once per KV head rather than once per query head. A query at position `p` reads
//! keys and values `0..=p` of its own sequence (`p + 1 − window..=p` in a windowed layer), its own included, with
//! the same operations in the same order whatever the task split: prefill and decode run the same code per query,
//! so a token's result does not depend on whether it was computed in a prompt chunk, as a decode step, or beside
//! other sequences, nor on the pool its layer's keys live in.
//!
//! Two splits into tasks ([`attend`] picks one):
//! - by KV head and ranges of the step's rows: a task computes whole rows of one KV head (all their spans). Tasks
//!   write into a staging buffer laid out `[kv_head][part][row][part's heads × value width]`, where each task's
//!   rows are one contiguous slice; one copy afterwards puts the heads in place in the `[row][n_head × value
//!   width]` output. A part is the whole group, except in latent attention (`HeadLayout::split_group`), whose one
//!   KV head serves every query head: there the group is split so that a decode step's one row still feeds every
//!   thread (each query head's arithmetic is the same whichever part computes it);
//! - by (row, span), when rows are too few to feed the threads and a row has several spans (decoding a long
//!   sequence): a task computes its spans for every KV head, streaming one contiguous range of the cache, into a
//!   buffer of partial results, which a second round of tasks folds per row and head in span order.
//!
//! Latent attention (`latent.rs`) runs the same tasks through [`attend`] on queries it prepared itself, with values
//! that are the first `value_width` elements of each cached key row.

use std::sync::{Mutex, TryLockError};

use bytemuck::Zeroable;

use super::attention_spans::{fold_span, spans_of, RowAttention, SoftmaxShare, SpanBuffers, SCORE_STRIDE};
use super::kernels::{BlockQ8A, Kernels};
use super::kv_cache::{CpuKvCache, KvPlane};
use super::pool::ThreadPool;
use super::step::StepLayout;
use crate::model::gguf::blocks::QK;
use crate::model::llama::LlamaConfig;

/// Runs `$body` with `$keys` and `$values` bound to a layer's planes (`KvLayer`) as slices of their element types:
/// one instance of the attention per pair of types. The precise path's f32 planes pair only with each other.
macro_rules! with_planes {
    ($layer:expr, |$keys:ident, $values:ident| $body:expr) => {
        match $layer.keys {
            KvPlane::F16($keys) => with_planes!(@values $layer, $values, $body),
            KvPlane::Q8_0($keys) => with_planes!(@values $layer, $values, $body),
            KvPlane::Q4_0($keys) => with_planes!(@values $layer, $values, $body),
            KvPlane::F32($keys) => match $layer.values {
                KvPlane::F32($values) => $body,
                _ => unreachable!("f32 keys come with f32 values"),
            },
        }
    };
    (@values $layer:expr, $values:ident, $body:expr) => {
        match $layer.values {
            KvPlane::F16($values) => $body,
            KvPlane::Q8_0($values) => $body,
            KvPlane::Q4_0($values) => $body,
            KvPlane::F32(_) => unreachable!("f32 values come with f32 keys"),
        }
    };
}

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

/// A task's private working memory, for every query head (`n_head`: a span task computes them all, a row task
/// one KV head's group).
struct TaskScratch {
    /// `[n_head][SCORE_STRIDE]`: one span's scores, then probabilities, of each query head (and a
    /// head's attention sink, `LlamaConfig::attn_sinks`).
    scores: Vec<f32>,
    /// `[n_head][key_width]`: the rotated, scaled queries.
    queries: Vec<f32>,
    /// `[n_head][key_width / 32]`: the same quantized, for keys in blocks.
    queries_q8: Vec<BlockQ8A>,
    /// `[n_head][value_width]`: a span's weighted sums of values.
    outputs: Vec<f32>,
    /// `[n_head]`: a span's softmax shares.
    shares: Vec<SoftmaxShare>,
    /// `[n_head][value_width]`: the spans so far, merged.
    merged: Vec<f32>,
    /// `[n_head]`: their shares.
    totals: Vec<SoftmaxShare>,
    /// `[key_width]`: a head being normalized or rotated.
    head: Vec<f32>,
}

impl TaskScratch {
    fn new(layout: &HeadLayout) -> Self {
        // Every query head: a span task computes all of them (`attend_by_spans`).
        let (n_head, kw, vw) = (layout.n_head_kv * layout.group, layout.key_width, layout.value_width);
        let share = SoftmaxShare { max: 0.0, sum: 0.0 };
        TaskScratch {
            scores: vec![0.0; n_head * SCORE_STRIDE],
            queries: vec![0.0; n_head * kw],
            queries_q8: vec![BlockQ8A::zeroed(); n_head * kw / QK],
            outputs: vec![0.0; n_head * vw],
            shares: vec![share; n_head],
            merged: vec![0.0; n_head * vw],
            totals: vec![share; n_head],
            head: vec![0.0; kw],
        }
    }

    /// The working space of one span of `heads` heads.
    fn span_buffers(&mut self) -> (SpanBuffers<'_>, &mut [f32], &mut [SoftmaxShare]) {
        let TaskScratch { scores, queries, queries_q8, outputs, shares, merged, totals, .. } = self;
        (SpanBuffers { scores, queries, queries_q8, outputs, shares }, merged, totals)
    }
}

/// Scratch memory of the attention: one working set per thread (at most that many tasks run at once), the
/// staging buffer of the outputs, and the spans' partial results when a step is split by spans.
pub struct AttentionScratch {
    tasks: Vec<Mutex<TaskScratch>>,
    /// `[n_head_kv][part][max_rows][part's heads × value_width]`.
    stage: Vec<f32>,
    /// `[key_width]`: a key head being normalized or rotated.
    key_head: Vec<f32>,
    /// `[unit][n_head][value_width + 2]`: each (row, span) unit's outputs and shares, when the step is split by
    /// spans; grown to the longest context seen.
    partials: Vec<f32>,
    /// The step's (row, span) units, when split by spans.
    units: Vec<(usize, usize)>,
}

impl AttentionScratch {
    pub fn new(config: &LlamaConfig, threads: usize, max_rows: usize) -> Self {
        let layout = HeadLayout::of(config);
        AttentionScratch {
            tasks: (0..threads.max(1)).map(|_| Mutex::new(TaskScratch::new(&layout))).collect(),
            stage: vec![0.0; max_rows * layout.output_width()],
            key_head: vec![0.0; layout.key_width],
            partials: Vec::new(),
            units: Vec::new(),
        }
    }
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
///
/// Split into tasks by KV head and rows ([`attend_by_rows`]), or, when that gives the threads too few tasks and
/// some row has several spans (a decode step of a long sequence), by (row, span) ([`attend_by_spans`]): the same
/// spans merged in the same order either way (`attention_spans`), so the split decides speed, never a value.
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
    let attention = LayerAttention {
        kernels,
        config,
        step,
        cache,
        layout: HeadLayout::of(config),
        layer,
        queries,
        sinks,
        quantized_keys: matches!(cache.layer(layer).keys, KvPlane::Q8_0(_) | KvPlane::Q4_0(_)),
    };
    let rows = step.n_tokens();
    scratch.units.clear();
    for t in 0..rows {
        let (first, positions) = attention.attended(t);
        scratch.units.extend(spans_of(first, positions).map(|span| (t, span)));
    }
    // Decode rows (each its sequence's only row) read their caches from memory: by spans, a task streams every KV
    // head of a span's blocks in address order, where a task of one KV head would read a block's slice of it.
    let decodes = (1..rows).all(|t| step.sequence_of_row(t) != step.sequence_of_row(t - 1));
    let few_tasks = rows * attention.layout.n_head_kv < 2 * pool.threads();
    if (few_tasks || decodes) && scratch.units.len() > rows {
        attend_by_spans(pool, &attention, scratch, out);
    } else {
        attend_by_rows(pool, &attention, scratch, out);
    }
}

/// What every task of one layer's attention reads.
struct LayerAttention<'a> {
    kernels: &'a Kernels,
    config: &'a LlamaConfig,
    step: &'a StepLayout,
    cache: &'a CpuKvCache,
    layout: HeadLayout,
    layer: usize,
    queries: Queries<'a>,
    sinks: &'a [f32],
    /// The keys are blocks, read against the queries quantized.
    quantized_keys: bool,
}

impl LayerAttention<'_> {
    /// The positions row `t` attends to: `first..positions`.
    fn attended(&self, t: usize) -> (usize, usize) {
        let positions = self.step.position(t) + 1;
        let first = self.config.layers[self.layer].window.map_or(0, |w| positions.saturating_sub(w));
        (first, positions)
    }

    /// Row `t`'s queries of heads `first_head..first_head + heads`, normalized and rotated where they are raw, then
    /// scaled, into `work.queries`.
    fn prepare_queries(&self, t: usize, first_head: usize, heads: usize, work: &mut TaskScratch) {
        let (kw, q_width) = (self.layout.key_width, self.layout.query_width());
        let (cos, sin) = self.step.rope(self.config.layers[self.layer].rope, t);
        for (g, query) in work.queries[..heads * kw].chunks_exact_mut(kw).enumerate() {
            let h = first_head + g;
            match &self.queries {
                Queries::Raw { values, norm } => {
                    query.copy_from_slice(&values[t * q_width + h * kw..][..kw]);
                    prepare_head(self.kernels, self.config, query, *norm, cos, sin, &mut work.head);
                }
                Queries::Rotated(values) => query.copy_from_slice(&values[t * q_width + h * kw..][..kw]),
            }
            query.iter_mut().for_each(|x| *x *= self.config.attention_scale);
        }
        if self.quantized_keys {
            let blocks = heads * kw / QK;
            self.kernels.quantize_row_q8a(&work.queries[..heads * kw], &mut work.queries_q8[..blocks]);
        }
    }

    /// Row `t`'s attention for KV heads `kv_heads`, `heads` query heads each, from `first_head` on; `prefetch`:
    /// whether it asks for the cache rows ahead of the kernels (`RowAttention::prefetch`).
    fn row(
        &self,
        t: usize,
        kv_heads: std::ops::Range<usize>,
        first_head: usize,
        heads: usize,
        prefetch: bool,
    ) -> RowAttention<'_> {
        let (kw, vw) = (self.layout.key_width, self.layout.value_width);
        let (first, positions) = self.attended(t);
        let all = kv_heads.len() * heads;
        RowAttention {
            kernels: self.kernels,
            cache: self.cache,
            block_table: self.step.block_table_of_row(t, self.cache.pool_of(self.layer)),
            first,
            positions,
            kv_head: kv_heads.start,
            kv_heads: kv_heads.len(),
            key_width: kw,
            value_width: vw,
            heads,
            softcap: self.config.attn_softcap,
            sinks: if self.sinks.is_empty() { None } else { Some(&self.sinks[first_head..first_head + all]) },
            prefetch,
        }
    }
}

/// Tasks of (KV head, part of its group, contiguous rows), each computing whole rows (all their spans) and owning
/// its rows of that part's plane of the stage.
fn attend_by_rows(pool: &ThreadPool, attention: &LayerAttention<'_>, scratch: &mut AttentionScratch, out: &mut [f32]) {
    let layout = attention.layout;
    let vw = layout.value_width;
    let out_width = layout.output_width();
    let rows = attention.step.n_tokens();
    let parts = layout.parts(rows, pool.threads());
    let part_heads = layout.group / parts;
    let part_width = part_heads * vw;

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

    let layer_kv = attention.cache.layer(attention.layer);
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
            attention.prepare_queries(t, first_head, part_heads, work);
            // A row of the same sequence as the task's row before it (a prompt chunk's rows are consecutive
            // positions) attends to the positions that row has just read: they come from the caches, and requests
            // for them would only take issue slots (11 % of a 16k prompt's samples). A row of another sequence (a
            // batch of decodes) reads its own cache from memory, and asks for it ahead.
            let same_sequence = i > 0 && attention.step.sequence_of_row(t) == attention.step.sequence_of_row(t - 1);
            let row = attention.row(t, kv_head..kv_head + 1, first_head, part_heads, !same_sequence);
            let (buf, merged, totals) = work.span_buffers();
            with_planes!(layer_kv, |keys, values| row.run(keys, values, buf, merged, totals));
            out_row.copy_from_slice(&work.merged[..part_width]);
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

/// Tasks of consecutive (row, span) units, each computing its spans for every KV head (a contiguous range of the
/// cache) into the partials; then tasks of rows, each folding its spans in order into the output.
fn attend_by_spans(pool: &ThreadPool, attention: &LayerAttention<'_>, scratch: &mut AttentionScratch, out: &mut [f32]) {
    let layout = attention.layout;
    let (group, vw) = (layout.group, layout.value_width);
    let n_head = layout.n_head_kv * group;
    let record = vw + 2;
    let unit_width = n_head * record;
    let AttentionScratch { tasks, partials, units, .. } = scratch;
    let (tasks, units) = (&*tasks, &*units);
    if partials.len() < units.len() * unit_width {
        partials.resize(units.len() * unit_width, 0.0);
    }

    // Tasks of whole units while there are two for each thread (a task each, up to `MAX_TASKS`: a unit is a span
    // of up to 1024 positions of every KV head, and three to a task left one thread idle for two of 17 at depth
    // 16,384); with fewer (a decode at a depth of one to a few spans), each unit's KV heads split into parts, a
    // task each, which read slices of each block and ask for them ahead (slower per byte than whole blocks, so
    // only where whole units would leave a thread idle). A task's records are one contiguous piece of the
    // partials either way.
    let threads = pool.threads();
    let parts = match units.len() {
        n if n >= 2 * threads => 1,
        n => (4 * threads).div_ceil(n).min(layout.n_head_kv).min(MAX_TASKS / n).max(1),
    };
    let kv_per_part = layout.n_head_kv.div_ceil(parts);
    let part_width = kv_per_part * group * record;
    type UnitSlot<'s> = Mutex<Option<(usize, usize, &'s mut [f32])>>;
    let slots: [UnitSlot<'_>; MAX_TASKS] = std::array::from_fn(|_| Mutex::new(None));
    let units_per_task = if parts == 1 { units.len().div_ceil(MAX_TASKS) } else { 1 };
    let mut n_tasks = 0;
    for (i, chunk) in partials[..units.len() * unit_width].chunks_mut(units_per_task * unit_width).enumerate() {
        let piece_width = if parts == 1 { chunk.len() } else { part_width };
        for (part, piece) in chunk.chunks_mut(piece_width).enumerate() {
            *slots[n_tasks].lock().unwrap_or_else(|e| e.into_inner()) =
                Some((i * units_per_task, part * kv_per_part, piece));
            n_tasks += 1;
        }
    }
    let layer_kv = attention.cache.layer(attention.layer);
    pool.run(n_tasks, &|task| {
        let Some((first_unit, first_kv, piece)) = slots[task].lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        // The task's KV heads: every one, or its part of each unit's (the last part may be shorter).
        let kv_heads = first_kv..layout.n_head_kv.min(first_kv + kv_per_part);
        let (first_head, heads) = (kv_heads.start * group, kv_heads.len() * group);
        let mut guard = acquire(tasks);
        let work = &mut *guard;
        let width = if parts == 1 { unit_width } else { piece.len() };
        for (unit, records) in piece.chunks_exact_mut(width).enumerate() {
            let (t, span) = units[first_unit + unit];
            // The KV heads in one span call: with every head, the span's cache blocks are read whole in address
            // order, a stream the hardware prefetchers follow without requests ahead; a part of the heads reads a
            // slice of each block, and asks for it ahead (`RowAttention::prefetch`).
            attention.prepare_queries(t, first_head, heads, work);
            let row = attention.row(t, kv_heads.clone(), first_head, group, parts > 1);
            let (buf, _, _) = work.span_buffers();
            with_planes!(layer_kv, |keys, values| row.span(span, keys, values, buf));
            for (h, rec) in records.chunks_exact_mut(record).enumerate() {
                rec[..vw].copy_from_slice(&work.outputs[h * vw..][..vw]);
                (rec[vw], rec[vw + 1]) = (work.shares[h].max, work.shares[h].sum);
            }
        }
    });

    // Fold each row's spans in order, every head, into the row's output.
    let partials = &partials[..units.len() * unit_width];
    let out_width = layout.output_width();
    let rows = attention.step.n_tokens();
    let rows_per_task = rows.div_ceil(MAX_TASKS);
    type Slot<'s> = Mutex<Option<(usize, &'s mut [f32])>>;
    let row_slots: [Slot<'_>; MAX_TASKS] = std::array::from_fn(|_| Mutex::new(None));
    let mut n_row_tasks = 0;
    for (i, piece) in out[..rows * out_width].chunks_mut(rows_per_task * out_width).enumerate() {
        *row_slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some((i * rows_per_task, piece));
        n_row_tasks += 1;
    }
    pool.run(n_row_tasks, &|task| {
        let Some((first_row, piece)) = row_slots[task].lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        for (i, out_row) in piece.chunks_exact_mut(out_width).enumerate() {
            let t = first_row + i;
            // Units are in row order: this row's are one range, its spans in order.
            let row_units = units.partition_point(|u| u.0 < t)..units.partition_point(|u| u.0 <= t);
            for (h, merged) in out_row.chunks_exact_mut(vw).enumerate() {
                let mut total = SoftmaxShare { max: 0.0, sum: 0.0 };
                for (k, u) in row_units.clone().enumerate() {
                    let rec = &partials[u * unit_width + h * record..][..record];
                    let share = SoftmaxShare { max: rec[vw], sum: rec[vw + 1] };
                    fold_span(k == 0, &mut total, merged, share, &rec[..vw]);
                }
            }
        }
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> Mutex<TaskScratch> {
        let layout = HeadLayout { n_head_kv: 0, group: 0, key_width: 0, value_width: 0, split_group: false };
        Mutex::new(TaskScratch::new(&layout))
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
