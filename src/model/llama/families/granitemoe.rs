//! `granitemoe` (Granite 3.x MoE, 1B-A400M and 3B-A800M; llama.cpp's `src/models/granite-moe.cpp`): Granite's
//! blocks and multipliers with a mixture of experts: a softmax router, the top `expert_used_count` experts of
//! `feed_forward_length`, weights renormalized; Granite MoE Shared adds a shared expert when
//! `expert_shared_feed_forward_length` is above 0.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "granitemoe",
    keys: keys_of!("granitemoe"),
    traits: ArchTraits::LLAMA,
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Granite,
    experts: ExpertsRule::Always(MoeLayout {
        gating: Gating::Softmax,
        normalize_weights: true,
        expert_width: ExpertWidth::FeedForward,
        shared: SharedExpert::WhenSized,
        biases: false,
        activation: ExpertGlu::AsDense,
        keyed: KeyedRouting::NONE,
    }),
};

pub const GRANITEMOE: Architecture = Architecture(&SPEC);
