//! The output side of a request (`output.rs`) played by hand: events in order, merged deltas, the final event
//! once, failures, several pollers, and a watched request's key at its waiting point.

use std::sync::{Arc, Weak};
use std::thread;
use std::time::Duration;

use super::FinishReason;
use super::*;
use crate::engine::observe::prompt_progress::PromptProgress;
use crate::engine::observe::stats::EngineClock;

/// Stands in for the engine a cancellation would wake.
struct NoEngine;

impl CancelWaker for NoEngine {
    fn wake(&self) {}
}

/// A request of `n` choices whose engine side the test plays by hand.
fn request(n: usize) -> (Arc<RequestShared>, RequestHandle) {
    let no_engine: Weak<dyn CancelWaker> = Weak::<NoEngine>::new();
    let shared = RequestShared::new(1, n, 2, false, EngineClock::new(), None, no_engine);
    (Arc::clone(&shared), RequestHandle::new(shared))
}

const NOW: Option<Duration> = Some(Duration::ZERO);

fn finished(choice: usize, reason: FinishReason) -> EventPoll {
    EventPoll::Event(RequestEvent::Finished { choice, reason })
}

#[test]
fn the_final_event_comes_once_then_every_poll_is_done_at_once() {
    let (shared, h) = request(1);
    assert_eq!(h.poll(NOW), EventPoll::TimedOut);
    shared.push_delta(0, "Hel".into(), 1, 0.0, Vec::new());
    shared.push_delta(0, "lo".into(), 2, 0.0, Vec::new());
    shared.finish_choice(0, FinishReason::Stop);
    let delta = RequestEvent::Delta { choice: 0, text: "Hello".into(), tokens: 3, logprobs: Vec::new() };
    assert_eq!(h.poll(NOW), EventPoll::Event(delta), "consecutive deltas merge");
    assert_eq!(h.poll(NOW), finished(0, FinishReason::Stop));
    for _ in 0..3 {
        // No timeout: a poll after the end must not wait for an event that never comes.
        assert_eq!(h.poll(None), EventPoll::Done);
        assert_eq!(h.poll(NOW), EventPoll::Done);
    }
    assert!(h.is_finished());
}

#[test]
fn an_earlier_choice_finishing_does_not_end_the_stream() {
    let (shared, h) = request(2);
    shared.finish_choice(1, FinishReason::Length);
    assert_eq!(h.poll(NOW), finished(1, FinishReason::Length));
    assert_eq!(h.poll(NOW), EventPoll::TimedOut, "choice 0 still runs");
    shared.finish_choice(0, FinishReason::Cancelled);
    shared.finish_choice(0, FinishReason::Stop); // a second finish of a choice is ignored
    assert_eq!(h.poll(NOW), finished(0, FinishReason::Cancelled));
    assert_eq!(h.poll(NOW), EventPoll::Done);
}

#[test]
fn an_error_comes_once_even_when_every_choice_fails_it() {
    let (shared, h) = request(3);
    shared.finish_choice(2, FinishReason::Stop);
    // A second failure (the engine fails a request once; this holds even if it did not) changes nothing.
    shared.fail("forward pass failed: boom".into());
    shared.fail("forward pass failed: boom".into());
    assert_eq!(h.poll(NOW), finished(2, FinishReason::Stop));
    let error = RequestEvent::Error { message: "forward pass failed: boom".into() };
    assert_eq!(h.poll(NOW), EventPoll::Event(error));
    assert_eq!(h.poll(NOW), EventPoll::Done);
    shared.fail("forward pass failed: boom".into()); // even one that comes after the first was taken
    assert_eq!(h.poll(None), EventPoll::Done);
    assert_eq!(h.error().as_deref(), Some("forward pass failed: boom"), "the message stays readable");
    let reasons: Vec<_> = h.choices().iter().map(|c| c.finish_reason).collect();
    assert_eq!(reasons, [Some(FinishReason::Error), Some(FinishReason::Error), Some(FinishReason::Stop)]);
}

#[test]
fn threads_waiting_on_one_request_all_end_and_exactly_one_gets_the_final_event() {
    let (shared, h) = request(1);
    let pollers: Vec<_> = (0..4)
        .map(|_| {
            let h = h.clone();
            thread::spawn(move || {
                let mut finals = 0;
                loop {
                    match h.poll(None) {
                        EventPoll::Event(RequestEvent::Finished { .. }) => finals += 1,
                        EventPoll::Event(_) => {}
                        EventPoll::Done => return finals,
                        EventPoll::TimedOut => unreachable!("no timeout was given"),
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(20)); // let them block
    shared.push_delta(0, "a".into(), 1, 0.0, Vec::new());
    shared.finish_choice(0, FinishReason::Length);
    let finals: usize = pollers.into_iter().map(|p| p.join().unwrap()).sum();
    assert_eq!(finals, 1);
}

#[test]
fn a_watched_request_queues_its_key_once_until_taken() {
    use crate::engine::output::ready_queue::{Ready, ReadyQueue};
    let queue = Arc::new(ReadyQueue::new().unwrap());
    let (shared, h) = request(1);
    shared.push_delta(0, "a".into(), 1, 0.0, Vec::new());
    assert!(h.watch(&queue, 42), "an event queued before the watch counts");
    assert!(!h.watch(&queue, 43), "one waiting point per request");
    shared.push_delta(0, "b".into(), 1, 0.0, Vec::new());
    assert_eq!(queue.wait(NOW, 8), Ready::Keys(vec![42]), "once, however many events wait");
    h.clear_ready_mark();
    let delta = RequestEvent::Delta { choice: 0, text: "ab".into(), tokens: 2, logprobs: Vec::new() };
    assert_eq!(h.poll(NOW), EventPoll::Event(delta));
    assert_eq!(queue.wait(NOW, 8), Ready::TimedOut);
    shared.finish_choice(0, FinishReason::Stop);
    assert_eq!(queue.wait(NOW, 8), Ready::Keys(vec![42]));
    h.clear_ready_mark();
    assert_eq!(h.poll(NOW), finished(0, FinishReason::Stop));
    assert_eq!(h.poll(NOW), EventPoll::Done);
    // A waiting point that is gone takes no key, and the request goes on.
    let (shared, h) = request(1);
    h.watch(&Arc::new(ReadyQueue::new().unwrap()), 1);
    shared.finish_choice(0, FinishReason::Length);
    assert_eq!(h.poll(NOW), finished(0, FinishReason::Length));
}

/// A progress event carries no tokens: taking it charges no output wait and counts no polled token, so the
/// timing metrics are those of the same request without it (`prompt_progress.rs`). None comes after the end.
#[test]
fn progress_events_change_no_stats_and_none_follows_the_end() {
    let no_engine: Weak<dyn CancelWaker> = Weak::<NoEngine>::new();
    let stats = crate::engine::observe::stats::RequestStateStats { num_prompt_tokens: 9, ..Default::default() };
    let shared = RequestShared::new(1, 1, 9, false, EngineClock::new(), Some(stats), no_engine);
    let h = RequestHandle::new(Arc::clone(&shared));
    let progress = PromptProgress { processed: 4, total: 9, cached: 4, time_ms: 0 };
    shared.push_progress(0, progress);
    let before = h.stats(0);
    assert_eq!(h.poll(NOW), EventPoll::Event(RequestEvent::PromptProgress { choice: 0, progress }));
    assert_eq!(h.stats(0), before, "taking it changed no stats");
    shared.push_delta(0, "a".into(), 1, 0.0, Vec::new());
    shared.finish_choice(0, FinishReason::Stop);
    shared.push_progress(0, progress);
    assert!(matches!(h.poll(NOW), EventPoll::Event(RequestEvent::Delta { tokens: 1, .. })));
    assert_eq!(h.stats(0).unwrap().num_polled_tokens, 1);
    assert_eq!(h.poll(NOW), finished(0, FinishReason::Stop));
    assert_eq!(h.poll(NOW), EventPoll::Done);
}

#[test]
fn output_after_a_mark_is_only_what_came_since() {
    let (shared, h) = request(1);
    shared.count_token(0, 7);
    shared.push_delta(0, "Hé".into(), 1, 0.0, Vec::new());
    let (first, mark) = h.output_after(0, OutputMark::default());
    assert_eq!((first.text.as_str(), first.token_ids.as_slice()), ("Hé", &[7][..]));
    assert_eq!(mark, OutputMark { text: 3, tokens: 1, logprobs: 0 });
    shared.count_token(0, 8);
    shared.count_token(0, 9);
    shared.push_delta(0, "llo".into(), 2, 0.0, Vec::new());
    shared.set_stop_string(0, "END".into());
    shared.finish_choice(0, FinishReason::Stop);
    let (rest, mark) = h.output_after(0, mark);
    assert_eq!((rest.text.as_str(), rest.token_ids.as_slice()), ("llo", &[8, 9][..]));
    assert_eq!((rest.completion_tokens, rest.finish_reason), (3, Some(FinishReason::Stop)));
    assert_eq!(rest.stop_string.as_deref(), Some("END"));
    let (nothing, _) = h.output_after(0, mark);
    assert!(nothing.text.is_empty() && nothing.token_ids.is_empty());
    assert_eq!(h.choices()[0].stop_string.as_deref(), Some("END"));
}
