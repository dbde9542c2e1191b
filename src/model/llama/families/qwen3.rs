//! `qwen3` (llama.cpp's `src/models/qwen3.cpp`): llama's blocks with RMS norms of each query and key head before
//! RoPE (as Gemma 3's), no biases, NEOX RoPE; heads may be wider than `n_embd / n_head` (`attention.key_length`).

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "qwen3",
    keys: keys_of!("qwen3"),
    traits: ArchTraits { rope_neox: true, qk_norm: Some(QkNorm::Heads), ..ArchTraits::LLAMA },
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Dense,
};

pub const QWEN3: Architecture = Architecture(&SPEC);
