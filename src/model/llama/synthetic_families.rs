//! The model families `ember-cli synthetic --family` writes and `tests/forward_families.rs` rebuilds: each
//! family's real layer shapes with fewer layers and a 512-token vocabulary, so that llama.cpp and ember can be
//! compared on the architecture (`scripts/llamacpp/family_fixtures.py`) in files small enough for a test.

use super::architecture::Gating;
use super::experts::ExpertGroups;
use super::families;
use super::latent::LatentAttention;
use super::rope_scaling::LongRope;
use super::synthetic::{GraniteScales, SyntheticDeepseek, SyntheticExperts, SyntheticSpec};
use crate::model::gguf::GgmlType;

/// The suffix of a peaked family's name, and its final norm's gain.
const PEAKED: &str = "-peaked";
const PEAKED_GAIN: f32 = 4.0;

impl SyntheticSpec {
    /// The families [`SyntheticSpec::family`] knows.
    pub const FAMILIES: [&'static str; 38] = [
        "qwen2.5-0.5b",
        "qwen3-0.6b",
        "llama3.2-1b",
        "mistral-nemo",
        "gemma3-tiny-linear8",
        "phi3.5-mini",
        "phi3.5-mini-long",
        "qwen3-0.6b-yarn4",
        "smollm3-3b",
        "gemma2-2b",
        "granite3.1-2b",
        "gemma2-27b-scale",
        "gemma3-27b-scale",
        "olmo2-1b",
        "qwen3moe-small",
        "mixtral-small",
        "qwen2moe-small",
        "olmoe-small",
        "granitemoe-small",
        "qwen3-30b-a3b",
        "mixtral-8x7b",
        "gpt-oss-small",
        "gpt-oss-small-mxfp4",
        "deepseek2-lite-small",
        "deepseek3-small",
        "deepseek2-lite",
        "llama3.2-1b-iq4_nl",
        "llama3.2-1b-iq4_xs",
        "llama3.2-1b-iq3_xxs",
        "llama3.2-1b-iq3_s",
        "llama3.2-1b-iq2_xxs",
        "llama3.2-1b-iq2_xs",
        "llama3.2-1b-iq2_s",
        "llama3.2-1b-iq1_s",
        "llama3.2-1b-iq1_m",
        "llama3.2-1b-tq1_0",
        "llama3.2-1b-tq2_0",
        "llama3.2-1b-dynamic",
    ];

    /// Family `name`'s layer shapes with `n_layer` layers and seed `seed`; `None` for a name not in
    /// [`SyntheticSpec::FAMILIES`]. A name of `FAMILIES` followed by `-peaked` is that family with its final norm
    /// 4 times as large (`output_norm_gain`): logits 4 times as spread, most positions with a clear top token.
    pub fn family(name: &str, seed: u64, n_layer: usize) -> Option<Self> {
        if let Some(family) = name.strip_suffix(PEAKED) {
            return Some(SyntheticSpec { output_norm_gain: PEAKED_GAIN, ..Self::family(family, seed, n_layer)? });
        }
        let base =
            |arch| SyntheticSpec { arch, seed, n_layer, vocab_size: 512, context_length: 256, ..Self::tiny(seed) };
        Some(match name {
            // `qwen2`: 896 wide, 14 query heads and 2 key/value heads of 64, FFN 4864.
            "qwen2.5-0.5b" => {
                SyntheticSpec { n_embd: 896, n_ff: 4864, n_head: 14, n_head_kv: 2, ..base(families::QWEN2) }
            }
            // `qwen3`: 1024 wide, 16 query heads and 8 key/value heads of 128 (wider than 1024 / 16), FFN 3072.
            "qwen3-0.6b" => SyntheticSpec {
                n_embd: 1024,
                n_ff: 3072,
                n_head: 16,
                n_head_kv: 8,
                head_dim: Some(128),
                ..base(families::QWEN3)
            },
            // `llama`: 2048 wide, 32 query heads and 8 key/value heads of 64, FFN 8192, RoPE base 500000 with
            // Llama 3.1's frequency factors for a factor of 32 (what Llama 3.2 1B's file carries).
            "llama3.2-1b" => SyntheticSpec {
                n_embd: 2048,
                n_ff: 8192,
                n_head: 32,
                n_head_kv: 8,
                rope_base: 500_000.0,
                rope_freq_factors: Some(llama3_rope_factors(500_000.0, 64, 32.0)),
                ..base(families::LLAMA)
            },
            // `llama` with heads of 128 where 5120 / 32 is 160 (`attention.key_length`): Mistral Nemo 12B's 32
            // query and 8 key/value heads, FFN 14336, RoPE base 1000000.
            "mistral-nemo" => SyntheticSpec {
                n_embd: 5120,
                n_ff: 14336,
                n_head: 32,
                n_head_kv: 8,
                head_dim: Some(128),
                rope_base: 1_000_000.0,
                ..base(families::LLAMA)
            },
            // A small Gemma 3 (six sliding-window layers of 8 positions, then a global one) whose global layer
            // has linear RoPE scaling by 8, as Gemma 3 4B–27B's files do: the windowed layers stay unscaled.
            "gemma3-tiny-linear8" => {
                SyntheticSpec { n_layer, rope_linear_factor: Some(8.0), ..Self::tiny_gemma3(seed) }
            }
            // `phi3`: 3072 wide, 32 query and 32 key/value heads of 96, FFN 8192, the q/k/v and the gate/up
            // projections fused, LongRoPE with Phi-3.5's attention factor (√(1 + ln 32 / ln 4096)); the short
            // factors apply (an original context of 4096, past the 256 positions of these files).
            "phi3.5-mini" => phi3_5_mini(base(families::PHI3), 4096),
            // The same with an original context of 128, so that a 256-position context takes the long factors.
            "phi3.5-mini-long" => phi3_5_mini(base(families::PHI3), 128),
            // Qwen 3's layers with YaRN by 4 over an original context of 64 (as Qwen 3's 128k files scale 32k by 4):
            // with these files' RoPE base, pairs 0 to 13 of 64 lie on the ramp between kept and scaled speeds.
            "qwen3-0.6b-yarn4" => {
                SyntheticSpec { rope_yarn: Some((4.0, 64)), ..Self::family("qwen3-0.6b", seed, n_layer)? }
            }
            // `smollm3`: 2048 wide, 16 query and 4 key/value heads of 128, FFN 11008, RoPE base 5000000; every
            // fourth layer without RoPE (so four layers or more to see one).
            "smollm3-3b" => SyntheticSpec {
                n_embd: 2048,
                n_ff: 11008,
                n_head: 16,
                n_head_kv: 4,
                rope_base: 5_000_000.0,
                ..base(families::SMOLLM3)
            },
            // `gemma2`: 2304 wide, 8 query and 4 key/value heads of 256, FFN 9216; windows of 8 positions (the real
            // model's are 4096) on the even layers, so that 16 positions see both kinds; soft caps of 2 and 10 (the
            // real 50 and 30 barely touch random weights' scores and logits) so that leaving one out shows.
            "gemma2-2b" => SyntheticSpec {
                n_embd: 2304,
                n_ff: 9216,
                n_head: 8,
                n_head_kv: 4,
                head_dim: Some(256),
                sliding_window: Some(8),
                softcaps: Some((2.0, 10.0)),
                ..base(families::GEMMA2)
            },
            // `granite`: Granite 3.1 2B's layers (2048 wide, 32 query and 8 key/value heads of 64, FFN 8192) and its
            // four multipliers: embeddings ×12, residual branches ×0.22, query·key products ×1/64 (not 1/√64),
            // logits ÷8.
            "granite3.1-2b" => SyntheticSpec {
                n_embd: 2048,
                n_ff: 8192,
                n_head: 32,
                n_head_kv: 8,
                granite: Some(GraniteScales::GRANITE_3_1_2B),
                ..base(families::GRANITE)
            },
            // Gemma 2 27B's layer count (46, by which llama.cpp knows it) at small widths: 512 wide, 4 query and 2
            // key/value heads of 64, so that its attention scale 1/√(512 / 4) differs from 1/√64; windows of 8;
            // F16 matrices, so that 8-bit activations do not drift apart over the 46 layers.
            "gemma2-27b-scale" => SyntheticSpec {
                matrix_type: Some(GgmlType::F16),
                n_embd: 512,
                n_ff: 512,
                n_head: 4,
                n_head_kv: 2,
                head_dim: Some(64),
                sliding_window: Some(8),
                ..base(families::GEMMA2)
            },
            // Gemma 3 27B's layer count (62) at the same widths.
            "gemma3-27b-scale" => {
                SyntheticSpec { arch: families::GEMMA3, ..Self::family("gemma2-27b-scale", seed, n_layer)? }
            }
            // `olmo2`: OLMo 2 1B's layers (2048 wide, 16 query and 16 key/value heads of 128, FFN 8192, RoPE base
            // 500000): no input norms, output norms before the residual adds, whole-row query and key norms, its
            // own output projection.
            "olmo2-1b" => SyntheticSpec {
                n_embd: 2048,
                n_ff: 8192,
                n_head: 16,
                n_head_kv: 16,
                rope_base: 500_000.0,
                ..base(families::OLMO2)
            },
            // The mixture-of-experts families' fixtures have F16 matrices: with them ember's precise path computes
            // llama.cpp's logits to a few thousandths, which checks the routing and the experts' arithmetic closely;
            // on 8-bit activations a router's near-tie may pick another expert in one engine than in the other.
            // `qwen3moe` at small widths: 512 wide, 8 query and 4 key/value heads of 128 (wider than 512 / 8, as
            // Qwen3-30B-A3B's 32 heads of 128 are wider than 2048 / 32), 32 experts of 256, 8 per token.
            "qwen3moe-small" => SyntheticSpec {
                matrix_type: Some(GgmlType::F16),
                n_embd: 512,
                n_ff: 1536,
                n_head: 8,
                n_head_kv: 4,
                head_dim: Some(128),
                experts: Some(SyntheticExperts { n_expert: 32, n_used: 8, n_ff_exp: 256, n_ff_shared: None }),
                ..base(families::QWEN3MOE)
            },
            // `llama` with experts (Mixtral) at small widths: 512 wide, 8 query and 2 key/value heads, 8 experts of
            // 1024, 2 per token.
            "mixtral-small" => SyntheticSpec {
                matrix_type: Some(GgmlType::F16),
                n_embd: 512,
                n_ff: 1024,
                n_head: 8,
                n_head_kv: 2,
                rope_base: 1_000_000.0,
                experts: Some(SyntheticExperts { n_expert: 8, n_used: 2, n_ff_exp: 1024, n_ff_shared: None }),
                ..base(families::LLAMA)
            },
            // `qwen2moe` at small widths: 512 wide, 8 heads, biased q/k/v, 16 experts of 256, 4 per token, and a
            // gated shared expert of 1024 (Qwen1.5-MoE-A2.7B: 60 experts of 1408, 4 per token, shared 5632).
            "qwen2moe-small" => SyntheticSpec {
                matrix_type: Some(GgmlType::F16),
                n_embd: 512,
                n_ff: 1024,
                n_head: 8,
                n_head_kv: 8,
                experts: Some(SyntheticExperts { n_expert: 16, n_used: 4, n_ff_exp: 256, n_ff_shared: Some(1024) }),
                ..base(families::QWEN2MOE)
            },
            // `olmoe` at small widths: 512 wide, 8 heads (its row norms are n_embd wide for keys too), 16 experts of
            // 256, 4 per token (OLMoE-1B-7B: 64 of 1024, 8 per token).
            "olmoe-small" => SyntheticSpec {
                matrix_type: Some(GgmlType::F16),
                n_embd: 512,
                n_ff: 256,
                n_head: 8,
                n_head_kv: 8,
                experts: Some(SyntheticExperts { n_expert: 16, n_used: 4, n_ff_exp: 256, n_ff_shared: None }),
                ..base(families::OLMOE)
            },
            // `granitemoe` at small widths with Granite 3.1's multipliers: 512 wide, 8 query and 4 key/value heads,
            // 16 experts of 256, 4 per token (Granite 3.1 1B-A400M: 1024 wide, 32 experts of 512, 8 per token).
            "granitemoe-small" => SyntheticSpec {
                matrix_type: Some(GgmlType::F16),
                n_embd: 512,
                n_ff: 256,
                n_head: 8,
                n_head_kv: 4,
                granite: Some(GraniteScales::GRANITE_3_1_2B),
                experts: Some(SyntheticExperts { n_expert: 16, n_used: 4, n_ff_exp: 256, n_ff_shared: None }),
                ..base(families::GRANITEMOE)
            },
            // Qwen3-30B-A3B's real layers (for benchmarks): 2048 wide, 32 query and 4 key/value heads of 128, 128
            // experts of 768, 8 per token; a 151936-token vocabulary is the caller's to add.
            "qwen3-30b-a3b" => SyntheticSpec {
                n_embd: 2048,
                n_ff: 6144,
                n_head: 32,
                n_head_kv: 4,
                head_dim: Some(128),
                rope_base: 1_000_000.0,
                experts: Some(SyntheticExperts { n_expert: 128, n_used: 8, n_ff_exp: 768, n_ff_shared: None }),
                ..base(families::QWEN3MOE)
            },
            // Mixtral 8x7B's real layers (for benchmarks): 4096 wide, 32 query and 8 key/value heads, 8 experts of
            // 14336, 2 per token.
            "mixtral-8x7b" => SyntheticSpec {
                n_embd: 4096,
                n_ff: 14336,
                n_head: 32,
                n_head_kv: 8,
                rope_base: 1_000_000.0,
                experts: Some(SyntheticExperts { n_expert: 8, n_used: 2, n_ff_exp: 14336, n_ff_shared: None }),
                ..base(families::LLAMA)
            },
            // `gpt-oss` at small widths, with gpt-oss-20b's traits: 576 wide (not whole 256-blocks, as 2880 is not), 8
            // query and 2 key/value heads of 64 (queries 512 wide, narrower than the stream as 4096 is wider), 16
            // experts of 576 with 4 per token (the real 32 of 2880, 4 per token), RoPE base 150000 with YaRN by 32
            // over 4096 (the real file's: pairs 8 to 18 of 32 on the ramp), windows of 8 (the real 128) on the even
            // layers. F16 matrices, as the other mixtures' fixtures.
            "gpt-oss-small" => SyntheticSpec {
                matrix_type: Some(GgmlType::F16),
                ..Self::family("gpt-oss-small-mxfp4", seed, n_layer)?
            },
            // The same with the published files' types: experts MXFP4, every other matrix Q8_0.
            "gpt-oss-small-mxfp4" => SyntheticSpec {
                n_embd: 576,
                n_ff: 576,
                n_head: 8,
                n_head_kv: 2,
                head_dim: Some(64),
                rope_base: 150_000.0,
                rope_yarn: Some((32.0, 4096)),
                sliding_window: Some(8),
                experts: Some(SyntheticExperts { n_expert: 16, n_used: 4, n_ff_exp: 576, n_ff_shared: None }),
                ..base(families::GPT_OSS)
            },
            // `deepseek2` at small widths with DeepSeek-V2-Lite's traits: 512 wide, 8 heads whose queries come from
            // `attn_q` (no query rank), a compressed key row of 128 + 32 RoPE dimensions, 64 + 32 query·key and 64
            // value dimensions per head; a dense first block (FFN 1024), then 16 experts of 256 with 4 per token, a
            // softmax router and 2 shared experts; YaRN by 40 over 4096 with the real file's log multiplier (0.0707,
            // 0.1 · mscale_all_dim) (V2-Lite: 2048 wide, 16 heads, rank 512 + 64, 128 + 64 and 128 per head, 64
            // experts of 1408, 6 per token, 2 shared). F16 matrices, as the other mixtures' fixtures.
            "deepseek2-lite-small" => SyntheticSpec {
                matrix_type: Some(GgmlType::F16),
                n_embd: 512,
                n_ff: 1024,
                n_head: 8,
                n_head_kv: 1,
                rope_base: 10_000.0,
                rope_yarn: Some((40.0, 4096)),
                experts: Some(SyntheticExperts { n_expert: 16, n_used: 4, n_ff_exp: 256, n_ff_shared: Some(512) }),
                deepseek: Some(deepseek2_lite(
                    LatentAttention { q_lora_rank: None, kv_lora_rank: 128, nope_dim: 64, v_head_dim: 64 },
                    32,
                )),
                ..base(families::DEEPSEEK2)
            },
            // `deepseek2` with DeepSeek V3's traits (V3, R1, Kimi K2, Moonlight): queries through a rank of 256 and
            // its norm, a sigmoid router with a selection bias, 4 groups of 4 experts of which the best 2 (by the sum
            // of their two best) are chosen from, weights renormalized and scaled by 2.5, one shared expert; YaRN by
            // 40 with a log multiplier of 0.1 (mscale_all_dim 1).
            "deepseek3-small" => {
                let lite = Self::family("deepseek2-lite-small", seed, n_layer)?;
                let ds = lite.deepseek.expect("deepseek2-lite-small has DeepSeek's traits");
                SyntheticSpec {
                    experts: Some(SyntheticExperts { n_expert: 16, n_used: 4, n_ff_exp: 256, n_ff_shared: Some(256) }),
                    deepseek: Some(SyntheticDeepseek {
                        latent: LatentAttention { q_lora_rank: Some(256), ..ds.latent },
                        gating: Gating::Sigmoid,
                        normalize: true,
                        weights_scale: Some(2.5),
                        groups: Some(ExpertGroups { count: 4, used: 2 }),
                        selection_bias: true,
                        yarn_log_multiplier: Some(0.1),
                        ..ds
                    }),
                    ..lite
                }
            }
            // DeepSeek-V2-Lite's real layers (for benchmarks): 2048 wide, 16 heads, rank 512 + 64 RoPE dimensions,
            // 128 + 64 and 128 per head, a dense first block (FFN 10944), 64 experts of 1408, 6 per token, 2 shared;
            // a 102400-token vocabulary is the caller's to add.
            "deepseek2-lite" => SyntheticSpec {
                n_embd: 2048,
                n_ff: 10944,
                n_head: 16,
                n_head_kv: 1,
                rope_base: 10_000.0,
                rope_yarn: Some((40.0, 4096)),
                experts: Some(SyntheticExperts { n_expert: 64, n_used: 6, n_ff_exp: 1408, n_ff_shared: Some(2816) }),
                deepseek: Some(deepseek2_lite(
                    LatentAttention { q_lora_rank: None, kv_lora_rank: 512, nope_dim: 128, v_head_dim: 128 },
                    64,
                )),
                ..base(families::DEEPSEEK2)
            },
            // Llama 3.2 1B's layers with every matrix in IQ4_NL or IQ4_XS (random codes and scales, valid blocks; the
            // published IQ4 files keep a few tensors in other types, which the other fixtures cover).
            "llama3.2-1b-iq4_nl" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq4Nl), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-iq4_xs" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq4Xs), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            // The same with every matrix in one of the coded types (`gguf::coded`): random grid indices, signs and
            // digits, integer scales in the upper half of their range.
            "llama3.2-1b-iq3_xxs" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq3Xxs), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-iq3_s" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq3S), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-iq2_xxs" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq2Xxs), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-iq2_xs" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq2Xs), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-iq2_s" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq2S), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-iq1_s" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq1S), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-iq1_m" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Iq1M), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-tq1_0" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Tq1_0), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            "llama3.2-1b-tq2_0" => {
                SyntheticSpec { matrix_type: Some(GgmlType::Tq2_0), ..Self::family("llama3.2-1b", seed, n_layer)? }
            }
            // The same mixing IQ and K-quant types by tensor (`synthetic::dynamic_type`).
            "llama3.2-1b-dynamic" => SyntheticSpec {
                type_mix: Some(super::synthetic::TypeMix::Dynamic),
                ..Self::family("llama3.2-1b", seed, n_layer)?
            },
            _ => return None,
        })
    }
}

/// DeepSeek-V2-Lite's routing and YaRN with latent attention of `latent` and `rope_dim`: a softmax router, weights
/// neither renormalized nor scaled, no groups or selection bias, one leading dense block, the real file's log
/// multiplier (0.0707, 0.1 · mscale_all_dim).
fn deepseek2_lite(latent: LatentAttention, rope_dim: usize) -> SyntheticDeepseek {
    SyntheticDeepseek {
        latent,
        rope_dim,
        gating: Gating::Softmax,
        normalize: false,
        weights_scale: None,
        groups: None,
        selection_bias: false,
        leading_dense: 1,
        yarn_log_multiplier: Some(0.0707),
    }
}

fn phi3_5_mini(base: SyntheticSpec, original_context: usize) -> SyntheticSpec {
    let ramp = |top: f32, power: i32| (0..48).map(|i| 1.0 + top * (i as f32 / 47.0).powi(power)).collect();
    SyntheticSpec {
        n_embd: 3072,
        n_ff: 8192,
        n_head: 32,
        n_head_kv: 32,
        rope_base: 10_000.0,
        long_rope: Some(LongRope { short: ramp(1.5, 3), long: ramp(40.0, 2), original_context }),
        rope_attn_factor: Some(1.190_239),
        ..base
    }
}

/// Llama 3.1's RoPE frequency factors as its GGUF converter writes them (`rope_freqs.weight`): pairs whose
/// wavelength is below the original context (8192) / 4 keep their speed, those above 8192 are slowed by
/// `factor`, and a smooth ramp joins the two.
pub fn llama3_rope_factors(base: f32, head_dim: usize, factor: f32) -> Vec<f32> {
    let (original_context, low_freq_factor, high_freq_factor) = (8192.0f64, 1.0f64, 4.0f64);
    let factor = f64::from(factor);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / f64::from(base).powf(2.0 * i as f64 / head_dim as f64);
            let wavelength = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelength < original_context / high_freq_factor {
                1.0
            } else if wavelength > original_context / low_freq_factor {
                factor
            } else {
                let smooth = (original_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect()
}
