//! One thread serves every request of an engine: `engine_submit_with_user_data` sends a request's events to its
//! engine's waiting point, `engine_wait_events` takes the events of any request in batches, `engine_events_fd`
//! gives a descriptor for a host's event loop, `engine_events_wakeup` ends a wait (`engine/output/ready_queue.rs`).

use std::ffi::{c_char, c_int};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::args::{self, copy_to_buffer, Out};
use super::boundary::{boundary, Failure};
use super::engine::{EmberEngine, EngineObject};
use super::event::{to_c_event, EmberEvent, EmberEventKind, EmberFinishReason};
use super::registry::{to_pointer, ENGINES, REQUESTS};
use super::request::{submit, Delivery, EmberRequest, RequestObject};
use super::status::EmberStatus;
use crate::engine::Ready;
use crate::protocol::{Api, ChunkPoll};

/// `delivery` of `engine_submit_with_user_data`: the request's events, as `engine_poll` gives them (`DELTA`,
/// `FINISHED`, `ERROR`).
pub const EMBER_DELIVERY_EVENTS: u32 = 1;
/// `delivery` of `engine_submit_with_user_data`: the request's streaming chunk bodies, as `engine_next_chunk_json`
/// gives them (`CHUNK`), then `STREAM_DONE`.
pub const EMBER_DELIVERY_CHUNKS: u32 = 2;

/// What a request submitted with `engine_submit_with_user_data` delivers (`EMBER_DELIVERY_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DeliveryKind {
    Events,
    Chunks,
}

/// The delivery an `EMBER_DELIVERY_EVENTS` or `EMBER_DELIVERY_CHUNKS` value names.
pub(super) fn delivery_kind(delivery: u32) -> Result<DeliveryKind, Failure> {
    match delivery {
        EMBER_DELIVERY_EVENTS => Ok(DeliveryKind::Events),
        EMBER_DELIVERY_CHUNKS => Ok(DeliveryKind::Chunks),
        other => Err(Failure::invalid_argument(format!("delivery = {other} is not an EMBER_DELIVERY_* value"))),
    }
}

/// One event of one request, written by `engine_wait_events`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EmberEventRecord {
    /// The request the event is about (the handle `engine_submit_with_user_data` gave).
    pub request: *mut EmberRequest,
    /// The value given at submission, unchanged (a host's stream id, or a pointer cast to an integer).
    pub user_data: u64,
    /// The event. With `EMBER_DELIVERY_EVENTS`: as `engine_poll` writes it. With `EMBER_DELIVERY_CHUNKS`: kind
    /// `CHUNK` with `text`/`text_len` a chunk body, or, last, kind `STREAM_DONE` (send `data: [DONE]`). Its text
    /// is owned by ember: valid until this thread's next `engine_wait_events` on this engine, or `engine_free`.
    pub event: EmberEvent,
    /// Whether this is the request's last record: nothing more comes for it, and it may be freed.
    pub last: bool,
}

/// Submits an OpenAI request body, as `engine_submit`, whose events go to the engine's waiting point: take them
/// with `engine_wait_events`, each record carrying `user_data` (any value: ember never reads it).
///
/// `delivery` is `EMBER_DELIVERY_EVENTS` for the events `engine_poll` would give,
/// `EMBER_DELIVERY_CHUNKS` for the chunk bodies `engine_next_chunk_json` would give. Each event is delivered
/// once, by one way: `engine_poll` or `engine_next_chunk_json` on such a request take from the same queue (do
/// not mix them).
///
/// Returns what `engine_submit` returns; `EMBER_STATUS_INVALID_ARGUMENT` also for an unknown `delivery`.
///
/// Thread safety and ownership: as `engine_submit`.
///
/// # Safety
/// As `engine_submit`.
#[no_mangle]
pub unsafe extern "C" fn engine_submit_with_user_data(
    engine: *mut EmberEngine,
    request_json: *const c_char,
    user_data: u64,
    delivery: u32,
    out: *mut *mut EmberRequest,
) -> EmberStatus {
    boundary("engine_submit_with_user_data", || {
        let kind = delivery_kind(delivery)?;
        // SAFETY: as this function's contract says, which is `submit`'s.
        unsafe { submit(engine, request_json, Api::OpenAi, Some(Delivery { user_data, kind }), out) }
    })
}

/// Waits up to `timeout_ms` milliseconds (0: do not wait; -1: no limit) for events of the requests submitted with
/// `engine_submit_with_user_data`, and writes up to `capacity` of them to `records`, their number to `*out_count`.
///
/// A request's records come in its order, its deltas of one choice merged, in the order requests became ready
/// (one request's events may fill a batch; the rest come next). Returns `EMBER_STATUS_OK` with at least one
/// record, or with none after `engine_events_wakeup`; `EMBER_STATUS_TIMEOUT` when nothing came in time (0
/// written to `*out_count`); `EMBER_STATUS_INVALID_HANDLE` (engine not live, or freed while this call waited);
/// `EMBER_STATUS_INVALID_ARGUMENT` (NULL `records` or `out_count`, `capacity` 0, bad timeout). A request
/// freed before its events were taken is skipped.
///
/// Thread safety: any thread; calls on one engine are serialized (one waits for the other), so a request's
/// records reach the host in order. Ownership: the records' texts are ember's, valid until this thread's next
/// call of this function on this engine, or `engine_free`.
///
/// # Safety
/// `records` is NULL or points to `capacity` writable `EmberEventRecord`s; `out_count` is NULL or points to a
/// writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn engine_wait_events(
    engine: *mut EmberEngine,
    timeout_ms: i32,
    records: *mut EmberEventRecord,
    capacity: usize,
    out_count: *mut usize,
) -> EmberStatus {
    boundary("engine_wait_events", || {
        let out_count = Out::new(out_count, "out_count")?;
        if records.is_null() || capacity == 0 {
            return Err(Failure::invalid_argument("records must be non-NULL with a capacity of at least 1"));
        }
        let timeout = args::timeout(timeout_ms)?;
        let object = ENGINES.get(engine.addr())?;
        let _one_taker = object.events_taker.lock().unwrap_or_else(|e| e.into_inner());
        let mut texts = Vec::new();
        let taken = take_records(&object, timeout, capacity, &mut texts);
        if !object.is_live() {
            return Err(Failure::invalid_handle("the engine was freed while this call waited"));
        }
        keep_texts_for_this_thread(&object, texts);
        // SAFETY: `records` holds `capacity` writable records (at most `capacity` were taken) and `out_count` is
        // writable, by this function's contract.
        unsafe { copy_to_buffer(taken.as_deref().unwrap_or_default(), records, capacity, out_count, "records") }?;
        match taken {
            Some(_) => Ok(()),
            None => Err(Failure::new(EmberStatus::Timeout, format!("no event within {timeout_ms} ms"))),
        }
    })
}

/// A descriptor that is readable while `engine_wait_events` has something to return (events, or a wakeup), for
/// a host's epoll, poll, kqueue or io_uring loop; written to `*out_fd`. Poll it for reading only; ember reads
/// and closes it (at `engine_free`). It stays readable until the waiting events are taken: level-triggered
/// loops call `engine_wait_events` with timeout 0 when it is readable; edge-triggered ones until
/// `EMBER_STATUS_TIMEOUT`. It is the read end of a pipe, on every Unix.
///
/// Returns `EMBER_STATUS_OK`, `EMBER_STATUS_INVALID_HANDLE`, `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out_fd`).
/// Thread safety: any thread.
///
/// # Safety
/// `out_fd` is NULL or points to a writable `int`.
#[cfg(unix)]
#[no_mangle]
pub unsafe extern "C" fn engine_events_fd(engine: *mut EmberEngine, out_fd: *mut c_int) -> EmberStatus {
    boundary("engine_events_fd", || {
        let out_fd = Out::new(out_fd, "out_fd")?;
        let object = ENGINES.get(engine.addr())?;
        // SAFETY: `out_fd` is non-NULL and writable by this function's contract.
        unsafe { out_fd.write(object.events.readiness_fd()) };
        Ok(())
    })
}

/// Makes a waiting `engine_wait_events` on this engine return (or the next one, when none waits) with
/// `EMBER_STATUS_OK` and no records, and the descriptor of `engine_events_fd` readable until then: how a host
/// stops its event loop. Several wakeups before a wait count as one.
///
/// Returns `EMBER_STATUS_OK` or `EMBER_STATUS_INVALID_HANDLE`. Thread safety: any thread (a signal handler
/// excepted: it takes a lock).
#[no_mangle]
pub extern "C" fn engine_events_wakeup(engine: *mut EmberEngine) -> EmberStatus {
    boundary("engine_events_wakeup", || {
        ENGINES.get(engine.addr())?.events.wakeup();
        Ok(())
    })
}

/// Takes up to `capacity` records, waiting up to `timeout` for the first; `None` when the time ran out with
/// none. Texts the records point to go to `texts`.
fn take_records(
    object: &EngineObject,
    timeout: Option<Duration>,
    capacity: usize,
    texts: &mut Vec<String>,
) -> Option<Vec<EmberEventRecord>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut records = Vec::new();
    while records.len() < capacity {
        // Wait (up to the deadline) for the first request; after that take only what is ready now.
        let left = match records.is_empty() {
            true => deadline.map(|d| d.saturating_duration_since(Instant::now())),
            false => Some(Duration::ZERO),
        };
        match object.events.wait(left, 1) {
            Ready::Keys(keys) => {
                for key in keys {
                    // A request freed since its key was queued is skipped.
                    if let Ok(request) = REQUESTS.get(key as usize) {
                        take_from(&request, key as usize, capacity, &mut records, texts);
                    }
                }
            }
            Ready::Woken => return Some(records),
            // Nothing (more) in time: what was taken, or `None` when nothing was.
            Ready::TimedOut => return (!records.is_empty()).then_some(records),
        }
    }
    Some(records)
}

/// Takes what request `request` (handle value `id`) has ready into `records`, up to `capacity`; when there is
/// no room for all of it, its key goes back to the head of the queue.
fn take_from(
    request: &Arc<RequestObject>,
    id: usize,
    capacity: usize,
    records: &mut Vec<EmberEventRecord>,
    texts: &mut Vec<String>,
) {
    let Some(delivery) = request.delivery else { return };
    request.handle.clear_ready_mark();
    let record = |event: EmberEvent, last: bool| EmberEventRecord {
        request: to_pointer(id),
        user_data: delivery.user_data,
        event,
        last,
    };
    let mut keep = |text: String| keep_text(texts, text);
    match delivery.kind {
        DeliveryKind::Events => {
            while records.len() < capacity {
                let Some((event, last)) = request.handle.take_ready() else { return };
                records.push(record(to_c_event(event, &mut keep), last));
            }
        }
        DeliveryKind::Chunks => {
            let mut api = request.api.lock().unwrap_or_else(|e| e.into_inner());
            while records.len() < capacity {
                if request.stream_done_delivered() {
                    return;
                }
                match api.next_chunk_json(Some(Duration::ZERO)) {
                    ChunkPoll::Chunk(json) => {
                        let (text, text_len) = keep(json);
                        records.push(record(text_event(EmberEventKind::Chunk, text, text_len), false));
                    }
                    ChunkPoll::Done => {
                        request.set_stream_done_delivered();
                        records.push(record(text_event(EmberEventKind::StreamDone, std::ptr::null(), 0), true));
                        return;
                    }
                    ChunkPoll::TimedOut => return,
                }
            }
        }
    }
    request.handle.requeue_first();
}

/// An event of kind `kind` with only a text.
fn text_event(kind: EmberEventKind, text: *const c_char, text_len: usize) -> EmberEvent {
    EmberEvent { kind, choice: 0, text, text_len, num_tokens: 0, finish_reason: EmberFinishReason::None }
}

/// Keeps `text` (NUL-terminated) among this call's texts: where it lives and its length without the NUL. A
/// String's heap buffer does not move when the Vec holding it grows, so the pointer stays valid while the Vec's
/// entry lives.
fn keep_text(texts: &mut Vec<String>, mut text: String) -> (*const c_char, usize) {
    let len = text.len();
    text.push('\0');
    texts.push(text);
    (texts.last().expect("just pushed").as_ptr().cast(), len)
}

/// This call's texts become this thread's, replacing those of its previous call on this engine.
fn keep_texts_for_this_thread(object: &EngineObject, texts: Vec<String>) {
    let me = thread::current().id();
    let mut all = object.event_texts.lock().unwrap_or_else(|e| e.into_inner());
    match all.iter_mut().find(|(thread, _)| *thread == me) {
        Some((_, mine)) => *mine = texts,
        None => all.push((me, texts)),
    }
}
