//! The engine thread: takes submitted requests, runs steps (schedule → one batched forward → sample → report),
//! and sleeps when there is nothing to do.
//!
//! Like vLLM's engine core, this loop only records timestamped events; intervals are computed from them by
//! `metrics.rs`. A token's timestamp is taken right after it was sampled, on the host.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rustc_hash::FxHashMap;

use super::finish::FinishReason;
use super::kv_pools::KvPools;
use super::output::CancelWaker;
use super::runner::StepRunner;
use super::scheduler::{Scheduler, SchedulerLimits, StepPlan};
use super::sequence::{SeqId, Sequence, TokenOutcome};
use super::stats::EngineClock;
use crate::model::llama::SeqChunk;
use crate::model::tokenizer::Tokenizer;
use crate::model::TokenId;

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
}

impl CancelWaker for EngineShared {
    fn wake(&self) {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner()).cancel_pending = true;
        self.wake.notify_all();
    }
}

/// The loop's working state, kept apart from `EngineCore` so that a panic can be handled with both in hand.
struct LoopState {
    seqs: FxHashMap<SeqId, Sequence>,
    scheduler: Scheduler,
    plan: StepPlan,
    /// `[sequences wanting logits][vocab]`, reused across steps.
    logits: Vec<f32>,
    batch_tokens: Vec<(SeqId, usize)>,
    next_seq: SeqId,
}

impl LoopState {
    fn new(limits: SchedulerLimits) -> Self {
        LoopState {
            seqs: FxHashMap::default(),
            scheduler: Scheduler::new(limits),
            plan: StepPlan::default(),
            logits: Vec::new(),
            batch_tokens: Vec::new(),
            next_seq: 0,
        }
    }
}

/// Everything the engine thread owns.
pub struct EngineCore<'m> {
    pub shared: Arc<EngineShared>,
    pub runner: Box<dyn StepRunner + 'm>,
    pub tokenizer: &'m Tokenizer,
    pub clock: EngineClock,
    pub limits: SchedulerLimits,
    pub blocks: KvPools,
    /// The most positions a sequence may have (model context and cache capacity).
    pub context: usize,
    pub vocab_size: usize,
    /// `[sequences wanting logits]`: token ids (and their logits) when the backend took the argmax itself.
    pub greedy_ids: Vec<TokenId>,
    pub greedy_values: Vec<f32>,
}

impl EngineCore<'_> {
    /// Runs until shutdown; then every unfinished request ends as cancelled. A panic (a bug) fails every request
    /// the engine holds and stops the engine, so no host waits forever on a request that will never finish.
    pub fn run(mut self) {
        let mut state = LoopState::new(self.limits);
        loop {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.iteration(&mut state))) {
                Ok(true) => {}
                Ok(false) => return,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    self.abort(&mut state, &format!("internal error: the engine thread panicked: {what}"));
                    return;
                }
            }
        }
    }

    /// One turn of the loop: take what the host sent (sleeping while there is nothing to do), handle
    /// cancellations, run a step. False once the engine has shut down.
    fn iteration(&mut self, st: &mut LoopState) -> bool {
        let (new, check_cancels, shutdown) = {
            let mut inbox = self.shared.inbox.lock().unwrap_or_else(|e| e.into_inner());
            while inbox.new.is_empty() && !inbox.cancel_pending && !inbox.shutdown && st.scheduler.is_idle() {
                inbox = self.shared.wake.wait(inbox).unwrap_or_else(|e| e.into_inner());
            }
            let cancels = std::mem::take(&mut inbox.cancel_pending);
            (std::mem::take(&mut inbox.new), cancels, inbox.shutdown)
        };
        for request in new {
            for mut seq in request.sequences {
                seq.id = st.next_seq;
                st.next_seq += 1;
                st.scheduler.add_waiting(seq.id);
                st.seqs.insert(seq.id, seq);
            }
        }
        if shutdown {
            let ids: Vec<SeqId> = st.seqs.keys().copied().collect();
            for id in ids {
                self.finish(&mut st.seqs, &mut st.scheduler, id, FinishReason::Cancelled);
            }
            self.publish(&st.scheduler);
            return false;
        }
        if check_cancels {
            let cancelled: Vec<SeqId> =
                st.seqs.iter().filter(|(_, s)| s.request.is_cancelled()).map(|(&id, _)| id).collect();
            for id in cancelled {
                self.finish(&mut st.seqs, &mut st.scheduler, id, FinishReason::Cancelled);
            }
        }
        if !st.scheduler.is_idle() {
            self.step(&mut st.seqs, &mut st.scheduler, &mut st.plan, &mut st.logits, &mut st.batch_tokens);
        }
        self.publish(&st.scheduler);
        true
    }

    /// After a panic: refuse new work, and fail every request held or still in the inbox.
    fn abort(&mut self, st: &mut LoopState, message: &str) {
        let pending = {
            let mut inbox = self.shared.inbox.lock().unwrap_or_else(|e| e.into_inner());
            inbox.shutdown = true;
            std::mem::take(&mut inbox.new)
        };
        for seq in pending.into_iter().flat_map(|r| r.sequences).chain(st.seqs.drain().map(|(_, s)| s)) {
            seq.request.fail(message.to_owned());
        }
        self.shared.running.store(0, Ordering::Relaxed);
        self.shared.waiting.store(0, Ordering::Relaxed);
    }

    /// One step: plan, forward, sample, report.
    fn step(
        &mut self,
        seqs: &mut FxHashMap<SeqId, Sequence>,
        scheduler: &mut Scheduler,
        plan: &mut StepPlan,
        logits: &mut Vec<f32>,
        batch_tokens: &mut Vec<(SeqId, usize)>,
    ) {
        let step_start = self.clock.now();
        scheduler.schedule(seqs, &mut self.blocks, plan);
        for &id in &plan.failed {
            if let Some(s) = seqs.get(&id) {
                s.request.fail("internal error: the sliding-window KV pool ran out of blocks".to_owned());
            }
            self.finish(seqs, scheduler, id, FinishReason::Error);
        }
        // Counters before any of the step's tokens reach a host: one that has seen a request's token also sees
        // it running and its blocks taken.
        self.publish(scheduler);
        for &id in &plan.first_scheduled {
            let s = &seqs[&id];
            s.request.with_stats(s.choice, |st| st.scheduled_ts = Some(step_start));
        }
        if plan.chunks.is_empty() {
            // Nothing fits (cannot happen with validated requests: each fits an empty cache alone).
            return;
        }

        // Build the batch. A chunk wants logits when it reaches the sequence's last known token.
        let batch: Vec<SeqChunk<'_>> = plan
            .chunks
            .iter()
            .map(|c| {
                let s = &seqs[&c.seq];
                let end = s.num_computed + c.n_tokens;
                SeqChunk {
                    tokens: &s.tokens[s.num_computed..end],
                    start_pos: s.num_computed,
                    block_table: &s.block_table,
                    window_table: &s.window_table,
                    want_logits: end == s.tokens.len(),
                }
            })
            .collect();
        let n_logits = batch.iter().filter(|c| c.want_logits).count();
        // When every sequence that samples is plain greedy, a backend may pick the argmax itself, so only token ids
        // come back from the device (the CPU backend declines and returns logits).
        let all_greedy = plan.chunks.iter().zip(&batch).filter(|(_, b)| b.want_logits).all(|(c, _)| {
            let p = seqs[&c.seq].sampler.params();
            p.is_greedy() && !p.has_penalties() && p.logit_bias.is_empty()
        });
        let mut device_ids = false;
        let result = match all_greedy && n_logits > 0 {
            true => {
                self.greedy_ids.resize(n_logits, 0);
                self.greedy_values.resize(n_logits, 0.0);
                match self.runner.run_top_k(&batch, 1, &mut self.greedy_ids, &mut self.greedy_values) {
                    Some(r) => {
                        device_ids = true;
                        r
                    }
                    None => {
                        logits.resize(n_logits * self.vocab_size, 0.0);
                        self.runner.run(&batch, logits)
                    }
                }
            }
            false => {
                logits.resize(n_logits * self.vocab_size, 0.0);
                self.runner.run(&batch, logits)
            }
        };
        drop(batch);
        self.shared.steps.fetch_add(1, Ordering::Relaxed);

        if let Err(message) = result {
            let failed: Vec<SeqId> = plan.chunks.iter().map(|c| c.seq).collect();
            for id in failed {
                if let Some(s) = seqs.get(&id) {
                    s.request.fail(format!("forward pass failed: {message}"));
                }
                self.finish(seqs, scheduler, id, FinishReason::Error);
            }
            return;
        }

        // Advance, sample, report.
        batch_tokens.clear();
        let mut row = 0;
        let mut finished = Vec::new();
        for c in &plan.chunks {
            let s = seqs.get_mut(&c.seq).expect("scheduled sequences exist");
            // A decode computes just the token sampled last step; anything else (a prompt chunk, a recomputation
            // after preemption) is prefill work.
            let decode = c.n_tokens == 1 && s.num_computed + 1 == s.tokens.len() && s.num_generated() > 0;
            let prefill = !decode;
            s.num_computed += c.n_tokens;
            batch_tokens.push((c.seq, if prefill { c.n_tokens } else { 0 }));
            if s.num_computed != s.tokens.len() {
                continue;
            }
            let token = if device_ids {
                self.greedy_ids[row]
            } else {
                s.sampler.sample(&mut logits[row * self.vocab_size..(row + 1) * self.vocab_size])
            };
            row += 1;
            let ts = self.clock.now();
            if let TokenOutcome::Finished(reason) = s.append_token(token, ts, self.tokenizer, self.context) {
                finished.push((c.seq, reason));
            }
        }

        // Attribute the step's time: compute share by tokens, prefill time to the sequences that prefilled.
        let step_s = self.clock.now() - step_start;
        let total: usize = plan.chunks.iter().map(|c| c.n_tokens).sum();
        for (c, &(_, prefill_tokens)) in plan.chunks.iter().zip(batch_tokens.iter()) {
            let s = &seqs[&c.seq];
            s.request.with_stats(s.choice, |st| {
                st.compute_share_s += step_s * c.n_tokens as f64 / total as f64;
                if prefill_tokens > 0 {
                    st.prefill_time_s += step_s;
                    st.num_computed_prompt_tokens += prefill_tokens as u32;
                }
            });
        }
        for (id, reason) in finished {
            self.finish(seqs, scheduler, id, reason);
        }
    }

    /// Ends a sequence: frees its blocks, forgets it, and tells its request.
    fn finish(
        &mut self,
        seqs: &mut FxHashMap<SeqId, Sequence>,
        scheduler: &mut Scheduler,
        id: SeqId,
        reason: FinishReason,
    ) {
        let Some(mut seq) = seqs.remove(&id) else { return };
        scheduler.remove(id);
        self.blocks.release(&mut seq.block_table, &mut seq.window_table);
        // Counters first: a host that sees the request finish also sees its blocks free.
        self.publish(scheduler);
        if reason == FinishReason::Cancelled {
            seq.release_rest();
        }
        seq.request.finish_choice(seq.choice, reason);
    }

    /// Publishes the counters before the first request arrives.
    pub fn publish_initial(&self) {
        self.publish_blocks();
    }

    fn publish(&self, scheduler: &Scheduler) {
        self.shared.running.store(scheduler.num_running(), Ordering::Relaxed);
        self.shared.waiting.store(scheduler.num_waiting(), Ordering::Relaxed);
        self.publish_blocks();
    }

    fn publish_blocks(&self) {
        self.shared.free_blocks.store(self.blocks.global.num_free(), Ordering::Relaxed);
        self.shared.free_window_blocks.store(self.blocks.window_free(), Ordering::Relaxed);
    }
}

#[cfg(test)]
impl EngineCore<'_> {
    /// Runs the loop on this thread until every request submitted so far has finished (tests drive the engine
    /// without its thread; at least one request must be in the inbox, or this waits for one).
    pub(super) fn run_until_idle(&mut self) {
        let mut state = LoopState::new(self.limits);
        while self.iteration(&mut state) && !state.scheduler.is_idle() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kv_blocks::BlockAllocator;
    use crate::engine::output::{EventPoll, RequestEvent, RequestHandle, RequestShared};
    use crate::engine::sampling::{Sampler, SamplingParams};
    use crate::model::tokenizer::{Tokenizer, TokenizerSpec};

    /// A backend with a bug: it panics on the first step.
    struct PanickingRunner;

    impl StepRunner for PanickingRunner {
        fn run(&mut self, _: &[SeqChunk<'_>], _: &mut [f32]) -> Result<(), String> {
            panic!("kernel bug");
        }
        fn describe(&self) -> String {
            "panicking".into()
        }
        fn max_batch_tokens(&self) -> usize {
            16
        }
    }

    #[test]
    fn a_panic_in_a_step_fails_every_request_and_stops_the_engine() {
        let tokens: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let tokenizer = Tokenizer::from_spec(&TokenizerSpec::new(&tokens, &[], "smollm")).unwrap();
        let shared = Arc::new(EngineShared::default());
        let clock = EngineClock::new();
        let request = |id| {
            let waker: std::sync::Weak<dyn CancelWaker> = Arc::downgrade(&shared) as _;
            let r = RequestShared::new(id, 1, 2, false, clock, None, waker);
            let sampler = Sampler::new(SamplingParams::default(), &[0, 1], 0);
            let seq = Sequence::new(0, Arc::clone(&r), 0, &[0, 1], 4, Arc::from(vec![]), sampler, vec![]);
            (RequestHandle::new(r), NewRequest { sequences: vec![seq] })
        };
        let (first, first_new) = request(1);
        let (second, second_new) = request(2);
        shared.inbox.lock().unwrap().new.extend([first_new, second_new]);
        let core = EngineCore {
            shared: Arc::clone(&shared),
            runner: Box::new(PanickingRunner),
            tokenizer: &tokenizer,
            clock,
            limits: SchedulerLimits { max_num_seqs: 4, max_num_batched_tokens: 16 },
            blocks: KvPools::new(BlockAllocator::new(4, 16), None),
            context: 64,
            vocab_size: 3,
            greedy_ids: Vec::new(),
            greedy_values: Vec::new(),
        };
        core.run(); // returns instead of unwinding
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
}
