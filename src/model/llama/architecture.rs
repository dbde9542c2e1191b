//! What an architecture is to ember: one [`ArchSpec`] per family, in its own file under `families/`, holding
//! everything that tells that family apart as data: its name and metadata keys, the flags of its blocks
//! ([`ArchTraits`]), its layer pattern, soft caps, multipliers and mixture-of-experts layout. The loader
//! (`config.rs`), the multipliers, the synthetic models and the forward pass read the spec; none of them matches on
//! a family. Adding a family is adding a file to `families/` and its line to [`families::ALL`].

use std::fmt;

use super::families;
use super::rope_scaling::RopeScalingKeys;

/// Everything that distinguishes one architecture (`general.architecture`) from the generic block.
#[derive(Debug)]
pub struct ArchSpec {
    /// The `general.architecture` value, also the prefix of its metadata keys.
    pub name: &'static str,
    /// Its metadata keys (`keys_of!`).
    pub keys: Keys,
    pub traits: ArchTraits,
    /// Which layers attend to a window and which RoPE base each turns by.
    pub layers: LayerPattern,
    pub softcaps: SoftCaps,
    pub multipliers: MultiplierRule,
    /// Whether (and how) its feed-forward blocks are mixtures of experts.
    pub experts: ExpertsRule,
}

/// One architecture: a handle on its [`ArchSpec`] (copied freely, compared by name).
#[derive(Clone, Copy)]
pub struct Architecture(pub(super) &'static ArchSpec);

impl Architecture {
    /// Every architecture ember runs.
    pub fn all() -> &'static [Architecture] {
        &families::ALL
    }

    /// The architecture whose `general.architecture` value is `name`.
    pub fn named(name: &str) -> Option<Architecture> {
        Self::all().iter().copied().find(|a| a.name() == name)
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn spec(self) -> &'static ArchSpec {
        self.0
    }

    pub(super) fn keys(self) -> &'static Keys {
        &self.0.keys
    }

    /// What the architecture changes in the forward pass (llama.cpp's `src/models/*.cpp`).
    pub fn traits(self) -> ArchTraits {
        self.0.traits
    }
}

impl PartialEq for Architecture {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Architecture {}

impl fmt::Debug for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

/// What an architecture changes in the forward pass, beyond its layer pattern.
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
    /// The attention's output projection adds a bias (`attn_output.bias`, gpt-oss).
    pub attn_output_bias: bool,
    /// Each query head has a sink: a learned logit that joins its softmax's denominator and attends to nothing
    /// (`attn_sinks.weight`, `n_head` values; gpt-oss).
    pub attn_sinks: bool,
    /// The FFN input norm's tensor suffix: `ffn_norm.weight`, or gpt-oss' `post_attention_norm.weight` (the same
    /// norm under the name its converter gives it).
    pub ffn_norm: &'static str,
    pub ffn_activation: FfnActivation,
    /// `ffn_up` holds the gate's rows, then the up projection's; no `ffn_gate`.
    pub fused_gate_up: bool,
    /// Where the logits' projection comes from: `output.weight`, or the token embedding.
    pub output: OutputProjection,
    /// Multi-head latent attention (DeepSeek V2 and V3, `latent.rs`) in place of the query, key and value
    /// projections: one compressed key row per position in the cache, its prefix the values.
    pub latent_attention: bool,
}

impl ArchTraits {
    /// Llama's blocks: pre-norms, SwiGLU, RoPE on adjacent pairs, no biases, `output.weight` or the embedding.
    pub const LLAMA: ArchTraits = ArchTraits {
        rope_neox: false,
        embed_scale: false,
        qk_norm: None,
        pre_norms: true,
        post_norms: false,
        qkv_bias: false,
        attn_output_bias: false,
        attn_sinks: false,
        ffn_norm: "ffn_norm.weight",
        ffn_activation: FfnActivation::Silu,
        fused_gate_up: false,
        output: OutputProjection::OwnOrTied,
        latent_attention: false,
    };

    /// Gemma's blocks: embeddings scaled by √n_embd, per-head query and key norms, post-norms, GeGLU, NEOX RoPE,
    /// logits through the embedding.
    pub const GEMMA: ArchTraits = ArchTraits {
        rope_neox: true,
        embed_scale: true,
        qk_norm: Some(QkNorm::Heads),
        post_norms: true,
        ffn_activation: FfnActivation::GeluTanh,
        output: OutputProjection::Tied,
        ..ArchTraits::LLAMA
    };
}

/// Which tensor projects the final hidden state to logits, as llama.cpp's `load_tensors` creates `output` for each
/// architecture (`src/models/*.cpp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputProjection {
    /// `output.weight` when the file has one, else `token_embd.weight` (llama.cpp: `TENSOR_NOT_REQUIRED`, then the
    /// embedding `TENSOR_DUPLICATED`).
    OwnOrTied,
    /// `output.weight`, required (llama.cpp creates it with no fallback): OLMo 2, Qwen 2 MoE.
    Own,
    /// Always `token_embd.weight` (llama.cpp never reads `output.weight`, and refuses a file with one as having a
    /// tensor too many): Gemma 2 and 3.
    Tied,
}

/// Which layers attend to a sliding window, and which RoPE base each layer turns by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LayerPattern {
    /// Every layer attends to the whole context and turns by `rope.freq_base`.
    Full,
    /// [`LayerPattern::Full`], and a file that asks for windows (`attention.sliding_window` above 0) is refused:
    /// OLMo 2's files are read as OLMo 3's too, whose windowed layers ember does not run.
    FullWindowsRefused,
    /// Layer `l` attends to a window unless `l mod period == period − 1`; windowed layers turn by
    /// `rope.freq_base_swa`.
    SlidingWindow {
        /// The layer period, or `None` to read `attention.sliding_window_pattern` (default 2, llama.cpp's
        /// `load_swa_pattern`).
        period: Option<usize>,
        /// What an absent `attention.sliding_window` means. A key of 0 means no windows.
        default_window: WindowDefault,
        /// The windowed layers' base when `rope.freq_base_swa` is absent: `None` for the full layers' base.
        default_swa_base: Option<f32>,
        /// The windowed layers' RoPE is scaled as the full layers' is (gpt-oss: llama.cpp sets
        /// `rope_freq_scale_train_swa` to `rope_freq_scale_train`); otherwise never (Gemma 2 and 3).
        scaled: bool,
    },
    /// Layer `l` has no RoPE when `(l + 1) mod period == 0` (SmolLM3's `n_no_rope_layer_step`).
    NoRopeEvery(usize),
}

/// What a family's file without `attention.sliding_window` means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowDefault {
    /// No windows at all (Gemma 3's files always carry the key).
    NoWindows,
    /// This window (Gemma 2's 4096, as llama.cpp defaults it).
    Size(u32),
    /// The key is required: llama.cpp refuses such a file (gpt-oss).
    Required,
}

/// When the attention scores and the logits are soft-capped (`c · tanh(x / c)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftCaps {
    /// `attn_logit_softcapping`.
    pub attention: CapRule,
    /// `final_logit_softcapping`.
    pub logits: CapRule,
}

impl SoftCaps {
    pub const NONE: SoftCaps = SoftCaps { attention: CapRule::Never, logits: CapRule::Never };
}

/// How one soft cap is read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CapRule {
    /// The architecture has none (its key is ignored, as llama.cpp ignores it).
    Never,
    /// The key's value, this one when absent (Gemma 2's 50 and 30).
    KeyOr(f32),
    /// The key's value when present and not 0 (Gemma 3's final cap).
    WhenKeySet,
}

/// How the constant multipliers are read (`multipliers.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MultiplierRule {
    /// 1/√head_dim for the attention, √n_embd for the embeddings when `ArchTraits::embed_scale`.
    Standard,
    /// Standard, but a model of exactly this many layers (Gemma 2 27B, Gemma 3 27B) scales its attention by
    /// 1/√(n_embd / n_head), as llama.cpp recognizes them.
    AttentionByWidthAtLayers(usize),
    /// Granite's four multipliers from its keys.
    Granite,
}

/// Whether an architecture's feed-forward blocks are mixtures of experts, and their layout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExpertsRule {
    /// Dense FFNs only; a file with `expert_count` above 0 is refused.
    Dense,
    /// Always experts (`expert_count` and `expert_used_count` required).
    Always(MoeLayout),
    /// Experts when the file's `expert_count` is above 0, else dense (llama: Mixtral; Granite MoE's files).
    WhenCounted(MoeLayout),
}

/// The layout of a family's mixture-of-experts block (llama.cpp's `build_moe_ffn` arguments for that family).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeLayout {
    /// The router's probabilities from its logits.
    pub gating: Gating,
    /// The selected experts' weights are divided by their sum (llama.cpp's `norm_w`).
    pub normalize_weights: bool,
    /// Where an expert's FFN width comes from.
    pub expert_width: ExpertWidth,
    /// A shared expert beside the routed ones.
    pub shared: SharedExpert,
    /// The router's logits and each expert's three projections add biases (`ffn_gate_inp.bias`,
    /// `ffn_{gate,up,down}_exps.bias`; gpt-oss).
    pub biases: bool,
    /// The experts' gated activation.
    pub activation: ExpertGlu,
    /// What the family reads from keys and tensors beyond the counts and widths.
    pub keyed: KeyedRouting,
}

/// The parts of a mixture-of-experts block a family reads from its file (DeepSeek V2/V3's), rather than fixes in its
/// layout. Where a part is not keyed, its key is ignored (or, for expert groups, refused by name) as llama.cpp
/// ignores it for that family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyedRouting {
    /// `expert_gating_func` (1 softmax, 2 sigmoid) overrides `MoeLayout::gating` when present.
    pub gating: bool,
    /// `expert_weights_norm` (default false) decides `MoeLayout::normalize_weights`.
    pub normalize: bool,
    /// `expert_group_count` / `expert_group_used_count`: group-limited routing.
    pub groups: bool,
    /// `exp_probs_b.bias`, when the file has it: a per-expert bias added to the probabilities to choose the experts
    /// (not to weight them).
    pub selection_bias: bool,
    /// `leading_dense_block_count`: that many first blocks have dense FFNs (`feed_forward_length` wide).
    pub leading_dense: bool,
}

impl KeyedRouting {
    /// Nothing keyed: the layout is the family's.
    pub const NONE: KeyedRouting =
        KeyedRouting { gating: false, normalize: false, groups: false, selection_bias: false, leading_dense: false };
}

/// The gated activation of the routed experts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExpertGlu {
    /// The dense FFN's (`ArchTraits::ffn_activation`).
    AsDense,
    /// gpt-oss' clamped SwiGLU: `x = min(gate, limit)`, `y = clamp(up, −limit, limit)`, `x · σ(alpha·x) · (y + 1)`
    /// (llama.cpp's `LLM_FFN_SWIGLU_OAI_MOE`, alpha 1.702 and limit 7 as constants there too).
    SwigluOai { alpha: f32, limit: f32 },
}

/// The router's probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    Softmax,
    Sigmoid,
    /// The top experts by raw logit, their weights the softmax over the chosen logits only (llama.cpp's
    /// `SOFTMAX_WEIGHT`, gpt-oss).
    SoftmaxOfChosen,
}

/// The width of each routed expert's FFN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertWidth {
    /// `feed_forward_length` (Mixtral, OLMoE, Granite MoE).
    FeedForward,
    /// `expert_feed_forward_length` (Qwen 2 and 3 MoE).
    ExpertFeedForward,
}

/// The shared expert every token runs beside its routed ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedExpert {
    None,
    /// `ffn_{gate,up,down}_shexp` when `expert_shared_feed_forward_length` is above 0 (Granite MoE shared).
    WhenSized,
    /// Always, `expert_shared_feed_forward_length` wide, its output times σ(`ffn_gate_inp_shexp` · x) (Qwen 2
    /// MoE).
    SigmoidGated,
    /// `expert_shared_count` experts of the routed experts' width, as one FFN of their total width, ungated
    /// (DeepSeek); none when the count is 0.
    Counted,
}

/// The metadata keys of one architecture (`&'static` so that errors can name them).
#[derive(Debug)]
pub struct Keys {
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
    pub(super) expert_count: &'static str,
    pub(super) expert_used_count: &'static str,
    pub(super) expert_feed_forward_length: &'static str,
    pub(super) expert_shared_feed_forward_length: &'static str,
    pub(super) expert_weights_scale: &'static str,
    pub(super) expert_group_count: &'static str,
    pub(super) expert_group_used_count: &'static str,
    pub(super) expert_shared_count: &'static str,
    pub(super) expert_gating_func: &'static str,
    pub(super) expert_weights_norm: &'static str,
    pub(super) leading_dense_block_count: &'static str,
    pub(super) q_lora_rank: &'static str,
    pub(super) kv_lora_rank: &'static str,
    pub(super) key_length_mla: &'static str,
    pub(super) value_length_mla: &'static str,
    pub(super) nextn_predict_layers: &'static str,
    pub(super) attention_temperature_scale: &'static str,
    pub(super) rope_scaling: RopeScalingKeys,
}

/// The keys of architecture `$arch`: llama.cpp's `LLM_KV_*` names with its prefix.
macro_rules! keys_of {
    ($arch:literal) => {
        $crate::model::llama::architecture::Keys {
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
            expert_count: concat!($arch, ".expert_count"),
            expert_used_count: concat!($arch, ".expert_used_count"),
            expert_feed_forward_length: concat!($arch, ".expert_feed_forward_length"),
            expert_shared_feed_forward_length: concat!($arch, ".expert_shared_feed_forward_length"),
            expert_weights_scale: concat!($arch, ".expert_weights_scale"),
            expert_group_count: concat!($arch, ".expert_group_count"),
            expert_group_used_count: concat!($arch, ".expert_group_used_count"),
            expert_shared_count: concat!($arch, ".expert_shared_count"),
            expert_gating_func: concat!($arch, ".expert_gating_func"),
            expert_weights_norm: concat!($arch, ".expert_weights_norm"),
            leading_dense_block_count: concat!($arch, ".leading_dense_block_count"),
            q_lora_rank: concat!($arch, ".attention.q_lora_rank"),
            kv_lora_rank: concat!($arch, ".attention.kv_lora_rank"),
            key_length_mla: concat!($arch, ".attention.key_length_mla"),
            value_length_mla: concat!($arch, ".attention.value_length_mla"),
            nextn_predict_layers: concat!($arch, ".nextn_predict_layers"),
            attention_temperature_scale: concat!($arch, ".attention.temperature_scale"),
            rope_scaling: $crate::model::llama::rope_scaling::RopeScalingKeys {
                kind: concat!($arch, ".rope.scaling.type"),
                factor: concat!($arch, ".rope.scaling.factor"),
                scale_linear: concat!($arch, ".rope.scale_linear"),
                attn_factor: concat!($arch, ".rope.scaling.attn_factor"),
                original_context: concat!($arch, ".rope.scaling.original_context_length"),
                yarn_log_multiplier: concat!($arch, ".rope.scaling.yarn_log_multiplier"),
            },
        }
    };
}
pub(super) use keys_of;

/// What the query and key norms (`attn_q_norm`, `attn_k_norm`) normalize, before RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    /// Each head, with a `head_dim`-wide weight shared by the heads (Gemma 3, Qwen 3).
    Heads,
    /// The whole query and key rows, with `q_dim`- and `kv_dim`-wide weights (OLMo 2, OLMoE).
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
