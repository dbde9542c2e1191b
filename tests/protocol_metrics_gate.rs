//! The per-request metrics double gate through the protocol, on the real model: for every combination of the
//! engine flag, `include_metrics`, the response mode (whole body, stream, stream with usage), `n` and the number
//! of prompts, exactly where `metrics` appears, is `null`, or is absent; and that the five numbers agree with
//! each other as `src/engine/observe/metrics.rs` defines them. llama.cpp's `timings` object follows the response-level
//! `metrics` everywhere, and its numbers are the same ones.

mod common;

use ember::engine::metrics::{LlamaCppTimings, PerRequestTimingMetrics};
use ember::engine::{Engine, EngineConfig};
use ember::protocol::{ApiRequest, ChunkPoll};
use serde_json::{json, Value};

/// Every request generates exactly this many tokens per choice (`ignore_eos`).
const TOKENS: u64 = 3;
const METRIC_NAMES: [&str; 5] =
    ["time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second"];
/// llama-server's `timings` fields, in its order.
const TIMINGS_NAMES: [&str; 9] = [
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Whole,
    Stream,
    StreamWithUsage,
}

/// The request shapes: one choice, `n = 2`, and two completion prompts.
#[derive(Clone, Copy, Debug)]
enum Shape {
    OneChoice,
    TwoSamples,
    TwoPrompts,
}

impl Shape {
    fn input(self) -> Value {
        match self {
            // A system message of our own keeps the template's long default one out: short prompts, fast tests.
            Shape::OneChoice => {
                json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "7 times 8?"}]})
            }
            Shape::TwoSamples => {
                json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "A color?"}], "n": 2})
            }
            Shape::TwoPrompts => json!({"prompt": ["The capital of France is", "One, two, three,"]}),
        }
    }

    fn choices(self) -> usize {
        match self {
            Shape::OneChoice => 1,
            Shape::TwoSamples | Shape::TwoPrompts => 2,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Case {
    include_metrics: bool,
    include_choice_metrics: bool,
    mode: Mode,
    shape: Shape,
}

impl Case {
    fn body(self) -> String {
        let mut body = self.shape.input();
        let o = body.as_object_mut().unwrap();
        o.insert("max_tokens".into(), json!(TOKENS));
        o.insert("ignore_eos".into(), json!(true));
        o.insert("include_metrics".into(), json!(self.include_metrics));
        o.insert("include_choice_metrics".into(), json!(self.include_choice_metrics));
        o.insert("stream".into(), json!(self.mode != Mode::Whole));
        if self.mode == Mode::StreamWithUsage {
            o.insert("stream_options".into(), json!({"include_usage": true}));
        }
        body.to_string()
    }
}

fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for include_metrics in [false, true] {
        for include_choice_metrics in [false, true] {
            for mode in [Mode::Whole, Mode::Stream, Mode::StreamWithUsage] {
                for shape in [Shape::OneChoice, Shape::TwoSamples, Shape::TwoPrompts] {
                    cases.push(Case { include_metrics, include_choice_metrics, mode, shape });
                }
            }
        }
    }
    cases
}

fn engine(enable_per_request_metrics: bool) -> Engine {
    common::engine(EngineConfig { enable_per_request_metrics, kv_cache_tokens: 4096, ..Default::default() })
}

/// Every chunk of a stream, parsed, up to `Done`.
fn chunks(request: &mut ApiRequest) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        match request.next_chunk_json(None) {
            ChunkPoll::Chunk(json) => out.push(serde_json::from_str(&json).unwrap()),
            ChunkPoll::Done => return out,
            ChunkPoll::TimedOut => panic!("an unbounded wait timed out"),
        }
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The five fields, as the engine computed them for `choice`, and consistent with each other for `tokens`
/// generated tokens: `mean_itl = generation / (n − 1)` and `tokens_per_second = n / ((ttft + generation) / 1000)`
/// (both intervals start where the other ends, so together they span scheduling → last token).
fn check_metrics(m: &Value, engine_view: PerRequestTimingMetrics, tokens: u64, what: &str) {
    // serde_json keeps the body's key order (its `preserve_order` feature): the fields in the list's order.
    let keys: Vec<&str> =
        m.as_object().unwrap_or_else(|| panic!("{what}: not an object: {m}")).keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, METRIC_NAMES, "{what}");
    let field = |name: &str| m[name].as_f64().unwrap_or_else(|| panic!("{what}: {name} is {}", m[name]));
    let (ttft, generation, queue) =
        (field("time_to_first_token_ms"), field("generation_time_ms"), field("queue_time_ms"));
    assert!(ttft >= 0.0 && generation >= 0.0 && queue >= 0.0, "{what}: {m}");
    let n = tokens as f64;
    assert!(close(field("mean_itl_ms"), generation / (n - 1.0)), "{what}: {m}");
    assert!(close(field("tokens_per_second"), n / ((ttft + generation) / 1000.0)), "{what}: {m}");
    // The body reports the engine's own numbers (to the precision of serde_json's default float parsing, which
    // may be one unit in the last place off: the text itself is the shortest exact representation).
    let engine_view = [
        engine_view.time_to_first_token_ms,
        engine_view.generation_time_ms,
        engine_view.queue_time_ms,
        engine_view.mean_itl_ms,
        engine_view.tokens_per_second,
    ];
    for (name, expected) in METRIC_NAMES.iter().zip(engine_view) {
        assert!(close(field(name), expected.unwrap()), "{what}: {name} {m} vs {expected:?}");
    }
}

/// llama.cpp's `timings` of a one-choice request of `tokens` tokens: its counts add up to `usage`, its times are
/// the `metrics` ones (`m`, already checked), its rates follow from them, and it reports the engine's numbers.
fn check_timings(t: &Value, engine_view: LlamaCppTimings, m: &Value, usage: &Value, tokens: u64, what: &str) {
    let keys: Vec<&str> =
        t.as_object().unwrap_or_else(|| panic!("{what}: not an object: {t}")).keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, TIMINGS_NAMES, "{what}");
    let field = |name: &str| t[name].as_f64().unwrap_or_else(|| panic!("{what}: {name} is {}", t[name]));
    assert_eq!(t["cache_n"], usage["prompt_tokens_details"]["cached_tokens"], "{what}: {t}");
    assert_eq!(t["cache_n"].as_u64().unwrap() + t["prompt_n"].as_u64().unwrap(), usage["prompt_tokens"], "{what}");
    assert_eq!((t["predicted_n"].as_u64(), usage["completion_tokens"].as_u64()), (Some(tokens), Some(tokens)));
    assert_eq!((&t["prompt_ms"], &t["predicted_ms"]), (&m["time_to_first_token_ms"], &m["generation_time_ms"]));
    assert_eq!(t["predicted_per_token_ms"], m["mean_itl_ms"], "{what}");
    let (prompt_n, prompt_ms) = (field("prompt_n"), field("prompt_ms"));
    assert!(close(field("prompt_per_token_ms"), prompt_ms / prompt_n), "{what}: {t}");
    assert!(close(field("prompt_per_second"), prompt_n * 1000.0 / prompt_ms), "{what}: {t}");
    let gaps = tokens as f64 - 1.0;
    assert!(close(field("predicted_per_second"), gaps * 1000.0 / field("predicted_ms")), "{what}: {t}");
    let engine_view = [
        engine_view.prompt_ms,
        engine_view.prompt_per_token_ms,
        engine_view.prompt_per_second,
        engine_view.predicted_ms,
        engine_view.predicted_per_token_ms,
        engine_view.predicted_per_second,
    ];
    let timed = ["prompt_ms", "prompt_per_token_ms", "prompt_per_second"].into_iter().chain([
        "predicted_ms",
        "predicted_per_token_ms",
        "predicted_per_second",
    ]);
    for (name, expected) in timed.zip(engine_view) {
        assert!(close(field(name), expected.unwrap()), "{what}: {name} {t} vs {expected:?}");
    }
}

/// Runs every case on one engine and checks where metrics appear.
fn check_every_case(enable_per_request_metrics: bool) {
    let e = engine(enable_per_request_metrics);
    let cases = all_cases();
    let mut requests: Vec<ApiRequest> = cases
        .iter()
        .map(|c| ApiRequest::submit(&e, &c.body(), None).unwrap_or_else(|err| panic!("{c:?}: {err}")))
        .collect();
    for (case, request) in cases.iter().zip(&mut requests) {
        let what = format!("engine flag {enable_per_request_metrics}, {case:?}");
        let open = enable_per_request_metrics && case.include_metrics;
        let choices = case.shape.choices();
        // The response-level `metrics`, `timings` and `usage`, and each choice's `metrics`.
        let (top, timings, usage, per_choice): (Option<Value>, Option<Value>, Value, Vec<Option<Value>>) =
            match case.mode {
                Mode::Whole => {
                    request.handle().wait();
                    let body: Value = serde_json::from_str(&request.response_json().unwrap()).unwrap();
                    let per_choice = (0..choices).map(|i| body["choices"][i].get("metrics").cloned()).collect();
                    (body.get("metrics").cloned(), body.get("timings").cloned(), body["usage"].clone(), per_choice)
                }
                Mode::Stream | Mode::StreamWithUsage => {
                    let chunks = chunks(request);
                    let finish = |i: usize| {
                        chunks
                            .iter()
                            .filter_map(|c| c["choices"].as_array().and_then(|l| l.first()))
                            .find(|c| c["index"] == json!(i) && !c["finish_reason"].is_null())
                            .unwrap_or_else(|| panic!("{what}: no finish chunk for choice {i}"))
                            .clone()
                    };
                    let per_choice = (0..choices).map(|i| finish(i).get("metrics").cloned()).collect();
                    let (last, others) = chunks.split_last().unwrap();
                    assert!(others.iter().all(|c| c.get("metrics").is_none()), "{what}: metrics before the last chunk");
                    assert!(others.iter().all(|c| c.get("timings").is_none()), "{what}: timings before the last chunk");
                    if case.mode == Mode::Stream {
                        assert!(last.get("usage").is_none(), "{what}");
                    } else {
                        assert_eq!(last["choices"], json!([]), "{what}: the usage chunk is last");
                    }
                    (last.get("metrics").cloned(), last.get("timings").cloned(), last["usage"].clone(), per_choice)
                }
            };
        let carried = open && case.mode != Mode::Stream;
        match (&top, carried, choices) {
            (None, false, _) => {}
            (Some(Value::Null), true, 2) => {}
            (Some(m), true, 1) => check_metrics(m, request.handle().timing_metrics(0), TOKENS, &what),
            _ => panic!("{what}: response metrics {top:?}"),
        }
        match (&timings, carried, choices) {
            (None, false, _) => {}
            (Some(Value::Null), true, 2) => {}
            (Some(t), true, 1) => {
                let m = top.as_ref().unwrap();
                check_timings(t, request.handle().llamacpp_timings(0), m, &usage, TOKENS, &what)
            }
            _ => panic!("{what}: timings {timings:?}"),
        }
        for (i, m) in per_choice.iter().enumerate() {
            match (m, carried && case.include_choice_metrics) {
                (None, false) => {}
                (Some(m), true) => check_metrics(m, request.handle().timing_metrics(i), TOKENS, &what),
                _ => panic!("{what}: choice {i} metrics {m:?}"),
            }
        }
    }
}

#[test]
fn metrics_are_absent_when_the_engine_flag_is_off() {
    check_every_case(false);
}

#[test]
fn metrics_follow_the_request_when_the_engine_flag_is_on() {
    check_every_case(true);
}

#[test]
fn usage_counts_each_prompt_once_and_every_choice() {
    let e = engine(true);
    let body = json!({"prompt": [[1, 2, 3], [4, 5]], "n": 2, "max_tokens": TOKENS, "ignore_eos": true});
    let request = ApiRequest::submit(&e, &body.to_string(), None).unwrap();
    request.handle().wait();
    let body: Value = serde_json::from_str(&request.response_json().unwrap()).unwrap();
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 5, "completion_tokens": 4 * TOKENS, "total_tokens": 5 + 4 * TOKENS,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
}

#[test]
fn one_token_has_null_mean_itl_and_a_defined_rate() {
    let e = engine(true);
    let body = json!({"prompt": "Hello", "max_tokens": 1, "ignore_eos": true, "include_metrics": true});
    let request = ApiRequest::submit(&e, &body.to_string(), None).unwrap();
    request.handle().wait();
    let m = serde_json::from_str::<Value>(&request.response_json().unwrap()).unwrap()["metrics"].clone();
    assert_eq!((m["mean_itl_ms"].clone(), m["generation_time_ms"].clone()), (Value::Null, json!(0.0)));
    let ttft = m["time_to_first_token_ms"].as_f64().unwrap();
    assert!(close(m["tokens_per_second"].as_f64().unwrap(), 1.0 / (ttft / 1000.0)), "{m}");
}

#[test]
fn one_token_has_null_decode_rates_in_timings() {
    let e = engine(true);
    let body = json!({"prompt": "Hello", "max_tokens": 1, "ignore_eos": true, "include_metrics": true});
    let request = ApiRequest::submit(&e, &body.to_string(), None).unwrap();
    request.handle().wait();
    let t = serde_json::from_str::<Value>(&request.response_json().unwrap()).unwrap()["timings"].clone();
    assert_eq!((t["predicted_n"].clone(), t["predicted_ms"].clone()), (json!(1), json!(0.0)));
    assert_eq!((t["predicted_per_token_ms"].clone(), t["predicted_per_second"].clone()), (Value::Null, Value::Null));
    assert!(t["prompt_per_second"].as_f64().is_some_and(f64::is_finite), "{t}");
}

#[test]
fn a_repeated_prompt_reports_its_cached_tokens_in_timings() {
    let e = engine(true);
    let prompt = "One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen, fourteen, \
                  fifteen, sixteen, seventeen, eighteen, nineteen, twenty, twenty-one, twenty-two, twenty-three";
    let body = json!({"prompt": prompt, "max_tokens": 2, "ignore_eos": true, "include_metrics": true});
    let run = || {
        let request = ApiRequest::submit(&e, &body.to_string(), None).unwrap();
        request.handle().wait();
        serde_json::from_str::<Value>(&request.response_json().unwrap()).unwrap()
    };
    let (first, second) = (run(), run());
    assert_eq!(first["timings"]["cache_n"], json!(0), "{first}");
    let cached = second["timings"]["cache_n"].as_u64().unwrap();
    assert!(cached > 0, "the second run finds the first one's blocks: {second}");
    assert_eq!(second["usage"]["prompt_tokens_details"]["cached_tokens"], json!(cached));
    let prompt_tokens = second["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(second["timings"]["prompt_n"], json!(prompt_tokens - cached));
}

#[test]
fn the_metrics_options_conflict_is_a_configuration_error_from_json() {
    let error = EngineConfig::from_json(r#"{"enable_per_request_metrics": true, "disable_log_stats": true}"#)
        .expect_err("the two options contradict each other");
    assert_eq!(error.options, ["enable_per_request_metrics", "disable_log_stats"]);
    // Each alone is fine; without stats, a request asking for metrics gets none (the engine half is closed).
    assert!(EngineConfig::from_json(r#"{"enable_per_request_metrics": true}"#).is_ok());
    let config = EngineConfig::from_json(r#"{"disable_log_stats": true, "kv_cache_tokens": 1024}"#).unwrap();
    let e = common::engine(config);
    let body = json!({"prompt": "Hi", "max_tokens": 2, "include_metrics": true, "include_choice_metrics": true});
    let request = ApiRequest::submit(&e, &body.to_string(), None).unwrap();
    request.handle().wait();
    let body: Value = serde_json::from_str(&request.response_json().unwrap()).unwrap();
    assert!(body.get("metrics").is_none() && body["choices"][0].get("metrics").is_none(), "{body}");
}
