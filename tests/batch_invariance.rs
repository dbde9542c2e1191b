//! A sequence's logits do not depend on what else runs beside it: the real model gives, bit for bit, the same logits
//! for a sequence run alone one token at a time as inside batches of 2, 5 and 16 sequences that join at different
//! steps, prefill their prompts in chunks of different sizes and decode, on 1 and 2 threads.
//!
//! This is what lets the engine batch requests without changing any request's output, and what makes a request
//! reproducible whatever the server's load. The backend promises it (`src/backend/cpu/parallel.rs`,
//! `kernels/tiling.rs`); this test holds it to the promise on the real model, where a kernel that tiles by token
//! count, an attention that reads a neighbour's KV blocks or a reduction split by thread would show.
//!
//! Gemma 3 270M (the second architecture: sliding-window layers, head norms, NEOX RoPE) is held to the same promise
//! on the fast path.
//!
//! Every chunk of every scenario asks for logits, so each comparison covers the chunk's last position; the
//! reference, one token per step, has logits at every position.

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::KvCacheTypes;
use ember::model::llama::{forward, SeqChunk};
use ember::model::{Model, TokenId};

#[path = "common/gemma3.rs"]
mod gemma3;
#[path = "common/per_path.rs"]
mod per_path;

/// Short texts, one per sequence (16: the largest batch).
const TEXTS: [&str; 16] = [
    "The quick brown fox jumps over the lazy dog near the river.",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1)",
    "Photosynthesis converts light energy into chemical energy in green plants and algae.",
    "The capital of Japan is Tokyo, and its largest port is",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12",
    "Bonjour, je m'appelle Marie et j'habite à Paris depuis",
    "To make a cup of tea, first boil the water, then",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY",
    "The mitochondria is the powerhouse of the cell, producing most of its energy",
    "In 1969, Apollo 11 landed on the Moon with Neil Armstrong",
    "Roses are red, violets are blue, sugar is sweet, and",
    "Water boils at one hundred degrees Celsius at sea level, but at altitude",
    "The stock market fell sharply on Monday after the central bank announcement of",
    "Machine learning models learn patterns from large amounts of data, and then",
    "She opened the old wooden door and stepped slowly into the dark hallway",
];
/// Tokens per sequence: a prompt then `DECODED` tokens fed one per step, as decoding feeds sampled tokens.
const SEQ_LEN: usize = 12;
const DECODED: usize = 3;
const PROMPT_LEN: usize = SEQ_LEN - DECODED;
/// Small blocks, so that each sequence spans several and its table is not in order (see `block_table`).
const KV_BLOCK_SIZE: usize = 4;
const BLOCKS_PER_SEQ: usize = SEQ_LEN.div_ceil(KV_BLOCK_SIZE);

/// Bit patterns of one logits row (`[vocab]`): `==` on them is bit-for-bit equality, `-0.0 ≠ 0.0` and NaN included.
type Bits = Vec<u32>;

fn load_model() -> Model {
    Model::load(None).unwrap_or_else(|e| panic!("{e}"))
}

fn backend(model: &Model, threads: usize, precision: Precision) -> CpuBackend<'_> {
    let options = CpuBackendOptions {
        threads,
        max_batch_tokens: TEXTS.len() * SEQ_LEN,
        kv_block_size: KV_BLOCK_SIZE,
        kv_num_blocks: TEXTS.len() * BLOCKS_PER_SEQ,
        kv_window_blocks: None,
        precision,
        kv_cache: KvCacheTypes::default(),
    };
    CpuBackend::new(&model.file, model.config.clone(), options).unwrap_or_else(|e| panic!("{e}"))
}

/// The first `SEQ_LEN` tokens of each text.
fn corpus(model: &Model) -> Vec<Vec<TokenId>> {
    TEXTS
        .iter()
        .map(|text| {
            let mut ids = model.tokenizer.encode(text, false);
            assert!(ids.len() >= SEQ_LEN, "{text:?} has only {} tokens", ids.len());
            ids.truncate(SEQ_LEN);
            ids
        })
        .collect()
}

/// Sequence `seq`'s KV blocks: interleaved with the other sequences' (block `j` of the table is `j·16 + seq`), in
/// reverse for odd sequences, so that neither a contiguous nor an ascending layout is assumed.
fn block_table(seq: usize) -> Vec<u32> {
    let mut table: Vec<u32> = (0..BLOCKS_PER_SEQ).map(|j| (j * TEXTS.len() + seq) as u32).collect();
    if seq % 2 == 1 {
        table.reverse();
    }
    table
}

/// One sequence's part in a scenario: it joins at step `start_step` and feeds its tokens in chunks of `chunks`
/// (summing to `SEQ_LEN`; the last `DECODED` are single tokens).
struct Script {
    seq: usize,
    start_step: usize,
    chunks: Vec<usize>,
}

/// Ways to split the prompt into chunks, chosen by `kind`: whole, one token at a time, and uneven splits.
fn prompt_chunks(kind: usize) -> Vec<usize> {
    match kind % 5 {
        0 => vec![PROMPT_LEN],
        1 => vec![1; PROMPT_LEN],
        2 => vec![3; PROMPT_LEN / 3],
        3 => vec![5, PROMPT_LEN - 5],
        _ => vec![PROMPT_LEN - 1, 1],
    }
}

fn script(seq: usize, start_step: usize, chunk_kind: usize) -> Script {
    let mut chunks = prompt_chunks(chunk_kind);
    chunks.extend([1; DECODED]);
    assert_eq!(chunks.iter().sum::<usize>(), SEQ_LEN);
    Script { seq, start_step, chunks }
}

/// Runs `scripts` together on `backend`, the batch order rotating each step, and returns every logits row produced
/// as `(seq, position, bits)`.
fn run(
    model: &Model,
    backend: &mut CpuBackend<'_>,
    corpus: &[Vec<TokenId>],
    scripts: &[Script],
) -> Vec<(usize, usize, Bits)> {
    let vocab = model.config.vocab_size;
    let tables: Vec<Vec<u32>> = (0..TEXTS.len()).map(block_table).collect();
    // Per script: `(chunks fed, next position)`.
    let mut progress = vec![(0usize, 0usize); scripts.len()];
    let mut rows = Vec::new();
    let mut logits = vec![0f32; scripts.len() * vocab];
    for step in 0.. {
        if scripts.iter().zip(&progress).all(|(s, p)| p.0 == s.chunks.len()) {
            break;
        }
        let mut batch = Vec::new();
        // `(seq, position of the chunk's last token)` of each batch entry.
        let mut expect = Vec::new();
        for k in 0..scripts.len() {
            let i = (k + step) % scripts.len();
            let (s, (fed, pos)) = (&scripts[i], &mut progress[i]);
            if step < s.start_step || *fed == s.chunks.len() {
                continue;
            }
            let len = s.chunks[*fed];
            let tokens = &corpus[s.seq][*pos..*pos + len];
            batch.push(SeqChunk {
                tokens,
                start_pos: *pos,
                block_table: &tables[s.seq],
                window_table: &[],
                logit_rows: 1,
            });
            expect.push((s.seq, *pos + len - 1));
            *fed += 1;
            *pos += len;
        }
        assert!(!batch.is_empty(), "step {step}: scripts must not leave a step empty");
        let out = &mut logits[..batch.len() * vocab];
        forward(&model.config, backend, &batch, out).unwrap_or_else(|e| panic!("step {step}: {e}"));
        for (&(seq, pos), row) in expect.iter().zip(out.chunks_exact(vocab)) {
            rows.push((seq, pos, row.iter().map(|x| x.to_bits()).collect()));
        }
    }
    rows
}

/// Each sequence of `seqs` run alone, one token per step: `[seq][position]` rows.
fn alone(model: &Model, backend: &mut CpuBackend<'_>, corpus: &[Vec<TokenId>], seqs: usize) -> Vec<Vec<Bits>> {
    (0..seqs)
        .map(|seq| {
            let rows = run(model, backend, corpus, &[Script { seq, start_step: 0, chunks: vec![1; SEQ_LEN] }]);
            rows.into_iter().map(|(_, _, bits)| bits).collect()
        })
        .collect()
}

/// The scenarios: sequence 0 alone with its prompt in each chunking, then batches of 2, 5 and 16 whose sequences
/// join over the first steps (so they stand at different positions) and chunk their prompts differently (so a step
/// mixes whole prompts, chunks and decodes).
fn scenarios() -> Vec<(String, Vec<Script>)> {
    let mut all: Vec<(String, Vec<Script>)> = (0..5)
        .map(|kind| (format!("alone, prompt chunks {:?}", prompt_chunks(kind)), vec![script(0, 0, kind)]))
        .collect();
    for n in [2, 5, 16] {
        let scripts = (0..n).map(|i| script(i, i % 4, (i + n) % 5)).collect();
        all.push((format!("batch of {n}"), scripts));
    }
    all
}

/// Checks every row of `rows` against the reference; `what` names the run in messages.
fn assert_rows_match(what: &str, rows: &[(usize, usize, Bits)], reference: &[Vec<Bits>]) {
    for (seq, pos, bits) in rows {
        let expected = &reference[*seq][*pos];
        let differing = bits.iter().zip(expected).filter(|(a, b)| a != b).count();
        assert!(
            differing == 0,
            "{what}: sequence {seq}, position {pos}: {differing} logits differ from the sequence alone"
        );
    }
}

#[test]
fn logits_do_not_depend_on_batch_chunking_or_threads() {
    fast_path_is_batch_invariant(&load_model());
}

#[test]
fn gemma3_logits_do_not_depend_on_batch_chunking_or_threads() {
    fast_path_is_batch_invariant(&Model::load(Some(&gemma3::gemma3_path())).unwrap_or_else(|e| panic!("{e}")));
}

/// Each sequence alone on 1 thread is the reference; every scenario must match it on 1 and on 2 threads. A trimmed
/// run (`make numerics-per-path` on the scalar path, `per_path::trimmed`) runs the scenarios on 2 threads only:
/// against the 1-thread reference, that still checks batching, chunking and the thread count at once.
fn fast_path_is_batch_invariant(model: &Model) {
    let corpus = corpus(model);
    let mut one = backend(model, 1, Precision::Quantized8);
    let mut two = backend(model, 2, Precision::Quantized8);
    let trimmed = per_path::trimmed();

    let reference = alone(model, &mut one, &corpus, TEXTS.len());
    if !trimmed {
        let reference_two_threads = alone(model, &mut two, &corpus, TEXTS.len());
        for (seq, (a, b)) in reference.iter().zip(&reference_two_threads).enumerate() {
            assert!(a == b, "sequence {seq} alone: 1 and 2 threads give different logits");
        }
    }

    let mut compared = 0;
    for (name, scripts) in scenarios() {
        for (threads, backend) in [(1, &mut one), (2, &mut two)] {
            if trimmed && threads == 1 {
                continue;
            }
            let rows = run(model, backend, &corpus, &scripts);
            assert_rows_match(&format!("{name}, {threads} threads"), &rows, &reference);
            compared += rows.len();
        }
    }
    println!("{compared} logits rows equal to their sequence's alone, bit for bit");
}

/// The precise path keeps the promise too: the reference tests batch their prompts on it.
#[test]
fn precise_path_is_batch_invariant() {
    let model = load_model();
    let corpus = corpus(&model);
    let mut backend = backend(&model, 1, Precision::Float32);
    let reference = alone(&model, &mut backend, &corpus, 5);
    let scripts: Vec<Script> = (0..5).map(|i| script(i, i % 3, i)).collect();
    let rows = run(&model, &mut backend, &corpus, &scripts);
    assert_rows_match("precise path, batch of 5", &rows, &reference);
}
