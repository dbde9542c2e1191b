//! `engine_submit_with_user_data` and `engine_wait_events` end to end on the real model, from Rust: one thread
//! takes the events of many requests of both deliveries. `tests/c/test_events.c` drives a thousand requests from
//! one C thread on the descriptor, under AddressSanitizer and valgrind.

use std::ffi::{CStr, CString};
use std::ptr;
use std::time::{Duration, Instant};

use super::api_tests::{empty_event, new_engine, submit};
use super::*;

fn submit_with(engine: *mut EmberEngine, json: &str, user_data: u64, delivery: u32) -> *mut EmberRequest {
    let json = CString::new(json).unwrap();
    let mut request = ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable out pointer.
    let status = unsafe { engine_submit_with_user_data(engine, json.as_ptr(), user_data, delivery, &mut request) };
    assert_eq!(status, EmberStatus::Ok, "{}", last_error::get());
    request
}

fn empty_record() -> EmberEventRecord {
    EmberEventRecord { request: ptr::null_mut(), user_data: 0, event: empty_event(), last: false }
}

/// `engine_wait_events` into `records`: its status and the records written.
fn wait(engine: *mut EmberEngine, timeout_ms: i32, records: &mut [EmberEventRecord]) -> (EmberStatus, usize) {
    let mut count = usize::MAX;
    // SAFETY: `records.len()` writable records and a writable count.
    let status = unsafe { engine_wait_events(engine, timeout_ms, records.as_mut_ptr(), records.len(), &mut count) };
    (status, count)
}

fn text_of(event: &EmberEvent) -> String {
    // SAFETY: `text_len` bytes at `text`, valid until this thread's next wait on the engine.
    let bytes = unsafe { std::slice::from_raw_parts(event.text.cast::<u8>(), event.text_len) };
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn response_text(request: *mut EmberRequest) -> String {
    let mut json = ptr::null_mut();
    // SAFETY: a writable out pointer.
    assert_eq!(unsafe { engine_response_json(request, &mut json) }, EmberStatus::Ok);
    // SAFETY: a NUL-terminated string from ember, freed below.
    let body: serde_json::Value = serde_json::from_str(unsafe { CStr::from_ptr(json) }.to_str().unwrap()).unwrap();
    engine_string_free(json);
    body["choices"][0]["text"].as_str().unwrap().to_owned()
}

/// What one request's records said.
#[derive(Default)]
struct Seen {
    text: String,
    finishes: u32,
    chunks: u32,
    last: bool,
}

#[test]
fn one_thread_takes_every_event_of_many_requests_once_and_in_order() {
    let engine = new_engine();
    let bodies = [
        r#"{"prompt": "Hi", "max_tokens": 3, "temperature": 0}"#,
        r#"{"prompt": "Count: 1, 2, 3,", "max_tokens": 24, "temperature": 0, "stream": true}"#,
    ];
    let requests: Vec<_> = (0..24)
        .map(|i| {
            let delivery = if i % 3 == 0 { EMBER_DELIVERY_CHUNKS } else { EMBER_DELIVERY_EVENTS };
            submit_with(engine, bodies[i % 2], 1000 + i as u64, delivery)
        })
        .collect();
    let mut seen: Vec<Seen> = (0..requests.len()).map(|_| Seen::default()).collect();
    let mut records = [empty_record(); 5];
    while seen.iter().any(|s| !s.last) {
        let (status, count) = wait(engine, -1, &mut records);
        assert_eq!(status, EmberStatus::Ok, "{}", last_error::get());
        assert!((1..=records.len()).contains(&count), "{count}");
        for r in &records[..count] {
            let i = (r.user_data - 1000) as usize;
            assert_eq!(r.request, requests[i], "the record names its request");
            let s = &mut seen[i];
            assert!(!s.last, "nothing after a request's last record");
            s.last = r.last;
            match r.event.kind {
                EmberEventKind::Delta => {
                    assert_eq!(s.finishes, 0, "a delta after the finish");
                    s.text.push_str(&text_of(&r.event));
                }
                EmberEventKind::Finished => {
                    s.finishes += 1;
                    assert!(r.last, "one choice: its finish is the last record");
                }
                EmberEventKind::Chunk => {
                    let chunk: serde_json::Value = serde_json::from_str(&text_of(&r.event)).unwrap();
                    s.text.push_str(chunk["choices"][0]["text"].as_str().unwrap_or(""));
                    s.chunks += 1;
                }
                EmberEventKind::StreamDone => assert!(r.last && s.chunks > 0),
                EmberEventKind::Error => panic!("request {i} failed: {}", text_of(&r.event)),
                EmberEventKind::PromptProgress => panic!("request {i} did not ask for progress"),
            }
        }
    }
    for (i, (&request, s)) in requests.iter().zip(&seen).enumerate() {
        assert_eq!(s.text, response_text(request), "request {i}: the records carry its whole text");
        let chunked = i % 3 == 0;
        assert_eq!((s.finishes, s.chunks > 0), (u32::from(!chunked), chunked), "request {i}");
    }
    // Everything was taken: nothing waits, and a request's events are not also given to engine_poll.
    let start = Instant::now();
    assert_eq!(wait(engine, 50, &mut records), (EmberStatus::Timeout, 0));
    assert!(start.elapsed() >= Duration::from_millis(50), "the timeout was waited");
    let mut event = empty_event();
    // SAFETY: a writable event; handles are checked.
    assert_eq!(unsafe { engine_poll(engine, requests[1], 0, &mut event) }, EmberStatus::StreamDone);
    for request in requests {
        engine_request_free(request);
    }
    engine_free(engine);
}

#[test]
fn the_descriptor_a_wakeup_and_bad_arguments() {
    let engine = new_engine();
    let mut fd = -1;
    // SAFETY: a writable int.
    assert_eq!(unsafe { engine_events_fd(engine, &mut fd) }, EmberStatus::Ok);
    assert!(fd >= 0);
    // SAFETY: NULL out pointers are refused before anything is written.
    assert_eq!(unsafe { engine_events_fd(engine, ptr::null_mut()) }, EmberStatus::InvalidArgument);
    let mut records = [empty_record(); 2];
    assert_eq!(wait(engine, 0, &mut records), (EmberStatus::Timeout, 0));
    assert_eq!(engine_events_wakeup(engine), EmberStatus::Ok);
    assert_eq!(engine_events_wakeup(engine), EmberStatus::Ok);
    assert_eq!(wait(engine, -1, &mut records), (EmberStatus::Ok, 0), "a wakeup ends a wait with no records");
    assert_eq!(wait(engine, 0, &mut records), (EmberStatus::Timeout, 0), "two wakeups before a wait are one");
    let mut count = 7;
    // SAFETY: capacity 0 and NULL arguments are refused before anything is written.
    unsafe {
        assert_eq!(engine_wait_events(engine, 0, records.as_mut_ptr(), 0, &mut count), EmberStatus::InvalidArgument);
        assert_eq!(engine_wait_events(engine, 0, ptr::null_mut(), 2, &mut count), EmberStatus::InvalidArgument);
        let none = ptr::null_mut();
        assert_eq!(engine_wait_events(engine, 0, records.as_mut_ptr(), 2, none), EmberStatus::InvalidArgument);
        assert_eq!(engine_wait_events(engine, -2, records.as_mut_ptr(), 2, &mut count), EmberStatus::InvalidArgument);
    }
    assert_eq!(count, 7, "refused calls write nothing");
    let json = c"{\"prompt\": \"Hi\", \"max_tokens\": 2}";
    let mut request = ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable out pointer.
    let status = unsafe { engine_submit_with_user_data(engine, json.as_ptr(), 1, 3, &mut request) };
    assert_eq!(status, EmberStatus::InvalidArgument);
    assert!(last_error::get().contains("delivery = 3 is not"), "{}", last_error::get());
    assert!(request.is_null());
    // A request submitted the plain way never reaches the waiting point.
    let plain = submit(engine, r#"{"prompt": "Hi", "max_tokens": 2}"#);
    let mut event = empty_event();
    // SAFETY: a writable event.
    while unsafe { engine_poll(engine, plain, -1, &mut event) } == EmberStatus::Ok {}
    assert_eq!(wait(engine, 0, &mut records), (EmberStatus::Timeout, 0));
    engine_request_free(plain);
    engine_free(engine);
    assert_eq!(wait(engine, 0, &mut records).0, EmberStatus::InvalidHandle);
    assert_eq!(engine_events_wakeup(engine), EmberStatus::InvalidHandle);
}

#[test]
fn freeing_the_engine_ends_a_blocked_wait_and_a_freed_request_is_skipped() {
    let engine = new_engine();
    let addr = engine.addr();
    // A request freed before its events are taken: its key is skipped.
    let freed = submit_with(engine, r#"{"prompt": "Hi", "max_tokens": 2}"#, 1, EMBER_DELIVERY_EVENTS);
    let kept = submit_with(engine, r#"{"prompt": "Hi", "max_tokens": 2}"#, 2, EMBER_DELIVERY_EVENTS);
    engine_request_free(freed);
    let mut records = [empty_record(); 4];
    let mut last_seen = false;
    while !last_seen {
        let (status, count) = wait(engine, -1, &mut records);
        assert_eq!(status, EmberStatus::Ok);
        assert!(records[..count].iter().all(|r| r.user_data == 2), "only the live request's records");
        last_seen = records[..count].iter().any(|r| r.last);
    }
    engine_request_free(kept);
    let waiter = std::thread::spawn(move || {
        let mut records = [empty_record(); 1];
        wait(registry::to_pointer(addr), -1, &mut records).0
    });
    // The waiter may block before or after the free: either way it returns, refused.
    engine_free(engine);
    assert_eq!(waiter.join().unwrap(), EmberStatus::InvalidHandle);
}

/// `"return_progress": true`: `PROMPT_PROGRESS` records before the text (the `prompt_progress` object as text,
/// `num_tokens` its `processed`), and with chunks, llama-server's progress chunks before the stream's own.
#[test]
fn progress_records_and_chunks_come_before_the_text() {
    let engine = new_engine();
    let body = r#"{"prompt": "Count: 1, 2, 3,", "max_tokens": 4, "temperature": 0, "stream": true,
        "return_progress": true}"#;
    for delivery in [EMBER_DELIVERY_EVENTS, EMBER_DELIVERY_CHUNKS] {
        let request = submit_with(engine, body, 7, delivery);
        let mut records = vec![empty_record(); 4];
        let mut progress: Vec<serde_json::Value> = Vec::new();
        let mut others = 0;
        let mut last = false;
        while !last {
            let (status, n) = wait(engine, -1, &mut records);
            assert_eq!(status, EmberStatus::Ok);
            for r in &records[..n] {
                last = r.last;
                let text = text_of(&r.event);
                let found = match r.event.kind {
                    EmberEventKind::PromptProgress => {
                        let p: serde_json::Value = serde_json::from_str(&text).unwrap();
                        assert_eq!(
                            (r.event.choice, u64::from(r.event.num_tokens)),
                            (0, p["processed"].as_u64().unwrap())
                        );
                        Some(p)
                    }
                    EmberEventKind::Chunk => {
                        serde_json::from_str::<serde_json::Value>(&text).unwrap().get("prompt_progress").cloned()
                    }
                    _ => None,
                };
                match found {
                    Some(p) => {
                        assert_eq!(others, 0, "progress comes before the text: {text}");
                        let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
                        assert_eq!(keys, ["total", "cache", "processed", "time_ms"], "llama-server's order");
                        progress.push(p);
                    }
                    None => others += 1,
                }
            }
        }
        assert!(progress.len() >= 2, "the admission and at least one chunk: {progress:?}");
        assert_eq!(progress[0]["processed"], progress[0]["cache"]);
        let end = progress.last().unwrap();
        assert_eq!(end["processed"], end["total"], "the last covers the whole prompt");
        engine_request_free(request);
    }
    engine_free(engine);
}
