//! A persistent thread pool for the forward pass: `run(n, f)` calls `f(0..n)` across the calling thread and the
//! workers and returns when all calls are done.
//!
//! Why not spawn per call or use a general-purpose pool: a decode step of our model has ~150 parallel regions of
//! a few microseconds each, so a dispatch must cost about a microsecond. Workers spin briefly on an epoch counter
//! after each job (the next region usually follows within microseconds), then park, so an idle engine uses no
//! CPU. Task `i` always runs in one call of `f(i)`; how tasks map to threads never changes what they compute.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker spins waiting for the next job before parking. A decode step's regions are microseconds
/// apart; the gap between steps (sampling, scheduling) is well under this.
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(300);

/// The job being run: a type-erased `&(dyn Fn(usize) + Sync)` valid until every task has finished.
#[derive(Clone, Copy)]
struct JobRef {
    f: *const (dyn Fn(usize) + Sync + 'static),
    n_tasks: usize,
    epoch: u64,
}

/// Task claims pack the job's epoch (high bits) with the next task index (low bits), so that a worker that
/// read an older job can never claim a task of a newer one: its claim fails on the epoch instead.
const TASK_BITS: u32 = 24;
const MAX_TASKS: usize = (1 << TASK_BITS) - 1;
const EPOCH_MASK: u64 = u64::MAX >> TASK_BITS;

// SAFETY: the pointee is `Sync`, and `run` keeps it alive until every worker has finished with it.
unsafe impl Send for JobRef {}

struct Shared {
    /// Bumped once per job; workers run a job when they see a new epoch.
    epoch: AtomicU64,
    job: Mutex<Option<JobRef>>,
    /// `epoch << TASK_BITS | next unclaimed task index` of the current job.
    claim: AtomicU64,
    /// Tasks of the current job not yet finished.
    pending: AtomicUsize,
    /// Workers that are parked (or about to park) and need a notification for a new job.
    sleepers: Mutex<usize>,
    wake: Condvar,
    shutdown: AtomicBool,
    /// Set when a task panicked; `run` re-raises it on the calling thread.
    panicked: AtomicBool,
}

/// A pool of `threads - 1` workers plus the thread that calls [`ThreadPool::run`].
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
}

impl ThreadPool {
    /// A pool that runs jobs on `threads` threads in total (at least 1: the caller alone).
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            claim: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
        });
        let mut workers = Vec::with_capacity(threads - 1);
        for i in 1..threads {
            let for_worker = Arc::clone(&shared);
            let spawned = std::thread::Builder::new().name(format!("ember-cpu-{i}")).spawn(move || worker(&for_worker));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    // Stop the workers already started before reporting.
                    drop(ThreadPool { shared, workers, threads: i });
                    return Err(e);
                }
            }
        }
        Ok(ThreadPool { shared, workers, threads })
    }

    /// Threads that run a job, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Calls `f(i)` for every `i` in `0..n_tasks`, spread over the pool, and returns when all have returned.
    /// A panic in any task is re-raised here after every task has finished.
    ///
    /// # Panics
    /// When `n_tasks` exceeds 2^24 - 1 (callers split work into one task per thread or a few per thread).
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        assert!(n_tasks <= MAX_TASKS, "too many tasks for one job: {n_tasks}");
        if n_tasks == 0 {
            return;
        }
        if self.workers.is_empty() || n_tasks == 1 {
            (0..n_tasks).for_each(f);
            return;
        }
        // SAFETY: only the lifetime is erased. `f` outlives this call, and this call returns only once `pending`
        // is zero, i.e. after every claimed task has returned. A task can be claimed only while the claim word
        // carries this job's epoch, and every claim is counted in `pending`, so no thread calls `f` afterwards.
        let erased: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
        let shared = &*self.shared;
        let epoch = (shared.epoch.load(Ordering::Relaxed) + 1) & EPOCH_MASK;
        {
            let mut job = shared.job.lock().unwrap_or_else(|p| p.into_inner());
            shared.pending.store(n_tasks, Ordering::Relaxed);
            shared.claim.store(epoch << TASK_BITS, Ordering::Release);
            *job = Some(JobRef { f: erased, n_tasks, epoch });
        }
        shared.epoch.store(epoch, Ordering::Release);
        if *shared.sleepers.lock().unwrap_or_else(|p| p.into_inner()) > 0 {
            shared.wake.notify_all();
        }
        run_tasks(shared, f, n_tasks, epoch);
        let mut spins = 0u32;
        while shared.pending.load(Ordering::Acquire) != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        if shared.panicked.swap(false, Ordering::AcqRel) {
            panic!("a thread-pool task panicked");
        }
    }
}

/// Claims a task of the job of `epoch`, or `None` when that job has no task left or is no longer current.
fn claim(shared: &Shared, n_tasks: usize, epoch: u64) -> Option<usize> {
    let mut c = shared.claim.load(Ordering::Acquire);
    loop {
        let index = (c & MAX_TASKS as u64) as usize;
        if c >> TASK_BITS != epoch || index >= n_tasks {
            return None;
        }
        match shared.claim.compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(index),
            Err(now) => c = now,
        }
    }
}

/// Claims and runs tasks of the job of `epoch` until none is left.
fn run_tasks(shared: &Shared, f: &(dyn Fn(usize) + Sync), n_tasks: usize, epoch: u64) {
    while let Some(i) = claim(shared, n_tasks, epoch) {
        run_claimed(shared, f, i);
    }
}

/// Runs claimed task `i` and counts it as finished (a panic is recorded for `run` to re-raise).
fn run_claimed(shared: &Shared, f: &(dyn Fn(usize) + Sync), i: usize) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))).is_err() {
        shared.panicked.store(true, Ordering::Release);
    }
    shared.pending.fetch_sub(1, Ordering::AcqRel);
}

fn worker(shared: &Shared) {
    let mut seen = 0u64;
    loop {
        // Spin for the next epoch, then park until notified.
        let mut spin_start = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            let e = shared.epoch.load(Ordering::Acquire);
            if e != seen {
                break e;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(256) || spin_start.elapsed() < SPIN_BEFORE_PARK {
                std::hint::spin_loop();
                continue;
            }
            let mut sleepers = shared.sleepers.lock().unwrap_or_else(|p| p.into_inner());
            *sleepers += 1;
            // Re-check under the lock: `run` bumps the epoch before taking this lock to notify.
            while shared.epoch.load(Ordering::Acquire) == seen && !shared.shutdown.load(Ordering::Acquire) {
                sleepers = shared.wake.wait(sleepers).unwrap_or_else(|p| p.into_inner());
            }
            *sleepers -= 1;
            spin_start = Instant::now();
        };
        seen = epoch;
        let job = *shared.job.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(job) = job {
            // The job may already be finished (and its closure gone) if this worker was slow: then every claim
            // for its epoch fails and `f` is never called. Otherwise `run` keeps the closure alive until the
            // tasks claimed here have finished.
            run_job(shared, job);
        }
    }
}

fn run_job(shared: &Shared, job: JobRef) {
    let Some(first) = claim(shared, job.n_tasks, job.epoch) else { return };
    // SAFETY: a task of this job's epoch was claimed and is not yet counted as finished, so `run` is still
    // waiting and the closure it lent is alive (see `run`).
    let f = unsafe { &*job.f };
    run_claimed(shared, f, first);
    run_tasks(shared, f, job.n_tasks, job.epoch);
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _sleepers = self.shared.sleepers.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_exactly_once() {
        for threads in [1, 2, 3, 8] {
            let pool = ThreadPool::new(threads).unwrap();
            for n in [0, 1, 2, 7, 100] {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                pool.run(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "threads {threads}, n {n}");
            }
        }
    }

    #[test]
    fn many_small_jobs_in_a_row_complete() {
        let pool = ThreadPool::new(2).unwrap();
        let total = AtomicUsize::new(0);
        for _ in 0..10_000 {
            pool.run(2, &|i| {
                total.fetch_add(i + 1, Ordering::Relaxed);
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 30_000);
    }

    #[test]
    fn a_panicking_task_is_reraised_and_the_pool_survives() {
        let pool = ThreadPool::new(2).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(4, &|i| {
                if i == 3 {
                    panic!("task 3 fails");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(4, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn workers_wake_up_after_parking() {
        let pool = ThreadPool::new(3).unwrap();
        std::thread::sleep(SPIN_BEFORE_PARK * 4); // let the workers park: this tests the wake-up path
        let seen = Mutex::new(std::collections::HashSet::new());
        pool.run(64, &|_| {
            seen.lock().unwrap().insert(std::thread::current().id());
        });
        assert!(!seen.lock().unwrap().is_empty());
    }
}
