//! `deepseek2` (DeepSeek-V2 and -V2-Lite, and the files converted under the same name: DeepSeek-V3 and R1, Kimi K2,
//! Moonlight; llama.cpp's `src/models/deepseek2.cpp`): multi-head latent attention (`latent.rs`; queries through
//! `attn_q` or, with `attention.q_lora_rank`, a compressed rank; one compressed key row per position, its prefix the
//! values, decompressed per head by `attn_k_b` / `attn_v_b`), RoPE on adjacent pairs of the last
//! `rope.dimension_count` dimensions only, YaRN with its `yarn_log_multiplier`. The FFNs: the first
//! `leading_dense_block_count` dense, then a mixture of experts whose router is a softmax or a sigmoid
//! (`expert_gating_func`), optionally biased for the choice only (`exp_probs_b`), optionally limited to the best
//! `expert_group_used_count` of `expert_group_count` groups, the weights renormalized when `expert_weights_norm`
//! and scaled by `expert_weights_scale`; beside them `expert_shared_count` shared experts, ungated.
//!
//! ember requires the split `attn_k_b` / `attn_v_b` of current files (llama.cpp's `is_mla()`); older files with one
//! `attn_kv_b` are refused by key, as are DeepSeek-OCR and the multi-token-prediction layers.

use super::super::architecture::*;

static SPEC: ArchSpec = ArchSpec {
    name: "deepseek2",
    keys: keys_of!("deepseek2"),
    traits: ArchTraits { latent_attention: true, ..ArchTraits::LLAMA },
    layers: LayerPattern::Full,
    softcaps: SoftCaps::NONE,
    multipliers: MultiplierRule::Standard,
    experts: ExpertsRule::Always(MoeLayout {
        // llama.cpp's default for the V2 files that predate `expert_gating_func`.
        gating: Gating::Softmax,
        normalize_weights: false,
        expert_width: ExpertWidth::ExpertFeedForward,
        shared: SharedExpert::Counted,
        biases: false,
        activation: ExpertGlu::AsDense,
        keyed: KeyedRouting { gating: true, normalize: true, groups: true, selection_bias: true, leading_dense: true },
    }),
};

pub const DEEPSEEK2: Architecture = Architecture(&SPEC);
