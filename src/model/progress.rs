//! Progress of loading a model, for a host's progress bar (`engine_new_with_progress`, like llama.cpp's
//! `progress_callback`): the fraction of the work done as it advances, and the host's answer whether to go on.
//! A model that is downloaded first (a hub name not in the cache, `crate::hub`) reports its download in the first
//! half of the range ([`DOWNLOAD_SHARE`]) and its load in the second.

/// The host's function: receives the fraction loaded (0 to 1, never decreasing, 1 exactly once, last) and
/// returns `false` to cancel the load.
pub type ProgressFn<'a> = dyn FnMut(f32) -> bool + 'a;

/// The part of the range a download takes, before the load.
pub const DOWNLOAD_SHARE: f64 = 0.5;

/// Counts the work of a load in bytes against a total fixed in advance, and reports each advance as a fraction.
pub struct LoadProgress<'a> {
    report: Option<&'a mut ProgressFn<'a>>,
    total: u64,
    done: u64,
    cancelled: bool,
    finished: bool,
    /// The range the current phase reports in: `[base, base + span]` (the download's, then the load's).
    base: f64,
    span: f64,
}

impl<'a> LoadProgress<'a> {
    /// Reports to `report`, if any.
    pub fn new(report: Option<&'a mut ProgressFn<'a>>) -> Self {
        LoadProgress { report, total: 0, done: 0, cancelled: false, finished: false, base: 0.0, span: 1.0 }
    }

    /// A load nobody watches: it cannot be cancelled.
    pub fn silent() -> Self {
        Self::new(None)
    }

    /// Sets the load's total work, and reports 0 (after a download, [`DOWNLOAD_SHARE`]): the load has begun.
    /// `false` when the host cancels.
    pub fn begin(&mut self, total_bytes: u64) -> bool {
        self.total = total_bytes;
        self.done = 0;
        self.send(self.base as f32)
    }

    /// A download of `total_bytes` comes before the load: it reports in `[0, DOWNLOAD_SHARE)`, through
    /// [`LoadProgress::advance`], until [`LoadProgress::end_download`]. Nothing to download (0) leaves the whole range to
    /// the load. `false` when the host cancels.
    pub fn begin_download(&mut self, total_bytes: u64) -> bool {
        if total_bytes == 0 {
            return !self.cancelled;
        }
        (self.base, self.span) = (0.0, DOWNLOAD_SHARE);
        self.begin(total_bytes)
    }

    /// The download is over: the load reports in the rest of the range.
    pub fn end_download(&mut self) {
        if self.span < 1.0 {
            (self.base, self.span) = (self.base + self.span, 1.0 - self.base - self.span);
            self.done = 0;
        }
    }

    /// Adds `bytes` of work done (never beyond the total, and never to 1: only `finish` reports 1). `false` once
    /// the host has cancelled.
    pub fn advance(&mut self, bytes: u64) -> bool {
        self.done = self.done.saturating_add(bytes).min(self.total);
        // A fraction just below 1 until the end, so that 1 always means "loaded".
        let fraction = if self.total == 0 { 0.0 } else { self.done as f64 / self.total as f64 };
        self.send(((self.base + self.span * fraction) as f32).min(0.999))
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
    fn a_download_takes_the_first_half_and_the_load_the_second() {
        let mut seen = Vec::new();
        let mut report = |f: f32| {
            seen.push(f);
            true
        };
        let mut progress = LoadProgress::new(Some(&mut report));
        assert!(progress.begin_download(200));
        assert!(progress.advance(100));
        assert!(progress.advance(100));
        progress.end_download();
        assert!(progress.begin(10));
        assert!(progress.advance(5));
        assert!(progress.finish());
        assert_eq!(seen, [0.0, 0.25, 0.5, 0.5, 0.75, 1.0]);
        let mut nothing_to_fetch = LoadProgress::silent();
        assert!(nothing_to_fetch.begin_download(0));
        nothing_to_fetch.end_download();
        assert_eq!((nothing_to_fetch.base, nothing_to_fetch.span), (0.0, 1.0));
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
