//! Synthetic models (`llama`, `gemma3`): real shapes and types, seeded random weights.
//!
//! Used where the real model cannot be (tests of shape handling, and the GPU machine, which receives at most
//! 64 MiB per run while the real models are 98 and 253 MB): a model of SmolLM2-135M's or Gemma 3 270M's exact
//! shapes and weight types runs the same kernels at the same cost. The weights carry no knowledge, so outputs are
//! meaningless but deterministic.

use half::f16;

use crate::model::gguf::blocks::{quantize_q4_1, quantize_q8_0, QK};
use crate::model::gguf::mxfp4::quantize_mxfp4;
use crate::model::gguf::writer::GgufWriter;
use crate::model::gguf::{Array, GgmlType, Value};
use crate::model::tokenizer::BYTE_TO_CHAR;

use super::architecture::Gating;
use super::architecture::{Architecture, ExpertWidth, ExpertsRule, LayerPattern, OutputProjection, SharedExpert};
use super::config::{LayerAttention, LlamaConfig, ATTN_SINKS};
use super::experts::{ExpertGroups, MoeConfig, SharedFfn};
use super::families;
use super::latent::LatentAttention;
use super::rope_scaling::{LongRope, Yarn};

/// The RoPE base of every synthetic model (its metadata and the config it implies).
const ROPE_BASE: f32 = 100_000.0;

/// Shapes of a synthetic model and the seed of its weights.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSpec {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub seed: u64,
    /// Llama 3's RoPE frequency factors (`rope_freqs.weight`, `head_dim / 2` values), or none.
    pub rope_freq_factors: Option<Vec<f32>>,
    /// `Llama`, or `Gemma3` (its norms, activation, RoPE style and windows, and its file's weight types).
    pub arch: Architecture,
    /// Width of one head; `None`: `n_embd / n_head`.
    pub head_dim: Option<usize>,
    /// Gemma 3's sliding window (five layers in six), or none.
    pub sliding_window: Option<usize>,
    /// RoPE base of the full-attention layers (`rope.freq_base`).
    pub rope_base: f32,
    /// Linear RoPE scaling's factor (`rope.scaling.type` "linear", `rope.scaling.factor`), or none.
    pub rope_linear_factor: Option<f32>,
    /// Phi-3's LongRoPE factors and original context, or none.
    pub long_rope: Option<LongRope>,
    /// `rope.scaling.attn_factor`, or none.
    pub rope_attn_factor: Option<f32>,
    /// YaRN's factor and original context (`rope.scaling.type` "yarn"), or none.
    pub rope_yarn: Option<(f32, usize)>,
    /// Gemma 2's attention and final soft caps (`attn_logit_softcapping`, `final_logit_softcapping`), or none
    /// (llama.cpp's defaults for a `gemma2` file).
    pub softcaps: Option<(f32, f32)>,
    /// Granite's multipliers, or none.
    pub granite: Option<GraniteScales>,
    /// Every matrix of this type instead of the file's: F16 for deep models compared with llama.cpp, whose 8-bit
    /// activations (and ours, in other blocks) would otherwise drift apart over the layers; MXFP4 (gpt-oss's
    /// experts' type) for a model of a type no small real file has. `None`: the file's types.
    pub matrix_type: Option<GgmlType>,
    /// Each matrix's type by its tensor name (a file mixing types, as the "dynamic" quantizations do), ahead of
    /// `matrix_type`; `None`: by `matrix_type` or the file's types.
    pub type_mix: Option<TypeMix>,
    /// The final norm's weights times this (1: as the other norms'): logits this many times as spread, so that most
    /// positions have a clear top token (a "peaked" model for argmax agreement).
    pub output_norm_gain: f32,
    /// Mixture-of-experts FFNs (for a family whose spec has them), or dense ones.
    pub experts: Option<SyntheticExperts>,
    /// DeepSeek's latent attention and routing (a `deepseek2` model, whose `head_dim` is then implied), or none.
    pub deepseek: Option<SyntheticDeepseek>,
}

/// A `deepseek2` model's latent attention and the parts of its routing its keys set (`latent.rs`, `experts.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyntheticDeepseek {
    pub latent: LatentAttention,
    /// `rope.dimension_count`: the dimensions RoPE turns, after the latent ones.
    pub rope_dim: usize,
    /// `expert_gating_func` (softmax or sigmoid).
    pub gating: Gating,
    /// `expert_weights_norm`.
    pub normalize: bool,
    /// `expert_weights_scale`, or none.
    pub weights_scale: Option<f32>,
    /// `expert_group_count` and `expert_group_used_count`, or none.
    pub groups: Option<ExpertGroups>,
    /// Each expert layer has an `exp_probs_b.bias`.
    pub selection_bias: bool,
    /// `leading_dense_block_count`.
    pub leading_dense: usize,
    /// `rope.scaling.yarn_log_multiplier` as the converter stores it (0.1 · mscale_all_dim), or none.
    pub yarn_log_multiplier: Option<f32>,
}

/// The mixture-of-experts shapes of a synthetic model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticExperts {
    pub n_expert: usize,
    pub n_used: usize,
    /// Each expert's FFN width: `expert_feed_forward_length`, or `feed_forward_length` for the families that size
    /// experts by it (then `n_ff` must be the same).
    pub n_ff_exp: usize,
    /// The shared expert's width (`expert_shared_feed_forward_length`), or none.
    pub n_ff_shared: Option<usize>,
}

/// Granite's four multipliers as its files carry them (`multipliers.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GraniteScales {
    /// `embedding_scale`
    pub embedding: f32,
    /// `residual_scale`
    pub residual: f32,
    /// `attention.scale`
    pub attention: f32,
    /// `logit_scale` (a divisor)
    pub logit: f32,
}

impl GraniteScales {
    /// Granite 3.1 2B's: embeddings ×12, residual branches ×0.22, query·key products ×1/64, logits ÷8.
    pub const GRANITE_3_1_2B: GraniteScales =
        GraniteScales { embedding: 12.0, residual: 0.22, attention: 0.015_625, logit: 8.0 };
}

impl SyntheticSpec {
    /// SmolLM2-135M-Instruct's shapes.
    pub fn smollm2_135m(seed: u64) -> Self {
        SyntheticSpec {
            n_layer: 30,
            n_embd: 576,
            n_ff: 1536,
            n_head: 9,
            n_head_kv: 3,
            vocab_size: 49152,
            context_length: 8192,
            ..Self::tiny(seed)
        }
    }

    /// Gemma 3 270M's shapes (the vocabulary too: its embedding is most of the model).
    pub fn gemma3_270m(seed: u64) -> Self {
        SyntheticSpec {
            n_layer: 18,
            n_embd: 640,
            n_ff: 2048,
            n_head: 4,
            n_head_kv: 1,
            vocab_size: 262_144,
            context_length: 32_768,
            arch: families::GEMMA3,
            head_dim: Some(256),
            sliding_window: Some(512),
            ..Self::tiny(seed)
        }
    }

    /// A model small enough to build in a unit test (2 layers, width 64): also every field's default (no RoPE
    /// scaling or factors, no window, `n_embd / n_head`-wide heads) for the other shapes.
    pub fn tiny(seed: u64) -> Self {
        SyntheticSpec {
            n_layer: 2,
            n_embd: 64,
            n_ff: 96,
            n_head: 4,
            n_head_kv: 2,
            vocab_size: 512,
            context_length: 256,
            seed,
            rope_freq_factors: None,
            arch: families::LLAMA,
            head_dim: None,
            sliding_window: None,
            rope_base: ROPE_BASE,
            rope_linear_factor: None,
            long_rope: None,
            rope_attn_factor: None,
            rope_yarn: None,
            softcaps: None,
            granite: None,
            matrix_type: None,
            type_mix: None,
            output_norm_gain: 1.0,
            experts: None,
            deepseek: None,
        }
    }

    /// The same model with a byte-level BPE vocabulary of its size (at least 257): the 256 bytes, an
    /// `<|endoftext|>` end token, control tokens `<|t257|>`… to fill, no merges. Enough for any engine to load the
    /// file and take token ids (llama.cpp builds its fixtures from such files).
    pub fn writer_with_byte_vocabulary(&self) -> GgufWriter {
        self.writer_with_byte_vocabulary_and(&[])
    }

    /// [`SyntheticSpec::writer_with_byte_vocabulary`] whose first control tokens after `<|endoftext|>` (ids 257...)
    /// are `control` (a family's special tokens, e.g. gpt-oss' harmony markers), the rest `<|tN|>`.
    pub fn writer_with_byte_vocabulary_and(&self, control: &[&str]) -> GgufWriter {
        assert!(self.vocab_size > 257 + control.len(), "a byte vocabulary needs more than 256 tokens");
        let mut tokens: Vec<String> = BYTE_TO_CHAR.iter().map(|c| c.to_string()).collect();
        tokens.push("<|endoftext|>".into());
        tokens.extend(control.iter().map(|c| (*c).to_owned()));
        tokens.extend((tokens.len()..self.vocab_size).map(|i| format!("<|t{i}|>")));
        let types: Vec<i32> = (0..self.vocab_size).map(|i| if i < 256 { 1 } else { 3 }).collect();
        // A name without the architecture's: llama.cpp sets token attributes by model name ("phi3" wants `</s>`).
        let name = format!("synthetic byte-vocabulary model (seed {})", self.seed);
        self.writer()
            .set_metadata("general.name", Value::String(name))
            .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
            .metadata("tokenizer.ggml.pre", Value::String("gpt-2".into()))
            .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
            .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
            .metadata("tokenizer.ggml.merges", Value::Array(Array::String(Vec::new())))
            .metadata("tokenizer.ggml.eos_token_id", Value::U32(256))
            .metadata("tokenizer.ggml.bos_token_id", Value::U32(256))
            .metadata("tokenizer.ggml.add_bos_token", Value::Bool(false))
    }

    /// A Gemma 3 model small enough for a unit test: 7 layers (six windowed, one global), rows of 256 where the
    /// real file has K-quants.
    pub fn tiny_gemma3(seed: u64) -> Self {
        SyntheticSpec {
            n_layer: 7,
            n_embd: 96,
            n_ff: 256,
            n_head: 4,
            n_head_kv: 1,
            vocab_size: 512,
            context_length: 256,
            arch: families::GEMMA3,
            head_dim: Some(64),
            sliding_window: Some(8),
            ..Self::tiny(seed)
        }
    }

    /// The metadata and weights (no tokenizer metadata: callers that need one add it); norms are F32 near 1.
    /// Llama: matrices Q4_1 and the (tied) embedding Q8_0, as in SmolLM2's file. Gemma 3: Gemma 3 270M's file's
    /// types where the rows allow them (Q4_K and Q6_K need rows of multiples of 256; Q5_0 and Q8_0 elsewhere).
    pub fn writer(&self) -> GgufWriter {
        let mut rng = SplitMix64(self.seed);
        let head_dim = match &self.deepseek {
            Some(ds) => ds.latent.kv_lora_rank + ds.rope_dim,
            None => self.head_dim.unwrap_or(self.n_embd / self.n_head),
        };
        let rope_dim = self.deepseek.map_or(head_dim, |ds| ds.rope_dim);
        let gemma = self.arch.traits().embed_scale;
        let windowed = matches!(self.arch.spec().layers, LayerPattern::SlidingWindow { .. });
        let arch = self.arch.name();
        let key = |k: &str| format!("{arch}.{k}");
        let u32v = |v: usize| Value::U32(v as u32);
        let mut w = GgufWriter::new()
            .metadata("general.architecture", Value::String(arch.into()))
            .metadata("general.name", Value::String(format!("synthetic {arch} (seed {})", self.seed)))
            .metadata(&key("block_count"), u32v(self.n_layer))
            .metadata(&key("context_length"), u32v(self.context_length))
            .metadata(&key("embedding_length"), u32v(self.n_embd))
            .metadata(&key("feed_forward_length"), u32v(self.n_ff))
            .metadata(&key("attention.head_count"), u32v(self.n_head))
            .metadata(&key("attention.head_count_kv"), u32v(self.n_head_kv))
            .metadata(&key("rope.freq_base"), Value::F32(self.rope_base))
            .metadata(&key("rope.dimension_count"), u32v(rope_dim))
            .metadata(&key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5))
            .metadata(&key("vocab_size"), u32v(self.vocab_size));
        if let Some(factor) = self.rope_linear_factor {
            w = w
                .metadata(&key("rope.scaling.type"), Value::String("linear".into()))
                .metadata(&key("rope.scaling.factor"), Value::F32(factor));
        }
        assert!(self.long_rope.is_none() || self.rope_yarn.is_none(), "one original context per file");
        if let Some((factor, original_context)) = self.rope_yarn {
            w = w
                .metadata(&key("rope.scaling.type"), Value::String("yarn".into()))
                .metadata(&key("rope.scaling.factor"), Value::F32(factor))
                .metadata(&key("rope.scaling.original_context_length"), u32v(original_context));
        }
        if let Some(long_rope) = &self.long_rope {
            w = w.metadata(&key("rope.scaling.original_context_length"), u32v(long_rope.original_context));
        }
        if let Some(factor) = self.rope_attn_factor {
            w = w.metadata(&key("rope.scaling.attn_factor"), Value::F32(factor));
        }
        if let Some((attn, last)) = self.softcaps {
            w = w
                .metadata(&key("attn_logit_softcapping"), Value::F32(attn))
                .metadata(&key("final_logit_softcapping"), Value::F32(last));
        }
        if let Some(g) = self.granite {
            w = w
                .metadata(&key("embedding_scale"), Value::F32(g.embedding))
                .metadata(&key("residual_scale"), Value::F32(g.residual))
                .metadata(&key("attention.scale"), Value::F32(g.attention))
                .metadata(&key("logit_scale"), Value::F32(g.logit));
        }
        let moe = self.moe_config();
        if let (Some(e), Some(moe)) = (self.experts, &moe) {
            w = w.metadata(&key("expert_count"), u32v(e.n_expert)).metadata(&key("expert_used_count"), u32v(e.n_used));
            let layout_width = match self.arch.spec().experts {
                ExpertsRule::Always(l) | ExpertsRule::WhenCounted(l) => l.expert_width,
                ExpertsRule::Dense => ExpertWidth::FeedForward,
            };
            if layout_width == ExpertWidth::ExpertFeedForward {
                w = w.metadata(&key("expert_feed_forward_length"), u32v(e.n_ff_exp));
            }
            // DeepSeek's shared experts are counted (`deepseek_metadata`), the others' sized.
            if let Some(shared) = moe.shared.filter(|_| self.deepseek.is_none()) {
                w = w.metadata(&key("expert_shared_feed_forward_length"), u32v(shared.n_ff));
            }
        }
        if let Some(ds) = &self.deepseek {
            w = self.deepseek_metadata(w, ds);
        } else if self.head_dim.is_some() {
            // Heads wider than n_embd / n_head (Gemma 3); llama files leave the width implied.
            w = w
                .metadata(&key("attention.key_length"), u32v(head_dim))
                .metadata(&key("attention.value_length"), u32v(head_dim));
        }
        if let Some(window) = self.sliding_window.filter(|_| windowed) {
            w = w.metadata(&key("attention.sliding_window"), u32v(window));
            // gpt-oss' files have no base of their own for the windowed layers (they take the full layers').
            if !matches!(self.arch.spec().layers, LayerPattern::SlidingWindow { scaled: true, .. }) {
                w = w.metadata(&key("rope.freq_base_swa"), Value::F32(ROPE_BASE_LOCAL));
            }
        }
        let traits = self.arch.traits();
        let config = LlamaConfig {
            arch: self.arch,
            rope_bases: vec![Some(self.rope_base)],
            rope_freq_scale: self.rope_linear_factor.or(self.rope_yarn.map(|(f, _)| f)).map_or(1.0, |f| 1.0 / f),
            rope_yarn: self.rope_yarn.map(|(_, original_context)| Yarn { original_context, corrects_rotations: true }),
            rope_scale_windows: false,
            attn_softcap: None,
            final_softcap: None,
            layers: vec![LayerAttention { rope: 0, window: None }; self.n_layer],
            rope_neox: traits.rope_neox,
            embed_scale: None,
            attention_scale: 1.0 / (head_dim as f32).sqrt(),
            residual_scale: None,
            logit_scale: None,
            qk_norm: traits.qk_norm,
            pre_norms: traits.pre_norms,
            post_norms: traits.post_norms,
            qkv_bias: traits.qkv_bias,
            attn_output_bias: traits.attn_output_bias,
            attn_sinks: traits.attn_sinks,
            // Phi-3's files fuse the projections (both pairs); the other synthetic families keep them apart.
            fused_qkv: traits.fused_gate_up,
            fused_gate_up: traits.fused_gate_up,
            ffn_activation: traits.ffn_activation,
            rope_freq_factors: self.rope_freq_factors.clone(),
            rope_attn_factor: self.rope_attn_factor.unwrap_or(1.0),
            long_rope: self.long_rope.clone(),
            n_layer: self.n_layer,
            n_embd: self.n_embd,
            n_ff: self.n_ff,
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim,
            rope_base: self.rope_base,
            rope_dim,
            rms_eps: 1e-5,
            context_length: self.context_length,
            vocab_size: self.vocab_size,
            // A family that requires its own output projection gets one (llama.cpp requires `output.weight`); the
            // others tie it.
            tied_output: traits.output != OutputProjection::Own,
            moe,
            latent: self.deepseek.map(|ds| ds.latent),
        };
        for (name, shape, is_norm) in config.expected_tensors() {
            let long_rope = self.long_rope.as_ref();
            w = if let Some(factors) = self.rope_freq_factors.as_ref().filter(|_| name == "rope_freqs.weight") {
                w.tensor_f32(&name, &shape, factors)
            } else if let Some(l) = long_rope.filter(|_| name == "rope_factors_long.weight") {
                w.tensor_f32(&name, &shape, &l.long)
            } else if let Some(l) = long_rope.filter(|_| name == "rope_factors_short.weight") {
                w.tensor_f32(&name, &shape, &l.short)
            } else if name.ends_with("ffn_gate_inp_shexp.weight") {
                // The shared expert's gate: a row like a projection's, so that σ of its product is not saturated.
                let values: Vec<f32> =
                    (0..shape[0]).map(|_| 1.7 / (shape[0] as f32).sqrt() * rng.symmetric()).collect();
                w.tensor_f32(&name, &shape, &values)
            } else if name.ends_with(".bias") {
                // Biases as large as the projections' outputs, so that leaving one out changes the result.
                let n = shape.iter().product::<u64>();
                let values: Vec<f32> = (0..n).map(|_| 0.5 * rng.symmetric()).collect();
                w.tensor_f32(&name, &shape, &values)
            } else if name.ends_with(ATTN_SINKS) {
                // Sinks in 0..4, the range of the scaled scores, so that each takes a share of its softmax.
                let values: Vec<f32> = (0..shape[0]).map(|_| 2.0 + 2.0 * rng.symmetric()).collect();
                w.tensor_f32(&name, &shape, &values)
            } else if is_norm {
                let gain = if name == "output_norm.weight" { self.output_norm_gain } else { 1.0 };
                let values: Vec<f32> = (0..shape[0]).map(|_| gain * (1.0 + 0.1 * rng.symmetric())).collect();
                w.tensor_f32(&name, &shape, &values)
            } else {
                // Uniform weights scaled like a trained model's (std ≈ 1/sqrt(fan_in)) keep activations in range.
                let scale = 1.7 / (shape[0] as f32).sqrt();
                let dtype = if name.ends_with("ffn_gate_inp.weight") {
                    // Routers stay F32 in quantized files (llama-quantize never quantizes them).
                    GgmlType::F32
                } else if let Some(mix) = self.type_mix {
                    mix.dtype(&name)
                } else if let Some(dtype) = self.matrix_type {
                    dtype
                } else if self.arch == families::GPT_OSS {
                    gpt_oss_type(&name)
                } else if gemma || self.experts.is_some() {
                    gemma3_type(&name, shape[0])
                } else {
                    llama_type(&name)
                };
                let n = shape.iter().product::<u64>() as usize;
                let data = match dtype {
                    GgmlType::F32 => (0..n).flat_map(|_| (scale * rng.symmetric()).to_le_bytes()).collect(),
                    GgmlType::F16 => {
                        (0..n).flat_map(|_| f16::from_f32(scale * rng.symmetric()).to_le_bytes()).collect()
                    }
                    GgmlType::Bf16 => {
                        (0..n).flat_map(|_| half::bf16::from_f32(scale * rng.symmetric()).to_le_bytes()).collect()
                    }
                    GgmlType::Q8_0 | GgmlType::Q4_1 | GgmlType::Mxfp4 => random_blocks(&mut rng, dtype, n, scale),
                    _ => random_bytes_blocks(&mut rng, dtype, n, scale),
                };
                w.tensor(&name, dtype, &shape, data)
            };
        }
        w
    }
}

impl SyntheticSpec {
    /// The mixture-of-experts configuration the file's metadata implies (its family's layout with these shapes).
    fn moe_config(&self) -> Option<MoeConfig> {
        let e = self.experts?;
        let layout = match self.arch.spec().experts {
            ExpertsRule::Dense => panic!("{:?} has no experts", self.arch),
            ExpertsRule::Always(layout) | ExpertsRule::WhenCounted(layout) => layout,
        };
        assert!(
            layout.expert_width == ExpertWidth::ExpertFeedForward || self.n_ff == e.n_ff_exp,
            "n_ff sizes the experts"
        );
        let shared = match layout.shared {
            SharedExpert::None => None,
            SharedExpert::WhenSized => e.n_ff_shared.map(|n_ff| SharedFfn { n_ff, gated: false }),
            SharedExpert::SigmoidGated => {
                Some(SharedFfn { n_ff: e.n_ff_shared.expect("this family always has a shared expert"), gated: true })
            }
            SharedExpert::Counted => e.n_ff_shared.map(|n_ff| {
                assert!(n_ff.is_multiple_of(e.n_ff_exp), "shared experts are whole experts");
                SharedFfn { n_ff, gated: false }
            }),
        };
        let ds = self.deepseek;
        Some(MoeConfig {
            n_expert: e.n_expert,
            n_expert_used: e.n_used,
            n_ff_exp: e.n_ff_exp,
            gating: ds.map_or(layout.gating, |ds| ds.gating),
            normalize_weights: ds.map_or(layout.normalize_weights, |ds| ds.normalize),
            weights_scale: ds.and_then(|ds| ds.weights_scale),
            shared,
            fused_gate_up: false,
            biases: layout.biases,
            activation: layout.activation,
            selection_bias: ds.is_some_and(|ds| ds.selection_bias),
            groups: ds.and_then(|ds| ds.groups),
            first_layer: ds.map_or(0, |ds| ds.leading_dense),
        })
    }

    /// The keys of a `deepseek2` file (as llama.cpp's converter writes them: one key/value head, the cache row's width
    /// as `key_length`, the latent rank as `value_length`, `q_lora_rank` 0 without a query compression).
    fn deepseek_metadata(&self, w: GgufWriter, ds: &SyntheticDeepseek) -> GgufWriter {
        let arch = self.arch.name();
        let key = |k: &str| format!("{arch}.{k}");
        let u32v = |v: usize| Value::U32(v as u32);
        let l = ds.latent;
        let mut w = w
            .set_metadata(&key("attention.head_count_kv"), u32v(1))
            .metadata(&key("attention.key_length"), u32v(l.kv_lora_rank + ds.rope_dim))
            .metadata(&key("attention.value_length"), u32v(l.kv_lora_rank))
            .metadata(&key("attention.key_length_mla"), u32v(l.nope_dim + ds.rope_dim))
            .metadata(&key("attention.value_length_mla"), u32v(l.v_head_dim))
            .metadata(&key("attention.kv_lora_rank"), u32v(l.kv_lora_rank))
            .metadata(&key("attention.q_lora_rank"), u32v(l.q_lora_rank.unwrap_or(0)))
            .metadata(&key("leading_dense_block_count"), u32v(ds.leading_dense))
            .metadata(&key("expert_weights_norm"), Value::Bool(ds.normalize))
            .metadata(&key("expert_gating_func"), u32v(if ds.gating == Gating::Sigmoid { 2 } else { 1 }));
        let e = self.experts.expect("a deepseek2 model has experts");
        let shared = e.n_ff_shared.map_or(0, |n| n / e.n_ff_exp);
        w = w.metadata(&key("expert_shared_count"), u32v(shared));
        if let Some(scale) = ds.weights_scale {
            w = w.metadata(&key("expert_weights_scale"), Value::F32(scale));
        }
        if let Some(g) = ds.groups {
            w = w
                .metadata(&key("expert_group_count"), u32v(g.count))
                .metadata(&key("expert_group_used_count"), u32v(g.used));
        }
        if let Some(m) = ds.yarn_log_multiplier {
            w = w.metadata(&key("rope.scaling.yarn_log_multiplier"), Value::F32(m));
        }
        w
    }
}

/// The RoPE base of a synthetic Gemma's sliding-window layers.
const ROPE_BASE_LOCAL: f32 = 10_000.0;

/// gpt-oss' files as published (llama-quantize's `MXFP4_MOE`): the experts MXFP4, every other matrix Q8_0.
fn gpt_oss_type(name: &str) -> GgmlType {
    if name.contains("_exps.") {
        GgmlType::Mxfp4
    } else {
        GgmlType::Q8_0
    }
}

/// A file's types chosen per tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeMix {
    /// IQ and K-quant types in one file, as unsloth's and bartowski's "dynamic" small files mix them: the embedding
    /// and output Q6_K, queries and keys IQ3_XXS, values Q4_K, the attention output IQ4_XS, gate and up IQ2_XS,
    /// down IQ3_S.
    Dynamic,
}

impl TypeMix {
    /// The type of the matrix named `name`.
    pub fn dtype(self, name: &str) -> GgmlType {
        let kind = name.strip_suffix(".weight").map_or(name, |stem| stem.rsplit('.').next().unwrap_or(stem));
        match (self, kind) {
            (TypeMix::Dynamic, "attn_q" | "attn_k") => GgmlType::Iq3Xxs,
            (TypeMix::Dynamic, "attn_v") => GgmlType::Q4K,
            (TypeMix::Dynamic, "attn_output") => GgmlType::Iq4Xs,
            (TypeMix::Dynamic, "ffn_gate" | "ffn_up") => GgmlType::Iq2Xs,
            (TypeMix::Dynamic, "ffn_down") => GgmlType::Iq3S,
            (TypeMix::Dynamic, _) => GgmlType::Q6K,
        }
    }
}

/// SmolLM2's file: matrices Q4_1, the embedding Q8_0.
fn llama_type(name: &str) -> GgmlType {
    if name == "token_embd.weight" {
        GgmlType::Q8_0
    } else {
        GgmlType::Q4_1
    }
}

/// Gemma 3 270M's Q4_K_M file: Q4_K, and Q6_K for values and down projections, where rows are whole super-blocks;
/// the embedding and values Q8_0, the other matrices Q5_0 where they are not.
fn gemma3_type(name: &str, row_len: u64) -> GgmlType {
    let high = name == "token_embd.weight" || name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight");
    match (row_len.is_multiple_of(256), high) {
        (true, true) => GgmlType::Q6K,
        (true, false) => GgmlType::Q4K,
        (false, true) => GgmlType::Q8_0,
        (false, false) => GgmlType::Q5_0,
    }
}

/// Blocks of `dtype` with random quants, scales and minima, and f16 super-scales chosen so that the weights'
/// spread is about `scale` (centred for the types with minima): what a quantizer would not write, but valid.
fn random_bytes_blocks(rng: &mut SplitMix64, dtype: GgmlType, n: usize, scale: f32) -> Vec<u8> {
    // Byte offsets of d (and dmin) in a block (`ggml-common.h`), and d for a spread of `scale`: the integer
    // products' spread is ~ 63·7.5 (Q4_K: scale × nibble), 64·18 (Q6_K), 9 (Q5_0).
    // IQ4_NL's values have an rms of 69.3, so d = scale/(√3·69.3) for uniform's rms; IQ4_XS' times its sub-block
    // scales, kept as a quantizer leaves them (below: ls − 32 in 8..16, rms 12.2, not any of −32..32, whose outlier
    // sub-blocks would make the 8-bit activations of both engines drift apart).
    let (d_at, dmin_at, d) = match dtype {
        GgmlType::Q4K => (0, Some(2), scale / 470.0),
        GgmlType::Q6K => (208, None, scale / 1150.0),
        GgmlType::Q5_0 => (0, None, scale / 9.0),
        GgmlType::Iq4Nl => (0, None, scale / 120.0),
        GgmlType::Iq4Xs => (0, None, scale / 1464.0),
        // The coded types (`gguf::coded`): d for weights of rms scale/√3 (uniform's), from the rms of random blocks
        // with d = 1 and their integer scales forced to the upper half of their range (below), measured with the
        // gguf package: IQ3_XXS 189, IQ3_S 186, IQ2_XXS 71, IQ2_XS 74, IQ2_S 75, IQ1_S and IQ1_M 9.5, the ternary
        // types 0.82. IQ1_M's d has no offset of its own (`set_iq1_m_d`).
        GgmlType::Iq3Xxs => (0, None, scale / 327.0),
        GgmlType::Iq3S => (0, None, scale / 321.0),
        GgmlType::Iq2Xxs => (0, None, scale / 122.0),
        GgmlType::Iq2Xs => (0, None, scale / 128.0),
        GgmlType::Iq2S => (0, None, scale / 129.0),
        GgmlType::Iq1S => (0, None, scale / 16.5),
        GgmlType::Iq1M => (usize::MAX, None, scale / 16.5),
        GgmlType::Tq1_0 => (52, None, scale / 1.42),
        GgmlType::Tq2_0 => (64, None, scale / 1.42),
        other => unreachable!("no random blocks of {other:?}"),
    };
    let block = dtype.block_bytes() as usize;
    let n_blocks = n / dtype.block_len() as usize;
    let mut out: Vec<u8> = (0..n_blocks * block).map(|_| rng.next() as u8).collect();
    for b in out.chunks_exact_mut(block) {
        force_scales(dtype, b);
        if dtype == GgmlType::Iq1M {
            set_iq1_m_d(b, f16::from_f32(d));
            continue;
        }
        // IQ4's codebook is not symmetric (its values average −5.9): a random sign of d per block, taken from the
        // random byte it replaces, keeps the weights centred (with d > 0 everywhere, every row leans one way and
        // the model's top token is the same at every position).
        let iq4 = matches!(dtype, GgmlType::Iq4Nl | GgmlType::Iq4Xs);
        let d_signed = if iq4 && b[d_at] & 1 == 1 { -d } else { d };
        b[d_at..d_at + 2].copy_from_slice(&f16::from_f32(d_signed).to_le_bytes());
        if let Some(at) = dmin_at {
            // Minima average 31.5 and values 7.5·31.5·d: dmin = 7.5·d centres the weights.
            b[at..at + 2].copy_from_slice(&f16::from_f32(7.5 * d).to_le_bytes());
        }
        if dtype == GgmlType::Iq4Xs {
            // ls = 40 + 0..8 in each sub-block: the high bits (2) of all eight, the low nibbles 8..16.
            b[2..4].copy_from_slice(&0xaaaau16.to_le_bytes());
            b[4..8].iter_mut().for_each(|x| *x = (*x & 0x77) | 0x88);
        }
    }
    out
}

/// Keeps a coded block's integer scales in the upper half of their range (their top bit set), as a quantizer leaves
/// them (see IQ4_XS above); TQ2_0's digits 3, which its quantizer never writes, become 1 (zero).
fn force_scales(dtype: GgmlType, b: &mut [u8]) {
    match dtype {
        // The top 4 bits of each group's second u32.
        GgmlType::Iq2Xxs => (0..8).for_each(|g| b[2 + 8 * g + 7] |= 0x80),
        GgmlType::Iq3Xxs => (0..8).for_each(|g| b[2 + 64 + 4 * g + 3] |= 0x80),
        // Two 4-bit scales a byte.
        GgmlType::Iq2Xs => b[66..74].iter_mut().for_each(|x| *x |= 0x88),
        GgmlType::Iq2S => b[74..82].iter_mut().for_each(|x| *x |= 0x88),
        GgmlType::Iq3S => b[106..110].iter_mut().for_each(|x| *x |= 0x88),
        // Bits 12..15 of each group's u16: bit 14.
        GgmlType::Iq1S => (0..8).for_each(|g| b[34 + 2 * g + 1] |= 0x40),
        // Four 3-bit scales in bits 0..12 of each u16: their top bits.
        GgmlType::Iq1M => (0..4).for_each(|i| {
            b[48 + 2 * i] |= 0x24;
            b[48 + 2 * i + 1] |= 0x09;
        }),
        GgmlType::Tq2_0 => b[..64].iter_mut().for_each(|x| {
            for shift in (0..8).step_by(2) {
                if (*x >> shift) & 3 == 3 {
                    *x ^= 2 << shift;
                }
            }
        }),
        _ => {}
    }
}

/// IQ1_M's f16 `d`, spread over the top nibbles of its four u16 scale words (bytes 48..56).
fn set_iq1_m_d(b: &mut [u8], d: f16) {
    for i in 0..4 {
        let at = 48 + 2 * i + 1;
        b[at] = (b[at] & 0x0f) | ((((d.to_bits() >> (4 * i)) & 0x0f) as u8) << 4);
    }
}

fn random_blocks(rng: &mut SplitMix64, dtype: GgmlType, n: usize, scale: f32) -> Vec<u8> {
    let mut out = Vec::with_capacity(n / QK * dtype.block_bytes() as usize);
    let mut x = [0f32; QK];
    for _ in 0..n / QK {
        x.iter_mut().for_each(|v| *v = scale * rng.symmetric());
        match dtype {
            GgmlType::Q8_0 => out.extend_from_slice(bytemuck::bytes_of(&quantize_q8_0(&x))),
            GgmlType::Mxfp4 => out.extend_from_slice(bytemuck::bytes_of(&quantize_mxfp4(&x))),
            _ => out.extend_from_slice(bytemuck::bytes_of(&quantize_q4_1(&x))),
        }
    }
    out
}

/// splitmix64: a tiny, good-enough generator for weights (not for sampling).
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub(crate) fn symmetric(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::GgufFile;

    #[test]
    fn tiny_model_passes_config_validation_and_is_deterministic() {
        let a = SyntheticSpec::tiny(7).writer().to_bytes();
        let f = GgufFile::from_bytes(&a).unwrap();
        let c = LlamaConfig::from_gguf(&f).unwrap();
        assert_eq!((c.n_layer, c.n_embd, c.kv_dim(), c.vocab_size), (2, 64, 32, 512));
        assert_eq!(a, SyntheticSpec::tiny(7).writer().to_bytes());
        assert_ne!(a, SyntheticSpec::tiny(8).writer().to_bytes());
    }

    #[test]
    fn gemma3_models_have_its_architecture_windows_and_types() {
        let bytes = SyntheticSpec::tiny_gemma3(5).writer().to_bytes();
        let f = GgufFile::from_bytes(&bytes).unwrap();
        let c = LlamaConfig::from_gguf(&f).unwrap();
        assert_eq!((c.arch, c.head_dim, c.q_dim(), c.rope_bases.len()), (families::GEMMA3, 64, 256, 2));
        let windows: Vec<_> = c.layers.iter().map(|l| l.window).collect();
        assert_eq!(windows, [Some(8), Some(8), Some(8), Some(8), Some(8), None, Some(8)]);
        let dtype = |name: &str| f.tensor(name).unwrap().dtype();
        assert_eq!(dtype("blk.0.attn_q.weight"), GgmlType::Q5_0, "rows of 96");
        assert_eq!(dtype("blk.0.attn_output.weight"), GgmlType::Q4K, "rows of 256");
        assert_eq!(dtype("blk.0.ffn_down.weight"), GgmlType::Q6K);
        assert_eq!(dtype("token_embd.weight"), GgmlType::Q8_0);
    }
}
