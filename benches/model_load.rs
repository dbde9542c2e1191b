//! Model load time on the real model, part by part: opening and validating the GGUF file (read into memory or
//! memory-mapped, then header, metadata, tensor infos), the llama hyperparameters and tensor checks, the
//! tokenizer, the chat template.
//!
//! Then the two load modes (`"load": "read" | "mmap"`) end to end, each in a fresh process so that one's pages do
//! not count for the other: engine start time (the CPU backend packs the weights in it), resident memory
//! (anonymous and file-backed, from `/proc/self/status`) after a 64-token greedy generation, its peak (`VmHWM`),
//! and that generation's decode tok/s. The modes alternate for `--rounds` rounds (default 3); the page cache holds
//! the file throughout (a warm load). `"auto"`, the default, is one or the other by the file's size.
//!
//! `cargo bench --bench model_load -- [--rounds N]`: a table per part and one JSON line each. `EMBER_MODEL` picks
//! another model (a 3B file, say).

#[path = "../tests/common/proc_status.rs"]
mod proc_status;

use std::process::Command;
use std::time::Instant;

use ember::engine::{Engine, EngineConfig, RequestOptions, SubmitRequest};
use ember::model::chat_template::ChatTemplate;
use ember::model::gguf::{GgufFile, LoadMode};
use ember::model::llama::LlamaConfig;
use ember::model::path::resolve_model_path;
use ember::model::tokenizer::Tokenizer;
use ember::model::Model;
use proc_status::proc_status_kib;

const RUNS: usize = 20;

/// Median and minimum milliseconds of `RUNS` calls of `f`.
fn time(mut f: impl FnMut()) -> (f64, f64) {
    let mut ms: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[RUNS / 2], ms[0])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(&args[i + 1]);
    }
    let rounds = args.iter().position(|a| a == "--rounds").map_or(3, |i| args[i + 1].parse().expect("--rounds N"));
    parts();
    modes(rounds);
}

fn parts() {
    let path = resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
    let file = GgufFile::open(&path).expect("model opens");
    let rows = [
        ("gguf_open_read", time(|| drop(GgufFile::open_with(&path, LoadMode::Read).expect("open")))),
        ("gguf_open_mmap", time(|| drop(GgufFile::open_with(&path, LoadMode::Mmap).expect("open")))),
        (
            "llama_config",
            time(|| {
                LlamaConfig::from_gguf(&file).expect("config");
            }),
        ),
        ("tokenizer", time(|| drop(Tokenizer::from_gguf(&file).expect("tokenizer")))),
        ("chat_template", time(|| drop(ChatTemplate::from_gguf(&file).expect("template")))),
        ("model_load_total", time(|| drop(Model::load(Some(&path)).expect("model")))),
    ];
    println!("{:<18} {:>10} {:>10}", "part", "median ms", "min ms");
    for (name, (median, min)) in &rows {
        println!("{name:<18} {median:>10.2} {min:>10.2}");
    }
    let json: serde_json::Map<String, serde_json::Value> =
        rows.iter().map(|(name, (median, _))| (format!("{name}_ms"), serde_json::json!(median))).collect();
    println!("{}", serde_json::json!({ "bench": "model_load", "median": json }));
}

const MODES: [&str; 2] = ["read", "mmap"];

/// One engine in this process with `"load": mode`: prints one JSON line of what it measured.
fn child(mode: &str) {
    let load: LoadMode = serde_json::from_value(serde_json::json!(mode)).expect("a load mode");
    let start = Instant::now();
    let engine = Engine::new(EngineConfig { load, threads: 2, ..Default::default() }).expect("engine");
    let start_ms = start.elapsed().as_secs_f64() * 1000.0;
    let (anon_loaded, file_loaded) = (proc_status_kib("RssAnon"), proc_status_kib("RssFile"));
    let prompt: Vec<_> = (100..116).collect();
    let request = SubmitRequest::with_options(
        prompt,
        RequestOptions { max_tokens: Some(64), ignore_eos: true, ..Default::default() },
    );
    let h = engine.submit(request).expect("submit");
    h.wait();
    let tps = h.timing_metrics(0).mean_itl_ms.map_or(0.0, |itl| 1000.0 / itl);
    println!(
        "{}",
        serde_json::json!({"mode": mode, "engine_start_ms": start_ms, "rss_anon_kib_loaded": anon_loaded,
            "rss_file_kib_loaded": file_loaded, "rss_anon_kib": proc_status_kib("RssAnon"), "rss_file_kib": proc_status_kib("RssFile"),
            "peak_rss_kib": proc_status_kib("VmHWM"), "decode_tps": tps})
    );
}

/// Each mode in its own process, alternating, `rounds` times; the median of each figure.
fn modes(rounds: usize) {
    let exe = std::env::current_exe().expect("this bench's path");
    let mut runs: Vec<Vec<serde_json::Value>> = vec![Vec::new(); MODES.len()];
    for _ in 0..rounds {
        for (i, mode) in MODES.iter().enumerate() {
            let out = Command::new(&exe).args(["--child", mode]).output().expect("running a child");
            assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
            let line = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_owned();
            runs[i].push(serde_json::from_str(&line).expect("the child's JSON"));
        }
    }
    let median = |runs: &[serde_json::Value], key: &str| {
        let mut v: Vec<f64> = runs.iter().map(|r| r[key].as_f64().unwrap_or(0.0)).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let keys = ["engine_start_ms", "rss_anon_kib", "rss_file_kib", "peak_rss_kib", "decode_tps"];
    println!("\nload modes, each in its own process, median of {rounds} rounds (2 threads, warm page cache)");
    println!(
        "{:<6} {:>16} {:>14} {:>14} {:>14} {:>11}",
        "load", "engine start ms", "RssAnon MiB", "RssFile MiB", "peak RSS MiB", "decode t/s"
    );
    let mut json = serde_json::Map::new();
    for (mode, runs) in MODES.iter().zip(&runs) {
        let m: Vec<f64> = keys.iter().map(|k| median(runs, k)).collect();
        let mib = |kib: f64| kib / 1024.0;
        println!("{mode:<6} {:>16.1} {:>14.1} {:>14.1} {:>14.1} {:>11.1}", m[0], mib(m[1]), mib(m[2]), mib(m[3]), m[4]);
        json.insert(
            mode.to_string(),
            keys.iter().zip(&m).map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect(),
        );
    }
    println!("{}", serde_json::json!({ "bench": "load_modes", "rounds": rounds, "median": json }));
}
