//! One query row's attention for the query heads of one KV head, span by span, and the merge of the spans.
//!
//! The attended positions are cut into spans at fixed multiples of [`SPAN`] positions (absolute positions, so
//! the cuts do not depend on the row, the window or the step). Each span gets its own softmax (normalized within
//! the span) and weighted sum of values; the spans are then merged in position order, each merge a weighted
//! average of the running output and the span's, by their shares of the whole softmax's denominator. A row whose
//! positions lie in one span gets exactly the single softmax's bits (the merge of one span is that span).
//!
//! Why spans: a decode step of one long sequence has one row per KV head to compute, too few tasks for the
//! threads (SmolLM2's 3 KV heads on 2 threads left one thread idle a third of the time); spans let the step split
//! by positions, a task per span, each streaming a contiguous range of the cache for every KV head. A task that
//! holds a whole row computes the same spans and merges them in the same order with the same operations as the
//! merge after per-span tasks, so a token's result does not depend on which split ran (the batch invariance the
//! kernels keep), and the scores a task holds are one span's, not the whole context's.

use half::f16;

use super::kernels::numerics::soft_cap;
use super::kernels::{BlockQ8A, CacheRun, Kernels};
use super::kv_cache::CpuKvCache;
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ8_0, QK};

/// Positions of a span. 1024 rather than 256: a prompt within one span keeps the bits of a single softmax, and
/// with 256 a near-tie greedy token of a ~300-token tool prompt flipped (`tests/protocol_tools.rs`); 1024 still
/// gives a decode step at depth 4096 four tasks.
pub(super) const SPAN: usize = 1024;
/// The stride of one query head's scores in a task's scores: a span's positions and a sink.
pub(super) const SCORE_STRIDE: usize = SPAN + 1;

/// How far ahead of the kernels the cache rows are prefetched, in positions. Measured at the 1B shapes (8 KV heads
/// of 64, blocks of 16 slots), depth 4096, 2 threads: decode 29 → 35 tokens/s with one block ahead and 38 with
/// four, eight no faster (with a position's heads together in the cache); with each head's slots together, 27–28
/// without it and 38–42 with it; 32 to 256 positions alike within the noise.
const PREFETCH_POSITIONS: usize = 64;

/// Most cache runs (blocks) per values kernel call, for a row whose cache comes from the caches: 256 positions at
/// the default block size. A 16,384-token prompt's prefill on two layers of the 1B shapes (2 threads, Zen 5):
/// 844–857 tokens/s with one run per call, 924–936 with 16.
const RUNS_PER_CALL: usize = 16;

/// The rows of a span's runs handed to a prefetch in position order, ahead of the runs being computed.
struct Prefetch<I> {
    runs: I,
    /// The run being prefetched: `(block, first slot, slots, its first position)`.
    current: Option<(u32, usize, usize, usize)>,
    /// Its rows prefetched so far.
    done: usize,
}

impl<I: Iterator<Item = (u32, usize, usize, usize)>> Prefetch<I> {
    /// Prefetches (`fetch(block, first slot, slots)`) the rows of the positions before `end` not prefetched yet.
    fn until(&mut self, end: usize, mut fetch: impl FnMut(u32, usize, usize)) {
        loop {
            let (block, from, len, pos) = match self.current {
                Some(run) if self.done < run.2 => run,
                _ => match self.runs.next() {
                    Some(run) => {
                        self.current = Some(run);
                        self.done = 0;
                        run
                    }
                    None => return,
                },
            };
            let at = pos + self.done;
            if at >= end {
                return;
            }
            let rows = (end - at).min(len - self.done);
            fetch(block, from + self.done, rows);
            self.done += rows;
        }
    }
}

/// Cache elements per item of a plane's rows: 1, or 32 in a block.
pub(super) trait Item: Copy {
    const ELEMENTS: usize;
}

impl Item for f16 {
    const ELEMENTS: usize = 1;
}

impl Item for f32 {
    const ELEMENTS: usize = 1;
}

impl Item for BlockQ8_0 {
    const ELEMENTS: usize = QK;
}

impl Item for BlockQ4_0 {
    const ELEMENTS: usize = QK;
}

/// A key plane's element type and the scores attention computes over a run of consecutive cache slots of it for
/// the query heads of one KV head (see `Kernels::attention_scores_f16` and `Kernels::attention_scores_q8_0`).
pub(super) trait KvKey: Item {
    /// Whether the scores read the queries quantized (`SpanBuffers::queries_q8`) rather than as floats.
    const QUANTIZED_QUERIES: bool;
    /// `out[g·out_stride + i] = query g · keys.rows[i·keys.stride ..]`.
    fn scores(
        kernels: &Kernels,
        queries: &[f32],
        queries_q8: &[BlockQ8A],
        keys: CacheRun<'_, Self>,
        out: &mut [f32],
        out_stride: usize,
    );
}

/// A value plane's element type and the weighted sums attention computes over a run of it.
pub(super) trait KvValue: Item {
    /// `out[g] += Σ_i weights[g·weight_stride + i] · values.rows[i·values.stride ..]`, in position order.
    fn values(kernels: &Kernels, weights: &[f32], weight_stride: usize, values: CacheRun<'_, Self>, out: &mut [f32]);

    /// [`KvValue::values`] over `runs` in order, run `k`'s weights after those of the runs before it: the same
    /// bits as one call per run, which is what this default does.
    fn values_runs(
        kernels: &Kernels,
        weights: &[f32],
        weight_stride: usize,
        runs: &[CacheRun<'_, Self>],
        out: &mut [f32],
    ) {
        let mut done = 0;
        for run in runs {
            Self::values(kernels, &weights[done..], weight_stride, *run, out);
            done += run.n;
        }
    }
}

impl KvKey for f16 {
    const QUANTIZED_QUERIES: bool = false;
    fn scores(k: &Kernels, q: &[f32], _: &[BlockQ8A], keys: CacheRun<'_, f16>, out: &mut [f32], stride: usize) {
        k.attention_scores_f16(q, keys, out, stride)
    }
}

impl KvValue for f16 {
    fn values(kernels: &Kernels, weights: &[f32], weight_stride: usize, values: CacheRun<'_, f16>, out: &mut [f32]) {
        kernels.attention_values_f16(weights, weight_stride, values, out)
    }

    fn values_runs(
        kernels: &Kernels,
        weights: &[f32],
        weight_stride: usize,
        runs: &[CacheRun<'_, f16>],
        out: &mut [f32],
    ) {
        kernels.attention_values_f16_runs(weights, weight_stride, runs, out)
    }
}

impl KvKey for BlockQ8_0 {
    const QUANTIZED_QUERIES: bool = true;
    fn scores(k: &Kernels, _: &[f32], q: &[BlockQ8A], keys: CacheRun<'_, Self>, out: &mut [f32], stride: usize) {
        k.attention_scores_q8_0(q, keys, out, stride)
    }
}

impl KvValue for BlockQ8_0 {
    fn values(kernels: &Kernels, weights: &[f32], weight_stride: usize, values: CacheRun<'_, Self>, out: &mut [f32]) {
        kernels.attention_values_q8_0(weights, weight_stride, values, out)
    }
}

impl KvKey for BlockQ4_0 {
    const QUANTIZED_QUERIES: bool = true;
    fn scores(k: &Kernels, _: &[f32], q: &[BlockQ8A], keys: CacheRun<'_, Self>, out: &mut [f32], stride: usize) {
        k.attention_scores_q4_0(q, keys, out, stride)
    }
}

impl KvValue for BlockQ4_0 {
    fn values(kernels: &Kernels, weights: &[f32], weight_stride: usize, values: CacheRun<'_, Self>, out: &mut [f32]) {
        kernels.attention_values_q4_0(weights, weight_stride, values, out)
    }
}

/// The precise path's f32 cache: plain loops (the compiler vectorizes them; this path is for checking, not speed).
impl KvKey for f32 {
    const QUANTIZED_QUERIES: bool = false;
    fn scores(_: &Kernels, q: &[f32], _: &[BlockQ8A], keys: CacheRun<'_, f32>, out: &mut [f32], out_stride: usize) {
        for (g, q) in q.chunks_exact(keys.width).enumerate() {
            for (i, o) in out[g * out_stride..][..keys.n].iter_mut().enumerate() {
                *o = q.iter().zip(&keys.rows[i * keys.stride..][..keys.width]).map(|(a, b)| a * b).sum();
            }
        }
    }
}

impl KvValue for f32 {
    fn values(_: &Kernels, weights: &[f32], weight_stride: usize, values: CacheRun<'_, f32>, out: &mut [f32]) {
        for (g, out) in out.chunks_exact_mut(values.width).enumerate() {
            for (i, &w) in weights[g * weight_stride..][..values.n].iter().enumerate() {
                out.iter_mut().zip(&values.rows[i * values.stride..][..values.width]).for_each(|(o, x)| *o += w * x);
            }
        }
    }
}

/// The spans holding positions `first..positions`.
pub(super) fn spans_of(first: usize, positions: usize) -> std::ops::Range<usize> {
    first / SPAN..positions.div_ceil(SPAN)
}

/// What a span or a merge of spans has computed for one head: the maximum score, the sum of the exponentials
/// relative to it, and (beside it, in the caller's buffer) the output normalized by that sum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct SoftmaxShare {
    pub max: f32,
    pub sum: f32,
}

/// Merges a span (`share`, `output`) into the running result of the spans before it (`running`, `merged`): the
/// weighted average of the two outputs by their shares of the merged denominator, relative to the larger
/// maximum. Plain f32 operations (the same code on every kernel path).
pub(super) fn merge_span(running: &mut SoftmaxShare, merged: &mut [f32], share: SoftmaxShare, output: &[f32]) {
    let max = running.max.max(share.max);
    let a = running.sum * (running.max - max).exp();
    let b = share.sum * (share.max - max).exp();
    let sum = a + b;
    let (alpha, beta) = (a / sum, b / sum);
    for (m, &o) in merged.iter_mut().zip(output) {
        *m = alpha.mul_add(*m, beta * o);
    }
    *running = SoftmaxShare { max, sum };
}

/// Folds a span into the result of the spans before it: the first span of a row is taken as it is (so a row of
/// one span keeps the single softmax's bits), each later one merged ([`merge_span`]).
pub(super) fn fold_span(
    first: bool,
    total: &mut SoftmaxShare,
    merged: &mut [f32],
    share: SoftmaxShare,
    output: &[f32],
) {
    if first {
        merged.copy_from_slice(output);
        *total = share;
    } else {
        merge_span(total, merged, share, output);
    }
}

/// A task's buffers for one span of one row and KV head.
pub(super) struct SpanBuffers<'w> {
    /// `[heads][SCORE_STRIDE]`: scores, then probabilities.
    pub scores: &'w mut [f32],
    /// `[heads][key_width]`: the rotated, scaled queries.
    pub queries: &'w [f32],
    /// `[heads][key_width / 32]`: the same quantized, when the keys are blocks.
    pub queries_q8: &'w [BlockQ8A],
    /// `[heads][value_width]`: the span's outputs.
    pub outputs: &'w mut [f32],
    /// `[heads]`: the span's softmax shares.
    pub shares: &'w mut [SoftmaxShare],
}

/// Attention of one query row for the query heads of one KV head.
pub(super) struct RowAttention<'a> {
    pub kernels: &'a Kernels,
    pub cache: &'a CpuKvCache,
    pub block_table: &'a [u32],
    /// Positions attended to: `first..positions` (the query's own, `positions − 1`, included).
    pub first: usize,
    pub positions: usize,
    /// The first KV head, and how many consecutive KV heads the row computes (each with `heads` query heads):
    /// one in a task of one KV head's rows; in a task of one span of a long row all of them, so that each cache
    /// block is read whole, in address order (see [`RowAttention::span`]), or a part of them when spans are too few
    /// to feed the threads (`attend_by_spans`).
    pub kv_head: usize,
    pub kv_heads: usize,
    /// Width of a key head (and of the queries).
    pub key_width: usize,
    /// Width of a value head (a prefix of the key head's when the values are the keys' plane).
    pub value_width: usize,
    /// Query heads computed per KV head (the part of the group this task computes).
    pub heads: usize,
    /// Gemma 2's cap on the scaled scores (`LlamaConfig::attn_softcap`).
    pub softcap: Option<f32>,
    /// The heads' sink logits (gpt-oss), `kv_heads × heads` of them: each joins its head's softmax as one more
    /// score, whose probability is dropped (it attends to no value), as ggml's `soft_max_ext` with sinks computes.
    /// It joins the last span's softmax, so that a row of one span computes what one softmax over all positions
    /// and the sink computes.
    pub sinks: Option<&'a [f32]>,
    /// Whether to ask for each run's cache rows `PREFETCH_POSITIONS` ahead of the kernels: where they come from
    /// memory as one KV head's runs (a task's first row, or a row of another sequence than the row before it, in
    /// a task of one KV head's rows). A task of every KV head reads whole blocks in address order, which the
    /// hardware prefetchers follow, and asks for nothing: there, 64 positions of every head ahead (64 KiB at the 1B
    /// shapes, more than L1) measured slower than no requests (`attend_by_spans`). Changes timing only, never a
    /// result.
    pub prefetch: bool,
}

impl RowAttention<'_> {
    /// The spans of this row.
    pub fn spans(&self) -> std::ops::Range<usize> {
        spans_of(self.first, self.positions)
    }

    /// Span `span` of this row: scores of its positions against each query of `buf.queries`, their softmax (with
    /// the sink in the last span), and the probabilities' weighted sum of values into `buf.outputs`, with each
    /// head's share in `buf.shares`; the buffers hold the row's KV heads one after the other (`[kv head][heads]…`).
    /// Keys and values are each read once, block by block, every KV head of a block before the next block: a
    /// block holds each head's slots together, so the heads of a block are one contiguous range of memory and a
    /// long row's span streams it in address order (one KV head's run is only `block size × width` elements).
    /// Each head's scores and sums come from the same kernel calls on the same runs in the same order whatever
    /// `kv_heads` is.
    pub fn span<K: KvKey, V: KvValue>(&self, span: usize, keys: &[K], values: &[V], buf: SpanBuffers<'_>) {
        let (kw, vw, heads) = (self.key_width, self.value_width, self.heads);
        let all = self.kv_heads * heads;
        let lo = self.first.max(span * SPAN);
        let hi = self.positions.min((span + 1) * SPAN);
        let SpanBuffers { scores, queries, queries_q8, outputs, shares } = buf;
        let (queries, outputs) = (&queries[..all * kw], &mut outputs[..all * vw]);
        let queries_q8 = if K::QUANTIZED_QUERIES { &queries_q8[..all * kw / QK] } else { &[] };
        let kv_heads = || (0..self.kv_heads).map(|j| (j, self.kv_head + j));
        // Score `i` belongs to position `lo + i`.
        let mut ahead = Prefetch { runs: self.runs(lo, hi), current: None, done: 0 };
        for (block, from, len, pos) in self.runs(lo, hi) {
            if self.prefetch {
                ahead.until(pos + len + PREFETCH_POSITIONS, |block, from, len| {
                    kv_heads().for_each(|(_, h)| self.run_of::<K>(keys, h, block, from, len, kw).prefetch())
                });
            }
            for (j, h) in kv_heads() {
                let run = self.run_of::<K>(keys, h, block, from, len, kw);
                let q8 = if K::QUANTIZED_QUERIES { &queries_q8[j * heads * kw / QK..][..heads * kw / QK] } else { &[] };
                let out = &mut scores[j * heads * SCORE_STRIDE + pos - lo..];
                K::scores(self.kernels, &queries[j * heads * kw..][..heads * kw], q8, run, out, SCORE_STRIDE);
            }
        }
        let sink = self.sinks.filter(|_| hi == self.positions);
        for (g, share) in shares[..all].iter_mut().enumerate() {
            let row = &mut scores[g * SCORE_STRIDE..][..hi - lo + 1];
            let (attended, sink_score) = row.split_at_mut(hi - lo);
            if let Some(cap) = self.softcap {
                attended.iter_mut().for_each(|s| *s = soft_cap(*s, cap));
            }
            // The sink's score after the positions': the same softmax kernel, so the same bits on every path.
            let (max, sum) = match sink {
                Some(sinks) => {
                    sink_score[0] = sinks[g];
                    self.kernels.softmax_inplace(row)
                }
                None => self.kernels.softmax_inplace(attended),
            };
            *share = SoftmaxShare { max, sum };
        }
        outputs.iter_mut().for_each(|x| *x = 0.0);
        let mut ahead = Prefetch { runs: self.runs(lo, hi), current: None, done: 0 };
        // A row whose cache comes from the caches (a prompt's row after its task's first: the row before it has
        // just read the same runs) takes up to `RUNS_PER_CALL` of its KV head's runs per values call, so that a
        // path keeps the head's sums in registers across them instead of loading and storing them for every 16
        // slots (one core, from L2: twice the speed over 64 slots as over 16); the runs are read in the same order.
        // A row that reads from memory keeps one run per call: a task of several KV heads reads each block's heads
        // one after the other, in address order (see the doc above), and a prefetching row asks for each run a
        // fixed distance ahead of the one it computes.
        let per_call = if self.kv_heads == 1 && !self.prefetch { RUNS_PER_CALL } else { 1 };
        let mut runs = self.runs(lo, hi);
        let mut group = [(0u32, 0usize, 0usize, 0usize); RUNS_PER_CALL];
        loop {
            let count = group[..per_call].iter_mut().map_while(|slot| runs.next().map(|run| *slot = run)).count();
            let Some(&(_, _, len, pos)) = group[..count].last() else { break };
            if self.prefetch {
                ahead.until(pos + len + PREFETCH_POSITIONS, |block, from, len| {
                    kv_heads().for_each(|(_, h)| self.run_of::<V>(values, h, block, from, len, vw).prefetch())
                });
            }
            let first_pos = group[0].3;
            for (j, h) in kv_heads() {
                let run = |k: usize| {
                    let (block, from, len, _) = group[k];
                    self.run_of::<V>(values, h, block, from, len, vw)
                };
                // Only the group's runs are computed (a decode's call takes one).
                let mut cache_runs = [run(0); RUNS_PER_CALL];
                for (k, slot) in cache_runs.iter_mut().enumerate().take(count).skip(1) {
                    *slot = run(k);
                }
                let weights = &scores[j * heads * SCORE_STRIDE + first_pos - lo..];
                let out = &mut outputs[j * heads * vw..][..heads * vw];
                V::values_runs(self.kernels, weights, SCORE_STRIDE, &cache_runs[..count], out);
            }
        }
    }

    /// Every span of this row, folded in order ([`fold_span`]) into `merged` (`[heads][value_width]`) and
    /// `totals` (`[heads]`); `buf` is each span's working space.
    pub fn run<K: KvKey, V: KvValue>(
        &self,
        keys: &[K],
        values: &[V],
        buf: SpanBuffers<'_>,
        merged: &mut [f32],
        totals: &mut [SoftmaxShare],
    ) {
        let (vw, all) = (self.value_width, self.kv_heads * self.heads);
        let SpanBuffers { scores, queries, queries_q8, outputs, shares } = buf;
        for (k, span) in self.spans().enumerate() {
            let buf =
                SpanBuffers { scores: &mut *scores, queries, queries_q8, outputs: &mut *outputs, shares: &mut *shares };
            self.span(span, keys, values, buf);
            for (g, total) in totals[..all].iter_mut().enumerate() {
                fold_span(k == 0, total, &mut merged[g * vw..][..vw], shares[g], &outputs[g * vw..][..vw]);
            }
        }
    }

    /// The positions `lo..hi` as runs of cache slots, in position order: `(block, first slot, slots, position of
    /// the first slot)`.
    fn runs(&self, lo: usize, hi: usize) -> impl Iterator<Item = (u32, usize, usize, usize)> + '_ {
        let bs = self.cache.block_size();
        (lo / bs..hi.div_ceil(bs)).map(move |b| {
            let from = lo.max(b * bs) - b * bs;
            let to = hi.min((b + 1) * bs) - b * bs;
            (self.block_table[b], from, to - from, b * bs + from)
        })
    }

    /// KV head `kv_head`'s rows in slots `from..from + len` of cache block `block` of one layer's `plane` (keys or
    /// values), the first `width` elements of each: from the head's first item in slot `from` to its last in slot
    /// `from + len − 1` (`CpuKvCache::head_rows`), counted in items of `T` (elements, or blocks of 32).
    fn run_of<'p, T: Item>(
        &self,
        plane: &'p [T],
        kv_head: usize,
        block: u32,
        from: usize,
        len: usize,
        width: usize,
    ) -> CacheRun<'p, T> {
        let (first, stride) = self.cache.head_rows(block as usize, from, kv_head);
        let (first, stride, width) = (first / T::ELEMENTS, stride / T::ELEMENTS, width / T::ELEMENTS);
        CacheRun { rows: &plane[first..first + (len - 1) * stride + width], width, stride, n: len }
    }
}
