//! `qwen2moe` (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B; llama.cpp's `src/models/qwen2moe.cpp`): Qwen 2's attention
//! (biased q/k/v, NEOX RoPE) and a mixture of experts: a softmax router, the top `expert_used_count` experts of
//! `expert_feed_forward_length`, weights not renormalized; beside them a shared expert of
//! `expert_shared_feed_forward_length` whose output is scaled by σ(`ffn_gate_inp_shexp` · x). Its own output
//! projection, required.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "qwen2moe",
    keys: keys_of!("qwen2moe"),
    traits: ArchTraits { rope_neox: true, qkv_bias: true, output: OutputProjection::Own, ..ArchTraits::LLAMA },
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Always(MoeLayout {
        gating: Gating::Softmax,
        normalize_weights: false,
        expert_width: ExpertWidth::ExpertFeedForward,
        shared: SharedExpert::SigmoidGated,
        biases: false,
        activation: ExpertGlu::AsDense,
        keyed: KeyedRouting::NONE,
    }),
};

pub const QWEN2MOE: Architecture = Architecture(&SPEC);
