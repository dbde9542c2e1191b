//! What scoring a prompt costs (`prompt_logprobs`): the same prompts prefilled with and without their log
//! probabilities, one request at a time (`max_tokens: 1`, prefix caching off so that every prompt is computed),
//! the two settings alternated round after round so that a drifting machine disturbs both alike.
//!
//! Scoring asks the output projection for every prompt row (not only the last) and prefills in chunks of 32
//! (`engine/sampling/prompt_logprobs.rs`); the ratio of prefill throughputs is the cost.
//!
//! `cargo bench --bench prompt_logprobs -- [--quick] [--threads 2] [--rounds 5] [--prompt-tokens 480]
//! [--top 5] [--json PATH]`. Prints a table and writes JSON (default `target/bench-prompt-logprobs.json`).

use std::time::Instant;

use ember::engine::{Engine, EngineConfig, Logger, RequestOptions, SubmitRequest};
use ember::model::{Model, TokenId};
use serde_json::json;

struct Args {
    threads: usize,
    rounds: usize,
    prompt_tokens: usize,
    top: usize,
    json: String,
}

fn parse_args() -> Args {
    let mut args =
        Args { threads: 2, rounds: 5, prompt_tokens: 480, top: 5, json: "target/bench-prompt-logprobs.json".into() };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut it = raw.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--quick" => {
                args.rounds = 2;
                args.prompt_tokens = 160;
            }
            "--threads" => args.threads = value().parse().expect("--threads N"),
            "--rounds" => args.rounds = value().parse().expect("--rounds N"),
            "--prompt-tokens" => args.prompt_tokens = value().parse().expect("--prompt-tokens N"),
            "--top" => args.top = value().parse().expect("--top K"),
            "--json" => args.json = value(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

/// A prompt of exactly `n` tokens of plain English.
fn prompt(model: &Model, n: usize, salt: usize) -> Vec<TokenId> {
    let text = format!(
        "Report {salt}. The harbour town kept records of every ship that came in, the weather it brought and the \
         cargo it carried; the clerks wrote in a careful hand, and the ledgers filled a whole room of shelves. "
    )
    .repeat(n / 30 + 2);
    model.tokenizer.encode(&text, false)[..n].to_vec()
}

/// Seconds to prefill `prompts`, one after the other, scoring them or not.
fn run(engine: &Engine, prompts: &[Vec<TokenId>], top: Option<usize>) -> f64 {
    let start = Instant::now();
    for p in prompts {
        let request = SubmitRequest::with_options(
            p.clone(),
            RequestOptions { max_tokens: Some(1), prompt_logprobs: top, ..Default::default() },
        );
        let h = engine.submit(request).expect("submit");
        h.wait();
        assert_eq!(h.error(), None);
        assert_eq!(top.is_some(), h.prompt_logprobs(0).is_some());
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    let args = parse_args();
    let model = std::sync::Arc::new(Model::load(None).expect("the model (scripts/fetch-model.sh)"));
    let config = EngineConfig { threads: args.threads, enable_prefix_caching: false, ..Default::default() };
    let engine = Engine::with_model(config, model.clone(), Logger::silent()).expect("engine");
    let prompts: Vec<Vec<TokenId>> = (0..4).map(|i| prompt(&model, args.prompt_tokens, i)).collect();
    let tokens = (prompts.len() * args.prompt_tokens) as f64;
    run(&engine, &prompts[..1], None);
    run(&engine, &prompts[..1], Some(args.top));
    let (mut plain, mut scored) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        plain.push(tokens / run(&engine, &prompts, None));
        scored.push(tokens / run(&engine, &prompts, Some(args.top)));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (p, s) = (median(&mut plain), median(&mut scored));
    println!(
        "prompt scoring, {} prompts of {} tokens, top {}, {} rounds",
        prompts.len(),
        args.prompt_tokens,
        args.top,
        args.rounds
    );
    println!("{:<28} {:>14}", "setting", "prefill tok/s");
    println!("{:<28} {:>14.1}", "plain", p);
    println!("{:<28} {:>14.1}", "prompt_logprobs", s);
    println!("scored / plain: {:.3}", s / p);
    let out = json!({
        "prompt_tokens": args.prompt_tokens, "prompts": prompts.len(), "top": args.top, "rounds": args.rounds,
        "threads": args.threads, "plain_prefill_tps": p, "scored_prefill_tps": s, "ratio": s / p,
        "plain_rounds": plain, "scored_rounds": scored,
    });
    std::fs::write(&args.json, serde_json::to_string_pretty(&out).unwrap()).expect("writing the JSON");
}
