//! Backpressure: at most `max_waiting_requests` requests wait to start. A submit beyond it is refused at once
//! (`SubmitError::Overloaded`), with nothing queued, so the engine's inbox never grows without bound and a host
//! learns of the overload when it can still act on it (answer 503, try another replica).
//!
//! A request holds a place from its submit until it starts (its first choice is scheduled) or ends before
//! starting (cancelled, past its deadline, failed); a place is given back exactly once, whichever comes first,
//! and when the request is dropped at the latest.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The requests waiting to start, and how many may.
#[derive(Debug)]
pub struct WaitingLimit {
    waiting: AtomicUsize,
    limit: usize,
}

impl WaitingLimit {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(WaitingLimit { waiting: AtomicUsize::new(0), limit })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Requests waiting to start now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Takes a place for a new request; `None` when every place is taken.
    pub fn enter(self: &Arc<Self>) -> Option<WaitingPlace> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1))
            .ok()
            .map(|_| WaitingPlace { limit: Arc::clone(self), held: AtomicBool::new(true) })
    }
}

/// One request's place among those waiting to start.
#[derive(Debug)]
pub struct WaitingPlace {
    limit: Arc<WaitingLimit>,
    held: AtomicBool,
}

impl WaitingPlace {
    /// Gives the place back (the request started, or ended first); later calls do nothing.
    pub fn leave(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            self.limit.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for WaitingPlace {
    fn drop(&mut self) {
        self.leave();
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
        a.leave();
        a.leave();
        assert_eq!(limit.waiting(), 1, "left once");
        let c = limit.enter().expect("a place again");
        drop(b);
        drop(a);
        assert_eq!(limit.waiting(), 1, "c still waits");
        drop(c);
        assert_eq!(limit.waiting(), 0);
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
