//! The hyperparameters of a decoder-only transformer read from GGUF metadata, with what distinguishes its
//! architecture as data (`LayerAttention`, the flags of `LlamaConfig`; each architecture's own in
//! `architecture.rs`), and the check that every tensor the forward pass needs is present with the shape those
//! hyperparameters imply.
//!
//! Keys follow llama.cpp's `LLM_KV_*` names with the architecture's prefix (`llama.`, `gemma3.`). Tensor names
//! follow its `LLM_TENSOR_*` names (`token_embd.weight`, `blk.N.attn_q.weight`, ...). The layer patterns (Gemma 3's
//! and Gemma 2's windows, SmolLM3's layers without RoPE) and Gemma 2's soft caps are read here.
//!
//! Any architecture's file may hold the query, key and value projections as one tensor (`attn_qkv`, as llama.cpp's
//! loader accepts): the backends take its rows apart at load ([`LlamaConfig::weight_source`]).

use std::fmt;
use std::ops::Range;

use crate::model::gguf::{GgmlType, GgufError, GgufFile};

mod vocab;

use super::architecture::{Architecture, CapRule, FfnActivation, LayerPattern, QkNorm, WindowDefault};
use super::experts::{self, MoeConfig};
use super::forward::{Norm, Weight};
use super::latent::{self, LatentAttention};
use super::multipliers::{self, Widths};
use super::rope_scaling::{self, LongRope, Yarn};

/// Llama 3's RoPE frequency factors.
const ROPE_FREQS: &str = "rope_freqs.weight";
/// The fused query/key/value projection of a layer.
const FUSED_QKV: &str = "attn_qkv.weight";
/// A layer's attention sinks (`LlamaConfig::attn_sinks`).
pub const ATTN_SINKS: &str = "attn_sinks.weight";

/// How one layer attends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerAttention {
    /// Index into [`LlamaConfig::rope_bases`] of this layer's RoPE base.
    pub rope: usize,
    /// A query at position `p` sees positions `p + 1 − window ..= p` only (`None`: all of `0..=p`).
    pub window: Option<usize>,
}

/// The hyperparameters of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// What distinguishes the forward pass beyond the sizes.
    pub arch: Architecture,
    /// Transformer blocks (`llama.block_count`).
    pub n_layer: usize,
    /// Width of the residual stream (`llama.embedding_length`).
    pub n_embd: usize,
    /// Hidden width of the SwiGLU feed-forward (`llama.feed_forward_length`).
    pub n_ff: usize,
    /// Query heads (`llama.attention.head_count`).
    pub n_head: usize,
    /// Key/value heads (`llama.attention.head_count_kv`); each serves `n_head / n_head_kv` query heads.
    pub n_head_kv: usize,
    /// Width of one head: `attention.key_length`, else `n_embd / n_head`.
    pub head_dim: usize,
    /// RoPE base frequency of the full-attention layers (`rope.freq_base`, 10000 when absent as in llama.cpp).
    pub rope_base: f32,
    /// The distinct RoPE bases the layers use (`rope_base` first); [`LayerAttention::rope`] indexes it. `None`
    /// for layers without RoPE (SmolLM3's every fourth): its table turns by nothing (`inv_frequencies` all 0, a
    /// rotation by cos 1 and sin 0, exact), so the backends need no case of their own.
    pub rope_bases: Vec<Option<f32>>,
    /// llama.cpp's `freq_scale` (`1 / rope.scaling.factor` under linear scaling, else 1): multiplies the
    /// rotation speeds of `rope_bases[0]`, the full-attention layers' base. Gemma 3's sliding-window layers are
    /// never scaled, as in llama.cpp (`rope_freq_scale_train_swa` is 1).
    pub rope_freq_scale: f32,
    /// llama.cpp's `attn_factor` (`rope.scaling.attn_factor`, 1 when absent): multiplies the cosine and sine of
    /// every rotation, so the rotated dimensions of queries and keys (Phi-3's LongRoPE: √(1 + ln s / ln L)).
    pub rope_attn_factor: f32,
    /// YaRN (`rope.scaling.type` "yarn" with a factor above 1): `rope_freq_scale` applies to each pair of the
    /// full-attention layers through its ramp, and their rotations gain YaRN's magnitude correction.
    pub rope_yarn: Option<Yarn>,
    /// The sliding-window layers' RoPE base is scaled as the full layers' is (`rope_freq_scale`, YaRN): gpt-oss.
    /// Otherwise only `rope_bases[0]` is.
    pub rope_scale_windows: bool,
    /// Phi-3's LongRoPE factors: the short ones are `rope_freq_factors` until [`LlamaConfig::for_context`] picks
    /// the long ones for a context past the original one.
    pub long_rope: Option<LongRope>,
    /// Per layer: its RoPE base and attention window.
    pub layers: Vec<LayerAttention>,
    /// RoPE rotates dimension `i` with `i + rope_dim / 2` (NEOX, Gemma) rather than `2i` with `2i + 1` (llama).
    pub rope_neox: bool,
    /// Embeddings are multiplied by this after the lookup (Gemma: √n_embd; Granite's `embedding_scale`).
    pub embed_scale: Option<f32>,
    /// What multiplies each query·key product before the softmax (`multipliers.rs`: 1/√head_dim unless the
    /// architecture says otherwise).
    pub attention_scale: f32,
    /// Each attention and FFN output is multiplied by this before its residual add (Granite's `residual_scale`).
    pub residual_scale: Option<f32>,
    /// The logits are divided by this (Granite's `logit_scale`; as in llama.cpp, multiplied by its reciprocal),
    /// before any soft cap.
    pub logit_scale: Option<f32>,
    /// Queries and keys are RMS-normalized (with `attn_q_norm` / `attn_k_norm`) before RoPE: each head, or each
    /// whole row.
    pub qk_norm: Option<QkNorm>,
    /// The attention and FFN inputs are RMS-normalized (`attn_norm`, `ffn_norm`); OLMo 2 reads the stream as it is.
    pub pre_norms: bool,
    /// The attention and FFN outputs are RMS-normalized (`post_attention_norm`, `post_ffw_norm`) before their
    /// residual adds.
    pub post_norms: bool,
    /// The query, key and value projections add a bias (`attn_q.bias`, `attn_k.bias`, `attn_v.bias`).
    pub qkv_bias: bool,
    /// The attention's output projection adds a bias (`attn_output.bias`).
    pub attn_output_bias: bool,
    /// Each query head's softmax has a sink logit in its denominator (`attn_sinks.weight`, `n_head` values).
    pub attn_sinks: bool,
    /// Attention scores (after `attention_scale`) become `c · tanh(score / c)` before the softmax (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// The logits become `c · tanh(logit / c)` (Gemma 2).
    pub final_softcap: Option<f32>,
    /// The query, key and value projections are one tensor, `attn_qkv` (`q_dim + 2 kv_dim` rows in that order).
    pub fused_qkv: bool,
    /// The gate and up projections are one tensor, `ffn_up` (`2 n_ff` rows, the gate's first; phi3).
    pub fused_gate_up: bool,
    pub ffn_activation: FfnActivation,
    /// Llama 3's per-pair RoPE frequency divisors (`rope_freqs.weight`, `rope_dim / 2` values): pair `i` turns by
    /// `p · base^(−2i / rope_dim) / factor[i]`. `None` when the file has no such tensor.
    pub rope_freq_factors: Option<Vec<f32>>,
    /// Leading dimensions of each head that RoPE rotates (`llama.rope.dimension_count`, default `head_dim`).
    pub rope_dim: usize,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// Context length the model was trained for (`llama.context_length`).
    pub context_length: usize,
    /// Tokens, and rows of the embedding table and of the output projection: the length of
    /// `tokenizer.ggml.tokens` (else `llama.vocab_size`, else the table's rows, for files without a vocabulary).
    pub vocab_size: usize,
    /// True when the output projection reuses `token_embd.weight` (no `output.weight` tensor; as the
    /// architecture allows, `ArchTraits::output`).
    pub tied_output: bool,
    /// The feed-forward blocks are mixtures of experts (`experts.rs`; those after `MoeConfig::first_layer`); `None`:
    /// dense (`ffn_gate`, `ffn_up`, `ffn_down`).
    pub moe: Option<MoeConfig>,
    /// Multi-head latent attention (`latent.rs`) in place of the q/k/v projections: then `n_head_kv` is 1 and
    /// `head_dim` is the cache row's width (`kv_lora_rank + rope_dim`), whose last `rope_dim` dimensions RoPE turns.
    pub latent: Option<LatentAttention>,
}

/// Why a file is not a usable llama model.
#[derive(Debug)]
pub enum ModelConfigError {
    /// Reading a key or tensor failed (missing, wrong type, unsupported tensor type).
    Gguf(GgufError),
    /// `general.architecture` is not one ember runs.
    UnsupportedArchitecture(String),
    /// A hyperparameter is out of range or inconsistent with another.
    Invalid { key: &'static str, detail: String },
    /// A tensor has another shape than the hyperparameters imply.
    TensorShape { tensor: String, expected: Vec<u64>, found: Vec<u64> },
    /// A norm weight is not f32 (the forward pass reads norms as f32 directly).
    NormNotF32 { tensor: String, dtype: GgmlType },
    /// The embedding or the output projection has another number of rows than the vocabulary has tokens.
    VocabularyRows { tokens: usize, tensor: &'static str, rows: u64 },
}

impl fmt::Display for ModelConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelConfigError::Gguf(e) => e.fmt(f),
            ModelConfigError::UnsupportedArchitecture(a) => {
                let names: Vec<&str> = Architecture::all().iter().map(|a| a.name()).collect();
                write!(f, "unsupported model architecture {a:?} (ember runs {} models)", names.join(", "))
            }
            ModelConfigError::Invalid { key, detail } => write!(f, "invalid {key}: {detail}"),
            ModelConfigError::TensorShape { tensor, expected, found } => {
                write!(f, "tensor {tensor:?} has shape {found:?}, expected {expected:?}")
            }
            ModelConfigError::NormNotF32 { tensor, dtype } => {
                write!(f, "tensor {tensor:?} (a norm or a bias, read as f32) has type {dtype}, expected F32")
            }
            ModelConfigError::VocabularyRows { tokens, tensor, rows } => write!(
                f,
                "tokenizer.ggml.tokens has {tokens} tokens but tensor {tensor:?} has {rows} rows: every token needs \
                 exactly one row (llama.cpp refuses such a file too)"
            ),
        }
    }
}

impl std::error::Error for ModelConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModelConfigError::Gguf(e) => Some(e),
            _ => None,
        }
    }
}

impl From<GgufError> for ModelConfigError {
    fn from(e: GgufError) -> Self {
        ModelConfigError::Gguf(e)
    }
}

/// Largest sizes accepted for any hyperparameter: far above any llama model, small enough that buffer sizes
/// computed from them cannot overflow.
const MAX_DIM: u32 = 1 << 20;
const MAX_LAYERS: u32 = 4096;

/// Refuses a file whose layers carry biases the forward pass would not add (the dense FFN's, or the projections',
/// the router's and the experts' where the architecture has none): running without them would be silently wrong.
fn refuse_unused_biases(file: &GgufFile, config: &LlamaConfig) -> Result<(), ModelConfigError> {
    let qkv = ["attn_q.bias", "attn_k.bias", "attn_v.bias"];
    let moe = ["ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"];
    let others = ["attn_qkv.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"];
    let unused = others
        .iter()
        .chain(qkv.iter().filter(|_| !config.qkv_bias))
        .chain(["attn_output.bias"].iter().filter(|_| !config.attn_output_bias))
        .chain(moe.iter().filter(|_| !config.moe.as_ref().is_some_and(|m| m.biases)));
    match unused.map(|s| LlamaConfig::layer_tensor(0, s)).find(|name| file.tensor_info(name).is_some()) {
        Some(name) => Err(ModelConfigError::Invalid {
            key: "general.architecture",
            detail: format!("tensor {name:?}: this architecture's blocks have no such bias in ember"),
        }),
        None => Ok(()),
    }
}

/// The RoPE bases and each layer's attention, as the family's [`LayerPattern`] reads them from `file`. `base` reads a
/// RoPE base key (10000 when absent).
fn layer_pattern(
    file: &GgufFile,
    arch: Architecture,
    n_layer: usize,
    rope_base: f32,
    base: impl Fn(&'static str) -> Result<f32, ModelConfigError>,
) -> Result<(Vec<Option<f32>>, Vec<LayerAttention>), ModelConfigError> {
    let k = arch.keys();
    let full = LayerAttention { rope: 0, window: None };
    Ok(match arch.spec().layers {
        LayerPattern::Full => (vec![Some(rope_base)], vec![full; n_layer]),
        LayerPattern::FullWindowsRefused => {
            if let Some(w) = file.optional(k.sliding_window, GgufFile::u32)?.filter(|&w| w > 0) {
                let detail = format!("a window of {w} (OLMo 3's sliding-window layers) is not implemented");
                return Err(invalid(k.sliding_window, detail));
            }
            (vec![Some(rope_base)], vec![full; n_layer])
        }
        LayerPattern::SlidingWindow { period, default_window, default_swa_base, .. } => {
            let key = file.optional(k.sliding_window, GgufFile::u32)?;
            let window = match (key, default_window) {
                (Some(0), _) | (None, WindowDefault::NoWindows) => None,
                (Some(w), _) | (None, WindowDefault::Size(w)) => Some(w as usize),
                (None, WindowDefault::Required) => {
                    return Err(invalid(k.sliding_window, "missing: this architecture's files carry it".into()))
                }
            };
            let period = match period {
                Some(p) => p,
                None => match file.optional(k.sliding_window_pattern, GgufFile::u32)?.unwrap_or(2) {
                    0 => return Err(invalid(k.sliding_window_pattern, "0 is not a layer period".into())),
                    p => p as usize,
                },
            };
            // Windowed layers turn by `rope.freq_base_swa`; when absent, the family's default or the same base.
            let swa_base = match (file.optional(k.rope_freq_base_swa, GgufFile::f32)?, default_swa_base) {
                (Some(_), _) => base(k.rope_freq_base_swa)?,
                (None, Some(b)) => b,
                (None, None) => rope_base,
            };
            let layers = (0..n_layer).map(|l| match window.filter(|_| l % period < period - 1) {
                Some(w) => LayerAttention { rope: 1, window: Some(w) },
                None => full,
            });
            (vec![Some(rope_base), Some(swa_base)], layers.collect())
        }
        LayerPattern::NoRopeEvery(period) => {
            let no_rope = LayerAttention { rope: 1, window: None };
            let layers = (0..n_layer).map(|l| if (l + 1) % period == 0 { no_rope } else { full });
            (vec![Some(rope_base), None], layers.collect())
        }
    })
}

fn positive(file: &GgufFile, key: &'static str, max: u32) -> Result<usize, ModelConfigError> {
    let v = file.u32(key)?;
    if v == 0 || v > max {
        return Err(ModelConfigError::Invalid { key, detail: format!("{v} is not in 1..={max}") });
    }
    Ok(v as usize)
}

fn invalid(key: &'static str, detail: String) -> ModelConfigError {
    ModelConfigError::Invalid { key, detail }
}

/// A mixture-of-experts layer's tensors (`experts.rs`): the router, the experts' matrices stacked along a third
/// dimension, and the shared expert's when there is one.
fn moe_tensors(moe: &MoeConfig, d: u64) -> Vec<(&'static str, Vec<u64>, bool)> {
    let (n, ff) = (moe.n_expert as u64, moe.n_ff_exp as u64);
    let mut tensors = vec![("ffn_gate_inp.weight", vec![d, n], false)];
    if moe.selection_bias {
        tensors.push((experts::SELECTION_BIAS, vec![n], true));
    }
    if moe.fused_gate_up {
        tensors.push((experts::FUSED_GATE_UP_EXPS, vec![d, 2 * ff, n], false));
    } else {
        tensors
            .extend([("ffn_gate_exps.weight", vec![d, ff, n], false), ("ffn_up_exps.weight", vec![d, ff, n], false)]);
    }
    tensors.push(("ffn_down_exps.weight", vec![ff, d, n], false));
    if moe.biases {
        tensors.extend([
            ("ffn_gate_inp.bias", vec![n], true),
            ("ffn_gate_exps.bias", vec![ff, n], true),
            ("ffn_up_exps.bias", vec![ff, n], true),
            ("ffn_down_exps.bias", vec![d, n], true),
        ]);
    }
    if let Some(shared) = moe.shared {
        let sff = shared.n_ff as u64;
        tensors.extend([
            ("ffn_gate_shexp.weight", vec![d, sff], false),
            ("ffn_up_shexp.weight", vec![d, sff], false),
            ("ffn_down_shexp.weight", vec![sff, d], false),
        ]);
        if shared.gated {
            tensors.push(("ffn_gate_inp_shexp.weight", vec![d], true));
        }
    }
    tensors
}

/// A latent-attention layer's tensors (`latent.rs`), but the output projection.
fn latent_tensors(latent: &LatentAttention, n_head: u64, d: u64, rope: u64) -> Vec<(&'static str, Vec<u64>, bool)> {
    let (r, nope, v) = (latent.kv_lora_rank as u64, latent.nope_dim as u64, latent.v_head_dim as u64);
    let q = n_head * (nope + rope);
    let mut tensors = match latent.q_lora_rank.map(|n| n as u64) {
        Some(rank) => vec![
            (latent::Q_A, vec![d, rank], false),
            (latent::Q_A_NORM, vec![rank], true),
            (latent::Q_B, vec![rank, q], false),
        ],
        None => vec![("attn_q.weight", vec![d, q], false)],
    };
    tensors.extend([
        (latent::KV_A, vec![d, r + rope], false),
        (latent::KV_A_NORM, vec![r], true),
        (latent::K_B, vec![nope, r, n_head], false),
        (latent::V_B, vec![r, v, n_head], false),
    ]);
    tensors
}

impl LlamaConfig {
    /// Reads and validates the hyperparameters, then checks every tensor's presence, type and shape.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelConfigError> {
        let name = file.str("general.architecture")?;
        let Some(arch) = Architecture::named(name) else {
            return Err(ModelConfigError::UnsupportedArchitecture(name.to_owned()));
        };
        let k = arch.keys();
        let n_layer = positive(file, k.block_count, MAX_LAYERS)?;
        let n_embd = positive(file, k.embedding_length, MAX_DIM)?;
        let n_ff = positive(file, k.feed_forward_length, MAX_DIM)?;
        let n_head = positive(file, k.head_count, MAX_DIM)?;
        let n_head_kv = positive(file, k.head_count_kv, MAX_DIM)?;
        let context_length = positive(file, k.context_length, MAX_DIM)?;
        let head_dim = match file.optional(k.key_length, GgufFile::u32)? {
            Some(_) => positive(file, k.key_length, MAX_DIM)?,
            None if n_embd % n_head != 0 => {
                return Err(invalid(k.head_count, format!("{n_head} heads do not divide the embedding width {n_embd}")))
            }
            None => n_embd / n_head,
        };
        if n_head % n_head_kv != 0 {
            return Err(invalid(
                k.head_count_kv,
                format!("{n_head_kv} key/value heads do not divide the {n_head} query heads"),
            ));
        }
        if let Some(v) = file.optional(k.value_length, GgufFile::u32)?.filter(|_| !arch.traits().latent_attention) {
            if v as usize != head_dim {
                return Err(invalid(k.value_length, format!("{v} differs from the key length {head_dim}")));
            }
        }
        let base = |key: &'static str| -> Result<f32, ModelConfigError> {
            let b = file.optional(key, GgufFile::f32)?.unwrap_or(10_000.0);
            if !(b.is_finite() && b > 0.0) {
                return Err(invalid(key, format!("{b} is not a positive number")));
            }
            Ok(b)
        };
        let rope_base = base(k.rope_freq_base)?;
        let scaling = rope_scaling::read(file, &k.rope_scaling, context_length)?;
        let rope_dim = file.optional(k.rope_dimension_count, GgufFile::u32)?.map_or(head_dim, |d| d as usize);
        if rope_dim == 0 || rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(invalid(
                k.rope_dimension_count,
                format!("{rope_dim} must be even and in 2..={head_dim} (the head width)"),
            ));
        }
        let rms_eps = file.f32(k.rms_eps)?;
        if !(rms_eps.is_finite() && rms_eps > 0.0) {
            return Err(invalid(k.rms_eps, format!("{rms_eps} is not positive")));
        }
        // Missing, the embedding is named before anything is read from its shape.
        file.tensor(vocab::TOKEN_EMBD)?;
        let vocab_size = vocab::vocab_size(file, k.vocab_size)?;
        let (rope_bases, layers) = layer_pattern(file, arch, n_layer, rope_base, base)?;
        let traits = arch.traits();
        let tied_output = vocab::tied_output(file, arch, traits.output)?;
        let rope_freq_factors = match file.tensor_info(ROPE_FREQS) {
            None => None,
            Some(_) => {
                let factors = file.tensor(ROPE_FREQS)?.as_f32()?.to_vec();
                if factors.len() != rope_dim / 2 || !factors.iter().all(|f| f.is_finite() && *f > 0.0) {
                    return Err(invalid(
                        "rope_freqs.weight",
                        format!("needs {} positive factors (found {})", rope_dim / 2, factors.len()),
                    ));
                }
                Some(factors)
            }
        };
        let long_rope = rope_scaling::long_rope(file, &k.rope_scaling, rope_dim, context_length)?;
        if long_rope.is_some() && rope_freq_factors.is_some() {
            return Err(invalid(ROPE_FREQS, "and LongRoPE's factors in one file".into()));
        }
        let rope_freq_factors = rope_freq_factors.or_else(|| long_rope.as_ref().map(|l| l.short.clone()));
        let fused_qkv = file.tensor_info(&Self::layer_tensor(0, FUSED_QKV)).is_some();
        let widths = Widths { n_layer, n_embd, n_head, head_dim };
        let multipliers = multipliers::read(file, arch, widths)?;
        // Soft caps as llama.cpp reads them for the family (`ArchSpec::softcaps`).
        let softcap = |key: &'static str, rule: CapRule| -> Result<Option<f32>, ModelConfigError> {
            let found = file.optional(key, GgufFile::f32)?;
            let cap = match (rule, found) {
                (CapRule::Never, _) | (CapRule::WhenKeySet, None | Some(0.0)) => return Ok(None),
                (CapRule::KeyOr(default), found) => found.unwrap_or(default),
                (CapRule::WhenKeySet, Some(c)) => c,
            };
            match cap {
                c if c.is_finite() && c > 0.0 => Ok(Some(c)),
                c => Err(invalid(key, format!("{c} is not a positive soft cap"))),
            }
        };
        let caps = arch.spec().softcaps;
        let moe = experts::read(file, arch, n_ff, n_layer)?;
        let latent = latent::read(file, arch, (n_head, n_head_kv), head_dim, rope_dim, &scaling)?;
        let mut rope_yarn = scaling.yarn;
        let mut attention_scale = multipliers.attention_scale;
        if let Some(l) = &latent {
            attention_scale = l.attention_scale;
            if let Some(yarn) = &mut rope_yarn {
                yarn.corrects_rotations = l.corrects_rotations;
            }
        }
        let config = LlamaConfig {
            attn_softcap: softcap(k.attn_softcap, caps.attention)?,
            final_softcap: softcap(k.final_softcap, caps.logits)?,
            moe,
            rope_freq_factors,
            rope_attn_factor: scaling.attn_factor,
            long_rope,
            fused_qkv,
            fused_gate_up: traits.fused_gate_up,
            arch,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            rope_base,
            rope_bases,
            rope_freq_scale: scaling.freq_scale,
            rope_yarn,
            rope_scale_windows: matches!(arch.spec().layers, LayerPattern::SlidingWindow { scaled: true, .. }),
            layers,
            rope_neox: traits.rope_neox,
            embed_scale: multipliers.embed_scale,
            attention_scale,
            residual_scale: multipliers.residual_scale,
            logit_scale: multipliers.logit_scale,
            qk_norm: traits.qk_norm,
            pre_norms: traits.pre_norms,
            post_norms: traits.post_norms,
            qkv_bias: traits.qkv_bias,
            attn_output_bias: traits.attn_output_bias,
            attn_sinks: traits.attn_sinks,
            ffn_activation: traits.ffn_activation,
            rope_dim,
            rms_eps,
            context_length,
            vocab_size,
            tied_output,
            latent: latent.map(|l| l.shapes),
        };
        if config.moe.is_some() && !config.pre_norms {
            // The forward pass computes the experts from the normalized input in place (`LlamaBackend::moe_ffn`).
            return Err(invalid("general.architecture", "experts without an FFN input norm".into()));
        }
        refuse_unused_biases(file, &config)?;
        config.check_tensors(file)?;
        Ok(config)
    }

    /// `base^(−2i / rope_dim)` for `i` in `0..rope_dim / 2` with RoPE base `rope_bases[base]`, divided by the
    /// frequency factors where the model has them, times `rope_freq_scale` for the full-attention base: the
    /// rotation speeds every backend tabulates.
    pub fn inv_frequencies(&self, base: usize) -> Vec<f64> {
        let Some(theta) = self.rope_bases[base] else { return vec![0.0; self.rope_dim / 2] };
        let mut inv = super::rope::inv_frequencies(f64::from(theta), self.rope_dim);
        if let Some(factors) = &self.rope_freq_factors {
            inv.iter_mut().zip(factors).for_each(|(f, &d)| *f /= f64::from(d));
        }
        if self.is_scaled(base) && self.rope_freq_scale != 1.0 {
            let scale = f64::from(self.rope_freq_scale);
            match &self.rope_yarn {
                Some(yarn) => {
                    let factors = yarn.speed_factors(self.rope_dim, f64::from(theta), scale);
                    inv.iter_mut().zip(factors).for_each(|(f, m)| *f *= m);
                }
                None => inv.iter_mut().for_each(|f| *f *= scale),
            }
        }
        inv
    }

    /// What multiplies the cosine and sine of every rotation by RoPE base `base` (llama.cpp's `mscale`): the
    /// attention factor, times YaRN's magnitude correction for the scaled (full-attention) base.
    pub fn rope_magnitude(&self, base: usize) -> f64 {
        let attn = f64::from(self.rope_attn_factor);
        match &self.rope_yarn {
            // Layers without RoPE are not rotated at all, so not scaled either.
            _ if self.rope_bases[base].is_none() => 1.0,
            Some(yarn) if self.is_scaled(base) && yarn.corrects_rotations => {
                attn * Yarn::magnitude(f64::from(self.rope_freq_scale))
            }
            _ => attn,
        }
    }

    /// Whether RoPE base `base` is scaled (`rope_freq_scale`, YaRN): the full layers' always, the windowed
    /// layers' with `rope_scale_windows`.
    fn is_scaled(&self, base: usize) -> bool {
        base == 0 || self.rope_scale_windows
    }

    /// The tensor of norm `n`: its usual name, but the FFN input norm's as the architecture names it
    /// (`ArchTraits::ffn_norm`).
    pub fn norm_tensor(&self, n: Norm) -> String {
        match n {
            Norm::Ffn(l) => Self::layer_tensor(l, self.arch.traits().ffn_norm),
            n => n.tensor_name(),
        }
    }

    /// The widest sliding window of any layer (`None` when every layer sees the whole context): the keys a
    /// query at position `p` may read in a windowed layer are all within `p + 1 − max_window ..= p`.
    pub fn max_window(&self) -> Option<usize> {
        self.layers.iter().filter_map(|l| l.window).max()
    }

    /// Where the backends find weight `w`: its tensor, and the range of that tensor's rows it is when the file
    /// fuses it with others (`fused_qkv`, `fused_gate_up`).
    pub fn weight_source(&self, w: Weight) -> (String, Option<Range<usize>>) {
        let (q, kv, ff) = (self.q_dim(), self.kv_dim(), self.n_ff);
        let fused = |l: usize, suffix: &str, rows: Range<usize>| (Self::layer_tensor(l, suffix), Some(rows));
        match w {
            Weight::AttnQ(l) if self.fused_qkv => fused(l, FUSED_QKV, 0..q),
            Weight::AttnK(l) if self.fused_qkv => fused(l, FUSED_QKV, q..q + kv),
            Weight::AttnV(l) if self.fused_qkv => fused(l, FUSED_QKV, q + kv..q + 2 * kv),
            Weight::FfnGate(l) if self.fused_gate_up => fused(l, "ffn_up.weight", 0..ff),
            Weight::FfnUp(l) if self.fused_gate_up => fused(l, "ffn_up.weight", ff..2 * ff),
            _ => (w.tensor_name(), None),
        }
    }

    /// The configuration for an engine whose sequences may reach `n_ctx` positions: with LongRoPE, the long
    /// factors past the original context, the short ones up to it (llama.cpp's choice by its context size).
    pub fn for_context(&self, n_ctx: usize) -> LlamaConfig {
        let mut config = self.clone();
        if let Some(long_rope) = &self.long_rope {
            let factors = if n_ctx > long_rope.original_context { &long_rope.long } else { &long_rope.short };
            config.rope_freq_factors = Some(factors.clone());
        }
        config
    }

    /// Width of the query projection and of the attention output: `n_head * head_dim`.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the key (and value) projection: `n_head_kv * head_dim` (with latent attention, the cache row).
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Width of the query projection's output: `q_dim`, or with latent attention `n_head` heads of
    /// `nope_dim + rope_dim`.
    pub fn query_width(&self) -> usize {
        match &self.latent {
            Some(l) => self.n_head * l.query_head_width(self.rope_dim),
            None => self.q_dim(),
        }
    }

    /// Width of the attention's output (the output projection's input): `q_dim`, or with latent attention `n_head`
    /// decompressed values of `v_head_dim`.
    pub fn attention_width(&self) -> usize {
        match &self.latent {
            Some(l) => self.n_head * l.v_head_dim,
            None => self.q_dim(),
        }
    }

    /// Whether layer `layer`'s FFN is a mixture of experts (not a dense one).
    pub fn is_moe_layer(&self, layer: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| m.has_layer(layer))
    }

    /// Whether some layer has a dense FFN (`ffn_gate`, `ffn_up`, `ffn_down`, `n_ff` wide).
    pub fn has_dense_ffn(&self) -> bool {
        !self.is_moe_layer(0)
    }

    /// The name of tensor `suffix` (e.g. `"attn_q.weight"`) in block `layer`.
    pub fn layer_tensor(layer: usize, suffix: &str) -> String {
        format!("blk.{layer}.{suffix}")
    }

    /// Every tensor the forward pass reads, with its expected shape (fastest-varying first) and whether it is a
    /// vector read as f32 (a norm weight or a bias: must be F32).
    pub fn expected_tensors(&self) -> Vec<(String, Vec<u64>, bool)> {
        let (d, ff, kv, v) = (self.n_embd as u64, self.n_ff as u64, self.kv_dim() as u64, self.vocab_size as u64);
        let (q, hd) = (self.q_dim() as u64, self.head_dim as u64);
        let mut out = vec![(vocab::TOKEN_EMBD.to_owned(), vec![d, v], false)];
        for l in 0..self.n_layer {
            let mut tensors = Vec::new();
            if self.pre_norms {
                tensors.push(("attn_norm.weight", vec![d], true));
            }
            if let Some(latent) = &self.latent {
                tensors.extend(latent_tensors(latent, self.n_head as u64, d, self.rope_dim as u64));
            } else if self.fused_qkv {
                tensors.push((FUSED_QKV, vec![d, q + 2 * kv], false));
            } else {
                tensors.extend([
                    ("attn_q.weight", vec![d, q], false),
                    ("attn_k.weight", vec![d, kv], false),
                    ("attn_v.weight", vec![d, kv], false),
                ]);
            }
            tensors.push(("attn_output.weight", vec![self.attention_width() as u64, d], false));
            if self.attn_output_bias {
                tensors.push(("attn_output.bias", vec![d], true));
            }
            if self.attn_sinks {
                tensors.push((ATTN_SINKS, vec![self.n_head as u64], true));
            }
            if self.pre_norms {
                tensors.push((self.arch.traits().ffn_norm, vec![d], true));
            }
            match &self.moe {
                Some(moe) if moe.has_layer(l) => tensors.extend(moe_tensors(moe, d)),
                _ if self.fused_gate_up => tensors.push(("ffn_up.weight", vec![d, 2 * ff], false)),
                _ => tensors.extend([("ffn_gate.weight", vec![d, ff], false), ("ffn_up.weight", vec![d, ff], false)]),
            }
            if !self.is_moe_layer(l) {
                tensors.push(("ffn_down.weight", vec![ff, d], false));
            }
            match self.qk_norm {
                Some(QkNorm::Heads) => {
                    tensors.extend([("attn_q_norm.weight", vec![hd], true), ("attn_k_norm.weight", vec![hd], true)])
                }
                Some(QkNorm::Rows) => {
                    tensors.extend([("attn_q_norm.weight", vec![q], true), ("attn_k_norm.weight", vec![kv], true)])
                }
                None => {}
            }
            if self.qkv_bias {
                tensors.extend([
                    ("attn_q.bias", vec![q], true),
                    ("attn_k.bias", vec![kv], true),
                    ("attn_v.bias", vec![kv], true),
                ]);
            }
            if self.post_norms {
                tensors
                    .extend([("post_attention_norm.weight", vec![d], true), ("post_ffw_norm.weight", vec![d], true)]);
            }
            for (suffix, shape, norm) in tensors {
                out.push((Self::layer_tensor(l, suffix), shape, norm));
            }
        }
        out.push(("output_norm.weight".to_owned(), vec![d], true));
        let half_rope = vec![self.rope_dim as u64 / 2];
        if self.long_rope.is_some() {
            for name in [rope_scaling::LONG_FACTORS, rope_scaling::SHORT_FACTORS] {
                out.push((name.to_owned(), half_rope.clone(), true));
            }
        } else if self.rope_freq_factors.is_some() {
            out.push((ROPE_FREQS.to_owned(), half_rope, true));
        }
        if !self.tied_output {
            out.push((vocab::OUTPUT.to_owned(), vec![d, v], false));
        }
        out
    }

    /// Whether every matrix the forward pass multiplies by is of a float type (F32, F16, BF16) in `file`: the token
    /// embedding only where it is the output projection too, the routers aside (their logits are computed from f32
    /// rows on every path). What `activation_precision: "auto"` decides by, as llama.cpp pairs such weights with
    /// float activations.
    pub fn matmul_weights_are_float(&self, file: &GgufFile) -> bool {
        let is_float = |t: GgmlType| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
        self.expected_tensors()
            .iter()
            .filter(|(name, shape, is_norm)| {
                !is_norm
                    && shape.len() >= 2
                    && (name != vocab::TOKEN_EMBD || self.tied_output)
                    && !name.ends_with("ffn_gate_inp.weight")
            })
            .all(|(name, ..)| file.tensor_info(name).is_some_and(|t| is_float(t.dtype)))
    }

    fn check_tensors(&self, file: &GgufFile) -> Result<(), ModelConfigError> {
        for (name, expected, is_norm) in self.expected_tensors() {
            let t = file.tensor(&name)?;
            // Trailing dimensions of 1 are the same tensor (some converters write [n, 1]).
            let mut found = t.shape().to_vec();
            while found.len() > expected.len() && found.last() == Some(&1) {
                found.pop();
            }
            if found != expected {
                return Err(ModelConfigError::TensorShape { tensor: name, expected, found: t.shape().to_vec() });
            }
            if is_norm && t.dtype() != GgmlType::F32 {
                return Err(ModelConfigError::NormNotF32 { tensor: name, dtype: t.dtype() });
            }
            t.require_supported()?;
        }
        Ok(())
    }
}
