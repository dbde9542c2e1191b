//! The C functions end to end on the real model, from Rust, so that `cargo test` covers the handle registry under
//! concurrent use. `tests/c/test_api.c` covers the whole API from C, under AddressSanitizer and valgrind.

use std::ffi::{CStr, CString};
use std::mem::size_of;
use std::ptr;
use std::sync::mpsc;

use super::*;
use crate::model::path::resolve_model_path;

/// Handles are raw pointers, which are not `Send`; the tests move them between threads as plain values.
#[derive(Clone, Copy)]
struct Handles {
    engine: usize,
    request: usize,
}

impl Handles {
    fn engine(self) -> *mut EmberEngine {
        registry::to_pointer(self.engine)
    }
    fn request(self) -> *mut EmberRequest {
        registry::to_pointer(self.request)
    }
}

pub(super) fn new_engine() -> *mut EmberEngine {
    let model = resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
    let config = serde_json::json!({"model": model, "threads": 1, "kv_cache_tokens": 1024}).to_string();
    let config = CString::new(config).unwrap();
    let mut engine = ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable out pointer.
    assert_eq!(unsafe { engine_new(config.as_ptr(), &mut engine) }, EmberStatus::Ok, "{}", last_error::get());
    engine
}

pub(super) fn submit(engine: *mut EmberEngine, json: &str) -> *mut EmberRequest {
    let json = CString::new(json).unwrap();
    let mut request = ptr::null_mut();
    // SAFETY: as above.
    assert_eq!(unsafe { engine_submit(engine, json.as_ptr(), &mut request) }, EmberStatus::Ok);
    request
}

pub(super) fn empty_event() -> EmberEvent {
    EmberEvent {
        kind: EmberEventKind::Error,
        choice: 99,
        text: ptr::null(),
        text_len: 0,
        num_tokens: 0,
        finish_reason: EmberFinishReason::None,
    }
}

fn poll(h: Handles, timeout_ms: i32, event: &mut EmberEvent) -> EmberStatus {
    // SAFETY: a writable event; handles are checked, never dereferenced.
    unsafe { engine_poll(h.engine(), h.request(), timeout_ms, event) }
}

/// Every poll after the final event answers `STREAM_DONE` at once, whatever the timeout.
fn assert_stream_done(h: Handles, event: &mut EmberEvent) {
    for timeout_ms in [-1, 0, 1000, -1] {
        let start = std::time::Instant::now();
        assert_eq!(poll(h, timeout_ms, event), EmberStatus::StreamDone, "timeout {timeout_ms}");
        assert!(start.elapsed() < std::time::Duration::from_millis(500), "STREAM_DONE without waiting");
        assert_eq!(last_error::get(), "engine_poll: the final event has been returned");
    }
}

const SHORT: &str = r#"{"prompt": "Hi", "max_tokens": 3, "temperature": 0}"#;
const LONG: &str = r#"{"prompt": "Count: 1, 2, 3,", "max_tokens": 64, "temperature": 0}"#;

#[test]
fn a_request_end_to_end() {
    let engine = new_engine();
    let request = submit(engine, SHORT);
    let h = Handles { engine: engine.addr(), request: request.addr() };
    let (mut text, mut tokens, mut event) = (String::new(), 0, empty_event());
    loop {
        assert_eq!(poll(h, -1, &mut event), EmberStatus::Ok);
        match event.kind {
            EmberEventKind::Delta => {
                // SAFETY: `text_len` bytes at `text`, valid until this thread's next poll of the request.
                let bytes = unsafe { std::slice::from_raw_parts(event.text.cast::<u8>(), event.text_len) };
                text.push_str(std::str::from_utf8(bytes).unwrap());
                tokens += event.num_tokens;
            }
            EmberEventKind::Finished => break,
            other => panic!("{other:?} from engine_poll"),
        }
    }
    assert!(!text.is_empty() && (1..=3).contains(&tokens));
    assert_stream_done(h, &mut event);
    assert_eq!(event.kind, EmberEventKind::Finished, "STREAM_DONE leaves the event untouched");
    let mut m = EmberPerRequestTimingMetrics {
        struct_size: size_of::<EmberPerRequestTimingMetrics>() as u32,
        present: 0,
        time_to_first_token_ms: 0.0,
        generation_time_ms: 0.0,
        queue_time_ms: 0.0,
        mean_itl_ms: 0.0,
        tokens_per_second: 0.0,
    };
    // SAFETY: a writable, correctly sized struct.
    assert_eq!(unsafe { engine_get_timing_metrics(request, &mut m) }, EmberStatus::Ok);
    assert_ne!(m.present & metrics::EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS, 0);
    let mut json = ptr::null_mut();
    // SAFETY: a writable out pointer.
    assert_eq!(unsafe { engine_response_json(request, &mut json) }, EmberStatus::Ok);
    // SAFETY: a NUL-terminated string from ember, freed below.
    let body = unsafe { CStr::from_ptr(json) }.to_str().unwrap().to_owned();
    assert!(body.contains(&serde_json::to_string(&text).unwrap()), "{body}");
    engine_string_free(json);
    engine_request_free(request);
    engine_free(engine);
    assert_eq!(poll(h, 0, &mut event), EmberStatus::InvalidHandle);
}

#[test]
fn freeing_a_request_wakes_a_thread_polling_it_and_a_foreign_engine_is_refused() {
    let (engine, other) = (new_engine(), new_engine());
    let request = submit(engine, LONG);
    let h = Handles { engine: engine.addr(), request: request.addr() };
    let wrong_engine = Handles { engine: other.addr(), request: request.addr() };
    let mut event = empty_event();
    assert_eq!(poll(wrong_engine, 0, &mut event), EmberStatus::InvalidHandle);
    assert!(last_error::get().contains("another engine"));

    let (first_event, seen) = mpsc::channel();
    let poller = std::thread::spawn(move || {
        let mut event = empty_event();
        let mut sent = false;
        loop {
            let status = poll(h, -1, &mut event);
            if status != EmberStatus::Ok {
                return status;
            }
            if !sent {
                first_event.send(()).unwrap();
                sent = true;
            }
        }
    });
    seen.recv().unwrap();
    engine_request_free(request);
    assert_eq!(poller.join().unwrap(), EmberStatus::InvalidHandle);
    engine_request_free(request);
    assert!(last_error::get().contains("not a live request handle"));
    engine_free(other);
    engine_free(engine);
}

#[test]
fn several_threads_share_the_events_of_one_request() {
    let engine = new_engine();
    let request = submit(engine, LONG);
    let h = Handles { engine: engine.addr(), request: request.addr() };
    let pollers: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let (mut event, mut tokens, mut finishes) = (empty_event(), 0, Vec::new());
                // Every thread polls to STREAM_DONE, which comes once the final event has gone to one of them.
                loop {
                    match poll(h, -1, &mut event) {
                        EmberStatus::Ok => {}
                        EmberStatus::StreamDone => return (tokens, finishes),
                        other => panic!("{other:?}: {}", last_error::get()),
                    }
                    match event.kind {
                        EmberEventKind::Delta => tokens += event.num_tokens,
                        EmberEventKind::Finished => finishes.push(event.finish_reason),
                        other => panic!("{other:?} from engine_poll"),
                    }
                }
            })
        })
        .collect();
    let results: Vec<(u32, Vec<EmberFinishReason>)> = pollers.into_iter().map(|t| t.join().unwrap()).collect();
    let finishes: Vec<EmberFinishReason> = results.iter().flat_map(|r| r.1.iter().copied()).collect();
    assert_eq!(finishes, [EmberFinishReason::Length], "the final event goes to exactly one thread");
    let mut count = 0;
    // SAFETY: a writable count; a NULL buffer with capacity 0 asks for the size.
    let status = unsafe { engine_get_token_timestamps(request, 0, ptr::null_mut(), 0, &mut count) };
    assert_eq!(status, EmberStatus::BufferTooSmall);
    assert_eq!(results.iter().map(|r| r.0 as usize).sum::<usize>(), count, "every token delivered exactly once");
    engine_request_free(request);
    engine_free(engine);
}

#[test]
fn a_cancelled_request_of_two_choices_finishes_each_once_then_is_done() {
    let engine = new_engine();
    let request = submit(engine, r#"{"prompt": "Hi", "max_tokens": 200, "n": 2, "temperature": 0}"#);
    let h = Handles { engine: engine.addr(), request: request.addr() };
    assert_eq!(engine_cancel(request), EmberStatus::Ok);
    let (mut event, mut finished) = (empty_event(), [0; 2]);
    loop {
        match poll(h, -1, &mut event) {
            EmberStatus::StreamDone => break,
            status => assert_eq!(status, EmberStatus::Ok),
        }
        assert_ne!(event.kind, EmberEventKind::Error);
        if event.kind == EmberEventKind::Finished {
            assert_eq!(event.finish_reason, EmberFinishReason::Cancelled);
            finished[event.choice as usize] += 1;
        }
    }
    assert_eq!(finished, [1, 1]);
    assert_stream_done(h, &mut event);
    engine_request_free(request);
    engine_free(engine);
}

#[test]
fn an_error_is_the_final_event_and_its_message_stays_in_the_response() {
    let engine = new_engine();
    let request = submit(engine, SHORT);
    let h = Handles { engine: engine.addr(), request: request.addr() };
    let object = registry::REQUESTS.get(request.addr()).unwrap();
    // No real request makes the engine fail: play its side. The engine may still be generating; its later
    // deltas must not follow the error.
    object.handle.engine_side().fail("forward pass failed: injected".into());
    let mut event = empty_event();
    loop {
        assert_eq!(poll(h, -1, &mut event), EmberStatus::Ok);
        if event.kind != EmberEventKind::Delta {
            break;
        }
    }
    assert_eq!((event.kind, event.choice, event.finish_reason), (EmberEventKind::Error, 0, EmberFinishReason::None));
    // SAFETY: `text_len` bytes at `text`, valid until this thread's next poll of the request.
    let message = unsafe { std::slice::from_raw_parts(event.text.cast::<u8>(), event.text_len) };
    assert_eq!(message, b"forward pass failed: injected");
    assert_stream_done(h, &mut event);
    let mut json = ptr::null_mut();
    // SAFETY: a writable out pointer.
    assert_eq!(unsafe { engine_response_json(request, &mut json) }, EmberStatus::Ok);
    // SAFETY: a NUL-terminated string from ember, freed below.
    let body = unsafe { CStr::from_ptr(json) }.to_str().unwrap().to_owned();
    engine_string_free(json);
    assert!(body.contains("forward pass failed: injected") && body.contains(r#""finish_reason":"error""#), "{body}");
    object.handle.cancel(); // stop the generation the failure did not stop
    drop(object);
    engine_request_free(request);
    engine_free(engine);
}

/// `engine_submit_api`: a Responses body answered in its shape, streamed as its events; unknown APIs and
/// deliveries refused as arguments; a refusal names the Responses field; warnings readable at once.
#[test]
fn submit_api_serves_another_apis_body_and_refuses_unknown_codes() {
    let engine = new_engine();
    let submit_api = |api: u32, json: &str, delivery: u32| {
        let json = CString::new(json).unwrap();
        let mut request = ptr::null_mut();
        // SAFETY: a NUL-terminated string and a writable out pointer; the engine handle is checked.
        let status = unsafe { engine_submit_api(engine, api, json.as_ptr(), 7, delivery, &mut request) };
        (status, request)
    };
    let body = r#"{"input": "hi", "max_output_tokens": 3, "temperature": 0, "text": {"verbosity": "low"}}"#;
    assert_eq!(submit_api(99, body, EMBER_DELIVERY_POLL).0, EmberStatus::InvalidArgument);
    assert_eq!(submit_api(EMBER_API_RESPONSES, body, 42).0, EmberStatus::InvalidArgument);
    let (status, _) =
        submit_api(EMBER_API_RESPONSES, r#"{"input": "hi", "max_output_tokens": 0}"#, EMBER_DELIVERY_POLL);
    assert_eq!(status, EmberStatus::InvalidRequest);
    let refusal: serde_json::Value = serde_json::from_str(&last_error::get()).unwrap();
    assert_eq!(refusal["error"]["param"], "max_output_tokens");

    let (status, request) = submit_api(EMBER_API_RESPONSES, body, EMBER_DELIVERY_POLL);
    assert_eq!(status, EmberStatus::Ok);
    let mut warnings = ptr::null_mut();
    // SAFETY: a live request handle and a writable out pointer.
    assert_eq!(unsafe { engine_request_warnings_json(request, &mut warnings) }, EmberStatus::Ok);
    // SAFETY: ember's NUL-terminated string, freed once read.
    let text = unsafe { CStr::from_ptr(warnings) }.to_str().unwrap().to_owned();
    engine_string_free(warnings);
    assert!(text.contains("verbosity"), "{text}");
    let mut kinds = Vec::new();
    loop {
        let mut chunk = ptr::null_mut();
        // SAFETY: live handles and a writable out pointer.
        match unsafe { engine_next_chunk_json(engine, request, -1, &mut chunk) } {
            EmberStatus::Ok => {
                // SAFETY: ember's NUL-terminated string, freed once read.
                let json: serde_json::Value =
                    serde_json::from_str(unsafe { CStr::from_ptr(chunk) }.to_str().unwrap()).unwrap();
                engine_string_free(chunk);
                kinds.push(json["type"].as_str().unwrap().to_owned());
            }
            EmberStatus::StreamDone => break,
            other => panic!("{other:?}: {}", last_error::get()),
        }
    }
    assert_eq!(kinds.first().map(String::as_str), Some("response.created"));
    assert!(kinds.last().is_some_and(|k| k == "response.completed" || k == "response.incomplete"), "{kinds:?}");
    let mut body = ptr::null_mut();
    // SAFETY: as above.
    assert_eq!(unsafe { engine_response_json(request, &mut body) }, EmberStatus::Ok);
    // SAFETY: as above.
    let response: serde_json::Value = serde_json::from_str(unsafe { CStr::from_ptr(body) }.to_str().unwrap()).unwrap();
    engine_string_free(body);
    assert_eq!(response["object"], "response");
    engine_request_free(request);
    engine_free(engine);
}
