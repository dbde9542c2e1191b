//! Embeddings and reranking through the C ABI: the body of `POST /v1/embeddings` or `POST /v1/rerank` in, and out
//! either its response body (`engine_embed`, `engine_rerank`) or a result handle holding the floats themselves
//! beside that body (`engine_embed_vectors`, `engine_rerank_scores`; `embeddings.rs`).

use std::ffi::{c_char, CString};
use std::time::Instant;

use super::args::{optional_str, Out};
use super::boundary::{boundary, Failure};
use super::embeddings::{EmbeddingsObject, EmberEmbeddings};
use super::engine::EmberEngine;
use super::registry::{to_pointer, EMBEDDINGS, ENGINES, STRINGS};
use super::status::EmberStatus;
use crate::engine::embed::Embedder;
use crate::protocol::embeddings::embeddings_answer;
use crate::protocol::encoder_answer::EncoderAnswer;
use crate::protocol::rerank::rerank_answer;
use crate::protocol::{ApiError, DEADLINE, OVERLOADED};

/// An endpoint of the embedder: the request body, arrived at the instant given, answered.
type Endpoint = fn(&Embedder, &str, &str, Instant) -> Result<EncoderAnswer, ApiError>;

/// Computes embeddings: `request_json` is the body of an OpenAI `POST /v1/embeddings` request (`input`: a string,
/// strings, token ids or lists of them; `encoding_format` `"float"` or `"base64"`; `dimensions`; ember's
/// `pooling`, `normalize`, `priority`, `deadline_ms` and `include_metrics`; `docs/embeddings.md`), and the response
/// body (`{"object": "list", "data": [...], "model", "usage"}`, and `metrics` when the engine has
/// `enable_per_request_metrics` and the request `include_metrics`) is written to `*out`. The engine's model must be
/// an encoder (`bert`, `nomic-bert`): `engine_new` on such a file starts an engine that serves embeddings only. The
/// call waits for the vectors; many threads may call at once, and their inputs share forward passes.
/// `engine_embed_vectors` gives the same vectors as contiguous floats.
///
/// Returns `EMBER_STATUS_OK`; on failure `*out` is untouched and `engine_last_error_message()` says why (naming
/// the request field at fault): `EMBER_STATUS_INVALID_REQUEST` (a malformed or refused request, or an engine whose
/// model generates text), `EMBER_STATUS_OVERLOADED` (`max_waiting_requests` requests wait already: retry later),
/// `EMBER_STATUS_TIMEOUT` (the request's `deadline_ms` passed before any of its inputs was computed),
/// `EMBER_STATUS_INVALID_HANDLE`, `EMBER_STATUS_INVALID_UTF8`, `EMBER_STATUS_INVALID_ARGUMENT` (NULL
/// `request_json` or `out`).
///
/// Thread safety: any thread. Ownership: the caller owns the string and frees it with `engine_string_free`.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_embed(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    out: *mut *mut c_char,
) -> EmberStatus {
    // SAFETY: as this function's contract says, which is `answer_body`'s.
    boundary("engine_embed", || unsafe { answer_body(engine, request_json, out, embeddings_answer) })
}

/// Reranks documents for a query: `request_json` is the body of `POST /v1/rerank` in the shape llama-server, vLLM,
/// Jina and Cohere share (`query`, `documents`: strings or `{"text"}` objects, `top_n`, `return_documents`;
/// ember's `priority`, `deadline_ms` and `include_metrics`; `docs/embeddings.md`), and the response body
/// (`{"model", "object": "list", "usage", "results": [{"index", "relevance_score", "document"}]}`, most relevant
/// first) is written to `*out`. The engine's model must be a reranker: an encoder whose file has a classification
/// head (`cls.output.weight`). Each document is scored with the query as one input, `[CLS] query [SEP] document
/// [SEP]`; `relevance_score` is the head's raw score. `engine_rerank_scores` gives every score as contiguous
/// floats, in document order.
///
/// Returns and refuses as `engine_embed` (a model without a classification head: `EMBER_STATUS_INVALID_REQUEST`).
///
/// Thread safety: any thread. Ownership: the caller owns the string and frees it with `engine_string_free`.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_rerank(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    out: *mut *mut c_char,
) -> EmberStatus {
    // SAFETY: as this function's contract says, which is `answer_body`'s.
    boundary("engine_rerank", || unsafe { answer_body(engine, request_json, out, rerank_answer) })
}

/// Computes embeddings as `engine_embed` does (the same request body, the same vectors) and writes a result handle
/// to `*out`: its floats (`engine_embeddings_floats`: `count * dimensions`, row-major, row `i` input `i`'s vector),
/// `engine_embeddings_count`, `engine_embeddings_dimensions`, each input's tokens
/// (`engine_embeddings_input_tokens`), the response body (`engine_embeddings_json`) and the timing metrics
/// (`engine_get_embeddings_timing_metrics`). `encoding_format` shapes only the body: the floats are the vectors.
///
/// Returns and refuses as `engine_embed`, and `EMBER_STATUS_TOO_MANY_HANDLES`; on failure `*out` is untouched.
///
/// Thread safety: any thread. Ownership: the caller owns the result and frees it with `engine_embeddings_free`,
/// also after `engine_free` of its engine (a result needs nothing of the engine).
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_embed_vectors(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    out: *mut *mut EmberEmbeddings,
) -> EmberStatus {
    // SAFETY: as this function's contract says, which is `answer_handle`'s.
    boundary("engine_embed_vectors", || unsafe { answer_handle(engine, request_json, out, embeddings_answer) })
}

/// Reranks documents as `engine_rerank` does (the same request body, the same scores) and writes a result handle to
/// `*out` whose floats are every document's relevance score in the request's document order (`dimensions` 1,
/// `count` the documents, whatever `top_n` keeps in the body, which is `engine_embeddings_json`); each row's
/// tokens are its query-document pair's. The accessors are `engine_embed_vectors`'.
///
/// Returns and refuses as `engine_rerank`, and `EMBER_STATUS_TOO_MANY_HANDLES`; on failure `*out` is untouched.
///
/// Thread safety: any thread. Ownership: the caller owns the result and frees it with `engine_embeddings_free`.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_rerank_scores(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    out: *mut *mut EmberEmbeddings,
) -> EmberStatus {
    // SAFETY: as this function's contract says, which is `answer_handle`'s.
    boundary("engine_rerank_scores", || unsafe { answer_handle(engine, request_json, out, rerank_answer) })
}

/// Runs `endpoint` and hands its response body to the host as a string.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
unsafe fn answer_body(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    out: *mut *mut c_char,
    endpoint: Endpoint,
) -> Result<(), Failure> {
    let out = Out::new(out, "out")?;
    // SAFETY: as this function's contract says.
    let answer = unsafe { answer(engine, request_json, endpoint) }?;
    // serde_json escapes every control character, NUL included, so JSON never contains a NUL byte.
    let text = STRINGS.give(CString::new(answer.body).expect("JSON text has no NUL byte"));
    // SAFETY: `out` is non-NULL and writable by this function's contract.
    unsafe { out.write(text) };
    Ok(())
}

/// Runs `endpoint` and hands its whole answer to the host as an embeddings handle.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
unsafe fn answer_handle(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    out: *mut *mut EmberEmbeddings,
    endpoint: Endpoint,
) -> Result<(), Failure> {
    let out = Out::new(out, "out")?;
    // SAFETY: as this function's contract says.
    let answer = unsafe { answer(engine, request_json, endpoint) }?;
    let handle = EMBEDDINGS.insert(std::sync::Arc::new(EmbeddingsObject::new(answer)))?;
    // SAFETY: `out` is non-NULL and writable by this function's contract.
    unsafe { out.write(to_pointer(handle)) };
    Ok(())
}

/// Runs `endpoint` on the engine's embedder with the request body `request_json`; its deadline counts from now.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string.
unsafe fn answer(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    endpoint: Endpoint,
) -> Result<EncoderAnswer, Failure> {
    let arrival = Instant::now();
    // SAFETY: NULL or NUL-terminated, by this function's contract.
    let json = unsafe { optional_str(request_json, "request_json") }?
        .ok_or_else(|| Failure::invalid_argument("request_json is NULL"))?;
    let object = ENGINES.get(engine.addr())?;
    object.with_embedder(|e| endpoint(e, e.name(), json, arrival))?.map_err(|e| Failure::new(status_of(&e), e.message))
}

/// The status of a refusal: its `code` says when the request itself was not at fault.
fn status_of(error: &ApiError) -> EmberStatus {
    match error.code.as_deref() {
        Some(OVERLOADED) => EmberStatus::Overloaded,
        Some(DEADLINE) => EmberStatus::Timeout,
        _ => EmberStatus::InvalidRequest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_s_code_picks_its_status() {
        let with_code = |code: &str| ApiError { code: Some(code.into()), ..ApiError::server("m") };
        assert_eq!(status_of(&with_code(OVERLOADED)), EmberStatus::Overloaded);
        assert_eq!(status_of(&with_code(DEADLINE)), EmberStatus::Timeout);
        assert_eq!(status_of(&ApiError::invalid("input", "m")), EmberStatus::InvalidRequest);
        assert_eq!(status_of(&ApiError::server("stopped")), EmberStatus::InvalidRequest);
    }
}
