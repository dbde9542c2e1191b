//! `engine_poll`: a request's events (text deltas, finishes, errors, prompt progress) as C structs.

use std::ffi::c_char;
use std::thread;

use super::args::{self, Out};
use super::boundary::{boundary, Failure};
use super::engine::EmberEngine;
use super::request::{request_of_engine, EmberRequest, RequestObject};
use super::status::EmberStatus;
use crate::engine::{EventPoll, FinishReason, RequestEvent};
use crate::protocol::prompt_progress_json;

/// What an `EmberEvent` reports.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmberEventKind {
    /// New text of choice `choice`: `text`/`text_len`, covering `num_tokens` generated tokens.
    Delta = 1,
    /// Choice `choice` ended, for `finish_reason`. One per choice; the last choice's is the request's final
    /// event, after which `engine_poll` answers `EMBER_STATUS_STREAM_DONE`.
    Finished = 2,
    /// The request failed; `text`/`text_len` is the message. The request's final event: its unfinished choices
    /// end with `EMBER_FINISH_REASON_ERROR` (no `FINISHED` comes for them), and `engine_poll` answers
    /// `EMBER_STATUS_STREAM_DONE` next. The message stays in `engine_response_json`'s `error` object.
    Error = 3,
    /// `engine_wait_events` only, for a request submitted with `EMBER_DELIVERY_CHUNKS`: `text`/`text_len` is its
    /// next streaming chunk body (what `engine_next_chunk_json` returns).
    Chunk = 4,
    /// `engine_wait_events` only, for a request submitted with `EMBER_DELIVERY_CHUNKS`: its stream has ended
    /// (send `data: [DONE]`); its last record.
    StreamDone = 5,
    /// Only for a request with `"return_progress": true`, before choice `choice`'s first token: how far its prompt
    /// has been computed (`choice` is the first choice of its prompt). `text`/`text_len` is llama-server's
    /// `prompt_progress` object, `{"total":T,"cache":C,"processed":P,"time_ms":M}` (prompt tokens, those the
    /// prefix cache supplied, those computed so far including the cached ones, milliseconds since the prompt
    /// began); `num_tokens` is `P`. One when the prompt is admitted (`P` = `C`), then one per chunk the engine
    /// computes, the last with `P` = `T`.
    PromptProgress = 6,
}

/// Why a choice ended.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmberFinishReason {
    /// Not a `FINISHED` event.
    None = 0,
    /// An end-of-generation token, a stop token id or a stop string (OpenAI's "stop").
    Stop = 1,
    /// `max_tokens` reached, or the context is full (OpenAI's "length").
    Length = 2,
    /// Cancelled by `engine_cancel`, `engine_request_free` or `engine_free`.
    Cancelled = 3,
    /// The engine could not continue the request.
    Error = 4,
    /// The request's `deadline_ms` passed (it had waited, or generated, that long); its output so far stands.
    Deadline = 5,
}

impl From<FinishReason> for EmberFinishReason {
    fn from(reason: FinishReason) -> Self {
        match reason {
            FinishReason::Stop => EmberFinishReason::Stop,
            FinishReason::Length => EmberFinishReason::Length,
            FinishReason::Cancelled => EmberFinishReason::Cancelled,
            FinishReason::Error => EmberFinishReason::Error,
            FinishReason::Deadline => EmberFinishReason::Deadline,
        }
    }
}

/// One event of a request, written by `engine_poll`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EmberEvent {
    /// Which of delta, finished, error or prompt progress this event is; it says which other fields are meaningful.
    pub kind: EmberEventKind,
    /// The choice the event is about (0 for single-choice requests and for `ERROR`).
    pub choice: u32,
    /// `DELTA`: the new text; `ERROR`: the message; `PROMPT_PROGRESS`: the `prompt_progress` JSON object;
    /// `FINISHED`: NULL. UTF-8 (never a partial character),
    /// `text_len` bytes, followed by a NUL byte for convenience (the text itself may contain NUL bytes:
    /// `text_len` is authoritative). Owned by ember: valid until this thread polls this request again, or the
    /// request is freed.
    pub text: *const c_char,
    /// Bytes of `text`, the NUL excluded.
    pub text_len: usize,
    /// `DELTA`: how many generated tokens the text covers (a token may produce no text on its own);
    /// `PROMPT_PROGRESS`: the prompt tokens processed so far (the object's `processed`); otherwise 0.
    pub num_tokens: u32,
    /// `FINISHED`: why the choice ended; otherwise `EMBER_FINISH_REASON_NONE`.
    pub finish_reason: EmberFinishReason,
}

/// Takes the next event of a request, waiting up to `timeout_ms` milliseconds for one (0: do not wait; -1: wait
/// until one comes; other negative values are invalid). Consecutive deltas of one choice are merged.
///
/// A request's events are its text deltas and one `FINISHED` per choice, or, when the engine fails it, one
/// `ERROR` instead of the `FINISHED`s still to come; with `"return_progress": true`, `PROMPT_PROGRESS` events
/// before a prompt's first token. The final event (the last choice's `FINISHED`, or the
/// `ERROR`) is returned once; every later call returns `EMBER_STATUS_STREAM_DONE` at once, without waiting,
/// whatever `timeout_ms`: poll until that status, as `engine_next_chunk_json` is read.
///
/// Returns `EMBER_STATUS_OK` and writes the event to `*out`; on any other status `*out` is untouched:
/// `EMBER_STATUS_STREAM_DONE` (the final event has been returned: not an error), `EMBER_STATUS_TIMEOUT`
/// (nothing happened in time), `EMBER_STATUS_INVALID_HANDLE` (engine or request not live, the request belongs
/// to another engine, or it was freed while this call waited), `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`,
/// bad timeout).
///
/// Thread safety: any thread. Several threads may poll one request at once: each event goes to exactly one of
/// them (the final event too: the others get `EMBER_STATUS_STREAM_DONE`), and each thread's `text` stays valid
/// until that thread's own next poll of the request. Freeing the request or the engine wakes a waiting poll. Do
/// not mix `engine_poll` and `engine_next_chunk_json` on one request: both take its events.
///
/// # Safety
/// `out` is NULL or points to writable storage for an `EmberEvent`.
#[no_mangle]
pub unsafe extern "C" fn engine_poll(
    engine: *mut EmberEngine,
    request: *mut EmberRequest,
    timeout_ms: i32,
    out: *mut EmberEvent,
) -> EmberStatus {
    boundary("engine_poll", || {
        let out = Out::new(out, "out")?;
        let timeout = args::timeout(timeout_ms)?;
        let object = request_of_engine(engine, request)?;
        let next = object.handle.poll(timeout);
        if object.is_freed() {
            return Err(Failure::invalid_handle("the request was freed while this call waited"));
        }
        match next {
            EventPoll::Event(event) => {
                let event = to_c_event(event, |text| keep_for_this_thread(&object, text));
                // SAFETY: `out` is non-NULL and writable by this function's contract.
                unsafe { out.write(event) };
                Ok(())
            }
            EventPoll::Done => Err(Failure::new(EmberStatus::StreamDone, "the final event has been returned")),
            EventPoll::TimedOut => Err(Failure::new(EmberStatus::Timeout, format!("no event within {timeout_ms} ms"))),
        }
    })
}

/// The C form of `event`; `keep` keeps its text where the event's reader finds it, and says where that is.
pub(super) fn to_c_event(event: RequestEvent, mut keep: impl FnMut(String) -> (*const c_char, usize)) -> EmberEvent {
    let (kind, choice, text, num_tokens, finish_reason) = match event {
        RequestEvent::Delta { choice, text, tokens, .. } => {
            (EmberEventKind::Delta, choice, Some(text), tokens, EmberFinishReason::None)
        }
        RequestEvent::Finished { choice, reason } => (EmberEventKind::Finished, choice, None, 0, reason.into()),
        RequestEvent::Error { message } => (EmberEventKind::Error, 0, Some(message), 0, EmberFinishReason::None),
        RequestEvent::PromptProgress { choice, progress } => {
            let json = prompt_progress_json(progress);
            (EmberEventKind::PromptProgress, choice, Some(json), progress.processed, EmberFinishReason::None)
        }
    };
    let (text, text_len) = match text {
        Some(text) => keep(text),
        None => (std::ptr::null(), 0),
    };
    // Choice indices are below MAX_CHOICES (128), validated at submission.
    EmberEvent { kind, choice: choice as u32, text, text_len, num_tokens, finish_reason }
}

/// Stores `text` (NUL-terminated) as this thread's last polled text of `object`, replacing the previous one,
/// and returns where it lives and its length without the NUL.
fn keep_for_this_thread(object: &RequestObject, mut text: String) -> (*const c_char, usize) {
    let len = text.len();
    text.push('\0');
    let me = thread::current().id();
    let mut texts = object.poll_text.lock().unwrap_or_else(|e| e.into_inner());
    let slot = match texts.iter().position(|(thread, _)| *thread == me) {
        Some(i) => &mut texts[i].1,
        None => {
            texts.push((me, String::new()));
            &mut texts.last_mut().expect("just pushed").1
        }
    };
    *slot = text;
    // The String's heap buffer does not move when the Vec holding it grows: the pointer stays valid until this
    // slot is replaced (this thread's next poll) or the object is dropped (after `engine_request_free`).
    (slot.as_ptr().cast(), len)
}
