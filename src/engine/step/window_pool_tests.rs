//! The engine loop (scheduler, preemption, release on finish) over a window pool sized by
//! `WindowBlocks::pool_size`, against a runner that checks every step's window tables: each names blocks of the
//! pool for exactly the positions the chunk reads and writes, at most `cap` of them, and no block is in two
//! sequences' tables at once. No model: the window rule is the engine's bookkeeping, whatever the logits.

use std::sync::{Arc, Mutex, Weak};

use rustc_hash::FxHashSet;

use super::core::{EngineCore, EngineShared, NewRequest};
use super::runner::BatchForward;
use super::scheduler::SchedulerLimits;
use super::step_budget::StepBudget;
use super::step_runner::StepRunner;
use super::StepError;
use crate::engine::api::seq_options::SharedOptions;
use crate::engine::kv::kv_pools::KvPools;
use crate::engine::kv::kv_prefix::PrefixCachingAllocator;
use crate::engine::kv::kv_window::WindowBlocks;
use crate::engine::observe::stats::{EngineClock, RequestStateStats};
use crate::engine::output::finish::FinishReason;
use crate::engine::output::{CancelWaker, EventPoll, RequestEvent, RequestHandle, RequestShared};
use crate::engine::sampling::{Sampler, SamplingParams};
use crate::engine::sequence::Sequence;
use crate::model::llama::batch::{validate_window_tables, BatchError};
use crate::model::llama::{SeqChunk, NO_BLOCK};
use crate::model::tokenizer::{Tokenizer, TokenizerSpec};

const WINDOW: usize = 24;
const BLOCK: usize = 4;
/// Not a multiple of the block size, so chunks start anywhere in a block.
const BUDGET: usize = 7;
const CONTEXT: usize = 400;
const VOCAB: usize = 3;

/// What the runner saw.
#[derive(Default)]
struct Seen {
    steps: usize,
    /// The most window blocks one chunk's table held.
    most_held: usize,
    /// The most window blocks the tables of one step held together.
    most_held_by_a_step: usize,
}

/// Checks each step's window tables, then answers all-zero logits (greedy: token 0).
struct CheckingRunner {
    pool: usize,
    seen: Arc<Mutex<Seen>>,
}

impl BatchForward for CheckingRunner {
    fn run(&mut self, batch: &[SeqChunk<'_>], logits: &mut [f32]) -> Result<(), StepError> {
        validate_window_tables(batch, WINDOW, BLOCK, Some(self.pool))?;
        let cap = WindowBlocks::cap(WINDOW, BUDGET, BLOCK);
        let mut in_step = FxHashSet::default();
        let mut seen = self.seen.lock().unwrap();
        for s in batch {
            let needed = (s.start_pos + 1).saturating_sub(WINDOW) / BLOCK..s.end_pos().div_ceil(BLOCK);
            let held: Vec<u32> = s.window_table.iter().copied().filter(|&b| b != NO_BLOCK).collect();
            if held.len() != needed.len() || held.len() > cap || s.window_table.len() != needed.end {
                let detail = format!("chunk at {}..{}: window table {:?}", s.start_pos, s.end_pos(), s.window_table);
                return Err(BatchError::BadBlockTable { seq: 0, detail }.into());
            }
            if let Some(b) = held.iter().find(|&&b| !in_step.insert(b)) {
                let detail = format!("window block {b} is in two sequences' tables");
                return Err(BatchError::BadBlockTable { seq: 0, detail }.into());
            }
            seen.most_held = seen.most_held.max(held.len());
        }
        seen.most_held_by_a_step = seen.most_held_by_a_step.max(in_step.len());
        seen.steps += 1;
        logits.fill(0.0);
        Ok(())
    }
    fn describe(&self) -> String {
        "checking".into()
    }
    fn max_batch_tokens(&self) -> usize {
        BUDGET
    }
}

/// Runs requests of `(prompt length, max tokens)` to the end on an engine with `global_blocks` blocks, up to
/// `max_num_seqs` sequences, and a window pool of `window_blocks` (`pool_size`'s unless given). Returns each
/// request's end (its reason and tokens, or its error), the preemptions, what the runner saw, and the free blocks
/// of both pools afterwards.
struct Run {
    ends: Vec<Result<(FinishReason, usize), String>>,
    preemptions: u32,
    seen: Seen,
    free: (usize, usize),
    pool: usize,
}

fn run(requests: &[(usize, usize)], global_blocks: usize, max_num_seqs: usize, window_blocks: Option<usize>) -> Run {
    let tokens: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let tokenizer = Tokenizer::from_spec(&TokenizerSpec::new(&tokens, &[], "smollm")).unwrap();
    let shared = Arc::new(EngineShared::default());
    let clock = EngineClock::new();
    let mut handles = Vec::new();
    for (id, &(prompt_len, max_tokens)) in requests.iter().enumerate() {
        let prompt: Vec<u32> = (0..prompt_len as u32).map(|i| i % VOCAB as u32).collect();
        let waker: Weak<dyn CancelWaker> = Arc::downgrade(&shared) as _;
        let stats = Some(RequestStateStats::arrived(&clock));
        let r = RequestShared::new(id as u64, 1, prompt_len as u32, false, clock, stats, waker);
        let sampler = Sampler::new(SamplingParams::default(), &prompt, 0);
        let seq = Sequence::new(0, Arc::clone(&r), 0, &prompt, max_tokens, SharedOptions::stopping_at(&[]), sampler);
        shared.inbox.lock().unwrap().new.push(NewRequest { sequences: vec![seq] });
        handles.push(RequestHandle::new(r));
    }
    let pool =
        window_blocks.unwrap_or_else(|| WindowBlocks::pool_size(WINDOW, BUDGET, BLOCK, max_num_seqs, global_blocks));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let forward = Box::new(CheckingRunner { pool, seen: Arc::clone(&seen) });
    let mut core = EngineCore::new(
        Arc::clone(&shared),
        StepRunner::new(forward, VOCAB),
        &tokenizer,
        clock,
        SchedulerLimits {
            max_num_seqs,
            max_num_batched_tokens: BUDGET,
            speculative: None,
            step_budget: StepBudget::Throughput,
        },
        KvPools::new(
            PrefixCachingAllocator::new(global_blocks, BLOCK, 0, false),
            Some(WindowBlocks::new(pool, BLOCK, WINDOW)),
        ),
        CONTEXT,
    );
    core.run_until_idle();
    let ends = handles
        .iter()
        .map(|h| {
            let mut error = None;
            while let EventPoll::Event(event) = h.poll(Some(std::time::Duration::ZERO)) {
                if let RequestEvent::Error { message } = event {
                    error = Some(message);
                }
            }
            let choice = &h.choices()[0];
            match error {
                Some(message) => Err(message),
                None => Ok((choice.finish_reason.expect("finished"), choice.token_ids.len())),
            }
        })
        .collect();
    let preemptions = handles.iter().map(|h| h.stats(0).unwrap().num_preemptions).sum();
    let free = (core.blocks().global.num_free(), core.blocks().window_free());
    drop(core);
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    Run { ends, preemptions, seen, free, pool }
}

#[test]
fn many_sequences_share_a_window_pool_sized_for_the_running_ones() {
    // Prompts of every alignment, some shorter than the window, most running well past it.
    let requests = [(1, 120), (5, 90), (13, 200), (24, 60), (25, 150), (40, 100), (57, 230), (90, 300)];
    let r = run(&requests, 200, 4, None);
    let cap = WindowBlocks::cap(WINDOW, BUDGET, BLOCK);
    assert_eq!((cap, r.pool), (9, 36), "4 sequences of at most 9 blocks; the global pool has 200");
    for (i, end) in r.ends.iter().enumerate() {
        assert_eq!(end, &Ok((FinishReason::Length, requests[i].1)), "request {i}");
    }
    // Sequences of up to 390 positions (98 blocks) each held at most `cap`, and a full window's worth.
    assert!((WINDOW / BLOCK..=cap).contains(&r.seen.most_held), "{}", r.seen.most_held);
    assert!(r.seen.most_held_by_a_step <= r.pool && r.seen.steps > 300);
    assert_eq!(r.free, (200, r.pool), "every block of both pools is free again");
}

#[test]
fn preemption_releases_window_blocks_too() {
    // 12 global blocks (48 positions) for sequences of up to 46: they preempt each other all along.
    let requests = [(10, 36), (3, 40), (20, 26), (17, 29), (1, 45), (30, 16)];
    let r = run(&requests, 12, 4, None);
    assert_eq!(r.pool, 12, "no larger than the global pool");
    for (i, end) in r.ends.iter().enumerate() {
        assert_eq!(end, &Ok((FinishReason::Length, requests[i].1)), "request {i}");
    }
    assert!(r.preemptions > 0, "the cache was meant to be too small for all sequences at once");
    assert_eq!(r.free, (12, 12));
}

#[test]
fn a_window_pool_too_small_fails_requests_with_an_internal_error_not_a_panic() {
    // Two window blocks hold a 20-token prompt's first chunk (7 positions) but not its second; a 5-token prompt
    // and its 3 tokens fit.
    let r = run(&[(20, 4), (5, 3)], 50, 4, Some(2));
    match &r.ends[0] {
        Err(message) => assert!(message.contains("internal error") && message.contains("window"), "{message}"),
        other => panic!("expected an internal error, got {other:?}"),
    }
    assert_eq!(r.ends[1], Ok((FinishReason::Length, 3)), "the engine goes on with the others");
    assert_eq!(r.free, (50, 2));
}
