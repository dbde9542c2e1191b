//! A request's output side: the queue of events the host polls, the accumulated text of each choice, and the
//! timing stats of each choice. Shared between the engine thread (which writes) and the host (which reads).
//!
//! Locks are held only for the duration of a push or a read, never across an engine step, so a host reading its
//! metrics never waits for the model.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::finish::FinishReason;
use super::metrics::{
    build_extended_timing_metrics, build_per_request_timing_metrics, token_times_since_arrival_ms,
    ExtendedTimingMetrics, PerRequestTimingMetrics,
};
use super::stats::{EngineClock, RequestStateStats};
use crate::model::TokenId;

/// Something that happened to a request, in the order the host should see it.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestEvent {
    /// New text of a choice (UTF-8, never a partial character), covering `tokens` generated tokens.
    Delta { choice: usize, text: String, tokens: u32 },
    /// A choice ended. After the last choice's `Finished`, every poll answers it again.
    Finished { choice: usize, reason: FinishReason },
    /// The request failed; every later poll answers this again.
    Error { message: String },
}

/// A queued delta with the sum of its tokens' timestamps, so that the wait of every token can be charged when
/// the host takes it (`tokens × now − Σ ts`).
#[derive(Debug)]
struct QueuedDelta {
    choice: usize,
    text: String,
    tokens: u32,
    ts_sum: f64,
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
    pub finish_reason: Option<FinishReason>,
}

#[derive(Debug)]
struct OutputState {
    queue: VecDeque<Queued>,
    choices: Vec<ChoiceOutput>,
    /// The answer to polls once the queue is drained and the request has ended.
    terminal: Option<RequestEvent>,
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
            }),
            ready: Condvar::new(),
            stats: stats.map(|s| (0..n).map(|_| Mutex::new(s.clone())).collect()),
            cancelled: AtomicBool::new(false),
            cached_prompt_tokens: AtomicU32::new(0),
            engine,
        })
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

    /// Engine side: `text` released for `choice`, covering `tokens` tokens whose timestamps sum to `ts_sum`.
    pub fn push_delta(&self, choice: usize, text: String, tokens: u32, ts_sum: f64) {
        let mut out = lock(&self.output);
        out.choices[choice].text.push_str(&text);
        out.queue.push_back(Queued::Delta(QueuedDelta { choice, text, tokens, ts_sum }));
        drop(out);
        self.ready.notify_all();
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
        if out.choices.iter().all(|c| c.finish_reason.is_some()) && out.terminal.is_none() {
            out.terminal = Some(event.clone());
        }
        out.queue.push_back(Queued::Event(event));
        drop(out);
        self.ready.notify_all();
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
        out.queue.push_back(Queued::Event(event));
        drop(out);
        self.ready.notify_all();
    }

    /// Whether every choice has ended.
    pub fn is_finished(&self) -> bool {
        lock(&self.output).terminal.is_some()
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

    /// The next event: waits up to `timeout` (`None` = until one comes). `None` when the wait timed out.
    /// Consecutive deltas of one choice are merged into one event. Once the request has ended and its events
    /// are drained, every poll answers the terminal event again at once.
    pub fn poll(&self, timeout: Option<Duration>) -> Option<RequestEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut out = lock(&self.shared.output);
        loop {
            if let Some(front) = out.queue.pop_front() {
                return Some(self.deliver(front, &mut out));
            }
            if let Some(t) = &out.terminal {
                return Some(t.clone());
            }
            out = match deadline {
                None => self.shared.ready.wait(out).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.shared.ready.wait_timeout(out, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
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
        }
        let now = self.shared.clock.now();
        self.shared.with_stats(delta.choice, |s| {
            s.output_wait_s += (f64::from(delta.tokens) * now - delta.ts_sum).max(0.0);
            s.num_polled_tokens += delta.tokens;
        });
        RequestEvent::Delta { choice: delta.choice, text: delta.text, tokens: delta.tokens }
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

    /// A copy of choice `choice`'s raw stats (`None` when stats are off).
    pub fn stats(&self, choice: usize) -> Option<RequestStateStats> {
        self.shared.stats.as_ref().and_then(|s| s.get(choice)).map(|s| lock(s).clone())
    }
}
