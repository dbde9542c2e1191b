//! Admission on the real model: backpressure (`max_waiting_requests`: a submit beyond it is refused at once,
//! nothing queued), deadlines (`deadline_ms`: a request ends with `Deadline`, waiting or generating, its output
//! and metrics intact) and priorities (`priority`: a high-priority request does not wait behind a full batch of
//! low-priority ones). Every wait is on an event (a delta, a request's end), never a sleep.

mod common;

use common::{chat_ids, engine};
use ember::engine::{Engine, EngineConfig, EventPoll, FinishReason, RequestEvent, RequestHandle, SubmitError};
use ember::engine::{RequestOptions, SubmitRequest};

/// A request that generates until stopped: `max_tokens` tokens past end-of-generation.
fn long(max_tokens: usize) -> SubmitRequest {
    SubmitRequest::with_options(
        chat_ids("Tell me a story."),
        RequestOptions { max_tokens: Some(max_tokens), ignore_eos: true, ..Default::default() },
    )
}

/// Waits for the request's first text: it has started generating.
fn first_delta(h: &RequestHandle) {
    match h.poll(None) {
        EventPoll::Event(RequestEvent::Delta { .. }) => {}
        EventPoll::Event(other) => panic!("ended before its first text: {other:?}"),
        EventPoll::Done | EventPoll::TimedOut => panic!("ended before its first text"),
    }
}

/// An engine with one seat: a running request keeps every other one waiting.
fn one_seat(extra: EngineConfig) -> Engine {
    engine(EngineConfig { max_num_seqs: 1, ..extra })
}

#[test]
fn a_submit_beyond_max_waiting_requests_is_refused_at_once_and_queues_nothing() {
    let e = one_seat(EngineConfig { max_waiting_requests: Some(2), ..Default::default() });
    assert_eq!(e.waiting_requests(), (0, 2));
    let running = e.submit(long(4000)).unwrap();
    first_delta(&running);
    let waiting: Vec<_> = (0..2).map(|_| e.submit(long(8)).unwrap()).collect();
    assert_eq!(e.waiting_requests(), (2, 2));
    match e.submit(long(8)) {
        Err(SubmitError::Overloaded { limit: 2 }) => {}
        other => panic!("expected Overloaded, got {other:?}"),
    }
    assert_eq!(e.waiting_requests(), (2, 2), "nothing was queued");
    // A waiting request that is cancelled gives its place back, and so does one that starts.
    waiting[0].cancel();
    waiting[0].wait();
    assert_eq!(e.waiting_requests().0, 1);
    let third = e.submit(long(8)).expect("a place again");
    running.cancel();
    first_delta(&waiting[1]);
    for h in [&waiting[1], &third] {
        h.wait();
        assert_eq!(h.choices()[0].finish_reason, Some(FinishReason::Length));
    }
    assert_eq!(e.waiting_requests().0, 0);
    assert_eq!(waiting[0].choices()[0].finish_reason, Some(FinishReason::Cancelled));
}

#[test]
fn a_deadline_ends_a_generating_request_with_its_output_and_metrics() {
    let e = engine(EngineConfig { enable_per_request_metrics: true, ..Default::default() });
    let h = e.submit(long(4000).map_options(|o| RequestOptions { deadline_ms: Some(300), ..o })).unwrap();
    h.wait();
    let c = h.choices().remove(0);
    assert_eq!(c.finish_reason, Some(FinishReason::Deadline));
    assert!(!c.token_ids.is_empty() && c.token_ids.len() < 4000, "{} tokens", c.token_ids.len());
    assert_eq!(c.completion_tokens as usize, c.token_ids.len());
    let (m, x) = (h.timing_metrics(0), h.extended_metrics(0));
    assert!(m.time_to_first_token_ms.is_some() && m.mean_itl_ms.is_some() && x.e2e_latency_ms.is_some());
    assert_eq!(h.stats(0).unwrap().num_generation_tokens as usize, c.token_ids.len());
}

#[test]
fn a_deadline_ends_a_request_still_waiting_to_start() {
    let e = one_seat(EngineConfig::default());
    let running = e.submit(long(4000)).unwrap();
    first_delta(&running);
    let late = e.submit(long(8).map_options(|o| RequestOptions { deadline_ms: Some(50), ..o })).unwrap();
    late.wait();
    let c = late.choices().remove(0);
    assert_eq!((c.finish_reason, c.completion_tokens), (Some(FinishReason::Deadline), 0));
    let s = late.stats(0).unwrap();
    assert!(s.scheduled_ts.is_none() && s.finished_ts.is_some(), "never scheduled, ended");
    assert!(late.extended_metrics(0).e2e_latency_ms.is_some());
    assert_eq!(e.waiting_requests().0, 0, "its place was given back");
    assert!(!running.is_finished(), "the running request went on");
    running.cancel();
}

#[test]
fn a_high_priority_request_does_not_wait_behind_a_full_batch_of_low_priority_ones() {
    let e = engine(EngineConfig { max_num_seqs: 2, ..Default::default() });
    let low = |_| long(200).map_options(|o| RequestOptions { priority: 5, ..o });
    let lows: Vec<_> = (0..3).map(|i| e.submit(low(i)).unwrap()).collect();
    first_delta(&lows[0]);
    first_delta(&lows[1]);
    let high = e.submit(long(6).map_options(|o| RequestOptions { priority: -1, ..o })).unwrap();
    high.wait();
    assert_eq!(high.choices()[0].finish_reason, Some(FinishReason::Length));
    // It started and finished while the low-priority requests still had most of their tokens to generate.
    assert!(lows.iter().all(|h| !h.is_finished()), "a low-priority request finished first");
    let preempted: u32 = lows.iter().map(|h| h.stats(0).unwrap().num_preemptions).sum();
    assert!(preempted >= 1, "a low-priority request gave way");
    assert_eq!(high.stats(0).unwrap().num_preemptions, 0);
    for h in &lows {
        h.cancel();
    }
}
