//! A sequence's speculative drafts: the draft the scheduler plans for a step, what the step's verification
//! yielded for the output stage to append, and how the sequence's drafts have fared. Each stage changes it through
//! the transition that is its own: [`SeqDraft::plan`] and [`SeqDraft::drop_plan`] (the scheduler),
//! [`SeqDraft::verified`] (the scheduler's update), [`SeqDraft::next_accepted`] and [`SeqDraft::drop_accepted`]
//! (the output stage); the step runner only reads the draft it verifies.

use std::collections::VecDeque;

use super::acceptance::SeqAcceptance;
use super::Speculator;
use crate::engine::sampling::TokenLogprob;
use crate::model::TokenId;

/// A token a verified draft yielded after the first, with its timestamp and log probability.
pub type AcceptedToken = (TokenId, f64, Option<TokenLogprob>);

/// Speculative decoding's state of a sequence (`Sequence::draft`).
#[derive(Default)]
pub struct SeqDraft {
    /// The step's input when it verifies a draft: the last token, then the draft. Empty otherwise.
    input: Vec<TokenId>,
    /// The length of the match the draft being verified came from (`ngram.rs`).
    match_len: usize,
    /// How the sequence's drafts have fared (`acceptance.rs`).
    acceptance: SeqAcceptance,
    /// Tokens a verified draft yields after the first (the accepted draft tokens, then the model's own), for the
    /// output stage to append one at a time (`Sequence::append_accepted`).
    accepted_pending: VecDeque<AcceptedToken>,
}

impl SeqDraft {
    /// The step's input when it verifies a draft (the sequence's last token, then the draft); empty when it
    /// does not.
    pub fn input(&self) -> &[TokenId] {
        &self.input
    }

    /// How the sequence's drafts have fared: what the planner weighs its next draft by.
    pub fn acceptance(&self) -> &SeqAcceptance {
        &self.acceptance
    }

    /// The scheduler: the step verifies `draft`, from a `match_len`-token match, after the sequence's last token
    /// `last`.
    pub fn plan(&mut self, last: Option<TokenId>, draft: &[TokenId], match_len: usize) {
        self.input.clear();
        self.input.extend(last);
        self.input.extend(draft);
        self.match_len = match_len;
    }

    /// The scheduler: the sequence was preempted, and the draft planned for the step with it.
    pub fn drop_plan(&mut self) {
        self.input.clear();
    }

    /// The scheduler's update, after a step verified a draft of `drafted` tokens: keeps the tokens it yielded
    /// after the first (`rest`) for the output stage, and records how many of the draft's were accepted with the
    /// speculator (when there is one). Returns that number.
    pub fn verified(
        &mut self,
        drafted: usize,
        rest: impl IntoIterator<Item = AcceptedToken>,
        speculator: Option<&mut Speculator>,
    ) -> usize {
        self.accepted_pending.clear();
        self.accepted_pending.extend(rest);
        // d1..da then the model's token: `a` follow the first.
        let accepted = self.accepted_pending.len();
        self.input.clear();
        if let Some(speculator) = speculator {
            speculator.record(&mut self.acceptance, self.match_len, drafted, accepted);
        }
        accepted
    }

    /// The output stage: the next token the verified draft yielded, to append; `None` once all are.
    pub fn next_accepted(&mut self) -> Option<AcceptedToken> {
        self.accepted_pending.pop_front()
    }

    /// The output stage: the sequence ended, and the tokens the draft yielded after that point are dropped.
    pub fn drop_accepted(&mut self) {
        self.accepted_pending.clear();
    }
}
