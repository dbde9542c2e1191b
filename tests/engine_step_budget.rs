//! The step budget (`step_budget`, `src/engine/step/step_budget.rs`) through the engine on the real model: a long
//! prompt arriving beside running streams is prefilled in more, smaller chunks with a budget than with
//! `"throughput"`, the streams decoding in every one of its steps; and its tokens are the same either way.
//!
//! Deterministic whatever the machine's speed: the budgeted engine's target (10 µs) is below any step's cost,
//! so each of the prompt's steps beside the streams takes the minimum chunk (an eighth of the 64-token budget),
//! whatever the learned costs are, once a step of the streams' decodes alone has been seen.

mod common;

use std::time::Duration;

use common::{chat_ids, engine, greedy, greedy_exactly};
use ember::engine::step_budget::StepBudget;
use ember::engine::{EngineConfig, EventPoll, RequestEvent, RequestHandle, RequestOptions};
use ember::model::TokenId;

const BATCH: usize = 64;

/// A user message of ~300 tokens.
fn long_message() -> String {
    let sentence = " The lighthouse keeper wrote down the weather, the ships that passed and the birds he saw.";
    format!("Summarize the log.{}", sentence.repeat(16))
}

/// Waits until `h` has produced a token.
fn first_token(h: &RequestHandle) {
    loop {
        match h.poll(Some(Duration::from_secs(60))) {
            EventPoll::Event(RequestEvent::Delta { .. }) => return,
            EventPoll::Event(_) => {}
            other => panic!("the stream ended before its first token: {other:?}"),
        }
    }
}

/// With two streams decoding, a long prompt's prefill: the tokens each of its chunks computed (from its
/// progress events), the streams' decodes in the steps it took part in, its prompt tokens the prefix cache
/// supplied, and its generated ids.
fn long_prompt_beside_streams(step_budget: StepBudget) -> (Vec<u32>, Vec<u32>, u32, Vec<TokenId>) {
    let e = engine(EngineConfig { max_num_batched_tokens: Some(BATCH), step_budget, ..Default::default() });
    let streams: Vec<RequestHandle> =
        ["hi", "Count from 1 to 20."].iter().map(|m| e.submit(greedy_exactly(m, 2000)).unwrap()).collect();
    for s in &streams {
        first_token(s);
        first_token(s); // a decode-only step of both seen
    }
    let request = greedy(&long_message(), 4).map_options(|o| RequestOptions { return_progress: true, ..o });
    let long = e.submit(request).unwrap();
    long.wait();
    for s in &streams {
        s.cancel();
    }
    let mut processed = Vec::new();
    loop {
        match long.poll(Some(Duration::ZERO)) {
            EventPoll::Event(RequestEvent::PromptProgress { progress, .. }) => processed.push(progress.processed),
            EventPoll::Event(_) => {}
            EventPoll::Done => break,
            EventPoll::TimedOut => panic!("an ended request has its events queued"),
        }
    }
    let chunks: Vec<u32> = processed.windows(2).map(|w| w[1] - w[0]).collect();
    let stats = long.stats(0).expect("stats");
    // Every step of the prompt's: the step's tokens beside the prompt's own are the streams' decodes.
    let beside: Vec<u32> = stats.steps.iter().filter(|s| s.prefill).map(|s| s.batch_tokens - s.tokens).collect();
    (chunks, beside, long.cached_prompt_tokens(), long.choices().remove(0).token_ids)
}

#[test]
fn a_long_prompt_beside_streams_takes_more_smaller_chunks_with_a_budget() {
    let prompt = chat_ids(&long_message()).len() as u32;
    assert!(prompt > 200, "{prompt} tokens");
    let (whole, beside, cached, ids) = long_prompt_beside_streams(StepBudget::Throughput);
    assert_eq!(whole.iter().sum::<u32>() + cached, prompt);
    assert!(whole.iter().all(|&n| n >= (BATCH - 2) as u32 || n == *whole.last().unwrap()), "{whole:?}");
    assert!(beside.iter().all(|&n| n == 2), "the streams decode beside it: {beside:?}");

    let (budgeted, beside, cached, budgeted_ids) = long_prompt_beside_streams(StepBudget::TargetMs(0.01));
    assert_eq!(budgeted.iter().sum::<u32>() + cached, prompt);
    assert!(budgeted.len() >= 4 * whole.len(), "{budgeted:?} against {whole:?}");
    let minimum = (BATCH / 8) as u32;
    // The first chunk may be larger: the prompt's admission can come before a decode-only step of both
    // streams was seen, when nothing is known and the whole budget is used.
    assert!(budgeted[1..].iter().all(|&n| n <= minimum), "the minimum chunk each step: {budgeted:?}");
    assert!(beside.iter().all(|&n| n == 2), "the streams decode in every one of its steps: {beside:?}");
    assert_eq!(budgeted_ids, ids, "chunking changes no token");
}
