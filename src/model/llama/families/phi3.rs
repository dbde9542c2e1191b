//! `phi3` (Phi-3, 3.5 and 4 mini; llama.cpp's `src/models/phi3.cpp`): llama's blocks with the gate and up
//! projections in one tensor (`ffn_up`, the gate's rows first), NEOX RoPE, and LongRoPE (`rope_scaling.rs`).

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "phi3",
    keys: keys_of!("phi3"),
    traits: ArchTraits { rope_neox: true, fused_gate_up: true, ..ArchTraits::LLAMA },
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Dense,
};

pub const PHI3: Architecture = Architecture(&SPEC);
