//! Multi-head latent attention on the CPU (`LlamaBackend::latent_attention`; what it computes is in
//! `model/llama/latent.rs`): after the backend's projections of the step's rows (the queries, or their compressed
//! rank, and the compressed key row),
//!
//! 1. each key row's latent part is RMS-normalized and its last `rope_dim` dimensions rotated, and the row is stored
//!    in the keys-only cache;
//! 2. each query head's first `nope_dim` dimensions are absorbed through that head's `attn_k_b` (one matmul per head
//!    over all rows), its RoPE dimensions rotated behind them;
//! 3. [`attend`] runs the attention with one KV head whose values are the first `kv_lora_rank` elements of each
//!    cached row;
//! 4. each head's latent output is decompressed through its `attn_v_b`, into the output projection's input.
//!
//! The per-head matmuls run as one parallel region of a task per head, each over the step's rows gathered
//! head-major (`heads_in`: `[head][row][width]`), with the same kernels as every matmul: a row's result does not
//! depend on the other rows of the step, as everywhere in the backend.

use std::sync::Mutex;

use super::attention::{attend, prepare_head, AttentionScratch, Queries};
use super::backend::Precision;
use super::kernels::{BlockQ8A, Kernels, OutRows};
use super::kv_cache::CpuKvCache;
use super::model_weights::Matrix;
use super::parallel::{matmul_rows, Activations, MAX_TASKS};
use super::pool::ThreadPool;
use super::step::StepLayout;
use crate::model::gguf::blocks::QK;
use crate::model::llama::latent::LatentAttention;
use crate::model::llama::LlamaConfig;

/// One layer's latent-attention weights.
pub struct LatentWeights<'m> {
    /// `attn_q`, or `attn_q_b` when the queries go through a compressed rank (`q_a`).
    pub q: Matrix<'m>,
    /// `attn_q_a` and `attn_q_a_norm`, when the model compresses its queries.
    pub q_a: Option<(Matrix<'m>, Box<[f32]>)>,
    /// `attn_kv_a_mqa`: the compressed key row and its RoPE part.
    pub kv_a: Matrix<'m>,
    /// `attn_kv_a_norm`: the compressed part's norm.
    pub kv_a_norm: Box<[f32]>,
    /// Per head, `kv_lora_rank` rows of `nope_dim` (`attn_k_b`).
    pub k_b: Vec<Matrix<'m>>,
    /// Per head, `v_head_dim` rows of `kv_lora_rank` (`attn_v_b`).
    pub v_b: Vec<Matrix<'m>>,
}

impl LatentWeights<'_> {
    /// Every matrix.
    pub fn matrices(&self) -> impl Iterator<Item = &Matrix<'_>> {
        let q_a = self.q_a.iter().map(|(m, _)| m);
        [&self.q, &self.kv_a].into_iter().chain(q_a).chain(&self.k_b).chain(&self.v_b)
    }
}

/// The most heads a latent-attention model may have: a task each in one parallel region.
pub const MAX_LATENT_HEADS: usize = MAX_TASKS;

/// Buffers of the latent attention, sized once for `max_rows` rows.
pub struct LatentScratch {
    shapes: LatentAttention,
    /// `[T][q_lora_rank]`: the compressed queries (empty without one).
    pub q_latent: Vec<f32>,
    /// `[T][n_head × (kv_lora_rank + rope_dim)]`: the absorbed, rotated queries.
    queries: Vec<f32>,
    /// `[T][n_head × kv_lora_rank]`: the attention's output, still compressed.
    latent: Vec<f32>,
    /// `[n_head][T][max(nope_dim, kv_lora_rank)]`: a per-head matmul's inputs, gathered head-major.
    heads_in: Vec<f32>,
    /// The same quantized (fast path only).
    heads_q8: Vec<BlockQ8A>,
    /// `[n_head][T][max(kv_lora_rank, v_head_dim)]`: a per-head matmul's outputs.
    heads_out: Vec<f32>,
    /// `[max(kv_lora_rank, q_lora_rank, rope_dim)]`: a row being normalized or rotated.
    normed: Vec<f32>,
}

impl LatentScratch {
    pub fn new(config: &LlamaConfig, shapes: LatentAttention, max_rows: usize, precision: Precision) -> Self {
        let (n_head, r) = (config.n_head, shapes.kv_lora_rank);
        let rank = shapes.q_lora_rank.unwrap_or(0);
        let in_width = shapes.nope_dim.max(r);
        let quantized = precision == Precision::Quantized8;
        LatentScratch {
            shapes,
            q_latent: vec![0.0; max_rows * rank],
            queries: vec![0.0; max_rows * n_head * config.head_dim],
            latent: vec![0.0; max_rows * n_head * r],
            heads_in: vec![0.0; n_head * max_rows * in_width],
            heads_q8: if quantized { vec![BlockQ8A::ZERO; n_head * max_rows * in_width / QK] } else { Vec::new() },
            heads_out: vec![0.0; n_head * max_rows * r.max(shapes.v_head_dim)],
            normed: vec![0.0; r.max(rank).max(config.rope_dim)],
        }
    }
}

impl LatentScratch {
    /// The first `n` values of `q_latent` (rows as wide as `weight`) RMS-normalized in place.
    pub fn normalize_q_latent(&mut self, kernels: &Kernels, n: usize, weight: &[f32], eps: f32) -> &[f32] {
        normalize_rows_in_place(kernels, &mut self.q_latent[..n], weight, eps, &mut self.normed);
        &self.q_latent[..n]
    }
}

/// What the latent attention reads besides its buffers.
pub struct LatentOperands<'a, 'm> {
    pub pool: &'a ThreadPool,
    pub kernels: &'static Kernels,
    pub precision: Precision,
    pub config: &'a LlamaConfig,
    pub step: &'a StepLayout,
    pub weights: &'a LatentWeights<'m>,
    pub layer: usize,
}

/// Each row of `rows` (`weight.len()` wide) RMS-normalized in place, through `normed`.
fn normalize_rows_in_place(kernels: &Kernels, rows: &mut [f32], weight: &[f32], eps: f32, normed: &mut [f32]) {
    let normed = &mut normed[..weight.len()];
    for row in rows.chunks_exact_mut(weight.len()) {
        kernels.rms_norm(row, weight, eps, normed);
        row.copy_from_slice(normed);
    }
}

/// Steps 1–4 of the module documentation, from the projected queries `q` (`[T][n_head × (nope + rope)]`) and key
/// rows `keys` (`[T][kv_lora_rank + rope_dim]`, normalized and rotated here) into `out`
/// (`[T][n_head × v_head_dim]`).
pub fn latent_attention(
    op: &LatentOperands<'_, '_>,
    scratch: &mut LatentScratch,
    cache: &mut CpuKvCache,
    attention: &mut AttentionScratch,
    q: &[f32],
    keys: &mut [f32],
    out: &mut [f32],
) {
    let (config, kernels, step) = (op.config, op.kernels, op.step);
    let shapes = scratch.shapes;
    let (n_head, r, rope) = (config.n_head, shapes.kv_lora_rank, config.rope_dim);
    let (nope, kw, vw) = (shapes.nope_dim, config.head_dim, shapes.v_head_dim);
    let t = step.n_tokens();
    let attends = config.layers[op.layer];
    let kv_pool = cache.pool_of(op.layer);

    // 1. The key rows: the latent part normalized, the rest rotated; stored.
    for (row, key) in keys[..t * kw].chunks_exact_mut(kw).enumerate() {
        let (latent, pe) = key.split_at_mut(r);
        op.kernels.rms_norm(latent, &op.weights.kv_a_norm, config.rms_eps, &mut scratch.normed[..r]);
        latent.copy_from_slice(&scratch.normed[..r]);
        let (cos, sin) = step.rope(attends.rope, row);
        prepare_head(kernels, config, pe, None, cos, sin, &mut scratch.normed);
        cache.store(op.layer, step.slot(row, kv_pool), key, &[]);
    }

    // 2. The queries: each head's first `nope` dimensions through its `attn_k_b`, its RoPE part rotated behind.
    let q_head = nope + rope;
    for h in 0..n_head {
        for row in 0..t {
            let src = &q[row * n_head * q_head + h * q_head..][..nope];
            scratch.heads_in[(h * t + row) * nope..][..nope].copy_from_slice(src);
        }
    }
    per_head_matmul(op, &op.weights.k_b, &scratch.heads_in[..n_head * t * nope], &mut scratch.heads_q8, nope, t, r, {
        &mut scratch.heads_out[..n_head * t * r]
    });
    for row in 0..t {
        let (cos, sin) = step.rope(attends.rope, row);
        for h in 0..n_head {
            let query = &mut scratch.queries[row * n_head * kw + h * kw..][..kw];
            query[..r].copy_from_slice(&scratch.heads_out[(h * t + row) * r..][..r]);
            query[r..].copy_from_slice(&q[row * n_head * q_head + h * q_head + nope..][..rope]);
            prepare_head(kernels, config, &mut query[r..], None, cos, sin, &mut scratch.normed);
        }
    }

    // 3. Attention over the cache, its values the first `r` elements of each row.
    let queries = Queries::Rotated(&scratch.queries[..t * n_head * kw]);
    let latent = &mut scratch.latent[..t * n_head * r];
    attend(op.pool, kernels, config, step, cache, attention, op.layer, queries, &[], latent);

    // 4. Each head's output decompressed through its `attn_v_b`.
    for h in 0..n_head {
        for row in 0..t {
            let src = &scratch.latent[row * n_head * r + h * r..][..r];
            scratch.heads_in[(h * t + row) * r..][..r].copy_from_slice(src);
        }
    }
    per_head_matmul(op, &op.weights.v_b, &scratch.heads_in[..n_head * t * r], &mut scratch.heads_q8, r, t, vw, {
        &mut scratch.heads_out[..n_head * t * vw]
    });
    for row in 0..t {
        for h in 0..n_head {
            out[row * n_head * vw + h * vw..][..vw].copy_from_slice(&scratch.heads_out[(h * t + row) * vw..][..vw]);
        }
    }
}

/// `out[h][row] = weights[h] · input[h][row]` for every head `h` and row (`input` `[n_head][rows][in_width]`, `out`
/// `[n_head][rows][out_width]`), a task per head in one parallel region; the inputs quantized first on the fast
/// path (into `q8`).
#[allow(clippy::too_many_arguments)]
fn per_head_matmul(
    op: &LatentOperands<'_, '_>,
    weights: &[Matrix<'_>],
    input: &[f32],
    q8: &mut [BlockQ8A],
    in_width: usize,
    rows: usize,
    out_width: usize,
    out: &mut [f32],
) {
    let n_head = weights.len();
    let act = match op.precision {
        Precision::Quantized8 => {
            let q8 = &mut q8[..input.len() / QK];
            op.kernels.quantize_row_q8a(input, q8);
            Activations::Q8(q8)
        }
        Precision::Float32 => Activations::F32(input),
    };
    let per_head_act = |h: usize| match act {
        Activations::Q8(blocks) => {
            let n = rows * in_width / QK;
            Activations::Q8(&blocks[h * n..(h + 1) * n])
        }
        Activations::F32(values) => Activations::F32(&values[h * rows * in_width..(h + 1) * rows * in_width]),
    };
    let slots: [Mutex<Option<&mut [f32]>>; MAX_TASKS] = std::array::from_fn(|_| Mutex::new(None));
    for (slot, chunk) in slots.iter().zip(out.chunks_mut(rows * out_width)) {
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(chunk);
    }
    op.pool.run(n_head, &|h| {
        let Some(chunk) = slots[h].lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        let mut view = OutRows::new(chunk, rows, out_width);
        matmul_rows(op.kernels, per_head_act(h), &weights[h], rows, &mut view);
    });
}
