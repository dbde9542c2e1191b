//! The encoder families against llama.cpp: a synthetic model with the family's real shapes (fewer layers, seeded
//! random weights) and llama.cpp's real BERT vocabulary (`ggml-vocab-bert-bge.gguf`, from `make test`'s `vocabs`)
//! encodes six texts, and each text's token ids and pooled vector are compared with the ones llama.cpp computed on
//! the same file (`tests/fixtures/encoders/*.json`, written by `scripts/llamacpp/embedding_fixtures.py`, which builds
//! the file with `ember-cli synthetic --vocab`). The file is rebuilt here from the fixture's family, layers and seed,
//! byte for byte the one llama.cpp read.
//!
//! - `bge-small` (bge-small-en-v1.5's shapes: 384 wide, 12 heads, FFN 1536; CLS pooling) and `bge-small-mean` (mean
//!   pooling, as E5 and all-MiniLM), F16 matrices: every vector's cosine similarity with llama.cpp's is at least
//!   0.9999 (the bound), on every kernel path this CPU runs, each path giving the same bits; ids exact.
//!   Both activation precisions: f32 (what llama.cpp pairs F16 weights with, near enough: it rounds them to f16)
//!   and 8-bit. Measured 2026-12-06 (every path on an AVX-512 + AMX Xeon): 1 − cosine at most 2.4e-8 with f32
//!   activations, 5.4e-6 (CLS) and 2.2e-6 (mean) with 8-bit ones.
//! - `nomic-embed` (nomic-embed-text v1.5's `nomic-bert`: 768 wide, RoPE base 1000 on NEOX pairs, q/k/v in one
//!   tensor, SwiGLU, no biases, mean pooling).
//! - All six texts (6–86 tokens) are encoded in one batch, the way the engine packs many inputs into one step, and
//!   each alone: the same bits, so an input's vector does not depend on what it was batched with.

use std::path::PathBuf;
use std::sync::Arc;

use ember::backend::cpu::kernels::{kernels, supported_kernels};
use ember::backend::cpu::{CpuEncoder, Precision};
use ember::engine::embed::{Embedder, EmbedderConfig};
use ember::model::encoder::{cosine_similarity, EncoderConfig, SyntheticEncoder};
use ember::model::gguf::GgufFile;
use ember::model::TokenId;
use serde_json::Value;

/// llama.cpp's vocabulary of `family`: XLM-RoBERTa's Unigram one (its copy named for nomic-bert-moe) for the
/// `xlm-roberta-*` families, BERT's WordPiece one for the others.
fn vocab_path(family: &str) -> PathBuf {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let name =
        if family.starts_with("xlm-roberta") { "ggml-vocab-nomic-bert-moe.gguf" } else { "ggml-vocab-bert-bge.gguf" };
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing: run scripts/llamacpp/fetch-vocabs.sh (make test does)", path.display());
    path
}

struct Fixture {
    name: String,
    family: String,
    spec: SyntheticEncoder,
    /// (text, ids, llama.cpp's vector)
    inputs: Vec<(String, Vec<TokenId>, Vec<f32>)>,
}

fn fixture(name: &str) -> Fixture {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/encoders/{name}.json"));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let family = json["family"].as_str().unwrap();
    let spec =
        SyntheticEncoder::family(family, json["seed"].as_u64().unwrap(), json["layers"].as_u64().unwrap() as usize)
            .unwrap_or_else(|| panic!("unknown encoder family {family}"));
    let floats = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<f32>>();
    let inputs = json["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let ids = i["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as TokenId).collect();
            (i["text"].as_str().unwrap().to_owned(), ids, floats(&i["embedding"]))
        })
        .collect();
    Fixture { name: name.to_owned(), family: family.to_owned(), spec, inputs }
}

/// The embedder of `file` (for its tokenizing: `[CLS] text [SEP]`, `<s> text </s>`, and its rerank pairs).
fn embedder_of(bytes: &[u8]) -> Embedder {
    let file = Arc::new(GgufFile::from_bytes(bytes).unwrap());
    Embedder::from_file(file, EmbedderConfig { threads: 1, max_batch_tokens: 512, ..EmbedderConfig::default() })
        .unwrap()
}

fn check(name: &str) {
    let fixture = fixture(name);
    let vocab = GgufFile::open(vocab_path(&fixture.family)).unwrap();
    let bytes = fixture.spec.writer(&vocab).to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = EncoderConfig::from_gguf(&file).unwrap();
    let embedder = embedder_of(&bytes);
    let inputs: Vec<Vec<TokenId>> = fixture.inputs.iter().map(|(text, ..)| embedder.tokenize(text)).collect();
    for ((text, want, _), got) in fixture.inputs.iter().zip(&inputs) {
        assert_eq!(got, want, "{}: token ids of {text:?}", fixture.name);
    }
    let d = config.n_embd;
    let slices: Vec<&[TokenId]> = inputs.iter().map(Vec::as_slice).collect();
    let default_path = kernels().name;
    for precision in [Precision::Float32, Precision::Quantized8] {
        let mut first_path: Option<(&str, Vec<f32>)> = None;
        for kernels in supported_kernels() {
            let mut encoder = CpuEncoder::with_kernels(&file, config.clone(), 2, 256, precision, kernels).unwrap();
            let mut batched = vec![0f32; slices.len() * d];
            encoder.embed(&slices, config.pooling, &mut batched).unwrap();
            for (i, (text, _, want)) in fixture.inputs.iter().enumerate() {
                let got = &batched[i * d..(i + 1) * d];
                let cos = cosine_similarity(got, want);
                eprintln!(
                    "{} {precision:?} {}: input {i} ({} tokens) 1 - cosine {:.2e}",
                    fixture.name,
                    kernels.name,
                    inputs[i].len(),
                    1.0 - cos
                );
                assert!(
                    cos >= 0.9999,
                    "{} on {}: {text:?} has cosine {cos} with llama.cpp's vector",
                    fixture.name,
                    kernels.name
                );
                // Alone on the default path only (the paths' bits are compared batched): the scalar path is slow.
                if kernels.name == default_path {
                    let mut alone = vec![0f32; d];
                    encoder.embed(&[slices[i]], config.pooling, &mut alone).unwrap();
                    assert_eq!(
                        alone, got,
                        "{} on {}: {text:?} alone differs from its batch",
                        fixture.name, kernels.name
                    );
                }
            }
            match &first_path {
                None => first_path = Some((kernels.name, batched)),
                Some((path, bits)) => {
                    assert_eq!(bits, &batched, "{}: the {} and {} paths differ", fixture.name, path, kernels.name)
                }
            }
        }
    }
}

#[test]
fn bge_small_cls_pooling_matches_llama_cpp() {
    check("bge-small");
}

#[test]
fn bge_small_mean_pooling_matches_llama_cpp() {
    check("bge-small-mean");
}

#[test]
fn nomic_embed_matches_llama_cpp() {
    check("nomic-embed");
}

/// A reranker (`bge-small-rerank`: bge-small's layers and a cross-encoder's head, a pooler with tanh and one
/// score) scores five query–document pairs, `[CLS] query [SEP] document [SEP]`, as llama.cpp does on the same ids.
/// The head is F32 in the file, so that llama.cpp's head is exact too; its body rounds activations to f16 in the F16
/// matmuls, which the synthetic head (an output layer of ±1 weights over 384 inputs) amplifies. Measured
/// 2026-12-06: |score − llama.cpp's| at most 1.5e-3 with f32 activations (the order of the five scores, 2.06 to
/// 2.63, two of them 2.5e-3 apart, is llama.cpp's) and 1.4e-2 with 8-bit ones; the bounds leave a margin, and the
/// bits are the same on every path.
#[test]
fn a_reranker_scores_pairs_as_llama_cpp() {
    check_rerank("bge-small-rerank", 5e-3, 5e-2);
}

/// XLM-RoBERTa's layout (bge-m3, multilingual-e5) at a small width (64 wide, 4 heads, FFN 256) with its real 250k
/// Unigram vocabulary: `<s> text </s>` inputs, CLS pooling. Measured 2026-12-06: ids exact, 1 − cosine at most
/// 3.1e-8 with f32 activations and 5.9e-6 with 8-bit ones, every path the same bits.
#[test]
fn xlm_roberta_matches_llama_cpp() {
    check("xlm-roberta-tiny");
}

/// An XLM-RoBERTa cross-encoder (bge-reranker-v2-m3's layout at a small width, `add_sep_token` as its file has it):
/// pairs `<s> q </s></s> d </s>` as llama-server builds them (ids exact), scores as llama.cpp's, in its order with f32
/// activations. Measured 2026-12-06: within 1.0e-3 of llama.cpp's scores (near −5.3) with f32 activations, 1.3e-2
/// with 8-bit ones.
#[test]
fn an_xlm_roberta_reranker_scores_pairs_as_llama_cpp() {
    check_rerank("xlm-roberta-tiny-rerank", 5e-3, 5e-2);
}

fn check_rerank(name: &str, bound_f32: f32, bound_q8: f32) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/encoders/{name}.json"));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let spec = SyntheticEncoder::family(
        json["family"].as_str().unwrap(),
        json["seed"].as_u64().unwrap(),
        json["layers"].as_u64().unwrap() as usize,
    )
    .unwrap();
    let vocab = GgufFile::open(vocab_path(json["family"].as_str().unwrap())).unwrap();
    let bytes = spec.writer(&vocab).to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = EncoderConfig::from_gguf(&file).unwrap();
    let embedder = embedder_of(&bytes);
    let query = json["query"].as_str().unwrap();
    let pairs: Vec<(Vec<TokenId>, f32)> = json["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ids = embedder.rerank_inputs(query, &[p["document"].as_str().unwrap()]).unwrap().remove(0);
            let want: Vec<TokenId> = p["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(ids, want, "pair ids");
            (ids, p["scores"][0].as_f64().unwrap() as f32)
        })
        .collect();
    let slices: Vec<&[TokenId]> = pairs.iter().map(|p| p.0.as_slice()).collect();
    for (precision, bound) in [(Precision::Float32, bound_f32), (Precision::Quantized8, bound_q8)] {
        let mut first: Option<Vec<f32>> = None;
        for kernels in supported_kernels() {
            let mut encoder = CpuEncoder::with_kernels(&file, config.clone(), 2, 256, precision, kernels).unwrap();
            let mut scores = vec![0f32; pairs.len()];
            encoder.rank(&slices, &mut scores).unwrap();
            for ((_, want), got) in pairs.iter().zip(&scores) {
                eprintln!("rerank {precision:?} {}: {got} vs {want} ({:.1e})", kernels.name, (got - want).abs());
                assert!((got - want).abs() <= bound, "{precision:?} on {}: {got} against {want}", kernels.name);
            }
            if precision == Precision::Float32 {
                let order = |v: Vec<f32>| {
                    let mut idx: Vec<usize> = (0..v.len()).collect();
                    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
                    idx
                };
                assert_eq!(order(scores.clone()), order(pairs.iter().map(|p| p.1).collect()), "ranking");
            }
            match &first {
                None => first = Some(scores),
                Some(bits) => assert_eq!(bits, &scores, "{}", kernels.name),
            }
        }
    }
}
