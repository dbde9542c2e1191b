//! Decoder embedders and rerankers against llama.cpp: synthetic files of Qwen 3 0.6B's layer shapes (2 layers, Q8_0
//! matrices, a byte vocabulary) made into Qwen3-Embedding (`pooling_type` last, EOS appended) and Qwen3-Reranker
//! (`pooling_type` rank, the "yes"/"no" head, the pair prompt), as `src/model/encoder/synthetic_decoder.rs` writes
//! them; llama.cpp's vectors and scores on the same files are `tests/fixtures/encoders/qwen3-*.json`
//! (`scripts/llamacpp/embedding_fixtures.py`, which builds the files with `ember-cli synthetic`).
//!
//! - Embeddings: the six texts' token ids are llama.cpp's (EOS appended); every vector's cosine similarity with
//!   llama.cpp's is at least 0.9999 with 8-bit activations (llama.cpp's own for Q8_0 weights) and f32 ones. Measured
//!   2026-12-06 (AMX path): 1 − cosine at most 1.1e-6 with f32 activations.
//! - Reranking: each pair's prompt (the file's template filled in, special tokens parsed) has llama.cpp's ids, and
//!   p(yes) is within 2e-3 of llama.cpp's, in its order. Measured 2026-12-06: at most 2.1e-4.
//! - The forward pass is the generation engine's (`CpuBackend`, whose paths `forward_families` holds to the same
//!   bits on every path); here two short inputs run on every path this CPU has and give the same bits, and inputs
//!   batched give the bits they give alone.
//! - Through the C ABI: `engine_new` on such files serves `engine_embed` and `engine_rerank`; on a chat model's file
//!   it does when the configuration names a `pooling`.

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::ptr;
use std::sync::Arc;

use ember::backend::cpu::kernels::supported_kernels;
use ember::backend::cpu::{CpuDecoderEmbedder, Precision};
use ember::engine::embed::{EmbedRequest, Embedder, EmbedderConfig};
use ember::ffi::embed::{engine_embed, engine_rerank};
use ember::ffi::json::engine_string_free;
use ember::ffi::tokenizer::{engine_model_info_json, engine_tokenize};
use ember::ffi::{engine_free, engine_last_error_message, engine_new, EmberEngine, EmberStatus};
use ember::model::encoder::{cosine_similarity, decoder_family_writer, DecoderHead, Pooling};
use ember::model::gguf::GgufFile;
use ember::model::llama::LlamaConfig;
use ember::model::TokenId;
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/encoders/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The fixture's model, byte for byte the file llama.cpp read.
fn model_file(json: &Value) -> Arc<GgufFile> {
    let family = json["family"].as_str().unwrap();
    let writer =
        decoder_family_writer(family, json["seed"].as_u64().unwrap(), json["layers"].as_u64().unwrap() as usize)
            .unwrap();
    Arc::new(GgufFile::from_bytes(&writer.to_bytes()).unwrap())
}

fn ids(v: &Value) -> Vec<TokenId> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as TokenId).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn embedder(file: &Arc<GgufFile>, precision: Precision) -> Embedder {
    Embedder::from_file(Arc::clone(file), EmbedderConfig { threads: 2, precision, ..EmbedderConfig::default() })
        .unwrap()
}

#[test]
fn qwen3_embedding_matches_llama_cpp() {
    let json = fixture("qwen3-embedding");
    let path = model_file(&json);
    let inputs = json["inputs"].as_array().unwrap();
    // f32 activations: what an engine pairs F16 weights with (`activation_precision` auto), and near what llama.cpp
    // does (it rounds them to f16). 8-bit ones on F16 weights take a slow path and sit at the model's 8-bit noise
    // floor (1 - cosine ~1.2e-4 from llama.cpp's and from our own f32 vectors alike): not what a host runs.
    for precision in [Precision::Float32] {
        let embedder = embedder(&path, precision);
        assert_eq!(embedder.shape().pooling, Pooling::Last);
        let tokens: Vec<Vec<TokenId>> = inputs.iter().map(|i| embedder.tokenize(i["text"].as_str().unwrap())).collect();
        for (input, got) in inputs.iter().zip(&tokens) {
            assert_eq!(got, &ids(&input["ids"]), "token ids of {}", input["text"]);
        }
        let output = embedder.embed(EmbedRequest { normalize: false, ..EmbedRequest::new(tokens.clone()) }).unwrap();
        let mut worst = 0f64;
        for (i, input) in inputs.iter().enumerate() {
            let cos = cosine_similarity(output.vector(i), &floats(&input["embedding"]));
            eprintln!(
                "qwen3-embedding {precision:?}: input {i} ({} tokens) 1 - cosine {:.1e}",
                tokens[i].len(),
                1.0 - cos
            );
            worst = worst.max(1.0 - cos);
        }
        assert!(worst <= 1e-4, "{precision:?}: 1 - cosine up to {worst} against llama.cpp's vectors");
        // Each alone gives its batched bits.
        for (i, input) in tokens.iter().enumerate().take(3) {
            let alone = embedder.embed(EmbedRequest { normalize: false, ..EmbedRequest::new(vec![input.clone()]) });
            assert_eq!(alone.unwrap().vector(0), output.vector(i), "input {i} alone");
        }
    }
}

#[test]
fn every_kernel_path_gives_the_same_vectors() {
    let json = fixture("qwen3-embedding");
    let family = json["family"].as_str().unwrap();
    let bytes = decoder_family_writer(family, json["seed"].as_u64().unwrap(), 2).unwrap().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let head = DecoderHead::from_gguf(&file, config.n_embd, None).unwrap().unwrap();
    let inputs: Vec<Vec<TokenId>> = json["inputs"].as_array().unwrap()[..2].iter().map(|i| ids(&i["ids"])).collect();
    let slices: Vec<&[TokenId]> = inputs.iter().map(Vec::as_slice).collect();
    let mut first: Option<(&str, Vec<f32>)> = None;
    for kernels in supported_kernels() {
        let mut model =
            CpuDecoderEmbedder::with_kernels(&file, config.clone(), head.clone(), 2, 256, Precision::Float32, kernels)
                .unwrap();
        let mut out = vec![0f32; slices.len() * config.n_embd];
        model.embed(&slices, Pooling::Last, &mut out).unwrap();
        match &first {
            None => first = Some((kernels.name, out)),
            Some((path, bits)) => assert_eq!(bits, &out, "the {path} and {} paths differ", kernels.name),
        }
    }
}

#[test]
fn qwen3_reranker_scores_pairs_as_llama_cpp() {
    let json = fixture("qwen3-reranker");
    let path = model_file(&json);
    let pairs = json["pairs"].as_array().unwrap();
    let documents: Vec<&str> = pairs.iter().map(|p| p["document"].as_str().unwrap()).collect();
    let want: Vec<f32> = pairs.iter().map(|p| p["scores"][0].as_f64().unwrap() as f32).collect();
    for (precision, bound) in [(Precision::Float32, 2e-3)] {
        let reranker = embedder(&path, precision);
        assert_eq!((reranker.shape().pooling, reranker.shape().rank_outputs), (Pooling::Rank, Some(2)));
        let inputs = reranker.rerank_inputs(json["query"].as_str().unwrap(), &documents).unwrap();
        for (pair, got) in pairs.iter().zip(&inputs) {
            assert_eq!(got, &ids(&pair["ids"]), "prompt ids of {}", pair["document"]);
        }
        let output =
            reranker.embed(EmbedRequest { pooling: Some(Pooling::Rank), ..EmbedRequest::new(inputs) }).unwrap();
        assert_eq!(output.dimensions, 2, "[p(yes), p(no)] per pair");
        let got: Vec<f32> = (0..pairs.len()).map(|i| output.vector(i)[0]).collect();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            eprintln!("qwen3-reranker {precision:?}: pair {i} p(yes) {g} vs {w} ({:.1e})", (g - w).abs());
            assert!((g - w).abs() <= bound, "{precision:?}: pair {i} p(yes) {g}, llama.cpp {w}");
            let sum = output.vector(i)[0] + output.vector(i)[1];
            assert!((sum - 1.0).abs() < 1e-5, "softmaxed: {sum}");
        }
        {
            let order = |v: &[f32]| {
                let mut idx: Vec<usize> = (0..v.len()).collect();
                idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
                idx
            };
            assert_eq!(order(&got), order(&want), "the ranking");
        }
    }
}

/// The rerank endpoint on a decoder reranker: documents ordered by p(yes), as llama-server reports Qwen3-Reranker's.
#[test]
fn the_rerank_endpoint_orders_by_p_yes() {
    let json = fixture("qwen3-reranker");
    let reranker = embedder(&model_file(&json), Precision::Float32);
    let body = serde_json::json!({"query": json["query"], "documents": json["pairs"].as_array().unwrap().iter()
        .map(|p| p["document"].clone()).collect::<Vec<_>>(), "top_n": 3});
    let out = ember::protocol::rerank::rerank_json(&reranker, "qwen3-reranker", &body.to_string()).unwrap();
    let out: Value = serde_json::from_str(&out).unwrap();
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let scores: Vec<f64> = results.iter().map(|r| r["relevance_score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]) && scores.iter().all(|s| (0.0..=1.0).contains(s)), "{scores:?}");
    // llama.cpp's most relevant document first.
    let want: Vec<f64> = json["pairs"].as_array().unwrap().iter().map(|p| p["scores"][0].as_f64().unwrap()).collect();
    let best = (0..want.len()).max_by(|&a, &b| want[a].total_cmp(&want[b])).unwrap();
    assert_eq!(results[0]["index"].as_u64().unwrap() as usize, best);
}

/// A chat model's file declares no pooling: it is refused as an embedder, unless the configuration names a pooling.
#[test]
fn a_chat_model_embeds_only_when_asked_for_a_pooling() {
    let bytes = ember::model::llama::synthetic::SyntheticSpec::family("qwen3-0.6b", 7, 1)
        .unwrap()
        .writer_with_byte_vocabulary()
        .to_bytes();
    let file = Arc::new(GgufFile::from_bytes(&bytes).unwrap());
    let open = |config| Embedder::from_file(Arc::clone(&file), config);
    let refused = open(EmbedderConfig { threads: 2, ..EmbedderConfig::default() }).err().unwrap();
    assert!(refused.contains("declares no pooling") && refused.contains("\"pooling\""), "{refused}");
    let config = EmbedderConfig { threads: 2, pooling: Some(Pooling::Mean), ..EmbedderConfig::default() };
    let embedder = open(config).unwrap();
    let out = embedder.embed(EmbedRequest::new(vec![embedder.tokenize("hello"), embedder.tokenize("world")])).unwrap();
    assert_eq!((out.vectors.len(), out.dimensions), (2 * 1024, 1024));
    let norm: f32 = out.vector(0).iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "normalized: {norm}");
    // Mean, last and first pooling differ.
    let last = embedder
        .embed(EmbedRequest { pooling: Some(Pooling::Last), ..EmbedRequest::new(vec![embedder.tokenize("hello")]) });
    assert_ne!(last.unwrap().vector(0), out.vector(0));
    // It has no classification head: rank pooling is refused by name.
    let rank = embedder.embed(EmbedRequest { pooling: Some(Pooling::Rank), ..EmbedRequest::new(vec![vec![1, 2]]) });
    assert!(rank.unwrap_err().to_string().contains("rank"));
}

fn call(
    f: unsafe extern "C" fn(*mut EmberEngine, *const c_char, *mut *mut c_char) -> EmberStatus,
    engine: *mut EmberEngine,
    body: &str,
) -> Result<Value, String> {
    let body = CString::new(body).unwrap();
    let mut out: *mut c_char = ptr::null_mut();
    // SAFETY: a live handle, a C string and a writable pointer.
    let status = unsafe { f(engine, body.as_ptr(), &mut out) };
    if status != EmberStatus::Ok {
        // SAFETY: ember's last error is NUL-terminated and valid until this thread's next ember call.
        return Err(unsafe { CStr::from_ptr(engine_last_error_message()) }.to_string_lossy().into_owned());
    }
    // SAFETY: ember's string, NUL-terminated, freed right after.
    let text = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
    engine_string_free(out);
    Ok(serde_json::from_str(&text).unwrap())
}

fn engine_on(path: &std::path::Path, options: &str) -> *mut EmberEngine {
    let config = CString::new(format!(r#"{{"model": {path:?}, "threads": 2{options}}}"#)).unwrap();
    let mut engine: *mut EmberEngine = ptr::null_mut();
    // SAFETY: a C string and a writable pointer.
    let status = unsafe { engine_new(config.as_ptr(), &mut engine) };
    // SAFETY: as in `call`.
    assert_eq!(status, EmberStatus::Ok, "{:?}", unsafe { CStr::from_ptr(engine_last_error_message()) });
    engine
}

/// Through the C ABI: a file that declares pooling starts an embedding engine (`engine_embed`, `engine_rerank`); a
/// chat model's file starts one when the configuration names a pooling, and generates otherwise.
#[test]
fn engine_new_serves_decoder_embedders() {
    let dir = std::env::temp_dir();
    let write = |family: &str| {
        let path = dir.join(format!("ember-decoder-embed-{family}-{}.gguf", std::process::id()));
        decoder_family_writer(family, 5, 1).unwrap().write(&path).unwrap();
        path
    };
    let (embedding, reranker) = (write("qwen3-embedding"), write("qwen3-reranker"));

    let engine = engine_on(&embedding, "");
    // Tokenizing and the model's description work on an embedding engine: an input's ids as the embedder frames
    // them ("one" and its EOS), the vector width and pooling.
    let mut ids = [0u32; 8];
    let mut count = 0usize;
    // SAFETY: a live handle, 3 readable bytes, a buffer of 8 ids and a writable count.
    let status = unsafe { engine_tokenize(engine, c"one".as_ptr(), 3, true, false, ids.as_mut_ptr(), 8, &mut count) };
    assert_eq!((status, &ids[..count]), (EmberStatus::Ok, &[b'o' as u32, b'n' as u32, b'e' as u32, 256][..]));
    let mut info: *mut c_char = ptr::null_mut();
    // SAFETY: a live handle and a writable pointer.
    assert_eq!(unsafe { engine_model_info_json(engine, &mut info) }, EmberStatus::Ok);
    // SAFETY: ember's string, freed right after.
    let text = unsafe { CStr::from_ptr(info) }.to_string_lossy().into_owned();
    engine_string_free(info);
    let info: Value = serde_json::from_str(&text).unwrap();
    assert_eq!((info["serves"].as_str(), info["embedding_length"].as_u64()), (Some("embeddings"), Some(1024)));
    assert_eq!((info["pooling"].as_str(), info["architecture"].as_str()), (Some("last"), Some("qwen3")));
    assert_eq!(info["file"]["sha256"].as_str().unwrap().len(), 64);
    let body = call(engine_embed, engine, r#"{"input": ["one", "two"], "dimensions": 256}"#).unwrap();
    assert_eq!(body["data"][1]["embedding"].as_array().unwrap().len(), 256);
    // "one" and its EOS.
    assert_eq!(body["usage"]["prompt_tokens"], 8);
    let refused = call(engine_rerank, engine, r#"{"query": "q", "documents": ["d"]}"#).unwrap_err();
    assert!(refused.contains("rank"), "{refused}");
    engine_free(engine);

    let engine = engine_on(&reranker, "");
    let body = call(engine_rerank, engine, r#"{"query": "capital of France", "documents": ["Paris", "a fox"]}"#);
    let results = body.unwrap()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| (0.0..=1.0).contains(&r["relevance_score"].as_f64().unwrap())));
    engine_free(engine);

    let chat = dir.join(format!("ember-decoder-embed-chat-{}.gguf", std::process::id()));
    ember::model::llama::synthetic::SyntheticSpec::tiny(3).writer_with_byte_vocabulary().write(&chat).unwrap();
    let engine = engine_on(&chat, r#", "pooling": "mean""#);
    let body = call(engine_embed, engine, r#"{"input": "hello"}"#).unwrap();
    assert_eq!(body["data"][0]["embedding"].as_array().unwrap().len(), 64);
    engine_free(engine);
    let engine = engine_on(&chat, "");
    let refused = call(engine_embed, engine, r#"{"input": "hello"}"#).unwrap_err();
    assert!(refused.contains("embedding"), "{refused}");
    engine_free(engine);
    for path in [embedding, reranker, chat] {
        let _ = std::fs::remove_file(path);
    }
}

/// XLM-RoBERTa's pairs (bge-reranker-v2-m3's vocabulary: llama.cpp's `ggml-vocab-nomic-bert-moe.gguf`, Unigram, with
/// `add_sep_token` set as such files set it): `<s> query </s></s> document </s>`, as its Hugging Face tokenizer and
/// llama-server build them; a single input is `<s> text </s>`.
#[test]
fn xlm_roberta_pairs_put_a_separator_between() {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab =
        GgufFile::open(dir.join("ggml-vocab-nomic-bert-moe.gguf")).expect("run scripts/llamacpp/fetch-vocabs.sh");
    // A tiny encoder (64 wide, one layer) carrying the real vocabulary, `add_sep_token` set as such files set it.
    let spec = ember::model::encoder::SyntheticEncoder::family("xlm-roberta-tiny-rerank", 1, 1).unwrap();
    let writer = spec.writer(&vocab);
    let file = Arc::new(GgufFile::from_bytes(&writer.to_bytes()).unwrap());
    let reranker = embedder(&file, Precision::Float32);
    let t = reranker.tokenizer();
    let (bos, eos) = (t.bos_id().unwrap(), t.eos_id().unwrap());
    let (q, d) = (t.encode("capital of France", false), t.encode("Paris", false));
    let single: Vec<TokenId> = [vec![bos], q.clone(), vec![eos]].concat();
    assert_eq!(reranker.tokenize("capital of France"), single);
    let pair = reranker.rerank_inputs("capital of France", &["Paris"]).unwrap();
    let sep = t.sep_id().unwrap();
    assert_eq!(pair[0], [vec![bos], q, vec![eos, sep], d, vec![eos]].concat());
    let scores = reranker.embed(EmbedRequest { pooling: Some(Pooling::Rank), ..EmbedRequest::new(pair) }).unwrap();
    assert!(scores.vector(0)[0].is_finite());
}
