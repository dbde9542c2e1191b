//! The scheduling policy (vLLM-style continuous batching): each step decides how many tokens each sequence
//! computes. Allocation details stay behind the block allocator.
//!
//! Order of a step, within a budget of `max_num_batched_tokens` tokens and `max_num_seqs` sequences:
//! 1. running sequences that decode (one token each), so their inter-token latency does not depend on prompts
//!    arriving;
//! 2. running sequences still prefilling, each a chunk of what the budget leaves;
//! 3. waiting sequences, first come first served, while their first chunk's KV blocks are free.
//!
//! When a running sequence needs a block and none is free, the most recently admitted running sequence is
//! preempted: its blocks are freed and it goes back to the head of the waiting queue, to be recomputed. A step that
//! preempted admits nobody (admitting would only thrash). Only the global pool decides: a sliding-window model's
//! window pool has room whenever the global one has (`kv_window.rs`).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::kv_pools::{Grow, KvPools};
use super::sequence::{SeqId, Sequence};

/// Limits of one step.
#[derive(Clone, Copy, Debug)]
pub struct SchedulerLimits {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
}

/// A sequence's share of a step: compute its next `n_tokens` uncomputed tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub seq: SeqId,
    pub n_tokens: usize,
}

/// The plan of one step (reused across steps).
#[derive(Debug, Default)]
pub struct StepPlan {
    pub chunks: Vec<Scheduled>,
    /// Sequences preempted while planning (already back in the waiting queue, blocks freed).
    pub preempted: Vec<SeqId>,
    /// Sequences scheduled for the first time ever.
    pub first_scheduled: Vec<SeqId>,
    /// Sequences dropped for a window-pool shortage, which the pool's sizing rules out (an engine bug): out of
    /// the queues, blocks freed; the engine fails their requests with an internal error.
    pub failed: Vec<SeqId>,
}

/// The queues: waiting (FCFS, preempted sequences at the head) and running (in admission order).
#[derive(Debug)]
pub struct Scheduler {
    limits: SchedulerLimits,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
}

impl Scheduler {
    pub fn new(limits: SchedulerLimits) -> Self {
        Scheduler { limits, waiting: VecDeque::new(), running: Vec::new() }
    }

    pub fn add_waiting(&mut self, seq: SeqId) {
        self.waiting.push_back(seq);
    }

    /// Forgets a sequence (finished or cancelled); its blocks are the caller's to release.
    pub fn remove(&mut self, seq: SeqId) {
        self.running.retain(|&s| s != seq);
        self.waiting.retain(|&s| s != seq);
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Plans the next step into `plan`.
    pub fn schedule(&mut self, seqs: &mut FxHashMap<SeqId, Sequence>, blocks: &mut KvPools, plan: &mut StepPlan) {
        plan.chunks.clear();
        plan.preempted.clear();
        plan.first_scheduled.clear();
        plan.failed.clear();
        let mut budget = self.limits.max_num_batched_tokens;

        for decoding in [true, false] {
            let mut i = 0;
            while i < self.running.len() && budget > 0 {
                let id = self.running[i];
                let seq = seqs.get_mut(&id).expect("running sequences exist");
                if (seq.num_uncomputed() == 1) != decoding {
                    i += 1;
                    continue;
                }
                let n = seq.num_uncomputed().min(budget);
                if self.reserve(id, n, seqs, blocks, plan) {
                    plan.chunks.push(Scheduled { seq: id, n_tokens: n });
                    budget -= n;
                    i += 1;
                }
                // Otherwise the sequence itself was preempted (or failed): `running[i]` is now the next one.
            }
        }

        if !plan.preempted.is_empty() {
            return;
        }
        while budget > 0 && self.running.len() < self.limits.max_num_seqs {
            let Some(&id) = self.waiting.front() else { break };
            let seq = seqs.get_mut(&id).expect("waiting sequences exist");
            let n = seq.num_uncomputed().min(budget);
            match blocks.grow(&mut seq.block_table, &mut seq.window_table, seq.num_computed, seq.num_computed + n) {
                Grow::Done => {}
                Grow::NoRoom => break,
                Grow::WindowShortage => {
                    blocks.release(&mut seq.block_table, &mut seq.window_table);
                    self.waiting.pop_front();
                    plan.failed.push(id);
                    continue;
                }
            }
            self.waiting.pop_front();
            self.running.push(id);
            if !seq.ever_scheduled {
                seq.ever_scheduled = true;
                plan.first_scheduled.push(id);
            }
            plan.chunks.push(Scheduled { seq: id, n_tokens: n });
            budget -= n;
        }
    }

    /// Makes room for sequence `id` to compute its next `n` tokens, preempting the most recently admitted running
    /// sequences as needed. False when `id` itself had to be preempted (or failed).
    fn reserve(
        &mut self,
        id: SeqId,
        n: usize,
        seqs: &mut FxHashMap<SeqId, Sequence>,
        blocks: &mut KvPools,
        plan: &mut StepPlan,
    ) -> bool {
        loop {
            let seq = seqs.get_mut(&id).expect("running sequences exist");
            let start = seq.num_computed;
            match blocks.grow(&mut seq.block_table, &mut seq.window_table, start, start + n) {
                Grow::Done => return true,
                Grow::NoRoom => {}
                Grow::WindowShortage => {
                    blocks.release(&mut seq.block_table, &mut seq.window_table);
                    self.running.retain(|&s| s != id);
                    plan.failed.push(id);
                    return false;
                }
            }
            let victim = self.running.pop().expect("the sequence itself is running");
            let v = seqs.get_mut(&victim).expect("running sequences exist");
            blocks.release(&mut v.block_table, &mut v.window_table);
            v.num_computed = 0;
            v.request.with_stats(v.choice, |s| s.num_preemptions += 1);
            self.waiting.push_front(victim);
            plan.preempted.push(victim);
            plan.chunks.retain(|c| c.seq != victim);
            if victim == id {
                return false;
            }
        }
    }
}
