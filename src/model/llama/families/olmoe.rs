//! `olmoe` (OLMoE-1B-7B; llama.cpp's `src/models/olmoe.cpp`): pre-norm blocks with RMS norms of the whole query and
//! key rows before NEOX RoPE (OLMo 2's row norms, with the input norms kept), and a mixture of experts: a softmax
//! router, the top `expert_used_count` of `expert_count` experts of `feed_forward_length`, weights not
//! renormalized; its own output projection, required.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "olmoe",
    keys: keys_of!("olmoe"),
    traits: ArchTraits {
        rope_neox: true,
        qk_norm: Some(QkNorm::Rows),
        output: OutputProjection::Own,
        ..ArchTraits::LLAMA
    },
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Always(MoeLayout {
        gating: Gating::Softmax,
        normalize_weights: false,
        expert_width: ExpertWidth::FeedForward,
        shared: SharedExpert::None,
        biases: false,
        activation: ExpertGlu::AsDense,
        keyed: KeyedRouting::NONE,
    }),
};

pub const OLMOE: Architecture = Architecture(&SPEC);
