//! n-gram speculative decoding on the real model: a greedy request's tokens with speculation are bit-identical
//! to without (the kernels compute a row of a chunk as they compute a decode row), on reference prompts and on
//! extractive ones where drafts are accepted; stop strings, `max_tokens` and EOS inside an accepted run end a
//! choice exactly as without; tokens accepted in one step share that step's timestamp.

mod common;

use common::{chat_ids, engine, greedy, MESSAGES};
use ember::engine::speculative::{SpeculativeConfig, SpeculativeMethod};
use ember::engine::{Engine, EngineConfig, RequestHandle, SubmitRequest};

fn speculative(k: usize) -> EngineConfig {
    EngineConfig {
        kv_cache_tokens: 8192,
        speculative: Some(SpeculativeConfig {
            method: SpeculativeMethod::Ngram,
            num_speculative_tokens: k,
            prompt_lookup_min: 1,
            prompt_lookup_max: 4,
        }),
        ..Default::default()
    }
}

fn plain() -> Engine {
    engine(EngineConfig { kv_cache_tokens: 8192, ..Default::default() })
}

/// A passage, then a request to quote it: the answer repeats what the prompt holds.
fn extractive(i: usize) -> SubmitRequest {
    let passage = MESSAGES[i * 4..i * 4 + 4].join(" ");
    let message = format!("{passage}\n\nRepeat the text above word for word.");
    SubmitRequest { max_tokens: Some(48), ..SubmitRequest::new(chat_ids(&message)) }
}

fn requests() -> Vec<SubmitRequest> {
    let mut all: Vec<SubmitRequest> = MESSAGES.iter().map(|m| greedy(m, 32)).collect();
    all.extend((0..4).map(extractive));
    // A completion that counts: the n-grams of the prompt predict the continuation.
    let count = ember::engine::SubmitRequest {
        max_tokens: Some(40),
        ..SubmitRequest::new(common::model().tokenizer.encode("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", false))
    };
    all.push(count);
    all
}

fn outputs(e: &Engine, requests: &[SubmitRequest]) -> Vec<RequestHandle> {
    let handles: Vec<_> = requests.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    for h in &handles {
        h.wait();
        assert_eq!(h.error(), None);
    }
    handles
}

#[test]
fn greedy_outputs_are_bit_identical_with_speculation_one_at_a_time_and_batched() {
    let requests = requests();
    let reference: Vec<_> = {
        let e = plain();
        requests.iter().map(|r| outputs(&e, std::slice::from_ref(r)).remove(0).choices()).collect()
    };
    let e = engine(speculative(4));
    let (mut drafted, mut accepted, mut shared_instants) = (0, 0, 0);
    // One at a time (a single stream speculates every step it can).
    for (i, r) in requests.iter().enumerate() {
        let h = outputs(&e, std::slice::from_ref(r)).remove(0);
        assert_eq!(h.choices(), reference[i], "request {i}, alone");
        let s = h.stats(0).unwrap();
        assert!(s.num_accepted_tokens <= s.num_draft_tokens);
        drafted += s.num_draft_tokens;
        accepted += s.num_accepted_tokens;
        // Tokens accepted together share their step's instant (a stop inside a run drops the rest).
        let repeats = s.token_ts.windows(2).filter(|w| w[0] == w[1]).count() as u32;
        assert!(repeats <= s.num_accepted_tokens, "request {i}: {repeats} repeated timestamps");
        shared_instants += repeats;
        assert_eq!(s.token_ts.len() as u32, s.num_generation_tokens);
    }
    assert!(accepted > 0 && drafted > 0, "the extractive requests accept drafts ({accepted} of {drafted})");
    assert!(shared_instants > 0, "accepted tokens were output with their step's timestamp");
    println!("drafted {drafted}, accepted {accepted}, tokens sharing a step's instant {shared_instants}");
    // All at once: batched with each other, drafts within the step's budget.
    for (i, h) in outputs(&e, &requests).iter().enumerate() {
        assert_eq!(h.choices(), reference[i], "request {i}, batched");
    }
}

#[test]
fn stops_and_limits_inside_an_accepted_run_end_the_choice_as_without() {
    let counting = common::model().tokenizer.encode("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", false);
    let variants = [
        SubmitRequest { max_tokens: Some(7), ..SubmitRequest::new(counting.clone()) },
        SubmitRequest { max_tokens: Some(40), stop: vec!["17".into()], ..SubmitRequest::new(counting.clone()) },
        SubmitRequest {
            max_tokens: Some(40),
            stop: vec![" 15,".into()],
            include_stop_str_in_output: true,
            ..SubmitRequest::new(counting.clone())
        },
        SubmitRequest { max_tokens: Some(40), stop_token_ids: vec![counting[4]], ..SubmitRequest::new(counting) },
        extractive(1),
    ];
    let (p, s) = (plain(), engine(speculative(8)));
    for (i, v) in variants.iter().enumerate() {
        let expected = outputs(&p, std::slice::from_ref(v)).remove(0).choices();
        let h = outputs(&s, std::slice::from_ref(v)).remove(0);
        assert_eq!(h.choices(), expected, "variant {i}");
        assert_eq!(h.stats(0).unwrap().num_generation_tokens, expected[0].completion_tokens, "variant {i}");
    }
}
