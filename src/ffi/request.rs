//! Request handles: `engine_submit`, `engine_cancel`, `engine_request_free`, and what a request handle names.

use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use super::args::{required_str, Out};
use super::boundary::{boundary, Failure};
use super::engine::EmberEngine;
use super::events::delivery_kind;
use super::events::DeliveryKind;
use super::registry::{to_pointer, ENGINES, REQUESTS};
use super::status::EmberStatus;
use crate::engine::RequestHandle;
use crate::protocol::{Api, ApiRequest, OVERLOADED};

/// A submitted request: its events, its metrics, its final response. Opaque; a handle from `engine_submit`,
/// freed with `engine_request_free`.
pub struct EmberRequest {
    _opaque: [u8; 0],
}

/// What a request handle names.
pub(super) struct RequestObject {
    /// The value of the engine handle the request was submitted to: `engine_poll` refuses other engines.
    pub engine: usize,
    /// The engine's side of the request (events, metrics, cancellation), used without taking `api`'s lock so
    /// that a thread blocked in `engine_next_chunk_json` never delays a poll or a metrics read.
    pub handle: RequestHandle,
    /// The OpenAI view of the request: its response and stream chunks.
    pub api: Mutex<ApiRequest>,
    /// Set by `engine_request_free`, so that a call that was waiting when the request was freed reports the
    /// handle as invalid instead of handing out memory that is about to be released.
    freed: AtomicBool,
    /// The text of the last event each thread polled, NUL-terminated: what `EmberEvent.text` points to, kept
    /// until that thread polls this request again or the request is freed. Per thread, so that threads polling
    /// one request concurrently never invalidate each other's text.
    pub poll_text: Mutex<Vec<(ThreadId, String)>>,
    /// Where its events go when it was submitted with `engine_submit_with_user_data`; `None` for `engine_submit`.
    pub delivery: Option<Delivery>,
    /// `EMBER_DELIVERY_CHUNKS`: its `STREAM_DONE` record has been written (it is written once).
    stream_done: AtomicBool,
    /// The request's warnings as a JSON array of strings (`engine_request_warnings_json`), fixed at submission
    /// and kept apart from `api` so that reading them never waits on a thread reading chunks.
    pub warnings_json: String,
}

/// A request's delivery to its engine's waiting point (`events.rs`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Delivery {
    pub user_data: u64,
    pub kind: DeliveryKind,
}

impl RequestObject {
    pub fn is_freed(&self) -> bool {
        self.freed.load(Ordering::Acquire)
    }

    pub fn stream_done_delivered(&self) -> bool {
        self.stream_done.load(Ordering::Acquire)
    }

    pub fn set_stream_done_delivered(&self) {
        self.stream_done.store(true, Ordering::Release);
    }
}

/// The live request `request`, checked to belong to the live engine `engine`.
pub(super) fn request_of_engine(
    engine: *const EmberEngine,
    request: *const EmberRequest,
) -> Result<Arc<RequestObject>, Failure> {
    ENGINES.get(engine.addr())?;
    let object = REQUESTS.get(request.addr())?;
    if object.engine != engine.addr() {
        return Err(Failure::invalid_handle("the request was submitted to another engine"));
    }
    Ok(object)
}

/// Submits an OpenAI request body and returns at once; the engine works on it in the background.
///
/// `request_json` is a Chat Completions body (it has `messages`) or a Completions body (it has `prompt`);
/// both or neither is an error. `stream: true` makes it a streaming request, whose chunks
/// `engine_next_chunk_json` returns; any request's text can be read with `engine_poll` instead, and its final
/// body with `engine_response_json`. See `docs/c_api.md` for the fields.
///
/// Returns `EMBER_STATUS_OK` and writes the new request handle to `*out`; on failure `*out` is untouched:
/// `EMBER_STATUS_INVALID_REQUEST` (the request was refused; `engine_last_error_message()` is the OpenAI error
/// JSON, naming the field at fault), `EMBER_STATUS_OVERLOADED` (`max_waiting_requests` requests already wait
/// to start: nothing was queued, retry later; the message is an OpenAI error body with `code` `"overloaded"`),
/// `EMBER_STATUS_INVALID_HANDLE` (engine freed or not an engine),
/// `EMBER_STATUS_INVALID_UTF8`, `EMBER_STATUS_INVALID_ARGUMENT` (a NULL argument),
/// `EMBER_STATUS_TOO_MANY_HANDLES`.
///
/// Thread safety: any thread, concurrently with any other call. Ownership: the caller owns the request handle
/// and frees it with `engine_request_free`, also after `engine_free` of its engine.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_submit(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    out: *mut *mut EmberRequest,
) -> EmberStatus {
    boundary("engine_submit", || {
        // SAFETY: as this function's contract says, which is `submit`'s.
        unsafe { submit(engine, request_json, Api::OpenAi, None, out) }
    })
}

/// `api` of `engine_submit_api`: an OpenAI Chat Completions or Completions body, told apart by its fields
/// (`messages` or `prompt`), as `engine_submit` reads it.
pub const EMBER_API_OPENAI: u32 = 0;
/// `api`: an OpenAI Chat Completions body (`POST /v1/chat/completions`).
pub const EMBER_API_CHAT_COMPLETIONS: u32 = 1;
/// `api`: an OpenAI Completions body (`POST /v1/completions`).
pub const EMBER_API_COMPLETIONS: u32 = 2;
/// `api`: an OpenAI Responses body (`POST /v1/responses`). Chunks are Responses stream events.
pub const EMBER_API_RESPONSES: u32 = 3;
/// `api`: an Anthropic Messages body (`POST /v1/messages`). Chunks are Messages stream events.
pub const EMBER_API_ANTHROPIC_MESSAGES: u32 = 4;
/// `api`: an Ollama chat body (`POST /api/chat`). Chunks are its NDJSON objects.
pub const EMBER_API_OLLAMA_CHAT: u32 = 5;
/// `api`: an Ollama generate body (`POST /api/generate`). Chunks are its NDJSON objects.
pub const EMBER_API_OLLAMA_GENERATE: u32 = 6;
/// `api`: a llama-server completion body (`POST /completion`). Chunks are its stream objects.
pub const EMBER_API_LLAMA_COMPLETION: u32 = 7;

/// `delivery` of `engine_submit_api`: the request's events stay with it, read by `engine_poll` or
/// `engine_next_chunk_json` (as after `engine_submit`).
pub const EMBER_DELIVERY_POLL: u32 = 0;

/// Submits a request body of the API `api` (`EMBER_API_*`) and returns at once, as `engine_submit`.
///
/// Every API is served by the same engine request: its fields are read into the Chat Completions or Completions
/// request they stand for, and its answers are written in its own shape. `engine_response_json` gives the API's
/// whole response body; `engine_next_chunk_json` (and `EMBER_DELIVERY_CHUNKS` records) its stream chunks, one
/// JSON object each, which the host frames as the API does (`docs/c_api.md`, "Other APIs"): OpenAI's as
/// `data: {chunk}` then `data: [DONE]`; Responses' and Anthropic's as `event: {type}` and `data: {chunk}`, where
/// `type` is the chunk's first member; llama-server's as `data: {chunk}`; Ollama's as a line each. `engine_poll`
/// gives plain text deltas for any API. A refusal's `engine_last_error_message()` is an OpenAI error body
/// naming the field as the request's API names it; the host reshapes it for its API's clients.
///
/// `delivery` is `EMBER_DELIVERY_POLL` (the events stay with the request) or, with `user_data`, one of
/// `engine_submit_with_user_data`'s.
///
/// Returns what `engine_submit_with_user_data` returns; `EMBER_STATUS_INVALID_ARGUMENT` also for an unknown
/// `api`. Thread safety and ownership: as `engine_submit`.
///
/// # Safety
/// As `engine_submit`.
#[no_mangle]
pub unsafe extern "C" fn engine_submit_api(
    engine: *mut EmberEngine,
    api: u32,
    request_json: *const c_char,
    user_data: u64,
    delivery: u32,
    out: *mut *mut EmberRequest,
) -> EmberStatus {
    boundary("engine_submit_api", || {
        let Some(which) = Api::from_code(api) else {
            return Err(Failure::invalid_argument(format!("api = {api} is not an EMBER_API_* value")));
        };
        let delivery = match delivery {
            EMBER_DELIVERY_POLL => None,
            other => Some(Delivery { user_data, kind: delivery_kind(other)? }),
        };
        // SAFETY: as this function's contract says, which is `submit`'s.
        unsafe { submit(engine, request_json, which, delivery, out) }
    })
}

/// `engine_submit`, and with `delivery` `engine_submit_with_user_data`: the request's events then go to its
/// engine's waiting point.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
pub(super) unsafe fn submit(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    api: Api,
    delivery: Option<Delivery>,
    out: *mut *mut EmberRequest,
) -> Result<(), Failure> {
    let out = Out::new(out, "out")?;
    // SAFETY: NULL or NUL-terminated, by this function's contract.
    let json = unsafe { required_str(request_json, "request_json") }?;
    let engine_object = ENGINES.get(engine.addr())?;
    let api = engine_object.with_engine(|e| ApiRequest::submit_api(e, json, api, &engine_object.responses))?.map_err(
        |e| {
            let status = match e.code.as_deref() {
                Some(OVERLOADED) => EmberStatus::Overloaded,
                _ => EmberStatus::InvalidRequest,
            };
            Failure::verbatim(status, e.to_json())
        },
    )?;
    let handle = api.handle().clone();
    let warnings_json = serde_json::to_string(api.warnings()).unwrap_or_else(|_| "[]".to_owned());
    let object = RequestObject {
        warnings_json,
        engine: engine.addr(),
        handle: handle.clone(),
        api: Mutex::new(api),
        freed: AtomicBool::new(false),
        poll_text: Mutex::new(Vec::new()),
        delivery,
        stream_done: AtomicBool::new(false),
    };
    let id = REQUESTS.insert(Arc::new(object)).inspect_err(|_| handle.cancel())?;
    if delivery.is_some() {
        // Events already queued count: the key is queued at once if any wait.
        handle.watch(&engine_object.events, id as u64);
    }
    // SAFETY: `out` is non-NULL and writable by this function's contract.
    unsafe { out.write(to_pointer(id)) };
    Ok(())
}

/// Asks the engine to stop a request. Its unfinished choices end with `EMBER_FINISH_REASON_CANCELLED` (a poll
/// then answers that), choices already finished keep their reason; text already generated stays readable.
/// Idempotent; cancelling a finished request does nothing.
///
/// Returns `EMBER_STATUS_OK`, or `EMBER_STATUS_INVALID_HANDLE` / `EMBER_STATUS_INVALID_ARGUMENT` (NULL).
/// Thread safety: any thread, concurrently with polls of the same request.
#[no_mangle]
pub extern "C" fn engine_cancel(request: *mut EmberRequest) -> EmberStatus {
    boundary("engine_cancel", || {
        REQUESTS.get(request.addr())?.handle.cancel();
        Ok(())
    })
}

/// Frees a request: cancels it if it is still running and releases its memory, including the text of its last
/// polled events and its metrics. NULL is a no-op. A freed, stale or foreign handle (a double free) does nothing
/// and leaves the reason in `engine_last_error_message()`.
///
/// Thread safety: any thread. A call on this request blocked in another thread (`engine_poll` with a timeout)
/// returns promptly, with `EMBER_STATUS_INVALID_HANDLE`; text pointers obtained from its events become
/// invalid.
#[no_mangle]
pub extern "C" fn engine_request_free(request: *mut EmberRequest) {
    let _ = boundary("engine_request_free", || {
        if request.is_null() {
            return Ok(());
        }
        let object = REQUESTS.remove(request.addr())?;
        object.freed.store(true, Ordering::Release);
        // Cancelling wakes a thread blocked in a poll of this request (its choices finish as cancelled), and
        // tells the engine to stop spending steps on it.
        if !object.handle.is_finished() {
            object.handle.cancel();
        }
        Ok(())
    });
}
