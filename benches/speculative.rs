//! n-gram speculative decoding against plain decoding, greedy, on two workloads:
//! - **extractive**: the answer repeats text of the prompt (rewrite a passage with one change, repeat a code
//!   block with a renamed variable, quote a passage);
//! - **free**: story prompts (as `benches/engine.rs`), where little repeats.
//!
//! Each workload runs single stream (one request at a time; decode tok/s = (n − 1) / generation time, from the
//! engine's own per-request metrics) and 16 concurrent (aggregate generated tokens / wall time), with and without
//! speculation, the two alternated round after round in one process. Reports acceptance (accepted / drafted) and
//! whether every output is identical to plain decoding's.
//!
//! Two figures explain the single-stream ratios. The **verification cost**: the seconds of one forward step of a
//! `n`-token chunk with every row's logits (what verifying `n − 1` draft tokens costs), over a 1-token step's, on
//! the CPU backend the engines use. And the **ceiling**: the speedup an oracle would get from the same n-gram
//! drafts, knowing in advance how many of each draft's tokens the model will accept and verifying just those
//! (`Σ tokens / Σ cost(1 + accepted)` over plain decoding's outputs, with the measured costs): no planner can
//! beat it with these drafts on this machine.
//!
//! `cargo bench --bench speculative -- [--quick] [--threads 2] [--rounds 3] [--k 8] [--max-tokens 96]
//! [--json PATH]`. Prints the tables and writes JSON (default `target/bench-speculative.json`).

use std::sync::Arc;
use std::time::Instant;

use ember::backend::cpu::{CpuBackend, CpuBackendOptions};
use ember::engine::speculative::{SpeculativeConfig, SpeculativeMethod};
use ember::engine::{ChoiceOutput, Engine, EngineConfig, Logger, RequestOptions, SubmitRequest};
use ember::model::chat_template::ChatMessage;
use ember::model::llama::{forward, SeqChunk};
use ember::model::{Model, TokenId};
use serde_json::json;

struct Args {
    threads: usize,
    rounds: usize,
    k: usize,
    max_tokens: usize,
    json: String,
}

fn parse_args() -> Args {
    let mut args = Args { threads: 2, rounds: 3, k: 8, max_tokens: 96, json: "target/bench-speculative.json".into() };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut it = raw.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--quick" => {
                args.rounds = 1;
                args.max_tokens = 48;
            }
            "--threads" => args.threads = value().parse().expect("--threads N"),
            "--rounds" => args.rounds = value().parse().expect("--rounds N"),
            "--k" => args.k = value().parse().expect("--k N"),
            "--max-tokens" => args.max_tokens = value().parse().expect("--max-tokens N"),
            "--json" => args.json = value(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

const PASSAGE: &str = "The lighthouse stood on a rock a mile from the shore. Every evening the keeper climbed the \
    one hundred and twelve steps, trimmed the wick, polished the great lens and lit the lamp. Ships passing in the \
    night saw its beam sweep the water every ten seconds, and knew where the reef lay. In winter the storms threw \
    spray over the gallery, and the keeper wrote in his log the height of the waves and the names of the ships.";

const CODE: &str = "def total_price(items, tax_rate):\n    subtotal = 0\n    for item in items:\n        subtotal += \
    item.price * item.quantity\n    tax = subtotal * tax_rate\n    return subtotal + tax\n";

fn chat(model: &Model, message: &str) -> Vec<TokenId> {
    let text = model.chat_template.render(&[ChatMessage::new("user", message)], true).expect("template");
    model.tokenizer.encode(&text, true)
}

fn extractive(model: &Model) -> Vec<Vec<TokenId>> {
    vec![
        chat(model, &format!("{PASSAGE}\n\nRewrite the text above exactly, but say 'tower' instead of 'lighthouse'.")),
        chat(model, &format!("{CODE}\nRepeat this code exactly, with the variable subtotal renamed to net.")),
        chat(model, &format!("{PASSAGE}\n\nQuote the text above word for word.")),
        chat(model, &format!("Copy this text:\n{PASSAGE}")),
    ]
}

fn free(model: &Model) -> Vec<Vec<TokenId>> {
    (0..4)
        .map(|i| {
            chat(
                model,
                &format!(
                    "Story {i}. Write a long story about a curious engineer who builds a small machine that can \
                     count the stars, and describe every step of the work in careful detail."
                ),
            )
        })
        .collect()
}

struct Run {
    /// Single stream: mean of the requests' decode tok/s; concurrent: aggregate tok/s.
    tps: f64,
    drafted: u32,
    accepted: u32,
    outputs: Vec<Vec<ChoiceOutput>>,
}

fn run(engine: &Engine, prompts: &[Vec<TokenId>], max_tokens: usize, concurrent: usize) -> Run {
    let request = |p: &Vec<TokenId>| {
        SubmitRequest::with_options(p.clone(), RequestOptions { max_tokens: Some(max_tokens), ..Default::default() })
    };
    let (mut drafted, mut accepted, mut outputs) = (0, 0, Vec::new());
    let tps = if concurrent == 1 {
        let mut rates = Vec::new();
        for p in prompts {
            let h = engine.submit(request(p)).expect("submit");
            h.wait();
            let (m, s) = (h.timing_metrics(0), h.stats(0).expect("stats"));
            rates.push(m.mean_itl_ms.map_or(0.0, |itl| 1000.0 / itl));
            drafted += s.num_draft_tokens;
            accepted += s.num_accepted_tokens;
            outputs.push(h.choices());
        }
        rates.iter().sum::<f64>() / rates.len() as f64
    } else {
        let start = Instant::now();
        let handles: Vec<_> =
            (0..concurrent).map(|i| engine.submit(request(&prompts[i % prompts.len()])).expect("submit")).collect();
        let mut generated = 0;
        for h in &handles {
            h.wait();
            let s = h.stats(0).expect("stats");
            drafted += s.num_draft_tokens;
            accepted += s.num_accepted_tokens;
            generated += s.num_generation_tokens;
            outputs.push(h.choices());
        }
        f64::from(generated) / start.elapsed().as_secs_f64()
    };
    Run { tps, drafted, accepted, outputs }
}

/// Chunk sizes whose verification cost is measured (1: a plain decode).
const COST_CHUNKS: usize = 9;

/// Median seconds of a forward step of an `n`-token chunk, every row's logits, after a 128-token prompt, for `n`
/// in `1..=COST_CHUNKS` (index `n - 1`), the sizes alternated round after round.
fn verification_costs(model: &Model, threads: usize, rounds: usize) -> Vec<f64> {
    let options = CpuBackendOptions { threads, ..CpuBackendOptions::single_sequence(1024) };
    let mut backend = CpuBackend::new(&model.file, model.config.clone(), options).expect("backend");
    let table: Vec<u32> = (0..64).collect();
    let prompt = chat(model, PASSAGE);
    let prompt = &prompt[..128.min(prompt.len())];
    let vocab = model.config.vocab_size;
    let mut logits = vec![0f32; COST_CHUNKS * vocab];
    let chunk = |tokens, start_pos, logit_rows| SeqChunk {
        tokens,
        start_pos,
        block_table: &table,
        window_table: &[],
        logit_rows,
    };
    forward(&model.config, &mut backend, &[chunk(prompt, 0, 1)], &mut logits[..vocab]).expect("prefill");
    let draft: Vec<TokenId> = prompt[..COST_CHUNKS].to_vec();
    let mut seconds = vec![Vec::new(); COST_CHUNKS];
    for _ in 0..rounds.max(1) * 20 {
        for n in 1..=COST_CHUNKS {
            let start = Instant::now();
            let batch = [chunk(&draft[..n], prompt.len(), n)];
            forward(&model.config, &mut backend, &batch, &mut logits[..n * vocab]).expect("verification step");
            seconds[n - 1].push(start.elapsed().as_secs_f64());
        }
    }
    seconds
        .into_iter()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect()
}

/// The oracle's speedup over plain decoding on `outputs` (each prompt followed by its plain output): every step
/// drafts with `spec` and verifies only the draft tokens that will be accepted, at `cost[n - 1]` for `n` rows.
fn ceiling(spec: &SpeculativeConfig, outputs: &[(Vec<TokenId>, Vec<TokenId>)], cost: &[f64]) -> f64 {
    let (mut tokens, mut oracle) = (0usize, 0.0);
    for (prompt, output) in outputs {
        let all: Vec<TokenId> = prompt.iter().chain(output).copied().collect();
        let mut at = prompt.len();
        while at < all.len() {
            let draft = spec.propose(&all[..at], None, all.len() - at - 1).map(|d| d.tokens).unwrap_or_default();
            let accepted = draft.iter().zip(&all[at..]).take_while(|(d, t)| d == t).count();
            oracle += cost[(1 + accepted).min(cost.len()) - 1];
            at += accepted + 1;
        }
        tokens += output.len();
    }
    tokens as f64 * cost[0] / oracle
}

fn main() {
    let args = parse_args();
    let model = Arc::new(Model::load(None).expect("the model (scripts/fetch-model.sh)"));
    let base = EngineConfig { threads: args.threads, kv_cache_tokens: 32_768, ..Default::default() };
    let spec = SpeculativeConfig {
        method: SpeculativeMethod::Ngram,
        num_speculative_tokens: args.k,
        prompt_lookup_min: 2,
        prompt_lookup_max: 4,
        draft_policy: Default::default(),
    };
    let engines = [
        Engine::with_model(base.clone(), model.clone(), Logger::silent()).expect("engine"),
        Engine::with_model(EngineConfig { speculative: Some(spec), ..base }, model.clone(), Logger::silent())
            .expect("engine"),
    ];
    let workloads = [("extractive", extractive(&model)), ("free", free(&model))];
    println!(
        "speculative decoding: ngram k={} lookup 2..=4, {} threads, greedy, {} tokens per request, {} rounds",
        args.k, args.threads, args.max_tokens, args.rounds
    );
    let cost = verification_costs(&model, args.threads, args.rounds);
    println!("verification cost (a step of n tokens, every row's logits, over a 1-token step):");
    for (n, c) in cost.iter().enumerate() {
        println!("  n = {}: {:.2} ms, {:.2}", n + 1, c * 1e3, c / cost[0]);
    }
    println!(
        "{:<12} {:>10} {:>12} {:>12} {:>7} {:>11} {:>9} {:>8}",
        "workload", "streams", "plain tok/s", "spec tok/s", "ratio", "acceptance", "identical", "ceiling"
    );
    let mut rows = Vec::new();
    for (name, prompts) in &workloads {
        for concurrent in [1, 16] {
            let (mut plain, mut spec_tps, mut identical) = (Vec::new(), Vec::new(), true);
            let (mut drafted, mut accepted, mut ceiling_of) = (0, 0, None);
            for _ in 0..args.rounds {
                let p = run(&engines[0], prompts, args.max_tokens, concurrent);
                let s = run(&engines[1], prompts, args.max_tokens, concurrent);
                identical &= p.outputs == s.outputs;
                if concurrent == 1 {
                    let outputs: Vec<_> =
                        prompts.iter().cloned().zip(p.outputs.iter().map(|c| c[0].token_ids.clone())).collect();
                    ceiling_of = Some(ceiling(&spec, &outputs, &cost));
                }
                plain.push(p.tps);
                spec_tps.push(s.tps);
                drafted += s.drafted;
                accepted += s.accepted;
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (p, s) = (median(&mut plain), median(&mut spec_tps));
            let acceptance = if drafted == 0 { 0.0 } else { f64::from(accepted) / f64::from(drafted) };
            let ceiling_text = ceiling_of.map_or("-".to_owned(), |c| format!("{c:.3}"));
            println!(
                "{name:<12} {concurrent:>10} {p:>12.1} {s:>12.1} {:>7.3} {acceptance:>11.3} {identical:>9} \
                 {ceiling_text:>8}",
                s / p
            );
            rows.push(json!({"workload": name, "streams": concurrent, "plain_tps": p, "speculative_tps": s,
                "ratio": s / p, "drafted": drafted, "accepted": accepted, "acceptance": acceptance,
                "identical": identical, "ceiling": ceiling_of, "plain_rounds": plain,
                "speculative_rounds": spec_tps}));
        }
    }
    let out = json!({"k": args.k, "threads": args.threads, "max_tokens": args.max_tokens, "rounds": args.rounds,
        "verification_cost_s": cost, "results": rows});
    std::fs::write(&args.json, serde_json::to_string_pretty(&out).unwrap()).expect("writing the JSON");
}
