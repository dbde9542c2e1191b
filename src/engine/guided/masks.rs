//! The masks of a step, computed beside its forward pass.
//!
//! The forward pass reads the sequences (tokens, block tables) while the masks need their matchers mutably, so
//! the matchers of the step's constrained, sampling sequences are moved out of them for the duration of the
//! forward and moved back before sampling. A mask depends only on the tokens accepted before this step, so it
//! can be computed before the logits exist.

use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::matcher::GuidedMatcher;
use crate::engine::sequence::{SeqId, Sequence};
use crate::engine::step::SchedulerOutput;

/// The matchers taken out of a step's sequences, and each mask's time once computed.
pub(crate) struct MaskJobs {
    jobs: Vec<(SeqId, Box<GuidedMatcher>)>,
    times: Vec<Duration>,
}

impl MaskJobs {
    /// Takes the matchers of the constrained sequences that sample in `step`.
    pub fn take(step: &SchedulerOutput, seqs: &mut FxHashMap<SeqId, Sequence>) -> Self {
        let jobs: Vec<(SeqId, Box<GuidedMatcher>)> = step
            .chunks
            .iter()
            .filter(|c| c.samples)
            .filter_map(|c| {
                let seq = seqs.get_mut(&c.seq).expect("scheduled sequences exist");
                seq.sampling.take_matcher().map(|m| (c.seq, m))
            })
            .collect();
        MaskJobs { times: Vec::with_capacity(jobs.len()), jobs }
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Computes every mask, timing each (run on the helper thread).
    pub fn compute(&mut self) {
        for (_, matcher) in &mut self.jobs {
            if !matcher.has_mask() {
                let start = Instant::now();
                matcher.compute_mask();
                self.times.push(start.elapsed());
            }
        }
    }

    /// Each mask's time, in the order computed.
    pub fn times(&self) -> &[Duration] {
        &self.times
    }

    /// Gives the matchers back to their sequences.
    pub fn restore(self, seqs: &mut FxHashMap<SeqId, Sequence>) {
        for (id, matcher) in self.jobs {
            seqs.get_mut(&id).expect("scheduled sequences exist").sampling.restore_matcher(matcher);
        }
    }
}
