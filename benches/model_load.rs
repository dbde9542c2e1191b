//! Model load time on the real model, part by part: opening and validating the GGUF file (memory map, header,
//! metadata, tensor infos), the llama hyperparameters and tensor checks, the tokenizer, the chat template.
//!
//! `cargo bench --bench model_load`: median and minimum of 20 runs each; a table and one JSON line.

use std::time::Instant;

use ember::model::chat_template::ChatTemplate;
use ember::model::gguf::GgufFile;
use ember::model::llama::LlamaConfig;
use ember::model::path::resolve_model_path;
use ember::model::tokenizer::Tokenizer;
use ember::model::Model;

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
    let path = resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
    let file = GgufFile::open(&path).expect("model opens");
    let rows = [
        ("gguf_open", time(|| drop(GgufFile::open(&path).expect("open")))),
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
