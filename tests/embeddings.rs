//! The embedder (`engine::embed`) and `POST /v1/embeddings` (`protocol::embeddings`) on a synthetic bge-small file
//! with llama.cpp's real BERT vocabulary (its vectors match llama.cpp's: `tests/encoder_families.rs`):
//! - many host threads at once, their inputs packed into shared batches: every vector has the bits of the same
//!   input encoded alone;
//! - the request fields: input forms, `encoding_format: base64`, `dimensions`, `pooling`, `normalize`, usage and
//!   its per-input counts;
//! - what is refused, by field: unknown fields, malformed input, an input beyond the model's positions, bad
//!   dimensions and pooling;
//! - chat's metrics gate and `deadline_ms` on both bodies (every branch of the gate; deadlines already past when
//!   the request arrives, so that nothing depends on how long a step takes).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ember::backend::cpu::{CpuEncoder, Precision};
use ember::engine::embed::{EmbedError, EmbedRequest, Embedder, EmbedderConfig};
use ember::model::encoder::{normalize, Pooling, SyntheticEncoder};
use ember::model::gguf::GgufFile;
use ember::protocol::embeddings::{embeddings_answer, embeddings_json};
use ember::protocol::rerank::{rerank_answer, rerank_json};
use serde_json::Value;

/// A synthetic file of an encoder `family` with llama.cpp's real BERT vocabulary.
fn family_file(family: &str, seed: u64) -> Arc<GgufFile> {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab = GgufFile::open(dir.join("ggml-vocab-bert-bge.gguf"))
        .expect("llama.cpp's vocabularies: run scripts/llamacpp/fetch-vocabs.sh (make test does)");
    let bytes = SyntheticEncoder::family(family, seed, 2).unwrap().writer(&vocab).to_bytes();
    Arc::new(GgufFile::from_bytes(&bytes).unwrap())
}

fn model_file() -> Arc<GgufFile> {
    family_file("bge-small", 7)
}

fn reranker_file() -> Arc<GgufFile> {
    family_file("bge-small-rerank", 4)
}

fn embedder(file: &Arc<GgufFile>, max_batch_tokens: usize) -> Embedder {
    embedder_with(file, EmbedderConfig { max_batch_tokens, ..EmbedderConfig::default() })
}

/// An embedder of `config` for the tests: two threads, at most 64 inputs a request.
fn embedder_with(file: &Arc<GgufFile>, config: EmbedderConfig) -> Embedder {
    Embedder::from_file(Arc::clone(file), EmbedderConfig { threads: 2, max_inputs: 64, ..config }).unwrap()
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
    assert_eq!(body["usage"]["prompt_tokens_per_input"], serde_json::json!([6, 3]), "by input, in input order");
    assert!(body.get("metrics").is_none(), "no metrics behind a closed gate");
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
    let file = reranker_file();
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
    let per_input: Vec<usize> = pairs.iter().map(Vec::len).collect();
    assert_eq!(response["usage"]["prompt_tokens_per_input"], serde_json::json!(per_input), "by document");
    // The answer's floats: every document's score, in document order, whatever top_n keeps.
    let answer = rerank_answer(&reranker, "rr", &body.replace('}', r#", "top_n": 1}"#), Instant::now()).unwrap();
    assert_eq!((answer.floats.as_slice(), answer.dimensions), (scores.as_slice(), 1));
    assert_eq!(answer.input_tokens, per_input);
    let top: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(top["results"].as_array().unwrap().len(), 1);
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
    let e = rerank_json(&reranker, "rr", &long).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("documents[1]"));
    assert!(e.message.starts_with("documents[1]: the query and this document make 60"), "{}", e.message);
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

/// The answer of an embeddings request is its body and the same vectors as floats, with each input's tokens.
#[test]
fn an_answer_holds_the_bodys_vectors_as_floats() {
    let file = model_file();
    let embedder = embedder(&file, 512);
    let body = r#"{"input": ["Hello, world!", "a", "Retrieval"], "dimensions": 64}"#;
    let answer = embeddings_answer(&embedder, "bge-small", body, Instant::now()).unwrap();
    let parsed: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!((answer.count(), answer.dimensions, answer.floats.len()), (3, 64, 3 * 64));
    for (i, datum) in parsed["data"].as_array().unwrap().iter().enumerate() {
        assert_eq!(floats(&datum["embedding"]), answer.floats[i * 64..(i + 1) * 64], "row {i}");
    }
    let per_input: Vec<usize> = serde_json::from_value(parsed["usage"]["prompt_tokens_per_input"].clone()).unwrap();
    assert_eq!(answer.input_tokens, per_input);
    assert_eq!(per_input.iter().sum::<usize>() as u64, parsed["usage"]["prompt_tokens"].as_u64().unwrap());
}

/// Checks a body's `metrics`: chat's five names; the time to the vectors and the queue as numbers,
/// nothing generated, and the rate as the input tokens over the time to the vectors.
fn check_metrics(body: &Value) {
    let m = body["metrics"].as_object().unwrap_or_else(|| panic!("no metrics object: {body}"));
    let names: Vec<&str> = m.keys().map(String::as_str).collect();
    let mut want =
        ["time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second"];
    want.sort_unstable();
    let mut names_sorted = names.clone();
    names_sorted.sort_unstable();
    assert_eq!(names_sorted, want);
    let ttft = m["time_to_first_token_ms"].as_f64().unwrap();
    assert!(ttft > 0.0 && m["queue_time_ms"].as_f64().unwrap() >= 0.0, "{body}");
    assert!(m["generation_time_ms"].is_null() && m["mean_itl_ms"].is_null(), "nothing is generated: {body}");
    let tokens = body["usage"]["prompt_tokens"].as_f64().unwrap();
    let rate = m["tokens_per_second"].as_f64().unwrap();
    assert!((rate - tokens / (ttft / 1000.0)).abs() <= rate * 1e-9, "{body}");
}

/// `metrics` on both bodies behind chat's double gate: engine `enable_per_request_metrics` and request
/// `include_metrics: true`, every combination; the answer's metrics are there whatever the gate (the C getter's),
/// and absent with `disable_log_stats`.
#[test]
fn metrics_appear_behind_chats_double_gate() {
    let (file, rerank_file) = (model_file(), reranker_file());
    for enabled in [false, true] {
        let config = EmbedderConfig { enable_per_request_metrics: enabled, ..EmbedderConfig::default() };
        let (embedder, reranker) = (embedder_with(&file, config.clone()), embedder_with(&rerank_file, config));
        for include in [None, Some(false), Some(true)] {
            let field = include.map_or(String::new(), |i| format!(r#", "include_metrics": {i}"#));
            let open = enabled && include == Some(true);
            let embed =
                embeddings_answer(&embedder, "m", &format!(r#"{{"input": ["a b c", "d"]{field}}}"#), Instant::now())
                    .unwrap();
            let rerank_body = format!(r#"{{"query": "q", "documents": ["a", "b c"]{field}}}"#);
            let rerank = rerank_answer(&reranker, "rr", &rerank_body, Instant::now()).unwrap();
            for answer in [&embed, &rerank] {
                let body: Value = serde_json::from_str(&answer.body).unwrap();
                assert_eq!(body.get("metrics").is_some(), open, "engine {enabled}, include_metrics {include:?}");
                if open {
                    check_metrics(&body);
                }
                let m = answer.metrics;
                assert!(
                    m.time_to_first_token_ms.is_some() && m.queue_time_ms.is_some() && m.tokens_per_second.is_some()
                );
                assert!(m.generation_time_ms.is_none() && m.mean_itl_ms.is_none());
            }
        }
    }
    let quiet = embedder_with(&file, EmbedderConfig { disable_log_stats: true, ..EmbedderConfig::default() });
    let answer = embeddings_answer(&quiet, "m", r#"{"input": "a"}"#, Instant::now()).unwrap();
    assert_eq!(answer.metrics, Default::default(), "no stats, no metrics");
    let embedder = embedder(&file, 512);
    for bad in ["1", r#""true""#, "[]"] {
        let e = embeddings_json(&embedder, "m", &format!(r#"{{"input": "a", "include_metrics": {bad}}}"#)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("include_metrics"), "{bad}");
    }
}

/// `deadline_ms` as chat reads it (1 to a week, milliseconds from the call): a request still waiting at its
/// deadline is refused, code `"deadline"` (chat's `finish_reason` for it), nothing computed. The deadlines here
/// are past when the request arrives: at the embedder (an instant), or from an arrival a second ago.
#[test]
fn a_request_still_waiting_at_its_deadline_is_refused() {
    let (file, rerank_file) = (model_file(), reranker_file());
    let (embedder, reranker) = (embedder(&file, 512), embedder(&rerank_file, 512));
    let input = embedder.tokenize("Hello, world!");
    let due = EmbedRequest { deadline: Some(Instant::now()), ..EmbedRequest::new(vec![input.clone()]) };
    assert_eq!(embedder.embed(due).unwrap_err(), EmbedError::DeadlineExceeded);
    let later = Instant::now() + Duration::from_secs(600);
    let output = embedder.embed(EmbedRequest { deadline: Some(later), ..EmbedRequest::new(vec![input]) }).unwrap();
    assert_eq!(output.input_tokens, [6]);

    let a_second_ago = Instant::now().checked_sub(Duration::from_secs(1)).expect("the clock has run a second");
    let refused = [
        embeddings_answer(&embedder, "m", r#"{"input": "a", "deadline_ms": 1}"#, a_second_ago).unwrap_err(),
        rerank_answer(&reranker, "rr", r#"{"query": "q", "documents": ["a"], "deadline_ms": 999}"#, a_second_ago)
            .unwrap_err(),
    ];
    for e in refused {
        assert_eq!((e.code.as_deref(), e.error_type), (Some("deadline"), "server_error"), "{e}");
        assert!(e.message.starts_with("deadline_ms: "), "the message names the field: {}", e.message);
    }
    // A deadline not yet reached is served; the same request arriving now too.
    let body = r#"{"input": "a", "deadline_ms": 604800000}"#;
    assert!(embeddings_answer(&embedder, "m", body, a_second_ago).is_ok());
    assert!(rerank_json(&reranker, "rr", r#"{"query": "q", "documents": ["a"], "deadline_ms": 60000}"#).is_ok());
    for bad in ["0", "604800001", "-5", "1.5", r#""60""#] {
        let e = embeddings_json(&embedder, "m", &format!(r#"{{"input": "a", "deadline_ms": {bad}}}"#)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("deadline_ms"), "{bad}");
        let body = format!(r#"{{"query": "q", "documents": ["a"], "deadline_ms": {bad}}}"#);
        assert_eq!(rerank_json(&reranker, "rr", &body).unwrap_err().param.as_deref(), Some("deadline_ms"), "{bad}");
    }
}

/// llama-quantize writes a one-score head, `cls.output.weight` `[384, 1]`, as `[384]` (ggml drops trailing
/// dimensions of 1): such a file loads and scores as the two-dimensional one does.
#[test]
fn a_one_dimensional_classifier_head_is_a_one_score_head() {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab = GgufFile::open(dir.join("ggml-vocab-bert-bge.gguf")).unwrap();
    let spec = SyntheticEncoder::family("bge-small-rerank", 4, 2).unwrap();
    let two_d = GgufFile::from_bytes(&spec.writer(&vocab).to_bytes()).unwrap();
    let head = two_d.tensor("cls.output.weight").unwrap();
    assert_eq!(head.shape(), &[384, 1]);
    let flat = spec.writer(&vocab).without_tensor("cls.output.weight").tensor(
        "cls.output.weight",
        head.dtype(),
        &[384],
        head.bytes.to_vec(),
    );
    let one_d = Arc::new(GgufFile::from_bytes(&flat.to_bytes()).unwrap());
    let body = r#"{"query": "capital of France", "documents": ["Paris", "a fox"]}"#;
    let scores = |file: &Arc<GgufFile>| rerank_json(&embedder(file, 512), "rr", body).unwrap();
    assert_eq!(scores(&one_d), scores(&reranker_file()));
}
