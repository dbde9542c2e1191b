//! The summary table of a GPU check: one line per result, with the target where it sets one, read from
//! the JSON files the other subcommands wrote into one folder. A file that is missing shows as "not run".

use std::path::Path;

use serde_json::Value;

use super::Args;

fn load(dir: &Path, name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The number at `pointer` (a JSON pointer such as `/backend/prefill_tok_s`).
fn number(v: &Option<Value>, pointer: &str) -> Option<f64> {
    v.as_ref()?.pointer(pointer)?.as_f64()
}

struct Line {
    what: String,
    value: String,
    target: &'static str,
    verdict: &'static str,
}

fn measured(what: &str, value: Option<f64>, unit: &str, target: &'static str, meets: impl Fn(f64) -> bool) -> Line {
    match value {
        Some(v) => Line {
            what: what.into(),
            value: format!("{v:.1} {unit}"),
            target,
            verdict: if target.is_empty() {
                ""
            } else if meets(v) {
                "meets"
            } else {
                "misses"
            },
        },
        None => Line { what: what.into(), value: "not run".into(), target, verdict: "" },
    }
}

/// A p50 / p99 pair, for information.
fn percentiles(what: &str, v: &Option<Value>, pointer: &str) -> Line {
    let value = match (number(v, &format!("{pointer}/p50")), number(v, &format!("{pointer}/p99"))) {
        (Some(p50), Some(p99)) => format!("{p50:.2} / {p99:.2} ms"),
        _ => "not run".into(),
    };
    Line { what: what.into(), value, target: "", verdict: "" }
}

fn verdict(what: &str, file: &Option<Value>, detail: String) -> Line {
    let (value, verdict) = match file.as_ref().and_then(|v| v.get("pass")).and_then(Value::as_bool) {
        Some(pass) => (detail, if pass { "pass" } else { "FAIL" }),
        None => ("not run".into(), ""),
    };
    Line { what: what.into(), value, target: "", verdict }
}

pub fn run(args: &Args) -> Result<(), String> {
    let dir = Path::new(args.positional.first().ok_or("table needs a DIR")?);
    let info = load(dir, "info.json");
    let consistency = load(dir, "consistency.json");
    let consistency_gemma = load(dir, "consistency-gemma3.json");
    let reference = load(dir, "reference.json");
    let bench = load(dir, "bench.json");
    let device = info.as_ref().and_then(|i| i.get("device")).and_then(Value::as_str).unwrap_or("unknown device");
    let gpu_vs_cpu = |what: &str, file: &Option<Value>| {
        verdict(
            what,
            file,
            format!(
                "max rel. error {:.1e}, bit-equal batches/graphs {}",
                number(file, "/rel_error_vs_cpu_f32/max").unwrap_or(f64::NAN),
                file.as_ref().and_then(|c| c.get("batch_invariant")).map_or("?".into(), |v| v.to_string())
            ),
        )
    };
    let mut lines = vec![
        gpu_vs_cpu("GPU vs CPU logits (synthetic SmolLM2)", &consistency),
        gpu_vs_cpu("GPU vs CPU logits (synthetic Gemma 3)", &consistency_gemma),
        verdict(
            "real model vs float64 / llama.cpp",
            &reference,
            format!(
                "median rel. error {:.4}, confident argmax {}/{}",
                number(&reference, "/rel_error_vs_float64/median").unwrap_or(f64::NAN),
                number(&reference, "/greedy_confident_agree").unwrap_or(f64::NAN),
                number(&reference, "/greedy_confident_positions").unwrap_or(f64::NAN),
            ),
        ),
    ];
    for (side, label) in [("backend", "backend, device argmax"), ("engine", "engine")] {
        lines.push(measured(
            &format!("single-stream decode ({label})"),
            number(&bench, &format!("/{side}/single_decode_tok_s")),
            "tok/s",
            "≥ 1,500",
            |v| v >= 1500.0,
        ));
        for n in ["16", "64", "256"] {
            let target = if n == "256" { "≥ 50,000" } else { "" };
            lines.push(measured(
                &format!("aggregate decode, {n} sequences ({label})"),
                number(&bench, &format!("/{side}/aggregate_decode/{n}/tok_s")),
                "tok/s",
                target,
                |v| v >= 50_000.0,
            ));
            let itl = format!("/{side}/aggregate_decode/{n}/itl_ms");
            lines.push(percentiles(&format!("  ITL p50 / p99 at {n} ({label})"), &bench, &itl));
        }
    }
    lines.push(measured(
        "prefill, 512 tokens (backend)",
        number(&bench, "/backend/prefill_tok_s"),
        "tok/s",
        "≥ 100,000",
        |v| v >= 100_000.0,
    ));
    lines.push(measured(
        "TTFT, 512-token prompt, idle engine",
        number(&bench, "/engine/ttft_512_idle_ms/p50"),
        "ms p50",
        "≤ 10",
        |v| v <= 10.0,
    ));
    lines.push(percentiles("  single-stream ITL p50 / p99 (engine)", &bench, "/engine/single_itl_ms"));
    for n in ["16", "64", "256"] {
        let ttft = format!("/engine/aggregate_decode/{n}/ttft_ms");
        lines.push(percentiles(&format!("  TTFT p50 / p99 at {n} concurrent (engine)"), &bench, &ttft));
    }

    println!("\nGPU check on {device}");
    let width = lines.iter().map(|l| l.what.chars().count()).max().unwrap_or(0);
    let value_width = lines.iter().map(|l| l.value.chars().count()).max().unwrap_or(0);
    for l in &lines {
        println!("  {:width$}  {:>value_width$}  {:>10}  {}", l.what, l.value, l.target, l.verdict);
    }
    Ok(())
}
