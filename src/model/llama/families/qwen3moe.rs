//! `qwen3moe` (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B, Qwen3-235B-A22B; llama.cpp's `src/models/qwen3moe.cpp`): Qwen 3's
//! attention (per-head query and key norms, NEOX RoPE) and a mixture of experts in every layer: a softmax router
//! (`ffn_gate_inp`), the top `expert_used_count` of `expert_count` experts, each `expert_feed_forward_length` wide,
//! their weights renormalized to sum to 1 (llama.cpp always does so for this family, whatever the checkpoint's
//! `norm_topk_prob`).

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "qwen3moe",
    keys: keys_of!("qwen3moe"),
    traits: ArchTraits { rope_neox: true, qk_norm: Some(QkNorm::Heads), ..ArchTraits::LLAMA },
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Always(MoeLayout {
        gating: Gating::Softmax,
        normalize_weights: true,
        expert_width: ExpertWidth::ExpertFeedForward,
        shared: SharedExpert::None,
        biases: false,
        activation: ExpertGlu::AsDense,
        keyed: KeyedRouting::NONE,
    }),
};

pub const QWEN3MOE: Architecture = Architecture(&SPEC);
