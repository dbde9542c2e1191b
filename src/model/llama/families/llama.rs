//! `llama` (llama.cpp's `src/models/llama.cpp`): pre-norm blocks, SwiGLU, RoPE on adjacent pairs, one RoPE base.
//! With `llama.expert_count` above 0 its FFNs are mixtures of experts (Mixtral): a softmax router over
//! `ffn_gate_inp`, the top `expert_used_count` experts of `feed_forward_length` each, their weights renormalized.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "llama",
    keys: keys_of!("llama"),
    traits: ArchTraits::LLAMA,
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::WhenCounted(MoeLayout {
        gating: Gating::Softmax,
        normalize_weights: true,
        expert_width: ExpertWidth::FeedForward,
        shared: SharedExpert::WhenSized,
        biases: false,
        activation: ExpertGlu::AsDense,
        keyed: KeyedRouting::NONE,
    }),
};

pub const LLAMA: Architecture = Architecture(&SPEC);
