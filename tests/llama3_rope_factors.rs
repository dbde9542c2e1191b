//! The architecture seam, proved on a third model family: Llama 3's RoPE frequency factors (`rope_freqs.weight`,
//! one divisor of each pair's rotation speed) on a synthetic llama model, against the float64 reference forward
//! pass (`scripts/reference/reference_forward.py`, extended for the factors) at every position, on the precise
//! path. The same model without its factors must disagree with that reference, so the comparison can fail.

use ember::backend::KvCacheTypes;
use std::path::{Path, PathBuf};
use std::process::Command;

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::model::gguf::GgufFile;
use ember::model::llama::{forward, LlamaConfig, SeqChunk, SyntheticSpec};
use serde::Deserialize;

/// Token ids fed at positions 0..: long enough that the slowest pairs, divided by 8, still turn.
const IDS: [u32; 24] = [1, 17, 300, 42, 5, 99, 123, 7, 256, 8, 64, 3, 400, 12, 77, 200, 9, 31, 150, 2, 88, 111, 6, 45];

/// Llama 3's factors, shaped like its `rope_freqs`: 1 for the fast pairs, a ramp, 8 for the slow ones.
fn llama3_like_factors(n: usize) -> Vec<f32> {
    (0..n).map(|i| 1.0 + 7.0 * (i as f32 / (n - 1) as f32).powi(2)).collect()
}

#[derive(Deserialize)]
struct RefPosition {
    position: usize,
    top: Vec<RefTop>,
}

#[derive(Deserialize)]
struct RefTop {
    id: usize,
    logit: f64,
}

/// The reference's top-8 logits at every position of `IDS`.
fn reference(path: &Path) -> Vec<RefPosition> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/reference/reference_forward.py");
    let ids: Vec<String> = IDS.iter().map(|i| i.to_string()).collect();
    let out = Command::new("python3")
        .arg(&script)
        .arg(path)
        .arg("--ids")
        .args(&ids)
        .args(["--top", "8", "--all-positions"])
        .output()
        .expect("python3 runs (make test installs numpy and gguf)");
    assert!(out.status.success(), "{}: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the reference prints JSON")
}

/// Our logits at every position of `IDS` on the precise path.
fn ours(path: &Path) -> Vec<Vec<f32>> {
    let file = GgufFile::open(path).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"));
    let options = CpuBackendOptions {
        threads: 1,
        max_batch_tokens: 64,
        kv_block_size: 16,
        kv_num_blocks: 4,
        kv_window_blocks: None,
        precision: Precision::Float32,
        kv_cache: KvCacheTypes::default(),
    };
    let mut backend = CpuBackend::new(&file, config.clone(), options).unwrap_or_else(|e| panic!("{e}"));
    let table = [0u32, 1, 2, 3];
    (0..IDS.len())
        .map(|pos| {
            let chunk = SeqChunk {
                tokens: &IDS[pos..=pos],
                start_pos: pos,
                block_table: &table,
                window_table: &[],
                logit_rows: 1,
            };
            let mut logits = vec![0f32; config.vocab_size];
            forward(&config, &mut backend, &[chunk], &mut logits).unwrap_or_else(|e| panic!("{e}"));
            logits
        })
        .collect()
}

/// The largest `|ours − reference| / (1 + |reference|)` over the reference's top logits.
fn worst_error(ours: &[Vec<f32>], reference: &[RefPosition]) -> f64 {
    reference
        .iter()
        .flat_map(|p| {
            p.top.iter().map(move |t| (f64::from(ours[p.position][t.id]) - t.logit).abs() / (1.0 + t.logit.abs()))
        })
        .fold(0.0, f64::max)
}

fn write(spec: &SyntheticSpec, name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("ember-{}-{name}.gguf", std::process::id()));
    spec.writer().write(&path).unwrap();
    path
}

/// f32 against float64 over a 2-layer model. Measured 3.6e-7 (2026-12-01); ignoring the factors gives 0.125.
const TOLERANCE: f64 = 1e-5;

#[test]
fn rope_frequency_factors_match_the_float64_reference() {
    let base = SyntheticSpec::tiny(7);
    let head_dim = base.n_embd / base.n_head;
    let with = SyntheticSpec { rope_freq_factors: Some(llama3_like_factors(head_dim / 2)), ..base.clone() };
    let (with_path, without_path) = (write(&with, "factors"), write(&base, "plain"));
    let file = GgufFile::open(&with_path).unwrap();
    assert!(LlamaConfig::from_gguf(&file).unwrap().rope_freq_factors.is_some());

    let reference = reference(&with_path);
    let error = worst_error(&ours(&with_path), &reference);
    let without = worst_error(&ours(&without_path), &reference);
    let _ = (std::fs::remove_file(&with_path), std::fs::remove_file(&without_path));
    println!("relative logit error: {error:.2e} with the factors, {without:.2e} when ember ignores them");
    assert!(error <= TOLERANCE, "with the factors: {error:.2e} > {TOLERANCE:e}");
    assert!(without > 100.0 * TOLERANCE, "the factors should matter: {without:.2e}");
}
