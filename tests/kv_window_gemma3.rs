//! Gemma 3's sliding-window layers in a KV pool of their own give the logits of every layer kept whole, bit for
//! bit: two backends on the real model run the same steps, one with every layer in the global pool (what ember did
//! before the window pool, and still does without one), the other with the 15 windowed layers in a window pool
//! driven by the engine's bookkeeping (`WindowBlocks`) and sized by its rule for two sequences. Two sequences of
//! ~1000 positions share that pool (80 blocks where the two need 124 without releases), so a released block is
//! soon another sequence's: a layer that read a released position would read the other sequence's keys.

#[path = "common/gemma3.rs"]
mod gemma3;

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::KvCacheTypes;
use ember::engine::kv_window::WindowBlocks;
use ember::model::llama::{forward, SeqChunk, NO_BLOCK};
use ember::model::{Model, TokenId};

const BLOCK: usize = 16;
/// Prefill chunk: not a multiple of the block size, so chunks start anywhere in a block.
const CHUNK: usize = 100;
/// Room per sequence in the global pool: the 950-token prompt and the decode steps.
const MAX_SEQ_LEN: usize = 1024;
const DECODE_STEPS: usize = 40;

fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |best, i| if x[i] > x[best] { i } else { best })
}

#[test]
fn windowed_layers_in_their_own_pool_give_the_logits_of_every_layer_whole() {
    let model = Model::load(Some(&gemma3::gemma3_path())).unwrap_or_else(|e| panic!("{e}"));
    let config = model.config.clone();
    let window = config.max_window().expect("Gemma 3 has sliding-window layers");
    let long = &gemma3::greedy_ref().cases[7].prompt_ids;
    assert_eq!((window, long.len()), (512, 950), "fixture changed?");
    // The second sequence: the same text from another start, so that positions hold other keys.
    let prompts: [Vec<TokenId>; 2] = [long.clone(), long[300..].iter().chain(&long[..300]).copied().collect()];
    // Chunks of the first sequence start at multiples of 100, the second's at 37 + multiples of 100.
    let first_chunks = [CHUNK, 37];

    let options = CpuBackendOptions {
        threads: 2,
        max_batch_tokens: 2 * CHUNK,
        kv_block_size: BLOCK,
        kv_num_blocks: 2 * MAX_SEQ_LEN / BLOCK,
        kv_window_blocks: None,
        precision: Precision::Quantized8,
        kv_cache: KvCacheTypes::default(),
    };
    let pool = WindowBlocks::pool_size(window, CHUNK, BLOCK, 2, options.kv_num_blocks);
    let cap = WindowBlocks::cap(window, CHUNK, BLOCK);
    assert_eq!((cap, pool), (40, 80));
    let mut whole = CpuBackend::new(&model.file, config.clone(), options.clone()).unwrap_or_else(|e| panic!("{e}"));
    let windowed_options = CpuBackendOptions { kv_window_blocks: Some(pool), ..options.clone() };
    let mut windowed = CpuBackend::new(&model.file, config.clone(), windowed_options).unwrap_or_else(|e| panic!("{e}"));
    let windowed_layers = config.layers.iter().filter(|l| l.window.is_some()).count();
    assert_eq!(windowed_layers, 15);
    assert_eq!(
        windowed.kv_cache_bytes() * 18 * 128,
        whole.kv_cache_bytes() * (3 * 128 + 15 * 80),
        "the windowed layers have 80 blocks instead of 128"
    );

    let per_seq = MAX_SEQ_LEN / BLOCK;
    let tables: Vec<Vec<u32>> = (0..2).map(|i| (i * per_seq..(i + 1) * per_seq).map(|b| b as u32).collect()).collect();
    let mut blocks = WindowBlocks::new(pool, BLOCK, window);
    let mut window_tables: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    let mut tokens = prompts.clone();
    let mut pos = [0usize; 2];
    let vocab = config.vocab_size;
    let (mut whole_logits, mut windowed_logits) = (vec![0f32; 2 * vocab], vec![0f32; 2 * vocab]);
    let mut compared = 0;
    let mut released = false;
    loop {
        // Each sequence's next chunk: the prompt in chunks, then one decode (the token sampled last step).
        let spans: Vec<(usize, usize, usize)> = (0..2)
            .filter(|&i| pos[i] < tokens[i].len())
            .map(|i| {
                let n = if pos[i] == 0 { first_chunks[i] } else { CHUNK };
                (i, pos[i], (pos[i] + n).min(tokens[i].len()))
            })
            .collect();
        if spans.is_empty() {
            break;
        }
        for &(i, start, end) in &spans {
            assert!(blocks.fit(&mut window_tables[i], start, end), "the pool's size is enough");
            let held = window_tables[i].iter().filter(|&&b| b != NO_BLOCK).count();
            assert!(held <= cap, "sequence {i} holds {held} window blocks at {start}..{end}");
            released |= window_tables[i].first() == Some(&NO_BLOCK);
        }
        let batch = |windowed: bool| -> Vec<SeqChunk<'_>> {
            spans
                .iter()
                .map(|&(i, start, end)| SeqChunk {
                    tokens: &tokens[i][start..end],
                    start_pos: start,
                    block_table: &tables[i],
                    window_table: if windowed { &window_tables[i] } else { &[] },
                    logit_rows: 1,
                })
                .collect()
        };
        let rows = spans.len() * vocab;
        forward(&config, &mut whole, &batch(false), &mut whole_logits[..rows]).unwrap_or_else(|e| panic!("{e}"));
        forward(&config, &mut windowed, &batch(true), &mut windowed_logits[..rows]).unwrap_or_else(|e| panic!("{e}"));
        for (row, &(i, start, end)) in spans.iter().enumerate() {
            let (a, b) = (&whole_logits[row * vocab..][..vocab], &windowed_logits[row * vocab..][..vocab]);
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "sequence {i}, chunk {start}..{end}: the logits differ");
            compared += 1;
            pos[i] = end;
            // Past the prompt, decode greedily for DECODE_STEPS tokens.
            if end == tokens[i].len() && end < prompts[i].len() + DECODE_STEPS {
                tokens[i].push(argmax(a) as TokenId);
            }
        }
    }
    assert!(released, "the sequences ran past the window");
    assert_eq!(pos.map(|p| p - 950), [DECODE_STEPS; 2], "every decode step ran");
    assert_eq!(compared, 2 * (950usize.div_ceil(CHUNK) + DECODE_STEPS) + 1, "the second one's first chunk is 37");
    for t in &mut window_tables {
        blocks.release(t);
    }
    assert_eq!(blocks.num_free(), pool, "every window block is free again");
}
