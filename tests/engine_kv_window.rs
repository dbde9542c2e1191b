//! The engine on Gemma 3 270M keeps its sliding-window layers in a pool of their own, sized for one sequence here
//! (`max_num_seqs` 1: the smallest pool the sizing rule gives, 41 blocks), and a 950-token prompt prefilled in
//! chunks of 125 then decoded past position 512 + 125 gives the tokens of every layer kept whole: those of
//! `engine::generate` on a backend without the window pool, where the windowed layers store every position. While
//! it runs, the window pool never has more than one sequence's `cap` blocks in use, and the KV usage gauge counts
//! both pools; afterwards both pools are free.

#[path = "common/gemma3.rs"]
mod gemma3;

use ember::backend::KvCacheTypes;
use std::ops::ControlFlow;
use std::sync::Arc;

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::engine::generate::{generate, GenerateRequest, SingleSequenceLayout};
use ember::engine::kv_window::WindowBlocks;
use ember::engine::sampling::SamplingParams;
use ember::engine::{Engine, EngineConfig, EventPoll, Logger, RequestEvent, RequestOptions, SubmitRequest};
use ember::model::Model;
use ember::protocol::prometheus::metrics_text;

const MAX_TOKENS: usize = 64;
/// The step's token budget: not a multiple of the block size, so chunks start anywhere in a block.
const BUDGET: usize = 125;
const BLOCK: usize = 16;

#[test]
fn a_sequence_past_the_window_holds_only_its_window_blocks_and_gets_the_tokens_of_every_layer_whole() {
    let model = Arc::new(Model::load(Some(&gemma3::gemma3_path())).unwrap_or_else(|e| panic!("{e}")));
    let prompt = gemma3::greedy_ref().cases[7].prompt_ids.clone();
    assert_eq!(prompt.len(), 950, "fixture changed?");

    // Every layer whole: no window pool, the prompt in one chunk.
    let options = CpuBackendOptions {
        threads: 2,
        max_batch_tokens: 1024,
        kv_block_size: BLOCK,
        kv_num_blocks: 1024 / BLOCK,
        kv_window_blocks: None,
        precision: Precision::Quantized8,
        kv_cache: KvCacheTypes::default(),
    };
    let layout = SingleSequenceLayout::of(&options);
    let mut backend = CpuBackend::new(&model.file, model.config.clone(), options).unwrap_or_else(|e| panic!("{e}"));
    let request = GenerateRequest {
        prompt: &prompt,
        max_tokens: MAX_TOKENS,
        sampling: SamplingParams::default(),
        stop_ids: &[],
        default_seed: 0,
    };
    let whole = generate(&model.config, &mut backend, layout, &request, |_| ControlFlow::Continue(()))
        .unwrap_or_else(|e| panic!("{e}"))
        .tokens;
    drop(backend);
    assert_eq!(whole.len(), MAX_TOKENS);

    let config = EngineConfig {
        threads: 2,
        max_num_seqs: 1,
        max_num_batched_tokens: Some(BUDGET),
        kv_cache_tokens: 2048,
        kv_block_size: BLOCK,
        ..Default::default()
    };
    let engine = Engine::with_model(config, model, Logger::silent()).unwrap_or_else(|e| panic!("{e}"));
    let cap = WindowBlocks::cap(512, BUDGET, BLOCK);
    assert_eq!(engine.kv_window_blocks(), Some((cap, cap)), "one sequence's cap: 41 blocks, all free");
    let h = engine
        .submit(SubmitRequest::with_options(
            prompt,
            RequestOptions { max_tokens: Some(MAX_TOKENS), ignore_eos: true, ..Default::default() },
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut usage_checks = 0;
    loop {
        // Whenever the host looks (the engine publishes its counters at every step and every finish).
        let (free, total) = engine.kv_window_blocks().expect("a window pool");
        assert!(total - free <= cap, "{} window blocks in use", total - free);
        // The KV usage gauge counts both pools' blocks: compared when neither changed while the text was written.
        let pools = (engine.kv_blocks(), engine.kv_window_blocks());
        let text = metrics_text(&engine);
        if (engine.kv_blocks(), engine.kv_window_blocks()) == pools {
            let ((free, total), (window_free, window_total)) = (pools.0, pools.1.expect("a window pool"));
            let expected = (total - free + window_total - window_free) as f64 / (total + window_total) as f64;
            let line = text.lines().find(|l| l.starts_with("ember_kv_cache_usage_perc{")).expect("the gauge");
            assert_eq!(line.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap(), expected, "{line}");
            usage_checks += 1;
        }
        match h.poll(None) {
            EventPoll::Event(RequestEvent::Delta { .. }) => {}
            EventPoll::Event(RequestEvent::Finished { .. }) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(usage_checks > 0, "the pools never held still for a look at the gauge");
    assert_eq!(h.choices()[0].token_ids, whole, "the window pool changes no token");
    assert_eq!(engine.kv_window_blocks(), Some((cap, cap)), "every window block is free again");
    assert_eq!(engine.kv_blocks().0, engine.kv_blocks().1);
}
