//! Progress of loading a model, for a host's progress bar (`engine_new_with_progress`, like llama.cpp's
//! `progress_callback`): the fraction of the work done as it advances, and the host's answer whether to go on.

/// The host's function: receives the fraction loaded (0 to 1, never decreasing, 1 exactly once, last) and
/// returns `false` to cancel the load.
pub type ProgressFn<'a> = dyn FnMut(f32) -> bool + 'a;

/// Counts the work of a load in bytes against a total fixed in advance, and reports each advance as a fraction.
pub struct LoadProgress<'a> {
    report: Option<&'a mut ProgressFn<'a>>,
    total: u64,
    done: u64,
    cancelled: bool,
    finished: bool,
}

impl<'a> LoadProgress<'a> {
    /// Reports to `report`, if any.
    pub fn new(report: Option<&'a mut ProgressFn<'a>>) -> Self {
        LoadProgress { report, total: 0, done: 0, cancelled: false, finished: false }
    }

    /// A load nobody watches: it cannot be cancelled.
    pub fn silent() -> Self {
        Self::new(None)
    }

    /// Sets the load's total work, and reports 0: the load has begun. `false` when the host cancels.
    pub fn begin(&mut self, total_bytes: u64) -> bool {
        self.total = total_bytes;
        self.send(0.0)
    }

    /// Adds `bytes` of work done (never beyond the total, and never to 1: only `finish` reports 1). `false` once
    /// the host has cancelled.
    pub fn advance(&mut self, bytes: u64) -> bool {
        self.done = self.done.saturating_add(bytes).min(self.total);
        // A fraction just below 1 until the end, so that 1 always means "loaded".
        let fraction = if self.total == 0 { 0.0 } else { (self.done as f64 / self.total as f64) as f32 };
        self.send(fraction.min(0.999))
    }

    /// Reports 1: the load is complete. `false` when the host cancels even now.
    pub fn finish(&mut self) -> bool {
        if self.finished {
            return !self.cancelled;
        }
        self.finished = true;
        self.done = self.total;
        self.send(1.0)
    }

    /// Whether the host has asked to cancel.
    pub fn cancelled(&self) -> bool {
        self.cancelled
    }

    fn send(&mut self, fraction: f32) -> bool {
        if self.cancelled {
            return false;
        }
        if let Some(report) = self.report.as_mut() {
            self.cancelled = !report(fraction);
        }
        !self.cancelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_rise_to_one_reported_once_last() {
        let mut seen = Vec::new();
        let mut report = |f: f32| {
            seen.push(f);
            true
        };
        let mut progress = LoadProgress::new(Some(&mut report));
        assert!(progress.begin(100));
        assert!(progress.advance(50));
        assert!(progress.advance(80)); // beyond the total: held below 1
        assert!(progress.finish());
        assert!(progress.finish()); // once only
        assert_eq!(seen, [0.0, 0.5, 0.999, 1.0]);
    }

    #[test]
    fn a_false_answer_cancels_and_nothing_more_is_reported() {
        let mut calls = 0;
        let mut report = |_: f32| {
            calls += 1;
            calls < 2
        };
        let mut progress = LoadProgress::new(Some(&mut report));
        assert!(progress.begin(10));
        assert!(!progress.advance(5));
        assert!(progress.cancelled());
        assert!(!progress.advance(1));
        assert!(!progress.finish());
        assert_eq!(calls, 2);
    }

    #[test]
    fn a_silent_load_cannot_be_cancelled_and_an_empty_one_is_zero_then_one() {
        let mut progress = LoadProgress::silent();
        assert!(progress.begin(0) && progress.advance(0) && progress.finish());
        let mut seen = Vec::new();
        let mut report = |f: f32| {
            seen.push(f);
            true
        };
        let mut progress = LoadProgress::new(Some(&mut report));
        assert!(progress.begin(0) && progress.advance(0) && progress.finish());
        assert_eq!(seen, [0.0, 0.0, 1.0]);
    }
}
