//! DeepSeek's multi-head latent attention enqueued on the stream (`Launch::LatentAttention`), the steps of
//! `model/llama/latent.rs` as the CPU's `cpu/latent.rs` runs them, everything on the device (a decode step replays
//! from a CUDA graph like any other):
//!
//! 1. the projections of the normalized rows: the queries (`attn_q`, or `attn_q_a`, `rms_norm` by `attn_q_a_norm`
//!    in place, `attn_q_b`) and the key rows (`attn_kv_a_mqa`, into `K`);
//! 2. `latent_keys`: each key row normalized and rotated into the keys-only cache;
//! 3. the absorption: each head's first `nope_dim` query dimensions gathered head-major (`heads_copy`), one
//!    projection per head through its rows of `attn_k_b`, then `latent_queries` writes each head's absorbed query
//!    and its rotated RoPE part into `Q`;
//! 4. `attention` (or `attention_wide`) over the cache with one KV head, its values each row's first
//!    `kv_lora_rank` elements;
//! 5. the decompression: each head's output gathered head-major, one projection per head through its rows of
//!    `attn_v_b`, scattered into `Att` (`[T][n_head · v_head_dim]`, the output projection's input).
//!
//! The per-head projections are `project_small` or the tiled matmul over the step's rows, as every projection, so a
//! token's result does not depend on the other rows of its step.

use super::buffers::LatentBuffers;
use super::calls::{AttentionCall, HeadShape, RmsNormCall};
use super::calls_latent::{HeadRows, HeadsCopyCall, LatentKeysCall, LatentQueriesCall};
use super::device_array::DeviceArray;
use super::error::CudaBackendError;
use super::execute::StepRun;
use crate::model::llama::forward::Buf;

fn internal(detail: &str) -> CudaBackendError {
    CudaBackendError::Internal(detail.to_owned())
}

impl StepRun<'_> {
    /// Layer `layer`'s latent attention of the normalized rows in `input`, into `Att`.
    pub(super) fn latent_attention(&self, layer: usize, input: Buf) -> Result<(), CudaBackendError> {
        let c = self.config;
        let shapes = c.latent.ok_or_else(|| internal("latent attention in a model without it"))?;
        let bufs = self.buffers.latent.as_ref().ok_or_else(|| internal("no latent-attention buffers"))?;
        let w = self.weights.latent(layer)?;
        let (s, t, n_head) = (self.stream, self.rows, c.n_head);
        let (r, nope, rope, vd) = (shapes.kv_lora_rank, shapes.nope_dim, c.rope_dim, shapes.v_head_dim);
        let LatentBuffers { q_latent, q, latent, heads_in, heads_out } = bufs;
        let (q, latent) = (DeviceArray::new(q, s), DeviceArray::new(latent, s));
        let (heads_in, heads_out) = (DeviceArray::new(heads_in, s), DeviceArray::new(heads_out, s));
        let x = self.buffers.activation(input, s);
        let (keys, queries, out) = (
            self.buffers.activation(Buf::K, s),
            self.buffers.activation(Buf::Q, s),
            self.buffers.activation(Buf::Att, s),
        );
        let tables = &self.buffers.rope[c.layers[layer].rope];
        let (cos, sin) = (DeviceArray::new(&tables.cos, s), DeviceArray::new(&tables.sin, s));
        let cache = self.cache.layer(layer, s)?;

        // 1. The projections.
        match (&w.q_a, shapes.q_lora_rank) {
            (Some((q_a, norm)), Some(rank)) => {
                let q_latent = DeviceArray::new(q_latent, s);
                self.dense(q_a, x, q_latent)?;
                let norm = RmsNormCall {
                    x: q_latent,
                    weight: DeviceArray::new(norm, s),
                    out: q_latent,
                    rows: None,
                    n_rows: t,
                    width: rank,
                    eps: c.rms_eps,
                    add: false,
                };
                self.kernels.rms_norm(s, &norm)?;
                self.dense(&w.q, q_latent, q)?;
            }
            (None, None) => self.dense(&w.q, x, q)?,
            _ => return Err(internal("a query rank without its weights, or weights without one")),
        }
        self.dense(&w.kv_a, x, keys)?;

        // 2. The key rows into the cache.
        let positions = self.meta.sub(self.layout.positions())?;
        let store = LatentKeysCall {
            kv: keys,
            norm: DeviceArray::new(&w.kv_a_norm, s),
            cos,
            sin,
            positions,
            slots: self.meta.sub(self.layout.slots())?,
            keys: cache.keys,
            key_type: cache.types.keys,
            n_slots: cache.slots,
            n_tokens: t,
            rank: r,
            rope_dim: rope,
            eps: c.rms_eps,
        };
        self.kernels.latent_keys(s, &store)?;

        // 3. The queries absorbed through attn_k_b, head by head, then their RoPE parts rotated behind them.
        let q_rows = HeadRows::token_major(n_head, nope + rope);
        self.per_head(q, q_rows, nope, heads_in, heads_out, r, |h| w.k_b(h, s))?;
        let absorbed = LatentQueriesCall {
            absorbed: heads_out,
            q,
            cos,
            sin,
            out: queries,
            n_tokens: t,
            n_head,
            rank: r,
            nope,
            rope_dim: rope,
        };
        self.kernels.latent_queries(s, &absorbed)?;

        // 4. Attention over the cache: one KV head, its values each row's first `r` elements.
        let attention = AttentionCall {
            q: queries,
            out: latent,
            cache,
            positions,
            table_offsets: self.meta.sub(self.layout.table_offsets())?,
            block_tables: self.meta.sub(self.layout.block_tables())?,
            shape: HeadShape { n_head, n_head_kv: 1, head_dim: r + rope, rope_dim: rope },
            block_size: self.cache.block_size(),
            n_tokens: t,
            window: c.layers[layer].window,
            scale: c.attention_scale,
            softcap: c.attn_softcap,
            sinks: None,
            value_dim: r,
            values_in_keys: true,
        };
        self.kernels.attention(s, &attention)?;

        // 5. Each head's output decompressed through attn_v_b, into Att.
        let latent_rows = HeadRows::token_major(n_head, r);
        self.per_head(latent, latent_rows, r, heads_in, heads_out, vd, |h| w.v_b(h, s))?;
        let scatter = HeadsCopyCall {
            src: heads_out,
            src_rows: HeadRows::head_major(t, vd),
            dst: out,
            dst_rows: HeadRows::token_major(n_head, vd),
            n_head,
            n_tokens: t,
            width: vd,
        };
        self.kernels.heads_copy(s, &scatter)
    }

    /// `out[h] = matrix(h) · in[h]` for every head `h` over the step's rows: the heads' `width`-wide rows of `src`
    /// (at `rows`) gathered head-major into `heads_in`, one projection each into `heads_out` (`[head][T][out_width]`).
    #[allow(clippy::too_many_arguments)]
    fn per_head<'a>(
        &self,
        src: DeviceArray<'_, f32>,
        rows: HeadRows,
        width: usize,
        heads_in: DeviceArray<'_, f32>,
        heads_out: DeviceArray<'_, f32>,
        out_width: usize,
        matrix: impl Fn(usize) -> Result<super::device_array::MatrixArray<'a>, CudaBackendError>,
    ) -> Result<(), CudaBackendError> {
        let (t, n_head) = (self.rows, self.config.n_head);
        let gather = HeadsCopyCall {
            src,
            src_rows: rows,
            dst: heads_in,
            dst_rows: HeadRows::head_major(t, width),
            n_head,
            n_tokens: t,
            width,
        };
        self.kernels.heads_copy(self.stream, &gather)?;
        for h in 0..n_head {
            let x = heads_in.sub(h * t * width..(h + 1) * t * width)?;
            let y = heads_out.sub(h * t * out_width..(h + 1) * t * out_width)?;
            self.dense_array(matrix(h)?, x, y)?;
        }
        Ok(())
    }
}
