//! The engine thread: takes submitted requests, runs steps and sleeps when there is nothing to do. A step is a
//! pipeline of typed stages (docs/architecture.md has the diagram):
//! `Scheduler::schedule → SchedulerOutput → StepRunner::execute → RunnerOutput → Scheduler::update_from_output →
//! output stage (text, stop strings) → retire finished sequences`.
//!
//! Like vLLM's engine core, this loop only records timestamped events; intervals are computed from them by
//! `metrics.rs`. A token's timestamp is taken right after it was sampled, on the host.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::scheduler::{Scheduler, SchedulerLimits};
use super::step_runner::StepRunner;
use crate::engine::guided::MaskTimes;
use crate::engine::kv::kv_pools::KvPools;
use crate::engine::observe::stats::EngineClock;
use crate::engine::observe::telemetry::Telemetry;
use crate::engine::output::finish::FinishReason;
use crate::engine::output::CancelWaker;
use crate::engine::sequence::{SeqId, Sequence};
use crate::model::tokenizer::Tokenizer;

/// A request accepted by `submit`, on its way to the engine thread.
pub struct NewRequest {
    /// One sequence per choice, not yet numbered.
    pub sequences: Vec<Sequence>,
}

/// What the host side hands the engine thread.
#[derive(Default)]
pub struct Inbox {
    pub new: Vec<NewRequest>,
    /// Set by a cancellation: the thread checks every sequence's request.
    pub cancel_pending: bool,
    pub shutdown: bool,
}

/// The engine's mailbox and its counters, shared by the host side and the thread.
#[derive(Default)]
pub struct EngineShared {
    pub inbox: Mutex<Inbox>,
    pub wake: Condvar,
    /// Sequences admitted and not finished (running).
    pub running: AtomicUsize,
    /// Sequences waiting for admission (new or preempted).
    pub waiting: AtomicUsize,
    pub free_blocks: AtomicUsize,
    /// Free blocks of the sliding-window layers' pool (0 without one).
    pub free_window_blocks: AtomicUsize,
    /// Forward steps run since start.
    pub steps: AtomicUsize,
    /// Sequences preempted since start (their blocks taken back, to be recomputed).
    pub preemptions: AtomicU64,
    /// Prefix cache: prompt tokens looked up at admission, and those found cached, since start.
    pub prefix_cache_queries: AtomicU64,
    pub prefix_cache_hits: AtomicU64,
    /// Blocks findable in the prefix cache now (held by sequences or free).
    pub prefix_cache_blocks: AtomicUsize,
    /// Speculative decoding: draft tokens verified since start, and those accepted.
    pub draft_tokens: AtomicU64,
    pub accepted_draft_tokens: AtomicU64,
    /// Aggregates of the per-request metrics, recorded as choices end (`telemetry.rs`).
    pub telemetry: Mutex<Telemetry>,
    /// Structured outputs: mask times per token, and the steps' waits for them.
    pub mask_times: Arc<MaskTimes>,
}

impl CancelWaker for EngineShared {
    fn wake(&self) {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner()).cancel_pending = true;
        self.wake.notify_all();
    }
}

/// Everything the engine thread owns.
pub struct EngineCore<'m> {
    pub shared: Arc<EngineShared>,
    scheduler: Scheduler,
    runner: StepRunner<'m>,
    tokenizer: &'m Tokenizer,
    clock: EngineClock,
    next_seq: SeqId,
}

impl<'m> EngineCore<'m> {
    /// A core whose sequences take blocks from `blocks` and may have up to `context` positions each.
    pub fn new(
        shared: Arc<EngineShared>,
        runner: StepRunner<'m>,
        tokenizer: &'m Tokenizer,
        clock: EngineClock,
        limits: SchedulerLimits,
        blocks: KvPools,
        context: usize,
    ) -> Self {
        let scheduler = Scheduler::new(limits, blocks, context);
        EngineCore { shared, scheduler, runner, tokenizer, clock, next_seq: 0 }
    }

    /// Runs until shutdown; then every unfinished request ends as cancelled. A panic (a bug) fails every request
    /// the engine holds and stops the engine, so no host waits forever on a request that will never finish.
    pub fn run(mut self) {
        loop {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.iteration())) {
                Ok(true) => {}
                Ok(false) => return,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    self.abort(&format!("internal error: the engine thread panicked: {what}"));
                    return;
                }
            }
        }
    }

    /// One turn of the loop: take what the host sent (sleeping while there is nothing to do), handle
    /// cancellations, run a step. False once the engine has shut down.
    fn iteration(&mut self) -> bool {
        let (new, check_cancels, shutdown) = {
            let mut inbox = self.shared.inbox.lock().unwrap_or_else(|e| e.into_inner());
            while inbox.new.is_empty() && !inbox.cancel_pending && !inbox.shutdown && self.scheduler.is_idle() {
                inbox = self.shared.wake.wait(inbox).unwrap_or_else(|e| e.into_inner());
            }
            let cancels = std::mem::take(&mut inbox.cancel_pending);
            (std::mem::take(&mut inbox.new), cancels, inbox.shutdown)
        };
        for request in new {
            for seq in request.sequences {
                self.scheduler.add(seq.numbered(self.next_seq));
                self.next_seq += 1;
            }
        }
        if shutdown || check_cancels {
            let cancelled: Vec<SeqId> =
                self.scheduler.sequences().filter(|s| shutdown || s.request().is_cancelled()).map(|s| s.id()).collect();
            for id in cancelled {
                self.scheduler.finish(id, FinishReason::Cancelled);
            }
            self.retire_finished();
        }
        if shutdown {
            self.publish();
            return false;
        }
        self.scheduler.finish_past_deadline(self.clock.now());
        self.retire_finished();
        if !self.scheduler.is_idle() {
            self.step();
        }
        self.publish();
        true
    }

    /// One step, as a pipeline: the scheduler plans, the runner computes and samples, the scheduler applies what
    /// was sampled, the output stage turns tokens into text, and finished sequences are retired.
    fn step(&mut self) {
        let step_start = self.clock.now();
        let plan = self.scheduler.schedule(step_start);
        if !plan.failed.is_empty() {
            let message = "internal error: the sliding-window KV pool ran out of blocks";
            self.fail_requests(&plan.failed, message);
        }
        // Counters before any of the step's tokens reach a host: one that has seen a request's token also sees
        // it running and its blocks taken.
        self.publish();
        if plan.chunks.is_empty() {
            // Nothing fits (cannot happen with validated requests: each fits an empty cache alone).
            return;
        }
        let forward_start = self.clock.now();
        let ran = self.runner.execute(&plan, self.scheduler.sequences_mut(), &self.clock);
        self.scheduler.observe_step(&plan, self.clock.now() - forward_start);
        self.shared.steps.fetch_add(1, Ordering::Relaxed);
        match ran {
            Ok(ran) => {
                let updated = self.scheduler.update_from_output(&plan, ran, &self.clock, step_start);
                self.emit_outputs(&updated);
            }
            Err(e) => {
                let ids: Vec<SeqId> = plan.chunks.iter().map(|c| c.seq).collect();
                self.fail_requests(&ids, &format!("forward pass failed: {e}"));
            }
        }
        self.retire_finished();
    }

    /// The output stage: detokenizes each updated sequence's new tokens and matches its stop strings; a
    /// verified draft's further tokens are appended and matched one at a time, so that a stop inside the run ends
    /// the sequence exactly where plain decoding would have.
    fn emit_outputs(&mut self, updated: &[SeqId]) {
        let context = self.scheduler.context();
        for &id in updated {
            loop {
                let seq = self.scheduler.sequences_mut().get_mut(&id).expect("updated sequences exist");
                if let Some(reason) = seq.emit_text(self.tokenizer) {
                    seq.draft.drop_accepted();
                    self.scheduler.finish(id, reason);
                    break;
                }
                if seq.finish_reason().is_some() {
                    break;
                }
                match seq.append_accepted(context) {
                    None => break,
                    Some(None) => {}
                    // Its text is released by the next emit_text, which sees the sequence ended.
                    Some(Some(reason)) => self.scheduler.finish(id, reason),
                }
            }
        }
    }

    /// Fails the requests of sequences `ids`, each once with `message`: every choice of such a request ends,
    /// those not in the failed step too (those already finished keep their reason).
    fn fail_requests(&mut self, ids: &[SeqId], message: &str) {
        let mut failed: Vec<u64> = Vec::new();
        for &id in ids {
            let Some(seq) = self.scheduler.sequence(id) else { continue };
            let request = seq.request().id();
            if !failed.contains(&request) {
                failed.push(request);
                seq.request().fail(message.to_owned());
            }
        }
        for request in failed {
            self.scheduler.finish_request(request, FinishReason::Error);
        }
    }

    /// Releases finished sequences and tells their requests, counters first: a host that sees a request finish
    /// also sees its blocks free.
    fn retire_finished(&mut self) {
        let done = self.scheduler.take_finished();
        if done.is_empty() {
            return;
        }
        self.publish();
        // Held while the choices end, so that a host that has seen a choice end also sees it counted.
        let mut telemetry = self.shared.telemetry.lock().unwrap_or_else(|e| e.into_inner());
        for mut seq in done {
            let reason = seq.finish_reason().expect("finished sequences have a reason");
            // Ended from outside the output stage: release what the detokenizer and stop matcher held back.
            if matches!(reason, FinishReason::Cancelled | FinishReason::Deadline) {
                seq.release_rest();
            }
            seq.request().finish_choice(seq.choice(), reason);
            let prompt = if seq.bills_prompt() { seq.prompt_len() } else { 0 };
            telemetry.record_finished(reason, seq.num_generated(), prompt);
            seq.request().with_stats(seq.choice(), |s| telemetry.observe(s));
        }
    }

    /// After a panic: refuse new work, and fail every request held or still in the inbox.
    fn abort(&mut self, message: &str) {
        let pending = {
            let mut inbox = self.shared.inbox.lock().unwrap_or_else(|e| e.into_inner());
            inbox.shutdown = true;
            std::mem::take(&mut inbox.new)
        };
        for seq in pending.into_iter().flat_map(|r| r.sequences).chain(self.scheduler.drain()) {
            seq.request().fail(message.to_owned());
        }
        self.publish();
    }

    /// Publishes the counters before the first request arrives.
    pub fn publish_initial(&self) {
        self.publish();
    }

    fn publish(&self) {
        self.shared.running.store(self.scheduler.num_running(), Ordering::Relaxed);
        self.shared.waiting.store(self.scheduler.num_waiting(), Ordering::Relaxed);
        let blocks = self.scheduler.blocks();
        self.shared.free_blocks.store(blocks.global.num_free(), Ordering::Relaxed);
        self.shared.free_window_blocks.store(blocks.window_free(), Ordering::Relaxed);
        let counters = self.scheduler.counters();
        self.shared.preemptions.store(counters.preemptions, Ordering::Relaxed);
        self.shared.prefix_cache_queries.store(counters.prefix_cache.queries, Ordering::Relaxed);
        self.shared.prefix_cache_hits.store(counters.prefix_cache.hits, Ordering::Relaxed);
        self.shared.prefix_cache_blocks.store(blocks.global.num_cached(), Ordering::Relaxed);
        self.shared.draft_tokens.store(counters.draft_tokens, Ordering::Relaxed);
        self.shared.accepted_draft_tokens.store(counters.accepted_draft_tokens, Ordering::Relaxed);
    }
}

#[cfg(test)]
impl EngineCore<'_> {
    /// Runs the loop on this thread until every request submitted so far has finished (tests drive the engine
    /// without its thread; at least one request must be in the inbox, or this waits for one).
    pub(super) fn run_until_idle(&mut self) {
        while self.iteration() && !self.scheduler.is_idle() {}
    }

    pub(super) fn blocks(&self) -> &KvPools {
        self.scheduler.blocks()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::engine::api::seq_options::SharedOptions;
    use crate::engine::kv::kv_prefix::PrefixCachingAllocator;
    use crate::engine::output::{EventPoll, RequestEvent, RequestHandle, RequestShared};
    use crate::engine::sampling::{Sampler, SamplingParams};
    use crate::engine::step::runner::BatchForward;
    use crate::engine::step::step_budget::StepBudget;
    use crate::engine::step::StepError;
    use crate::model::llama::batch::BatchError;
    use crate::model::llama::SeqChunk;
    use crate::model::tokenizer::{Tokenizer, TokenizerSpec};

    /// A backend with a bug: it panics on the first step.
    struct PanickingForward;

    impl BatchForward for PanickingForward {
        fn run(&mut self, _: &[SeqChunk<'_>], _: &mut [f32]) -> Result<(), StepError> {
            panic!("kernel bug");
        }
        fn describe(&self) -> String {
            "panicking".into()
        }
        fn max_batch_tokens(&self) -> usize {
            16
        }
    }

    /// A backend whose every step fails, counting the steps it was given.
    struct FailingForward(Arc<AtomicUsize>);

    impl BatchForward for FailingForward {
        fn run(&mut self, _: &[SeqChunk<'_>], _: &mut [f32]) -> Result<(), StepError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Err(StepError::Batch(BatchError::Empty))
        }
        fn describe(&self) -> String {
            "failing".into()
        }
        fn max_batch_tokens(&self) -> usize {
            16
        }
    }

    fn tokenizer() -> Tokenizer {
        let tokens: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        Tokenizer::from_spec(&TokenizerSpec::new(&tokens, &[], "smollm")).unwrap()
    }

    /// A request of `n` choices of the prompt `[0, 1]`, with stats, put in `shared`'s inbox.
    fn submit(shared: &Arc<EngineShared>, clock: EngineClock, id: u64, n: usize) -> RequestHandle {
        let waker: std::sync::Weak<dyn CancelWaker> = Arc::downgrade(shared) as _;
        let r = RequestShared::new(id, n, 2, false, clock, Some(Default::default()), waker);
        let sequences = (0..n)
            .map(|choice| {
                let sampler = Sampler::new(SamplingParams::default(), &[0, 1], 0);
                Sequence::new(0, Arc::clone(&r), choice, &[0, 1], 4, SharedOptions::stopping_at(&[]), sampler)
            })
            .collect();
        shared.inbox.lock().unwrap().new.push(NewRequest { sequences });
        RequestHandle::new(r)
    }

    fn core<'m>(
        shared: &Arc<EngineShared>,
        clock: EngineClock,
        forward: Box<dyn BatchForward + 'm>,
        tokenizer: &'m Tokenizer,
        max_num_seqs: usize,
    ) -> EngineCore<'m> {
        let limits = SchedulerLimits {
            max_num_seqs,
            max_num_batched_tokens: 16,
            speculative: None,
            step_budget: StepBudget::Throughput,
        };
        let blocks = KvPools::new(PrefixCachingAllocator::new(4, 16, 0, true), None);
        EngineCore::new(Arc::clone(shared), StepRunner::new(forward, 3), tokenizer, clock, limits, blocks, 64)
    }

    /// Every event of a request that has ended, up to the end of its stream.
    fn events(h: &RequestHandle) -> Vec<RequestEvent> {
        let mut all = Vec::new();
        loop {
            match h.poll(Some(std::time::Duration::ZERO)) {
                EventPoll::Event(e) => all.push(e),
                EventPoll::Done => return all,
                EventPoll::TimedOut => panic!("the request has not ended: {all:?}"),
            }
        }
    }

    #[test]
    fn a_panic_in_a_step_fails_every_request_and_stops_the_engine() {
        let tokenizer = tokenizer();
        let shared = Arc::new(EngineShared::default());
        let clock = EngineClock::new();
        let first = submit(&shared, clock, 1, 1);
        let second = submit(&shared, clock, 2, 1);
        core(&shared, clock, Box::new(PanickingForward), &tokenizer, 4).run(); // returns instead of unwinding
        for h in [first, second] {
            match h.poll(None) {
                EventPoll::Event(RequestEvent::Error { message }) => {
                    assert!(message.contains("kernel bug"), "{message}")
                }
                other => panic!("expected an error event, got {other:?}"),
            }
        }
        assert!(shared.inbox.lock().unwrap().shutdown, "new submissions are refused");
    }

    #[test]
    fn a_failed_step_fails_each_request_once_with_every_choice_ended() {
        let tokenizer = tokenizer();
        let clock = EngineClock::new();
        // Both choices in the failing step (4 sequences fit), or only the first (1 fits: the sibling waits).
        for max_num_seqs in [4, 1] {
            let shared = Arc::new(EngineShared::default());
            let steps = Arc::new(AtomicUsize::new(0));
            let h = submit(&shared, clock, 1, 2);
            let mut core = core(&shared, clock, Box::new(FailingForward(Arc::clone(&steps))), &tokenizer, max_num_seqs);
            core.run_until_idle();
            let events = events(&h);
            assert_eq!(events.len(), 1, "one event, the error: {events:?}");
            assert!(matches!(&events[0], RequestEvent::Error { message } if message.contains("forward pass failed")));
            let reasons: Vec<_> = h.choices().iter().map(|c| c.finish_reason).collect();
            assert_eq!(reasons, [Some(FinishReason::Error); 2], "max_num_seqs {max_num_seqs}");
            assert_eq!(steps.load(Ordering::Relaxed), 1, "the waiting sibling never ran");
            for choice in 0..2 {
                assert!(h.stats(choice).unwrap().finished_ts.is_some());
            }
            assert_eq!(core.blocks().global.num_free(), 4, "every block is free again");
            assert_eq!((shared.running.load(Ordering::Relaxed), shared.waiting.load(Ordering::Relaxed)), (0, 0));
        }
    }

    #[test]
    fn a_request_ends_once_and_a_choice_keeps_its_first_end() {
        let shared = Arc::new(EngineShared::default());
        let clock = EngineClock::new();
        let waker: std::sync::Weak<dyn CancelWaker> = Arc::downgrade(&shared) as _;
        let r = RequestShared::new(1, 2, 2, false, clock, Some(Default::default()), waker);
        let h = RequestHandle::new(Arc::clone(&r));
        r.finish_choice(1, FinishReason::Stop);
        r.fail("first".into());
        let failed_at = h.stats(0).unwrap().finished_ts.expect("the failure ended choice 0");
        let stopped_at = h.stats(1).unwrap().finished_ts.expect("choice 1 stopped");
        // A late finish of a failed choice, and a second failure, change nothing.
        r.finish_choice(0, FinishReason::Length);
        r.fail("second".into());
        assert_eq!(h.stats(0).unwrap().finished_ts, Some(failed_at));
        assert_eq!(h.stats(1).unwrap().finished_ts, Some(stopped_at));
        let reasons: Vec<_> = h.choices().iter().map(|c| c.finish_reason).collect();
        assert_eq!(reasons, [Some(FinishReason::Error), Some(FinishReason::Stop)]);
        let events = events(&h);
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0], RequestEvent::Finished { choice: 1, reason: FinishReason::Stop });
        assert_eq!(events[1], RequestEvent::Error { message: "first".into() });
    }
}
