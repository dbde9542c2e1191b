//! Synthetic decoder embedders and rerankers: Qwen 3 0.6B's layer shapes (`SyntheticSpec`'s `qwen3-0.6b`, F16
//! matrices as the published F16 files have, the byte vocabulary with `<|im_start|>` and `<|im_end|>`), with what turns such a file into
//! Qwen3-Embedding (`pooling_type` last, EOS appended) or Qwen3-Reranker (`pooling_type` rank, a two-row
//! `cls.output.weight` for "yes" and "no", its labels, and its pair prompt), as llama.cpp's converter writes them.
//! `scripts/llamacpp/embedding_fixtures.py` runs llama.cpp on these files; `tests/decoder_embedders.rs` compares.

use crate::model::gguf::value::{Array, Value};
use crate::model::gguf::writer::GgufWriter;
use crate::model::gguf::GgmlType;
use crate::model::llama::synthetic::{SplitMix64, SyntheticSpec};

use super::decoder_head::RERANK_TEMPLATE_KEY;

/// The decoder embedding families `ember-cli synthetic --family` writes.
pub const DECODER_FAMILIES: [&str; 2] = ["qwen3-embedding", "qwen3-reranker"];

/// Qwen3-Reranker's pair prompt, as llama.cpp's converter stores it.
pub const QWEN3_RERANK_TEMPLATE: &str = "<|im_start|>system\nJudge whether the Document meets the requirements based \
on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>\
user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n\
<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// The file of decoder embedding family `name` with `n_layer` layers and seed `seed`; `None` for a name not in
/// [`DECODER_FAMILIES`].
pub fn decoder_family_writer(name: &str, seed: u64, n_layer: usize) -> Option<GgufWriter> {
    // 1024 positions: a reranker's pair prompt alone is some 300 bytes (tokens, in this vocabulary).
    let spec = SyntheticSpec {
        matrix_type: Some(GgmlType::F16),
        context_length: 1024,
        ..SyntheticSpec::family("qwen3-0.6b", seed, n_layer)?
    };
    let w = spec.writer_with_byte_vocabulary_and(&["<|im_start|>", "<|im_end|>"]);
    let arch = spec.arch.name();
    Some(match name {
        "qwen3-embedding" => w
            .metadata(&format!("{arch}.pooling_type"), Value::U32(3))
            .metadata("tokenizer.ggml.add_eos_token", Value::Bool(true)),
        "qwen3-reranker" => {
            // Rows as wide as the model's, scaled like an LM head's: logits of a few units.
            let mut rng = SplitMix64(seed ^ 0x5eed_c1a5);
            let scale = 1.7 / (spec.n_embd as f32).sqrt();
            let head: Vec<f32> = (0..2 * spec.n_embd).map(|_| scale * rng.symmetric()).collect();
            w.metadata(&format!("{arch}.pooling_type"), Value::U32(4))
                .metadata(
                    &format!("{arch}.classifier.output_labels"),
                    Value::Array(Array::String(vec!["yes".into(), "no".into()])),
                )
                .metadata(RERANK_TEMPLATE_KEY, Value::String(QWEN3_RERANK_TEMPLATE.into()))
                .tensor_f32("cls.output.weight", &[spec.n_embd as u64, 2], &head)
        }
        _ => return None,
    })
}
