//! Automatic prefix caching on the real model. The kernels are batch-invariant (a position's keys and values do
//! not depend on the rest of the batch or on chunking), so reusing cached blocks must give exactly the tokens of
//! computing them: every test compares greedy (or seeded) outputs with caching on against caching off.

mod common;

use common::{chat_ids, engine, greedy, greedy_exactly, ids_of, model, MESSAGES};
use ember::engine::sampling::SamplingParams;
use ember::engine::{
    Engine, EngineConfig, EventPoll, FinishReason, RequestEvent, RequestHandle, RequestOptions, SubmitRequest,
};
use ember::model::chat_template::ChatMessage;
use ember::model::TokenId;

const MAX_TOKENS: usize = 12;

fn config(caching: bool) -> EngineConfig {
    EngineConfig { enable_prefix_caching: caching, ..Default::default() }
}

/// The engine holds no sequence: every block is free (cached ones count as free: nothing references them).
fn assert_idle(e: &Engine) {
    let (free, total) = e.kv_blocks();
    assert_eq!(free, total, "every block is free or only cached when the engine is idle");
    assert_eq!((e.num_running(), e.num_waiting()), (0, 0));
}

fn cached_tokens(h: &RequestHandle) -> u32 {
    h.extended_metrics(0).num_cached_prompt_tokens.expect("stats are on")
}

/// Each message alone on an engine without caching.
fn reference(messages: &[&str]) -> Vec<Vec<TokenId>> {
    let e = engine(config(false));
    assert_eq!(e.prefix_cache(), None, "no counters without caching");
    messages.iter().map(|m| ids_of(&e.submit(greedy(m, MAX_TOKENS)).unwrap())).collect()
}

#[test]
fn repeated_prompts_hit_the_cache_and_give_the_same_tokens() {
    let expected = reference(&MESSAGES[..4]);
    let e = engine(config(true));
    for round in 0..2 {
        for (i, m) in MESSAGES[..4].iter().enumerate() {
            let h = e.submit(greedy(m, MAX_TOKENS)).unwrap();
            assert_eq!(ids_of(&h), expected[i], "round {round}, message {m:?}");
            let prompt = chat_ids(m).len() as u32;
            let cached = cached_tokens(&h);
            // Every message shares the template's default system prompt (one whole block); a repeat finds all
            // of its own full blocks but the one holding its last token, which is always computed.
            let block = 16;
            assert_eq!(cached % block, 0);
            assert!(cached < prompt, "the last prompt token is computed: {cached} of {prompt}");
            if round == 1 {
                assert_eq!(cached, (prompt - 1) / block * block, "round 2 finds the whole prompt but its tail");
            } else if i > 0 {
                assert!(cached >= block, "the shared system prompt's block");
            }
            assert_eq!(h.cached_prompt_tokens(), cached, "usage reports the same count");
            let x = h.extended_metrics(0);
            assert_eq!(x.num_prompt_tokens, Some(prompt));
            // Prefill counts only the computed tokens.
            let s = h.stats(0).unwrap();
            assert_eq!(ember::engine::metrics::num_computed_prompt_tokens(&s), prompt - cached);
        }
    }
    assert_idle(&e);
    let counters = e.prefix_cache().expect("caching is on by default");
    assert!(counters.hits > 0 && counters.hits <= counters.queries, "{counters:?}");
    assert!(counters.cached_blocks > 0, "finished sequences leave their blocks cached");
}

#[test]
fn concurrent_requests_sharing_a_system_prompt_give_the_same_tokens() {
    let expected = reference(&MESSAGES);
    let e = engine(config(true));
    // A warm-up request caches the system prompt's block; then sixteen at once, in small chunks, with the others.
    ids_of(&e.submit(greedy("hello", 2)).unwrap());
    for budget in [128, 24] {
        let e = if budget == 128 {
            &e
        } else {
            &engine(EngineConfig { max_num_batched_tokens: Some(budget), ..config(true) })
        };
        let handles: Vec<_> = MESSAGES.iter().map(|m| e.submit(greedy(m, MAX_TOKENS)).unwrap()).collect();
        for (i, h) in handles.iter().enumerate() {
            assert_eq!(ids_of(h), expected[i], "budget {budget}, message {:?}", MESSAGES[i]);
        }
        assert!(handles.iter().filter(|h| cached_tokens(h) > 0).count() >= 8, "most found the shared prefix");
        assert_idle(e);
    }
}

#[test]
fn choices_of_one_request_share_their_prompt_and_sample_as_without_caching() {
    let request = || SubmitRequest {
        n: 3,
        ..SubmitRequest::new(chat_ids("Write a haiku about rain.")).map_options(|o| RequestOptions {
            max_tokens: Some(MAX_TOKENS),
            sampling: SamplingParams { temperature: 0.8, seed: Some(7), ..Default::default() },
            ..o
        })
    };
    let run = |caching: bool| {
        let e = engine(config(caching));
        let h = e.submit(request()).unwrap();
        h.wait();
        let tokens: Vec<Vec<TokenId>> = h.choices().iter().map(|c| c.token_ids.clone()).collect();
        assert_idle(&e);
        (tokens, h.cached_prompt_tokens())
    };
    let (off, _) = run(false);
    let (on, billed) = run(true);
    assert_eq!(on, off, "seeded sampling per choice, with and without caching");
    assert_ne!(off[0], off[1], "the choices differ (seed + choice index)");
    assert_eq!(billed, 0, "the prompt is billed once, for its first choice, which found nothing cached");
}

#[test]
fn preemption_under_a_tiny_cache_gives_the_same_tokens_and_returns_every_reference() {
    const GROWN: usize = 24;
    let idle = engine(config(false));
    let expected: Vec<Vec<TokenId>> =
        MESSAGES.iter().map(|m| ids_of(&idle.submit(greedy_exactly(m, GROWN)).unwrap())).collect();
    drop(idle);
    // 96 positions = 6 blocks: two or three sequences fit at a time, and each needs more as it grows by 24, so
    // admitted ones get preempted, and cached blocks are evicted to make room.
    let e = engine(EngineConfig { kv_cache_tokens: 96, ..config(true) });
    let handles: Vec<_> = MESSAGES.iter().map(|m| e.submit(greedy_exactly(m, GROWN)).unwrap()).collect();
    let mut preemptions = 0;
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(ids_of(h), expected[i], "message {:?}", MESSAGES[i]);
        preemptions += h.stats(0).unwrap().num_preemptions;
    }
    assert!(preemptions > 0, "the cache was meant to be too small for all sequences at once");
    assert_eq!(e.num_preemptions(), u64::from(preemptions));
    assert_idle(&e);
}

/// A prompt of `len` tokens: a long chat prompt cut to length (a completion, no template after it).
fn prompt_of(len: usize) -> Vec<TokenId> {
    let text = MESSAGES.join(" ").repeat(16);
    let ids = chat_ids(&text);
    assert!(ids.len() >= len);
    ids[..len].to_vec()
}

fn completion(prompt: Vec<TokenId>, max_tokens: usize) -> SubmitRequest {
    SubmitRequest::with_options(prompt, RequestOptions { max_tokens: Some(max_tokens), ..Default::default() })
}

#[test]
fn a_fully_cached_prompt_still_computes_its_last_token() {
    for len in [32, 33] {
        let expected = ids_of(&engine(config(false)).submit(completion(prompt_of(len), 6)).unwrap());
        let e = engine(config(true));
        ids_of(&e.submit(completion(prompt_of(len), 6)).unwrap());
        let h = e.submit(completion(prompt_of(len), 6)).unwrap();
        assert_eq!(ids_of(&h), expected, "prompt of {len}");
        // 32 tokens: both blocks are cached, but the second holds the last token, so it is computed again;
        // 33: both blocks are found and only the 33rd token is computed.
        assert_eq!(cached_tokens(&h), if len == 32 { 16 } else { 32 });
        let s = h.stats(0).unwrap();
        assert_eq!(ember::engine::metrics::num_computed_prompt_tokens(&s), len as u32 - cached_tokens(&h));
        assert!(h.timing_metrics(0).time_to_first_token_ms.is_some());
        assert_idle(&e);
    }
}

#[test]
fn cancellation_mid_prefill_returns_its_references_and_leaves_what_it_computed_cached() {
    let long = prompt_of(1200);
    let expected = ids_of(&engine(config(false)).submit(completion(long.clone(), 4)).unwrap());
    // Chunks of 32: the long prompt takes dozens of steps. A short request admitted first samples its first
    // token in the second step, when the long one has computed its first chunk; that is when it is cancelled.
    let e = engine(EngineConfig { max_num_batched_tokens: Some(32), ..config(true) });
    let short = e.submit(greedy("hi", 64)).unwrap();
    let victim = e.submit(completion(long.clone(), 4)).unwrap();
    match short.poll(None) {
        EventPoll::Event(RequestEvent::Delta { .. }) => {}
        other => panic!("expected the short request's first text, got {other:?}"),
    }
    victim.cancel();
    victim.wait();
    assert_eq!(victim.choices()[0].finish_reason, Some(FinishReason::Cancelled));
    short.wait();
    assert_idle(&e);
    // The blocks the cancelled prefill filled are found by the same prompt, and give the same tokens.
    let again = e.submit(completion(long.clone(), 4)).unwrap();
    assert_eq!(ids_of(&again), expected);
    assert!(cached_tokens(&again) >= 16, "the cancelled request's first blocks were cached");
    assert_idle(&e);
}

#[test]
fn a_conversation_resent_turn_by_turn_reuses_its_history() {
    let m = model();
    let render = |messages: &[ChatMessage]| m.tokenizer.encode(&m.chat_template.render(messages, true).unwrap(), true);
    let on = engine(config(true));
    let off = engine(config(false));
    let mut history = vec![ChatMessage::new("user", "Name three primary colors.")];
    for turn in 0..3 {
        let prompt = render(&history);
        let a = on.submit(completion(prompt.clone(), 16)).unwrap();
        let b = off.submit(completion(prompt.clone(), 16)).unwrap();
        assert_eq!(ids_of(&a), ids_of(&b), "turn {turn}");
        if turn > 0 {
            assert!(cached_tokens(&a) as usize >= prompt.len() / 2, "turn {turn}: the history is cached");
        }
        history.push(ChatMessage::new("assistant", &a.choices()[0].text));
        history.push(ChatMessage::new("user", "And three more?"));
    }
    assert_idle(&on);
}

#[test]
fn usage_reports_the_cached_prompt_tokens() {
    use ember::protocol::ApiRequest;
    let e = engine(config(true));
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "What is the largest planet?"}],
        "max_tokens": 4,
        "temperature": 0,
    })
    .to_string();
    let mut cached = Vec::new();
    for _ in 0..2 {
        let request = ApiRequest::submit(&e, &body, None).unwrap();
        request.handle().wait();
        let response: serde_json::Value = serde_json::from_str(&request.response_json().unwrap()).unwrap();
        let details = &response["usage"]["prompt_tokens_details"];
        cached.push(details["cached_tokens"].as_u64().expect("usage.prompt_tokens_details.cached_tokens"));
        assert_eq!(cached.last().copied(), Some(u64::from(request.handle().cached_prompt_tokens())));
    }
    assert!(cached[1] > cached[0], "the repeat finds its own prompt: {cached:?}");
}

#[test]
fn a_block_ending_in_a_token_sampled_but_never_computed_is_not_cached() {
    // 31 prompt tokens and one generated: the sequence ends (length) with 32 tokens, two full blocks, but the
    // 32nd was sampled and never computed, so its block's last slot holds no key or value.
    let e = engine(config(true));
    let first = e.submit(completion(prompt_of(31), 1)).unwrap();
    let sampled = ids_of(&first);
    assert_eq!(sampled.len(), 1);
    // The same 32 tokens and two more: only the first block may come from the cache.
    let mut longer = prompt_of(31);
    longer.extend_from_slice(&sampled);
    longer.extend_from_slice(&prompt_of(34)[31..]);
    let expected = ids_of(&engine(config(false)).submit(completion(longer.clone(), 6)).unwrap());
    let h = e.submit(completion(longer, 6)).unwrap();
    assert_eq!(ids_of(&h), expected);
    assert_eq!(cached_tokens(&h), 16, "the second block was never complete in the cache");
    assert_idle(&e);
}
