//! The step and its scheduler: the engine thread (`core.rs`) takes the submitted sequences and runs steps, each a
//! pipeline of typed stages (`docs/architecture.md`, "One engine step"): the scheduler plans which tokens of which
//! sequences the step computes (`scheduler.rs`, within the step budget of `step_budget.rs`, from the costs
//! `step_cost.rs` learns), the step runner runs them as one batched forward pass and samples (`step_runner.rs`,
//! over the backend `runner.rs` builds, with `cpu_threads.rs`'s thread count), the scheduler's update applies
//! what was sampled, the output stage turns tokens into text, and finished sequences are retired.
//!
//! Owns: the sequences and their queues, and each sequence's state (`SeqState`: the scheduler's); each sequence's
//! sampler, grammar matcher and prompt scoring (`SeqSampling`: the step runner's); the backend.
//!
//! What the stages of a step hand each other is defined here: the scheduler's plan ([`SchedulerOutput`], its
//! [`ScheduledChunk`]s) goes to the runner; the runner's sampled tokens ([`RunnerOutput`]) go back to the
//! scheduler's update, or a [`StepError`] ends the step. So the stages depend on these types and not on one
//! another (scheduler → step ← step_runner → runner → step).

pub(super) mod core;
pub mod cpu_threads;
#[cfg(test)]
mod guided_step_tests;
pub mod runner;
pub mod scheduler;
#[cfg(test)]
mod speculative_step_tests;
pub mod step_budget;
#[cfg(test)]
mod step_budget_tests;
pub mod step_cost;
pub mod step_runner;
#[cfg(test)]
mod window_pool_tests;

use std::fmt;

use crate::backend::cuda::CudaBackendError;
use crate::engine::sampling::TokenLogprob;
use crate::engine::sequence::SeqId;
use crate::model::llama::batch::BatchError;
use crate::model::TokenId;

/// A sequence's share of a step: compute its tokens `start..start + n_tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledChunk {
    pub seq: SeqId,
    /// The first position computed (the sequence's computed positions before the step).
    pub start: usize,
    pub n_tokens: usize,
    /// Whether the chunk reaches the sequence's last token, so that the step samples its next one.
    pub samples: bool,
    /// Whether this is prefill work: a prompt, or a recomputation after preemption (a decode computes just the
    /// token sampled the step before).
    pub prefill: bool,
    /// Draft tokens after the sequence's last token, to verify (`speculative/`; 0 without a draft).
    pub draft: usize,
}

/// What the scheduler decided for one step.
#[derive(Debug, Default)]
pub struct SchedulerOutput {
    /// The batch, in the order the runner computes it.
    pub chunks: Vec<ScheduledChunk>,
    /// Sequences preempted while scheduling (back in the waiting queue, blocks freed).
    pub preempted: Vec<SeqId>,
    /// Sequences dropped for a window-pool shortage, which the pool's sizing rules out (an engine bug): already
    /// finished with `Error`, blocks freed; the engine fails their requests with an internal error.
    pub failed: Vec<SeqId>,
}

impl SchedulerOutput {
    /// Tokens computed by the step.
    pub fn num_tokens(&self) -> usize {
        self.chunks.iter().map(|c| c.n_tokens).sum()
    }
}

/// Why a step's forward pass failed.
#[derive(Debug)]
pub enum StepError {
    /// The batch was refused by the backend's checks (an engine bug: the scheduler builds valid batches).
    Batch(BatchError),
    /// The GPU failed (a driver call, a poisoned device, a panic caught at the backend's boundary).
    Cuda(CudaBackendError),
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Batch(e) => write!(f, "invalid batch: {e}"),
            StepError::Cuda(e) => write!(f, "CUDA: {e}"),
        }
    }
}

impl std::error::Error for StepError {}

impl From<BatchError> for StepError {
    fn from(e: BatchError) -> Self {
        StepError::Batch(e)
    }
}

impl From<CudaBackendError> for StepError {
    fn from(e: CudaBackendError) -> Self {
        match e {
            CudaBackendError::Batch(b) => StepError::Batch(b),
            other => StepError::Cuda(other),
        }
    }
}

/// A token sampled for a sequence, and when (monotonic): right after it was on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct SampledToken {
    pub seq: SeqId,
    pub token: TokenId,
    pub ts: f64,
    /// Its log probability and alternatives, when the sequence asked for them (`Sequence::logprobs`, the request's `logprobs`).
    pub logprob: Option<TokenLogprob>,
}

/// What a step computed: the sampled tokens of each chunk that samples, in the scheduler's chunk order: one, or
/// for a chunk with a draft its accepted draft tokens and the model's next token (`speculative.rs`).
#[derive(Debug, Default)]
pub struct RunnerOutput {
    pub sampled: Vec<SampledToken>,
}
