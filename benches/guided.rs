//! Structured-output benchmark on the real model: 16 concurrent chat requests, all unconstrained, against the same
//! 16 with half of them constrained by a JSON schema. Reports the decode rate while all 16 run, its ratio between
//! the two (per round: a free run and the mixed run right after it), and the engine's mask times per token
//! (p50/p99) and how long steps waited for their masks after the forward pass (the masks are computed beside it).
//!
//! The schema needs more tokens than a request generates (an array of at least 8 objects), so no constrained
//! request ends early and both runs keep 16 sequences in every decode step. Runs alternate (free, mixed, free,
//! ...), and each run reports the share of its threads' time spent waiting for a CPU ("waited", from
//! `/proc/self/task/*/schedstat`). The summary is the median ratio over the quiet rounds (both runs waited under
//! 5 %), and over all rounds: on a machine shared with other work, a round where one run lost its CPUs half the
//! time says nothing about masks.
//!
//! `cargo bench --bench guided [-- --quick] [--threads N] [--rounds N] [--json PATH]`. Prints a table and writes
//! JSON (default `target/bench-guided.json`).

use std::sync::Arc;
use std::time::Instant;

use ember::engine::guided::{GuidedRequest, GuidedSpec, MaskTimeSummary};
use ember::engine::{Engine, EngineConfig, Logger, RequestOptions, SubmitRequest};
use ember::model::chat_template::ChatMessage;
use ember::model::{Model, TokenId};
use serde_json::json;

const CONCURRENCY: usize = 16;

struct Args {
    quick: bool,
    threads: usize,
    rounds: usize,
    json: String,
}

fn parse_args() -> Args {
    let mut args = Args { quick: false, threads: 2, rounds: 3, json: "target/bench-guided.json".into() };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < raw.len() {
        match raw[i].as_str() {
            "--quick" => args.quick = true,
            "--threads" => {
                i += 1;
                args.threads = raw[i].parse().expect("--threads N");
            }
            "--rounds" => {
                i += 1;
                args.rounds = raw[i].parse().expect("--rounds N");
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

fn schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"steps": {"type": "array", "minItems": 8, "items": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "text": {"type": "string"}},
            "required": ["n", "text"], "additionalProperties": false}}},
        "required": ["steps"], "additionalProperties": false
    })
}

fn prompt(model: &Model, index: usize) -> Vec<TokenId> {
    let message = format!(
        "Request {index}. List, as JSON, the steps a curious engineer follows to build a small machine that counts \
         the stars, one object per step with its number and a sentence describing it."
    );
    let text = model.chat_template.render(&[ChatMessage::new("user", &message)], true).expect("template");
    model.tokenizer.encode(&text, true)
}

struct Run {
    mixed: bool,
    /// Tokens sampled while all requests were running, over that time.
    decode_tps: f64,
    /// All tokens over the wall time from submitting to the last token.
    e2e_tps: f64,
    masks: MaskTimeSummary,
    /// The share of the threads' time spent in a run queue (other processes' load), when readable.
    waited: Option<f64>,
}

/// Nanoseconds this process's live threads have spent on a CPU and waiting for one (`schedstat`'s first two
/// fields), summed.
fn sched_times() -> Option<(u64, u64)> {
    let mut total = (0, 0);
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        let mut fields = stat.split_whitespace().map(|f| f.parse::<u64>().ok());
        total.0 += fields.next()??;
        total.1 += fields.next()??;
    }
    Some(total)
}

fn run(model: &Arc<Model>, args: &Args, gen: usize, mixed: bool) -> Run {
    let config = EngineConfig { threads: args.threads, ..Default::default() };
    let engine = Engine::with_model(config, Arc::clone(model), Logger::silent()).expect("engine");
    let requests: Vec<SubmitRequest> = (0..CONCURRENCY)
        .map(|i| {
            SubmitRequest::with_options(
                prompt(model, i),
                RequestOptions {
                    max_tokens: Some(gen),
                    ignore_eos: true,
                    guided: (mixed && i % 2 == 0)
                        .then(|| GuidedRequest::new(GuidedSpec::JsonSchema(schema()), "bench")),
                    ..Default::default()
                },
            )
        })
        .collect();
    let sched_start = sched_times();
    let start = Instant::now();
    let handles: Vec<_> = requests.into_iter().map(|r| engine.submit(r).expect("submit")).collect();
    let mut generated = 0;
    for h in &handles {
        h.wait();
        let c = &h.choices()[0];
        assert_eq!(c.completion_tokens as usize, gen, "every request runs to max_tokens: {:?}", c.text);
        generated += u64::from(c.completion_tokens);
    }
    let wall_s = start.elapsed().as_secs_f64();
    let waited = sched_start.zip(sched_times()).and_then(|((ran0, wait0), (ran1, wait1))| {
        let (ran, wait) = (ran1.checked_sub(ran0)?, wait1.checked_sub(wait0)?);
        (ran + wait > 0).then(|| wait as f64 / (ran + wait) as f64)
    });
    let stats: Vec<_> = handles.iter().map(|h| h.stats(0).expect("stats are on by default")).collect();
    let all_started = stats.iter().filter_map(|s| s.first_token_ts).fold(0.0, f64::max);
    let first_end = stats.iter().filter_map(|s| s.last_token_ts).fold(f64::INFINITY, f64::min);
    let in_window =
        stats.iter().flat_map(|s| s.token_ts.iter()).filter(|&&t| t > all_started && t <= first_end).count();
    Run {
        mixed,
        decode_tps: in_window as f64 / (first_end - all_started),
        e2e_tps: generated as f64 / wall_s,
        masks: engine.mask_times(),
        waited,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = parse_args();
    let model = Arc::new(Model::load(None).unwrap_or_else(|e| panic!("{e}")));
    let gen = if args.quick { 32 } else { 96 };
    let rounds = if args.quick { 1 } else { args.rounds.max(1) };
    // A first, unmeasured run warms the caches and the allocator.
    run(&model, &args, 8, true);
    let mut runs = Vec::new();
    for _ in 0..rounds {
        runs.push(run(&model, &args, gen, false));
        runs.push(run(&model, &args, gen, true));
    }

    println!(
        "guided benchmark: {} threads, {CONCURRENCY} concurrent chat requests, {gen} generated each, {rounds} rounds",
        args.threads
    );
    println!(
        "{:>6} {:>10} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "run", "decode t/s", "e2e t/s", "masks", "mask p50", "mask p99", "mask avg", "wait p50", "wait p99", "waited"
    );
    let mut json_runs = Vec::new();
    for r in &runs {
        let m = &r.masks;
        println!(
            "{:>6} {:>10.1} {:>9.1} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7}",
            if r.mixed { "mixed" } else { "free" },
            r.decode_tps,
            r.e2e_tps,
            m.masks,
            m.mask_p50_us,
            m.mask_p99_us,
            m.mask_mean_us,
            m.wait_p50_us,
            m.wait_p99_us,
            r.waited.map_or("-".to_owned(), |w| format!("{:.0}%", w * 100.0))
        );
        json_runs.push(json!({
            "constrained_requests": if r.mixed { CONCURRENCY / 2 } else { 0 }, "decode_tokens_per_s": r.decode_tps,
            "aggregate_tokens_per_s": r.e2e_tps, "masks": m.masks, "mask_us_p50": m.mask_p50_us,
            "mask_us_p99": m.mask_p99_us, "mask_us_mean": m.mask_mean_us, "steps_with_masks": m.steps,
            "mask_wait_us_p50": m.wait_p50_us, "mask_wait_us_p99": m.wait_p99_us, "mask_wait_us_mean": m.wait_mean_us,
            "run_queue_wait_share": r.waited,
        }));
    }
    let of = |mixed: bool, f: fn(&Run) -> f64| median(runs.iter().filter(|r| r.mixed == mixed).map(f).collect());
    let (free, mixed) = (of(false, |r| r.decode_tps), of(true, |r| r.decode_tps));
    // Rounds: (ratio, the larger of the two runs' waited shares).
    let rounds_ratio: Vec<(f64, f64)> = runs
        .chunks(2)
        .map(|pair| {
            let waited = pair.iter().map(|r| r.waited.unwrap_or(1.0)).fold(0.0, f64::max);
            (pair[1].decode_tps / pair[0].decode_tps, waited)
        })
        .collect();
    let quiet: Vec<f64> = rounds_ratio.iter().filter(|(_, w)| *w < 0.05).map(|(r, _)| *r).collect();
    let all_ratio = median(rounds_ratio.iter().map(|(r, _)| *r).collect());
    let quiet_ratio = (!quiet.is_empty()).then(|| median(quiet.clone()));
    let mask_p50 = of(true, |r| r.masks.mask_p50_us);
    let mask_p99 = of(true, |r| r.masks.mask_p99_us);
    let wait_p50 = of(true, |r| r.masks.wait_p50_us);
    println!("decode t/s, median: free {free:.1}, half constrained {mixed:.1}");
    for (i, (r, w)) in rounds_ratio.iter().enumerate() {
        println!("round {}: half constrained / free {r:.3} (waited up to {:.0}%)", i + 1, w * 100.0);
    }
    match quiet_ratio {
        Some(q) => println!("ratio, median of {} quiet rounds: {q:.3}; of all rounds: {all_ratio:.3}", quiet.len()),
        None => println!("no quiet round (every round waited 5 % or more); ratio, median of all: {all_ratio:.3}"),
    }
    println!(
        "mask per token, median of runs: p50 {mask_p50:.0} us, p99 {mask_p99:.0} us; step wait p50 {wait_p50:.0} us"
    );
    let doc = json!({
        "bench": "guided", "threads": args.threads, "concurrency": CONCURRENCY, "generated_per_request": gen,
        "rounds": rounds, "runs": json_runs,
        "decode_tokens_per_s_free": free, "decode_tokens_per_s_mixed": mixed,
        "mixed_over_free_per_round": rounds_ratio.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
        "mixed_over_free_quiet_median": quiet_ratio, "quiet_rounds": quiet.len(), "mixed_over_free_median": all_ratio,
        "mask_us_p50": mask_p50, "mask_us_p99": mask_p99, "mask_wait_us_p50": wait_p50,
    });
    println!("{doc}");
    if let Err(e) = std::fs::write(&args.json, format!("{doc:#}\n")) {
        eprintln!("cannot write {}: {e}", args.json);
    }
}
