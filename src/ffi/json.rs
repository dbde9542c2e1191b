//! OpenAI JSON out: `engine_response_json` (the whole body), `engine_next_chunk_json` (streaming chunks), and
//! `engine_string_free` for the strings they allocate.

use std::ffi::{c_char, CString};

use super::args::{self, Out};
use super::boundary::{boundary, Failure};
use super::engine::EmberEngine;
use super::registry::{REQUESTS, STRINGS};
use super::request::{request_of_engine, EmberRequest};
use super::status::EmberStatus;
use crate::protocol::ChunkPoll;

/// Hands `json` to the host as a NUL-terminated string it frees with `engine_string_free`.
fn give_string(json: String) -> *mut c_char {
    // serde_json escapes every control character, NUL included, so JSON never contains a NUL byte.
    STRINGS.give(CString::new(json).expect("JSON text has no NUL byte"))
}

/// Writes the request's warnings to `*out`: a JSON array of strings, one per field accepted although it has no
/// effect on this model (`verbosity`; `reasoning_effort` on a chat template without a reasoning setting), each
/// saying why; `[]` for none. A host passes them on to its client (the gateway's `Warning` headers). Fixed at
/// submission: any time after `engine_submit*`.
///
/// Returns `EMBER_STATUS_OK`, `EMBER_STATUS_INVALID_HANDLE`, or `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`).
/// Thread safety: any thread, never waiting on another. Ownership: the caller frees the string with
/// `engine_string_free`.
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_request_warnings_json(
    request: *const EmberRequest,
    out: *mut *mut c_char,
) -> EmberStatus {
    boundary("engine_request_warnings_json", || {
        let out = Out::new(out, "out")?;
        let object = REQUESTS.get(request.addr())?;
        let json = give_string(object.warnings_json.clone());
        // SAFETY: `out` is non-NULL and writable by this function's contract.
        unsafe { out.write(json) };
        Ok(())
    })
}

/// Writes the whole OpenAI response body of a finished request (`chat.completion` or `text_completion`, with
/// `usage` and, when enabled and asked for, `metrics`) to `*out`. A request the engine failed still has a body
/// (its choices end with `"finish_reason": "error"` and an `error` object says why); a cancelled one too.
///
/// Returns `EMBER_STATUS_OK`; on failure `*out` is untouched: `EMBER_STATUS_NOT_FINISHED` (the request is
/// still running: poll it to its end, or cancel it), `EMBER_STATUS_INVALID_HANDLE`,
/// `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`).
///
/// Thread safety: any thread; waits while another thread is inside `engine_next_chunk_json` for this request.
/// Ownership: the caller owns the string (NUL-terminated UTF-8) and frees it with `engine_string_free`.
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_response_json(request: *const EmberRequest, out: *mut *mut c_char) -> EmberStatus {
    boundary("engine_response_json", || {
        let out = Out::new(out, "out")?;
        let object = REQUESTS.get(request.addr())?;
        let body = object.api.lock().unwrap_or_else(|e| e.into_inner()).response_json();
        let body = body.ok_or_else(|| Failure::new(EmberStatus::NotFinished, "the request is still running"))?;
        // SAFETY: `out` is non-NULL and writable by this function's contract.
        unsafe { out.write(give_string(body)) };
        Ok(())
    })
}

/// Takes the next streaming chunk body of a request (`chat.completion.chunk` or `text_completion` JSON, without
/// the `data: ` framing of server-sent events), waiting up to `timeout_ms` milliseconds (0: do not wait; -1: no
/// limit). Works for any request; it is what a `"stream": true` client expects. The stream's last body may be
/// a usage chunk, or an `{"error": ...}` body when the engine failed the request.
///
/// Returns `EMBER_STATUS_OK` and writes the chunk to `*out`; on failure `*out` is untouched:
/// `EMBER_STATUS_STREAM_DONE` (every chunk has been returned: send `data: [DONE]`; later calls answer this
/// again), `EMBER_STATUS_TIMEOUT`, `EMBER_STATUS_INVALID_HANDLE` (engine or request not live, request of
/// another engine, or freed while this call waited), `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`, bad timeout).
///
/// Thread safety: any thread; calls for one request are serialized. Do not mix with `engine_poll` on one
/// request: both take its events. Ownership: the caller owns the string and frees it with `engine_string_free`.
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_next_chunk_json(
    engine: *mut EmberEngine,
    request: *mut EmberRequest,
    timeout_ms: i32,
    out: *mut *mut c_char,
) -> EmberStatus {
    boundary("engine_next_chunk_json", || {
        let out = Out::new(out, "out")?;
        let timeout = args::timeout(timeout_ms)?;
        let object = request_of_engine(engine, request)?;
        let next = object.api.lock().unwrap_or_else(|e| e.into_inner()).next_chunk_json(timeout);
        if object.is_freed() {
            return Err(Failure::invalid_handle("the request was freed while this call waited"));
        }
        match next {
            ChunkPoll::Chunk(body) => {
                // SAFETY: `out` is non-NULL and writable by this function's contract.
                unsafe { out.write(give_string(body)) };
                Ok(())
            }
            ChunkPoll::Done => Err(Failure::new(EmberStatus::StreamDone, "the stream has ended")),
            ChunkPoll::TimedOut => Err(Failure::new(EmberStatus::Timeout, format!("no chunk within {timeout_ms} ms"))),
        }
    })
}

/// Frees a string returned by `engine_response_json` or `engine_next_chunk_json`. NULL is a no-op. A pointer
/// ember did not hand out, or one already freed, is left alone and reported in `engine_last_error_message()`.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn engine_string_free(string: *mut c_char) {
    let _ = boundary("engine_string_free", || {
        if string.is_null() {
            return Ok(());
        }
        if !STRINGS.free(string) {
            return Err(Failure::invalid_handle("not a string from ember, or already freed"));
        }
        Ok(())
    });
}
