//! The GPU against the CPU backend on the same weights (on the GPU machine: the synthetic model, since the real one
//! does not travel in one run), and the GPU against itself:
//!
//! - GPU logits against the CPU's f32 path (`Precision::Float32`): both compute in f32 over an f16 KV cache, so
//!   they differ by summation order only; a relative error above 1e-3 at any row is a fault;
//! - against the CPU's fast path (8-bit activations), for information;
//! - with CUDA graphs and without, and sequence 0 alone and in the batch: equal bit for bit (batch invariance);
//! - the device's top-k against the logits it returned.
//!
//! The scenario: 4 sequences of 100-token prompts prefilled in one step (400 tokens: the tiled kernels), then 8
//! decode steps of the 4 together (the small kernels; replayed from a graph).

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::cuda::{CudaBackend, CudaBackendOptions};
use ember::backend::KvCacheTypes;
use ember::model::gguf::GgufFile;
use ember::model::llama::{forward, LlamaBackend, LlamaConfig, SeqChunk};
use ember::model::TokenId;
use serde_json::json;

use super::stats::{argmax, median, relative_error};
use super::Args;

const SEQS: usize = 4;
const PROMPT: usize = 100;
const DECODES: usize = 8;
const BLOCK: usize = 16;
const BLOCKS_PER_SEQ: usize = (PROMPT + DECODES).div_ceil(BLOCK);
/// The largest relative error of a GPU logits row against the CPU's f32 path that passes.
const MAX_ERROR: f64 = 1e-3;

/// Sequence `s`'s tokens: deterministic, spread over the vocabulary, clear of the 3 special ids.
fn tokens(s: usize, vocab: usize) -> Vec<TokenId> {
    (0..PROMPT + DECODES).map(|j| (3 + (s * 7919 + j * 104_729) % (vocab - 3)) as TokenId).collect()
}

/// Sequence `s`'s blocks, in reverse order so that positions do not map to cache rows in order.
fn table(s: usize) -> Vec<u32> {
    (s * BLOCKS_PER_SEQ..(s + 1) * BLOCKS_PER_SEQ).rev().map(|b| b as u32).collect()
}

/// Runs sequences `seqs` of the scenario on `backend`: `[seq][step][vocab]` logits, step 0 after the prompt.
fn scenario<B: LlamaBackend>(
    config: &LlamaConfig,
    backend: &mut B,
    seqs: &[usize],
) -> Result<Vec<Vec<Vec<f32>>>, String>
where
    B::Error: std::fmt::Display,
{
    let vocab = config.vocab_size;
    let all: Vec<Vec<TokenId>> = seqs.iter().map(|&s| tokens(s, vocab)).collect();
    let tables: Vec<Vec<u32>> = seqs.iter().map(|&s| table(s)).collect();
    let mut rows = vec![Vec::new(); seqs.len()];
    let mut logits = vec![0f32; seqs.len() * vocab];
    let mut pos = 0;
    while pos < PROMPT + DECODES {
        let n = if pos == 0 { PROMPT } else { 1 };
        let batch: Vec<SeqChunk<'_>> = (0..seqs.len())
            .map(|i| SeqChunk {
                tokens: &all[i][pos..pos + n],
                start_pos: pos,
                block_table: &tables[i],
                window_table: &[],
                logit_rows: 1,
            })
            .collect();
        forward(config, backend, &batch, &mut logits).map_err(|e| format!("step at {pos}: {e}"))?;
        for (i, row) in logits.chunks_exact(vocab).enumerate() {
            rows[i].push(row.to_vec());
        }
        pos += n;
    }
    Ok(rows)
}

fn cpu<'m>(
    file: &'m GgufFile,
    config: &LlamaConfig,
    threads: usize,
    precision: Precision,
) -> Result<CpuBackend<'m>, String> {
    let options = CpuBackendOptions {
        threads,
        max_batch_tokens: SEQS * PROMPT,
        kv_block_size: BLOCK,
        kv_num_blocks: SEQS * BLOCKS_PER_SEQ,
        kv_window_blocks: None,
        precision,
        kv_cache: KvCacheTypes::default(),
    };
    CpuBackend::new(file, config.clone(), options).map_err(|e| e.to_string())
}

fn gpu(file: &GgufFile, config: &LlamaConfig, graphs: bool) -> Result<CudaBackend, String> {
    let options = CudaBackendOptions {
        device: 0,
        max_batch_tokens: SEQS * PROMPT,
        kv_block_size: BLOCK,
        kv_num_blocks: SEQS * BLOCKS_PER_SEQ,
        kv_cache: KvCacheTypes::default(),
        graphs,
    };
    CudaBackend::new(file, config.clone(), options).map_err(|e| e.to_string())
}

/// Relative errors of every row of `ours` against `reference`.
fn errors(ours: &[Vec<Vec<f32>>], reference: &[Vec<Vec<f32>>]) -> Vec<f64> {
    ours.iter().flatten().zip(reference.iter().flatten()).map(|(a, b)| relative_error(a, b)).collect()
}

fn same_bits(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()))
}

pub fn run(args: &Args) -> Result<(), String> {
    let path = args.model()?;
    let file = GgufFile::open(path).map_err(|e| e.to_string())?;
    let config = LlamaConfig::from_gguf(&file).map_err(|e| e.to_string())?;
    let seqs: Vec<usize> = (0..SEQS).collect();

    let mut graphed = gpu(&file, &config, true)?;
    let with_graphs = scenario(&config, &mut graphed, &seqs)?;
    let mut plain = gpu(&file, &config, false)?;
    let without_graphs = scenario(&config, &mut plain, &seqs)?;
    let alone = scenario(&config, &mut plain, &[0])?;
    let graphs_equal = with_graphs.iter().zip(&without_graphs).all(|(a, b)| same_bits(a, b));
    // Alone, the prompt step computes 100 tokens instead of 400; every row must still be the same.
    let alone_equal = same_bits(&alone[0], &with_graphs[0]);

    // The device's top-k of the last decode step, run again (it rewrites the same keys and values).
    let k = 8;
    let vocab = config.vocab_size;
    let last = PROMPT + DECODES - 1;
    let all: Vec<Vec<TokenId>> = seqs.iter().map(|&s| tokens(s, vocab)).collect();
    let tables: Vec<Vec<u32>> = seqs.iter().map(|&s| table(s)).collect();
    let batch: Vec<SeqChunk<'_>> = (0..SEQS)
        .map(|i| SeqChunk {
            tokens: &all[i][last..=last],
            start_pos: last,
            block_table: &tables[i],
            window_table: &[],
            logit_rows: 1,
        })
        .collect();
    let (mut ids, mut values) = (vec![0; SEQS * k], vec![0f32; SEQS * k]);
    graphed.forward_top_k(&batch, k, &mut ids, &mut values).map_err(|e| e.to_string())?;
    let top_k_agrees = with_graphs.iter().enumerate().all(|(s, rows)| {
        let row = rows.last().expect("rows");
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        order[..k].iter().zip(&ids[s * k..(s + 1) * k]).all(|(&want, &got)| want == got as usize)
    });

    let started = std::time::Instant::now();
    let f32_rows = scenario(&config, &mut cpu(&file, &config, args.threads, Precision::Float32)?, &seqs)?;
    let q8_rows = scenario(&config, &mut cpu(&file, &config, args.threads, Precision::Quantized8)?, &seqs)?;
    let cpu_seconds = started.elapsed().as_secs_f64();
    let f32_errors = errors(&with_graphs, &f32_rows);
    let q8_errors = errors(&with_graphs, &q8_rows);
    let argmax_agree =
        with_graphs.iter().flatten().zip(f32_rows.iter().flatten()).filter(|(a, b)| argmax(a) == argmax(b)).count();
    let n_rows = f32_errors.len();
    let max_f32 = f32_errors.iter().copied().fold(0.0, f64::max);

    let pass = max_f32 <= MAX_ERROR && graphs_equal && alone_equal && top_k_agrees;
    println!(
        "GPU vs CPU f32 on {}: {n_rows} logits rows, relative error median {:.2e}, max {max_f32:.2e} (bound {MAX_ERROR:e}); \
         argmax agrees at {argmax_agree}/{n_rows}; vs CPU q8: median {:.2e}, max {:.2e}",
        path.display(),
        median(&f32_errors),
        median(&q8_errors),
        q8_errors.iter().copied().fold(0.0, f64::max),
    );
    println!(
        "graphs vs none bit-equal: {graphs_equal}; alone vs in batch bit-equal: {alone_equal}; top-{k} agrees: \
         {top_k_agrees}; CPU side took {cpu_seconds:.1} s on {} threads → {}",
        args.threads,
        if pass { "PASS" } else { "FAIL" }
    );
    super::write_json(
        args,
        &json!({
            "model": path.display().to_string(),
            "rows": n_rows,
            "rel_error_vs_cpu_f32": { "median": median(&f32_errors), "max": max_f32, "bound": MAX_ERROR },
            "rel_error_vs_cpu_q8": { "median": median(&q8_errors), "max": q8_errors.iter().copied().fold(0.0, f64::max) },
            "argmax_agrees_vs_cpu_f32": argmax_agree,
            "graphs_bit_equal": graphs_equal,
            "batch_invariant": alone_equal,
            "top_k_agrees": top_k_agrees,
            "graphs_recorded": graphed.graphs().0,
            "graphs_disabled": graphed.graphs().1,
            "pass": pass,
        }),
    )?;
    if pass {
        Ok(())
    } else {
        Err("the GPU disagrees with the CPU or with itself (see above)".into())
    }
}
