//! The scheduler (vLLM-style continuous batching): it owns the sequences, their queues and their KV blocks, decides
//! each step how many tokens each sequence computes ([`Scheduler::schedule`]), and applies what the step sampled
//! ([`Scheduler::update_from_output`]).
//!
//! Order of a step, within a budget of `max_num_batched_tokens` tokens and `max_num_seqs` sequences:
//! 1. running sequences that decode (one token each), all of them, never skipped;
//! 2. running sequences still prefilling, by priority (in admission order within a priority), each a chunk of what
//!    the budget leaves; before each, the waiting sequences of a strictly higher priority are admitted (3.);
//! 3. waiting sequences, by priority (the request's `priority`, lower first), first come first served within a
//!    priority, while their first chunk's KV blocks are free. A sequence admitted takes first the longest prefix
//!    of its tokens whose full blocks are in the prefix cache (`kv_prefix.rs`), and computes from there; its
//!    blocks become findable as its steps fill them. When the next waiting sequence does not fit (no room, or
//!    `max_num_seqs` running) and a running sequence has a strictly lower priority, that one is preempted for it
//!    (vLLM's priority scheduling): a high-priority request waits for no low-priority one;
//! 4. with speculative decoding on, draft tokens for the decoding sequences, as many as the planner finds worth
//!    their cost in what the budget and the free blocks leave (`speculative/`).
//!
//! The prefill of 2. and 3. together is held to the step budget (the `step_budget` option, `step_budget.rs`): in a
//! step with decodes, the prefill tokens whose estimated step stays within a target time (by default 1.25× the
//! decodes' step alone), so that a prompt arriving does not stall every stream's next token; but at least an
//! eighth of `max_num_batched_tokens`, so that a prompt always progresses, and 1.25× the prompt tokens arriving
//! per step, so that prefill keeps pace with the load. A step without decodes, the `"throughput"`
//! policy, and costs not yet learned leave prefill the whole token budget (with equal priorities, the plan of
//! "throughput" is the plan before the option). The costs are learned here, per step size, from every step the
//! engine runs ([`Scheduler::observe_step`], `step_cost.rs`), for the step budget and the speculation planner.
//!
//! When a running sequence needs a block and none is free, a running sequence is preempted: the lowest-priority
//! one, the most recently admitted among equals. Its blocks are freed and it goes back to the waiting queue, ahead
//! of the later arrivals of its priority, to be recomputed. A step that preempted for lack of blocks admits nobody
//! (admitting would only thrash). Only the global pool decides: a sliding-window model's
//! window pool has room whenever the global one has (`kv_window.rs`).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::step_budget::{min_prefill_chunk, PromptArrivals, StepBudget, StepCosts};
use super::{RunnerOutput, ScheduledChunk, SchedulerOutput};
use crate::engine::kv::kv_pools::{Grow, KvPools};
use crate::engine::kv::kv_prefix::PrefixCacheStats;
use crate::engine::observe::stats::{EngineClock, StepEvent};
use crate::engine::output::finish::FinishReason;
use crate::engine::sequence::{SeqId, Sequence};
use crate::engine::speculative::{SpeculativeConfig, Speculator};

/// Where a sequence is in its life: the scheduler's part of a sequence (`Sequence::state`), which its queues agree
/// with. Only the scheduler changes it.
#[derive(Clone, Copy, Debug, Default)]
pub struct SeqState {
    status: SeqStatus,
}

impl SeqState {
    /// The reason the sequence ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        match self.status {
            SeqStatus::Finished(reason) => Some(reason),
            _ => None,
        }
    }
}

/// A sequence's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SeqStatus {
    /// Never scheduled: in the waiting queue.
    #[default]
    Waiting,
    /// Admitted: in the running queue, its blocks allocated.
    Running,
    /// Its blocks were taken back for another sequence: at the head of the waiting queue, to be recomputed.
    Preempted,
    /// Ended; the scheduler releases it (blocks, queues) before the next step.
    Finished(FinishReason),
}

/// Limits of one step.
#[derive(Clone, Copy, Debug)]
pub struct SchedulerLimits {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    /// How many prefill tokens may join a step with decodes (`step_budget.rs`).
    pub step_budget: StepBudget,
    /// n-gram speculative decoding, when on (`speculative/`).
    pub speculative: Option<SpeculativeConfig>,
}

/// What the scheduler has done since the engine started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerCounters {
    pub preemptions: u64,
    pub prefix_cache: PrefixCacheStats,
    /// Draft tokens verified, and those accepted (`speculative/`).
    pub draft_tokens: u64,
    pub accepted_draft_tokens: u64,
}

/// The sequences, their queues (waiting: FCFS, preempted sequences at the head; running: in admission order) and
/// the KV block pools they take blocks from.
pub struct Scheduler {
    limits: SchedulerLimits,
    seqs: FxHashMap<SeqId, Sequence>,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    blocks: KvPools,
    /// The most positions a sequence may have (model context and cache capacity).
    context: usize,
    counters: SchedulerCounters,
    /// Speculative decoding, when on: what decides each step's drafts (`speculative/`).
    speculator: Option<Speculator>,
    /// What steps cost, learned from those that ran: the step budget's and the speculation planner's estimates.
    costs: StepCosts,
    /// The prompt tokens arriving per step: the step budget's least prefill.
    arrivals: PromptArrivals,
}

impl Scheduler {
    pub fn new(limits: SchedulerLimits, blocks: KvPools, context: usize) -> Self {
        Scheduler {
            limits,
            seqs: FxHashMap::default(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            blocks,
            context,
            counters: SchedulerCounters::default(),
            speculator: limits.speculative.map(Speculator::new),
            costs: StepCosts::new(limits.max_num_batched_tokens),
            arrivals: PromptArrivals::default(),
        }
    }

    /// Takes a new sequence (numbered by the caller) into the waiting queue.
    pub fn add(&mut self, mut seq: Sequence) {
        debug_assert_eq!(seq.state.status, SeqStatus::Waiting);
        let (kv, tokens) = seq.kv_with_tokens();
        self.blocks.hash_blocks(kv, tokens);
        self.arrivals.arrived(seq.tokens().len());
        let id = seq.id();
        self.seqs.insert(id, seq);
        self.enqueue(id);
    }

    /// Puts sequence `id` in the waiting queue at its place: by priority (lower first), then by id (arrival).
    fn enqueue(&mut self, id: SeqId) {
        let key = |s: &Sequence| (s.priority(), s.id());
        let k = key(&self.seqs[&id]);
        let at = self.waiting.partition_point(|w| key(&self.seqs[w]) < k);
        self.waiting.insert(at, id);
    }

    /// The sequences, for the runner to read their tokens and tables and to sample with their samplers.
    pub fn sequences_mut(&mut self) -> &mut FxHashMap<SeqId, Sequence> {
        &mut self.seqs
    }

    pub fn sequence(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    pub fn sequences(&self) -> impl Iterator<Item = &Sequence> {
        self.seqs.values()
    }

    pub fn blocks(&self) -> &KvPools {
        &self.blocks
    }

    pub fn counters(&self) -> SchedulerCounters {
        self.counters
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The most positions a sequence may have.
    pub fn context(&self) -> usize {
        self.context
    }

    pub fn is_idle(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Plans the next step; `now` (monotonic) becomes the `scheduled_ts` of sequences scheduled for the first
    /// time.
    pub fn schedule(&mut self, now: f64) -> SchedulerOutput {
        let mut out = SchedulerOutput::default();
        let mut budget = self.limits.max_num_batched_tokens;
        self.arrivals.step();
        // Set when reserving blocks for a running sequence preempted one: such a step admits nobody.
        let mut short_of_blocks = false;

        // 1. Decodes. A snapshot: reserving blocks may preempt sequences anywhere in the running list.
        for id in self.running.clone() {
            if budget == 0 {
                break;
            }
            let seq = &self.seqs[&id];
            if seq.state.status == SeqStatus::Running && seq.num_uncomputed() == 1 {
                short_of_blocks |= self.schedule_running(id, budget, &mut out, &mut budget).1;
            }
        }

        // 2. Prefill chunks of running sequences, within what the step budget lets a step of these decodes take
        // (`step_budget.rs`), by priority (admission order among equals); a waiting sequence of a strictly higher
        // priority is admitted before each.
        let decodes = out.chunks.iter().filter(|c| !c.prefill).count();
        let min_chunk = min_prefill_chunk(self.limits.max_num_batched_tokens, &self.arrivals);
        let mut prefill_left =
            self.limits.step_budget.prefill_cap(&self.costs, decodes, min_chunk).unwrap_or(usize::MAX);
        let mut order = self.running.clone();
        order.sort_by_key(|id| self.seqs[id].priority());
        for id in order {
            let priority = self.seqs[&id].priority();
            if !short_of_blocks {
                self.admit_waiting(now, Some(priority), &mut out, &mut budget, &mut prefill_left);
            }
            if budget == 0 || prefill_left == 0 {
                break;
            }
            let seq = &self.seqs[&id];
            if seq.state.status == SeqStatus::Running && seq.num_uncomputed() != 1 {
                let (n, preempted) = self.schedule_running(id, budget.min(prefill_left), &mut out, &mut budget);
                prefill_left -= n;
                short_of_blocks |= preempted;
            }
            // Otherwise: no longer running (preempted), or a decode (scheduled above).
        }
        if short_of_blocks {
            return out;
        }

        // 3. Waiting sequences, by priority.
        self.admit_waiting(now, None, &mut out, &mut budget, &mut prefill_left);
        self.add_drafts(&mut out, budget);
        out
    }

    /// Schedules running sequence `id`'s next chunk, at most `most` tokens (and what its chunking allows), taking
    /// them from `budget`. Returns the chunk's tokens (0 when `id` itself was preempted, or failed), and whether
    /// reserving its blocks preempted a sequence.
    fn schedule_running(
        &mut self,
        id: SeqId,
        most: usize,
        out: &mut SchedulerOutput,
        budget: &mut usize,
    ) -> (usize, bool) {
        let preempted = out.preempted.len();
        let seq = &self.seqs[&id];
        let n = seq.num_uncomputed().min(most).min(seq.max_chunk_tokens());
        let scheduled = self.reserve(id, n, out, budget);
        if scheduled {
            out.chunks.push(self.chunk(id, n));
            *budget -= n;
        }
        (if scheduled { n } else { 0 }, out.preempted.len() > preempted)
    }

    /// Admits waiting sequences, by priority, while the step has room (`budget` tokens, `prefill_left` of them
    /// for prefill); with `before`, only those of a strictly higher priority than it (a lower number).
    fn admit_waiting(
        &mut self,
        now: f64,
        before: Option<i32>,
        out: &mut SchedulerOutput,
        budget: &mut usize,
        prefill_left: &mut usize,
    ) {
        while *budget > 0 && *prefill_left > 0 {
            let Some(&id) = self.waiting.front() else { break };
            if before.is_some_and(|p| self.seqs[&id].priority() >= p) {
                break;
            }
            let admitted = match self.running.len() < self.limits.max_num_seqs {
                true => self.admit(id, (*budget).min(*prefill_left), now, out),
                false => None,
            };
            let Some(n) = admitted else {
                // No room, or no seat: a lower-priority running sequence gives way, or the queue waits.
                if self.preempt_for(id, out, budget) {
                    continue;
                }
                break;
            };
            self.waiting.pop_front();
            if n > 0 {
                self.running.push(id);
                out.chunks.push(self.chunk(id, n));
                *budget -= n;
                *prefill_left = prefill_left.saturating_sub(n);
            }
        }
    }

    /// Admits waiting sequence `id`: takes the longest cached prefix of its tokens (all but the last, whose
    /// logits are needed, and no positions whose prompt log probabilities are still to compute), then blocks for a first chunk of what is left, up to `budget` tokens. `Some(n)`, the
    /// chunk's size, once admitted (0: it failed for a window-pool shortage and is finished); `None` when there is
    /// no room, with nothing taken.
    fn admit(&mut self, id: SeqId, budget: usize, now: f64, out: &mut SchedulerOutput) -> Option<usize> {
        let seq = self.seqs.get_mut(&id).expect("waiting sequences exist");
        let queried = seq.cacheable_prefix();
        let (kv, tokens) = seq.kv_with_tokens();
        let cached = self.blocks.take_cached_prefix(kv, tokens, queried);
        let n = seq.num_uncomputed().min(budget).min(seq.max_chunk_tokens());
        match self.blocks.grow(&mut seq.kv, cached, cached + n) {
            Grow::Done => {}
            Grow::NoRoom => {
                // Give the cached blocks back: the sequence is looked up afresh when there is room.
                self.blocks.release(&mut seq.kv);
                return None;
            }
            Grow::WindowShortage => {
                self.fail(id, out);
                return Some(0);
            }
        }
        if self.blocks.global.caching() {
            self.counters.prefix_cache.queries += queried as u64;
            self.counters.prefix_cache.hits += cached as u64;
        }
        if seq.state.status == SeqStatus::Waiting {
            seq.request().started();
            let cached_prompt = cached.min(seq.prompt_len()) as u32;
            seq.request().with_stats(seq.choice(), |s| {
                s.scheduled_ts = Some(now);
                s.num_cached_prompt_tokens = cached_prompt;
            });
            if seq.bills_prompt() {
                seq.request().add_cached_prompt_tokens(cached_prompt);
            }
        }
        seq.state.status = SeqStatus::Running;
        seq.report_admission(cached, now);
        Some(n)
    }

    /// Speculative decoding (`speculative/`): gives the step's decoding sequences that may speculate the draft
    /// tokens the planner finds worth their cost, within the step's remaining `budget`. A draft's positions need
    /// free blocks, beyond one for each running sequence: a draft never preempts anyone, now or by taking the
    /// block a neighbour's next decode needs. Sequences without a draft keep their plain decode.
    fn add_drafts(&mut self, out: &mut SchedulerOutput, budget: usize) {
        let Some(speculator) = self.speculator.as_ref() else { return };
        // The window pool releases blocks as positions pass the window, and rejected positions go back.
        let cost = &self.costs.decode;
        if budget == 0 || self.blocks.window.is_some() || !speculator.may_pay(cost, out.num_tokens()) {
            return;
        }
        let (mut drafts, mut offers) = (Vec::new(), Vec::new());
        for (i, c) in out.chunks.iter().enumerate() {
            let seq = &self.seqs[&c.seq];
            if c.prefill || c.n_tokens != 1 || !seq.can_speculate() {
                continue;
            }
            // A step yields up to draft + 1 tokens; none may be past max_tokens or the context.
            let to_max_tokens = seq.max_tokens().saturating_sub(seq.num_generated() + 1);
            let to_context = self.context.saturating_sub(seq.tokens().len() + 1);
            let predicted = seq.prediction();
            if let Some(draft) = speculator.config.propose(seq.tokens(), predicted, to_max_tokens.min(to_context)) {
                offers.push(speculator.offer(seq.draft.acceptance(), draft.match_len, draft.tokens.len()));
                drafts.push((i, draft));
            }
        }
        let taken = speculator.plan(cost, out.num_tokens(), &offers, budget);
        for ((i, draft), d) in drafts.into_iter().zip(taken).filter(|&(_, d)| d > 0) {
            let c = &mut out.chunks[i];
            let seq = self.seqs.get_mut(&c.seq).expect("scheduled sequences exist");
            let needed = self.blocks.blocks_missing(&seq.kv, c.start + 1 + d);
            if needed > 0 && self.blocks.global.num_free() < needed + self.running.len() {
                continue;
            }
            if self.blocks.grow(&mut seq.kv, c.start, c.start + 1 + d) != Grow::Done {
                continue;
            }
            let last = seq.tokens().last().copied();
            seq.draft.plan(last, &draft.tokens[..d], draft.match_len);
            c.n_tokens = 1 + d;
            c.draft = d;
        }
    }

    /// Records how long step `step`'s forward pass took (its tokens sampled), for the cost models of the step
    /// budget and the speculation planner.
    pub fn observe_step(&mut self, step: &SchedulerOutput, seconds: f64) {
        let every_row_samples = step.chunks.iter().all(|c| !c.prefill);
        self.costs.observe(step.num_tokens(), seconds, every_row_samples);
    }

    /// The chunk of sequence `id` computing its next `n` tokens (with a draft: its last token and the draft).
    fn chunk(&self, id: SeqId, n: usize) -> ScheduledChunk {
        let s = &self.seqs[&id];
        let (computed, len) = (s.kv.num_computed(), s.tokens().len());
        let end = (computed + n).min(len);
        let decode = end == len && s.num_uncomputed() == 1 && s.num_generated() > 0;
        ScheduledChunk {
            seq: id,
            start: computed,
            n_tokens: n,
            samples: end == len,
            prefill: !decode,
            draft: n - (end - computed),
        }
    }

    /// Makes room for sequence `id` to compute its next `n` tokens, preempting running sequences as needed (the
    /// lowest-priority first: [`victim`](Self::victim)); their chunks already in `out` give their tokens back to
    /// `budget`. False when `id` itself had to be preempted (or failed).
    fn reserve(&mut self, id: SeqId, n: usize, out: &mut SchedulerOutput, budget: &mut usize) -> bool {
        loop {
            let seq = self.seqs.get_mut(&id).expect("running sequences exist");
            let start = seq.kv.num_computed();
            match self.blocks.grow(&mut seq.kv, start, start + n) {
                Grow::Done => return true,
                Grow::NoRoom => {}
                Grow::WindowShortage => {
                    self.running.retain(|&s| s != id);
                    self.fail(id, out);
                    return false;
                }
            }
            let victim = self.victim().expect("the sequence itself is running");
            *budget += self.preempt(victim, out);
            if victim == id {
                return false;
            }
        }
    }

    /// The running sequence to preempt first: the lowest priority (the largest `priority`), the most recently
    /// admitted among equals.
    fn victim(&self) -> Option<SeqId> {
        let rank = |(i, id): &(usize, &SeqId)| (self.seqs[*id].priority(), *i);
        self.running.iter().enumerate().max_by_key(rank).map(|(_, &id)| id)
    }

    /// Preempts running sequence `id`: its blocks are freed, and it goes back to the waiting queue to be
    /// recomputed. Returns the tokens its chunk in `out` had (removed from the step), 0 without one.
    fn preempt(&mut self, id: SeqId, out: &mut SchedulerOutput) -> usize {
        self.running.retain(|&s| s != id);
        let v = self.seqs.get_mut(&id).expect("running sequences exist");
        self.blocks.release(&mut v.kv);
        v.draft.drop_plan();
        v.state.status = SeqStatus::Preempted;
        v.request().with_stats(v.choice(), |s| s.num_preemptions += 1);
        self.counters.preemptions += 1;
        self.enqueue(id);
        out.preempted.push(id);
        let freed = out.chunks.iter().filter(|c| c.seq == id).map(|c| c.n_tokens).sum();
        out.chunks.retain(|c| c.seq != id);
        freed
    }

    /// Priority scheduling: waiting sequence `id` does not fit, so the lowest-priority running sequence gives
    /// way if its priority is strictly lower than `id`'s. True when one was preempted (its chunk's tokens given
    /// back to `budget`).
    fn preempt_for(&mut self, id: SeqId, out: &mut SchedulerOutput, budget: &mut usize) -> bool {
        let priority = self.seqs[&id].priority();
        match self.victim() {
            Some(victim) if self.seqs[&victim].priority() > priority => {
                *budget += self.preempt(victim, out);
                true
            }
            _ => false,
        }
    }

    /// Ends a sequence that lost its window blocks (out of the queues already): blocks freed, `Error`.
    fn fail(&mut self, id: SeqId, out: &mut SchedulerOutput) {
        let seq = self.seqs.get_mut(&id).expect("scheduled sequences exist");
        self.blocks.release(&mut seq.kv);
        seq.state.status = SeqStatus::Finished(FinishReason::Error);
        out.failed.push(id);
    }

    /// Applies a step that ran: each chunk's positions are computed, each sampled token is appended (which may
    /// end its sequence: stop id, length), and each sequence's request records the step. `step_start` is when
    /// the step began. Returns the sequences that got a token, for the output stage.
    pub fn update_from_output(
        &mut self,
        step: &SchedulerOutput,
        ran: RunnerOutput,
        clock: &EngineClock,
        step_start: f64,
    ) -> Vec<SeqId> {
        let mut updated = Vec::with_capacity(ran.sampled.len());
        let mut sampled = ran.sampled.into_iter().peekable();
        for c in &step.chunks {
            let seq = self.seqs.get_mut(&c.seq).expect("scheduled sequences exist");
            seq.kv.computed(c.n_tokens - c.draft);
            // Before the token it sampled: a host sees the prompt done, then the first token.
            seq.report_computed(clock.now());
            if c.samples {
                let token = sampled.next().expect("a sampled token per sampling chunk");
                debug_assert_eq!(token.seq, c.seq);
                if let Some(reason) = seq.append_token(token.token, token.ts, token.logprob, self.context) {
                    seq.state.status = SeqStatus::Finished(reason);
                }
                if c.draft > 0 {
                    // With a draft, the accepted draft tokens and the model's next one follow (one instant). The
                    // output stage appends them one by one (`Sequence::append_accepted`), so that a stop string
                    // inside the run ends the choice where plain decoding would have. Their positions were
                    // computed in the step; the rejected ones' are left behind `num_computed`, for the next step
                    // to overwrite.
                    let rest = std::iter::from_fn(|| {
                        sampled.next_if(|t| t.seq == c.seq).map(|more| (more.token, more.ts, more.logprob))
                    });
                    let accepted = seq.draft.verified(c.draft, rest, self.speculator.as_mut());
                    self.counters.draft_tokens += c.draft as u64;
                    self.counters.accepted_draft_tokens += accepted as u64;
                    seq.request().with_stats(seq.choice(), |s| {
                        s.num_draft_tokens += c.draft as u32;
                        s.num_accepted_tokens += accepted as u32;
                    });
                }
                updated.push(c.seq);
            }
            // Blocks the step filled become findable (a token sampled this step is not computed yet, but its
            // block is hashed now, to be registered once it is).
            let (kv, tokens) = seq.kv_with_tokens();
            self.blocks.cache_computed_blocks(kv, tokens);
        }
        let end_ts = clock.now();
        let batch_tokens = step.num_tokens() as u32;
        for c in &step.chunks {
            let s = &self.seqs[&c.seq];
            let event =
                StepEvent { start_ts: step_start, end_ts, tokens: c.n_tokens as u32, batch_tokens, prefill: c.prefill };
            s.request().with_stats(s.choice(), |st| st.steps.push(event));
        }
        updated
    }

    /// Ends sequence `id` with `reason`, unless it has already ended; [`take_finished`](Self::take_finished)
    /// releases it.
    pub fn finish(&mut self, id: SeqId, reason: FinishReason) {
        if let Some(seq) = self.seqs.get_mut(&id) {
            if seq.finish_reason().is_none() {
                seq.state.status = SeqStatus::Finished(reason);
            }
        }
    }

    /// Ends every sequence whose deadline is at or before `now` (monotonic) and that has not ended, with
    /// `Deadline`, waiting or running; [`take_finished`](Self::take_finished) releases them.
    pub fn finish_past_deadline(&mut self, now: f64) {
        for seq in self.seqs.values_mut() {
            if seq.deadline().is_some_and(|d| d <= now) && seq.finish_reason().is_none() {
                seq.state.status = SeqStatus::Finished(FinishReason::Deadline);
            }
        }
    }

    /// Ends every sequence of request `request` (its other choices too) that has not ended, with `reason`.
    pub fn finish_request(&mut self, request: u64, reason: FinishReason) {
        for seq in self.seqs.values_mut().filter(|s| s.request().id() == request) {
            if seq.finish_reason().is_none() {
                seq.state.status = SeqStatus::Finished(reason);
            }
        }
    }

    /// Removes the finished sequences, releasing their blocks, and hands them over (ordered by id, so that a
    /// request's choices end in order).
    pub fn take_finished(&mut self) -> Vec<Sequence> {
        let mut ids: Vec<SeqId> = self.seqs.values().filter(|s| s.finish_reason().is_some()).map(|s| s.id()).collect();
        if ids.is_empty() {
            return Vec::new();
        }
        ids.sort_unstable();
        self.running.retain(|id| !ids.contains(id));
        self.waiting.retain(|id| !ids.contains(id));
        ids.iter()
            .map(|id| {
                let mut seq = self.seqs.remove(id).expect("listed sequences exist");
                self.blocks.release(&mut seq.kv);
                seq
            })
            .collect()
    }

    /// Removes every sequence (the engine stopped after a bug), releasing their blocks.
    pub fn drain(&mut self) -> Vec<Sequence> {
        self.running.clear();
        self.waiting.clear();
        let mut all: Vec<Sequence> = self.seqs.drain().map(|(_, s)| s).collect();
        for seq in &mut all {
            self.blocks.release(&mut seq.kv);
        }
        all.sort_unstable_by_key(|s| s.id());
        all
    }
}
