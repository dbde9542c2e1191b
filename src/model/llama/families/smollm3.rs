//! `smollm3` (llama.cpp's `src/models/smollm3.cpp`): llama's blocks, every fourth layer without RoPE.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "smollm3",
    keys: keys_of!("smollm3"),
    traits: ArchTraits::LLAMA,
    // llama.cpp's `n_no_rope_layer_step`.
    layers: LayerPattern::NoRopeEvery(4),
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Dense,
};

pub const SMOLLM3: Architecture = Architecture(&SPEC);
