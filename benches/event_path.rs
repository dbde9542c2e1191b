//! What the engine-wide waiting point (`engine/output/ready_queue.rs`, behind `engine_wait_events`) adds per event,
//! against the per-request poll (`engine_poll`'s path). The engine's side is played by this program (it pushes
//! deltas into requests as the output stage does), so the figures are the paths' own, not a model's.
//!
//! - "same thread": nanoseconds to queue one delta and take it, over 64 requests in turn: by polling the request
//!   itself, or through the waiting point (its key queued, popped, the mark cleared, the event taken).
//! - "across threads": microseconds from one thread queueing a delta to another, blocked waiting, holding it
//!   (p50 and p99 over 20,000 events, one at a time): blocked in the request's poll, or in the waiting point.
//! - the waiting point once more with its descriptor asked for, as an epoll host has it: the pipe's byte then
//!   costs a write and a read per batch.
//!
//! Run: `cargo bench --bench event_path`. Prints a table and writes target/bench-event-path.json.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ember::engine::output::{CancelWaker, RequestShared};
use ember::engine::stats::EngineClock;
use ember::engine::{EventPoll, Ready, ReadyQueue, RequestHandle};

struct NoEngine;

impl CancelWaker for NoEngine {
    fn wake(&self) {}
}

const REQUESTS: usize = 64;
const SAME_THREAD_EVENTS: usize = 400_000;
const CROSS_THREAD_EVENTS: usize = 20_000;

fn requests(queue: Option<&Arc<ReadyQueue>>) -> Vec<(Arc<RequestShared>, RequestHandle)> {
    (0..REQUESTS)
        .map(|i| {
            let no_engine: Weak<dyn CancelWaker> = Weak::<NoEngine>::new();
            let shared = RequestShared::new(i as u64, 1, 1, false, EngineClock::new(), None, no_engine);
            let handle = RequestHandle::new(Arc::clone(&shared));
            if let Some(queue) = queue {
                handle.watch(queue, i as u64);
            }
            (shared, handle)
        })
        .collect()
}

/// A waiting point; `with_descriptor`: as an epoll host uses it, its descriptor asked for (and so kept).
fn waiting_point(with_descriptor: bool) -> Arc<ReadyQueue> {
    let queue = Arc::new(ReadyQueue::new().expect("a pipe"));
    if with_descriptor {
        queue.readiness_fd();
    }
    queue
}

/// Nanoseconds per event, queueing and taking on one thread.
fn same_thread(through_queue: bool, with_descriptor: bool) -> f64 {
    let queue = waiting_point(with_descriptor);
    let reqs = requests(through_queue.then_some(&queue));
    let start = Instant::now();
    for n in 0..SAME_THREAD_EVENTS {
        let (shared, handle) = &reqs[n % REQUESTS];
        shared.push_delta(0, "x".into(), 1, 0.0, Vec::new());
        if through_queue {
            let Ready::Keys(keys) = queue.wait(Some(Duration::ZERO), 1) else { panic!("a key waits") };
            let (_, handle) = &reqs[keys[0] as usize];
            handle.clear_ready_mark();
            assert!(handle.take_ready().is_some());
        } else {
            assert!(matches!(handle.poll(Some(Duration::ZERO)), EventPoll::Event(_)));
        }
    }
    start.elapsed().as_nanos() as f64 / SAME_THREAD_EVENTS as f64
}

/// p50 and p99 microseconds from a delta queued on one thread to its being taken on another that was blocked.
fn across_threads(through_queue: bool, with_descriptor: bool) -> (f64, f64) {
    let queue = waiting_point(with_descriptor);
    let reqs = Arc::new(requests(through_queue.then_some(&queue)));
    let sent_at = Arc::new(Mutex::new(Instant::now()));
    let taken = Arc::new(AtomicBool::new(true));
    let engine = {
        let (reqs, sent_at, taken) = (Arc::clone(&reqs), Arc::clone(&sent_at), Arc::clone(&taken));
        std::thread::spawn(move || {
            for n in 0..CROSS_THREAD_EVENTS {
                // One event at a time: the next only once the host has taken this one (and gone back to wait).
                while !taken.swap(false, Ordering::AcqRel) {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_micros(50)); // let the host block again
                let i = if through_queue { n % REQUESTS } else { 0 };
                *sent_at.lock().unwrap() = Instant::now();
                reqs[i].0.push_delta(0, "x".into(), 1, 0.0, Vec::new());
            }
        })
    };
    let mut latencies = Vec::with_capacity(CROSS_THREAD_EVENTS);
    for _ in 0..CROSS_THREAD_EVENTS {
        if through_queue {
            let Ready::Keys(keys) = queue.wait(None, 1) else { panic!("no timeout, no wakeup") };
            let (_, handle) = &reqs[keys[0] as usize];
            handle.clear_ready_mark();
            assert!(handle.take_ready().is_some());
        } else {
            assert!(matches!(reqs[0].1.poll(None), EventPoll::Event(_)));
        }
        latencies.push(sent_at.lock().unwrap().elapsed().as_secs_f64() * 1e6);
        taken.store(true, Ordering::Release);
    }
    engine.join().unwrap();
    latencies.sort_by(f64::total_cmp);
    (latencies[latencies.len() / 2], latencies[latencies.len() * 99 / 100])
}

fn main() {
    let rows = [
        ("per-request poll", false, false),
        ("waiting point", true, false),
        ("waiting point + descriptor", true, true),
    ];
    let mut results = Vec::new();
    println!("path                          same thread (ns/event)   across threads p50 / p99 (us)");
    for (name, through_queue, with_descriptor) in rows {
        let ns = same_thread(through_queue, with_descriptor);
        let (p50, p99) = across_threads(through_queue, with_descriptor);
        println!("{name:<28}  {ns:>22.0}   {p50:>10.1} / {p99:.1}");
        results.push(serde_json::json!({
            "path": name, "same_thread_ns": ns, "across_threads_p50_us": p50, "across_threads_p99_us": p99,
        }));
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-event-path.json");
    let json = serde_json::to_string_pretty(&results).unwrap() + "\n";
    std::fs::write(&path, json).expect("target/ is writable");
    println!("wrote {}", path.display());
}
