//! Embeddings handles (`EmberEmbeddings`): the result of `engine_embed_vectors` or `engine_rerank_scores`, read in
//! place through its accessors and freed with `engine_embeddings_free`.
//!
//! A result never changes once made, so the accessors hand out pointers into it (no copy, nothing for the host to
//! free), valid until the handle is freed; the handle itself is checked like every other (`registry.rs`).

use std::ffi::{c_char, CString};

use super::args::Out;
use super::boundary::{boundary, Failure};
use super::metrics::{timing_to_c, EmberPerRequestTimingMetrics};
use super::registry::EMBEDDINGS;
use super::status::EmberStatus;
use super::versioned::{declared_size, write_within};
use crate::protocol::encoder_answer::EncoderAnswer;

/// The result of one embeddings or rerank call: `count` rows of `dimensions` floats, each input's token count,
/// the response body (JSON) and the request's timing metrics. Opaque; a handle from `engine_embed_vectors` or
/// `engine_rerank_scores`, freed with `engine_embeddings_free`.
pub struct EmberEmbeddings {
    _opaque: [u8; 0],
}

/// What an embeddings handle names.
pub(super) struct EmbeddingsObject {
    answer: EncoderAnswer,
    /// `answer.input_tokens` as the C array hands them out.
    input_tokens: Vec<u32>,
    /// `answer.body`, NUL-terminated for the host to read in place.
    body: CString,
}

impl EmbeddingsObject {
    pub fn new(mut answer: EncoderAnswer) -> Self {
        // An input's tokens are bounded by the model's positions, far below 2^32.
        let input_tokens = answer.input_tokens.iter().map(|&n| u32::try_from(n).unwrap_or(u32::MAX)).collect();
        // serde_json escapes every control character, NUL included, so JSON never contains a NUL byte.
        let body = CString::new(std::mem::take(&mut answer.body)).expect("JSON text has no NUL byte");
        EmbeddingsObject { answer, input_tokens, body }
    }
}

/// The body of every plain accessor: checks `out` and the handle, then writes what `pick` reads of the result.
///
/// # Safety
/// `out` is NULL or points to writable storage for a `T`.
unsafe fn read<T: Copy>(
    embeddings: *const EmberEmbeddings,
    out: *mut T,
    pick: impl FnOnce(&EmbeddingsObject) -> T,
) -> Result<(), Failure> {
    let out = Out::new(out, "out")?;
    let object = EMBEDDINGS.get(embeddings.addr())?;
    // SAFETY: `out` is non-NULL and writable by this function's contract.
    unsafe { out.write(pick(&object)) };
    Ok(())
}

/// Writes a pointer to the result's floats to `*out`: `count * dimensions` floats, row-major. Row `i` is input
/// `i`'s vector (`engine_embed_vectors`: as the body has it, after `dimensions` and `normalize`) or document `i`'s
/// relevance score (`engine_rerank_scores`: one float per row, in the request's document order).
///
/// Returns `EMBER_STATUS_OK`; on failure `*out` is untouched: `EMBER_STATUS_INVALID_HANDLE` (freed, or not an
/// embeddings handle), `EMBER_STATUS_INVALID_ARGUMENT` (NULL `embeddings` or `out`).
///
/// Thread safety: any thread. Ownership: the floats belong to the result and stay valid and unchanged until
/// `engine_embeddings_free`; do not write or free them.
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_embeddings_floats(
    embeddings: *const EmberEmbeddings,
    out: *mut *const f32,
) -> EmberStatus {
    // SAFETY: this function's contract is `read`'s.
    boundary("engine_embeddings_floats", || unsafe { read(embeddings, out, |o| o.answer.floats.as_ptr()) })
}

/// Writes the number of rows to `*out`: the request's inputs (`engine_embed_vectors`) or documents
/// (`engine_rerank_scores`); at least 1.
///
/// Returns and refuses as `engine_embeddings_floats`. Thread safety: any thread.
///
/// # Safety
/// `out` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn engine_embeddings_count(embeddings: *const EmberEmbeddings, out: *mut usize) -> EmberStatus {
    // SAFETY: this function's contract is `read`'s.
    boundary("engine_embeddings_count", || unsafe { read(embeddings, out, |o| o.answer.count()) })
}

/// Writes the floats per row to `*out`: the vectors' width (the model's, or the request's `dimensions`), or 1 for
/// rerank scores.
///
/// Returns and refuses as `engine_embeddings_floats`. Thread safety: any thread.
///
/// # Safety
/// `out` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn engine_embeddings_dimensions(
    embeddings: *const EmberEmbeddings,
    out: *mut usize,
) -> EmberStatus {
    // SAFETY: this function's contract is `read`'s.
    boundary("engine_embeddings_dimensions", || unsafe { read(embeddings, out, |o| o.answer.dimensions) })
}

/// Writes a pointer to each row's token count to `*out`: `count` values, in row order (a rerank row's input is the
/// query-document pair); the body's `usage.prompt_tokens_per_input`, whose sum is `usage.prompt_tokens`.
///
/// Returns and refuses as `engine_embeddings_floats`. Thread safety: any thread. Ownership: as the floats'.
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_embeddings_input_tokens(
    embeddings: *const EmberEmbeddings,
    out: *mut *const u32,
) -> EmberStatus {
    // SAFETY: this function's contract is `read`'s.
    boundary("engine_embeddings_input_tokens", || unsafe { read(embeddings, out, |o| o.input_tokens.as_ptr()) })
}

/// Writes a pointer to the response body to `*out`: NUL-terminated UTF-8, the JSON `engine_embed` or
/// `engine_rerank` would have returned for the same request (the same numbers as the floats; `top_n`,
/// `return_documents` and `encoding_format` shape the body only).
///
/// Returns and refuses as `engine_embeddings_floats`. Thread safety: any thread. Ownership: the text belongs to
/// the result, valid until `engine_embeddings_free`; do not pass it to `engine_string_free` (which refuses it).
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_embeddings_json(
    embeddings: *const EmberEmbeddings,
    out: *mut *const c_char,
) -> EmberStatus {
    // SAFETY: this function's contract is `read`'s.
    boundary("engine_embeddings_json", || unsafe { read(embeddings, out, |o| o.body.as_ptr()) })
}

/// Writes the request's five timing metrics into `*out`, as far as `out->struct_size` (set by the caller, at least
/// 8) reaches, as `engine_get_timing_metrics` does for a chat request. For embeddings and reranking
/// (`docs/per_request_metrics.md`, "Embeddings and reranking"): `time_to_first_token_ms` is the time to the
/// vectors from the first batch holding one of the request's inputs, `queue_time_ms` the wait before it, and
/// `tokens_per_second` the input tokens per second of that time; `generation_time_ms` and `mean_itl_ms` are
/// always absent (nothing is generated). Every field is absent when the engine records no stats
/// (`disable_log_stats`); the request's `include_metrics` does not matter here.
///
/// Returns `EMBER_STATUS_OK`; on failure nothing is written: `EMBER_STATUS_INVALID_HANDLE`,
/// `EMBER_STATUS_INVALID_ARGUMENT` (NULL `embeddings` or `out`, `struct_size` < 8).
///
/// Thread safety: any thread; allocates nothing.
///
/// # Safety
/// `out` is NULL or points to `out->struct_size` writable bytes whose first 4 hold `struct_size`.
#[no_mangle]
pub unsafe extern "C" fn engine_get_embeddings_timing_metrics(
    embeddings: *const EmberEmbeddings,
    out: *mut EmberPerRequestTimingMetrics,
) -> EmberStatus {
    boundary("engine_get_embeddings_timing_metrics", || {
        if out.is_null() {
            return Err(Failure::invalid_argument("out is NULL"));
        }
        // SAFETY: non-NULL; readable by this function's contract.
        let declared = unsafe { declared_size(out) }?;
        let object = EMBEDDINGS.get(embeddings.addr())?;
        // SAFETY: `declared` bytes at `out` are writable by this function's contract.
        unsafe { write_within(out, timing_to_c(object.answer.metrics), declared) };
        Ok(())
    })
}

/// Frees a result and everything its accessors pointed to. NULL is a no-op. A freed, stale or foreign handle (a
/// double free) does nothing and leaves the reason in `engine_last_error_message()`.
///
/// Thread safety: any thread; pointers obtained from the result by any thread are invalid afterwards.
#[no_mangle]
pub extern "C" fn engine_embeddings_free(embeddings: *mut EmberEmbeddings) {
    let _ = boundary("engine_embeddings_free", || {
        if embeddings.is_null() {
            return Ok(());
        }
        EMBEDDINGS.remove(embeddings.addr())?;
        Ok(())
    });
}
