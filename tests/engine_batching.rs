//! Continuous batching on the real model: outputs do not depend on what else is running, on chunked prefill or
//! on preemption; cancellation frees the KV cache.

mod common;

use common::{engine, greedy, greedy_exactly, ids_of, MESSAGES};
use ember::engine::{EngineConfig, EventPoll, FinishReason, RequestEvent};

const MAX_TOKENS: usize = 12;

/// Each message alone on an idle engine.
fn alone() -> Vec<Vec<u32>> {
    let e = engine(EngineConfig::default());
    MESSAGES.iter().map(|m| ids_of(&e.submit(greedy(m, MAX_TOKENS)).unwrap())).collect()
}

#[test]
fn sixteen_concurrent_requests_match_each_run_alone() {
    let expected = alone();
    // Small token budget: prompts are prefilled in chunks, mixed with the others' decodes.
    for budget in [512, 24] {
        let e = engine(EngineConfig { max_num_batched_tokens: Some(budget), ..Default::default() });
        let handles: Vec<_> = MESSAGES.iter().map(|m| e.submit(greedy(m, MAX_TOKENS)).unwrap()).collect();
        for (i, h) in handles.iter().enumerate() {
            assert_eq!(ids_of(h), expected[i], "budget {budget}, message {:?}", MESSAGES[i]);
        }
        assert_eq!(e.kv_blocks().0, e.kv_blocks().1, "all blocks free again");
        assert_eq!(e.kv_window_blocks(), None, "a llama model has no sliding-window layers, so no window pool");
    }
}

#[test]
fn preemption_under_a_tiny_cache_still_completes_everything_identically() {
    const GROWN: usize = 24;
    let full = |m: &str| greedy_exactly(m, GROWN);
    let idle = engine(EngineConfig::default());
    let expected: Vec<Vec<u32>> = MESSAGES.iter().map(|m| ids_of(&idle.submit(full(m)).unwrap())).collect();
    drop(idle);
    // 96 positions = 6 blocks: two or three sequences fit at a time, and each needs more as it grows by 24, so
    // admitted ones get preempted.
    let e = engine(EngineConfig { kv_cache_tokens: 96, ..Default::default() });
    let handles: Vec<_> = MESSAGES.iter().map(|m| e.submit(full(m)).unwrap()).collect();
    let mut preemptions = 0;
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(ids_of(h), expected[i], "message {:?}", MESSAGES[i]);
        preemptions += h.stats(0).unwrap().num_preemptions;
    }
    assert!(preemptions > 0, "the cache was meant to be too small for all sequences at once");
    assert_eq!(e.kv_blocks().0, e.kv_blocks().1);
}

#[test]
fn cancellation_mid_generation_frees_its_blocks() {
    let e = engine(EngineConfig::default());
    let h = e.submit(greedy("Count from 1 to 100.", 200)).unwrap();
    let mut tokens = 0;
    while tokens < 3 {
        match h.poll(None) {
            EventPoll::Event(RequestEvent::Delta { tokens: t, .. }) => tokens += t,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(e.kv_blocks().0 < e.kv_blocks().1, "the running request holds blocks");
    h.cancel();
    h.wait();
    assert_eq!(h.choices()[0].finish_reason, Some(FinishReason::Cancelled));
    assert!(h.choices()[0].completion_tokens < 200);
    assert_eq!(e.kv_blocks().0, e.kv_blocks().1, "cancelled request's blocks are free");
    assert_eq!((e.num_running(), e.num_waiting()), (0, 0));
    // The cancellation is the stream's final event, handed out once; every poll after it answers `Done` at once.
    let mut finishes = Vec::new();
    loop {
        match h.poll(None) {
            EventPoll::Event(RequestEvent::Finished { reason, .. }) => finishes.push(reason),
            EventPoll::Event(RequestEvent::Delta { .. }) => {}
            EventPoll::Done => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(finishes, [FinishReason::Cancelled]);
    assert_eq!(h.poll(None), EventPoll::Done);
}

#[test]
fn a_cancelled_waiting_request_never_runs() {
    let e = engine(EngineConfig { max_num_seqs: 1, ..Default::default() });
    let first = e.submit(greedy("Count from 1 to 20.", 16)).unwrap();
    let second = e.submit(greedy("hi", 16)).unwrap();
    second.cancel();
    second.wait();
    assert_eq!(second.choices()[0].finish_reason, Some(FinishReason::Cancelled));
    first.wait();
    assert_eq!(first.choices()[0].completion_tokens, 16);
}

#[test]
fn shutdown_cancels_what_is_in_flight() {
    let mut e = engine(EngineConfig::default());
    let h = e.submit(greedy("Count from 1 to 100.", 300)).unwrap();
    e.shutdown();
    h.wait();
    assert_eq!(h.choices()[0].finish_reason, Some(FinishReason::Cancelled));
    assert!(matches!(e.submit(greedy("hi", 4)), Err(ember::engine::SubmitError::EngineStopped)));
}

/// The engine says which kernel path serves it: once in its start line (through the host's logger, never on
/// stderr) and in `cpu_serving`, as the C API's `engine_get_stats` reports it.
#[test]
fn the_kernel_path_is_logged_at_start_and_reported() {
    use std::sync::{Arc, Mutex};

    use ember::backend::cpu::kernels::kernels;
    use ember::engine::{Engine, Logger};

    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    let logger = Logger::new(move |level, line| sink.lock().unwrap().push(format!("{}: {line}", level.as_str())));
    let config = EngineConfig { threads: 2, ..EngineConfig::default() };
    let e = Engine::with_model(config, common::model(), logger).unwrap_or_else(|err| panic!("{err}"));
    let serving = e.cpu_serving().expect("the engine runs on the CPU");
    assert_eq!((serving.kernels, serving.threads), (kernels().name, 2));
    let lines = lines.lock().unwrap();
    let started: Vec<&String> = lines.iter().filter(|l| l.contains("engine started")).collect();
    assert_eq!(started.len(), 1, "{lines:?}");
    assert!(started[0].starts_with("info: ") && started[0].contains(&format!("cpu ({}", kernels().name)), "{lines:?}");
}
