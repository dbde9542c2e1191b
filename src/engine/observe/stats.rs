//! What the engine records about each request's life: timestamped events, never intervals.
//!
//! Two clocks, named in every field:
//! - *wall*: seconds since the Unix epoch (`SystemTime`), for `arrival_time` only, so hosts can correlate a request
//!   with their own logs;
//! - *monotonic*: seconds since the engine started (`Instant`), for every other timestamp, so intervals can never
//!   be negative or jump with clock adjustments.
//!
//! Intervals are computed from these by the pure functions of `metrics.rs`, each next to its definition.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The engine's monotonic clock: seconds since the engine started.
#[derive(Clone, Copy, Debug)]
pub struct EngineClock {
    start: Instant,
}

impl EngineClock {
    pub fn new() -> Self {
        EngineClock { start: Instant::now() }
    }

    /// Monotonic seconds since the engine started.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Converts an `Instant` to this clock.
    pub fn at(&self, instant: Instant) -> f64 {
        instant.saturating_duration_since(self.start).as_secs_f64()
    }
}

impl Default for EngineClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Wall-clock seconds since the Unix epoch.
pub fn wall_clock_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The timing record of one request (one choice, when a request has several): vLLM's `RequestStateStats`, plus
/// what the extended metrics need. `None` means "has not happened (yet)".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestStateStats {
    /// Wall clock: when the host submitted the request.
    pub arrival_time: f64,
    /// Monotonic: the same instant as `arrival_time`, on the engine clock.
    pub arrival_ts: Option<f64>,
    /// Monotonic: when the request entered the waiting queue.
    pub queued_ts: Option<f64>,
    /// Monotonic: when the request was first scheduled (a preemption does not change it).
    pub scheduled_ts: Option<f64>,
    /// Monotonic: when the first generated token had been sampled and was on the host.
    pub first_token_ts: Option<f64>,
    /// Monotonic: when the latest generated token had been sampled and was on the host.
    pub last_token_ts: Option<f64>,
    /// Monotonic: when the request finished (stop, length, cancel or error).
    pub finished_ts: Option<f64>,
    /// Tokens generated so far.
    pub num_generation_tokens: u32,
    /// Tokens of the prompt.
    pub num_prompt_tokens: u32,
    /// Prompt tokens whose keys and values were found in the prefix cache when the request was first scheduled,
    /// and not computed.
    pub num_cached_prompt_tokens: u32,
    /// Times the request was preempted (its KV cache freed, to be recomputed).
    pub num_preemptions: u32,
    /// Draft tokens verified for it (speculative decoding), and those accepted.
    pub num_draft_tokens: u32,
    pub num_accepted_tokens: u32,
    /// Monotonic: the time of every generated token, in order (`token_ts.len() == num_generation_tokens`).
    pub token_ts: Vec<f64>,
    /// Every engine step that computed tokens of this request, in order: what its compute share, prefill time
    /// and computed prompt tokens are derived from (`metrics.rs`).
    pub steps: Vec<StepEvent>,
    /// Seconds that delivered tokens waited in the output queue between being generated and being polled,
    /// summed over tokens.
    pub output_wait_s: f64,
    /// Tokens the host has polled so far (the denominator of the mean output wait).
    pub num_polled_tokens: u32,
}

/// One engine step, as one request took part in it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepEvent {
    /// Monotonic: the step began (before scheduling).
    pub start_ts: f64,
    /// Monotonic: the step's tokens had been sampled and recorded.
    pub end_ts: f64,
    /// Tokens of this request computed in the step.
    pub tokens: u32,
    /// Tokens of every request computed in the step.
    pub batch_tokens: u32,
    /// Whether this request's tokens were prefill work: its prompt, or a recomputation after a preemption (a
    /// decode computes just the token sampled the step before).
    pub prefill: bool,
}

impl RequestStateStats {
    /// A request that arrived now.
    pub fn arrived(clock: &EngineClock) -> Self {
        RequestStateStats { arrival_time: wall_clock_now(), arrival_ts: Some(clock.now()), ..Default::default() }
    }

    /// Records a generated token at monotonic time `ts`.
    pub fn record_token(&mut self, ts: f64) {
        if self.first_token_ts.is_none() {
            self.first_token_ts = Some(ts);
        }
        self.last_token_ts = Some(ts);
        self.num_generation_tokens += 1;
        self.token_ts.push(ts);
    }
}
