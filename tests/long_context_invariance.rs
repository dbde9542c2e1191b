//! At long context a token's logits still do not depend on how its step was split: a decode step (one long
//! sequence, or a batch of them, one row each) splits its attention by spans of positions, every KV head of a
//! span in one task, and a prompt chunk splits it by rows, a task per KV head; both must give the same bits
//! (`src/backend/cpu/attention_spans.rs`: fixed span cuts, merged in the same order either way).
//!
//! The sequences are 1100 tokens, two spans of 1024 positions, so that the merge of spans is what is compared;
//! Gemma 3's sliding-window layers (512) start their window inside the first span. The reference is the
//! whole sequence prefilled in one chunk on 1 thread (no split: every row computes all its spans itself). The
//! cases that decode the tail start from the cache that a whole prefill of their backend left (each step writes
//! its own position before reading it), so that a long prompt is prefilled four times per check, not seven.

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::{KvCacheType, KvCacheTypes};
use ember::model::llama::{forward, SeqChunk};
use ember::model::{Model, TokenId};

#[path = "common/gemma3.rs"]
mod gemma3;

/// Tokens of the sequences; the last `TAIL` are compared.
const LEN: usize = 1100;
const TAIL: usize = 4;
const KV_BLOCK_SIZE: usize = 16;
const BLOCKS_PER_SEQ: usize = LEN.div_ceil(KV_BLOCK_SIZE);

type Bits = Vec<u32>;

fn backend(model: &Model, threads: usize, precision: Precision, kv_cache: KvCacheTypes) -> CpuBackend<'_> {
    let options = CpuBackendOptions {
        threads,
        max_batch_tokens: 2 * LEN,
        kv_block_size: KV_BLOCK_SIZE,
        kv_num_blocks: 2 * BLOCKS_PER_SEQ,
        kv_window_blocks: None,
        precision,
        kv_cache,
    };
    CpuBackend::new(&model.file, model.config.clone(), options).unwrap_or_else(|e| panic!("{e}"))
}

/// Two different token sequences of `LEN` tokens (a text repeated, from two starting points).
fn sequences(model: &Model) -> [Vec<TokenId>; 2] {
    let text = "The old lighthouse keeper climbed the stairs each evening, counting the steps and the ships. ";
    let ids = model.tokenizer.encode(&text.repeat(100), false);
    assert!(ids.len() >= LEN + 7, "the text has only {} tokens", ids.len());
    [ids[..LEN].to_vec(), ids[7..LEN + 7].to_vec()]
}

/// Sequence `seq`'s blocks, interleaved with the other's and reversed for the second, so that no layout is assumed.
fn block_table(seq: usize) -> Vec<u32> {
    let mut table: Vec<u32> = (0..BLOCKS_PER_SEQ).map(|j| (2 * j + seq) as u32).collect();
    if seq == 1 {
        table.reverse();
    }
    table
}

/// Feeds each sequence of `seqs` (its block table's number, its tokens) its tokens from `start` on, in `chunks`
/// (up to position `LEN`), all sequences in each step, and returns the logits of the last `TAIL` positions of
/// each, `[seq][i]`. Positions before `start` must be in the cache already.
fn run(
    model: &Model,
    backend: &mut CpuBackend<'_>,
    seqs: &[(usize, &[TokenId])],
    start: usize,
    chunks: &[usize],
) -> Vec<Vec<Bits>> {
    assert!(start + chunks.iter().sum::<usize>() <= LEN);
    let vocab = model.config.vocab_size;
    let tables: Vec<Vec<u32>> = seqs.iter().map(|(table, _)| block_table(*table)).collect();
    let mut rows = vec![Vec::new(); seqs.len()];
    let mut pos = start;
    for &len in chunks {
        let logit_rows = (pos + len).saturating_sub(LEN - TAIL).min(len);
        let batch: Vec<SeqChunk<'_>> = seqs
            .iter()
            .zip(&tables)
            .map(|((_, tokens), table)| SeqChunk {
                tokens: &tokens[pos..pos + len],
                start_pos: pos,
                block_table: table,
                window_table: &[],
                logit_rows,
            })
            .collect();
        let mut logits = vec![0f32; seqs.len() * logit_rows * vocab];
        forward(&model.config, backend, &batch, &mut logits).unwrap_or_else(|e| panic!("at {pos}: {e}"));
        if logit_rows > 0 {
            for (seq, out) in logits.chunks_exact(logit_rows * vocab).enumerate() {
                rows[seq].extend(out.chunks_exact(vocab).map(|row| row.iter().map(|x| x.to_bits()).collect::<Bits>()));
            }
        }
        pos += len;
    }
    rows
}

/// The last `TAIL` tokens one per step, as decoding feeds them.
const DECODED_TAIL: [usize; TAIL] = [1; TAIL];
const TAIL_START: usize = LEN - TAIL;

fn check(model: &Model, precision: Precision, kv_cache: KvCacheTypes) {
    let [a, b] = sequences(model);
    let mut one = backend(model, 1, precision, kv_cache);
    let mut two = backend(model, 2, precision, kv_cache);
    let reference = run(model, &mut one, &[(0, &a)], 0, &[LEN]);
    assert_eq!(reference[0].len(), TAIL);
    let compare = |name: &str, rows: &[Bits]| {
        for (i, (got, want)) in rows.iter().zip(&reference[0]).enumerate() {
            let differing = got.iter().zip(want).filter(|(x, y)| x != y).count();
            assert_eq!(differing, 0, "{name}: position {}: {differing} logits differ", TAIL_START + i);
        }
    };
    let whole = run(model, &mut two, &[(0, &a)], 0, &[LEN]);
    compare("the whole sequence as one chunk, 2 threads (split by rows)", &whole[0]);
    // The tail again, on the cache those prefills left.
    let rows = run(model, &mut one, &[(0, &a)], TAIL_START, &DECODED_TAIL);
    compare("decoded alone, 1 thread", &rows[0]);
    let rows = run(model, &mut two, &[(0, &a)], TAIL_START, &DECODED_TAIL);
    compare("decoded alone, 2 threads (split by spans)", &rows[0]);
    let rows = run(model, &mut two, &[(0, &a)], TAIL_START, &[TAIL]);
    compare("the tail as one chunk, 2 threads (split by rows)", &rows[0]);
    run(model, &mut two, &[(1, &b)], 0, &[TAIL_START]);
    let rows = run(model, &mut two, &[(0, &a), (1, &b)], TAIL_START, &DECODED_TAIL);
    compare("decoded beside another long sequence, 2 threads (split by spans)", &rows[0]);
}

#[test]
fn long_context_logits_do_not_depend_on_the_attention_split() {
    let model = Model::load(None).unwrap_or_else(|e| panic!("{e}"));
    check(&model, Precision::Quantized8, KvCacheTypes::default());
}

/// The 8-bit and 4-bit caches keep the promise too (their kernels differ; the spans and the merge are the same).
#[test]
fn quantized_cache_long_context_logits_do_not_depend_on_the_attention_split() {
    let model = Model::load(None).unwrap_or_else(|e| panic!("{e}"));
    for (keys, values) in [(KvCacheType::Q8_0, KvCacheType::Q8_0), (KvCacheType::Q4_0, KvCacheType::Q8_0)] {
        check(&model, Precision::Quantized8, KvCacheTypes { keys, values });
    }
    let gemma = Model::load(Some(&gemma3::gemma3_path())).unwrap_or_else(|e| panic!("{e}"));
    check(&gemma, Precision::Quantized8, KvCacheTypes { keys: KvCacheType::Q8_0, values: KvCacheType::Q4_0 });
}

#[test]
fn gemma3_long_context_logits_do_not_depend_on_the_attention_split() {
    let model = Model::load(Some(&gemma3::gemma3_path())).unwrap_or_else(|e| panic!("{e}"));
    check(&model, Precision::Quantized8, KvCacheTypes::default());
}

#[test]
fn precise_path_long_context_logits_do_not_depend_on_the_attention_split() {
    let model = Model::load(None).unwrap_or_else(|e| panic!("{e}"));
    check(&model, Precision::Float32, KvCacheTypes::default());
}
