//! The forward pass, written once over the [`LlamaBackend`] operations that each backend implements; what an
//! architecture changes is data of [`LlamaConfig`] (the bracketed steps below), not another copy of this loop.
//!
//! ```text
//! x = embed(tokens) [· embed_scale]                    [T, d]   T = new tokens of the whole batch
//! for each block l:
//!     xn = rms_norm(x, attn_norm[l])                   [no pre_norms (OLMo 2): xn = x]
//!     q, k, v = xn·Wq[l]ᵀ, xn·Wk[l]ᵀ, xn·Wv[l]ᵀ          [T, q], [T, kv], [T, kv]   [qkv_bias: + bq, bk, bv]
//!     att = attention(rope(q), rope(k), v, KV cache)   [T, q]   causal [windowed], grouped-query, per sequence
//!                                                               [q and k heads, or rows, RMS-normalized before RoPE]
//!                                                               [attn_sinks: a sink logit per head in each softmax]
//!                                                      [latent: att = latent_attention(xn) (latent.rs), the q/k/v
//!                                                       projections, cache and decompression in one operation]
//!     x += att·Wo[l]ᵀ                                  [post_norms: x += rms_norm(att·Wo[l]ᵀ, post_attention_norm)]
//!                                                      [attn_output_bias: x += att·Wo[l]ᵀ + bo]
//!                                                      [residual_scale s: x += s · att·Wo[l]ᵀ]
//!     xn = rms_norm(x, ffn_norm[l])
//!     x += (act(xn·Wgate[l]ᵀ) ⊙ xn·Wup[l]ᵀ)·Wdown[l]ᵀ   act: SiLU [or GELU]; [post_norms: normalized first]
//!                                                      [moe: x += Σ_chosen w_e · ffn_e(xn) (experts.rs), in the
//!                                                       layers from `MoeConfig::first_layer` on]
//! logits = rms_norm(x, output_norm)·Woutᵀ              [S, vocab] only for the S rows that want logits
//!                                                      [/ logit_scale] [final_softcap c: c · tanh(logits / c)]
//! ```
//!
//! Operations name their operands by [`Buf`] rather than by reference, so a backend keeps its buffers on its
//! own device and may enqueue work asynchronously (the CUDA backend records a step into a graph); only
//! [`LlamaBackend::logits`] returns data to the host.

use super::batch::SeqChunk;
use super::config::LlamaConfig;

/// The activation buffers of a step. Each has one row per new token of the batch (`T` rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The residual stream, `[T, n_embd]`.
    X,
    /// A normalized copy of `X`, or a projection to add to it, `[T, n_embd]`.
    Xn,
    /// Queries, `[T, q_dim]` (`n_head` heads of `head_dim`; `LlamaConfig::query_width`).
    Q,
    /// Keys of the new tokens, `[T, kv_dim]`.
    K,
    /// Values of the new tokens, `[T, kv_dim]`.
    V,
    /// Attention output, `[T, q_dim]` (`LlamaConfig::attention_width`).
    Att,
    /// FFN gate projection, then the gated activation's product, `[T, n_ff]`.
    Gate,
    /// FFN up projection, `[T, n_ff]`.
    Up,
}

/// A weight matrix of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Weight {
    AttnQ(usize),
    AttnK(usize),
    AttnV(usize),
    AttnOutput(usize),
    FfnGate(usize),
    FfnUp(usize),
    FfnDown(usize),
}

impl Weight {
    /// The GGUF tensor name.
    pub fn tensor_name(self) -> String {
        let (l, suffix) = match self {
            Weight::AttnQ(l) => (l, "attn_q.weight"),
            Weight::AttnK(l) => (l, "attn_k.weight"),
            Weight::AttnV(l) => (l, "attn_v.weight"),
            Weight::AttnOutput(l) => (l, "attn_output.weight"),
            Weight::FfnGate(l) => (l, "ffn_gate.weight"),
            Weight::FfnUp(l) => (l, "ffn_up.weight"),
            Weight::FfnDown(l) => (l, "ffn_down.weight"),
        };
        LlamaConfig::layer_tensor(l, suffix)
    }
}

/// A bias vector of the model (`qkv_bias`, `attn_output_bias`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bias {
    AttnQ(usize),
    AttnK(usize),
    AttnV(usize),
    AttnOutput(usize),
}

impl Bias {
    /// The GGUF tensor name.
    pub fn tensor_name(self) -> String {
        let (l, suffix) = match self {
            Bias::AttnQ(l) => (l, "attn_q.bias"),
            Bias::AttnK(l) => (l, "attn_k.bias"),
            Bias::AttnV(l) => (l, "attn_v.bias"),
            Bias::AttnOutput(l) => (l, "attn_output.bias"),
        };
        LlamaConfig::layer_tensor(l, suffix)
    }
}

/// An RMSNorm weight vector of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Norm {
    Attn(usize),
    Ffn(usize),
    /// Of the attention output, before the residual add (`post_norms`).
    PostAttn(usize),
    /// Of the FFN output, before the residual add (`post_norms`).
    PostFfn(usize),
    /// Of the queries (`qk_norm`): `head_dim` wide for each head, or `q_dim` wide for the whole row.
    QHead(usize),
    /// Of the keys (`qk_norm`): `head_dim` wide for each head, or `kv_dim` wide for the whole row.
    KHead(usize),
    Output,
}

impl Norm {
    /// The GGUF tensor name.
    pub fn tensor_name(self) -> String {
        match self {
            Norm::Attn(l) => LlamaConfig::layer_tensor(l, "attn_norm.weight"),
            Norm::Ffn(l) => LlamaConfig::layer_tensor(l, "ffn_norm.weight"),
            Norm::PostAttn(l) => LlamaConfig::layer_tensor(l, "post_attention_norm.weight"),
            Norm::PostFfn(l) => LlamaConfig::layer_tensor(l, "post_ffw_norm.weight"),
            Norm::QHead(l) => LlamaConfig::layer_tensor(l, "attn_q_norm.weight"),
            Norm::KHead(l) => LlamaConfig::layer_tensor(l, "attn_k_norm.weight"),
            Norm::Output => "output_norm.weight".to_owned(),
        }
    }
}

/// The operations the forward pass needs. A backend holds the weights, the KV cache and the buffers; the
/// batch given to [`begin`](LlamaBackend::begin) defines `T` and the positions for the operations that follow,
/// until [`logits`](LlamaBackend::logits) ends the step.
pub trait LlamaBackend {
    type Error;

    /// Starts a step: checks the batch and takes its tokens, positions and block tables.
    fn begin(&mut self, batch: &[SeqChunk<'_>]) -> Result<(), Self::Error>;
    /// `dst[t] = token_embd[tokens[t]]`, times `embed_scale` when the config has one.
    fn embed(&mut self, dst: Buf);
    /// `dst[t] = src[t] / rms(src[t]) ⊙ weight`.
    fn rms_norm(&mut self, src: Buf, weight: Norm, dst: Buf);
    /// For each `(w, dst)`: `dst[t] = w · src[t]`. One call for the projections that share an input lets a
    /// backend prepare the input once and run them as one parallel region.
    fn matmul(&mut self, src: Buf, outputs: &[(Weight, Buf)]);
    /// `dst[t] += bias` for every row (the projections' biases, `qkv_bias`).
    fn add_bias(&mut self, dst: Buf, bias: Bias);
    /// `dst[t] += w · src[t]` (the residual add fused into the projection that feeds it).
    fn matmul_add(&mut self, src: Buf, w: Weight, dst: Buf);
    /// `dst[t] += factor · src[t]` (a scaled residual branch, `residual_scale`).
    fn add_scaled(&mut self, src: Buf, factor: f32, dst: Buf);
    /// `dst[t] += src[t] / rms(src[t]) ⊙ weight` (a normalized residual branch, `post_norms`).
    fn rms_norm_add(&mut self, src: Buf, weight: Norm, dst: Buf);
    /// Normalizes the heads (or rows) of `Q` and `K` when the config has `qk_norm`, rotates them by their positions
    /// (RoPE, with `layer`'s base and style), appends `K` and `V` to each sequence's KV cache at `layer`, and
    /// writes causal grouped-query attention over the cache (within `layer`'s window) to `Att`.
    fn attention(&mut self, layer: usize);
    /// Multi-head latent attention of `layer` (`LlamaConfig::latent`, `latent.rs`): from the normalized rows in
    /// `input`, the queries, the compressed key row (appended to each sequence's cache), causal attention over the
    /// cache and the values' decompression, into `Att` (`attention_width` wide).
    fn latent_attention(&mut self, layer: usize, input: Buf);
    /// `Gate = act(Gate) ⊙ Up`, `act` the config's `ffn_activation`.
    fn gated_activation(&mut self);
    /// The mixture-of-experts FFN of `layer` (`LlamaConfig::moe`, `experts.rs`): `io` holds the block's normalized
    /// input rows and is overwritten with its output (the routed experts' weighted sum, plus the shared
    /// expert's).
    fn moe_ffn(&mut self, layer: usize, io: Buf);
    /// Ends the step: final norm of `X` and the output projection for each row that wants logits
    /// (`SeqChunk::logit_rows`), in batch order, into `out` (`[rows, vocab]`); then the config's `logit_scale`
    /// and `final_softcap`.
    fn logits(&mut self, out: &mut [f32]) -> Result<(), Self::Error>;
}

/// Runs one forward step of `batch`, writing the logits rows its chunks ask for (`SeqChunk::logit_rows`, in batch
/// order) into `logits`.
pub fn forward<B: LlamaBackend>(
    config: &LlamaConfig,
    backend: &mut B,
    batch: &[SeqChunk<'_>],
    logits: &mut [f32],
) -> Result<(), B::Error> {
    backend.begin(batch)?;
    backend.embed(Buf::X);
    for l in 0..config.n_layer {
        let input = pre_norm(config, backend, Norm::Attn(l));
        if config.latent.is_some() {
            backend.latent_attention(l, input);
        } else {
            let qkv = [(Weight::AttnQ(l), Buf::Q), (Weight::AttnK(l), Buf::K), (Weight::AttnV(l), Buf::V)];
            backend.matmul(input, &qkv);
            if config.qkv_bias {
                backend.add_bias(Buf::Q, Bias::AttnQ(l));
                backend.add_bias(Buf::K, Bias::AttnK(l));
                backend.add_bias(Buf::V, Bias::AttnV(l));
            }
            backend.attention(l);
        }
        if config.attn_output_bias {
            // `X += Wo·att + bo` (no biased family has post-norms or a residual scale).
            backend.matmul(Buf::Att, &[(Weight::AttnOutput(l), Buf::Xn)]);
            backend.add_bias(Buf::Xn, Bias::AttnOutput(l));
            add_branch(config, backend, Buf::Xn, Norm::PostAttn(l));
        } else {
            residual(config, backend, Buf::Att, Weight::AttnOutput(l), Norm::PostAttn(l));
        }
        let input = pre_norm(config, backend, Norm::Ffn(l));
        if config.is_moe_layer(l) {
            // Every mixture-of-experts family normalizes the FFN's input (`Xn`), checked at load.
            backend.moe_ffn(l, input);
            add_branch(config, backend, input, Norm::PostFfn(l));
        } else {
            backend.matmul(input, &[(Weight::FfnGate(l), Buf::Gate), (Weight::FfnUp(l), Buf::Up)]);
            backend.gated_activation();
            residual(config, backend, Buf::Gate, Weight::FfnDown(l), Norm::PostFfn(l));
        }
    }
    backend.logits(logits)
}

/// The input of a block's attention or FFN: `Xn = rms_norm(X, norm)`, or `X` itself without `pre_norms`.
fn pre_norm<B: LlamaBackend>(config: &LlamaConfig, backend: &mut B, norm: Norm) -> Buf {
    if config.pre_norms {
        backend.rms_norm(Buf::X, norm, Buf::Xn);
        Buf::Xn
    } else {
        Buf::X
    }
}

/// `X += branch`, the branch (a computed block output in `branch`) scaled or normalized as [`residual`] does.
fn add_branch<B: LlamaBackend>(config: &LlamaConfig, backend: &mut B, branch: Buf, post: Norm) {
    if config.post_norms {
        backend.rms_norm_add(branch, post, Buf::X);
    } else {
        // 1 · b is b exactly: a plain add.
        backend.add_scaled(branch, config.residual_scale.unwrap_or(1.0), Buf::X);
    }
}

/// `X += w · src`; with `post_norms` `X += rms_norm(w · src, post)`, with `residual_scale` `X += s · w · src` (both
/// through `Xn`; no architecture has both).
fn residual<B: LlamaBackend>(config: &LlamaConfig, backend: &mut B, src: Buf, w: Weight, post: Norm) {
    if config.post_norms {
        backend.matmul(src, &[(w, Buf::Xn)]);
        backend.rms_norm_add(Buf::Xn, post, Buf::X);
    } else if let Some(factor) = config.residual_scale {
        backend.matmul(src, &[(w, Buf::Xn)]);
        backend.add_scaled(Buf::Xn, factor, Buf::X);
    } else {
        backend.matmul_add(src, w, Buf::X);
    }
}
