//! A thread's CPU time, for the budgets of work done on a host's request (a grammar's compile, a chat template's
//! render): on a machine whose cores the engine's own threads keep busy, wall-clock time says more about the load
//! than about the work (a 0.3 s compile took over 1 s of wall-clock beside a stream and another build), so the
//! budgets count the working thread's time on a CPU. Below every layer: `model` and `engine` both use it.
//!
//! Linux gives it in `/proc/<pid>/task/<tid>/schedstat` (nanoseconds on a CPU, the first field), readable from
//! any thread of the process; no system call or unsafe code is needed. Elsewhere, or where `/proc` is not
//! mounted, there is no clock and the budget falls back to wall-clock time.

use std::path::PathBuf;
use std::time::Duration;

/// One thread's CPU time since the clock was made.
#[derive(Debug)]
pub(crate) struct ThreadClock {
    schedstat: PathBuf,
    start: Duration,
}

impl ThreadClock {
    /// The calling thread's clock, or `None` where `/proc` does not tell it.
    pub fn current() -> Option<Self> {
        // `/proc/thread-self` links to `<pid>/task/<tid>`: the path stays this thread's when read from another.
        let task = std::fs::read_link("/proc/thread-self").ok()?;
        let schedstat = PathBuf::from("/proc").join(task).join("schedstat");
        let start = read(&schedstat)?;
        Some(ThreadClock { schedstat, start })
    }

    /// CPU time since the clock was made; `None` once the thread has ended (or `/proc` stops answering).
    pub fn elapsed(&self) -> Option<Duration> {
        read(&self.schedstat).map(|now| now.saturating_sub(self.start))
    }
}

fn read(schedstat: &PathBuf) -> Option<Duration> {
    let text = std::fs::read_to_string(schedstat).ok()?;
    text.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_computes_has_its_time_counted() {
        // Where /proc says nothing (not Linux), there is no clock, and nothing to check.
        let Some(clock) = ThreadClock::current() else { return };
        let before = clock.elapsed().unwrap();
        let mut x = 1u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        assert!(clock.elapsed().unwrap() > before, "{x}");
    }
}
