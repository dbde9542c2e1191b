//! `olmo2` (OLMo 2; llama.cpp's `src/models/olmo2.cpp`): no norms before the attention and the FFN, norms of their
//! outputs before the residual adds (Gemma's post-norms), RMS norms of the whole query and key rows (not per head)
//! before RoPE, NEOX RoPE, SwiGLU, its own output projection. Its OLMo 3 files' sliding windows are refused.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "olmo2",
    keys: keys_of!("olmo2"),
    traits: ArchTraits {
        rope_neox: true,
        qk_norm: Some(QkNorm::Rows),
        pre_norms: false,
        post_norms: true,
        output: OutputProjection::Own,
        ..ArchTraits::LLAMA
    },
    layers: LayerPattern::FullWindowsRefused,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Dense,
};

pub const OLMO2: Architecture = Architecture(&SPEC);
