//! `gemma3` (llama.cpp's `src/models/gemma3.cpp`): embeddings scaled by √n_embd; RMS norms of each query and key
//! head before RoPE; norms of the attention and FFN outputs before their residual adds; GELU-gated FFN; RoPE on the
//! two halves of a head (NEOX); five of every six layers attend to a sliding window, with their own RoPE base
//! (`rope.freq_base_swa`, 10000 when absent), the sixth to the whole context. Its final soft cap only when its file
//! sets one; Gemma 3 27B (62 layers) scales its attention by 1/√(n_embd / n_head).

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "gemma3",
    keys: keys_of!("gemma3"),
    traits: ArchTraits::GEMMA,
    // llama.cpp's `set_swa_pattern(6)`.
    layers: LayerPattern::SlidingWindow {
        period: Some(6),
        default_window: WindowDefault::NoWindows,
        default_swa_base: Some(10_000.0),
        scaled: false,
    },
    softcaps: SoftCaps { attention: CapRule::Never, logits: CapRule::WhenKeySet },
    multipliers: MultiplierRule::AttentionByWidthAtLayers(62),
    experts: ExpertsRule::Dense,
};

pub const GEMMA3: Architecture = Architecture(&SPEC);
