//! `gpt-oss` (gpt-oss-20b and -120b; llama.cpp's `src/models/openai-moe.cpp`): pre-norm blocks whose attention
//! has biased query, key, value and output projections, NEOX RoPE with YaRN on every layer, a learned sink logit
//! per query head, and every other layer (the even ones, llama.cpp's `load_swa_pattern(ml, 2)`) attending to a
//! window of `attention.sliding_window` (128 in the real files); the FFN's input norm is named
//! `post_attention_norm`. The FFN is a mixture of experts: the router's biased logits pick the top
//! `expert_used_count` experts (of `expert_feed_forward_length`), weighted by the softmax of the chosen logits only,
//! each expert's projections biased and its activation the clamped SwiGLU. Its own output projection, required.
//!
//! ember requires the q/k/v biases, which llama.cpp's loader takes as optional: every gpt-oss file has them.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "gpt-oss",
    keys: keys_of!("gpt-oss"),
    traits: ArchTraits {
        rope_neox: true,
        qkv_bias: true,
        attn_output_bias: true,
        attn_sinks: true,
        ffn_norm: "post_attention_norm.weight",
        output: OutputProjection::Own,
        ..ArchTraits::LLAMA
    },
    // llama.cpp reads `attention.sliding_window` as a required key; the windowed layers' base is
    // `rope.freq_base_swa` when present, else the full layers', and scaled as theirs.
    layers: LayerPattern::SlidingWindow {
        period: None,
        default_window: WindowDefault::Required,
        default_swa_base: None,
        scaled: true,
    },
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Always(MoeLayout {
        gating: Gating::SoftmaxOfChosen,
        normalize_weights: false,
        expert_width: ExpertWidth::ExpertFeedForward,
        shared: SharedExpert::None,
        biases: true,
        activation: ExpertGlu::SwigluOai { alpha: 1.702, limit: 7.0 },
        keyed: KeyedRouting::NONE,
    }),
};

pub const GPT_OSS: Architecture = Architecture(&SPEC);
