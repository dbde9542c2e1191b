//! Timing stats and metrics on the real model: ordering of timestamps, queue time separate from TTFT, per-choice
//! metrics, and the configuration gates.

mod common;

use common::{engine, greedy, MESSAGES};
use ember::engine::metrics;
use ember::engine::sampling::SamplingParams;
use ember::engine::{
    Engine, EngineConfig, EngineError, EventPoll, Logger, RequestEvent, RequestOptions, SubmitRequest,
};

#[test]
fn timestamps_are_ordered_for_every_request() {
    let e = engine(EngineConfig { max_num_seqs: 4, ..Default::default() });
    let handles: Vec<_> = MESSAGES[..8].iter().map(|m| e.submit(greedy(m, 8)).unwrap()).collect();
    for h in &handles {
        h.wait();
        let s = h.stats(0).expect("stats are on by default");
        let (q, sch, first, last) =
            (s.queued_ts.unwrap(), s.scheduled_ts.unwrap(), s.first_token_ts.unwrap(), s.last_token_ts.unwrap());
        assert!(s.arrival_ts.unwrap() <= q && q <= sch && sch <= first && first <= last, "{s:?}");
        assert!(last <= s.finished_ts.unwrap());
        assert_eq!(s.token_ts.len() as u32, s.num_generation_tokens);
        assert!(s.token_ts.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(s.num_generation_tokens, h.choices()[0].completion_tokens);
        assert_eq!(s.num_prompt_tokens, h.prompt_tokens());
        assert!(metrics::compute_share_s(&s) > 0.0 && metrics::prefill_time_s(&s) > 0.0);
        let computed = s.num_prompt_tokens - s.num_cached_prompt_tokens;
        assert_eq!(metrics::num_computed_prompt_tokens(&s), computed, "no preemption: each uncached token once");
        let m = h.timing_metrics(0);
        assert!(m.queue_time_ms.unwrap() >= 0.0 && m.time_to_first_token_ms.unwrap() >= 0.0);
        let n = s.num_generation_tokens;
        let expected_itl = m.generation_time_ms.unwrap() / f64::from(n - 1);
        assert!((m.mean_itl_ms.unwrap() - expected_itl).abs() < 1e-9);
        let x = h.extended_metrics(0);
        assert!(x.e2e_latency_ms.unwrap() >= x.ttft_from_arrival_ms.unwrap());
        assert_eq!(x.num_prompt_tokens, Some(h.prompt_tokens()));
        assert_eq!(h.token_times_ms(0).len() as u32, n);
    }
}

#[test]
fn a_request_behind_a_full_batch_has_queue_time_and_a_ttft_without_it() {
    let e = engine(EngineConfig { max_num_seqs: 1, ..Default::default() });
    let first = e.submit(greedy("Count from 1 to 20.", 16)).unwrap();
    let second = e.submit(greedy("hi", 4)).unwrap();
    first.wait();
    second.wait();
    let (a, b) = (first.stats(0).unwrap(), second.stats(0).unwrap());
    assert!(b.scheduled_ts.unwrap() >= a.last_token_ts.unwrap(), "admitted only after the first finished");
    let m = second.timing_metrics(0);
    let queue = m.queue_time_ms.unwrap();
    assert!(queue > 0.0);
    // TTFT counts from scheduling: the wait behind the first request is not in it.
    let ttft = m.time_to_first_token_ms.unwrap();
    let from_queue = (b.first_token_ts.unwrap() - b.queued_ts.unwrap()) * 1000.0;
    assert!((from_queue - (queue + ttft)).abs() < 1e-6);
    assert!(second.extended_metrics(0).ttft_from_arrival_ms.unwrap() >= queue + ttft);
}

#[test]
fn metrics_are_absent_when_stats_are_disabled() {
    let e = engine(EngineConfig { disable_log_stats: true, ..Default::default() });
    let h = e.submit(greedy("hi", 4)).unwrap();
    h.wait();
    assert_eq!(h.timing_metrics(0), Default::default());
    assert_eq!(h.extended_metrics(0), Default::default());
    assert!(h.stats(0).is_none() && h.token_times_ms(0).is_empty());
    assert!(h.choices()[0].completion_tokens > 0, "generation itself is unaffected");
}

#[test]
fn the_metrics_options_conflict_is_a_configuration_error() {
    let config = EngineConfig { enable_per_request_metrics: true, disable_log_stats: true, ..Default::default() };
    match Engine::with_model(config, common::model(), Logger::silent()) {
        Err(EngineError::Config(e)) => {
            assert_eq!(e.options, ["enable_per_request_metrics", "disable_log_stats"]);
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn each_choice_has_its_own_metrics_and_seeded_sampling_is_reproducible() {
    let e = engine(EngineConfig::default());
    let request = SubmitRequest {
        n: 3,
        ..greedy("Write a haiku about rain.", 10).map_options(|o| RequestOptions {
            sampling: SamplingParams { temperature: 1.0, seed: Some(7), ..Default::default() },
            ..o
        })
    };
    let a = e.submit(request.clone()).unwrap();
    let b = e.submit(request).unwrap();
    a.wait();
    b.wait();
    let (ca, cb) = (a.choices(), b.choices());
    assert_eq!(ca.len(), 3);
    assert_eq!(ca, cb, "same seed, same outputs, whatever ran beside them");
    assert!(ca[0].token_ids != ca[1].token_ids || ca[1].token_ids != ca[2].token_ids, "choices differ");
    for (choice, output) in ca.iter().enumerate() {
        let m = a.timing_metrics(choice);
        assert!(m.time_to_first_token_ms.is_some() && m.tokens_per_second.is_some());
        assert_eq!(a.stats(choice).unwrap().num_generation_tokens, output.completion_tokens);
    }
}

#[test]
fn output_wait_counts_time_tokens_spend_queued_for_the_host() {
    let e = engine(EngineConfig::default());
    let h = e.submit(greedy("Count from 1 to 20.", 8)).unwrap();
    h.wait(); // every token sits in the queue until now
    let mut polled = 0;
    while let EventPoll::Event(event) = h.poll(None) {
        if let RequestEvent::Delta { tokens, .. } = event {
            polled += tokens;
        }
    }
    assert!(polled > 0);
    let x = h.extended_metrics(0);
    assert!(x.output_wait_ms.unwrap() > 0.0);
    assert_eq!(h.stats(0).unwrap().num_polled_tokens, polled);
}
