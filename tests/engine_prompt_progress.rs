//! Prompt progress (`return_progress`, `src/engine/observe/prompt_progress.rs`) on the real model: one event at
//! admission with what the prefix cache supplied, one per prefill chunk, the last with the whole prompt, all
//! before the first token; nothing without the option; and the timing metrics unchanged by it.

mod common;

use std::time::Duration;

use common::{chat_ids, engine, greedy};
use ember::engine::stats::{RequestStateStats, StepEvent};
use ember::engine::{
    EngineConfig, EventPoll, PromptProgress, RequestEvent, RequestHandle, RequestOptions, SubmitRequest,
};

/// Tokens per step: a prompt of a few dozen tokens takes several chunks.
const CHUNK: usize = 16;
const MESSAGE: &str = "Count from 1 to 20.";

fn config() -> EngineConfig {
    EngineConfig { max_num_batched_tokens: Some(CHUNK), ..Default::default() }
}

fn with_progress(request: SubmitRequest) -> SubmitRequest {
    request.map_options(|o| RequestOptions { return_progress: true, ..o })
}

/// Every event of an ended request (deltas merged, as one poll after the end takes them).
fn events(h: &RequestHandle) -> Vec<RequestEvent> {
    h.wait();
    let mut all = Vec::new();
    loop {
        match h.poll(Some(Duration::ZERO)) {
            EventPoll::Event(e) => all.push(e),
            EventPoll::Done => return all,
            EventPoll::TimedOut => panic!("an ended request has its events queued: {all:?}"),
        }
    }
}

/// The progress events, as (choice, progress), and the rest.
fn split(events: Vec<RequestEvent>) -> (Vec<(usize, PromptProgress)>, Vec<RequestEvent>) {
    let mut progress = Vec::new();
    let mut rest = Vec::new();
    for e in events {
        match e {
            RequestEvent::PromptProgress { choice, progress: p } => progress.push((choice, p)),
            other => rest.push(other),
        }
    }
    (progress, rest)
}

/// What a host reads of the request's progress: `processed` from `cached` to the prompt by chunks.
fn assert_chunks(progress: &[(usize, PromptProgress)], prompt: u32, cached: u32) {
    let computed = (prompt - cached) as usize;
    assert_eq!(progress.len(), 1 + computed.div_ceil(CHUNK), "admission, then one per chunk: {progress:?}");
    let mut expected = cached;
    for (i, &(choice, p)) in progress.iter().enumerate() {
        assert_eq!(choice, 0);
        assert_eq!((p.total, p.cached, p.processed), (prompt, cached, expected), "event {i}");
        expected = (expected + CHUNK as u32).min(prompt);
    }
    assert_eq!(progress[0].1.time_ms, 0, "the prompt begins at its admission");
    assert!(progress.windows(2).all(|w| w[0].1.time_ms <= w[1].1.time_ms), "{progress:?}");
}

#[test]
fn progress_comes_per_chunk_from_the_cached_prefix_to_the_whole_prompt_before_the_first_token() {
    let e = engine(config());
    let prompt = chat_ids(MESSAGE).len() as u32;
    assert!(prompt as usize > 2 * CHUNK, "several chunks: {prompt} tokens");
    let first = e.submit(with_progress(greedy(MESSAGE, 4))).unwrap();
    let (progress, rest) = split(events(&first));
    assert_chunks(&progress, prompt, 0);
    assert!(matches!(rest[0], RequestEvent::Delta { .. }), "then the text: {rest:?}");
    // The same prompt again: the prefix cache supplies its full blocks but the one of its last token.
    let again = e.submit(with_progress(greedy(MESSAGE, 4))).unwrap();
    let (progress, _) = split(events(&again));
    let cached = (prompt - 1) / 16 * 16;
    assert_eq!(again.cached_prompt_tokens(), cached);
    assert_chunks(&progress, prompt, cached);
}

#[test]
fn a_request_that_does_not_ask_gets_no_progress_and_the_same_events_and_metrics() {
    // Each on an engine of its own, so that neither finds the other's prompt cached.
    let (e1, e2) = (engine(config()), engine(config()));
    let plain = e1.submit(greedy(MESSAGE, 6)).unwrap();
    let asked = e2.submit(with_progress(greedy(MESSAGE, 6))).unwrap();
    let (none, plain_events) = split(events(&plain));
    let (some, asked_events) = split(events(&asked));
    assert!(none.is_empty() && !some.is_empty());
    assert_eq!(plain_events, asked_events, "the same events besides the progress");
    assert_eq!(plain.choices(), asked.choices());
    // The timing metrics come from the same records: the same steps (times aside) and tokens polled, and the
    // same metrics present.
    let (p, a) = (plain.stats(0).unwrap(), asked.stats(0).unwrap());
    assert_eq!(untimed(&p), untimed(&a));
    assert_eq!(p.num_polled_tokens, a.num_polled_tokens);
    assert_eq!(present(&plain), present(&asked));
}

/// Which of the request's timed metrics are present.
fn present(h: &RequestHandle) -> Vec<bool> {
    let (m, x) = (h.timing_metrics(0), h.extended_metrics(0));
    [
        m.time_to_first_token_ms,
        m.generation_time_ms,
        m.queue_time_ms,
        m.mean_itl_ms,
        m.tokens_per_second,
        x.e2e_latency_ms,
        x.ttft_from_arrival_ms,
        x.prefill_time_ms,
        x.prefill_tokens_per_second,
        x.itl_p50_ms,
        x.itl_p90_ms,
        x.itl_p99_ms,
        x.itl_max_ms,
        x.compute_share_ms,
        x.output_wait_ms,
    ]
    .map(|v| v.is_some())
    .to_vec()
}

/// A record with its timestamps zeroed: what does not depend on timing.
fn untimed(s: &RequestStateStats) -> RequestStateStats {
    let steps = s.steps.iter().map(|st| StepEvent { start_ts: 0.0, end_ts: 0.0, ..*st }).collect();
    RequestStateStats {
        arrival_time: 0.0,
        arrival_ts: None,
        queued_ts: None,
        scheduled_ts: None,
        first_token_ts: None,
        last_token_ts: None,
        finished_ts: None,
        token_ts: Vec::new(),
        steps,
        output_wait_s: 0.0,
        ..s.clone()
    }
}

#[test]
fn several_choices_of_one_prompt_report_it_once() {
    let e = engine(config());
    let request = SubmitRequest { n: 3, ..with_progress(greedy(MESSAGE, 3)) };
    let h = e.submit(request).unwrap();
    let (progress, _) = split(events(&h));
    assert!(!progress.is_empty());
    assert!(progress.iter().all(|&(choice, _)| choice == 0), "{progress:?}");
    assert_eq!(progress.last().unwrap().1.processed, chat_ids(MESSAGE).len() as u32);
}
