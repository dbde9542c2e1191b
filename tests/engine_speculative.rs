//! n-gram speculative decoding on the real model: a greedy request's tokens with speculation are bit-identical
//! to without (the kernels compute a row of a chunk as they compute a decode row), on reference prompts and on
//! extractive ones where drafts are accepted, and so are a seeded sampled request's, with its log probabilities,
//! `logit_bias` and `min_tokens`; stop strings, `max_tokens` and EOS inside an accepted run end a choice exactly
//! as without, and a cancel leaves a consistent prefix of the output; tokens accepted in one step share that
//! step's timestamp; a request that opts out never drafts.

mod common;
#[path = "common/per_path.rs"]
mod per_path;

use common::{chat_ids, engine, greedy, MESSAGES};
use ember::engine::sampling::SamplingParams;
use ember::engine::speculative::{DraftPolicy, SpeculativeConfig, SpeculativeMethod};
use ember::engine::{
    Engine, EngineConfig, EventPoll, FinishReason, RequestEvent, RequestHandle, RequestOptions, SubmitRequest,
};

/// An engine that speculates with drafts of up to `k` tokens, every draft verified whole (`always`): what these
/// tests check must not depend on the planner's timing-learned choices, and every draft exercises verification.
fn speculative(k: usize) -> EngineConfig {
    speculative_with(k, DraftPolicy::Always)
}

fn speculative_with(k: usize, draft_policy: DraftPolicy) -> EngineConfig {
    EngineConfig {
        kv_cache_tokens: 8192,
        speculative: Some(SpeculativeConfig {
            method: SpeculativeMethod::Ngram,
            num_speculative_tokens: k,
            prompt_lookup_min: 1,
            prompt_lookup_max: 4,
            draft_policy,
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
    SubmitRequest::with_options(chat_ids(&message), RequestOptions { max_tokens: Some(48), ..Default::default() })
}

/// The reference messages, extractive requests and a counting completion (on the scalar kernel path, the first
/// cases only: `make numerics-per-path`).
fn requests() -> Vec<SubmitRequest> {
    let cases = per_path::cases_to_check(MESSAGES.len());
    let mut all: Vec<SubmitRequest> = MESSAGES.iter().take(cases).map(|m| greedy(m, 32)).collect();
    all.extend((0..cases.min(4)).map(extractive));
    // A completion that counts: the n-grams of the prompt predict the continuation.
    let count = SubmitRequest::with_options(
        common::model().tokenizer.encode("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", false),
        RequestOptions { max_tokens: Some(40), ..Default::default() },
    );
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
    // The default policy drafts what its cost model finds worth it (how much depends on the machine's timing):
    // the same outputs.
    let adaptive = engine(speculative_with(8, DraftPolicy::Adaptive));
    for (i, h) in outputs(&adaptive, &requests).iter().enumerate() {
        assert_eq!(h.choices(), reference[i], "request {i}, adaptive");
    }
}

#[test]
fn stops_and_limits_inside_an_accepted_run_end_the_choice_as_without() {
    let counting = common::model().tokenizer.encode("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", false);
    let variants = [
        SubmitRequest::with_options(counting.clone(), RequestOptions { max_tokens: Some(7), ..Default::default() }),
        SubmitRequest::with_options(
            counting.clone(),
            RequestOptions { max_tokens: Some(40), stop: vec!["17".into()], ..Default::default() },
        ),
        SubmitRequest::with_options(
            counting.clone(),
            RequestOptions {
                max_tokens: Some(40),
                stop: vec![" 15,".into()],
                include_stop_str_in_output: true,
                ..Default::default()
            },
        ),
        SubmitRequest::with_options(
            counting.clone(),
            RequestOptions { max_tokens: Some(40), stop_token_ids: vec![counting[4]], ..Default::default() },
        ),
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

/// The requests of `requests()`, sampled: temperature 0.8 with top-p, seeded, some with two choices, log
/// probabilities, a bias and `min_tokens`.
fn sampled_requests() -> Vec<SubmitRequest> {
    requests()
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let eos = common::model().tokenizer.eos_id();
            SubmitRequest {
                n: 1 + i % 2,
                ..r.map_options(|o| RequestOptions {
                    sampling: SamplingParams {
                        temperature: 0.8,
                        top_p: 0.95,
                        seed: Some(1000 + i as u64),
                        logit_bias: match (i % 3, eos) {
                            (0, Some(eos)) => vec![(eos, -2.0)],
                            _ => Vec::new(),
                        },
                        ..SamplingParams::default()
                    },
                    logprobs: (i % 4 == 1).then_some(3),
                    min_tokens: if i % 5 == 2 { 6 } else { 0 },
                    ..o
                })
            }
        })
        .collect()
}

#[test]
fn seeded_sampled_outputs_are_identical_with_speculation_logprobs_included() {
    let requests = sampled_requests();
    let p = plain();
    let reference: Vec<_> = requests.iter().map(|r| outputs(&p, std::slice::from_ref(r)).remove(0).choices()).collect();
    let e = engine(speculative(4));
    let (mut drafted, mut accepted) = (0, 0);
    for (i, r) in requests.iter().enumerate() {
        let h = outputs(&e, std::slice::from_ref(r)).remove(0);
        assert_eq!(h.choices(), reference[i], "request {i}, alone");
        for choice in 0..r.n {
            let s = h.stats(choice).unwrap();
            drafted += s.num_draft_tokens;
            accepted += s.num_accepted_tokens;
        }
    }
    assert!(accepted > 0, "sampled requests accept drafts too ({accepted} of {drafted})");
    println!("sampled: drafted {drafted}, accepted {accepted}");
    for (i, h) in outputs(&e, &requests).iter().enumerate() {
        assert_eq!(h.choices(), reference[i], "request {i}, batched");
    }
}

#[test]
fn a_request_that_opts_out_never_drafts() {
    let e = engine(speculative(4));
    let on = outputs(&e, &[extractive(0)]).remove(0);
    assert!(on.stats(0).unwrap().num_draft_tokens > 0, "the extractive request drafts");
    let off =
        outputs(&e, &[extractive(0).map_options(|o| RequestOptions { speculative_decoding: false, ..o })]).remove(0);
    assert_eq!(off.stats(0).unwrap().num_draft_tokens, 0);
    assert_eq!(off.choices(), on.choices(), "the same tokens either way");
}

/// A cancel takes effect between steps, as without speculation: the choice ends `cancelled` with a prefix of
/// the output it would have given, its text, ids and counts agreeing, whatever run of accepted tokens it came
/// in. The cancelled request ignores EOS and may run to 4,000 tokens, so its cancel always lands before it could
/// end on its own (the extractive answer alone ends within a few steps of 8-token drafts: a race the cancel lost
/// now and then); the two outputs agree as far as both go with the same request run to 128 tokens.
#[test]
fn a_cancel_leaves_a_consistent_prefix_of_the_output() {
    let e = engine(speculative(8));
    let unending = |max_tokens| {
        extractive(2).map_options(|o| RequestOptions { max_tokens: Some(max_tokens), ignore_eos: true, ..o })
    };
    let full = outputs(&e, &[unending(128)]).remove(0).choices().remove(0);
    for events_before_cancel in [1, 3, 6] {
        let h = e.submit(unending(4000)).unwrap();
        let mut seen = 0;
        while seen < events_before_cancel {
            match h.poll(None) {
                EventPoll::Event(RequestEvent::Delta { .. }) => seen += 1,
                EventPoll::Event(other) => panic!("the request ended early: {other:?}"),
                EventPoll::Done | EventPoll::TimedOut => panic!("the request ended early"),
            }
        }
        h.cancel();
        h.wait();
        let got = h.choices().remove(0);
        assert_eq!(got.finish_reason, Some(FinishReason::Cancelled), "after {events_before_cancel} events");
        // The two agree on what both hold: usually all of `got`, the whole 128 tokens if the cancel came late.
        let (shorter, longer) = if got.token_ids.len() <= full.token_ids.len() { (&got, &full) } else { (&full, &got) };
        assert!(longer.token_ids.starts_with(&shorter.token_ids), "a prefix of the ids");
        assert!(longer.text.starts_with(&shorter.text), "a prefix of the text: {:?}", got.text);
        assert_eq!(got.completion_tokens as usize, got.token_ids.len());
        assert_eq!(h.stats(0).unwrap().num_generation_tokens, got.completion_tokens);
    }
}

/// Rejected draft positions never reach the prefix cache: a follow-up whose prompt is a speculative request's
/// prompt and output reuses the blocks that request filled (rejected drafts were written into some of them
/// before being overwritten) and still gives plain decoding's tokens.
#[test]
fn a_follow_up_reusing_blocks_filled_under_speculation_gives_plain_tokens() {
    let follow_up = |e: &Engine| {
        let first = outputs(e, &[extractive(1)]).remove(0).choices().remove(0);
        let mut prompt = extractive(1).prompts.remove(0);
        prompt.extend(&first.token_ids);
        prompt.extend(chat_ids("Now repeat it once more.").iter().skip(1));
        let h = outputs(
            e,
            &[SubmitRequest::with_options(
                prompt.clone(),
                RequestOptions { max_tokens: Some(24), ..Default::default() },
            )],
        )
        .remove(0);
        (h.choices(), h.stats(0).unwrap().num_cached_prompt_tokens as usize, prompt.len())
    };
    let (expected, _, _) = follow_up(&plain());
    let e = engine(speculative(8));
    let (got, cached, prompt_len) = follow_up(&e);
    assert_eq!(got, expected);
    let first_prompt = extractive(1).prompts[0].len();
    assert!(cached > first_prompt, "blocks of the first output were reused: {cached} of {prompt_len} cached");
    assert!(e.speculation().unwrap().accepted_tokens > 0, "the first request speculated");
}
