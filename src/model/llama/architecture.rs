//! The architectures ember runs, and what each changes as data: its forward-pass flags ([`ArchTraits`]) and its
//! metadata keys. Layer patterns and soft caps are read with the other hyperparameters (`config.rs`).
//!
//! Architectures:
//! - `llama`: pre-norm blocks, SwiGLU, RoPE on adjacent pairs, one RoPE base.
//! - `gemma3` (llama.cpp's `src/models/gemma3.cpp`): embeddings scaled by √n_embd; RMS norms of each query and
//!   key head before RoPE; norms of the attention and FFN outputs before their residual adds; GELU-gated FFN;
//!   RoPE on the two halves of a head (NEOX); five of every six layers attend to a sliding window, with their own
//!   RoPE base (`rope.freq_base_swa`, 10000 when absent), the sixth to the whole context.
//! - `qwen2` (Qwen 2 and 2.5, DeepSeek-R1's Qwen distills; llama.cpp's `src/models/qwen2.cpp`): llama's blocks with
//!   biases on the query, key and value projections, and RoPE on the two halves of a head (NEOX).
//! - `qwen3` (`src/models/qwen3.cpp`): llama's blocks with RMS norms of each query and key head before RoPE (as
//!   Gemma 3's), no biases, NEOX RoPE; heads may be wider than `n_embd / n_head` (`attention.key_length`).
//! - `phi3` (Phi-3, 3.5 and 4 mini; `src/models/phi3.cpp`): llama's blocks with the gate and up projections in one
//!   tensor (`ffn_up`, the gate's rows first), NEOX RoPE, and LongRoPE (`rope_scaling.rs`).
//! - `smollm3` (`src/models/smollm3.cpp`): llama's blocks, every fourth layer without RoPE.
//! - `gemma2` (`src/models/gemma2.cpp`): Gemma 3's blocks without the head norms, every other layer (the even
//!   ones) attending to a sliding window and turning by `rope.freq_base_swa` (the same base when absent);
//!   attention scores and the final logits soft-capped
//!   (`c · tanh(x / c)`).
//! - `olmo2` (OLMo 2; `src/models/olmo2.cpp`): no norms before the attention and the FFN, norms of their outputs
//!   before the residual adds (Gemma's post-norms), RMS norms of the whole query and key rows (not per head)
//!   before RoPE, NEOX RoPE, SwiGLU. Its OLMo 3 files' sliding windows are refused.
//! - `granite` (IBM Granite 3.x dense; `src/models/granite.cpp`): llama's blocks with four constant multipliers
//!   (`multipliers.rs`): of the embeddings, of each block output before its residual add, of the query·key
//!   products, and a divisor of the logits.

use super::rope_scaling::RopeScalingKeys;

/// The architectures ember runs (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Gemma3,
    Qwen2,
    Qwen3,
    Phi3,
    SmolLm3,
    Gemma2,
    Granite,
    Olmo2,
}

/// What an architecture changes in the forward pass, beyond its layer pattern (one place, so that the loader and
/// the synthetic models cannot disagree).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchTraits {
    pub rope_neox: bool,
    /// Embeddings scaled by √n_embd.
    pub embed_scale: bool,
    pub qk_norm: Option<QkNorm>,
    /// The attention and FFN inputs are RMS-normalized (`attn_norm`, `ffn_norm`); all but OLMo 2.
    pub pre_norms: bool,
    pub post_norms: bool,
    pub qkv_bias: bool,
    pub ffn_activation: FfnActivation,
    /// `ffn_up` holds the gate's rows, then the up projection's; no `ffn_gate`.
    pub fused_gate_up: bool,
    /// Where the logits' projection comes from: `output.weight`, or the token embedding.
    pub output: OutputProjection,
}

/// Which tensor projects the final hidden state to logits, as llama.cpp's `load_tensors` creates `output` for each
/// architecture (`src/models/*.cpp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputProjection {
    /// `output.weight` when the file has one, else `token_embd.weight` (llama.cpp: `TENSOR_NOT_REQUIRED`, then the
    /// embedding `TENSOR_DUPLICATED`): llama, qwen2, qwen3, phi3, smollm3, granite.
    OwnOrTied,
    /// `output.weight`, required (llama.cpp creates it with no fallback): OLMo 2, whose checkpoints never tie it.
    Own,
    /// Always `token_embd.weight` (llama.cpp never reads `output.weight`, and refuses a file with one as having a
    /// tensor too many): Gemma 2 and 3.
    Tied,
}

impl Architecture {
    /// Every architecture ember runs.
    pub const ALL: [Architecture; 9] = [
        Architecture::Llama,
        Architecture::Gemma3,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Phi3,
        Architecture::SmolLm3,
        Architecture::Gemma2,
        Architecture::Granite,
        Architecture::Olmo2,
    ];

    /// The `general.architecture` value, also the prefix of its metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Gemma3 => "gemma3",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Phi3 => "phi3",
            Architecture::SmolLm3 => "smollm3",
            Architecture::Gemma2 => "gemma2",
            Architecture::Granite => "granite",
            Architecture::Olmo2 => "olmo2",
        }
    }

    pub(super) fn keys(self) -> &'static Keys {
        match self {
            Architecture::Llama => &LLAMA_KEYS,
            Architecture::Gemma3 => &GEMMA3_KEYS,
            Architecture::Qwen2 => &QWEN2_KEYS,
            Architecture::Qwen3 => &QWEN3_KEYS,
            Architecture::Phi3 => &PHI3_KEYS,
            Architecture::SmolLm3 => &SMOLLM3_KEYS,
            Architecture::Gemma2 => &GEMMA2_KEYS,
            Architecture::Granite => &GRANITE_KEYS,
            Architecture::Olmo2 => &OLMO2_KEYS,
        }
    }

    /// What the architecture changes in the forward pass (llama.cpp's `src/models/*.cpp`).
    pub fn traits(self) -> ArchTraits {
        let llama = ArchTraits {
            rope_neox: false,
            embed_scale: false,
            qk_norm: None,
            pre_norms: true,
            post_norms: false,
            qkv_bias: false,
            ffn_activation: FfnActivation::Silu,
            fused_gate_up: false,
            output: OutputProjection::OwnOrTied,
        };
        let gemma = ArchTraits {
            rope_neox: true,
            embed_scale: true,
            qk_norm: Some(QkNorm::Heads),
            post_norms: true,
            ffn_activation: FfnActivation::GeluTanh,
            output: OutputProjection::Tied,
            ..llama
        };
        match self {
            Architecture::Llama => llama,
            Architecture::Gemma3 => gemma,
            // Its soft-capping and layer pattern are in `from_gguf`.
            Architecture::Gemma2 => ArchTraits { qk_norm: None, ..gemma },
            Architecture::Qwen2 => ArchTraits { rope_neox: true, qkv_bias: true, ..llama },
            Architecture::Qwen3 => ArchTraits { rope_neox: true, qk_norm: Some(QkNorm::Heads), ..llama },
            Architecture::Phi3 => ArchTraits { rope_neox: true, fused_gate_up: true, ..llama },
            // Its layer pattern (every fourth without RoPE) is in `from_gguf`.
            Architecture::SmolLm3 => llama,
            // Its multipliers are in `multipliers.rs`.
            Architecture::Granite => llama,
            Architecture::Olmo2 => ArchTraits {
                rope_neox: true,
                qk_norm: Some(QkNorm::Rows),
                pre_norms: false,
                post_norms: true,
                output: OutputProjection::Own,
                ..llama
            },
        }
    }
}

/// The metadata keys of one architecture (`&'static` so that errors can name them).
pub(super) struct Keys {
    pub(super) block_count: &'static str,
    pub(super) embedding_length: &'static str,
    pub(super) feed_forward_length: &'static str,
    pub(super) head_count: &'static str,
    pub(super) head_count_kv: &'static str,
    pub(super) context_length: &'static str,
    pub(super) key_length: &'static str,
    pub(super) value_length: &'static str,
    pub(super) rope_freq_base: &'static str,
    pub(super) rope_freq_base_swa: &'static str,
    pub(super) rope_dimension_count: &'static str,
    pub(super) rms_eps: &'static str,
    pub(super) vocab_size: &'static str,
    pub(super) sliding_window: &'static str,
    pub(super) sliding_window_pattern: &'static str,
    pub(super) attn_softcap: &'static str,
    pub(super) final_softcap: &'static str,
    pub(super) attention_scale: &'static str,
    pub(super) embedding_scale: &'static str,
    pub(super) residual_scale: &'static str,
    pub(super) logit_scale: &'static str,
    pub(super) rope_scaling: RopeScalingKeys,
}

macro_rules! keys_of {
    ($arch:literal) => {
        Keys {
            block_count: concat!($arch, ".block_count"),
            embedding_length: concat!($arch, ".embedding_length"),
            feed_forward_length: concat!($arch, ".feed_forward_length"),
            head_count: concat!($arch, ".attention.head_count"),
            head_count_kv: concat!($arch, ".attention.head_count_kv"),
            context_length: concat!($arch, ".context_length"),
            key_length: concat!($arch, ".attention.key_length"),
            value_length: concat!($arch, ".attention.value_length"),
            rope_freq_base: concat!($arch, ".rope.freq_base"),
            rope_freq_base_swa: concat!($arch, ".rope.freq_base_swa"),
            rope_dimension_count: concat!($arch, ".rope.dimension_count"),
            rms_eps: concat!($arch, ".attention.layer_norm_rms_epsilon"),
            vocab_size: concat!($arch, ".vocab_size"),
            sliding_window: concat!($arch, ".attention.sliding_window"),
            sliding_window_pattern: concat!($arch, ".attention.sliding_window_pattern"),
            attn_softcap: concat!($arch, ".attn_logit_softcapping"),
            final_softcap: concat!($arch, ".final_logit_softcapping"),
            attention_scale: concat!($arch, ".attention.scale"),
            embedding_scale: concat!($arch, ".embedding_scale"),
            residual_scale: concat!($arch, ".residual_scale"),
            logit_scale: concat!($arch, ".logit_scale"),
            rope_scaling: RopeScalingKeys {
                kind: concat!($arch, ".rope.scaling.type"),
                factor: concat!($arch, ".rope.scaling.factor"),
                scale_linear: concat!($arch, ".rope.scale_linear"),
                attn_factor: concat!($arch, ".rope.scaling.attn_factor"),
                original_context: concat!($arch, ".rope.scaling.original_context_length"),
            },
        }
    };
}
static LLAMA_KEYS: Keys = keys_of!("llama");
static GEMMA3_KEYS: Keys = keys_of!("gemma3");
static QWEN2_KEYS: Keys = keys_of!("qwen2");
static QWEN3_KEYS: Keys = keys_of!("qwen3");
static PHI3_KEYS: Keys = keys_of!("phi3");
static SMOLLM3_KEYS: Keys = keys_of!("smollm3");
static GEMMA2_KEYS: Keys = keys_of!("gemma2");
static GRANITE_KEYS: Keys = keys_of!("granite");
static OLMO2_KEYS: Keys = keys_of!("olmo2");

/// What the query and key norms (`attn_q_norm`, `attn_k_norm`) normalize, before RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    /// Each head, with a `head_dim`-wide weight shared by the heads (Gemma 3, Qwen 3).
    Heads,
    /// The whole query and key rows, with `q_dim`- and `kv_dim`-wide weights (OLMo 2).
    Rows,
}

/// The gated activation of the feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnActivation {
    /// `silu(gate) · up` (SwiGLU).
    Silu,
    /// `gelu(gate) · up` with GELU's tanh approximation (GeGLU).
    GeluTanh,
}
