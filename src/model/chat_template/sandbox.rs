//! Where a chat template runs: a stack of known size, and the render's budget.
//!
//! A render must not run on whatever stack the host's thread has (a Go or musl thread may have a few hundred
//! KiB): minijinja recurses once per nesting level of a value it prints, compares or frees. The render switches to
//! a stack of [`STACK_BYTES`] on the calling thread (the `stacker` crate maps it, with a guard page, for the call),
//! on which the depth that `TemplateLimits` allows (values at most `max_depth` deep, one expression adding at most
//! two levels per node, `max_call_depth` nested macro calls) fits many times over; only the pages a render touches
//! are committed, and the mapping is gone when the call returns. (A thread per render did the same at about 85 µs
//! a render; the switch costs a mapping.)
//!
//! The budget is kept in a thread-local for the call, which the hooks ember adds to the template environment (the
//! value checks, `tojson`, the filters and Python methods, `strftime_now`) and the output writer read: the time
//! limit, the output cap, and which limit was reached (so the error can name it even where minijinja wraps the
//! message). Time is the render's CPU time (`src/cpu_clock.rs`; wall-clock where Linux does not tell it): on two
//! busy cores a render's wall-clock time measures the load, and a template must not fail for its host's load.
//! Each check reads only the wall clock until that passes the limit (the CPU time cannot have passed it before);
//! then the CPU time decides, and the next look is when the rest of the limit could be spent.

use std::cell::{Cell, RefCell};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use minijinja::{Error, ErrorKind};

use super::limits::Limit;
use crate::cpu_clock::ThreadClock;

/// The render's stack: far above what the limits let a template use, reserved, touched only as needed.
pub const STACK_BYTES: usize = 64 << 20;

/// One render's budget.
struct Budget {
    /// The render's CPU-time limit, and its clock (`None`: wall-clock time counts).
    limit: Duration,
    clock: Option<ThreadClock>,
    /// Before this instant the limit cannot have been reached.
    next_look: Cell<Instant>,
    max_output: usize,
    reached: Cell<Option<Limit>>,
}

impl Budget {
    /// Whether the render has spent its time.
    fn spent(&self) -> bool {
        let now = Instant::now();
        if now < self.next_look.get() {
            return false;
        }
        let used = self.clock.as_ref().and_then(ThreadClock::elapsed);
        match used {
            Some(used) if used < self.limit => {
                self.next_look.set(now + (self.limit - used));
                false
            }
            _ => true,
        }
    }
}

thread_local! {
    static BUDGET: RefCell<Option<Budget>> = const { RefCell::new(None) };
}

/// Clears this thread's budget when the call ends, however it ends.
struct ClearBudget;

impl Drop for ClearBudget {
    fn drop(&mut self) {
        BUDGET.with(|b| *b.borrow_mut() = None);
    }
}

/// Runs `work` on a stack of its own with `time` and `max_output` as its budget; returns its result and the
/// limit it reached, if any. `Err` when it panicked (no panic of minijinja or a hook is known; one must end this
/// render, not the host).
pub fn run<T>(time: Duration, max_output: usize, work: impl FnOnce() -> T) -> Result<(T, Option<Limit>), String> {
    let clock = ThreadClock::current();
    let next_look = Cell::new(Instant::now() + time);
    let budget = Budget { limit: time, clock, next_look, max_output, reached: Cell::new(None) };
    BUDGET.with(|b| *b.borrow_mut() = Some(budget));
    let _clear = ClearBudget;
    let result = stacker::grow(STACK_BYTES, || catch_unwind(AssertUnwindSafe(work)));
    let reached = BUDGET.with(|b| b.borrow().as_ref().and_then(|b| b.reached.get()));
    result.map(|r| (r, reached)).map_err(|_| "the chat template's render panicked".to_owned())
}

/// Records that `limit` was reached and returns the error that ends the render (minijinja passes it up).
pub fn reached(limit: Limit, detail: impl Into<String>) -> Error {
    BUDGET.with(|b| {
        if let Some(b) = b.borrow().as_ref() {
            b.reached.set(Some(limit));
        }
    });
    Error::new(ErrorKind::InvalidOperation, detail.into())
}

/// Fails once the render's time is up. Called by every hook; outside a render (a test calling a hook directly)
/// there is no deadline.
pub fn check_time() -> Result<(), Error> {
    let late = BUDGET.with(|b| b.borrow().as_ref().is_some_and(Budget::spent));
    match late {
        true => Err(reached(Limit::Time, "the render ran out of time")),
        false => Ok(()),
    }
}

/// The render's output: bytes up to the cap, with the clock checked at every write.
pub struct Output {
    pub bytes: Vec<u8>,
}

impl io::Write for Output {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let max = BUDGET.with(|b| b.borrow().as_ref().map_or(usize::MAX, |b| b.max_output));
        if self.bytes.len().saturating_add(data.len()) > max {
            reached(Limit::Output, "the prompt grew past its limit");
            return Err(io::Error::other("output limit"));
        }
        if check_time().is_err() {
            return Err(io::Error::other("time limit"));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
