//! Synthetic encoder files: a family's real tensor names and shapes with seeded random weights, and a real
//! vocabulary copied from a vocabulary-only GGUF (llama.cpp's `ggml-vocab-bert-bge.gguf`), so that ember and
//! llama.cpp read the same file and tokenize the same texts (`scripts/llamacpp/embedding_fixtures.py`,
//! `tests/encoder_families.rs`).

use half::f16;

use crate::model::gguf::value::{Array, Value};
use crate::model::gguf::writer::GgufWriter;
use crate::model::gguf::{GgmlType, GgufFile};
use crate::model::llama::synthetic::SplitMix64;

use super::config::{Classifier, EncoderArch, EncoderBiases, EncoderConfig, EncoderFfn, Positions};
use super::pooling::Pooling;

/// The shapes and seed of a synthetic encoder.
#[derive(Clone, Debug)]
pub struct SyntheticEncoder {
    pub arch: EncoderArch,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_ff: usize,
    pub context_length: usize,
    pub pooling: Pooling,
    /// The matrices' type: F16 or F32.
    pub matrix_type: GgmlType,
    pub seed: u64,
    /// `tokenizer.ggml.add_sep_token` instead of the vocabulary's (XLM-RoBERTa rerankers' files set it for their
    /// pairs, `<s> q </s></s> d </s>`; llama.cpp's copy of the vocabulary does not); `None`: the vocabulary's.
    pub add_sep_token: Option<bool>,
}

impl SyntheticEncoder {
    /// The encoder families by name, with their real shapes: `bge-small` (bge-small-en-v1.5, all-MiniLM-L12: 384
    /// wide, 12 heads, FFN 1536, CLS pooling) and `bge-base` (768, 12 heads, 3072, CLS), at `n_layer` layers;
    /// `-mean` after the name pools by mean (E5, all-MiniLM), `-rerank` ranks with a classification head (a pooler
    /// and one score: cross-encoders such as ms-marco-MiniLM); `nomic-embed` (nomic-embed-text v1.5: `nomic-bert`,
    /// 768 wide, 12 heads, SwiGLU of 3072, RoPE base 1000, 2048 positions, mean pooling); `xlm-roberta-tiny`
    /// (`bert` as XLM-RoBERTa's files are, bge-m3's and multilingual-e5's, at a small width: 64 wide, 4 heads, FFN
    /// 256, CLS pooling, for their 250k-token Unigram vocabulary) and `xlm-roberta-tiny-rerank` (with a pooler and
    /// one score, and `add_sep_token` as bge-reranker-v2-m3's file has it).
    pub const FAMILIES: [&'static str; 8] = [
        "bge-small",
        "bge-small-mean",
        "bge-small-rerank",
        "bge-base",
        "bge-base-mean",
        "nomic-embed",
        "xlm-roberta-tiny",
        "xlm-roberta-tiny-rerank",
    ];

    pub fn family(name: &str, seed: u64, n_layer: usize) -> Option<Self> {
        if name == "nomic-embed" {
            return Some(SyntheticEncoder {
                arch: EncoderArch::NomicBert,
                n_layer,
                n_embd: 768,
                n_head: 12,
                n_ff: 3072,
                context_length: 2048,
                pooling: Pooling::Mean,
                matrix_type: GgmlType::F16,
                seed,
                add_sep_token: None,
            });
        }
        let (base, pooling) = match (name.strip_suffix("-mean"), name.strip_suffix("-rerank")) {
            (Some(base), _) => (base, Pooling::Mean),
            (_, Some(base)) => (base, Pooling::Rank),
            _ => (name, Pooling::Cls),
        };
        let (n_embd, n_head, n_ff) = match base {
            "bge-small" => (384, 12, 1536),
            "bge-base" => (768, 12, 3072),
            "xlm-roberta-tiny" => (64, 4, 256),
            _ => return None,
        };
        let xlm_pairs = base == "xlm-roberta-tiny" && pooling == Pooling::Rank;
        Some(SyntheticEncoder {
            arch: EncoderArch::Bert,
            n_layer,
            n_embd,
            n_head,
            n_ff,
            context_length: 512,
            pooling,
            matrix_type: GgmlType::F16,
            seed,
            add_sep_token: xlm_pairs.then_some(true),
        })
    }

    /// The file: hyperparameters, `vocab`'s `tokenizer.*` keys, and weights. Matrices are uniform in ±1/√(rows'
    /// length) (so that activations keep their scale through the layers), embeddings in ±1, LayerNorm weights near
    /// 1 and biases near 0.
    pub fn writer(&self, vocab: &GgufFile) -> GgufWriter {
        let arch = self.arch.name();
        let nomic = self.arch == EncoderArch::NomicBert;
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
            .metadata(&key("attention.layer_norm_epsilon"), Value::F32(1e-12))
            .metadata(&key("attention.causal"), Value::Bool(false))
            .metadata(&key("pooling_type"), u32v(pooling_value(self.pooling)));
        if nomic {
            w = w.metadata(&key("rope.freq_base"), Value::F32(1000.0));
        }
        let mut vocab_size = 0;
        for (k, v) in vocab.metadata().filter(|(k, _)| k.starts_with("tokenizer.")) {
            if k == "tokenizer.ggml.tokens" {
                if let Value::Array(Array::String(tokens)) = v {
                    vocab_size = tokens.len();
                }
            }
            w = w.metadata(k, v.clone());
        }
        assert!(vocab_size > 0, "the vocabulary file has no tokenizer.ggml.tokens");
        let token_types = match vocab.optional("tokenizer.ggml.token_type_count", GgufFile::u32) {
            Ok(Some(n)) if n > 0 => u64::from(n),
            _ => 2,
        };
        if let Some(add) = self.add_sep_token {
            w = w.set_metadata("tokenizer.ggml.add_sep_token", Value::Bool(add));
        }
        let config = EncoderConfig {
            arch: self.arch,
            n_layer: self.n_layer,
            n_embd: self.n_embd,
            n_head: self.n_head,
            n_ff: self.n_ff,
            context_length: self.context_length,
            vocab_size,
            norm_eps: 1e-12,
            pooling: self.pooling,
            token_types: true,
            positions: if nomic { Positions::Rope { base: 1000.0 } } else { Positions::Learned },
            fused_qkv: nomic,
            ffn: if nomic { EncoderFfn::SwiGlu } else { EncoderFfn::Gelu },
            biases: if nomic { EncoderBiases::default() } else { EncoderBiases { qkv: true, output: true, ffn: true } },
            classifier: (self.pooling == Pooling::Rank).then_some(Classifier { pooler: true, n_out: 1 }),
        };
        let mut rng = SplitMix64(self.seed);
        for (name, shape, is_vector) in config.expected_tensors() {
            // Two token types, as BERT's files have, or as many as the vocabulary says (XLM-RoBERTa's: one).
            let shape = if name == "token_types.weight" { vec![shape[0], token_types] } else { shape };
            let n: usize = shape.iter().product::<u64>() as usize;
            if is_vector {
                let (center, spread) = if name.ends_with("norm.weight") { (1.0, 0.2) } else { (0.0, 0.1) };
                let values: Vec<f32> = (0..n).map(|_| center + spread * rng.symmetric()).collect();
                w = w.tensor_f32(&name, &shape, &values);
                continue;
            }
            let is_embedding = name.ends_with("embd.weight") || name == "token_types.weight";
            // A classifier's output a few units wide, so that scores differ visibly between inputs.
            let is_embedding = is_embedding || name == "cls.output.weight";
            let scale = if is_embedding { 1.0 } else { 1.0 / (shape[0] as f32).sqrt() };
            let values = (0..n).map(|_| scale * rng.symmetric());
            // Token types stay F32, as llama.cpp's converter writes them (its graph adds the row to f32 activations,
            // which ggml's CPU backend does not do from F16).
            // The classification head too: llama.cpp rounds the activations of an F16 matmul to f16, which moves a
            // score by ~1e-3, where an F32 head shows the two engines' arithmetic.
            let f32_tensor = name == "token_types.weight" || name.starts_with("cls.");
            let dtype = if f32_tensor { GgmlType::F32 } else { self.matrix_type };
            let (dtype, bytes) = match dtype {
                GgmlType::F32 => (GgmlType::F32, values.flat_map(f32::to_le_bytes).collect()),
                _ => (GgmlType::F16, values.flat_map(|v| f16::from_f32(v).to_le_bytes()).collect()),
            };
            w = w.tensor(&name, dtype, &shape, bytes);
        }
        w
    }
}

fn pooling_value(p: Pooling) -> usize {
    match p {
        Pooling::None => 0,
        Pooling::Mean => 1,
        Pooling::Cls => 2,
        Pooling::Last => 3,
        Pooling::Rank => 4,
    }
}
