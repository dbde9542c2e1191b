//! Synthetic llama models: real shapes and types, seeded random weights.
//!
//! Used where the real model cannot be (tests of shape handling, and the GPU machine, which receives at most
//! 64 MiB per run while the real model is 98 MB): a model of SmolLM2-135M's exact shapes runs the same kernels at
//! the same cost. The weights carry no knowledge, so outputs are meaningless but deterministic.

use crate::model::gguf::blocks::{quantize_q4_1, quantize_q8_0, QK};
use crate::model::gguf::writer::GgufWriter;
use crate::model::gguf::{GgmlType, Value};

use super::config::{Architecture, FfnActivation, LayerAttention, LlamaConfig};

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
            seed,
            rope_freq_factors: None,
        }
    }

    /// A model small enough to build in a unit test (2 layers, width 64).
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
        }
    }

    /// The llama metadata and weights (no tokenizer metadata: callers that need one add it).
    /// Matrices are Q4_1 and the (tied) embedding Q8_0, as in the real model; norms are F32 near 1.
    pub fn writer(&self) -> GgufWriter {
        let mut rng = SplitMix64(self.seed);
        let head_dim = self.n_embd / self.n_head;
        let u32v = |v: usize| Value::U32(v as u32);
        let mut w = GgufWriter::new()
            .metadata("general.architecture", Value::String("llama".into()))
            .metadata("general.name", Value::String(format!("synthetic llama (seed {})", self.seed)))
            .metadata("llama.block_count", u32v(self.n_layer))
            .metadata("llama.context_length", u32v(self.context_length))
            .metadata("llama.embedding_length", u32v(self.n_embd))
            .metadata("llama.feed_forward_length", u32v(self.n_ff))
            .metadata("llama.attention.head_count", u32v(self.n_head))
            .metadata("llama.attention.head_count_kv", u32v(self.n_head_kv))
            .metadata("llama.rope.freq_base", Value::F32(ROPE_BASE))
            .metadata("llama.rope.dimension_count", u32v(head_dim))
            .metadata("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
            .metadata("llama.vocab_size", u32v(self.vocab_size));
        let config = LlamaConfig {
            arch: Architecture::Llama,
            rope_bases: vec![ROPE_BASE],
            layers: vec![LayerAttention { rope: 0, window: None }; self.n_layer],
            rope_neox: false,
            embed_scale: None,
            qk_norm: false,
            post_norms: false,
            ffn_activation: FfnActivation::Silu,
            rope_freq_factors: self.rope_freq_factors.clone(),
            n_layer: self.n_layer,
            n_embd: self.n_embd,
            n_ff: self.n_ff,
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim,
            rope_base: ROPE_BASE,
            rope_dim: head_dim,
            rms_eps: 1e-5,
            context_length: self.context_length,
            vocab_size: self.vocab_size,
            tied_output: true,
        };
        for (name, shape, is_norm) in config.expected_tensors() {
            w = if let Some(factors) = self.rope_freq_factors.as_ref().filter(|_| name == "rope_freqs.weight") {
                w.tensor_f32(&name, &shape, factors)
            } else if is_norm {
                let values: Vec<f32> = (0..shape[0]).map(|_| 1.0 + 0.1 * rng.symmetric()).collect();
                w.tensor_f32(&name, &shape, &values)
            } else {
                // Uniform weights scaled like a trained model's (std ≈ 1/sqrt(fan_in)) keep activations in range.
                let scale = 1.7 / (shape[0] as f32).sqrt();
                let dtype = if name == "token_embd.weight" { GgmlType::Q8_0 } else { GgmlType::Q4_1 };
                let data = random_blocks(&mut rng, dtype, (shape[0] * shape[1]) as usize, scale);
                w.tensor(&name, dtype, &shape, data)
            };
        }
        w
    }
}

fn random_blocks(rng: &mut SplitMix64, dtype: GgmlType, n: usize, scale: f32) -> Vec<u8> {
    let mut out = Vec::with_capacity(n / QK * dtype.block_bytes() as usize);
    let mut x = [0f32; QK];
    for _ in 0..n / QK {
        x.iter_mut().for_each(|v| *v = scale * rng.symmetric());
        match dtype {
            GgmlType::Q8_0 => out.extend_from_slice(bytemuck::bytes_of(&quantize_q8_0(&x))),
            _ => out.extend_from_slice(bytemuck::bytes_of(&quantize_q4_1(&x))),
        }
    }
    out
}

/// splitmix64: a tiny, good-enough generator for weights (not for sampling).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn symmetric(&mut self) -> f32 {
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
}
