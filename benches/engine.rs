//! Engine benchmark on the real model: aggregate decode throughput with 1, 4, 8 and 16 concurrent requests
//! (128-token prompts, 128 generated tokens each), TTFT (from scheduling, the metric, and from arrival, what a client
//! waits) and ITL percentiles, with timing stats on and off, and the CPU an idle engine uses.
//!
//! `cargo bench --bench engine [-- --quick] [--threads N] [--max-num-batched-tokens N] [--logprobs K] [--json PATH]`.
//! Prints a table and writes JSON (default `target/bench-engine.json`). `--logprobs K` adds, at each level, a run
//! whose requests ask for log probabilities with `K` alternatives (stats on), interleaved with the plain ones.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ember::engine::config::CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS;
use ember::engine::metrics::nearest_rank;
use ember::engine::{Engine, EngineConfig, Logger, RequestOptions, SubmitRequest};
use ember::model::{Model, TokenId};

struct Args {
    quick: bool,
    threads: usize,
    /// The engine's `max_num_batched_tokens` (None: its default).
    max_num_batched_tokens: Option<usize>,
    /// Also run with `logprobs: Some(K)`.
    logprobs: Option<usize>,
    json: String,
}

fn parse_args() -> Args {
    let mut args = Args {
        quick: false,
        threads: 2,
        max_num_batched_tokens: None,
        logprobs: None,
        json: "target/bench-engine.json".into(),
    };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < raw.len() {
        match raw[i].as_str() {
            "--quick" => args.quick = true,
            "--threads" => {
                i += 1;
                args.threads = raw[i].parse().expect("--threads N");
            }
            "--max-num-batched-tokens" => {
                i += 1;
                args.max_num_batched_tokens = Some(raw[i].parse().expect("--max-num-batched-tokens N"));
            }
            "--logprobs" => {
                i += 1;
                args.logprobs = Some(raw[i].parse().expect("--logprobs K"));
            }
            "--json" => {
                i += 1;
                args.json = raw[i].clone();
            }
            _ => {} // cargo bench passes --bench
        }
        i += 1;
    }
    args
}

/// A 128-token prompt, different for each request (so nothing could be shared between them).
fn prompt(model: &Model, index: usize, len: usize) -> Vec<TokenId> {
    let text = format!(
        "Request {index}. The history of science is full of people who asked simple questions about the world and \
         refused easy answers. Write a long story about a curious engineer who builds a small machine that can \
         count the stars, and describe every step of the work in careful detail, including the failures."
    );
    let mut ids = model.tokenizer.encode(&text, false);
    while ids.len() < len {
        ids.extend_from_within(..ids.len().min(len - ids.len()));
    }
    ids.truncate(len);
    ids
}

struct Run {
    concurrency: usize,
    stats_on: bool,
    logprobs: Option<usize>,
    wall_s: f64,
    generated: u64,
    /// Tokens generated after every request had its first token, over the time that took: the steady decode
    /// rate with all requests running (absent with stats off, which records no token times).
    decode_phase_tps: Option<f64>,
    /// TTFT as the metric defines it: from first scheduling (queueing excluded).
    ttft_ms: Vec<f64>,
    /// TTFT from arrival (queueing included): what a client waits.
    ttft_arrival_ms: Vec<f64>,
    itl_ms: Vec<f64>,
}

impl Run {
    /// Generated tokens over the wall time from submitting to the last token (prefill included).
    fn decode_tps(&self) -> f64 {
        self.generated as f64 / self.wall_s
    }
}

fn run(
    model: &Arc<Model>,
    args: &Args,
    concurrency: usize,
    gen: usize,
    stats_on: bool,
    logprobs: Option<usize>,
) -> Run {
    let defaults = EngineConfig::default();
    let config = EngineConfig {
        threads: args.threads,
        disable_log_stats: !stats_on,
        max_num_batched_tokens: args.max_num_batched_tokens.or(defaults.max_num_batched_tokens),
        ..defaults
    };
    let engine = Engine::with_model(config, Arc::clone(model), Logger::silent()).expect("engine");
    let requests: Vec<SubmitRequest> = (0..concurrency)
        .map(|i| {
            SubmitRequest::with_options(
                prompt(model, i, 128),
                RequestOptions { max_tokens: Some(gen), ignore_eos: true, logprobs, ..Default::default() },
            )
        })
        .collect();
    let start = Instant::now();
    let handles: Vec<_> = requests.into_iter().map(|r| engine.submit(r).expect("submit")).collect();
    let mut generated = 0;
    for h in &handles {
        h.wait();
        generated += u64::from(h.choices()[0].completion_tokens);
    }
    let wall_s = start.elapsed().as_secs_f64();
    let mut ttft_ms = Vec::new();
    let mut ttft_arrival_ms = Vec::new();
    let mut itl_ms = Vec::new();
    for h in &handles {
        if let Some(s) = h.stats(0) {
            ttft_ms.extend(h.timing_metrics(0).time_to_first_token_ms);
            ttft_arrival_ms.extend(h.extended_metrics(0).ttft_from_arrival_ms);
            itl_ms.extend(s.token_ts.windows(2).map(|w| (w[1] - w[0]) * 1000.0));
        }
    }
    ttft_ms.sort_by(f64::total_cmp);
    ttft_arrival_ms.sort_by(f64::total_cmp);
    itl_ms.sort_by(f64::total_cmp);
    let stats: Vec<_> = handles.iter().filter_map(|h| h.stats(0)).collect();
    let decode_phase_tps = (!stats.is_empty()).then(|| {
        let all_started = stats.iter().filter_map(|s| s.first_token_ts).fold(0.0, f64::max);
        let end = stats.iter().filter_map(|s| s.last_token_ts).fold(0.0, f64::max);
        let after = stats.iter().flat_map(|s| s.token_ts.iter()).filter(|&&t| t > all_started).count();
        after as f64 / (end - all_started)
    });
    Run { concurrency, stats_on, logprobs, wall_s, generated, decode_phase_tps, ttft_ms, ttft_arrival_ms, itl_ms }
}

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command name: state is field 0, utime field 11, stime field 12; 100 ticks per second on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let args = parse_args();
    let model = Arc::new(Model::load(None).unwrap_or_else(|e| panic!("{e}")));
    let gen = if args.quick { 32 } else { 128 };
    let levels: &[usize] = if args.quick { &[1, 16] } else { &[1, 4, 8, 16] };

    let mut runs = Vec::new();
    for &c in levels {
        for stats_on in [true, false] {
            runs.push(run(&model, &args, c, gen, stats_on, None));
        }
        if let Some(k) = args.logprobs {
            runs.push(run(&model, &args, c, gen, true, Some(k)));
        }
    }

    // An idle engine: CPU used over two seconds with nothing to do (after its threads have parked).
    let idle = {
        let engine = Engine::with_model(
            EngineConfig { threads: args.threads, ..Default::default() },
            Arc::clone(&model),
            Logger::silent(),
        )
        .expect("engine");
        let h = engine.submit(SubmitRequest::with_options(
            prompt(&model, 0, 16),
            RequestOptions { max_tokens: Some(4), ..Default::default() },
        ));
        h.expect("submit").wait();
        std::thread::sleep(Duration::from_millis(200));
        let (cpu0, t0) = (cpu_seconds(), Instant::now());
        std::thread::sleep(Duration::from_secs(2));
        (cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64()
    };

    let budget = args.max_num_batched_tokens.unwrap_or(CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS);
    println!(
        "engine benchmark: {} threads, 128-token prompts, {gen} generated per request, max_num_batched_tokens {budget}",
        args.threads
    );
    println!(
        "{:>4} {:>6} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "conc", "stats", "e2e t/s", "decode t/s", "ttft p50", "ttft p99", "arr p50", "arr p99", "itl p50", "itl p99"
    );
    let mut json = Vec::new();
    for r in &runs {
        let pct = |v: &[f64], p| nearest_rank(v, p).map_or("-".to_owned(), |x| format!("{x:.1}"));
        println!(
            "{:>4} {:>6} {:>9.1} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
            r.concurrency,
            match (r.logprobs, r.stats_on) {
                (Some(k), _) => format!("lp{k}"),
                (None, true) => "on".into(),
                (None, false) => "off".into(),
            },
            r.decode_tps(),
            r.decode_phase_tps.map_or("-".to_owned(), |x| format!("{x:.1}")),
            pct(&r.ttft_ms, 50.0),
            pct(&r.ttft_ms, 99.0),
            pct(&r.ttft_arrival_ms, 50.0),
            pct(&r.ttft_arrival_ms, 99.0),
            pct(&r.itl_ms, 50.0),
            pct(&r.itl_ms, 99.0)
        );
        json.push(serde_json::json!({
            "concurrency": r.concurrency, "stats": r.stats_on, "logprobs": r.logprobs, "generated_tokens": r.generated, "wall_s": r.wall_s,
            "aggregate_tokens_per_s": r.decode_tps(), "decode_phase_tokens_per_s": r.decode_phase_tps,
            "ttft_ms_p50": nearest_rank(&r.ttft_ms, 50.0), "ttft_ms_p99": nearest_rank(&r.ttft_ms, 99.0),
            "ttft_from_arrival_ms_p50": nearest_rank(&r.ttft_arrival_ms, 50.0),
            "ttft_from_arrival_ms_p99": nearest_rank(&r.ttft_arrival_ms, 99.0),
            "itl_ms_p50": nearest_rank(&r.itl_ms, 50.0), "itl_ms_p99": nearest_rank(&r.itl_ms, 99.0),
        }));
    }
    let phase = |r: &Run| r.decode_phase_tps.unwrap_or(0.0);
    let plain = |r: &&Run| r.logprobs.is_none();
    if let Some(k) = args.logprobs {
        for r in runs.iter().filter(|r| r.logprobs.is_some()) {
            let base = runs.iter().filter(plain).find(|b| b.stats_on && b.concurrency == r.concurrency);
            if let Some(base) = base {
                println!(
                    "logprobs {k} / plain at {}: decode phase {:.3}, e2e {:.3}",
                    r.concurrency,
                    phase(r) / phase(base),
                    r.decode_tps() / base.decode_tps()
                );
            }
        }
    }
    let single = runs.iter().filter(plain).find(|r| r.concurrency == 1 && r.stats_on).map(phase).unwrap_or(0.0);
    let top = runs.iter().filter(plain).filter(|r| r.stats_on).max_by_key(|r| r.concurrency).map(phase).unwrap_or(0.0);
    let on: f64 = runs.iter().filter(plain).filter(|r| r.stats_on).map(Run::decode_tps).sum();
    let off: f64 = runs.iter().filter(plain).filter(|r| !r.stats_on).map(Run::decode_tps).sum();
    println!("decode rate at max concurrency / single stream: {:.2}x", top / single);
    println!("stats on / off throughput (sum over levels): {:.3}", on / off);
    println!("idle engine CPU: {:.2}% of one core", idle * 100.0);
    let doc = serde_json::json!({
        "bench": "engine", "threads": args.threads, "generated_per_request": gen, "max_num_batched_tokens": budget,
        "runs": json,
        "scaling_vs_single": top / single, "stats_on_over_off": on / off, "idle_cpu_fraction": idle,
    });
    println!("{doc}");
    if let Err(e) = std::fs::write(&args.json, format!("{doc:#}\n")) {
        eprintln!("cannot write {}: {e}", args.json);
    }
}
