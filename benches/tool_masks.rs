//! What `tool_choice: "auto"` costs in masks, per tool-call format: the engine's mask times per token (p50, p99,
//! mean; `Engine::mask_times`) while SmolLM2 writes free text under each format's lazy grammar, and while it writes
//! a call (a bias on the format's opening marker, as tests/protocol_tools.rs steers it). One engine per format, the
//! format set by the engine option `chat_template` (llama.cpp's real templates: scripts/llamacpp/fetch-templates.sh).
//!
//! `cargo bench --bench tool_masks [-- --requests N] [--json PATH]`. Prints a table and writes JSON (default
//! `target/bench-tool-masks.json`).

use std::path::PathBuf;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::ApiRequest;
use serde_json::{json, Value};

/// Each format: a name, the template (`None`: the model's own, ember's format; a name of llama.cpp's templates, or
/// a `.jinja` path in the repository) and the marker a call begins with.
const FORMATS: [(&str, Option<&str>, &str); 7] = [
    ("ember's (SmolLM2's template)", None, "{\""),
    ("Hermes (Qwen 2.5)", Some("Qwen-Qwen2.5-7B-Instruct"), "<tool_call>"),
    ("Llama 3.x JSON (Llama 3.1)", Some("meta-llama-Llama-3.1-8B-Instruct"), "{\""),
    ("Mistral (Nemo)", Some("mistralai-Mistral-Nemo-Instruct-2407"), "[TOOL_CALLS]["),
    ("Mistral v11 (Devstral)", Some("unsloth-mistral-Devstral-Small-2507"), "[TOOL_CALLS]"),
    ("Qwen3-Coder XML", Some("Qwen3-Coder"), "<tool_call>"),
    ("Phi-4-mini", Some("tests/fixtures/phi4_mini_template.jinja"), "functools["),
];

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn body(bias: Value) -> String {
    json!({
        "messages": [{"role": "user", "content": "What is the weather in Paris? Tell me about the city, too."}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}],
        "parallel_tool_calls": false, "max_tokens": 64, "temperature": 0, "logit_bias": bias,
    })
    .to_string()
}

/// Runs `requests` requests one after another and returns the engine's mask times over them.
fn measure(engine: &Engine, body: &str, requests: usize) -> Value {
    let before = engine.mask_times().masks;
    for _ in 0..requests {
        let r = ApiRequest::submit(engine, body, None).unwrap_or_else(|e| panic!("{e}"));
        r.handle().wait();
    }
    let t = engine.mask_times();
    json!({"masks": t.masks - before, "p50_us": t.mask_p50_us, "p99_us": t.mask_p99_us, "mean_us": t.mask_mean_us})
}

fn main() {
    let requests: usize = arg("--requests").map_or(4, |n| n.parse().expect("--requests N"));
    let json_path = arg("--json").unwrap_or_else(|| "target/bench-tool-masks.json".into());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let templates = root.join(".cache/llamacpp/templates");
    println!("tool_masks bench: {requests} greedy requests of 64 tokens per row, SmolLM2, 2 threads");
    println!("{:<30} {:<6} {:>7} {:>9} {:>9} {:>9}", "format", "output", "masks", "p50 µs", "p99 µs", "mean µs");
    let mut rows = Vec::new();
    for (name, template, marker) in FORMATS {
        let path = |t: &str| match t.ends_with(".jinja") {
            true => root.join(t),
            false => templates.join(format!("{t}.jinja")),
        };
        let chat_template = template.map(|t| path(t).to_string_lossy().into_owned());
        let config = EngineConfig { chat_template, threads: 2, kv_cache_tokens: 4096, ..Default::default() };
        let engine = Engine::new(config).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ids = engine.model().tokenizer.encode(marker, false);
        let bias: Value = ids.iter().map(|id| (id.to_string(), json!(100))).collect::<serde_json::Map<_, _>>().into();
        // Each engine's own times: a fresh engine per format, text first, then calls (the times accumulate).
        for (output, bias) in [("text", json!({})), ("call", bias)] {
            let t = measure(&engine, &body(bias), requests);
            println!(
                "{name:<30} {output:<6} {:>7} {:>9.1} {:>9.1} {:>9.1}",
                t["masks"],
                t["p50_us"].as_f64().unwrap_or(0.0),
                t["p99_us"].as_f64().unwrap_or(0.0),
                t["mean_us"].as_f64().unwrap_or(0.0)
            );
            rows.push(json!({"format": name, "output": output, "times": t}));
        }
    }
    std::fs::write(&json_path, serde_json::to_string_pretty(&json!({"rows": rows})).unwrap()).unwrap();
    println!("JSON: {json_path}");
}
