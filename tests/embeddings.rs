//! The embedder (`engine::embed`) and `POST /v1/embeddings` (`protocol::embeddings`) on a synthetic bge-small file
//! with llama.cpp's real BERT vocabulary (its vectors match llama.cpp's: `tests/encoder_families.rs`):
//! - many host threads at once, their inputs packed into shared batches: every vector has the bits of the same
//!   input encoded alone;
//! - the request fields: input forms, `encoding_format: base64`, `dimensions`, `pooling`, `normalize`, usage;
//! - what is refused, by field: unknown fields, malformed input, an input beyond the model's positions, bad
//!   dimensions and pooling.

use std::path::PathBuf;
use std::sync::Arc;

use ember::backend::cpu::{CpuEncoder, Precision};
use ember::engine::embed::{EmbedError, EmbedRequest, Embedder, EmbedderConfig};
use ember::model::encoder::{normalize, Pooling, SyntheticEncoder};
use ember::model::gguf::GgufFile;
use ember::protocol::embeddings::embeddings_json;
use serde_json::Value;

fn model_file() -> Arc<GgufFile> {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab = GgufFile::open(dir.join("ggml-vocab-bert-bge.gguf"))
        .expect("llama.cpp's vocabularies: run scripts/llamacpp/fetch-vocabs.sh (make test does)");
    let bytes = SyntheticEncoder::family("bge-small", 7, 2).unwrap().writer(&vocab).to_bytes();
    Arc::new(GgufFile::from_bytes(&bytes).unwrap())
}

fn embedder(file: &Arc<GgufFile>, max_batch_tokens: usize) -> Embedder {
    let config = EmbedderConfig { threads: 2, max_batch_tokens, max_inputs: 64, ..EmbedderConfig::default() };
    Embedder::from_file(Arc::clone(file), config).unwrap()
}

const TEXTS: [&str; 6] = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings put texts that mean the same near each other.",
    "Äpfel und Birnen",
    "a",
    "Retrieval augmented generation finds passages, ranks them, and answers from them.",
];

#[test]
fn vectors_from_shared_batches_equal_each_input_alone() {
    let file = model_file();
    // A budget of 40 tokens: requests' inputs are split across batches and batches mix requests.
    let embedder = Arc::new(embedder(&file, 40));
    let tokens: Vec<Vec<u32>> = TEXTS.iter().map(|t| embedder.tokenize(t)).collect();
    let config = embedder.encoder_config().unwrap().clone();
    let mut alone = CpuEncoder::new(&file, config.clone(), 1, 64, Precision::Quantized8).unwrap();
    let reference: Vec<Vec<f32>> = tokens
        .iter()
        .map(|t| {
            let mut v = vec![0f32; config.n_embd];
            alone.embed(&[t.as_slice()], config.pooling, &mut v).unwrap();
            normalize(&mut v);
            v
        })
        .collect();
    let threads: Vec<_> = (0..8)
        .map(|k| {
            let (embedder, tokens) = (Arc::clone(&embedder), tokens.clone());
            std::thread::spawn(move || {
                // Each thread asks for a rotation of the texts, twice.
                let order: Vec<usize> = (0..TEXTS.len()).map(|i| (i + k) % TEXTS.len()).collect();
                (0..2)
                    .map(|_| {
                        let inputs = order.iter().map(|&i| tokens[i].clone()).collect();
                        (order.clone(), embedder.embed(EmbedRequest::new(inputs)).unwrap())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for t in threads {
        for (order, output) in t.join().unwrap() {
            assert_eq!(output.dimensions, config.n_embd);
            for (slot, &i) in order.iter().enumerate() {
                assert_eq!(output.vector(slot), reference[i].as_slice(), "text {i} in slot {slot}");
                assert_eq!(output.input_tokens[slot], tokens[i].len());
            }
            assert!(output.timing.time_to_vectors >= output.timing.queue_time);
        }
    }
}

fn post(embedder: &Embedder, body: &str) -> Result<Value, (Option<String>, String)> {
    embeddings_json(embedder, "bge-small", body)
        .map(|r| serde_json::from_str(&r).unwrap())
        .map_err(|e| (e.param.clone(), e.message.clone()))
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[test]
fn the_openai_request_shape() {
    let file = model_file();
    let embedder = embedder(&file, 512);
    let body = post(&embedder, r#"{"model": "any", "input": ["Hello, world!", "a"], "user": "u1"}"#).unwrap();
    assert_eq!(body["object"], "list");
    assert_eq!(body["model"], "bge-small");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!((data[1]["object"].as_str(), data[1]["index"].as_u64()), (Some("embedding"), Some(1)));
    let first = floats(&data[0]["embedding"]);
    assert_eq!(first.len(), 384);
    let norm: f32 = first.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "unit length by default: {norm}");
    // [CLS] hello , world ! [SEP] and [CLS] a [SEP].
    assert_eq!(body["usage"]["prompt_tokens"], 9);
    assert_eq!(body["usage"]["total_tokens"], 9);
    // A string, token ids and arrays of them are the same input.
    let ids = embedder.tokenize("Hello, world!");
    let one = post(&embedder, r#"{"input": "Hello, world!"}"#).unwrap();
    let by_ids = post(&embedder, &format!(r#"{{"input": {ids:?}}}"#)).unwrap();
    let nested = post(&embedder, &format!(r#"{{"input": [{ids:?}]}}"#)).unwrap();
    for b in [&one, &by_ids, &nested] {
        assert_eq!(floats(&b["data"][0]["embedding"]), first);
    }
    // base64: the same floats' little-endian bytes.
    let b64 = post(&embedder, r#"{"input": "Hello, world!", "encoding_format": "base64"}"#).unwrap();
    let text = b64["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(decode_base64_f32(text), first);
    // dimensions: the first 64, renormalized.
    let short = post(&embedder, r#"{"input": "Hello, world!", "dimensions": 64}"#).unwrap();
    let short = floats(&short["data"][0]["embedding"]);
    let mut want = first[..64].to_vec();
    normalize(&mut want);
    assert_eq!(short.len(), 64);
    for (a, b) in short.iter().zip(&want) {
        assert!((a - b).abs() < 1e-6);
    }
    // normalize: false and another pooling give other vectors.
    let raw = post(&embedder, r#"{"input": "Hello, world!", "normalize": false}"#).unwrap();
    let raw = floats(&raw["data"][0]["embedding"]);
    assert!((raw.iter().map(|x| x * x).sum::<f32>().sqrt() - 1.0).abs() > 1e-3);
    let mean = post(&embedder, r#"{"input": "Hello, world!", "pooling": "mean"}"#).unwrap();
    assert_ne!(floats(&mean["data"][0]["embedding"]), first);
}

fn decode_base64_f32(text: &str) -> Vec<f32> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut bytes = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let n = chunk
            .iter()
            .take_while(|&&c| c != b'=')
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | u32::from(value(c)) << (18 - 6 * i));
        let count = chunk.iter().filter(|&&c| c != b'=').count() - 1;
        bytes.extend((0..count).map(|i| (n >> (16 - 8 * i)) as u8));
    }
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[test]
fn refusals_name_the_field() {
    let file = model_file();
    let embedder = embedder(&file, 512);
    let param = |body: &str| post(&embedder, body).unwrap_err().0;
    assert_eq!(param(r#"{"input": "a", "temperature": 1}"#).as_deref(), Some("temperature"));
    assert_eq!(param(r#"{"model": "m"}"#).as_deref(), Some("input"));
    assert_eq!(param(r#"{"input": []}"#).as_deref(), Some("input"));
    assert_eq!(param(r#"{"input": [1, "a"]}"#).as_deref(), Some("input"));
    assert_eq!(param(r#"{"input": [-1]}"#).as_deref(), Some("input"));
    assert_eq!(param(r#"{"input": {"text": "a"}}"#).as_deref(), Some("input"));
    assert_eq!(param(r#"{"input": "a", "encoding_format": "int8"}"#).as_deref(), Some("encoding_format"));
    assert_eq!(param(r#"{"input": "a", "dimensions": 0}"#).as_deref(), Some("dimensions"));
    assert_eq!(param(r#"{"input": "a", "dimensions": 385}"#).as_deref(), Some("dimensions"));
    assert_eq!(param(r#"{"input": "a", "pooling": "rank"}"#).as_deref(), Some("pooling"));
    assert_eq!(param(r#"{"input": "a", "priority": 1e40}"#).as_deref(), Some("priority"));
    assert_eq!(param(&format!(r#"{{"input": ["a", {:?}]}}"#, "word ".repeat(600))).as_deref(), Some("input[1]"));
    assert_eq!(param(r#"{"input": [[101, 999999]]}"#).as_deref(), Some("input[0]"));
    let (param, message) = post(&embedder, "[1, 2").unwrap_err();
    assert!(param.is_none() && message.contains("not JSON"), "{message}");
    let too_many = format!(r#"{{"input": {:?}}}"#, vec!["a"; 65]);
    assert_eq!(post(&embedder, &too_many).unwrap_err().0.as_deref(), Some("input"));
    // The embedder's own checks, below the protocol.
    let e = embedder.embed(EmbedRequest { pooling: Some(Pooling::None), ..EmbedRequest::new(vec![vec![101, 102]]) });
    assert_eq!(e.unwrap_err(), EmbedError::Pooling(Pooling::None));
    assert_eq!(embedder.embed(EmbedRequest::new(vec![vec![]])).unwrap_err(), EmbedError::EmptyInput { index: 0 });
}

/// `POST /v1/rerank` on a synthetic reranker (bge-small's layers and a cross-encoder's head; its scores match
/// llama.cpp's: `tests/encoder_families.rs`): the results are the encoder's scores of `[CLS] query [SEP] document
/// [SEP]`, most relevant first, `top_n` and `return_documents` as asked; a reranker asked for embeddings says what
/// it is, and an embedding model asked to rerank refuses.
#[test]
fn rerank_orders_documents_by_the_heads_score() {
    use ember::protocol::rerank::rerank_json;
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab = GgufFile::open(dir.join("ggml-vocab-bert-bge.gguf")).unwrap();
    let bytes = SyntheticEncoder::family("bge-small-rerank", 4, 2).unwrap().writer(&vocab).to_bytes();
    let file = Arc::new(GgufFile::from_bytes(&bytes).unwrap());
    let reranker = embedder(&file, 512);
    let docs = ["Paris is the capital of France.", "A fox.", "Berlin is in Germany.", "capital"];
    let body = format!(r#"{{"query": "What is the capital of France?", "documents": {docs:?}}}"#);
    let response: Value = serde_json::from_str(&rerank_json(&reranker, "rr", &body).unwrap()).unwrap();
    let results = response["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    // The encoder's own scores of the same pairs.
    let config = reranker.encoder_config().unwrap().clone();
    let mut encoder = CpuEncoder::new(&file, config, 1, 512, Precision::Quantized8).unwrap();
    let query = reranker.tokenize("What is the capital of France?");
    let pairs: Vec<Vec<u32>> = docs
        .iter()
        .map(|d| {
            let mut ids = query.clone();
            ids.extend(&reranker.tokenize(d)[1..]);
            ids
        })
        .collect();
    let slices: Vec<&[u32]> = pairs.iter().map(Vec::as_slice).collect();
    let mut scores = vec![0f32; docs.len()];
    encoder.rank(&slices, &mut scores).unwrap();
    let mut want: Vec<usize> = (0..docs.len()).collect();
    want.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let got: Vec<usize> = results.iter().map(|r| r["index"].as_u64().unwrap() as usize).collect();
    assert_eq!(got, want);
    for r in results {
        let i = r["index"].as_u64().unwrap() as usize;
        assert_eq!(r["relevance_score"].as_f64().unwrap() as f32, scores[i]);
        assert!(r.get("document").is_none());
    }
    assert_eq!(
        response["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
        pairs.iter().map(Vec::len).sum::<usize>()
    );
    // top_n, return_documents, documents as objects.
    let body = r#"{"query": "q", "documents": [{"text": "a"}, "b", "c"], "top_n": 2, "return_documents": true}"#;
    let response: Value = serde_json::from_str(&rerank_json(&reranker, "rr", body).unwrap()).unwrap();
    let results = response["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let i = results[0]["index"].as_u64().unwrap() as usize;
    assert_eq!(results[0]["document"]["text"], ["a", "b", "c"][i]);
    // Refusals.
    let param = |body: &str| rerank_json(&reranker, "rr", body).unwrap_err().param;
    assert_eq!(param(r#"{"documents": ["a"]}"#).as_deref(), Some("query"));
    assert_eq!(param(r#"{"query": "q", "documents": []}"#).as_deref(), Some("documents"));
    assert_eq!(param(r#"{"query": "q", "documents": [1]}"#).as_deref(), Some("documents"));
    assert_eq!(param(r#"{"query": "q", "documents": ["a"], "top_n": 0}"#).as_deref(), Some("top_n"));
    assert_eq!(param(r#"{"query": "q", "documents": ["a"], "rank_fields": []}"#).as_deref(), Some("rank_fields"));
    let long = format!(r#"{{"query": "q", "documents": ["a", {:?}]}}"#, "word ".repeat(600));
    assert_eq!(param(&long).as_deref(), Some("documents[1]"));
    // A reranker gives vectors only when asked for a pooling of its encoder.
    let e = embeddings_json(&reranker, "rr", r#"{"input": "a"}"#).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("pooling"));
    assert!(e.message.contains("reranker"), "{}", e.message);
    assert!(embeddings_json(&reranker, "rr", r#"{"input": "a", "pooling": "cls"}"#).is_ok());
    // An embedding model has no head to rank with.
    let embedding_model = model_file();
    let plain = embedder(&embedding_model, 512);
    let e = rerank_json(&plain, "m", r#"{"query": "q", "documents": ["a"]}"#).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("pooling"));
}
