//! The real model gives the same logits, bit for bit, on every kernel path this CPU runs: the 8 reference chat
//! prompts side by side in one batch, half of them prefilled whole and half in two chunks (the second chunk sharing
//! a step with the others' first decode), then decode steps feeding the scalar path's greedy tokens, on the fast
//! and on the precise path, the scalar path on one thread and the SIMD paths on two.
//!
//! This is the promise of `docs/architecture.md` ("Numerics"): a path decides speed, never a value, so the same
//! request gives the same tokens on an AVX-512 server, an AVX2-only one and a CPU with neither. On a machine with
//! AVX-512 this compares all three paths; on an AVX2-only one, two.
//!
//! The same scenario runs on a synthetic model whose every matrix (the tied embedding too) is MXFP4, the type of
//! gpt-oss's experts, which no small real model has.

use ember::backend::KvCacheTypes;
use serde::Deserialize;

use ember::backend::cpu::kernels::{kernels_named, supported_kernels, Kernels};
use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::model::gguf::{GgmlType, GgufFile};
use ember::model::llama::{forward, SeqChunk, SyntheticSpec};
use ember::model::{Model, TokenId};

const GREEDY_REF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/greedy_ref.json");
const KV_BLOCK_SIZE: usize = 16;
/// Room per sequence: the longest prompt (56 tokens) and the decoded tokens.
const MAX_SEQ_LEN: usize = 64;
/// Decode steps after the prompts.
const DECODE_STEPS: usize = 6;

#[derive(Deserialize)]
struct GreedyRef {
    cases: Vec<GreedyCase>,
}

#[derive(Deserialize)]
struct GreedyCase {
    prompt_ids: Vec<TokenId>,
}

/// Every logits row of a run, step after step, sequences in batch order, as bit patterns.
type Rows = Vec<Vec<u32>>;

fn prompts() -> Vec<Vec<TokenId>> {
    let text = std::fs::read_to_string(GREEDY_REF).unwrap_or_else(|e| panic!("cannot read {GREEDY_REF}: {e}"));
    let reference: GreedyRef = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{GREEDY_REF}: {e}"));
    reference.cases.into_iter().map(|c| c.prompt_ids).collect()
}

/// Runs the scenario on `kernels`. Decode tokens come from `feed` (the reference run's choices) when given, else
/// from this run's own argmax; returns the logits rows and the tokens fed.
fn run(
    model: &Model,
    kernels: &'static Kernels,
    precision: Precision,
    prompts: &[Vec<TokenId>],
    feed: Option<&[Vec<TokenId>]>,
) -> (Rows, Vec<Vec<TokenId>>) {
    let n = prompts.len();
    let threads = if kernels.name == "scalar" { 1 } else { 2 };
    let options = CpuBackendOptions {
        threads,
        max_batch_tokens: 512,
        kv_block_size: KV_BLOCK_SIZE,
        kv_num_blocks: n * MAX_SEQ_LEN / KV_BLOCK_SIZE,
        kv_window_blocks: None,
        precision,
        kv_cache: KvCacheTypes::default(),
    };
    let config = model.config.clone();
    let mut backend = CpuBackend::with_kernels(&model.file, config.clone(), options, kernels)
        .unwrap_or_else(|e| panic!("{}: {e}", kernels.name));
    let per_seq = MAX_SEQ_LEN / KV_BLOCK_SIZE;
    let tables: Vec<Vec<u32>> = (0..n).map(|i| (i * per_seq..(i + 1) * per_seq).map(|b| b as u32).collect()).collect();
    // Sequences of the second half prefill their prompt in two chunks.
    let first_chunk_end = |i: usize| if i >= n / 2 { prompts[i].len() / 2 } else { prompts[i].len() };
    let mut seqs: Vec<Vec<TokenId>> = prompts.to_vec();
    // Tokens of each sequence in the cache, and decode steps it has run.
    let mut done = vec![0usize; n];
    let mut decoded = vec![0usize; n];
    let mut rows = Rows::new();
    let mut fed: Vec<Vec<TokenId>> = vec![Vec::new(); n];
    let vocab = config.vocab_size;
    for step in 0.. {
        // Each sequence's next chunk: its first prompt chunk, the rest of its prompt, or its pending token.
        let mut chunks = Vec::new();
        for i in 0..n {
            let end = if done[i] == 0 { first_chunk_end(i) } else { seqs[i].len() };
            let decoding = done[i] >= prompts[i].len();
            if !(decoding && decoded[i] == DECODE_STEPS) {
                chunks.push((i, done[i]..end));
            }
        }
        if chunks.is_empty() {
            break;
        }
        let batch: Vec<SeqChunk<'_>> = chunks
            .iter()
            .map(|(i, range)| SeqChunk {
                tokens: &seqs[*i][range.clone()],
                start_pos: range.start,
                block_table: &tables[*i],
                window_table: &[],
                logit_rows: 1,
            })
            .collect();
        let mut logits = vec![0f32; batch.len() * vocab];
        forward(&config, &mut backend, &batch, &mut logits)
            .unwrap_or_else(|e| panic!("{} step {step}: {e}", kernels.name));
        drop(batch);
        for ((i, range), row) in chunks.into_iter().zip(logits.chunks_exact(vocab)) {
            rows.push(row.iter().map(|v| v.to_bits()).collect());
            if done[i] >= prompts[i].len() {
                decoded[i] += 1;
            }
            done[i] = range.end;
            // A sequence whose prompt is complete gets its next token.
            if done[i] == seqs[i].len() {
                let next = feed.map_or_else(|| kernels.argmax(row) as TokenId, |f| f[i][fed[i].len()]);
                fed[i].push(next);
                seqs[i].push(next);
            }
        }
    }
    (rows, fed)
}

fn compare(name: &str, precision: Precision, got: &Rows, want: &Rows) {
    assert_eq!(got.len(), want.len(), "{name} {precision:?}: another number of logits rows");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w {
            let worst =
                g.iter().zip(w).map(|(&a, &b)| (f32::from_bits(a) - f32::from_bits(b)).abs()).fold(0f32, f32::max);
            let first = g.iter().zip(w).position(|(a, b)| a != b).expect("rows differ");
            panic!("{name} {precision:?}: logits row {r} differs from scalar's at id {first} (max |Δ| {worst:e})");
        }
    }
}

#[test]
fn every_kernel_path_gives_the_scalar_paths_logits_bit_for_bit() {
    let model = Model::load(None).unwrap_or_else(|e| panic!("{e}"));
    let prompts = prompts();
    assert_eq!(prompts.len(), 8, "the reference has 8 chat prompts");
    every_path_agrees(&model, &prompts);
}

/// A 2-layer llama of MXFP4 matrices 128 wide (FFN 256, a 512-token byte vocabulary), 8 prompts of 5 to 54
/// token ids.
#[test]
fn every_kernel_path_gives_the_scalar_paths_logits_on_an_mxfp4_model() {
    let spec = SyntheticSpec { n_embd: 128, n_ff: 256, matrix_type: Some(GgmlType::Mxfp4), ..SyntheticSpec::tiny(39) };
    let file = GgufFile::from_bytes(&spec.writer_with_byte_vocabulary().to_bytes()).expect("the synthetic file opens");
    assert_eq!(file.tensor("blk.1.ffn_down.weight").expect("a matrix").dtype(), GgmlType::Mxfp4);
    let model = Model::from_file("synthetic-mxfp4.gguf".into(), file).unwrap_or_else(|e| panic!("{e}"));
    let prompts: Vec<Vec<TokenId>> =
        (0..8).map(|i| (0..5 + 7 * i).map(|j| ((97 * i + 31 * j + 3) % 512) as TokenId).collect()).collect();
    every_path_agrees(&model, &prompts);
}

/// Every SIMD path this CPU runs against the scalar path on `prompts` (8 of them), both precisions.
fn every_path_agrees(model: &Model, prompts: &[Vec<TokenId>]) {
    assert!(prompts.iter().all(|p| p.len() + DECODE_STEPS < MAX_SEQ_LEN), "a prompt outgrew MAX_SEQ_LEN");
    let scalar = kernels_named("scalar").expect("the scalar path always exists");
    let paths: Vec<&'static Kernels> = supported_kernels().filter(|k| k.name != "scalar").collect();
    println!("paths compared with scalar: {:?}", paths.iter().map(|k| k.name).collect::<Vec<_>>());
    for precision in [Precision::Quantized8, Precision::Float32] {
        let (want, tokens) = run(model, scalar, precision, prompts, None);
        assert_eq!(want.len(), 8 + 4 + 8 * DECODE_STEPS, "rows: 8 prompt ends, 4 first chunks, the decodes");
        for &k in &paths {
            let (got, _) = run(model, k, precision, prompts, Some(&tokens));
            compare(k.name, precision, &got, &want);
        }
    }
}
