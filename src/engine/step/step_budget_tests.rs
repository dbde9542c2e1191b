//! The step budget in the scheduler's plans, with step costs fed by hand (a linear cost per decode and per prefill
//! token, as on a CPU): a prompt beside decodes is prefilled in chunks whose steps stay within the target, a step
//! without decodes takes the whole token budget, the minimum chunk keeps a prompt moving, `"throughput"` plans
//! what the scheduler planned before the option, and priorities still order the prefill. No clocks, no backend.

use std::sync::{Arc, Weak};

use super::core::EngineShared;
use super::scheduler::{Scheduler, SchedulerLimits};
use super::step_budget::StepBudget;
use super::{RunnerOutput, SampledToken, SchedulerOutput};
use crate::engine::api::request::RequestOptions;
use crate::engine::api::seq_options::SharedOptions;
use crate::engine::kv::kv_pools::KvPools;
use crate::engine::kv::kv_prefix::PrefixCachingAllocator;
use crate::engine::observe::stats::EngineClock;
use crate::engine::output::{CancelWaker, RequestShared};
use crate::engine::sampling::{Sampler, SamplingParams};
use crate::engine::sequence::{SeqId, Sequence};

/// Tokens per step; the minimum prefill chunk is an eighth: 8.
const BATCH: usize = 64;

/// What a step costs on the pretend machine: 5 ms, 1.3 ms per decode (its row computes logits), 1 ms per prefill
/// token.
fn cost(step: &SchedulerOutput) -> f64 {
    let decodes = step.chunks.iter().filter(|c| !c.prefill).count();
    0.005 + 0.0013 * decodes as f64 + 0.001 * (step.num_tokens() - decodes) as f64
}

fn scheduler(step_budget: StepBudget) -> Scheduler {
    let limits = SchedulerLimits { max_num_seqs: 16, max_num_batched_tokens: BATCH, speculative: None, step_budget };
    Scheduler::new(limits, KvPools::new(PrefixCachingAllocator::new(512, 16, 0, false), None), 4096)
}

/// A sequence of `prompt` tokens and `priority`, generating until told to stop.
fn sequence(id: SeqId, prompt: usize, priority: i32) -> Sequence {
    let waker: Weak<dyn CancelWaker> = Weak::<EngineShared>::new();
    let r = RequestShared::new(id, 1, prompt as u32, false, EngineClock::new(), None, waker);
    let tokens: Vec<u32> = (0..prompt as u32).map(|t| t % 50).collect();
    let given = RequestOptions { priority, ..Default::default() };
    let options = Arc::new(SharedOptions::resolve(given, &[], 0.0));
    Sequence::new(id, r, 0, &tokens, 10_000, options, Sampler::new(SamplingParams::default(), &tokens, 0))
}

/// Plans a step, "runs" it at [`cost`] and applies it (every sampling chunk samples token 7).
fn step(s: &mut Scheduler) -> SchedulerOutput {
    let plan = s.schedule(0.0);
    s.observe_step(&plan, cost(&plan));
    let sampled = plan
        .chunks
        .iter()
        .filter(|c| c.samples)
        .map(|c| SampledToken { seq: c.seq, token: 7, ts: 0.0, logprob: None })
        .collect();
    s.update_from_output(&plan, RunnerOutput { sampled }, &EngineClock::new(), 0.0);
    plan
}

/// The prefill chunks of sequence `id` in `plan`.
fn chunk_of(plan: &SchedulerOutput, id: SeqId) -> Option<usize> {
    plan.chunks.iter().find(|c| c.seq == id && c.prefill).map(|c| c.n_tokens)
}

/// Four streams decoding (their 8-token prompts prefilled in one step, then `decode_steps` decode-only steps),
/// then a prompt of `long` tokens arriving as sequence 4.
fn streams_then_a_prompt(step_budget: StepBudget, decode_steps: usize, long: usize) -> Scheduler {
    let mut s = scheduler(step_budget);
    for id in 0..4 {
        s.add(sequence(id, 8, 0));
    }
    let first = step(&mut s);
    assert_eq!(first.num_tokens(), 32, "no decodes yet: every prompt whole");
    for _ in 0..decode_steps {
        assert_eq!(step(&mut s).num_tokens(), 4);
    }
    s.add(sequence(4, long, 0));
    s
}

/// The chunks the long prompt (sequence 4) took until it sampled, and each step's cost, with a fresh
/// `step_budget` scheduler beside four streams.
fn prefill_beside_streams(step_budget: StepBudget) -> (Vec<usize>, Vec<f64>) {
    let mut s = streams_then_a_prompt(step_budget, 3, 300);
    let (mut chunks, mut costs) = (Vec::new(), Vec::new());
    loop {
        let plan = step(&mut s);
        assert_eq!(plan.chunks.iter().filter(|c| !c.prefill).count(), 4, "every stream decodes in every step");
        chunks.extend(chunk_of(&plan, 4));
        costs.push(cost(&plan));
        if plan.chunks.iter().any(|c| c.seq == 4 && c.samples) {
            return (chunks, costs);
        }
    }
}

#[test]
fn a_prompt_beside_decodes_is_prefilled_in_chunks_whose_steps_stay_within_the_target() {
    let (whole, whole_costs) = prefill_beside_streams(StepBudget::Throughput);
    assert_eq!(whole, [60, 60, 60, 60, 60], "throughput: what the 4 decodes leave of 64");
    assert!(whole_costs.iter().all(|&c| c > 0.07), "{whole_costs:?}");
    // 30 ms: 4 decodes cost 10.2 ms, so about 19 prefill tokens fit beside them.
    let (budgeted, costs) = prefill_beside_streams(StepBudget::TargetMs(30.0));
    assert_eq!(budgeted.iter().sum::<usize>(), 300);
    assert!(budgeted.len() > whole.len(), "{budgeted:?}");
    // The first step's estimate comes from the line between 4 decodes and the streams' own 32-token prefill
    // step, which costs less than 4 decodes and 28 prompt tokens would: 20 tokens, 30.2 ms. Once that step is
    // seen, every step is within the target.
    assert!(costs[0] <= 0.0305, "{costs:?}");
    assert!(costs[1..].iter().all(|&c| c <= 0.030 + 1e-9), "within 30 ms: {costs:?}");
    assert!(budgeted[..budgeted.len() - 1].iter().all(|&n| n >= 17), "and near it: {budgeted:?}");
    // auto: 1.25 × 10.2 ms leaves 2.5 ms, 2 tokens: the minimum chunk, an eighth of 64.
    let (auto, _) = prefill_beside_streams(StepBudget::Auto);
    assert!(auto[..auto.len() - 1].iter().all(|&n| n == 8), "{auto:?}");
}

#[test]
fn costs_not_yet_known_leave_the_whole_token_budget() {
    // A one-token prompt: its step is the only one with prefill, and no larger than a step of one decode, so
    // nothing is known of a decode's step with prefill beside it.
    let mut s = scheduler(StepBudget::TargetMs(30.0));
    s.add(sequence(0, 1, 0));
    step(&mut s);
    step(&mut s);
    s.add(sequence(1, 300, 0));
    let plan = step(&mut s);
    assert_eq!(chunk_of(&plan, 1), Some(63), "today's plan: nothing known of steps with prefill");
    let plan = step(&mut s);
    assert!(chunk_of(&plan, 1).is_some_and(|n| n < 63), "then the step it taught limits the next");
}

#[test]
fn a_step_without_decodes_takes_the_whole_token_budget() {
    let mut s = streams_then_a_prompt(StepBudget::TargetMs(1.0), 3, 300);
    for id in 0..4 {
        s.finish(id, crate::engine::output::finish::FinishReason::Stop);
    }
    s.take_finished();
    let plan = step(&mut s);
    assert_eq!(chunk_of(&plan, 4), Some(BATCH), "no stream waits on this step");
}

#[test]
fn the_minimum_chunk_keeps_a_prompt_moving_when_the_decodes_alone_exceed_the_target() {
    let (chunks, _) = prefill_beside_streams(StepBudget::TargetMs(1.0));
    assert_eq!(chunks.iter().sum::<usize>(), 300);
    assert!(chunks.iter().all(|&n| n == 8 || n == 300 % 8), "{chunks:?}");
}

#[test]
fn throughput_plans_what_the_scheduler_planned_before_the_option() {
    // Decodes first, then running prefills in admission order, then admissions, each within what is left.
    let mut s = scheduler(StepBudget::Throughput);
    s.add(sequence(0, 8, 0));
    step(&mut s);
    s.add(sequence(1, 100, 0));
    s.add(sequence(2, 100, 0));
    let plan = step(&mut s);
    let shape: Vec<(SeqId, usize, bool)> = plan.chunks.iter().map(|c| (c.seq, c.n_tokens, c.prefill)).collect();
    assert_eq!(shape, [(0, 1, false), (1, 63, true)]);
    let plan = step(&mut s);
    let shape: Vec<(SeqId, usize, bool)> = plan.chunks.iter().map(|c| (c.seq, c.n_tokens, c.prefill)).collect();
    assert_eq!(shape, [(0, 1, false), (1, 37, true), (2, 26, true)]);
}

#[test]
fn a_higher_priority_prompt_takes_the_budgeted_prefill_before_a_running_one() {
    let mut s = streams_then_a_prompt(StepBudget::TargetMs(30.0), 3, 300);
    let plan = step(&mut s);
    let first = chunk_of(&plan, 4).expect("the long prompt started");
    s.add(sequence(5, 40, -1)); // more urgent
    s.add(sequence(6, 40, 0)); // as urgent as the long prompt: after it
    let plan = step(&mut s);
    let prefills: Vec<(SeqId, usize)> = plan.chunks.iter().filter(|c| c.prefill).map(|c| (c.seq, c.n_tokens)).collect();
    assert_eq!(prefills[0].0, 5, "the urgent prompt first: {prefills:?}");
    assert!(prefills[0].1 >= first.min(17), "with the step's prefill: {prefills:?}");
    assert!(prefills.iter().all(|&(id, _)| id != 6), "the later one of the same priority waits: {prefills:?}");
}
