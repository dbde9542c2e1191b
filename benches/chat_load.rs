//! The gateway benchmark's load driven directly from Rust: closed-loop clients, each a thread sending the same
//! non-streaming chat request (through the protocol layer, as `engine_submit` does) when its last one has ended.
//! `scripts/bench-gateway.py` runs it beside the gateway and the Go binding, so the three rows differ only in
//! what sits between the client and the engine (HTTP + JSON, cgo, nothing).
//!
//! `cargo bench --bench chat_load -- [--clients 8,32] [--requests-per-client 2] [--max-tokens 32] [--threads 2]
//! [--json PATH]`. Prints a table and writes JSON (default `target/bench-chat-load.json`).

use std::sync::Arc;
use std::time::Instant;

use ember::engine::{Engine, EngineConfig, Logger};
use ember::model::Model;
use ember::protocol::ApiRequest;

/// The message of `scripts/bench-gateway.py` and `bindings/go/bench_test.go`.
const MESSAGE: &str = "Write a short poem about the sea.";

struct Args {
    clients: Vec<usize>,
    requests_per_client: usize,
    max_tokens: usize,
    threads: usize,
    json: String,
}

fn parse_args() -> Args {
    let mut args = Args {
        clients: vec![8, 32],
        requests_per_client: 2,
        max_tokens: 32,
        threads: 2,
        json: "target/bench-chat-load.json".into(),
    };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < raw.len() {
        let value = |i: usize| raw.get(i + 1).unwrap_or_else(|| panic!("{} needs a value", raw[i])).clone();
        match raw[i].as_str() {
            "--clients" => {
                args.clients = value(i).split(',').map(|c| c.parse().expect("--clients 8,32")).collect();
            }
            "--requests-per-client" => args.requests_per_client = value(i).parse().expect("--requests-per-client N"),
            "--max-tokens" => args.max_tokens = value(i).parse().expect("--max-tokens N"),
            "--threads" => args.threads = value(i).parse().expect("--threads N"),
            "--json" => args.json = value(i),
            // `cargo bench` passes --bench to every bench binary.
            "--bench" => {
                i += 1;
                continue;
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    args
}

/// Sends one request, waits for its end, reads the body as a host would; returns its completion tokens.
fn one_request(engine: &Engine, body: &str) -> u64 {
    let request = ApiRequest::submit(engine, body, None).unwrap_or_else(|e| panic!("{}", e.to_json()));
    request.handle().wait();
    let response = request.response_json().expect("finished");
    let doc: serde_json::Value = serde_json::from_str(&response).expect("response JSON");
    doc["usage"]["completion_tokens"].as_u64().expect("usage.completion_tokens")
}

struct Load {
    clients: usize,
    requests: usize,
    tokens: u64,
    seconds: f64,
}

fn closed_loop(engine: &Arc<Engine>, body: &Arc<String>, clients: usize, requests_per_client: usize) -> Load {
    let start = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (engine, body) = (Arc::clone(engine), Arc::clone(body));
            std::thread::spawn(move || (0..requests_per_client).map(|_| one_request(&engine, &body)).sum::<u64>())
        })
        .collect();
    let tokens = workers.into_iter().map(|w| w.join().expect("client thread")).sum();
    Load { clients, requests: clients * requests_per_client, tokens, seconds: start.elapsed().as_secs_f64() }
}

fn main() {
    let args = parse_args();
    let model = Arc::new(Model::load(None).unwrap_or_else(|e| panic!("{e}")));
    let config = EngineConfig { threads: args.threads, ..Default::default() };
    let engine = Arc::new(Engine::with_model(config, model, Logger::silent()).expect("engine"));
    let body = Arc::new(
        serde_json::json!({
            "messages": [{"role": "user", "content": MESSAGE}],
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "ignore_eos": true,
        })
        .to_string(),
    );
    // Warm-up, as the gateway's: the first touch of the model's pages.
    let warm_up =
        serde_json::json!({"messages": [{"role": "user", "content": MESSAGE}], "max_tokens": 4, "temperature": 0});
    one_request(&engine, &warm_up.to_string());

    let loads: Vec<Load> =
        args.clients.iter().map(|&c| closed_loop(&engine, &body, c, args.requests_per_client)).collect();

    println!(
        "chat load from Rust: {} generated tokens per request (ignore_eos), {} requests per client, {} threads",
        args.max_tokens, args.requests_per_client, args.threads
    );
    println!("{:>7} {:>10} {:>9}", "clients", "requests/s", "tokens/s");
    let mut rows = Vec::new();
    for l in &loads {
        let (rps, tps) = (l.requests as f64 / l.seconds, l.tokens as f64 / l.seconds);
        println!("{:>7} {rps:>10.2} {tps:>9.1}", l.clients);
        rows.push(serde_json::json!({
            "clients": l.clients, "requests": l.requests, "tokens": l.tokens, "seconds": l.seconds,
            "requests_per_s": rps, "tokens_per_s": tps,
        }));
    }
    let doc = serde_json::json!({
        "bench": "chat_load", "threads": args.threads, "max_tokens": args.max_tokens,
        "requests_per_client": args.requests_per_client, "runs": rows,
    });
    println!("{doc}");
    if let Err(e) = std::fs::write(&args.json, format!("{doc:#}\n")) {
        eprintln!("cannot write {}: {e}", args.json);
    }
}
