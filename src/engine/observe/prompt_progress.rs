//! Prompt progress (a request's `return_progress`): how far the engine has computed a prompt, as events the host
//! polls between the submission and the first token, so that it can show how far a long prompt has got.
//! llama-server streams the same figures as `prompt_progress` (`total`, `cache`, `processed`, `time_ms`) when a
//! request sets `return_progress`; the protocol layer writes them in that shape.
//!
//! Reported for the first choice of each prompt (the one that bills it: the other choices share the prompt), in
//! two places: when the scheduler admits the sequence (what the prefix cache supplied: nothing computed yet), and
//! after each step that computed a chunk of it (the last one included: `processed == total`). Once the sequence
//! has generated a token there are no more reports, even when a preemption makes it compute its prompt again.
//! A sequence preempted during its prompt reports again from its next admission, so `processed` may go back.
//!
//! Reports are events, not stats: they change no timing metric (`output.rs` charges no queue wait for them, and
//! the steps they describe are recorded as before).

use crate::engine::sequence::Sequence;

/// How far a prompt has been computed, as one event reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PromptProgress {
    /// Prompt positions whose keys and values are in the cache: those the prefix cache supplied, and those
    /// computed since (llama-server's `processed`).
    pub processed: u32,
    /// The prompt's tokens (`total`).
    pub total: u32,
    /// Prompt tokens the prefix cache supplied at the sequence's admission (`cache`).
    pub cached: u32,
    /// Whole milliseconds since the sequence was first admitted, i.e. since its prompt began (`time_ms`).
    pub time_ms: u64,
}

/// A sequence's reporter: present on the first choice of each prompt of a request with `return_progress`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgressReporter {
    /// Monotonic: the sequence's first admission (`time_ms` counts from it).
    started: Option<f64>,
    /// Prompt tokens the prefix cache supplied at its latest admission.
    cached: u32,
}

impl Sequence {
    /// The scheduler admitted the sequence at monotonic time `now`, `cached` of its positions from the prefix
    /// cache: reports that, while its prompt is still to be computed.
    pub fn report_admission(&mut self, cached: usize, now: f64) {
        if self.num_generated() > 0 {
            return;
        }
        let prompt_len = self.prompt_len();
        let Some(reporter) = self.progress.as_mut() else { return };
        let started = *reporter.started.get_or_insert(now);
        reporter.cached = cached.min(prompt_len) as u32;
        let processed = reporter.cached;
        self.report(processed, started, now);
    }

    /// A step computed a chunk of the sequence (its `num_computed` updated, its sampled token not yet appended),
    /// ending at monotonic time `now`: reports how much of the prompt is done, while no token has been generated.
    pub fn report_computed(&mut self, now: f64) {
        if self.num_generated() > 0 {
            return;
        }
        let Some(started) = self.progress.and_then(|r| r.started) else { return };
        let processed = self.kv.num_computed().min(self.prompt_len()) as u32;
        self.report(processed, started, now);
    }

    fn report(&self, processed: u32, started: f64, now: f64) {
        let cached = self.progress.map_or(0, |r| r.cached);
        // Whole milliseconds, as llama-server's integer division gives them.
        let time_ms = ((now - started).max(0.0) * 1000.0) as u64;
        let progress = PromptProgress { processed, total: self.prompt_len() as u32, cached, time_ms };
        self.request().push_progress(self.choice(), progress);
    }
}
