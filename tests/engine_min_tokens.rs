//! `min_tokens` on the real model: the end-of-generation token and `stop_token_ids` cannot be sampled, and stop
//! strings do not match, before a choice has that many tokens; nothing else changes.

mod common;

use ember::engine::{EngineConfig, FinishReason, RequestOptions};

#[test]
fn min_tokens_hold_back_the_stops_and_change_nothing_before_them() {
    let e = common::engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() });
    let free = e.submit(common::greedy("hi", 64)).unwrap();
    let free_ids = common::ids_of(&free);
    assert_eq!(free.choices()[0].finish_reason, Some(FinishReason::Stop), "the model ends 'hi' by itself");
    // The end-of-generation token is the last id; ask for more tokens than the free answer has.
    let generated = free_ids.len();
    let min = generated + 3;
    let held = e.submit(common::greedy("hi", 64).map_options(|o| RequestOptions { min_tokens: min, ..o })).unwrap();
    let held_ids = common::ids_of(&held);
    assert!(held_ids.len() >= min, "{} tokens, min_tokens {min}", held_ids.len());
    assert_eq!(held_ids[..generated - 1], free_ids[..generated - 1], "same tokens before the end was banned");
    assert!(!e.model().tokenizer.eog_ids().iter().any(|id| held_ids[..min].contains(id)), "{held_ids:?}");

    // A stop string found in the first tokens' text is passed by; from min_tokens on, it ends the choice.
    let text = free.choices()[0].text.clone();
    let stop = text.chars().take(3).collect::<String>();
    let stopped_early =
        e.submit(common::greedy("hi", 64).map_options(|o| RequestOptions { stop: vec![stop.clone()], ..o })).unwrap();
    stopped_early.wait();
    assert_eq!(stopped_early.choices()[0].text, "", "the stop string {stop:?} opens the answer {text:?}");
    let passed = e
        .submit(common::greedy("hi", 64).map_options(|o| RequestOptions {
            stop: vec![stop.clone()],
            min_tokens: 4,
            ..o
        }))
        .unwrap();
    passed.wait();
    assert!(passed.choices()[0].text.starts_with(&stop), "{:?}", passed.choices()[0].text);
}
