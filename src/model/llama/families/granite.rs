//! `granite` (IBM Granite 3.x dense; llama.cpp's `src/models/granite.cpp`): llama's blocks with four constant
//! multipliers (`multipliers.rs`): of the embeddings, of each block output before its residual add, of the
//! query·key products, and a divisor of the logits.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "granite",
    keys: keys_of!("granite"),
    traits: ArchTraits::LLAMA,
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Granite,
    experts: ExpertsRule::Dense,
};

pub const GRANITE: Architecture = Architecture(&SPEC);
