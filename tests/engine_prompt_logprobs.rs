//! Prompt log probabilities (`SubmitRequest::prompt_logprobs`) on the real model. Scoring a text teacher-forced
//! must give, position for position, exactly the numbers its own generation reported (the kernels are
//! batch-invariant: a row of a prompt chunk is computed as a decode row is), so the generation's agreement with
//! llama.cpp (`engine_logprobs.rs`) carries over. And the engine's tricks must not change them: the prefix cache
//! (a cached position has no logits), preemption (a recomputed prompt is not scored twice), several choices and
//! prompts, chunked prefill.

mod common;

use common::{chat_ids, engine, greedy, ids_of, MESSAGES};
use ember::engine::prompt_logprobs::PromptTokenLogprob;
use ember::engine::{EngineConfig, RequestHandle, RequestOptions, SubmitRequest};
use ember::model::TokenId;

fn scored(prompt: Vec<TokenId>, top: usize) -> SubmitRequest {
    SubmitRequest::with_options(
        prompt,
        RequestOptions { prompt_logprobs: Some(top), max_tokens: Some(1), ..Default::default() },
    )
}

fn prompt_logprobs(h: &RequestHandle, choice: usize) -> Vec<PromptTokenLogprob> {
    h.wait();
    assert_eq!(h.error(), None);
    h.prompt_logprobs(choice).expect("prompt log probabilities").to_vec()
}

/// A long prompt: several 32-token scoring chunks and 16-token KV blocks.
fn long_prompt() -> Vec<TokenId> {
    chat_ids(&MESSAGES.join(" "))
}

#[test]
fn scoring_a_generated_text_reproduces_its_generation_logprobs_exactly() {
    let e = engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() });
    for message in ["Name three primary colors.", "Count from 1 to 20."] {
        let prompt = chat_ids(message);
        let generated =
            e.submit(greedy(message, 40).map_options(|o| RequestOptions { logprobs: Some(5), ..o })).unwrap();
        generated.wait();
        let out = &generated.choices()[0];
        assert!(out.logprobs.len() >= 20, "{message}: {} tokens", out.logprobs.len());
        let mut text = prompt.clone();
        text.extend(out.logprobs.iter().map(|t| t.token));
        let entries = prompt_logprobs(&e.submit(scored(text.clone(), 5)).unwrap(), 0);
        assert_eq!(entries.len(), text.len() - 1, "every token but the first");
        for (pos, entry) in entries.iter().enumerate() {
            assert_eq!(entry.logprob.token, text[pos + 1], "entry {pos} scores the token after position {pos}");
            assert_eq!(entry.logprob.top.len(), 5);
            assert!(entry.rank >= 1 && entry.logprob.logprob <= 0.0);
            let top_rank = entry.logprob.top.iter().position(|t| t.0 == entry.logprob.token);
            if let Some(i) = top_rank {
                assert!(entry.rank as usize <= i + 1, "a token among the top {} ranks within them", i + 1);
            }
        }
        for (i, sampled) in out.logprobs.iter().enumerate() {
            let entry = &entries[prompt.len() - 1 + i];
            assert_eq!(&entry.logprob, sampled, "{message}: generated token {i}, scored as a prompt token");
            assert_eq!(entry.rank, 1, "greedy tokens are the most likely");
        }
    }
}

#[test]
fn the_prefix_cache_neither_serves_nor_loses_a_scored_prompt() {
    let e = engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() });
    let prompt = long_prompt();
    assert!(prompt.len() > 3 * 32, "several scoring chunks: {}", prompt.len());
    let first = prompt_logprobs(&e.submit(scored(prompt.clone(), 2)).unwrap(), 0);
    // The same prompt again: its blocks are cached now, but a scored prompt takes none of them.
    let again = e.submit(scored(prompt.clone(), 2)).unwrap();
    assert_eq!(prompt_logprobs(&again, 0), first);
    assert_eq!(again.stats(0).unwrap().num_cached_prompt_tokens, 0);
    // What the scored prompts computed is in the cache for everyone else.
    let plain = e
        .submit(SubmitRequest::with_options(
            prompt.clone(),
            RequestOptions { max_tokens: Some(1), ..Default::default() },
        ))
        .unwrap();
    plain.wait();
    assert_eq!(plain.stats(0).unwrap().num_cached_prompt_tokens as usize, (prompt.len() - 1) / 16 * 16);
}

#[test]
fn every_choice_and_every_prompt_has_its_own_prompts_scores() {
    let e = engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() });
    let (a, b) = (chat_ids(MESSAGES[0]), chat_ids(MESSAGES[1]));
    let alone_a = prompt_logprobs(&e.submit(scored(a.clone(), 3)).unwrap(), 0);
    let alone_b = prompt_logprobs(&e.submit(scored(b.clone(), 3)).unwrap(), 0);
    let both = SubmitRequest { prompts: vec![a, b], n: 2, ..scored(Vec::new(), 3) };
    let h = e.submit(both).unwrap();
    for (choice, expected) in [(0, &alone_a), (1, &alone_a), (2, &alone_b), (3, &alone_b)] {
        assert_eq!(&prompt_logprobs(&h, choice), expected, "choice {choice}");
    }
    let one = e.submit(scored(vec![1], 0)).unwrap();
    assert_eq!(prompt_logprobs(&one, 0), Vec::new(), "a one-token prompt has nothing to score");
    let unasked = e.submit(greedy(MESSAGES[2], 2)).unwrap();
    unasked.wait();
    assert!(unasked.prompt_logprobs(0).is_none());
}

#[test]
fn preemption_and_small_steps_change_no_score() {
    let prompt = long_prompt();
    let expected = prompt_logprobs(&engine(EngineConfig::default()).submit(scored(prompt.clone(), 1)).unwrap(), 0);
    // 16-token steps; a cache that cannot hold the long prompt beside a few short requests, which are admitted
    // first and grow, so that the long one is preempted while it scores and recomputed after.
    let e = engine(EngineConfig {
        kv_cache_tokens: prompt.len().div_ceil(16) * 16 + 32,
        max_num_batched_tokens: Some(16),
        ..Default::default()
    });
    let short: Vec<_> = MESSAGES[..3].iter().map(|m| e.submit(greedy(m, 48)).unwrap()).collect();
    let long = e.submit(scored(prompt, 1)).unwrap();
    assert_eq!(prompt_logprobs(&long, 0), expected);
    for h in &short {
        ids_of(h);
    }
    let preempted = long.stats(0).unwrap().num_preemptions;
    assert!(preempted > 0, "the scored prompt was meant to be preempted ({} preemptions)", e.num_preemptions());
}
