//! What a bomb being refused costs the streams already running (issue 43's target: 8 streams' ITL p99 within
//! 1.5x of their p99 without it). On the real model, 8 chat streams of 192 tokens each; beside them, a host
//! thread submits bombs back to back until the streams end: a chat template that spends its whole fuel on one
//! message (refused at submit), or a grammar bomb (refused at submit). Each is rendered or compiled on the
//! submitting thread, never the engine's, so the cost to the streams is only the CPU they share.
//!
//! `cargo bench --bench bomb_itl [-- --threads N] [--rounds R] [--json PATH]`: the three kinds alternate, R rounds;
//! prints each run's ITL p50/p99 and the bombs refused, then the medians, and writes them as JSON (default
//! `target/bench-bomb-itl.json`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ember::engine::metrics::nearest_rank;
use ember::engine::{Engine, EngineConfig, Logger};
use ember::model::Model;
use ember::protocol::ApiRequest;
use serde_json::json;

const STREAMS: usize = 8;
const TOKENS: usize = 192;

/// Fires only on a message that says BOOM: the streams render through the same template untouched.
const TEMPLATE_BOMB: &str = "{% if messages[-1]['content'] == 'BOOM' %}{% for i in range(100000) %}\
{% for j in range(100000) %}{% endfor %}{% endfor %}{% endif %}";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    None,
    Template,
    Grammar,
}

fn bomb_body(kind: Kind) -> String {
    match kind {
        Kind::None => String::new(),
        Kind::Template => json!({"messages": [{"role": "user", "content": "BOOM"}], "max_tokens": 4}).to_string(),
        // The schema: 26 patterns in allOf (127 s and an abort before issue 43).
        Kind::Grammar => {
            let all: Vec<_> = (0..26).map(|_| json!({"pattern": ".*x.*"})).collect();
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "string", "allOf": all}}}})
            .to_string()
        }
    }
}

struct Run {
    kind: Kind,
    itl_ms: Vec<f64>,
    bombs: usize,
    bomb_ms: Vec<f64>,
}

fn run(engine: &Engine, kind: Kind) -> Run {
    let streams: Vec<ApiRequest> = (0..STREAMS)
        .map(|i| {
            let body = json!({"messages": [{"role": "user", "content": format!("Tell me story number {i}, a long one.")}],
                "max_tokens": TOKENS, "min_tokens": TOKENS});
            ApiRequest::submit(engine, &body.to_string(), None).expect("a stream")
        })
        .collect();
    let done = AtomicBool::new(false);
    let (bombs, bomb_ms) = std::thread::scope(|s| {
        let bomber = s.spawn(|| {
            let (mut n, mut took) = (0, Vec::new());
            if kind == Kind::None {
                return (n, took);
            }
            let body = bomb_body(kind);
            while !done.load(Ordering::Relaxed) {
                let started = Instant::now();
                let refused = ApiRequest::submit(engine, &body, None).is_err();
                assert!(refused, "the bomb was accepted");
                took.push(started.elapsed().as_secs_f64() * 1e3);
                n += 1;
            }
            (n, took)
        });
        for stream in &streams {
            stream.handle().wait();
        }
        done.store(true, Ordering::Relaxed);
        bomber.join().expect("the bomber")
    });
    let mut itl_ms: Vec<f64> = streams
        .iter()
        .filter_map(|r| r.handle().stats(0))
        .flat_map(|s| s.token_ts.windows(2).map(|w| (w[1] - w[0]) * 1e3).collect::<Vec<_>>())
        .collect();
    itl_ms.sort_by(f64::total_cmp);
    Run { kind, itl_ms, bombs, bomb_ms }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let threads: usize = arg("--threads").map_or(2, |v| v.parse().expect("--threads N"));
    let rounds: usize = arg("--rounds").map_or(3, |v| v.parse().expect("--rounds R"));
    let json_path = arg("--json").unwrap_or_else(|| "target/bench-bomb-itl.json".into());
    let model = Arc::new(Model::load(None).expect("the model (make model)"));
    let template = format!("{TEMPLATE_BOMB}{}", model.chat_template.source());
    let config = EngineConfig { threads, chat_template: Some(template), ..Default::default() };
    let engine = Engine::with_model(config, Arc::clone(&model), Logger::silent()).expect("engine");
    run(&engine, Kind::None); // warm-up
    let mut runs = Vec::new();
    for round in 0..rounds {
        for kind in [Kind::None, Kind::Template, Kind::Grammar] {
            let r = run(&engine, kind);
            println!(
                "round {round} {:9?}: ITL p50 {:6.2} ms, p99 {:6.2} ms; {:3} bombs refused, median {:7.1} ms each",
                r.kind,
                nearest_rank(&r.itl_ms, 50.0).unwrap_or(f64::NAN),
                nearest_rank(&r.itl_ms, 99.0).unwrap_or(f64::NAN),
                r.bombs,
                median(r.bomb_ms.clone())
            );
            runs.push(r);
        }
    }
    let summary = |kind: Kind| {
        let of: Vec<&Run> = runs.iter().filter(|r| r.kind == kind).collect();
        let p50 = median(of.iter().filter_map(|r| nearest_rank(&r.itl_ms, 50.0)).collect());
        let p99 = median(of.iter().filter_map(|r| nearest_rank(&r.itl_ms, 99.0)).collect());
        (p50, p99)
    };
    let (base50, base99) = summary(Kind::None);
    let mut out = Vec::new();
    for kind in [Kind::None, Kind::Template, Kind::Grammar] {
        let (p50, p99) = summary(kind);
        println!(
            "{kind:9?}: median ITL p50 {p50:6.2} ms, p99 {p99:6.2} ms ({:.2}x the p99 without bombs)",
            p99 / base99
        );
        out.push(
            json!({"bombs": format!("{kind:?}"), "itl_p50_ms": p50, "itl_p99_ms": p99, "p99_ratio": p99 / base99}),
        );
    }
    let _ = base50;
    let report = json!({"threads": threads, "rounds": rounds, "streams": STREAMS, "tokens": TOKENS, "runs": out});
    std::fs::write(&json_path, serde_json::to_string_pretty(&report).expect("json")).expect("the report");
}
