//! One waiting point for many requests: the requests of an engine that have events to take, in the order they
//! became ready, so that one host thread can serve every stream (libcurl's `curl_multi_poll`, gRPC's completion
//! queue, TensorRT-LLM's `awaitResponses`).
//!
//! A request joins by [`RequestHandle::watch`](super::RequestHandle::watch) with a key the host chooses
//! (the C API uses the request handle's value). From then on, whenever the engine queues an event for it and it
//! is not already in this queue, its key is appended: a key is in the queue at most once, however many events
//! wait behind it, and the events themselves stay in the request's own queue, where `RequestHandle::poll` takes
//! them. Whoever pops a key clears the request's mark first and then takes its events, so an event that arrives
//! meanwhile either is taken now or queues the key again (at worst a key is popped whose events are gone: the
//! taker finds none and goes on).
//!
//! The readiness descriptor is the read end of a pipe that holds one byte exactly while keys wait or a wakeup is
//! pending, so a host's epoll, poll, kqueue or io_uring loop sees it readable then and only then. A pipe rather
//! than Linux's `eventfd`: the same code on every Unix and no `unsafe` outside the kernels and the C ABI, for one
//! more descriptor per engine. The byte costs two system calls per batch of events, so it is kept only once a
//! host has asked for the descriptor: a host that blocks in [`ReadyQueue::wait`] (a thread, Go's dispatcher)
//! never pays them.

use std::collections::VecDeque;
use std::io::{self, PipeReader, PipeWriter, Read, Write};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The keys of the requests with events waiting, and the readiness descriptor.
pub struct ReadyQueue {
    state: Mutex<ReadyState>,
    changed: Condvar,
    reader: PipeReader,
    writer: PipeWriter,
}

struct ReadyState {
    keys: VecDeque<u64>,
    /// A wakeup not yet seen by a wait.
    woken: bool,
    /// Whether a host has asked for the descriptor ([`ReadyQueue::readiness_fd`]): from then on the pipe holds
    /// its byte while something waits.
    fd_in_use: bool,
    /// Whether the pipe holds its byte: kept equal to `fd_in_use && (!keys.is_empty() || woken)` after every
    /// change.
    signalled: bool,
}

/// What [`ReadyQueue::wait`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Ready {
    /// Keys of requests with events, oldest first (at most the number asked for).
    Keys(Vec<u64>),
    /// A wakeup ([`ReadyQueue::wakeup`]) came before any key.
    Woken,
    /// Nothing within the timeout.
    TimedOut,
}

impl ReadyQueue {
    /// An empty queue and its descriptor (a pipe: this fails only when the process is out of descriptors).
    pub fn new() -> io::Result<Self> {
        let (reader, writer) = io::pipe()?;
        let state = ReadyState { keys: VecDeque::new(), woken: false, fd_in_use: false, signalled: false };
        Ok(ReadyQueue { state: Mutex::new(state), changed: Condvar::new(), reader, writer })
    }

    fn lock(&self) -> MutexGuard<'_, ReadyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `key` (its request has a first event waiting since it was last taken).
    pub fn push(&self, key: u64) {
        self.insert(key, false);
    }

    /// Puts `key` back at the head: its request still has events that the last taker had no room for, and they
    /// come before any other request's that became ready later.
    pub fn push_front(&self, key: u64) {
        self.insert(key, true);
    }

    fn insert(&self, key: u64, at_front: bool) {
        let mut state = self.lock();
        match at_front {
            true => state.keys.push_front(key),
            false => state.keys.push_back(key),
        }
        self.sync_signal(&mut state);
        drop(state);
        self.changed.notify_one();
    }

    /// Makes the current or next [`wait`](Self::wait) return [`Ready::Woken`] at once (unless keys wait), and the
    /// descriptor readable until then: how a host stops a loop blocked on the queue.
    pub fn wakeup(&self) {
        let mut state = self.lock();
        state.woken = true;
        self.sync_signal(&mut state);
        drop(state);
        self.changed.notify_all();
    }

    /// Waits up to `timeout` (`None`: until something comes) for keys or a wakeup, and pops up to `max` keys.
    /// Keys come first: a wakeup is reported (and consumed) by a wait that finds no key.
    pub fn wait(&self, timeout: Option<Duration>, max: usize) -> Ready {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut state = self.lock();
        loop {
            if !state.keys.is_empty() && max > 0 {
                let n = max.min(state.keys.len());
                let keys = state.keys.drain(..n).collect();
                self.sync_signal(&mut state);
                return Ready::Keys(keys);
            }
            if state.woken {
                state.woken = false;
                self.sync_signal(&mut state);
                return Ready::Woken;
            }
            state = match deadline {
                None => self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ready::TimedOut;
                    }
                    self.changed.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }

    /// The descriptor that is readable while keys wait or a wakeup is pending (from this call on: what waits
    /// already counts). The host only polls it; reading or closing it is the queue's.
    #[cfg(unix)]
    pub fn readiness_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.use_descriptor();
        self.reader.as_raw_fd()
    }

    /// From now on the pipe holds its byte while something waits.
    fn use_descriptor(&self) {
        let mut state = self.lock();
        state.fd_in_use = true;
        self.sync_signal(&mut state);
    }

    /// Writes or reads the pipe's one byte so that it is there exactly when something waits. Under the state's
    /// lock, so the byte count is always 0 or 1: the write never blocks, and the read only runs when the byte is
    /// there.
    fn sync_signal(&self, state: &mut ReadyState) {
        let wanted = state.fd_in_use && (!state.keys.is_empty() || state.woken);
        if wanted == state.signalled {
            return;
        }
        // A pipe with room for one byte cannot fail to take it, nor fail to give back the byte it holds, short of
        // a closed end (ours, open as long as the queue): were it to, the descriptor's readiness would only be
        // stale, never the queue's contents, which the waits read under the lock.
        let moved = if wanted { (&self.writer).write(&[1]) } else { (&self.reader).read(&mut [0]) };
        if moved.is_ok_and(|n| n == 1) {
            state.signalled = wanted;
        }
    }

    /// Whether the descriptor holds its byte (tests: what a poll of the descriptor would say).
    #[cfg(test)]
    fn is_signalled(&self) -> bool {
        self.lock().signalled
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread;

    use super::*;

    const NOW: Option<Duration> = Some(Duration::ZERO);

    #[test]
    fn keys_come_out_in_order_in_batches_and_the_descriptor_follows() {
        let q = ReadyQueue::new().unwrap();
        q.push(5);
        assert!(!q.is_signalled(), "no descriptor asked for: no byte");
        assert_eq!(q.wait(NOW, 8), Ready::Keys(vec![5]));
        q.use_descriptor();
        assert_eq!(q.wait(NOW, 8), Ready::TimedOut);
        assert!(!q.is_signalled());
        for key in [3, 1, 2] {
            q.push(key);
        }
        assert!(q.is_signalled());
        assert_eq!(q.wait(NOW, 2), Ready::Keys(vec![3, 1]));
        assert!(q.is_signalled(), "a key still waits");
        q.push_front(9);
        assert_eq!(q.wait(None, 8), Ready::Keys(vec![9, 2]));
        assert!(!q.is_signalled());
        assert_eq!(q.wait(NOW, 8), Ready::TimedOut);
    }

    #[test]
    fn a_wakeup_ends_one_wait_after_the_keys() {
        let q = ReadyQueue::new().unwrap();
        q.use_descriptor();
        q.push(1);
        q.wakeup();
        assert_eq!(q.wait(NOW, 8), Ready::Keys(vec![1]));
        assert!(q.is_signalled(), "the wakeup is still pending");
        assert_eq!(q.wait(NOW, 8), Ready::Woken);
        assert!(!q.is_signalled());
        assert_eq!(q.wait(NOW, 8), Ready::TimedOut, "a wakeup is seen once");
    }

    #[test]
    fn a_blocked_wait_returns_for_a_key_or_a_wakeup() {
        let q = Arc::new(ReadyQueue::new().unwrap());
        let waiter = {
            let q = Arc::clone(&q);
            thread::spawn(move || (q.wait(None, 8), q.wait(None, 8)))
        };
        q.push(7);
        q.wakeup();
        let (first, second) = waiter.join().unwrap();
        // The key may be taken before or after the wakeup is posted; either way both come out, the key first.
        assert_eq!(first, Ready::Keys(vec![7]));
        assert_eq!(second, Ready::Woken);
    }

    #[cfg(unix)]
    #[test]
    fn the_descriptor_holds_its_byte_while_keys_wait() {
        use std::os::fd::AsRawFd;
        let q = ReadyQueue::new().unwrap();
        q.push(1);
        assert_eq!(q.readiness_fd(), q.reader.as_raw_fd());
        assert!(q.is_signalled(), "a key that waited before the descriptor was asked for counts");
        q.push(2);
        // What a host's poll sees: one byte to read. Read it through a duplicate, then put it back.
        let mut byte = [0u8; 1];
        assert_eq!(q.reader.try_clone().unwrap().read(&mut byte).unwrap(), 1);
        (&q.writer).write_all(&byte).unwrap();
        assert_eq!(q.wait(NOW, 8), Ready::Keys(vec![1, 2]));
        assert!(!q.is_signalled());
        q.wakeup();
        assert_eq!(q.reader.try_clone().unwrap().read(&mut byte).unwrap(), 1, "a wakeup makes it readable too");
    }
}
