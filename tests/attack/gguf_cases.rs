//! Hostile GGUF files ("load bombs"): each is a model file crafted to crash, stall or exhaust the memory of the
//! process that loads it, or to load and then fail every request. A model file is untrusted input, and a crash of
//! ember is a crash of its host, so every one must be refused at load with an error that names the cause.
//!
//! [`gguf_bombs`] writes them into a directory; the attack suite loads each through `engine_new` in a subprocess
//! under a memory cap, and `tests/gguf_malformed.rs` through `Model::load`. The first three were found on ember at
//! 6761def (issue 43, "Load"): they cost 21 s and 3.3 GB before a refusal, loaded a model whose every request then
//! failed, and loaded an OLMo 2 model that llama.cpp refuses.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ember::model::gguf::writer::GgufWriter;
use ember::model::gguf::{Array, GgmlType, GgufFile, Value, ValueType};
use ember::model::llama::families;
use ember::model::llama::{LlamaConfig, SyntheticSpec};
use ember::model::tokenizer::limits::{MAX_MERGES, MAX_TOKENS};

/// One case: its name, what writes its file, and a substring of the error that must refuse it.
type Case = (&'static str, fn() -> GgufWriter, &'static str);

const CASES: [Case; 17] = [
    ("empty_tokens_16m", empty_tokens_16m, "metadata key \"tokenizer.ggml.tokens\""),
    (
        "vocabulary_smaller_than_embedding",
        vocabulary_smaller_than_embedding,
        "tokenizer.ggml.tokens has 100 tokens but tensor \"token_embd.weight\" has 49152 rows",
    ),
    ("olmo2_without_output", olmo2_without_output, "tensor \"output.weight\" is required"),
    ("merges_beyond_limit", merges_beyond_limit, "tokenizer.ggml.merges has 2097153 entries"),
    ("merges_count_beyond_file", merges_count_beyond_file, "metadata key \"tokenizer.ggml.merges\""),
    (
        "token_types_of_another_length",
        token_types_of_another_length,
        "tokenizer.ggml.token_type has 10 entries but tokenizer.ggml.tokens has 512",
    ),
    ("tokens_beyond_limit", tokens_beyond_limit, "1048577 tokens is not in 1..=1048576"),
    ("tensor_dims_overflow", tensor_dims_overflow, "tensor \"token_embd.weight\" has a shape whose size overflows"),
    ("tensor_beyond_file", tensor_beyond_file, "extends beyond the file"),
    ("tensors_sharing_bytes", tensors_sharing_bytes, "expected 2621440 (where the tensors before it end)"),
    ("chat_template_100mb", chat_template_100mb, "metadata key \"tokenizer.chat_template\""),
    ("gemma3_with_output", gemma3_with_output, "a tensor \"output.weight\" would be left unused"),
    ("expert_count_u32_max", expert_count_u32_max, "4294967295 experts is not in 1..=512"),
    ("experts_wider_than_any_ffn", experts_wider_than_any_ffn, "their total width must be in 1..=1048576"),
    (
        "expert_tensor_of_another_shape",
        expert_tensor_of_another_shape,
        "tensor \"blk.0.ffn_gate_exps.weight\" has shape [512, 256, 8], expected [512, 256, 32]",
    ),
    ("latent_rank_u32_max", latent_rank_u32_max, "deepseek2.attention.kv_lora_rank: 4294967295 is not in 0..="),
    (
        "per_head_tensor_of_fewer_heads",
        per_head_tensor_of_fewer_heads,
        "tensor \"blk.1.attn_k_b.weight\" has shape [64, 128, 4], expected [64, 128, 8]",
    ),
];

/// Every hostile file, written into `dir`: (case name, file, a substring the load error must contain). About
/// 370 MB in all; [`gguf_bomb`] writes one.
pub fn gguf_bombs(dir: &Path) -> Vec<(String, PathBuf, &'static str)> {
    CASES.iter().map(|&case| write(dir, case)).collect()
}

/// Every load bomb's name, in order (nothing is written).
pub fn gguf_bomb_names() -> impl Iterator<Item = &'static str> {
    CASES.iter().map(|(name, _, _)| *name)
}

/// Case `name` alone, written into `dir`: its file and the substring its load error must contain (`None` for a name
/// not in [`gguf_bombs`]).
pub fn gguf_bomb(dir: &Path, name: &str) -> Option<(PathBuf, &'static str)> {
    let case = CASES.iter().find(|(n, _, _)| *n == name)?;
    let (_, path, expected) = write(dir, *case);
    Some((path, expected))
}

fn write(dir: &Path, (name, build, expected): Case) -> (String, PathBuf, &'static str) {
    let path = dir.join(format!("{name}.gguf"));
    build().write(&path).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    (name.to_owned(), path, expected)
}

/// A tiny model (SmolLM2's layout, 2 layers of width 64) with a byte-level vocabulary of `vocab` tokens.
fn tiny(vocab: usize) -> GgufWriter {
    SyntheticSpec { vocab_size: vocab, ..SyntheticSpec::tiny(43) }.writer_with_byte_vocabulary()
}

/// An array of `n` empty strings, encoded: 8 bytes each (their lengths), 24 bytes each as Rust `String`s.
fn empty_strings(n: usize) -> Vec<u8> {
    let mut out = array_head(ValueType::String, n);
    out.resize(out.len() + 8 * n, 0);
    out
}

fn i32s(n: usize, value: i32) -> Vec<u8> {
    let mut out = array_head(ValueType::I32, n);
    (0..n).for_each(|_| out.extend_from_slice(&value.to_le_bytes()));
    out
}

fn array_head(element: ValueType, n: usize) -> Vec<u8> {
    let mut out = (element as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&(n as u64).to_le_bytes());
    out
}

/// Finding 1: 16M empty tokens (and their types) in a 200 MB file. Their 24-byte `String`s and the vocabulary's maps
/// cost 21 s and 3.3 GB before the embedding's 512 rows refused them.
fn empty_tokens_16m() -> GgufWriter {
    let n = 16 << 20;
    tiny(512)
        .without_metadata("tokenizer.ggml.tokens")
        .without_metadata("tokenizer.ggml.token_type")
        .metadata_encoded("tokenizer.ggml.tokens", ValueType::Array, empty_strings(n))
        .metadata_encoded("tokenizer.ggml.token_type", ValueType::Array, i32s(n, 1))
}

/// Finding 2: 100 tokens for an embedding (and logits) of 49,152 rows: loaded, then every request ended with
/// `finish_reason: "error"` (a sampled id with no token).
fn vocabulary_smaller_than_embedding() -> GgufWriter {
    let tokens: Vec<String> = (0..100).map(|i| format!("t{i}")).collect();
    tiny(49_152)
        .set_metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
        .set_metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; 100])))
        .set_metadata("tokenizer.ggml.eos_token_id", Value::U32(0))
        .set_metadata("tokenizer.ggml.bos_token_id", Value::U32(0))
}

/// Finding 3: an OLMo 2 model without `output.weight` loaded with its logits projected by the embedding, which
/// OLMo 2 never ties (llama.cpp requires the tensor).
fn olmo2_without_output() -> GgufWriter {
    SyntheticSpec { arch: families::OLMO2, ..SyntheticSpec::tiny(43) }
        .writer_with_byte_vocabulary()
        .without_tensor("output.weight")
}

/// One merge more than a vocabulary may have (2,097,153 of `"a b"`: 23 MB).
fn merges_beyond_limit() -> GgufWriter {
    let n = MAX_MERGES + 1;
    let mut merges = array_head(ValueType::String, n);
    for _ in 0..n {
        merges.extend_from_slice(&3u64.to_le_bytes());
        merges.extend_from_slice(b"a b");
    }
    tiny(512).without_metadata("tokenizer.ggml.merges").metadata_encoded(
        "tokenizer.ggml.merges",
        ValueType::Array,
        merges,
    )
}

/// A merges array that says it has 2^40 entries, in a file of a few hundred kilobytes.
fn merges_count_beyond_file() -> GgufWriter {
    tiny(512).without_metadata("tokenizer.ggml.merges").metadata_encoded(
        "tokenizer.ggml.merges",
        ValueType::Array,
        array_head(ValueType::String, 1 << 40),
    )
}

/// A token-type array of 10 entries for 512 tokens.
fn token_types_of_another_length() -> GgufWriter {
    tiny(512).set_metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; 10])))
}

/// One token more than a vocabulary may have, each with its row of the embedding (Q4_0, width 32: 35 MB in all), so
/// that nothing but the limit refuses it.
fn tokens_beyond_limit() -> GgufWriter {
    let n = MAX_TOKENS + 1;
    let spec = SyntheticSpec { n_embd: 32, n_head: 2, n_head_kv: 1, n_ff: 64, ..SyntheticSpec::tiny(43) };
    let tokens: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    spec.writer_with_byte_vocabulary()
        .set_metadata("llama.vocab_size", Value::U32(n as u32))
        .set_metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
        .set_metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; n])))
        .without_tensor("token_embd.weight")
        .tensor("token_embd.weight", GgmlType::Q4_0, &[32, n as u64], vec![0; n * 18])
}

/// A tensor of 2^32 × 2^32 × 2^32 elements: its size overflows 64 bits.
fn tensor_dims_overflow() -> GgufWriter {
    GgufWriter::new().tensor("token_embd.weight", GgmlType::F32, &[1 << 32, 1 << 32, 1 << 32], vec![0; 32])
}

/// A tensor of 1M rows (71 MB) in a file of a few hundred bytes.
fn tensor_beyond_file() -> GgufWriter {
    GgufWriter::new().metadata("general.architecture", Value::String("llama".into())).tensor_claim(
        "token_embd.weight",
        GgmlType::Q8_0,
        &[64, 1 << 20],
        0,
    )
}

/// A model of 4,096 layers of width 1024 (39 GB of weights once the backend copies them) whose tensors all point
/// at the same 2.6 MB: only the first has bytes of its own.
fn tensors_sharing_bytes() -> GgufWriter {
    let spec = SyntheticSpec::tiny(43);
    let small_file = GgufFile::from_bytes(&spec.writer().to_bytes()).expect("the tiny model opens");
    let small = LlamaConfig::from_gguf(&small_file).expect("the tiny model is valid");
    let mut w = spec.writer_with_byte_vocabulary();
    for (name, _, _) in small.expected_tensors() {
        w = w.without_tensor(&name);
    }
    let (n_layer, n_embd, n_ff, n_head, n_head_kv) = (4096, 1024, 4096, 16, 4);
    for (key, v) in [
        ("llama.block_count", n_layer),
        ("llama.embedding_length", n_embd),
        ("llama.feed_forward_length", n_ff),
        ("llama.attention.head_count", n_head),
        ("llama.attention.head_count_kv", n_head_kv),
        ("llama.rope.dimension_count", n_embd / n_head),
    ] {
        w = w.set_metadata(key, Value::U32(v as u32));
    }
    let big = LlamaConfig {
        n_layer,
        n_embd,
        n_ff,
        n_head,
        n_head_kv,
        head_dim: n_embd / n_head,
        rope_dim: n_embd / n_head,
        layers: vec![small.layers[0]; n_layer],
        ..small
    };
    // The largest matrix, with bytes (zero blocks are valid Q4_1), and every other tensor at the same offset.
    let blob = "blk.0.ffn_up.weight";
    let blob_bytes = n_embd * n_ff / 32 * 20;
    w = w.tensor(blob, GgmlType::Q4_1, &[n_embd as u64, n_ff as u64], vec![0; blob_bytes]);
    for (name, shape, is_norm) in big.expected_tensors().into_iter().filter(|(name, _, _)| name != blob) {
        let dtype = if is_norm { GgmlType::F32 } else { GgmlType::Q4_1 };
        w = w.tensor_claim(&name, dtype, &shape, 0);
    }
    w
}

/// A chat template of 100 MB (ggml reads strings up to 1 GiB).
fn chat_template_100mb() -> GgufWriter {
    let template = "{{ x }}\n".repeat((100 << 20) / 8);
    tiny(512).metadata("tokenizer.chat_template", Value::String(template))
}

/// A Gemma 3 model with an `output.weight`, which llama.cpp never reads (Gemma ties its output to the embedding)
/// and refuses as a tensor too many.
fn gemma3_with_output() -> GgufWriter {
    let spec = SyntheticSpec::tiny_gemma3(43);
    let shape = [spec.n_embd as u64, spec.vocab_size as u64];
    let zeros = vec![0.0; spec.n_embd * spec.vocab_size];
    spec.writer_with_byte_vocabulary().tensor_f32("output.weight", &shape, &zeros)
}

/// A Qwen3 MoE file (32 experts of 256, 8 per token) edited by `edit`.
fn qwen3moe(edit: impl FnOnce(GgufWriter) -> GgufWriter) -> GgufWriter {
    let spec = SyntheticSpec { matrix_type: None, ..SyntheticSpec::family("qwen3moe-small", 44, 1).unwrap() };
    edit(spec.writer_with_byte_vocabulary())
}

/// 4,294,967,295 experts: buffers sized by the count would not fit any machine.
fn expert_count_u32_max() -> GgufWriter {
    qwen3moe(|w| w.set_metadata("qwen3moe.expert_count", Value::U32(u32::MAX)))
}

/// Experts 2^20 wide, 8 per token: a step's expert buffers would be 8 times the widest dense FFN's.
fn experts_wider_than_any_ffn() -> GgufWriter {
    qwen3moe(|w| w.set_metadata("qwen3moe.expert_feed_forward_length", Value::U32(1 << 20)))
}

/// A stacked expert tensor with 8 experts where the metadata says 32: reading expert 31's rows would run past it.
fn expert_tensor_of_another_shape() -> GgufWriter {
    let name = "blk.0.ffn_gate_exps.weight";
    let data = vec![0u8; 512 * 256 * 8 / 32 * 34];
    qwen3moe(|w| w.without_tensor(name).tensor(name, GgmlType::Q8_0, &[512, 256, 8], data))
}

/// A DeepSeek V3-layout file (latent attention: 8 heads, a compressed key row of 128 + 32) edited by `edit`.
fn deepseek(edit: impl FnOnce(GgufWriter) -> GgufWriter) -> GgufWriter {
    let spec = SyntheticSpec { matrix_type: None, ..SyntheticSpec::family("deepseek3-small", 45, 2).unwrap() };
    edit(spec.writer_with_byte_vocabulary())
}

/// A compressed key row 4,294,967,295 wide: the cache's rows and the absorbed queries are sized by it.
fn latent_rank_u32_max() -> GgufWriter {
    deepseek(|w| w.set_metadata("deepseek2.attention.kv_lora_rank", Value::U32(u32::MAX)))
}

/// A per-head key decompression of 4 heads where the model has 8: absorbing head 7's query would read past it.
fn per_head_tensor_of_fewer_heads() -> GgufWriter {
    let name = "blk.1.attn_k_b.weight";
    let data = vec![0u8; 64 * 128 * 4 / 32 * 34];
    deepseek(|w| w.without_tensor(name).tensor(name, GgmlType::Q8_0, &[64, 128, 4], data))
}
