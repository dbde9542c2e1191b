//! The real model on the GPU against the references of `tests/fixtures/` (see `tests/forward_reference.rs`, which
//! holds the CPU to the same ones):
//!
//! - `reference_logits.{json,f32}`: float64 logits at every prompt position of 4 chat prompts (a seeded subset of
//!   1,024 vocabulary entries plus each position's 64 largest); the GPU's relative error ‖gpu − ref‖ / ‖ref‖ over
//!   those entries must have a median ≤ 0.05;
//! - `greedy_ref.json`: llama.cpp's greedy generations, fed back token by token (teacher forcing); wherever the
//!   reference's top-1 probability leads its top-2 by ≥ 0.2, the GPU's argmax must be the reference token.
//!
//! Logits come from one-token steps (a step returns logits for a chunk's last token only), the cases side by side
//! in one batch, each in its own KV blocks. `--cpu` runs the same checks on the CPU backend's fast path, to try
//! the check itself where there is no GPU (the CPU passes them: `tests/forward_reference.rs`).

use ember::backend::KvCacheTypes;
use std::path::Path;

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::cuda::{CudaBackend, CudaBackendOptions};
use ember::model::gguf::GgufFile;
use ember::model::llama::{forward, LlamaBackend, LlamaConfig, SeqChunk};
use ember::model::TokenId;
use serde::Deserialize;
use serde_json::json;

use super::stats::{argmax, median};
use super::Args;

const BLOCK: usize = 16;
/// Room for the longest fed sequence of the fixtures (56 prompt tokens + 63 reference tokens).
const MAX_SEQ_LEN: usize = 128;
const MEDIAN_BOUND: f64 = 0.05;
const CONFIDENT_MARGIN: f64 = 0.2;

#[derive(Deserialize)]
struct ReferenceLogits {
    /// `[1024]` vocabulary ids, the same for every position.
    subset: Vec<usize>,
    /// Largest logits stored per position after the subset.
    top: usize,
    cases: Vec<ReferenceCase>,
}

#[derive(Deserialize)]
struct ReferenceCase {
    prompt_ids: Vec<TokenId>,
    /// `[positions][top]`.
    top_ids: Vec<Vec<usize>>,
}

#[derive(Deserialize)]
struct GreedyRef {
    cases: Vec<GreedyCase>,
}

#[derive(Deserialize)]
struct GreedyCase {
    prompt_ids: Vec<TokenId>,
    generated_ids: Vec<TokenId>,
    top5_per_position: Vec<RefPosition>,
}

#[derive(Deserialize)]
struct RefPosition {
    top5: Vec<RefToken>,
}

#[derive(Deserialize)]
struct RefToken {
    prob: f64,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("cannot parse {}: {e}", path.display()))
}

/// Feeds each sequence of `feeds` (tokens, first position with logits) one token per step after a one-chunk
/// prefill, side by side; calls `visit(sequence, position, logits)` for every position from its first on.
fn visit_logits<B: LlamaBackend>(
    config: &LlamaConfig,
    backend: &mut B,
    feeds: &[(&[TokenId], usize)],
    mut visit: impl FnMut(usize, usize, &[f32]),
) -> Result<(), String>
where
    B::Error: std::fmt::Display,
{
    let per_seq = MAX_SEQ_LEN / BLOCK;
    let tables: Vec<Vec<u32>> =
        (0..feeds.len()).map(|i| (i * per_seq..(i + 1) * per_seq).map(|b| b as u32).collect()).collect();
    let prefill: Vec<SeqChunk<'_>> = feeds
        .iter()
        .zip(&tables)
        .filter(|((_, first), _)| *first > 0)
        .map(|(&(tokens, first), table)| SeqChunk {
            tokens: &tokens[..first],
            start_pos: 0,
            block_table: table,
            window_table: &[],
            logit_rows: 0,
        })
        .collect();
    if !prefill.is_empty() {
        forward(config, backend, &prefill, &mut []).map_err(|e| format!("prefill: {e}"))?;
    }
    let vocab = config.vocab_size;
    let mut logits = vec![0f32; feeds.len() * vocab];
    for step in 0.. {
        let running: Vec<(usize, usize)> =
            feeds.iter().enumerate().map(|(i, f)| (i, f.1 + step)).filter(|&(i, pos)| pos < feeds[i].0.len()).collect();
        if running.is_empty() {
            return Ok(());
        }
        let batch: Vec<SeqChunk<'_>> = running
            .iter()
            .map(|&(i, pos)| SeqChunk {
                tokens: &feeds[i].0[pos..=pos],
                start_pos: pos,
                block_table: &tables[i],
                window_table: &[],
                logit_rows: 1,
            })
            .collect();
        let out = &mut logits[..running.len() * vocab];
        forward(config, backend, &batch, out).map_err(|e| format!("step {step}: {e}"))?;
        for (&(i, pos), row) in running.iter().zip(out.chunks_exact(vocab)) {
            visit(i, pos, row);
        }
    }
    Ok(())
}

fn softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f64> = row.iter().map(|&l| (f64::from(l) - f64::from(max)).exp()).collect();
    let total: f64 = w.iter().sum();
    w.into_iter().map(|x| x / total).collect()
}

pub fn run(args: &Args) -> Result<(), String> {
    let path = args.model()?;
    let file = GgufFile::open(path).map_err(|e| e.to_string())?;
    let config = LlamaConfig::from_gguf(&file).map_err(|e| e.to_string())?;
    let meta: ReferenceLogits = read_json(&args.fixtures.join("reference_logits.json"))?;
    let greedy: GreedyRef = read_json(&args.fixtures.join("greedy_ref.json"))?;
    let bin_path = args.fixtures.join("reference_logits.f32");
    let bytes = std::fs::read(&bin_path).map_err(|e| format!("cannot read {}: {e}", bin_path.display()))?;
    // `[case][position][subset + top]`, f32 little-endian.
    let reference: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let row_len = meta.subset.len() + meta.top;
    let positions: usize = meta.cases.iter().map(|c| c.prompt_ids.len()).sum();
    if reference.len() != positions * row_len {
        return Err(format!("{} does not match its JSON", bin_path.display()));
    }
    let kv_num_blocks = greedy.cases.len().max(meta.cases.len()) * MAX_SEQ_LEN / BLOCK;
    if args.cpu {
        let options = CpuBackendOptions {
            threads: args.threads,
            max_batch_tokens: 512,
            kv_block_size: BLOCK,
            kv_num_blocks,
            kv_window_blocks: None,
            precision: Precision::Quantized8,
            kv_cache: KvCacheTypes::default(),
        };
        let mut backend = CpuBackend::new(&file, config.clone(), options).map_err(|e| e.to_string())?;
        check(args, &config, &mut backend, &meta, &greedy, &reference, "CPU")
    } else {
        let options =
            CudaBackendOptions { kv_block_size: BLOCK, kv_num_blocks, ..CudaBackendOptions::single_sequence(1) };
        let mut backend = CudaBackend::new(&file, config.clone(), options).map_err(|e| e.to_string())?;
        check(args, &config, &mut backend, &meta, &greedy, &reference, "GPU")
    }
}

/// Both checks on `backend` (`reference` is `[case][position][subset + top]`), reported as run on `device`.
fn check<B: LlamaBackend>(
    args: &Args,
    config: &LlamaConfig,
    backend: &mut B,
    meta: &ReferenceLogits,
    greedy: &GreedyRef,
    reference: &[f32],
    device: &str,
) -> Result<(), String>
where
    B::Error: std::fmt::Display,
{
    let row_len = meta.subset.len() + meta.top;
    let positions: usize = meta.cases.iter().map(|c| c.prompt_ids.len()).sum();
    // Float64 logits at every prompt position.
    let case_start: Vec<usize> =
        meta.cases.iter().scan(0, |at, c| Some(std::mem::replace(at, *at + c.prompt_ids.len()))).collect();
    let feeds: Vec<(&[TokenId], usize)> = meta.cases.iter().map(|c| (c.prompt_ids.as_slice(), 0)).collect();
    let mut errors = vec![f64::NAN; positions];
    visit_logits(config, backend, &feeds, |case, pos, row| {
        let at = case_start[case] + pos;
        let expected = &reference[at * row_len..(at + 1) * row_len];
        let ids = meta.subset.iter().chain(&meta.cases[case].top_ids[pos]);
        let (mut diff, mut norm) = (0f64, 0f64);
        for (&id, &r) in ids.zip(expected) {
            diff += (f64::from(row[id]) - f64::from(r)).powi(2);
            norm += f64::from(r).powi(2);
        }
        errors[at] = (diff / norm).sqrt();
    })?;
    let (med, worst) = (median(&errors), errors.iter().copied().fold(f64::NEG_INFINITY, f64::max));

    // llama.cpp's greedy distributions under teacher forcing.
    let sequences: Vec<Vec<TokenId>> = greedy
        .cases
        .iter()
        .map(|c| c.prompt_ids.iter().chain(&c.generated_ids[..c.generated_ids.len() - 1]).copied().collect())
        .collect();
    let feeds: Vec<(&[TokenId], usize)> =
        sequences.iter().zip(&greedy.cases).map(|(s, c)| (s.as_slice(), c.prompt_ids.len() - 1)).collect();
    let (mut confident, mut agree_confident, mut total, mut agree_all) = (0, 0, 0, 0);
    let mut prob_diffs = Vec::new();
    let mut disagreements = Vec::new();
    visit_logits(config, backend, &feeds, |case, pos, row| {
        let c = &greedy.cases[case];
        let i = pos - (c.prompt_ids.len() - 1);
        let (top5, token) = (&c.top5_per_position[i].top5, c.generated_ids[i]);
        let agrees = argmax(row) == token as usize;
        total += 1;
        agree_all += usize::from(agrees);
        if top5[0].prob - top5[1].prob >= CONFIDENT_MARGIN {
            confident += 1;
            agree_confident += usize::from(agrees);
            if !agrees {
                disagreements.push((case, i));
            }
            prob_diffs.push((softmax(row)[token as usize] - top5[0].prob).abs());
        }
    })?;
    let mean_diff = prob_diffs.iter().sum::<f64>() / prob_diffs.len().max(1) as f64;

    let pass = med <= MEDIAN_BOUND && agree_confident == confident && confident > 0;
    println!(
        "real model on the {device}: {positions} prompt positions, relative error against float64 median {med:.4} \
         (bound {MEDIAN_BOUND}), max {worst:.4}; llama.cpp greedy: argmax agrees at {agree_confident}/{confident} \
         confident positions (margin ≥ {CONFIDENT_MARGIN}), {agree_all}/{total} in all, mean |Δp| {mean_diff:.4} → {}",
        if pass { "PASS" } else { "FAIL" }
    );
    for (case, i) in &disagreements {
        println!("  differs at a confident position: greedy_ref case {case}, generated token {i}");
    }
    super::write_json(
        args,
        &json!({
            "device": device,
            "positions": positions,
            "rel_error_vs_float64": { "median": med, "max": worst, "median_bound": MEDIAN_BOUND },
            "greedy_confident_positions": confident,
            "greedy_confident_agree": agree_confident,
            "greedy_all_positions": total,
            "greedy_all_agree": agree_all,
            "greedy_mean_abs_prob_diff_confident": mean_diff,
            "pass": pass,
        }),
    )?;
    if pass {
        Ok(())
    } else {
        Err("the GPU misses the reference (see above)".into())
    }
}
