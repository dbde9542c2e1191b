//! `gemma2` (llama.cpp's `src/models/gemma2.cpp`): Gemma 3's blocks without the head norms; every other layer (the
//! even ones) attends to a sliding window (4096 when its key is absent) and turns by `rope.freq_base_swa` (the same
//! base when absent); attention scores and the final logits soft-capped (`c · tanh(x / c)`, 50 and 30 when absent).
//! Gemma 2 27B (46 layers) scales its attention by 1/√(n_embd / n_head).

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "gemma2",
    keys: keys_of!("gemma2"),
    traits: ArchTraits { qk_norm: None, ..ArchTraits::GEMMA },
    // llama.cpp's `load_swa_pattern(ml, 2)`.
    layers: LayerPattern::SlidingWindow {
        period: None,
        default_window: WindowDefault::Size(4096),
        default_swa_base: None,
        scaled: false,
    },
    softcaps: SoftCaps { attention: CapRule::KeyOr(50.0), logits: CapRule::KeyOr(30.0) },
    multipliers: MultiplierRule::AttentionByWidthAtLayers(46),
    experts: ExpertsRule::Dense,
};

pub const GEMMA2: Architecture = Architecture(&SPEC);
