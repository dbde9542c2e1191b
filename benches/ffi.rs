//! Nanoseconds per call of the two C functions a host calls most: `engine_get_timing_metrics` (a metrics read)
//! and `engine_poll` of an ended request (`EMBER_STATUS_STREAM_DONE`, answered at once: what a host's last poll
//! costs). Both are dominated by the C boundary's fixed costs: the registry lookup (a read lock and an `Arc` clone), the
//! thread-local last error, the request's own lock.
//!
//! Run: `cargo bench --bench ffi`. Needs the model (`scripts/fetch-model.sh`, or `EMBER_MODEL`): one short
//! request is generated first, so that there are metrics to read and an ended stream to poll.

use std::ffi::CString;
use std::hint::black_box;
use std::mem::size_of;
use std::ptr;
use std::time::Instant;

use ember::ffi::{
    engine_free, engine_get_timing_metrics, engine_new, engine_poll, engine_request_free, engine_submit, EmberEngine,
    EmberEvent, EmberEventKind, EmberFinishReason, EmberPerRequestTimingMetrics, EmberRequest, EmberStatus,
};
use ember::model::path::resolve_model_path;

/// Calls per timed round, and rounds (the median round is reported).
const CALLS: u32 = 200_000;
const ROUNDS: usize = 7;

/// The median over rounds of the nanoseconds per call of `f`.
fn ns_per_call(mut f: impl FnMut()) -> f64 {
    for _ in 0..CALLS / 10 {
        f();
    }
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..CALLS {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn main() {
    let model = resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
    let config = serde_json::json!({"model": model, "threads": 1, "kv_cache_tokens": 1024}).to_string();
    let config = CString::new(config).unwrap();
    let request_json = CString::new(r#"{"prompt": "Hi", "max_tokens": 4, "temperature": 0}"#).unwrap();

    let mut engine: *mut EmberEngine = ptr::null_mut();
    let mut request: *mut EmberRequest = ptr::null_mut();
    let empty_event = EmberEvent {
        kind: EmberEventKind::Error,
        choice: 0,
        text: ptr::null(),
        text_len: 0,
        num_tokens: 0,
        finish_reason: EmberFinishReason::None,
    };
    let mut event = empty_event;
    // SAFETY: NUL-terminated strings and writable out pointers; handles from ember.
    unsafe {
        assert_eq!(engine_new(config.as_ptr(), &mut engine), EmberStatus::Ok);
        assert_eq!(engine_submit(engine, request_json.as_ptr(), &mut request), EmberStatus::Ok);
        while event.kind != EmberEventKind::Finished {
            assert_eq!(engine_poll(engine, request, -1, &mut event), EmberStatus::Ok);
        }
        assert_eq!(engine_poll(engine, request, 0, &mut event), EmberStatus::StreamDone);
    }

    let mut metrics = EmberPerRequestTimingMetrics {
        struct_size: size_of::<EmberPerRequestTimingMetrics>() as u32,
        present: 0,
        time_to_first_token_ms: 0.0,
        generation_time_ms: 0.0,
        queue_time_ms: 0.0,
        mean_itl_ms: 0.0,
        tokens_per_second: 0.0,
    };
    let metrics_ns = ns_per_call(|| {
        // SAFETY: a live request handle and a writable, correctly sized struct.
        let status = unsafe { engine_get_timing_metrics(request, &mut metrics) };
        black_box((status, &metrics));
    });
    let poll_ns = ns_per_call(|| {
        // SAFETY: live handles and a writable event.
        let status = unsafe { engine_poll(engine, request, 0, &mut event) };
        black_box((status, &event));
    });
    assert_eq!(event.kind, EmberEventKind::Finished, "STREAM_DONE leaves the event untouched");

    engine_request_free(request);
    engine_free(engine);

    println!("{:<40} {:>10}", "call", "ns/call");
    println!("{:<40} {:>10.1}", "engine_get_timing_metrics", metrics_ns);
    println!("{:<40} {:>10.1}", "engine_poll (ended: STREAM_DONE)", poll_ns);
    println!(
        r#"{{"bench": "ffi", "engine_get_timing_metrics_ns": {metrics_ns:.1}, "engine_poll_done_ns": {poll_ns:.1}}}"#
    );
}
