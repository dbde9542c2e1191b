//! Churn through the C ABI (issue 15): one engine, 32 host threads, thousands of requests that mix what hosts do —
//! completions and chat, polled events and streaming chunks, `n` > 1, stop strings, cancels at random moments,
//! frees in the middle of a stream — and checks that:
//! - every request that is read to its end ends exactly once: one `FINISHED` per choice (or one non-null
//!   `finish_reason` per choice in the chunks) with one reason, then `EMBER_STATUS_STREAM_DONE`, and a final
//!   response whose choices carry those reasons;
//! - every call answers `EMBER_STATUS_OK` where it should and leaves no error behind;
//! - afterwards the engine is idle: 0 running, 0 waiting, every KV block free (cached prefixes count as free);
//! - memory stays flat after warm-up: the bytes live on the heap (counted by this test's global allocator), with
//!   the engine idle, end where they were after a warm-up burst that took every high-water buffer to its mark. Resident memory is reported beside it; it can grow
//!   while the heap does not, as KV blocks never used before are touched for the first time (the cache's pages
//!   are zeroed lazily) and as the allocator's arenas settle.
//!
//! `EMBER_CHURN_REQUESTS` sets the count: `make test` runs the default 2,000, `make soak` 10,000.

#[path = "common/proc_status.rs"]
mod proc_status;

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ember::ffi::{
    engine_cancel, engine_free, engine_get_stats, engine_last_error_message, engine_new, engine_next_chunk_json,
    engine_poll, engine_request_free, engine_response_json, engine_string_free, engine_submit, EmberEngine, EmberEvent,
    EmberEventKind, EmberFinishReason, EmberRequest, EmberStats, EmberStatus,
};
use proc_status::proc_status_kib;
use serde_json::Value;

/// The system allocator, counting the bytes live on the heap: what a leak grows, exactly, where RSS also moves
/// with the allocator's arenas and fragmentation.
struct CountingAllocator;

static LIVE_HEAP_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator with the caller's arguments; the counter has no effect
// on the memory handed out.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_HEAP_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`. Forwarded so that large zeroed buffers (the KV cache) keep the system's lazily
        // zeroed pages, as without this allocator.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE_HEAP_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_HEAP_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator (that is, `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc` is `System.realloc`'s.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_HEAP_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const HOST_THREADS: usize = 32;
/// Growth of the live heap in both halves of the run from which it is a leak.
const LEAK_BYTES_PER_HALF: isize = 256 << 10;
const DEFAULT_REQUESTS: usize = 2_000;

/// A tiny deterministic generator (xorshift64*), one per host thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// What a host thread does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Poll events to the end.
    Poll,
    /// Read streaming chunks to the end.
    Stream,
    /// Poll a few events, cancel, poll to the end.
    Cancel,
    /// Poll a few events (or none), then free without reading further.
    FreeEarly,
}

const ACTIONS: [Action; 4] = [Action::Poll, Action::Stream, Action::Cancel, Action::FreeEarly];

const PROMPTS: [&str; 6] = [
    "The capital of France is",
    "Once upon a time",
    "1, 2, 3, 4,",
    "The best way to learn a language is",
    "Water boils at",
    "In the beginning",
];

/// A request body and the number of choices it asks for.
fn request_json(rng: &mut Rng, stream: bool) -> (String, usize) {
    let n = [1, 1, 1, 2, 3][rng.below(5) as usize];
    let max_tokens = 1 + rng.below(8);
    let prompt = PROMPTS[rng.below(PROMPTS.len() as u64) as usize];
    let mut body = if rng.below(4) == 0 {
        serde_json::json!({"messages": [{"role": "user", "content": prompt}]})
    } else {
        serde_json::json!({"prompt": prompt})
    };
    body["max_tokens"] = max_tokens.into();
    body["n"] = n.into();
    // Greedy for one choice; n > 1 samples (seeded, so runs repeat).
    body["temperature"] = if n == 1 { 0.0.into() } else { 0.8.into() };
    body["seed"] = rng.below(1000).into();
    if rng.below(3) == 0 {
        body["stop"] = serde_json::json!([" the", ",", "."]);
    }
    if stream {
        body["stream"] = true.into();
    }
    (body.to_string(), n as usize)
}

fn last_error() -> String {
    // SAFETY: ember's last error is a NUL-terminated string valid until this thread's next ember call.
    unsafe { CStr::from_ptr(engine_last_error_message()) }.to_string_lossy().into_owned()
}

/// Handles cross threads as integers: the registry checks them, and every thread may call with any handle.
#[derive(Clone, Copy)]
struct Handles {
    engine: usize,
}

impl Handles {
    fn engine(self) -> *mut EmberEngine {
        ptr::without_provenance_mut(self.engine)
    }
}

/// What one request's run counted.
#[derive(Default)]
struct Tally {
    by_action: [usize; 4],
    finished_by_reason: [usize; 5],
    choices_ended: usize,
}

fn submit(engine: *mut EmberEngine, json: &str) -> *mut EmberRequest {
    let json = CString::new(json).unwrap();
    let mut request = ptr::null_mut();
    // SAFETY: a live engine handle, a NUL-terminated string and a writable pointer.
    let status = unsafe { engine_submit(engine, json.as_ptr(), &mut request) };
    assert_eq!(status, EmberStatus::Ok, "{}", last_error());
    request
}

fn poll(engine: *mut EmberEngine, request: *mut EmberRequest) -> (EmberStatus, EmberEvent) {
    let mut ev = EmberEvent {
        kind: EmberEventKind::Delta,
        choice: 0,
        text: ptr::null(),
        text_len: 0,
        num_tokens: 0,
        finish_reason: EmberFinishReason::None,
    };
    // SAFETY: live handles and a writable event.
    let status = unsafe { engine_poll(engine, request, -1, &mut ev) };
    (status, ev)
}

/// The events of one request read so far: each choice's finish reason once it has finished.
struct EventReader {
    engine: *mut EmberEngine,
    request: *mut EmberRequest,
    reasons: Vec<Option<EmberFinishReason>>,
}

impl EventReader {
    fn new(engine: *mut EmberEngine, request: *mut EmberRequest, n: usize) -> Self {
        EventReader { engine, request, reasons: vec![None; n] }
    }

    /// Polls one event and checks it against what came before; false once the stream is done.
    fn next(&mut self, tally: &mut Tally, cancelled: bool) -> bool {
        let (status, ev) = poll(self.engine, self.request);
        if status == EmberStatus::StreamDone {
            assert!(
                self.reasons.iter().all(Option::is_some),
                "STREAM_DONE before every choice finished: {:?}",
                self.reasons
            );
            return false;
        }
        assert_eq!(status, EmberStatus::Ok, "{}", last_error());
        let (choice, n) = (ev.choice as usize, self.reasons.len());
        assert!(choice < n, "choice {choice} of {n}");
        match ev.kind {
            EmberEventKind::Delta => {
                assert!(self.reasons[choice].is_none(), "a delta after choice {choice} finished")
            }
            EmberEventKind::Finished => {
                assert!(self.reasons[choice].is_none(), "choice {choice} finished twice");
                let reason = ev.finish_reason;
                let allowed = match reason {
                    EmberFinishReason::Stop | EmberFinishReason::Length => true,
                    EmberFinishReason::Cancelled => cancelled,
                    _ => false,
                };
                assert!(allowed, "choice {choice} finished for {reason:?} (cancelled: {cancelled})");
                self.reasons[choice] = Some(reason);
                tally.finished_by_reason[reason as usize] += 1;
            }
            EmberEventKind::Error => panic!("the request failed: {}", text_of(&ev)),
            other => panic!("{other:?} from engine_poll"),
        }
        true
    }

    /// Polls to the end; checks one `FINISHED` per choice, then `STREAM_DONE`, and the final response.
    fn read_to_end(mut self, tally: &mut Tally, cancelled: bool) {
        while self.next(tally, cancelled) {}
        tally.choices_ended += self.reasons.len();
        check_response(self.request, &self.reasons);
    }
}

fn text_of(ev: &EmberEvent) -> String {
    // SAFETY: an event's text is `text_len` bytes, valid until this thread polls the request again.
    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(ev.text.cast::<u8>(), ev.text_len) }).into_owned()
}

/// The OpenAI name of a finish reason.
fn reason_name(reason: EmberFinishReason) -> &'static str {
    match reason {
        EmberFinishReason::Stop => "stop",
        EmberFinishReason::Length => "length",
        EmberFinishReason::Cancelled => "cancelled",
        _ => "other",
    }
}

/// The final response carries the same one reason per choice.
fn check_response(request: *mut EmberRequest, reasons: &[Option<EmberFinishReason>]) {
    let mut json: *mut c_char = ptr::null_mut();
    // SAFETY: a live request handle and a writable pointer.
    assert_eq!(unsafe { engine_response_json(request, &mut json) }, EmberStatus::Ok, "{}", last_error());
    // SAFETY: ember returned a NUL-terminated string, ours until engine_string_free.
    let body: Value = serde_json::from_str(unsafe { CStr::from_ptr(json) }.to_str().unwrap()).unwrap();
    engine_string_free(json);
    let choices = body["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), reasons.len(), "{body}");
    for c in choices {
        let index = c["index"].as_u64().unwrap() as usize;
        assert_eq!(c["finish_reason"], reason_name(reasons[index].unwrap()), "{body}");
    }
}

/// Reads streaming chunks to the end; checks one non-null `finish_reason` per choice.
fn stream_to_end(engine: *mut EmberEngine, request: *mut EmberRequest, n: usize, tally: &mut Tally) {
    let mut finished = vec![0usize; n];
    loop {
        let mut json: *mut c_char = ptr::null_mut();
        // SAFETY: live handles and a writable pointer.
        let status = unsafe { engine_next_chunk_json(engine, request, -1, &mut json) };
        if status == EmberStatus::StreamDone {
            break;
        }
        assert_eq!(status, EmberStatus::Ok, "{}", last_error());
        // SAFETY: as in `check_response`.
        let chunk: Value = serde_json::from_str(unsafe { CStr::from_ptr(json) }.to_str().unwrap()).unwrap();
        engine_string_free(json);
        for c in chunk["choices"].as_array().expect("choices") {
            if let Some(reason) = c["finish_reason"].as_str() {
                assert!(reason == "stop" || reason == "length", "{chunk}");
                finished[c["index"].as_u64().unwrap() as usize] += 1;
            }
        }
    }
    assert!(finished.iter().all(|&f| f == 1), "finish reasons per choice: {finished:?}");
    tally.choices_ended += n;
}

/// One host thread's share of the requests.
fn host_thread(h: Handles, seed: u64, next: &AtomicUsize, total: usize) -> Tally {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut tally = Tally::default();
    let engine = h.engine();
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= total {
            return tally;
        }
        let action = ACTIONS[rng.below(ACTIONS.len() as u64) as usize];
        tally.by_action[action as usize] += 1;
        let (json, n) = request_json(&mut rng, action == Action::Stream);
        let request = submit(engine, &json);
        match action {
            Action::Poll => EventReader::new(engine, request, n).read_to_end(&mut tally, false),
            Action::Stream => stream_to_end(engine, request, n, &mut tally),
            Action::Cancel | Action::FreeEarly => {
                let mut reader = EventReader::new(engine, request, n);
                let mut open = true;
                for _ in 0..rng.below(4) {
                    open = reader.next(&mut tally, false);
                    if !open {
                        break;
                    }
                }
                if action == Action::Cancel {
                    // Cancelling an ended request is allowed and changes nothing.
                    assert_eq!(engine_cancel(request), EmberStatus::Ok, "{}", last_error());
                    if open {
                        reader.read_to_end(&mut tally, true);
                    }
                }
            }
        }
        engine_request_free(request);
        assert_eq!(last_error(), "", "engine_request_free");
    }
}

/// Brings every buffer that grows to a high-water mark to its mark before the heap is measured: the widest step
/// the configuration allows (64 sequences decoding, so 64 logits rows; prefill chunks of the whole token budget),
/// from 22 chat requests of 3 choices at once.
fn warm_up(engine: *mut EmberEngine) {
    let body = serde_json::json!({"messages": [{"role": "user", "content": "Tell me about the sea."}],
        "n": 3, "temperature": 0.8, "seed": 1, "max_tokens": 8, "ignore_eos": true})
    .to_string();
    let requests: Vec<_> = (0..22).map(|_| submit(engine, &body)).collect();
    let mut tally = Tally::default();
    for request in requests {
        EventReader::new(engine, request, 3).read_to_end(&mut tally, false);
        engine_request_free(request);
    }
}

/// Waits until nothing runs or waits and every KV block is free, and returns the stats then. Requests freed
/// mid-stream end when the engine thread next looks at them: this waits for that (a condition with a deadline
/// that only a hang reaches, never an asserted duration).
fn wait_idle(engine: *mut EmberEngine) -> EmberStats {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = stats(engine);
        if s.num_running == 0 && s.num_waiting == 0 && s.kv_blocks_free == s.kv_blocks_total {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "the engine never became idle: {} running, {} waiting, {}/{} blocks free",
            s.num_running,
            s.num_waiting,
            s.kv_blocks_free,
            s.kv_blocks_total
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `total` requests from `HOST_THREADS` threads (seeded from `seed_base`); returns each thread's tally.
fn churn(h: Handles, total: usize, seed_base: u64) -> Vec<Tally> {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..HOST_THREADS)
            .map(|t| {
                let next = &next;
                s.spawn(move || host_thread(h, seed_base + t as u64 + 1, next, total))
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("a host thread failed")).collect()
    })
}

fn stats(engine: *mut EmberEngine) -> EmberStats {
    // SAFETY: EmberStats is plain data; zeroes are a valid value, and struct_size says its size.
    let mut s: EmberStats = unsafe { std::mem::zeroed() };
    s.struct_size = std::mem::size_of::<EmberStats>() as u32;
    // SAFETY: a live engine handle and a writable struct of the size given.
    assert_eq!(unsafe { engine_get_stats(engine, &mut s) }, EmberStatus::Ok, "{}", last_error());
    s
}

#[test]
fn thousands_of_mixed_requests_from_32_threads_each_end_once_and_leave_the_engine_idle() {
    let total: usize = std::env::var("EMBER_CHURN_REQUESTS").map_or(DEFAULT_REQUESTS, |v| v.parse().unwrap());
    let config = CString::new(r#"{"threads": 2, "max_num_seqs": 64, "kv_cache_tokens": 4096}"#).unwrap();
    let mut engine = ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable pointer.
    assert_eq!(unsafe { engine_new(config.as_ptr(), &mut engine) }, EmberStatus::Ok, "{}", last_error());
    warm_up(engine);
    wait_idle(engine);
    let (warm_rss, warm_heap) = (proc_status_kib("VmRSS"), LIVE_HEAP_BYTES.load(Ordering::Relaxed));

    // Two halves, each ending idle: a leak grows the heap in both, a buffer reaching a new high-water mark (a
    // wider step than any before) in one only.
    let h = Handles { engine: engine.addr() };
    let start = Instant::now();
    let mut tallies = churn(h, total / 2, 0);
    wait_idle(engine);
    let half_heap = LIVE_HEAP_BYTES.load(Ordering::Relaxed);
    tallies.extend(churn(h, total - total / 2, HOST_THREADS as u64));
    let elapsed = start.elapsed();
    let idle = wait_idle(engine);
    let (end_rss, end_heap) = (proc_status_kib("VmRSS"), LIVE_HEAP_BYTES.load(Ordering::Relaxed));

    let mut sum = Tally::default();
    for t in &tallies {
        (0..4).for_each(|i| sum.by_action[i] += t.by_action[i]);
        (0..5).for_each(|i| sum.finished_by_reason[i] += t.finished_by_reason[i]);
        sum.choices_ended += t.choices_ended;
    }
    assert_eq!(sum.by_action.iter().sum::<usize>(), total);
    println!(
        "churn: {total} requests from {HOST_THREADS} threads in {:.1} s ({:.0} requests/s): poll {}, stream {}, \
         cancel {}, free early {}; choices read to the end {} (stop {}, length {}, cancelled {}); engine idle after: \
         {} steps, {} preemptions, {}/{} KV blocks free; after warm-up / at the end: RSS {} / {} MiB, \
         live heap {:.2} / {:.2} / {:.2} MiB (after warm-up / half / end)",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        sum.by_action[0],
        sum.by_action[1],
        sum.by_action[2],
        sum.by_action[3],
        sum.choices_ended,
        sum.finished_by_reason[1],
        sum.finished_by_reason[2],
        sum.finished_by_reason[3],
        idle.num_steps,
        idle.num_preemptions,
        idle.kv_blocks_free,
        idle.kv_blocks_total,
        warm_rss / 1024,
        end_rss / 1024,
        warm_heap as f64 / (1 << 20) as f64,
        half_heap as f64 / (1 << 20) as f64,
        end_heap as f64 / (1 << 20) as f64,
    );
    // Flat after warm-up, measured with the engine idle: a leak of a request's state (prompt, outputs, events,
    // strings: a kilobyte or more each) grows the heap by hundreds of KiB in each half of thousands of requests;
    // a clean run's halves end within a few KiB of where they began, except for a buffer's one-time growth.
    let (first, second) = (half_heap - warm_heap, end_heap - half_heap);
    assert!(
        first.min(second) < LEAK_BYTES_PER_HALF,
        "the live heap grew in both halves ({first} and {second} bytes): a leak"
    );
    engine_free(engine);
    assert_eq!(last_error(), "");
}
