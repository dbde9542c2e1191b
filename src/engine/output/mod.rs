//! The output stage: a sequence's new tokens become text and reach its request's queue (run by the engine thread
//! after each step's update, `step/core.rs`, through `Sequence::emit_text` and `append_accepted`). Each sequence's
//! detokenizer and stop strings (`text_output.rs`, `stop.rs`) turn the tokens the scheduler's update appended into
//! text, end the sequence at a stop string, and release the text with its tokens' timestamps and log
//! probabilities to the request; `finish.rs` says why a choice ended, and `ready_queue.rs` is the engine-wide
//! waiting point where a host learns which requests have events.
//!
//! Owns: each sequence's text (`TextOutput`), and each request's output side, defined here: the queue of events
//! the host polls, the accumulated text of each choice, and the timing stats of each choice. Shared between the
//! engine thread (which writes) and the host (which reads).
//!
//! Locks are held only for the duration of a push or a read, never across an engine step, so a host reading its
//! metrics never waits for the model.

pub mod finish;
#[cfg(test)]
mod output_tests;
pub mod ready_queue;
pub mod stop;
pub mod text_output;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::engine::api::waiting_limit::RequestPlace;
use crate::engine::observe::metrics::{
    build_extended_timing_metrics, build_llamacpp_timings, build_per_request_timing_metrics,
    token_times_since_arrival_ms, ExtendedTimingMetrics, LlamaCppTimings, PerRequestTimingMetrics,
};
use crate::engine::observe::prompt_progress::PromptProgress;
use crate::engine::observe::stats::{EngineClock, RequestStateStats};
use crate::engine::sampling::prompt_logprobs::PromptTokenLogprob;
use crate::engine::sampling::TokenLogprob;
use crate::model::TokenId;
use finish::FinishReason;
use ready_queue::ReadyQueue;

/// Something that happened to a request, in the order the host should see it.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestEvent {
    /// New text of a choice (UTF-8, never a partial character), covering `tokens` generated tokens; with their
    /// log probabilities when the request asked for them (empty otherwise; a stop token has none).
    Delta { choice: usize, text: String, tokens: u32, logprobs: Vec<TokenLogprob> },
    /// A choice ended. The last choice's `Finished` is the request's final event.
    Finished { choice: usize, reason: FinishReason },
    /// The request failed: its final event (choices not yet finished end with `FinishReason::Error`).
    Error { message: String },
    /// How far the prompt of choice `choice` (the first choice of its prompt) has been computed; only for a
    /// request with `return_progress`, before the choice's first token (`prompt_progress.rs`).
    PromptProgress { choice: usize, progress: PromptProgress },
}

/// The answer to [`RequestHandle::poll`].
#[derive(Clone, Debug, PartialEq)]
pub enum EventPoll {
    /// The next event. The request's final one (the last choice's `Finished`, or `Error`) is handed out once.
    Event(RequestEvent),
    /// The final event has been handed out: the stream is over, and every later poll answers this at once.
    Done,
    /// Nothing happened within the timeout.
    TimedOut,
}

/// A queued delta with the sum of its tokens' timestamps, so that the wait of every token can be charged when
/// the host takes it (`tokens × now − Σ ts`).
#[derive(Debug)]
struct QueuedDelta {
    choice: usize,
    text: String,
    tokens: u32,
    ts_sum: f64,
    logprobs: Vec<TokenLogprob>,
}

#[derive(Debug)]
enum Queued {
    Delta(QueuedDelta),
    Event(RequestEvent),
}

/// The final (or current) output of one choice.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChoiceOutput {
    /// All text released so far.
    pub text: String,
    /// Tokens generated so far (a stop token included).
    pub completion_tokens: u32,
    /// Their ids.
    pub token_ids: Vec<TokenId>,
    /// The log probabilities of the tokens whose text is in `text`, when the request asked for them.
    pub logprobs: Vec<TokenLogprob>,
    /// The log probabilities of the choice's prompt tokens after the first (`prompt_logprobs`), once computed;
    /// shared by the choices of one prompt.
    pub prompt_logprobs: Option<Arc<[PromptTokenLogprob]>>,
    pub finish_reason: Option<FinishReason>,
    /// The stop string that ended the choice, when one did (`finish_reason` is then `Stop`).
    pub stop_string: Option<String>,
}

/// How much of a choice's output a reader has taken: bytes of `text`, entries of `token_ids` and of `logprobs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputMark {
    pub text: usize,
    pub tokens: usize,
    pub logprobs: usize,
}

#[derive(Debug)]
struct OutputState {
    queue: VecDeque<Queued>,
    choices: Vec<ChoiceOutput>,
    /// The event that ended the request (the last choice's `Finished`, or the `Error`), once it has ended.
    terminal: Option<RequestEvent>,
    /// A poll has handed out the final event: later polls answer `Done`, whatever may still be queued.
    final_taken: bool,
}

/// The engine-side hook that a cancellation wakes.
pub trait CancelWaker: Send + Sync {
    fn wake(&self);
}

/// State shared by the engine thread and the request's handle.
pub struct RequestShared {
    id: u64,
    prompt_tokens: u32,
    include_metrics: bool,
    clock: EngineClock,
    output: Mutex<OutputState>,
    ready: Condvar,
    /// One per choice; `None` when the engine records no stats.
    stats: Option<Vec<Mutex<RequestStateStats>>>,
    cancelled: AtomicBool,
    /// Prompt tokens found in the prefix cache, over the request's prompts (each counted once, for its first
    /// choice): `usage.prompt_tokens_details.cached_tokens`. Kept whether or not stats are recorded.
    cached_prompt_tokens: AtomicU32,
    engine: Weak<dyn CancelWaker>,
    /// Its phase in the engine's request gauges (`waiting_limit.rs`): waiting, running, ended.
    place: OnceLock<RequestPlace>,
    /// The waiting point this request reports its events to, when the host asked for one
    /// ([`RequestHandle::watch`]).
    watch: OnceLock<Watch>,
    /// Whether the request's key is in that waiting point's queue (at most once however many events wait).
    marked: AtomicBool,
}

/// A waiting point and the request's key there.
struct Watch {
    queue: Weak<ReadyQueue>,
    key: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RequestShared {
    /// A new request with `n` choices. `stats` is the arrival record (copied per choice) when stats are on.
    pub fn new(
        id: u64,
        n: usize,
        prompt_tokens: u32,
        include_metrics: bool,
        clock: EngineClock,
        stats: Option<RequestStateStats>,
        engine: Weak<dyn CancelWaker>,
    ) -> Arc<Self> {
        Arc::new(RequestShared {
            id,
            prompt_tokens,
            include_metrics,
            clock,
            output: Mutex::new(OutputState {
                queue: VecDeque::new(),
                choices: vec![ChoiceOutput::default(); n],
                terminal: None,
                final_taken: false,
            }),
            ready: Condvar::new(),
            stats: stats.map(|s| (0..n).map(|_| Mutex::new(s.clone())).collect()),
            cancelled: AtomicBool::new(false),
            cached_prompt_tokens: AtomicU32::new(0),
            engine,
            place: OnceLock::new(),
            watch: OnceLock::new(),
            marked: AtomicBool::new(false),
        })
    }

    /// Counts the request in `place`'s gauges from now on (a request holds one place at most).
    pub fn hold_place(&self, place: RequestPlace) {
        let _ = self.place.set(place);
    }

    /// Engine side: the request has started (its first choice was scheduled), so it waits no more: it runs.
    pub fn started(&self) {
        if let Some(place) = self.place.get() {
            place.start();
        }
    }

    /// The request has ended: it neither waits nor runs any more.
    fn ended(&self) {
        if let Some(place) = self.place.get() {
            place.end();
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn num_choices(&self) -> usize {
        lock(&self.output).choices.len()
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Updates choice `choice`'s stats (no-op when stats are off).
    pub fn with_stats(&self, choice: usize, f: impl FnOnce(&mut RequestStateStats)) {
        if let Some(stats) = &self.stats {
            f(&mut lock(&stats[choice]));
        }
    }

    /// Engine side: `text` released for `choice`, covering `tokens` tokens whose timestamps sum to `ts_sum`, with
    /// the log probabilities of those tokens when the request asked for them.
    pub fn push_delta(&self, choice: usize, text: String, tokens: u32, ts_sum: f64, logprobs: Vec<TokenLogprob>) {
        let mut out = lock(&self.output);
        out.choices[choice].text.push_str(&text);
        out.choices[choice].logprobs.extend_from_slice(&logprobs);
        out.queue.push_back(Queued::Delta(QueuedDelta { choice, text, tokens, ts_sum, logprobs }));
        let ready = self.mark_ready();
        drop(out);
        self.ready.notify_all();
        announce(ready);
    }

    /// Engine side: how far the prompt of `choice` has been computed (`return_progress`). Nothing once the
    /// request has ended. The event carries no tokens, so taking it charges no output wait to any metric.
    pub fn push_progress(&self, choice: usize, progress: PromptProgress) {
        let mut out = lock(&self.output);
        if out.terminal.is_some() {
            return;
        }
        out.queue.push_back(Queued::Event(RequestEvent::PromptProgress { choice, progress }));
        let ready = self.mark_ready();
        drop(out);
        self.ready.notify_all();
        announce(ready);
    }

    /// Engine side: the log probabilities of the prompt of `choices` (`prompt_logprobs`), before any of them has
    /// an event.
    pub fn set_prompt_logprobs(&self, choices: std::ops::Range<usize>, scored: Arc<[PromptTokenLogprob]>) {
        let mut out = lock(&self.output);
        for c in out.choices.get_mut(choices).unwrap_or_default() {
            c.prompt_logprobs = Some(Arc::clone(&scored));
        }
    }

    /// Engine side: `n` tokens of one of the request's prompts were found in the prefix cache.
    pub fn add_cached_prompt_tokens(&self, n: u32) {
        self.cached_prompt_tokens.fetch_add(n, Ordering::Relaxed);
    }

    /// Engine side: records a generated token for usage (whether or not it released text).
    pub fn count_token(&self, choice: usize, token: TokenId) {
        let mut out = lock(&self.output);
        out.choices[choice].completion_tokens += 1;
        out.choices[choice].token_ids.push(token);
    }

    /// Engine side: the stop string `stop` ended choice `choice` (its `Finished` event follows).
    pub fn set_stop_string(&self, choice: usize, stop: String) {
        lock(&self.output).choices[choice].stop_string = Some(stop);
    }

    /// Engine side: choice `choice` ended.
    /// A choice ends once: a later call (its request failed first) changes nothing, its end time included.
    pub fn finish_choice(&self, choice: usize, reason: FinishReason) {
        let now = self.clock.now();
        let mut out = lock(&self.output);
        if out.choices[choice].finish_reason.is_some() {
            return;
        }
        self.with_stats(choice, |s| s.finished_ts = Some(now));
        out.choices[choice].finish_reason = Some(reason);
        let event = RequestEvent::Finished { choice, reason };
        // The gauges change before the event is queued: a host that has seen the request end sees it gone from
        // them. A choice that ends while others go on means the request no longer waits.
        if out.choices.iter().all(|c| c.finish_reason.is_some()) && out.terminal.is_none() {
            out.terminal = Some(event.clone());
            self.ended();
        } else {
            self.started();
        }
        out.queue.push_back(Queued::Event(event));
        let ready = self.mark_ready();
        drop(out);
        self.ready.notify_all();
        announce(ready);
    }

    /// Engine side: the request failed; its unfinished choices end with `FinishReason::Error`. A request ends
    /// once: when every choice has already ended (finished, or failed before), nothing happens.
    pub fn fail(&self, message: String) {
        let now = self.clock.now();
        let mut out = lock(&self.output);
        if out.terminal.is_some() {
            return;
        }
        for (choice, c) in out.choices.iter_mut().enumerate() {
            if c.finish_reason.is_none() {
                c.finish_reason = Some(FinishReason::Error);
                if let Some(stats) = &self.stats {
                    lock(&stats[choice]).finished_ts = Some(now);
                }
            }
        }
        let event = RequestEvent::Error { message };
        out.terminal = Some(event.clone());
        self.ended();
        out.queue.push_back(Queued::Event(event));
        let ready = self.mark_ready();
        drop(out);
        self.ready.notify_all();
        announce(ready);
    }

    /// Whether every choice has ended.
    pub fn is_finished(&self) -> bool {
        lock(&self.output).terminal.is_some()
    }

    /// Whether the request's key must join its waiting point's queue, i.e. it is watched and not there already;
    /// marks it so. After an event is queued the engine side calls it under the output lock (so that
    /// [`RequestHandle::watch`] sees the event or is seen), and appends the key with [`announce`] once it has
    /// released the lock, so that the taker it wakes does not find the lock still held.
    fn mark_ready(&self) -> Option<(Arc<ReadyQueue>, u64)> {
        let watch = self.watch.get()?;
        if self.marked.swap(true, Ordering::AcqRel) {
            return None;
        }
        match watch.queue.upgrade() {
            Some(queue) => Some((queue, watch.key)),
            // The waiting point is gone (its engine was freed): nobody will take the key.
            None => {
                self.marked.store(false, Ordering::Release);
                None
            }
        }
    }
}

/// Appends a key that [`RequestShared::mark_ready`] marked, after the output lock was released.
fn announce(ready: Option<(Arc<ReadyQueue>, u64)>) {
    if let Some((queue, key)) = ready {
        queue.push(key);
    }
}

/// Whether `event`, just taken from the queue, is the request's final one: an `Error`, or the `Finished` that
/// ended the last choice (`terminal`; every choice finishes once, so an equal event is that one).
fn is_final(event: &RequestEvent, terminal: Option<&RequestEvent>) -> bool {
    match event {
        RequestEvent::Error { .. } => true,
        RequestEvent::Finished { .. } => terminal == Some(event),
        RequestEvent::Delta { .. } | RequestEvent::PromptProgress { .. } => false,
    }
}

/// The host's handle on a request: poll its events, read its output and metrics, cancel it.
#[derive(Clone)]
pub struct RequestHandle {
    shared: Arc<RequestShared>,
}

impl std::fmt::Debug for RequestHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHandle").field("id", &self.shared.id).finish()
    }
}

impl RequestHandle {
    pub fn new(shared: Arc<RequestShared>) -> Self {
        RequestHandle { shared }
    }

    pub fn id(&self) -> u64 {
        self.shared.id
    }

    pub fn num_choices(&self) -> usize {
        self.shared.num_choices()
    }

    pub fn prompt_tokens(&self) -> u32 {
        self.shared.prompt_tokens
    }

    /// Prompt tokens whose KV the prefix cache supplied, over the request's prompts (each prompt counted once).
    pub fn cached_prompt_tokens(&self) -> u32 {
        self.shared.cached_prompt_tokens.load(Ordering::Relaxed)
    }

    /// Whether the request asked for metrics in its response.
    pub fn include_metrics(&self) -> bool {
        self.shared.include_metrics
    }

    /// The next event: waits up to `timeout` (`None` = until one comes). Consecutive deltas of one choice are
    /// merged into one event. The final event is handed out once; every poll after it answers `Done` at once.
    pub fn poll(&self, timeout: Option<Duration>) -> EventPoll {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut out = lock(&self.shared.output);
        loop {
            if out.final_taken {
                return EventPoll::Done;
            }
            if let Some(front) = out.queue.pop_front() {
                let event = self.deliver(front, &mut out);
                self.end_if_final(&event, &mut out);
                return EventPoll::Event(event);
            }
            out = match deadline {
                None => self.shared.ready.wait(out).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return EventPoll::TimedOut;
                    }
                    self.shared.ready.wait_timeout(out, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }

    /// Reports this request's events to `queue` under `key` from now on: whenever an event is queued and the key
    /// is not in `queue` already, it is appended (`ready_queue.rs`). Events queued before this call count: if any
    /// wait, the key is appended at once. A request reports to one queue; `false` (nothing changed) when it
    /// already does.
    pub fn watch(&self, queue: &Arc<ReadyQueue>, key: u64) -> bool {
        let out = lock(&self.shared.output);
        if self.shared.watch.set(Watch { queue: Arc::downgrade(queue), key }).is_err() {
            return false;
        }
        let ready = match !out.queue.is_empty() && !out.final_taken {
            true => self.shared.mark_ready(),
            false => None,
        };
        drop(out);
        announce(ready);
        true
    }

    /// The taker of this request's key from its waiting point: clears the mark before taking the events, so that
    /// an event queued from now on appends the key again.
    pub fn clear_ready_mark(&self) {
        self.shared.marked.store(false, Ordering::Release);
    }

    /// The next event if one is queued, without waiting, and whether it is the request's final one (after which
    /// nothing more comes: `None` from then on, and `poll` answers `Done`). Takes from the same queue as `poll`.
    pub fn take_ready(&self) -> Option<(RequestEvent, bool)> {
        let mut out = lock(&self.shared.output);
        if out.final_taken {
            return None;
        }
        let front = out.queue.pop_front()?;
        let event = self.deliver(front, &mut out);
        let last = self.end_if_final(&event, &mut out);
        Some((event, last))
    }

    /// After `event` was taken: when it is the final one, the stream is over (`Done` from now on). Whether it was.
    fn end_if_final(&self, event: &RequestEvent, out: &mut OutputState) -> bool {
        let last = is_final(event, out.terminal.as_ref());
        if last {
            out.final_taken = true;
            // Nothing is queued after the final event (a request ends once: `fail` and `finish_choice` do nothing
            // after it); should anything be, `Done` still ends the stream.
            out.queue.clear();
        }
        last
    }

    /// The taker of this request's key had no room for all its events: the key goes back to the head of its
    /// waiting point's queue (unless an event queued meanwhile has put it back already).
    pub fn requeue_first(&self) {
        if let Some((queue, key)) = self.shared.mark_ready() {
            queue.push_front(key);
        }
    }

    /// The engine side of the request, for tests that play it by hand (an engine failure, say, which no real
    /// request can be made to provoke).
    #[cfg(test)]
    pub(crate) fn engine_side(&self) -> &RequestShared {
        &self.shared
    }

    /// Turns a queued item into an event, merging following deltas of the same choice and charging the tokens'
    /// time in the queue to the choice's `output_wait`.
    fn deliver(&self, item: Queued, out: &mut OutputState) -> RequestEvent {
        let mut delta = match item {
            Queued::Event(e) => return e,
            Queued::Delta(d) => d,
        };
        while let Some(Queued::Delta(next)) = out.queue.front() {
            if next.choice != delta.choice {
                break;
            }
            let Some(Queued::Delta(next)) = out.queue.pop_front() else { unreachable!() };
            delta.text.push_str(&next.text);
            delta.tokens += next.tokens;
            delta.ts_sum += next.ts_sum;
            delta.logprobs.extend(next.logprobs);
        }
        let now = self.shared.clock.now();
        self.shared.with_stats(delta.choice, |s| {
            s.output_wait_s += (f64::from(delta.tokens) * now - delta.ts_sum).max(0.0);
            s.num_polled_tokens += delta.tokens;
        });
        RequestEvent::Delta { choice: delta.choice, text: delta.text, tokens: delta.tokens, logprobs: delta.logprobs }
    }

    /// Asks the engine to stop this request; its choices end with `FinishReason::Cancelled` (those already
    /// finished keep their reason). Idempotent.
    pub fn cancel(&self) {
        if !self.shared.cancelled.swap(true, Ordering::AcqRel) {
            if let Some(engine) = self.shared.engine.upgrade() {
                engine.wake();
            }
        }
    }

    /// Whether every choice has ended (events may still be queued).
    pub fn is_finished(&self) -> bool {
        self.shared.is_finished()
    }

    /// Blocks until the request has ended.
    pub fn wait(&self) {
        let mut out = lock(&self.shared.output);
        while out.terminal.is_none() {
            out = self.shared.ready.wait(out).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The output of every choice so far.
    pub fn choices(&self) -> Vec<ChoiceOutput> {
        lock(&self.shared.output).choices.clone()
    }

    /// Choice `choice`'s output past `mark` (its text, token ids and log probabilities after those already
    /// taken; its other fields whole), and the mark past it: a stream reads each new part once, without copying
    /// what it read before. The output is what the engine has released, which may be ahead of the events polled.
    pub fn output_after(&self, choice: usize, mark: OutputMark) -> (ChoiceOutput, OutputMark) {
        let out = lock(&self.shared.output);
        let Some(c) = out.choices.get(choice) else { return (ChoiceOutput::default(), mark) };
        let tail = ChoiceOutput {
            text: c.text.get(mark.text..).unwrap_or_default().to_owned(),
            completion_tokens: c.completion_tokens,
            token_ids: c.token_ids.get(mark.tokens..).unwrap_or_default().to_vec(),
            logprobs: c.logprobs.get(mark.logprobs..).unwrap_or_default().to_vec(),
            prompt_logprobs: None,
            finish_reason: c.finish_reason,
            stop_string: c.stop_string.clone(),
        };
        (tail, OutputMark { text: c.text.len(), tokens: c.token_ids.len(), logprobs: c.logprobs.len() })
    }

    /// The error message, when the request failed.
    pub fn error(&self) -> Option<String> {
        match &lock(&self.shared.output).terminal {
            Some(RequestEvent::Error { message }) => Some(message.clone()),
            _ => None,
        }
    }

    /// The five metrics of choice `choice` (partial while it runs; all absent when stats are off).
    pub fn timing_metrics(&self, choice: usize) -> PerRequestTimingMetrics {
        match &self.shared.stats {
            Some(stats) if choice < stats.len() => {
                let s = lock(&stats[choice]);
                build_per_request_timing_metrics(Some(&s), s.num_generation_tokens)
            }
            _ => build_per_request_timing_metrics(None, 0),
        }
    }

    /// llama.cpp server's `timings` of choice `choice` (all absent when stats are off).
    pub fn llamacpp_timings(&self, choice: usize) -> LlamaCppTimings {
        match &self.shared.stats {
            Some(stats) if choice < stats.len() => build_llamacpp_timings(Some(&lock(&stats[choice]))),
            _ => build_llamacpp_timings(None),
        }
    }

    /// The extended metrics of choice `choice`.
    pub fn extended_metrics(&self, choice: usize) -> ExtendedTimingMetrics {
        match &self.shared.stats {
            Some(stats) if choice < stats.len() => build_extended_timing_metrics(Some(&lock(&stats[choice]))),
            _ => build_extended_timing_metrics(None),
        }
    }

    /// Milliseconds from arrival to each generated token of choice `choice`.
    pub fn token_times_ms(&self, choice: usize) -> Vec<f64> {
        match &self.shared.stats {
            Some(stats) if choice < stats.len() => token_times_since_arrival_ms(Some(&lock(&stats[choice]))),
            _ => Vec::new(),
        }
    }

    /// The log probabilities of choice `choice`'s prompt tokens after the first, when the request asked for them
    /// (`SubmitRequest::prompt_logprobs`) and they are computed: before the choice's first event.
    pub fn prompt_logprobs(&self, choice: usize) -> Option<Arc<[PromptTokenLogprob]>> {
        lock(&self.shared.output).choices.get(choice).and_then(|c| c.prompt_logprobs.clone())
    }

    /// The sampled tokens of choice `choice` whose text is in its output, with their log probabilities (empty
    /// unless the request asked for them; see `sampling/logprobs.rs`).
    pub fn token_logprobs(&self, choice: usize) -> Vec<(TokenId, f32)> {
        let out = lock(&self.shared.output);
        out.choices.get(choice).map(|c| c.logprobs.iter().map(|t| (t.token, t.logprob)).collect()).unwrap_or_default()
    }

    /// A copy of choice `choice`'s raw stats (`None` when stats are off).
    pub fn stats(&self, choice: usize) -> Option<RequestStateStats> {
        self.shared.stats.as_ref().and_then(|s| s.get(choice)).map(|s| lock(s).clone())
    }
}
