//! Embeddings and reranking through the C ABI: `engine_embed` and `engine_rerank`, the body of `POST
//! /v1/embeddings` or `POST /v1/rerank` in, its response body out.

use std::ffi::{c_char, CString};

use super::args::{optional_str, Out};
use super::boundary::{boundary, Failure};
use super::engine::EmberEngine;
use super::registry::{ENGINES, STRINGS};
use super::status::EmberStatus;
use crate::engine::embed::Embedder;
use crate::protocol::embeddings::embeddings_json;
use crate::protocol::rerank::rerank_json;
use crate::protocol::{ApiError, OVERLOADED};

/// Computes embeddings: `request_json` is the body of an OpenAI `POST /v1/embeddings` request (`input`: a string,
/// strings, token ids or lists of them; `encoding_format` `"float"` or `"base64"`; `dimensions`; ember's
/// `pooling`, `normalize` and `priority`; `docs/embeddings.md`), and the response body (`{"object": "list",
/// "data": [...], "model", "usage"}`) is written to `*out`. The engine's model must be an encoder (`bert`,
/// `nomic-bert`): `engine_new` on such a file starts an engine that serves embeddings only. The call waits for
/// the vectors; many threads may call at once, and their inputs share forward passes.
///
/// Returns `EMBER_STATUS_OK`; on failure `*out` is untouched and `engine_last_error_message()` says why (naming
/// the request field at fault): `EMBER_STATUS_INVALID_REQUEST` (a malformed or refused request, or an engine whose
/// model generates text), `EMBER_STATUS_OVERLOADED` (`max_waiting_requests` requests wait already: retry later),
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
    // SAFETY: as this function's contract says, which is `answer`'s.
    boundary("engine_embed", || unsafe { answer(engine, request_json, out, embeddings_json) })
}

/// Reranks documents for a query: `request_json` is the body of `POST /v1/rerank` in the shape llama-server, vLLM,
/// Jina and Cohere share (`query`, `documents`: strings or `{"text"}` objects, `top_n`, `return_documents`;
/// `docs/embeddings.md`), and the response body (`{"model", "object": "list", "usage", "results": [{"index",
/// "relevance_score", "document"}]}`, most relevant first) is written to `*out`. The engine's model must be a
/// reranker: an encoder whose file has a classification head (`cls.output.weight`). Each document is scored with
/// the query as one input, `[CLS] query [SEP] document [SEP]`; `relevance_score` is the head's raw score.
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
    // SAFETY: as this function's contract says, which is `answer`'s.
    boundary("engine_rerank", || unsafe { answer(engine, request_json, out, rerank_json) })
}

/// Runs `endpoint` on the engine's embedder with the request body `request_json` and hands the response body to
/// the host.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
unsafe fn answer(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    out: *mut *mut c_char,
    endpoint: fn(&Embedder, &str, &str) -> Result<String, ApiError>,
) -> Result<(), Failure> {
    let out = Out::new(out, "out")?;
    // SAFETY: NULL or NUL-terminated, by this function's contract.
    let json = unsafe { optional_str(request_json, "request_json") }?
        .ok_or_else(|| Failure::invalid_argument("request_json is NULL"))?;
    let object = ENGINES.get(engine.addr())?;
    let body = object.with_embedder(|e| endpoint(e, e.name(), json))?.map_err(|e| {
        let status = match e.code.as_deref() {
            Some(OVERLOADED) => EmberStatus::Overloaded,
            _ => EmberStatus::InvalidRequest,
        };
        Failure::new(status, e.message)
    })?;
    // serde_json escapes every control character, NUL included, so JSON never contains a NUL byte.
    let text = STRINGS.give(CString::new(body).expect("JSON text has no NUL byte"));
    // SAFETY: `out` is non-NULL and writable by this function's contract.
    unsafe { out.write(text) };
    Ok(())
}
