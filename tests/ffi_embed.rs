//! Embeddings through the C ABI: `engine_new` on an encoder file (a synthetic bge-small with llama.cpp's real BERT
//! vocabulary) starts an engine that serves `engine_embed`, whose response body is `POST /v1/embeddings`'; a
//! generation call on it, and `engine_embed` on a generating engine, are refused with a clear message; NULL
//! arguments and a freed handle are refused, never a crash. The result handles of `engine_embed_vectors` and
//! `engine_rerank_scores` (`EmberEmbeddings`): their floats are the body's numbers, their token counts its
//! `usage.prompt_tokens_per_input`, their metrics follow the `struct_size` convention and the engine's
//! configuration, and every misuse of the handle is a status.

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::ptr;

use ember::ffi::embed::{engine_embed, engine_embed_vectors, engine_rerank_scores};
use ember::ffi::embeddings::{
    engine_embeddings_count, engine_embeddings_dimensions, engine_embeddings_floats, engine_embeddings_free,
    engine_embeddings_input_tokens, engine_embeddings_json, engine_get_embeddings_timing_metrics, EmberEmbeddings,
};
use ember::ffi::json::engine_string_free;
use ember::ffi::metrics::{
    EmberPerRequestTimingMetrics, EMBER_TIMING_QUEUE_TIME_MS, EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS,
    EMBER_TIMING_TOKENS_PER_SECOND,
};
use ember::ffi::request::{engine_request_free, engine_submit, EmberRequest};
use ember::ffi::{engine_free, engine_last_error_message, engine_new, EmberEngine, EmberStatus};
use ember::model::encoder::SyntheticEncoder;
use ember::model::gguf::GgufFile;
use serde_json::Value;

fn last_error() -> String {
    // SAFETY: ember's last error is a NUL-terminated string valid until this thread's next ember call.
    unsafe { CStr::from_ptr(engine_last_error_message()) }.to_string_lossy().into_owned()
}

/// Writes a synthetic one-layer file of the encoder `family` with llama.cpp's real BERT vocabulary, named for
/// `test` (tests run at once, each with its file).
fn family_file(family: &str, seed: u64, test: &str) -> PathBuf {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab = GgufFile::open(dir.join("ggml-vocab-bert-bge.gguf"))
        .expect("llama.cpp's vocabularies: run scripts/llamacpp/fetch-vocabs.sh (make test does)");
    let path = std::env::temp_dir().join(format!("ember-ffi-{test}-{}.gguf", std::process::id()));
    SyntheticEncoder::family(family, seed, 1).unwrap().writer(&vocab).write(&path).unwrap();
    path
}

fn encoder_file() -> PathBuf {
    family_file("bge-small-mean", 5, "embed")
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

/// A result handle, read through the accessors and freed on drop.
struct Result_ {
    handle: *mut EmberEmbeddings,
}

/// What the accessors of a result say.
#[derive(Debug, PartialEq)]
struct Read {
    floats: Vec<f32>,
    count: usize,
    dimensions: usize,
    input_tokens: Vec<u32>,
    body: Value,
}

impl Result_ {
    fn read(&self) -> Read {
        let (mut floats, mut count, mut dimensions, mut tokens, mut json) =
            (ptr::null(), 0usize, 0usize, ptr::null(), ptr::null());
        // SAFETY: a live handle and writable outputs.
        unsafe {
            assert_eq!(engine_embeddings_floats(self.handle, &mut floats), EmberStatus::Ok);
            assert_eq!(engine_embeddings_count(self.handle, &mut count), EmberStatus::Ok);
            assert_eq!(engine_embeddings_dimensions(self.handle, &mut dimensions), EmberStatus::Ok);
            assert_eq!(engine_embeddings_input_tokens(self.handle, &mut tokens), EmberStatus::Ok);
            assert_eq!(engine_embeddings_json(self.handle, &mut json), EmberStatus::Ok);
        }
        // SAFETY: the result's arrays of `count × dimensions` floats and `count` counts, and its NUL-terminated
        // body, valid until the handle is freed (after this).
        let (floats, input_tokens, body) = unsafe {
            (
                std::slice::from_raw_parts(floats, count * dimensions).to_vec(),
                std::slice::from_raw_parts(tokens, count).to_vec(),
                serde_json::from_str(&CStr::from_ptr(json).to_string_lossy()).unwrap(),
            )
        };
        Read { floats, count, dimensions, input_tokens, body }
    }

    fn metrics(&self) -> EmberPerRequestTimingMetrics {
        let mut m = metrics_struct();
        // SAFETY: a live handle and a whole struct.
        assert_eq!(unsafe { engine_get_embeddings_timing_metrics(self.handle, &mut m) }, EmberStatus::Ok);
        m
    }
}

impl Drop for Result_ {
    fn drop(&mut self) {
        engine_embeddings_free(self.handle);
    }
}

fn metrics_struct() -> EmberPerRequestTimingMetrics {
    EmberPerRequestTimingMetrics {
        struct_size: size_of::<EmberPerRequestTimingMetrics>() as u32,
        present: 0,
        time_to_first_token_ms: 0.0,
        generation_time_ms: 0.0,
        queue_time_ms: 0.0,
        mean_itl_ms: 0.0,
        tokens_per_second: 0.0,
    }
}

type Call = unsafe extern "C" fn(*mut EmberEngine, *const c_char, *mut *mut EmberEmbeddings) -> EmberStatus;

fn call(function: Call, engine: *mut EmberEngine, body: &str) -> Result<Result_, (EmberStatus, String)> {
    let body = CString::new(body).unwrap();
    let mut handle: *mut EmberEmbeddings = ptr::null_mut();
    // SAFETY: a live or stale engine handle (checked), a C string and a writable pointer.
    let status = unsafe { function(engine, body.as_ptr(), &mut handle) };
    if status != EmberStatus::Ok {
        assert!(handle.is_null(), "out is untouched on failure");
        return Err((status, last_error()));
    }
    Ok(Result_ { handle })
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[test]
fn a_result_handle_holds_the_bodys_vectors_as_contiguous_floats() {
    let path = family_file("bge-small", 6, "vectors");
    let engine = new_engine(&format!(r#"{{"model": {path:?}, "threads": 2}}"#));
    let texts = r#"["Hello, world!", "Embeddings through C", "a"]"#;
    let result = call(engine_embed_vectors, engine, &format!(r#"{{"input": {texts}}}"#)).unwrap();
    let read = result.read();
    assert_eq!((read.count, read.dimensions, read.floats.len()), (3, 384, 3 * 384));
    for (i, datum) in read.body["data"].as_array().unwrap().iter().enumerate() {
        assert_eq!(floats(&datum["embedding"]), read.floats[i * 384..(i + 1) * 384], "row {i}");
    }
    let per_input: Vec<u32> = serde_json::from_value(read.body["usage"]["prompt_tokens_per_input"].clone()).unwrap();
    assert_eq!(read.input_tokens, per_input);
    assert_eq!(per_input.iter().sum::<u32>() as u64, read.body["usage"]["prompt_tokens"].as_u64().unwrap());
    // engine_embed gives the same body for the same request.
    let plain = embed(engine, &format!(r#"{{"input": {texts}}}"#)).unwrap();
    assert_eq!(plain["data"], read.body["data"]);
    // dimensions and base64 shape the vectors and the body; the floats are the vectors either way.
    let short = call(engine_embed_vectors, engine, r#"{"input": "a", "dimensions": 64, "encoding_format": "base64"}"#)
        .unwrap()
        .read();
    assert_eq!((short.count, short.dimensions), (1, 64));
    assert!(short.body["data"][0]["embedding"].is_string());
    let norm: f32 = short.floats.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "truncated, then normalized: {norm}");
    // The body belongs to the result: engine_string_free refuses it, and the result reads on.
    let mut json = ptr::null();
    // SAFETY: a live handle and a writable pointer.
    assert_eq!(unsafe { engine_embeddings_json(result.handle, &mut json) }, EmberStatus::Ok);
    engine_string_free(json.cast_mut());
    assert!(last_error().contains("not a string from ember"), "{}", last_error());
    // A result outlives its engine.
    engine_free(engine);
    assert_eq!(result.read(), read);
    // Refusals are engine_embed's.
    let engine = new_engine(&format!(r#"{{"model": {path:?}, "threads": 1}}"#));
    let (status, message) = call(engine_embed_vectors, engine, r#"{"input": "a", "dimensions": 1000}"#).err().unwrap();
    assert_eq!(status, EmberStatus::InvalidRequest);
    assert!(message.starts_with("engine_embed_vectors: dimensions"), "{message}");
    let (status, message) = call(engine_embed_vectors, engine, r#"{"input": "a", "deadline_ms": 0}"#).err().unwrap();
    assert_eq!(status, EmberStatus::InvalidRequest);
    assert!(message.contains("deadline_ms"), "{message}");
    assert!(call(engine_embed_vectors, engine, r#"{"input": "a", "deadline_ms": 60000}"#).is_ok());
    engine_free(engine);
    let _ = std::fs::remove_file(path);
}

#[test]
fn rerank_scores_come_in_document_order() {
    let path = family_file("bge-small-rerank", 4, "scores");
    let engine = new_engine(&format!(r#"{{"model": {path:?}, "threads": 2}}"#));
    let documents = r#"["Paris", "a fox", "Berlin is in Germany"]"#;
    let all = call(engine_rerank_scores, engine, &format!(r#"{{"query": "capital", "documents": {documents}}}"#))
        .unwrap()
        .read();
    assert_eq!((all.count, all.dimensions), (3, 1));
    for r in all.body["results"].as_array().unwrap() {
        let index = r["index"].as_u64().unwrap() as usize;
        assert_eq!(r["relevance_score"].as_f64().unwrap() as f32, all.floats[index], "document {index}");
    }
    // top_n keeps the best in the body; the floats are still every document's.
    let body = format!(r#"{{"query": "capital", "documents": {documents}, "top_n": 1}}"#);
    let top = call(engine_rerank_scores, engine, &body).unwrap().read();
    assert_eq!(top.floats, all.floats);
    assert_eq!(top.input_tokens, all.input_tokens);
    let best = top.floats.iter().copied().fold(f32::MIN, f32::max);
    assert_eq!(top.body["results"][0]["relevance_score"].as_f64().unwrap() as f32, best);
    assert_eq!(top.body["results"].as_array().unwrap().len(), 1);
    // An embedding request on a reranker is refused as engine_embed refuses it.
    let (status, message) = call(engine_embed_vectors, engine, r#"{"input": "a"}"#).err().unwrap();
    assert_eq!(status, EmberStatus::InvalidRequest);
    assert!(message.contains("reranker"), "{message}");
    engine_free(engine);
    let _ = std::fs::remove_file(path);
}

/// The engine's half of the metrics gate reaches the bodies; the C getter reads the metrics whatever
/// `include_metrics` says, with `struct_size`'s rules, and reads none when the engine records no stats.
#[test]
fn timing_metrics_of_a_result() {
    let path = family_file("bge-small-mean", 8, "metrics");
    let enabled = new_engine(&format!(r#"{{"model": {path:?}, "threads": 1, "enable_per_request_metrics": true}}"#));
    let plain = new_engine(&format!(r#"{{"model": {path:?}, "threads": 1}}"#));
    let quiet = new_engine(&format!(r#"{{"model": {path:?}, "threads": 1, "disable_log_stats": true}}"#));
    let asked = r#"{"input": ["a b", "c"], "include_metrics": true}"#;
    let five = EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS | EMBER_TIMING_QUEUE_TIME_MS | EMBER_TIMING_TOKENS_PER_SECOND;
    for (engine, body, shown, present) in [
        (enabled, asked, true, five),
        (enabled, r#"{"input": ["a b", "c"]}"#, false, five),
        (plain, asked, false, five),
        (quiet, asked, false, 0),
    ] {
        let result = call(engine_embed_vectors, engine, body).unwrap();
        let read = result.read();
        assert_eq!(read.body.get("metrics").is_some(), shown, "{body}");
        let m = result.metrics();
        assert_eq!(m.present, present, "{body}");
        assert!(m.generation_time_ms.is_nan() && m.mean_itl_ms.is_nan(), "nothing is generated");
        if present != 0 {
            assert!(m.time_to_first_token_ms > 0.0 && m.queue_time_ms >= 0.0 && m.tokens_per_second > 0.0);
        }
        if shown {
            // The same numbers, to the last bit or two that a JSON text's round trip may move.
            let same = |field: &str, value: f64| {
                let written = read.body["metrics"][field].as_f64().unwrap();
                assert!((written - value).abs() <= value.abs() * 1e-12, "{field}: {written} in the body, {value} in C");
            };
            same("time_to_first_token_ms", m.time_to_first_token_ms);
            same("tokens_per_second", m.tokens_per_second);
        }
    }
    // struct_size: a short struct gets its whole fields only; under 8 is refused; NULL out too.
    let result = call(engine_embed_vectors, enabled, r#"{"input": "a"}"#).unwrap();
    let mut bytes = [0xABu8; 64];
    bytes[..4].copy_from_slice(&16u32.to_ne_bytes());
    let out = bytes.as_mut_ptr().cast::<EmberPerRequestTimingMetrics>();
    // SAFETY: 64 writable bytes, more than the 16 declared.
    assert_eq!(unsafe { engine_get_embeddings_timing_metrics(result.handle, out) }, EmberStatus::Ok);
    assert_eq!(u32::from_ne_bytes(bytes[4..8].try_into().unwrap()), EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS);
    assert!(bytes[16..].iter().all(|&b| b == 0xAB), "nothing written past struct_size");
    let mut short = metrics_struct();
    short.struct_size = 4;
    // SAFETY: a whole struct, declared too short.
    assert_eq!(
        unsafe { engine_get_embeddings_timing_metrics(result.handle, &mut short) },
        EmberStatus::InvalidArgument
    );
    // SAFETY: NULL out is refused.
    let status = unsafe { engine_get_embeddings_timing_metrics(result.handle, ptr::null_mut()) };
    assert_eq!(status, EmberStatus::InvalidArgument);
    for engine in [enabled, plain, quiet] {
        engine_free(engine);
    }
    let _ = std::fs::remove_file(path);
}

/// NULL, freed, forged and other types' handles are statuses for every accessor; a double free does nothing.
#[test]
fn result_handles_are_checked() {
    let path = family_file("bge-small-mean", 9, "handles");
    let engine = new_engine(&format!(r#"{{"model": {path:?}, "threads": 1}}"#));
    let live = call(engine_embed_vectors, engine, r#"{"input": "a"}"#).unwrap();
    let before = live.read();
    let freed = call(engine_embed_vectors, engine, r#"{"input": "b"}"#).unwrap().handle; // freed on drop
    let forged = [0x1234_5678usize, usize::MAX, (freed as usize) ^ (1 << 40)].map(|v| v as *mut EmberEmbeddings);
    let engine_as_result = engine.cast::<EmberEmbeddings>();
    let statuses = |handle: *mut EmberEmbeddings| {
        let (mut p, mut n, mut t, mut j) = (ptr::null(), 0usize, ptr::null(), ptr::null());
        let mut m = metrics_struct();
        // SAFETY: the handle is checked by the registry, never dereferenced; the outputs are writable.
        unsafe {
            [
                engine_embeddings_floats(handle, &mut p),
                engine_embeddings_count(handle, &mut n),
                engine_embeddings_dimensions(handle, &mut n),
                engine_embeddings_input_tokens(handle, &mut t),
                engine_embeddings_json(handle, &mut j),
                engine_get_embeddings_timing_metrics(handle, &mut m),
            ]
        }
    };
    assert_eq!(statuses(ptr::null_mut()), [EmberStatus::InvalidArgument; 6]);
    for handle in forged.into_iter().chain([freed, engine_as_result]) {
        assert_eq!(statuses(handle), [EmberStatus::InvalidHandle; 6], "{handle:?}");
    }
    // NULL outputs are refused on a live handle.
    // SAFETY: NULL outputs are refused before anything is written.
    unsafe {
        assert_eq!(engine_embeddings_floats(live.handle, ptr::null_mut()), EmberStatus::InvalidArgument);
        assert_eq!(engine_embeddings_count(live.handle, ptr::null_mut()), EmberStatus::InvalidArgument);
        assert_eq!(engine_embeddings_json(live.handle, ptr::null_mut()), EmberStatus::InvalidArgument);
    }
    // Frees: NULL is a no-op, a double free and a forged handle do nothing and say so; a result handle given
    // to the other frees, or an engine handle to this one, is refused and the object lives on.
    engine_embeddings_free(ptr::null_mut());
    engine_embeddings_free(freed);
    assert!(last_error().contains("not a live embeddings handle"), "{}", last_error());
    engine_embeddings_free(forged[0]);
    engine_embeddings_free(engine_as_result);
    assert!(last_error().contains("an engine handle was passed where an embeddings handle"), "{}", last_error());
    engine_request_free(live.handle.cast::<EmberRequest>());
    engine_free(live.handle.cast::<EmberEngine>());
    assert_eq!(live.read(), before, "the result survived every wrong free");
    // The engine too: it still serves.
    assert!(call(engine_embed_vectors, engine, r#"{"input": "c"}"#).is_ok());
    // Calls with NULL arguments.
    let body = CString::new(r#"{"input": "a"}"#).unwrap();
    let mut out = ptr::null_mut();
    // SAFETY: NULL arguments are refused before anything is read or written.
    unsafe {
        assert_eq!(engine_embed_vectors(engine, body.as_ptr(), ptr::null_mut()), EmberStatus::InvalidArgument);
        assert_eq!(engine_embed_vectors(engine, ptr::null(), &mut out), EmberStatus::InvalidArgument);
        assert_eq!(engine_rerank_scores(ptr::null_mut(), body.as_ptr(), &mut out), EmberStatus::InvalidArgument);
    }
    assert!(out.is_null());
    engine_free(engine);
    assert_eq!(call(engine_embed_vectors, engine, r#"{"input": "a"}"#).err().unwrap().0, EmberStatus::InvalidHandle);
    let _ = std::fs::remove_file(path);
}
