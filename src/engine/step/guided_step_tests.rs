//! Structured outputs in the engine step, on a fake backend that can take the argmax "on the device": a
//! constrained sequence must be sampled from its masked row, never from the device's unmasked argmax.

use std::sync::Arc;

use super::core::{EngineCore, EngineShared, NewRequest};
use super::runner::BatchForward;
use super::scheduler::SchedulerLimits;
use super::step_budget::StepBudget;
use super::step_runner::StepRunner;
use super::StepError;
use crate::engine::api::seq_options::SharedOptions;
use crate::engine::guided::{GuidedCompiler, GuidedRequest, GuidedSpec};
use crate::engine::kv::kv_pools::KvPools;
use crate::engine::kv::kv_prefix::PrefixCachingAllocator;
use crate::engine::observe::stats::EngineClock;
use crate::engine::output::{CancelWaker, RequestHandle, RequestShared};
use crate::engine::sampling::{Sampler, SamplingParams};
use crate::engine::sequence::Sequence;
use crate::engine::FinishReason;
use crate::model::llama::batch::total_logit_rows;
use crate::model::llama::SeqChunk;
use crate::model::tokenizer::{Tokenizer, TokenizerSpec};
use crate::model::TokenId;

/// Token 0 ("a") always has the highest logit, token 1 ("b") the next; token 2 ends generation.
struct PrefersA;

impl BatchForward for PrefersA {
    fn run(&mut self, batch: &[SeqChunk<'_>], logits: &mut [f32]) -> Result<(), StepError> {
        for row in logits.chunks_mut(3).take(total_logit_rows(batch)) {
            row.copy_from_slice(&[5.0, 1.0, 0.0]);
        }
        Ok(())
    }
    fn run_top_k(
        &mut self,
        batch: &[SeqChunk<'_>],
        _k: usize,
        ids: &mut [TokenId],
        values: &mut [f32],
    ) -> Option<Result<(), StepError>> {
        let rows = total_logit_rows(batch);
        ids[..rows].fill(0);
        values[..rows].fill(5.0);
        Some(Ok(()))
    }
    fn describe(&self) -> String {
        "prefers a".into()
    }
    fn max_batch_tokens(&self) -> usize {
        16
    }
}

fn tokenizer() -> Tokenizer {
    let tokens: Vec<String> = ["a", "b", "<|endoftext|>"].iter().map(|s| s.to_string()).collect();
    Tokenizer::from_spec(&TokenizerSpec::new(&tokens, &[], "smollm")).unwrap()
}

/// Submits a greedy request for 4 tokens, constrained to `regex` when given.
fn submit(shared: &Arc<EngineShared>, tokenizer: &Tokenizer, id: u64, regex: Option<&str>) -> RequestHandle {
    let waker: std::sync::Weak<dyn CancelWaker> = Arc::downgrade(shared) as _;
    let r = RequestShared::new(id, 1, 1, false, EngineClock::new(), None, waker);
    let sampler = Sampler::new(SamplingParams::default(), &[0], 0);
    let seq = Sequence::new(0, Arc::clone(&r), 0, &[0], 4, SharedOptions::stopping_at(tokenizer.eog_ids()), sampler)
        .with_grammar(regex.map(|rx| {
            let request = GuidedRequest::new(GuidedSpec::Regex(rx.into()), "guided_regex");
            GuidedCompiler::new().compile(tokenizer, &request).unwrap().matcher()
        }));
    shared.inbox.lock().unwrap().new.push(NewRequest { sequences: vec![seq] });
    RequestHandle::new(r)
}

#[test]
fn a_constrained_sequence_is_never_given_the_devices_unmasked_argmax() {
    let tokenizer = tokenizer();
    let shared = Arc::new(EngineShared::default());
    let free = submit(&shared, &tokenizer, 1, None);
    let constrained = submit(&shared, &tokenizer, 2, Some("b+"));
    let limits = SchedulerLimits {
        max_num_seqs: 4,
        max_num_batched_tokens: 16,
        speculative: None,
        step_budget: StepBudget::Throughput,
    };
    let blocks = KvPools::new(PrefixCachingAllocator::new(8, 16, 0, true), None);
    let runner = StepRunner::new(Box::new(PrefersA), 3).with_mask_times(Arc::clone(&shared.mask_times));
    let mut core = EngineCore::new(Arc::clone(&shared), runner, &tokenizer, EngineClock::new(), limits, blocks, 64);
    core.run_until_idle();
    let (free, constrained) = (free.choices().remove(0), constrained.choices().remove(0));
    assert_eq!(free.token_ids, [0, 0, 0, 0], "the free sequence gets the argmax");
    assert_eq!(constrained.token_ids, [1, 1, 1, 1], "b is the best token b+ allows (end-of-generation is worse)");
    assert_eq!((constrained.text.as_str(), constrained.finish_reason), ("bbbb", Some(FinishReason::Length)));
    assert_eq!(shared.mask_times.summary().masks, 3, "one mask per constrained token but the first (at submit)");
}

#[test]
fn a_complete_grammar_ends_its_choice_with_stop_at_once() {
    let tokenizer = tokenizer();
    let shared = Arc::new(EngineShared::default());
    let h = submit(&shared, &tokenizer, 1, Some("ab"));
    let limits = SchedulerLimits {
        max_num_seqs: 4,
        max_num_batched_tokens: 16,
        speculative: None,
        step_budget: StepBudget::Throughput,
    };
    let blocks = KvPools::new(PrefixCachingAllocator::new(8, 16, 0, true), None);
    let runner = StepRunner::new(Box::new(PrefersA), 3);
    let mut core = EngineCore::new(Arc::clone(&shared), runner, &tokenizer, EngineClock::new(), limits, blocks, 64);
    core.run_until_idle();
    let c = h.choices().remove(0);
    assert_eq!((c.text.as_str(), c.finish_reason), ("ab", Some(FinishReason::Stop)), "no end-of-generation needed");
    assert_eq!(c.token_ids, [0, 1]);
}
