//! Embeddings through the C ABI: `engine_new` on an encoder file (a synthetic bge-small with llama.cpp's real BERT
//! vocabulary) starts an engine that serves `engine_embed`, whose response body is `POST /v1/embeddings`'; a
//! generation call on it, and `engine_embed` on a generating engine, are refused with a clear message; NULL
//! arguments and a freed handle are refused, never a crash.

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::ptr;

use ember::ffi::embed::engine_embed;
use ember::ffi::json::engine_string_free;
use ember::ffi::request::{engine_submit, EmberRequest};
use ember::ffi::{engine_free, engine_last_error_message, engine_new, EmberEngine, EmberStatus};
use ember::model::encoder::SyntheticEncoder;
use ember::model::gguf::GgufFile;
use serde_json::Value;

fn last_error() -> String {
    // SAFETY: ember's last error is a NUL-terminated string valid until this thread's next ember call.
    unsafe { CStr::from_ptr(engine_last_error_message()) }.to_string_lossy().into_owned()
}

fn encoder_file() -> PathBuf {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab = GgufFile::open(dir.join("ggml-vocab-bert-bge.gguf"))
        .expect("llama.cpp's vocabularies: run scripts/llamacpp/fetch-vocabs.sh (make test does)");
    let path = std::env::temp_dir().join(format!("ember-ffi-embed-{}.gguf", std::process::id()));
    SyntheticEncoder::family("bge-small-mean", 5, 1).unwrap().writer(&vocab).write(&path).unwrap();
    path
}

fn new_engine(config: &str) -> *mut EmberEngine {
    let config = CString::new(config).unwrap();
    let mut engine: *mut EmberEngine = ptr::null_mut();
    // SAFETY: a C string and a writable pointer.
    let status = unsafe { engine_new(config.as_ptr(), &mut engine) };
    assert_eq!(status, EmberStatus::Ok, "{}", last_error());
    engine
}

fn embed(engine: *mut EmberEngine, body: &str) -> Result<Value, (EmberStatus, String)> {
    let body = CString::new(body).unwrap();
    let mut out: *mut c_char = ptr::null_mut();
    // SAFETY: a live or stale handle (checked by the registry), a C string and a writable pointer.
    let status = unsafe { engine_embed(engine, body.as_ptr(), &mut out) };
    if status != EmberStatus::Ok {
        assert!(out.is_null(), "out is untouched on failure");
        return Err((status, last_error()));
    }
    // SAFETY: ember's string, NUL-terminated, freed right after.
    let text = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
    engine_string_free(out);
    Ok(serde_json::from_str(&text).unwrap())
}

#[test]
fn an_encoder_engine_serves_embeddings_and_refuses_generation() {
    let path = encoder_file();
    let engine = new_engine(&format!(r#"{{"model": {:?}, "threads": 2, "served_model_name": "bge"}}"#, path));
    let body = embed(engine, r#"{"input": ["Hello, world!", "Embeddings through C"]}"#).unwrap();
    assert_eq!(body["model"], "bge");
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    assert_eq!(body["data"][1]["embedding"].as_array().unwrap().len(), 384);
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 4);

    let (status, message) = embed(engine, r#"{"input": "a", "dimensions": 1000}"#).unwrap_err();
    assert_eq!(status, EmberStatus::InvalidRequest);
    assert!(message.contains("dimensions"), "{message}");

    let chat = CString::new(r#"{"messages": [{"role": "user", "content": "hi"}]}"#).unwrap();
    let mut request: *mut EmberRequest = ptr::null_mut();
    // SAFETY: a live handle, a C string and a writable pointer.
    let status = unsafe { engine_submit(engine, chat.as_ptr(), &mut request) };
    assert_eq!(status, EmberStatus::InvalidRequest);
    assert!(last_error().contains("serves embeddings"), "{}", last_error());

    let mut out: *mut c_char = ptr::null_mut();
    // SAFETY: NULL request_json is refused before anything is read.
    assert_eq!(unsafe { engine_embed(engine, ptr::null(), &mut out) }, EmberStatus::InvalidArgument);
    let body = CString::new(r#"{"input": "a"}"#).unwrap();
    // SAFETY: NULL out is refused before anything is written.
    assert_eq!(unsafe { engine_embed(engine, body.as_ptr(), ptr::null_mut()) }, EmberStatus::InvalidArgument);

    engine_free(engine);
    assert_eq!(embed(engine, r#"{"input": "a"}"#).unwrap_err().0, EmberStatus::InvalidHandle);
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_generating_engine_refuses_embeddings() {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let engine = new_engine(&format!(r#"{{"model": {model:?}, "threads": 1, "kv_cache_tokens": 256}}"#));
    let (status, message) = embed(engine, r#"{"input": "a"}"#).unwrap_err();
    assert_eq!(status, EmberStatus::InvalidRequest);
    assert!(message.contains("encoder model"), "{message}");
    engine_free(engine);
}

#[test]
fn a_reranker_engine_ranks_through_the_c_abi() {
    use ember::ffi::embed::engine_rerank;
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab = GgufFile::open(dir.join("ggml-vocab-bert-bge.gguf")).unwrap();
    let path = std::env::temp_dir().join(format!("ember-ffi-rerank-{}.gguf", std::process::id()));
    SyntheticEncoder::family("bge-small-rerank", 4, 1).unwrap().writer(&vocab).write(&path).unwrap();
    let engine = new_engine(&format!(r#"{{"model": {:?}, "threads": 2}}"#, path));
    let body = CString::new(r#"{"query": "capital of France", "documents": ["Paris", "a fox", "Berlin"], "top_n": 2}"#)
        .unwrap();
    let mut out: *mut c_char = ptr::null_mut();
    // SAFETY: a live handle, a C string and a writable pointer.
    assert_eq!(unsafe { engine_rerank(engine, body.as_ptr(), &mut out) }, EmberStatus::Ok, "{}", last_error());
    // SAFETY: ember's string, NUL-terminated, freed right after.
    let response: Value = serde_json::from_str(&unsafe { CStr::from_ptr(out) }.to_string_lossy()).unwrap();
    engine_string_free(out);
    let results = response["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results[0]["relevance_score"].as_f64() >= results[1]["relevance_score"].as_f64());
    // The same engine's embeddings need a pooling of its encoder.
    let (status, message) = embed(engine, r#"{"input": "a"}"#).unwrap_err();
    assert_eq!(status, EmberStatus::InvalidRequest);
    assert!(message.contains("reranker"), "{message}");
    engine_free(engine);
    let _ = std::fs::remove_file(path);
}
