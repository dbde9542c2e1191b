//! Microseconds per `Sampler::sample` call on one 49,152-logit row (SmolLM2's vocabulary), for the sampling
//! settings a chat server sees most, and with log probabilities (`LogprobSampler`, `top_logprobs` 20): what
//! `logprobs` adds per generated token. Prints a table, then one JSON line per case.
//!
//! Run: `cargo bench --bench sampling [-- NAME]` (NAME: only the cases whose name contains it). The row is synthetic (no forward pass is needed): a bulk of logits drawn
//! from N(0, 2²) and 32 plausible next tokens spread between 6 and 16, roughly the shape of a chat model's row
//! when it is fairly sure of the next word. How many tokens top-p keeps, and so its cost, depends on that shape.

use std::hint::black_box;
use std::time::Instant;

use ember::engine::sampling::{LogprobSampler, Sampler, SamplingParams};
use ember::model::TokenId;

#[path = "../tests/common/rng.rs"]
mod rng;
use rng::Rng;

const VOCAB: usize = 49_152;
/// Timed calls per case; each is timed on its own, with a fresh copy of the row made outside the timing.
const ITERATIONS: usize = 2_000;
const WARMUP: usize = 100;
/// Tokens accepted before the penalties case is timed.
const ACCEPTED: usize = 512;

/// The synthetic logits row described in the file comment.
fn synthetic_row(rng: &mut Rng) -> Vec<f32> {
    let mut row: Vec<f32> = (0..VOCAB).map(|_| (2.0 * rng.normal()) as f32).collect();
    for rank in 0..32 {
        let token = (rng.next_u64() % VOCAB as u64) as usize;
        row[token] = 16.0 - 10.0 * (rank as f32 / 31.0).sqrt();
    }
    row
}

struct Case {
    name: &'static str,
    params: SamplingParams,
    accepted: usize,
    /// Sample with log probabilities and this many alternatives.
    logprobs: Option<usize>,
}

fn cases() -> Vec<Case> {
    let base = SamplingParams::default();
    vec![
        Case { name: "greedy", params: base.clone(), accepted: 0, logprobs: None },
        Case {
            name: "temperature 0.8",
            params: SamplingParams { temperature: 0.8, ..base.clone() },
            accepted: 0,
            logprobs: None,
        },
        Case {
            name: "temperature 0.8 + top_p 0.95",
            params: SamplingParams { temperature: 0.8, top_p: 0.95, ..base.clone() },
            accepted: 0,
            logprobs: None,
        },
        Case {
            name: "top_k 40 + top_p 0.9 + temperature 0.7",
            params: SamplingParams { temperature: 0.7, top_k: 40, top_p: 0.9, ..base.clone() },
            accepted: 0,
            logprobs: None,
        },
        Case {
            name: "min_p 0.05 (temperature 1)",
            params: SamplingParams { temperature: 1.0, min_p: 0.05, ..base.clone() },
            accepted: 0,
            logprobs: None,
        },
        Case {
            name: "greedy + repetition 1.1 + presence 0.5",
            params: SamplingParams { repetition_penalty: 1.1, presence_penalty: 0.5, ..base.clone() },
            accepted: ACCEPTED,
            logprobs: None,
        },
        Case {
            name: "temperature 0.8 + top_p 0.95 + penalties",
            params: SamplingParams {
                temperature: 0.8,
                top_p: 0.95,
                repetition_penalty: 1.1,
                presence_penalty: 0.5,
                ..base.clone()
            },
            accepted: ACCEPTED,
            logprobs: None,
        },
        Case { name: "greedy + logprobs 20", params: base.clone(), accepted: 0, logprobs: Some(20) },
        Case {
            name: "temperature 0.8 + top_p 0.95 + logprobs 20",
            params: SamplingParams { temperature: 0.8, top_p: 0.95, ..base },
            accepted: 0,
            logprobs: Some(20),
        },
    ]
}

/// The `q`-quantile of sorted microsecond timings.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let mut rng = Rng(2024);
    let row = synthetic_row(&mut rng);
    let prompt: Vec<TokenId> = (0..256).map(|_| (rng.next_u64() % VOCAB as u64) as TokenId).collect();
    let mut work = row.clone();
    let mut results = Vec::new();
    // `cargo bench` passes `--bench` to harness-less benches; any other argument filters the cases by name.
    let filter: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    for case in cases().into_iter().filter(|case| filter.as_ref().is_none_or(|f| case.name.contains(f.as_str()))) {
        let mut sampler = Sampler::new(case.params.clone(), &prompt, 7);
        for _ in 0..case.accepted {
            sampler.accept((rng.next_u64() % VOCAB as u64) as TokenId);
        }
        let mut with_logprobs = LogprobSampler::default();
        let mut timings_us = Vec::with_capacity(ITERATIONS);
        for iteration in 0..WARMUP + ITERATIONS {
            work.copy_from_slice(&row);
            let start = Instant::now();
            match case.logprobs {
                None => {
                    black_box(sampler.sample(black_box(&mut work)));
                }
                Some(top) => {
                    black_box(with_logprobs.sample(&mut sampler, black_box(&mut work), top));
                }
            }
            let elapsed = start.elapsed();
            if iteration >= WARMUP {
                timings_us.push(elapsed.as_secs_f64() * 1e6);
            }
        }
        timings_us.sort_by(f64::total_cmp);
        results.push((case.name, quantile(&timings_us, 0.1), quantile(&timings_us, 0.5), quantile(&timings_us, 0.9)));
    }

    println!("sample() on a {VOCAB}-logit row, {ITERATIONS} calls per case");
    println!("{:<44} {:>9} {:>9} {:>9}", "case", "p10 µs", "p50 µs", "p90 µs");
    for (name, p10, p50, p90) in &results {
        println!("{name:<44} {p10:>9.1} {p50:>9.1} {p90:>9.1}");
    }
    for (name, p10, p50, p90) in &results {
        println!(
            "{{\"bench\":\"sampling\",\"case\":\"{name}\",\"vocab\":{VOCAB},\"iterations\":{ITERATIONS},\
             \"p10_us\":{p10:.2},\"p50_us\":{p50:.2},\"p90_us\":{p90:.2}}}"
        );
    }
}
