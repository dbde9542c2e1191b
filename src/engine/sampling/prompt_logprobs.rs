//! A prompt's log probabilities (vLLM's `prompt_logprobs`, and the legacy `echo` with `logprobs`): how likely the
//! model finds each prompt token given the ones before it, teacher-forced, so that a host can evaluate a text
//! through the API (perplexity, scoring answers).
//!
//! # How they are computed
//!
//! Position `p`'s logits predict token `p + 1`, so the prompt's chunks ask the backend for the logits of every
//! row (`SeqChunk::logit_rows`), not only the last one; the step runner turns rows into entries as they come,
//! with the same numbers as sampled tokens' (`sampling/logprobs.rs`: the raw model's log-softmax). The first
//! token has no entry: nothing predicts it.
//!
//! # What keeps them exact and bounded
//!
//! - **Computed once per prompt**, by its first choice (the one that bills it), and published to every choice of
//!   the prompt before any of them sees an event: siblings are admitted after it and preempted before it, so its
//!   prefill ends no later than theirs.
//! - **No prefix-cache hits past what is scored**: a cached position has no logits. A scoring sequence takes at
//!   most the cached run it already scored (after a preemption), nothing on its first admission.
//! - **Not scored twice**: a preempted sequence recomputes its prompt, but rows already scored ask for no logits.
//! - **Chunks of at most [`SCORING_CHUNK_TOKENS`]** while scoring, so that the logits rows of a step stay small
//!   (a row is a whole vocabulary: 1 MiB for Gemma 3's 262,144 tokens).

use std::ops::Range;
use std::sync::Arc;

use super::TokenLogprob;

/// The largest prefill chunk of a sequence that is still scoring its prompt.
pub const SCORING_CHUNK_TOKENS: usize = 32;

/// One prompt token's log probability, its most likely alternatives at that position, and its rank there.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptTokenLogprob {
    pub logprob: TokenLogprob,
    /// 1 + the number of tokens the model found strictly more likely (vLLM's `rank`).
    pub rank: u32,
}

/// A sequence's scoring of its prompt, as its chunks are computed.
#[derive(Debug)]
pub struct PromptScoring {
    /// Alternatives per position.
    pub top: usize,
    /// The choices that report the result: every choice of the prompt.
    pub choices: Range<usize>,
    /// Entries for prompt tokens `1 ..= scored.len()`.
    scored: Vec<PromptTokenLogprob>,
    published: bool,
}

impl PromptScoring {
    pub fn new(top: usize, choices: Range<usize>) -> Self {
        PromptScoring { top, choices, scored: Vec::new(), published: false }
    }

    /// Positions whose rows score the next prompt token, among a chunk of positions `start .. start + n` of a
    /// prompt of `prompt_len` tokens: those not scored yet, before the prompt's last position (whose row samples
    /// the first generated token instead).
    pub fn rows_to_score(&self, start: usize, n: usize, prompt_len: usize) -> Range<usize> {
        let from = start.max(self.scored.len());
        let to = (start + n).min(prompt_len.saturating_sub(1));
        from..to.max(from)
    }

    /// Positions before which the prefix cache may serve the sequence: the ones whose rows were scored.
    pub fn cacheable_positions(&self) -> usize {
        self.scored.len()
    }

    /// Records the entry of position `pos` (the one after the last recorded).
    pub fn push(&mut self, pos: usize, entry: PromptTokenLogprob) {
        debug_assert_eq!(pos, self.scored.len(), "prompt positions are scored in order");
        self.scored.push(entry);
    }

    pub fn is_complete(&self, prompt_len: usize) -> bool {
        self.scored.len() + 1 >= prompt_len
    }

    /// The finished entries, once: when every prompt token but the first is scored and they were not taken yet.
    pub fn take_finished(&mut self, prompt_len: usize) -> Option<Arc<[PromptTokenLogprob]>> {
        if self.published || !self.is_complete(prompt_len) {
            return None;
        }
        self.published = true;
        Some(std::mem::take(&mut self.scored).into())
    }

    /// Whether the result was handed out (nothing more to compute, even after a preemption).
    pub fn is_published(&self) -> bool {
        self.published
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(token: u32) -> PromptTokenLogprob {
        PromptTokenLogprob { logprob: TokenLogprob { token, logprob: -1.0, top: Vec::new() }, rank: 1 }
    }

    #[test]
    fn chunks_score_every_position_but_the_last_once() {
        let mut s = PromptScoring::new(0, 0..1);
        // A 5-token prompt in chunks of 2, 2, 1: rows 0..2 and 2..4 score, the last chunk's row samples.
        assert_eq!(s.rows_to_score(0, 2, 5), 0..2);
        s.push(0, entry(1));
        s.push(1, entry(2));
        assert_eq!(s.rows_to_score(2, 2, 5), 2..4);
        s.push(2, entry(3));
        assert!(!s.is_complete(5) && s.take_finished(5).is_none());
        s.push(3, entry(4));
        assert_eq!(s.rows_to_score(4, 1, 5), 4..4);
        let done = s.take_finished(5).expect("complete");
        assert_eq!(done.iter().map(|e| e.logprob.token).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert!(s.take_finished(5).is_none(), "handed out once");
        assert!(s.is_published());
    }

    #[test]
    fn a_recomputed_prefix_is_not_scored_again_and_the_cache_serves_only_what_was_scored() {
        let mut s = PromptScoring::new(2, 0..3);
        s.push(0, entry(1));
        s.push(1, entry(2));
        s.push(2, entry(3));
        assert_eq!(s.cacheable_positions(), 3);
        // After a preemption, the prompt is recomputed from 0: only positions 3.. still need logits.
        assert_eq!(s.rows_to_score(0, 8, 10), 3..8);
        assert!(s.rows_to_score(0, 2, 10).is_empty(), "nothing when the chunk holds nothing new");
    }

    #[test]
    fn a_one_token_prompt_has_nothing_to_score() {
        let mut s = PromptScoring::new(0, 0..1);
        assert_eq!(s.rows_to_score(0, 1, 1), 0..0);
        assert_eq!(s.take_finished(1).map(|d| d.len()), Some(0));
        assert_eq!(PromptScoring::new(0, 0..1).rows_to_score(0, 0, 0), 0..0);
    }
}
