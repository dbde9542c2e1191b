//! Backpressure, and the request gauges: at most `max_waiting_requests` requests wait to start. A submit beyond
//! it is refused at once (`SubmitError::Overloaded`), with nothing queued, so the engine's inbox never grows
//! without bound and a host learns of the overload when it can still act on it (answer 503, try another replica).
//!
//! A request goes through three phases, once each and in order, some possibly skipped: waiting (from its submit
//! until its first choice is scheduled), running (until its last choice has ended), ended. The counts of waiting
//! and running requests are the gauges a load balancer reads (`ember_num_requests_waiting` and `_running`,
//! `docs/c_api.md`, "Prometheus metrics"): requests, not sequences, so a request with `n` choices counts once. A
//! request that ends before it starts (cancelled, past its deadline, failed) goes from waiting to ended, and one
//! dropped before it ends leaves its phase's count then.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// The requests waiting to start and running, and how many may wait.
#[derive(Debug)]
pub struct WaitingLimit {
    waiting: AtomicUsize,
    running: AtomicUsize,
    limit: usize,
}

impl WaitingLimit {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(WaitingLimit { waiting: AtomicUsize::new(0), running: AtomicUsize::new(0), limit })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Requests waiting to start now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Requests started and not ended now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Takes a place for a new request, waiting; `None` when every place is taken.
    pub fn enter(self: &Arc<Self>) -> Option<RequestPlace> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1))
            .ok()
            .map(|_| RequestPlace { counts: Arc::clone(self), phase: AtomicU8::new(WAITING) })
    }
}

const WAITING: u8 = 0;
const RUNNING: u8 = 1;
const ENDED: u8 = 2;

/// One request's phase, counted in its engine's gauges.
#[derive(Debug)]
pub struct RequestPlace {
    counts: Arc<WaitingLimit>,
    phase: AtomicU8,
}

impl RequestPlace {
    /// The request started (its first choice was scheduled): it waits no more, it runs. Only from waiting.
    pub fn start(&self) {
        if self.phase.compare_exchange(WAITING, RUNNING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            // Running first: a reader that sums the two never sees the request in neither.
            self.counts.running.fetch_add(1, Ordering::AcqRel);
            self.counts.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The request ended, from whichever phase it was in; later calls do nothing.
    pub fn end(&self) {
        match self.phase.swap(ENDED, Ordering::AcqRel) {
            WAITING => self.counts.waiting.fetch_sub(1, Ordering::AcqRel),
            RUNNING => self.counts.running.fetch_sub(1, Ordering::AcqRel),
            _ => 0,
        };
    }
}

impl Drop for RequestPlace {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_and_given_back_once() {
        let limit = WaitingLimit::new(2);
        let a = limit.enter().expect("a place");
        let b = limit.enter().expect("a place");
        assert!(limit.enter().is_none(), "full");
        a.end();
        a.end();
        assert_eq!(limit.waiting(), 1, "left once");
        let c = limit.enter().expect("a place again");
        drop(b);
        drop(a);
        assert_eq!(limit.waiting(), 1, "c still waits");
        drop(c);
        assert_eq!(limit.waiting(), 0);
    }

    #[test]
    fn a_request_counts_in_one_phase_at_a_time() {
        let counts = WaitingLimit::new(4);
        let (a, b) = (counts.enter().unwrap(), counts.enter().unwrap());
        assert_eq!((counts.waiting(), counts.running()), (2, 0));
        a.start();
        a.start();
        assert_eq!((counts.waiting(), counts.running()), (1, 1), "started once");
        b.end(); // ended before it started
        b.start(); // too late: nothing
        assert_eq!((counts.waiting(), counts.running()), (0, 1));
        let c = counts.enter().unwrap();
        c.start();
        drop(c); // dropped while running
        a.end();
        assert_eq!((counts.waiting(), counts.running()), (0, 0));
        drop(a);
        assert_eq!((counts.waiting(), counts.running()), (0, 0), "ended once");
    }

    #[test]
    fn concurrent_entries_never_exceed_the_limit() {
        let limit = WaitingLimit::new(10);
        let places: Vec<_> = std::thread::scope(|s| {
            let workers: Vec<_> =
                (0..8).map(|_| s.spawn(|| (0..5).filter_map(|_| limit.enter()).collect::<Vec<_>>())).collect();
            workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
        });
        assert_eq!((places.len(), limit.waiting()), (10, 10));
    }
}
