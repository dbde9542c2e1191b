//! `engine_metrics_text`'s content on the real model: after requests that end each way, the counters by finish
//! reason, the token counters and the histograms' counts are what those requests make them, and the text keeps
//! the exposition format's rules (one HELP and TYPE per family, cumulative buckets ending at +Inf, `_count` equal
//! to the +Inf bucket). The Python end-to-end test parses the same text with the official client library.

mod common;

use std::collections::HashMap;

use common::{chat_ids, engine};
use ember::engine::{EngineConfig, RequestOptions, SubmitRequest};
use ember::protocol::prometheus::metrics_text;

/// Every sample: `name{labels}` → value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {l:?}"));
            (name.to_owned(), value.parse().unwrap_or_else(|_| panic!("a number: {l:?}")))
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
    assert_eq!((s["ember_num_requests_running"], s["ember_waiting_requests"]), (0.0, 0.0));
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
