//! `engine_metrics_text`'s content on the real model: after requests that end each way, the counters by finish
//! reason, the token counters and the histograms' counts are what those requests make them, and the text keeps
//! the exposition format's rules (one HELP and TYPE per family, cumulative buckets ending at +Inf, `_count` equal
//! to the +Inf bucket). The Python end-to-end test parses the same text with the official client library.

mod common;

use std::collections::HashMap;

use common::{chat_ids, engine};
use ember::engine::{EngineConfig, EventPoll, RequestEvent, RequestHandle, RequestOptions, SubmitRequest};
use ember::protocol::prometheus::metrics_text;

/// The `model_name` of the test model's engine: its file's name without `.gguf`.
const MODEL_NAME: &str = "SmolLM2-135M-Instruct.Q4_1";

/// Every sample: `name{labels}` → value, with the `model_name` label every sample must carry first (checked,
/// then left out of the key: `name` alone, or `name{other labels}`).
fn samples(text: &str) -> HashMap<String, f64> {
    samples_of(text, MODEL_NAME)
}

fn samples_of(text: &str, model_name: &str) -> HashMap<String, f64> {
    let label = format!("model_name=\"{model_name}\"");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {l:?}"));
            let (name, labels) = series.split_once('{').unwrap_or_else(|| panic!("no labels: {l:?}"));
            let rest = labels.strip_prefix(&label).unwrap_or_else(|| panic!("not {label} first: {l:?}"));
            let key = match rest.strip_prefix(',') {
                Some(others) => format!("{name}{{{others}"),
                None => name.to_owned(),
            };
            (key, value.parse().unwrap_or_else(|_| panic!("a number: {l:?}")))
        })
        .collect()
}

#[test]
fn the_text_counts_what_the_requests_did() {
    let e = engine(EngineConfig { speculative: None, ..Default::default() });
    let ids = chat_ids("Name three colors.");
    let request = |max_tokens| {
        SubmitRequest::with_options(ids.clone(), RequestOptions { max_tokens: Some(max_tokens), ..Default::default() })
    };
    let length = e.submit(request(5).map_options(|o| RequestOptions { ignore_eos: true, ..o })).unwrap();
    let deadline = e
        .submit(request(4000).map_options(|o| RequestOptions { ignore_eos: true, deadline_ms: Some(1), ..o }))
        .unwrap();
    let cancelled = e.submit(request(4000).map_options(|o| RequestOptions { ignore_eos: true, ..o })).unwrap();
    cancelled.cancel();
    for h in [&length, &deadline, &cancelled] {
        h.wait();
    }
    let text = metrics_text(&e);
    let s = samples(&text);
    let reason = |r: &str| s[&format!("ember_request_success_total{{finished_reason=\"{r}\"}}")];
    assert_eq!((reason("length"), reason("deadline"), reason("cancelled"), reason("stop")), (1.0, 1.0, 1.0, 0.0));
    let tokens: Vec<u32> = [&length, &deadline, &cancelled].iter().map(|h| h.choices()[0].completion_tokens).collect();
    assert_eq!(s["ember_generation_tokens_total"], f64::from(tokens.iter().sum::<u32>()));
    assert_eq!(s["ember_prompt_tokens_total"], 3.0 * ids.len() as f64);
    assert_eq!(s["ember_e2e_request_latency_seconds_count"], 3.0, "every choice that ended");
    let gaps: u32 = tokens.iter().map(|n| n.saturating_sub(1)).sum();
    assert_eq!(s["ember_inter_token_latency_seconds_count"], f64::from(gaps), "one per gap between tokens");
    let with_a_token = tokens.iter().filter(|&&n| n > 0).count();
    assert_eq!(s["ember_time_to_first_token_seconds_count"], with_a_token as f64);
    assert_eq!((s["ember_num_requests_running"], s["ember_num_requests_waiting"]), (0.0, 0.0));
    assert!(!s.keys().any(|k| k.starts_with("vllm:")), "vLLM's names only when asked for");
    assert!(
        s.contains_key("ember_prefix_cache_hits_total") && !s.contains_key("ember_spec_decode_num_draft_tokens_total")
    );
    // Each family once; buckets cumulative, ending at +Inf = _count.
    let mut families: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()).collect();
    let n = families.len();
    families.sort_unstable();
    families.dedup();
    assert_eq!(families.len(), n, "a family is declared twice");
    for h in [
        "ember_time_to_first_token_seconds",
        "ember_inter_token_latency_seconds",
        "ember_request_queue_time_seconds",
        "ember_e2e_request_latency_seconds",
    ] {
        let buckets: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{h}_bucket")))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{h}: cumulative");
        assert_eq!(buckets.last().copied(), Some(s[&format!("{h}_count")]), "{h}: +Inf is the count");
        assert_eq!(s[&format!("{h}_bucket{{le=\"+Inf\"}}")], s[&format!("{h}_count")]);
    }
}

/// Waits for the request's first text: it has started generating.
fn first_delta(h: &RequestHandle) {
    match h.poll(None) {
        EventPoll::Event(RequestEvent::Delta { .. }) => {}
        other => panic!("ended before its first text: {other:?}"),
    }
}

/// A request of `n` choices that generates until stopped.
fn long(n: usize) -> SubmitRequest {
    let options = RequestOptions { max_tokens: Some(4000), ignore_eos: true, ..Default::default() };
    SubmitRequest { n, ..SubmitRequest::with_options(chat_ids("Tell me a story."), options) }
}

/// The gauges a load balancer reads count requests, not sequences: a running request of three choices is one
/// request running and three sequences; a request that cannot start yet is one waiting. A host that has seen a
/// request end sees it gone.
#[test]
fn the_request_gauges_count_requests_not_sequences() {
    let e = engine(EngineConfig { max_num_seqs: 3, speculative: None, ..Default::default() });
    let three = e.submit(long(3)).unwrap();
    first_delta(&three);
    let waiting = e.submit(long(2)).unwrap();
    let s = samples(&metrics_text(&e));
    assert_eq!((s["ember_num_requests_running"], s["ember_num_requests_waiting"]), (1.0, 1.0));
    // The sequence gauges are as of the engine's last step: all three choices were scheduled before the first
    // text came (the waiting request's two are counted once the engine has taken it in, at a step to come).
    assert_eq!(s["ember_num_sequences_running"], 3.0);
    assert!(s["ember_kv_cache_usage_perc"] > 0.0 && s["ember_kv_cache_usage_perc"] < 1.0);
    three.cancel();
    three.wait();
    first_delta(&waiting);
    let s = samples(&metrics_text(&e));
    assert_eq!((s["ember_num_requests_running"], s["ember_num_requests_waiting"]), (1.0, 0.0));
    waiting.cancel();
    waiting.wait();
    let s = samples(&metrics_text(&e));
    assert_eq!((s["ember_num_requests_running"], s["ember_num_requests_waiting"]), (0.0, 0.0));
    assert_eq!(s["ember_kv_cache_usage_perc"], 0.0, "every block free again (cached ones count as free)");
}

/// With `metrics_vllm_names`, the endpoint picker's metrics also come under vLLM's names, with ember's values and
/// the `model_name` given by `served_model_name`.
#[test]
fn vllm_names_carry_the_same_values() {
    let e = engine(EngineConfig {
        served_model_name: Some("smol \"chat\"".into()),
        metrics_vllm_names: true,
        speculative: None,
        ..Default::default()
    });
    let running = e.submit(long(1)).unwrap();
    first_delta(&running);
    let text = metrics_text(&e);
    let s = samples_of(&text, "smol \\\"chat\\\"");
    for (ours, theirs) in [
        ("ember_num_requests_waiting", "vllm:num_requests_waiting"),
        ("ember_num_requests_running", "vllm:num_requests_running"),
        ("ember_kv_cache_usage_perc", "vllm:kv_cache_usage_perc"),
        ("ember_kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        ("ember_prefix_cache_queries_total", "vllm:prefix_cache_queries_total"),
        ("ember_prefix_cache_hits_total", "vllm:prefix_cache_hits_total"),
    ] {
        assert_eq!(s[ours], s[theirs], "{theirs}");
        assert!(text.contains(&format!("# TYPE {theirs} ")), "{theirs} has its TYPE line");
    }
    assert_eq!(s["ember_num_requests_running"], 1.0);
    let info = "cache_config_info{block_size=\"16\",num_gpu_blocks=\"1024\"}";
    assert_eq!((s[&format!("ember_{info}")], s[&format!("vllm:{info}")]), (1.0, 1.0));
    running.cancel();
    running.wait();
}
