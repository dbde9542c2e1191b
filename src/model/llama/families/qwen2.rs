//! `qwen2` (Qwen 2 and 2.5, DeepSeek-R1's Qwen distills; llama.cpp's `src/models/qwen2.cpp`): llama's blocks with
//! biases on the query, key and value projections, and RoPE on the two halves of a head (NEOX).

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "qwen2",
    keys: keys_of!("qwen2"),
    traits: ArchTraits { rope_neox: true, qkv_bias: true, ..ArchTraits::LLAMA },
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Dense,
};

pub const QWEN2: Architecture = Architecture(&SPEC);
