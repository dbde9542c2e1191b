//! Served streaming load, the step budget's measure (issue 46): concurrent streamed chats on the real model, each
//! client starting its next chat as soon as its last one ends, prompts of varied length arriving beside the
//! running streams. Per engine option `step_budget` (alternated, each round running every policy once):
//! aggregate generated tokens/s (wall time from the first submission to the last stream's end), the inter-token
//! latency p50 and p99 over every stream's tokens, and TTFT from arrival p50 / p99.
//!
//! `cargo bench --bench served_itl [-- --policies throughput,auto] [--rounds 3] [--clients 16] [--chats 48]
//! [--tokens 128] [--threads 2] [--json PATH]` (a policy: `throughput`, `auto` or a target in milliseconds).
//! Prints each run, then the medians per policy and their ratios to the first policy; writes JSON (default
//! `target/bench-served-itl.json`).
//!
//! Each chat goes through the protocol layer as `engine_submit` takes it (`"stream": true`), and its client
//! thread reads every SSE chunk, as a gateway would. The ITL is taken from the tokens' timestamps (the engine's
//! clock, right after each token was sampled: `token_ts`), so the clients' own scheduling on a small machine does
//! not blur it. Each policy has its own engine (the model shared), warmed up before the first round, so each
//! starts measuring with its step costs learned.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ember::engine::metrics::nearest_rank;
use ember::engine::step_budget::StepBudget;
use ember::engine::{Engine, EngineConfig, Logger};
use ember::model::Model;
use ember::protocol::{ApiRequest, ChunkPoll};
use serde_json::json;

struct Args {
    policies: Vec<String>,
    rounds: usize,
    clients: usize,
    chats: usize,
    tokens: usize,
    threads: usize,
    json: String,
}

fn parse_args() -> Args {
    let mut args = Args {
        policies: vec!["throughput".into(), "auto".into()],
        rounds: 3,
        clients: 16,
        chats: 48,
        tokens: 128,
        threads: 2,
        json: "target/bench-served-itl.json".into(),
    };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < raw.len() {
        let value = || raw.get(i + 1).unwrap_or_else(|| panic!("{} needs a value", raw[i])).clone();
        let number = |name: &str| value().parse::<usize>().unwrap_or_else(|_| panic!("{name} N"));
        match raw[i].as_str() {
            "--policies" => args.policies = value().split(',').map(str::to_owned).collect(),
            "--rounds" => args.rounds = number("--rounds"),
            "--clients" => args.clients = number("--clients"),
            "--chats" => args.chats = number("--chats"),
            "--tokens" => args.tokens = number("--tokens"),
            "--threads" => args.threads = number("--threads"),
            "--json" => args.json = value(),
            // `cargo bench` passes --bench to every bench binary.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    args
}

/// The option's JSON value for a policy named on the command line.
fn budget(policy: &str) -> StepBudget {
    let value = match policy.parse::<f64>() {
        Ok(ms) => json!(ms),
        Err(_) => json!(policy),
    };
    serde_json::from_value(value).unwrap_or_else(|e| panic!("--policies: {policy}: {e}"))
}

/// Chat `i`'s body in run `run`: a question padded with 0 to 11 sentences of context (~40 to ~330 prompt
/// tokens with the template), unique from its first words (run and chat) so that the prefix cache shares only
/// the system prompt, in any round.
fn body(run: usize, i: usize, tokens: usize) -> String {
    const CONTEXT: &str = " The harbour was quiet that morning, and the fishing boats rocked gently at their moorings \
                           while the gulls argued over scraps.";
    let sentences = [0, 2, 5, 11, 1, 8][i % 6];
    let content = format!("Chat {run}-{i}: tell me a story about the sea.{}", CONTEXT.repeat(sentences));
    json!({"messages": [{"role": "user", "content": content}], "max_tokens": tokens, "ignore_eos": true,
        "temperature": 0, "stream": true})
    .to_string()
}

#[derive(Default)]
struct Run {
    seconds: f64,
    tokens: usize,
    itl_ms: Vec<f64>,
    ttft_ms: Vec<f64>,
}

impl Run {
    fn tok_s(&self) -> f64 {
        self.tokens as f64 / self.seconds
    }
    /// The `q`-th percentile (0..=100) of the inter-token latencies.
    fn itl(&self, q: f64) -> f64 {
        nearest_rank(&self.itl_ms, q).unwrap_or(f64::NAN)
    }
    fn ttft(&self, q: f64) -> f64 {
        nearest_rank(&self.ttft_ms, q).unwrap_or(f64::NAN)
    }
}

/// `chats` streamed chats from `clients` closed-loop clients, the prompts tagged `tag`.
fn run(engine: &Engine, tag: usize, clients: usize, chats: usize, tokens: usize) -> Run {
    let next = AtomicUsize::new(0);
    let out = Mutex::new(Run::default());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= chats {
                    return;
                }
                let mut request = ApiRequest::submit(engine, &body(tag, i, tokens), None).expect("a chat");
                while let ChunkPoll::Chunk(_) = request.next_chunk_json(None) {}
                let stats = request.handle().stats(0).expect("stats");
                let mut run = out.lock().unwrap();
                run.tokens += stats.token_ts.len();
                run.itl_ms.extend(stats.token_ts.windows(2).map(|w| (w[1] - w[0]) * 1e3));
                if let (Some(arrival), Some(first)) = (stats.arrival_ts, stats.first_token_ts) {
                    run.ttft_ms.push((first - arrival) * 1e3);
                }
            });
        }
    });
    let mut run = out.into_inner().unwrap();
    run.seconds = started.elapsed().as_secs_f64();
    run.itl_ms.sort_by(f64::total_cmp);
    run.ttft_ms.sort_by(f64::total_cmp);
    run
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let args = parse_args();
    let model = Arc::new(Model::load(None).unwrap_or_else(|e| panic!("{e}")));
    let engines: Vec<Engine> = args
        .policies
        .iter()
        .map(|p| {
            let config = EngineConfig { threads: args.threads, step_budget: budget(p), ..Default::default() };
            Engine::with_model(config, Arc::clone(&model), Logger::silent()).expect("engine")
        })
        .collect();
    // Warm-up: the model's pages, and each engine's step costs.
    let mut tag = 0;
    for engine in &engines {
        run(engine, tag, args.clients, args.clients, 16);
        tag += 1;
    }
    println!(
        "served streaming load: {} clients, {} chats of {} tokens, {} threads; load average {}",
        args.clients,
        args.chats,
        args.tokens,
        args.threads,
        load_average()
    );
    println!(
        "{:>5} {:>10} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10}",
        "round", "policy", "tok/s", "itl p50", "itl p99", "p99/p50", "ttft p50", "ttft p99"
    );
    let mut runs: Vec<Vec<Run>> = args.policies.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        for (p, engine) in engines.iter().enumerate() {
            let r = run(engine, tag, args.clients, args.chats, args.tokens);
            tag += 1;
            println!(
                "{round:>5} {:>10} {:>9.1} {:>9.2} {:>9.2} {:>8.2} {:>10.0} {:>10.0}",
                args.policies[p],
                r.tok_s(),
                r.itl(50.0),
                r.itl(99.0),
                r.itl(99.0) / r.itl(50.0),
                r.ttft(50.0),
                r.ttft(99.0)
            );
            runs[p].push(r);
        }
    }
    println!("medians over {} rounds (load average {}):", args.rounds, load_average());
    let base_tok_s = median(runs[0].iter().map(Run::tok_s).collect());
    let mut rows = Vec::new();
    for (p, of) in runs.iter().enumerate() {
        let tok_s = median(of.iter().map(Run::tok_s).collect());
        let (p50, p99) =
            (median(of.iter().map(|r| r.itl(50.0)).collect()), median(of.iter().map(|r| r.itl(99.0)).collect()));
        let ratio = median(of.iter().map(|r| r.itl(99.0) / r.itl(50.0)).collect());
        let (t50, t99) =
            (median(of.iter().map(|r| r.ttft(50.0)).collect()), median(of.iter().map(|r| r.ttft(99.0)).collect()));
        println!(
            "{:>10}: {tok_s:7.1} tok/s ({:.3}x {}), ITL p50 {p50:6.2} ms, p99 {p99:6.2} ms, p99/p50 {ratio:.2}, TTFT p50 {t50:5.0} ms, p99 {t99:5.0} ms",
            args.policies[p],
            tok_s / base_tok_s,
            args.policies[0]
        );
        rows.push(json!({
            "policy": args.policies[p], "tok_s": tok_s, "tok_s_ratio": tok_s / base_tok_s, "itl_ms_p50": p50,
            "itl_ms_p99": p99, "itl_p99_over_p50": ratio, "ttft_ms_p50": t50, "ttft_ms_p99": t99,
            "rounds": of.iter().map(|r| json!({"tok_s": r.tok_s(), "itl_ms_p50": r.itl(50.0), "itl_ms_p99": r.itl(99.0),
                "ttft_ms_p50": r.ttft(50.0), "ttft_ms_p99": r.ttft(99.0)})).collect::<Vec<_>>(),
        }));
    }
    let report = json!({"bench": "served_itl", "clients": args.clients, "chats": args.chats, "tokens": args.tokens,
        "threads": args.threads, "rounds": args.rounds, "policies": rows});
    std::fs::write(&args.json, serde_json::to_string_pretty(&report).expect("json")).expect("the report");
}
