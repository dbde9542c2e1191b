//! Speculative decoding in the engine step, on a fake backend whose next token is a function of the current one
//! (a cycle): drafts from the sequence's own text are then right, and the outputs must equal plain decoding's,
//! whether the backend returns logits rows (the CPU's way) or takes each row's argmax itself (the GPU's way: a
//! draft's rows come back as ids only, `BatchForward::run_top_k`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::core::{EngineCore, EngineShared, NewRequest};
use super::runner::BatchForward;
use super::scheduler::SchedulerLimits;
use super::step_budget::StepBudget;
use super::step_runner::StepRunner;
use super::StepError;
use crate::engine::api::seq_options::SharedOptions;
use crate::engine::kv::kv_pools::KvPools;
use crate::engine::kv::kv_prefix::PrefixCachingAllocator;
use crate::engine::observe::stats::EngineClock;
use crate::engine::output::{CancelWaker, RequestHandle, RequestShared};
use crate::engine::sampling::{Sampler, SamplingParams};
use crate::engine::sequence::Sequence;
use crate::engine::speculative::{SpeculativeConfig, SpeculativeMethod};
use crate::model::llama::SeqChunk;
use crate::model::tokenizer::{Tokenizer, TokenizerSpec};
use crate::model::TokenId;

/// Tokens of the fake vocabulary: three that cycle (a → b → c → a), and an end-of-generation one never chosen.
const VOCAB: usize = 4;

/// The fake model: after token `t` comes `(t + 1) % 3`. `device`: it can take the argmax itself, and counts
/// in `draft_rows` the rows it served so for chunks of more than one (a draft's).
struct Cycle {
    device: bool,
    draft_rows: Arc<AtomicUsize>,
}

/// The fake model's choice after each logits row's input token, row by row in batch order.
fn rows_inputs(batch: &[SeqChunk<'_>]) -> Vec<TokenId> {
    batch.iter().flat_map(|c| c.tokens[c.tokens.len() - c.logit_rows..].iter().copied()).collect()
}

impl BatchForward for Cycle {
    fn run(&mut self, batch: &[SeqChunk<'_>], logits: &mut [f32]) -> Result<(), StepError> {
        for (row, input) in logits.chunks_mut(VOCAB).zip(rows_inputs(batch)) {
            row.fill(0.0);
            row[(input as usize + 1) % 3] = 5.0;
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
        if !self.device {
            return None;
        }
        let inputs = rows_inputs(batch);
        assert_eq!(ids.len(), inputs.len(), "one id per logits row");
        let multi_row = batch.iter().filter(|c| c.logit_rows > 1).map(|c| c.logit_rows).sum();
        self.draft_rows.fetch_add(multi_row, Ordering::Relaxed);
        for (i, input) in inputs.into_iter().enumerate() {
            (ids[i], values[i]) = ((input + 1) % 3, 5.0);
        }
        Some(Ok(()))
    }
    fn describe(&self) -> String {
        "cycle".into()
    }
    fn max_batch_tokens(&self) -> usize {
        64
    }
}

fn tokenizer() -> Tokenizer {
    let tokens: Vec<String> = ["a", "b", "c", "<|endoftext|>"].iter().map(|s| s.to_string()).collect();
    Tokenizer::from_spec(&TokenizerSpec::new(&tokens, &[], "smollm")).unwrap()
}

/// Runs two greedy requests of 24 tokens after the prompt "a b c a b" to the end: `speculative` or not, on a
/// backend that takes the argmax on the `device` or not. Returns their token ids, the draft tokens the engine
/// verified and accepted, and the rows of drafts the device served.
fn run(speculative: bool, device: bool) -> (Vec<Vec<TokenId>>, u64, u64, usize) {
    let tokenizer = tokenizer();
    let shared = Arc::new(EngineShared::default());
    let waker: std::sync::Weak<dyn CancelWaker> = Arc::downgrade(&shared) as _;
    let prompt = [0, 1, 2, 0, 1];
    let handles: Vec<RequestHandle> = (0..2)
        .map(|id| {
            let r = RequestShared::new(id, 1, prompt.len() as u32, false, EngineClock::new(), None, waker.clone());
            let sampler = Sampler::new(SamplingParams::default(), &prompt, 0);
            let stops = SharedOptions::stopping_at(tokenizer.eog_ids());
            let seq = Sequence::new(0, Arc::clone(&r), 0, &prompt, 24, stops, sampler);
            shared.inbox.lock().unwrap().new.push(NewRequest { sequences: vec![seq] });
            RequestHandle::new(r)
        })
        .collect();
    let speculative = speculative.then_some(SpeculativeConfig {
        method: SpeculativeMethod::Ngram,
        num_speculative_tokens: 4,
        prompt_lookup_min: 2,
        prompt_lookup_max: 3,
        draft_policy: Default::default(),
    });
    let limits = SchedulerLimits {
        max_num_seqs: 4,
        max_num_batched_tokens: 64,
        speculative,
        step_budget: StepBudget::Throughput,
    };
    let blocks = KvPools::new(PrefixCachingAllocator::new(16, 16, 0, true), None);
    let draft_rows = Arc::new(AtomicUsize::new(0));
    let runner = StepRunner::new(Box::new(Cycle { device, draft_rows: Arc::clone(&draft_rows) }), VOCAB);
    let mut core = EngineCore::new(Arc::clone(&shared), runner, &tokenizer, EngineClock::new(), limits, blocks, 256);
    core.run_until_idle();
    let ids = handles.iter().map(|h| h.choices().remove(0).token_ids).collect();
    let (drafted, accepted) =
        (shared.draft_tokens.load(Ordering::Relaxed), shared.accepted_draft_tokens.load(Ordering::Relaxed));
    (ids, drafted, accepted, draft_rows.load(Ordering::Relaxed))
}

#[test]
fn drafts_verified_on_the_host_or_the_device_give_plain_decodings_tokens() {
    let cycle: Vec<TokenId> = (0..24).map(|i| (i + 2) % 3).collect();
    let (plain, drafted, _, _) = run(false, false);
    assert_eq!(plain, [cycle.clone(), cycle.clone()]);
    assert_eq!(drafted, 0, "no drafts without the option");
    for device in [false, true] {
        let (ids, drafted, accepted, device_rows) = run(true, device);
        assert_eq!(ids, plain, "device argmax: {device}");
        assert!(accepted > 0 && accepted == drafted, "every draft of a cycle is right: {accepted} of {drafted}");
        assert_eq!(device_rows > 0, device, "the device verified drafts' rows: {device_rows}");
    }
}
