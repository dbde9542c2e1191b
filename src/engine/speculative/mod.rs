//! n-gram speculative decoding (prompt lookup; vLLM's `ngram` method, llama.cpp's lookup decoding): several
//! tokens per pass over the weights, for a sequence whose text repeats what it has seen.
//!
//! # How
//!
//! A decoding sequence's last `n` tokens (`n` from `prompt_lookup_max` down to `prompt_lookup_min`) are looked up
//! in its own tokens (prompt and generated so far); the tokens that followed their most recent earlier occurrence
//! are the draft, up to `num_speculative_tokens` (`ngram.rs`). The step computes the sequence's last token and
//! the draft as one chunk (`d + 1` positions, every row's logits), and the step runner samples the rows in order
//! with the sequence's own sampler, accepting draft tokens while the sampled token equals the draft's: 1 to
//! `d + 1` tokens per step. Rejected positions' keys and values are left behind `num_computed` and overwritten
//! by the next step; prefix-cache blocks are registered only up to `num_computed`, so no rejected position is
//! ever cached.
//!
//! # Exactness, greedy and sampled
//!
//! The kernels compute a row of a chunk bit for bit as they compute a decode row (batch invariance,
//! `docs/architecture.md`), so each row's logits are the ones plain decoding would see at that position. Every
//! token emitted is drawn by the same sampler from the same row, one random number per emitted token in the same
//! order, as plain decoding draws them (a rejected draft token consumes nothing: the row that rejected it emits
//! the model's own token with that draw). So a greedy request's tokens, and a seeded sampled request's, are
//! identical with and without speculation.
//!
//! For temperature > 0 this is the speculative-sampling acceptance rule (Leviathan et al., Chen et al.) for a
//! draft that is one token with certainty (`q(x) = 1`): that rule accepts `x` with probability
//! `min(1, p(x)/q(x)) = p(x)` and otherwise draws from `max(0, p − q)` renormalized, which is `p` without `x`.
//! Drawing `y ~ p` and accepting when `y = x` accepts with probability `p(x)` and, on rejection, leaves `y`
//! distributed as `p` without `x`: the same rule, coupled to the draw plain decoding makes.
//!
//! # When
//!
//! Every decoding sequence may speculate (greedy or sampled, with `logit_bias`, `logprobs` and `min_tokens`)
//! unless it opted out (`speculative_decoding: false`), has penalties (their counts would have to include the
//! draft tokens before they are accepted) or a grammar (its matcher would have to walk the draft), and not on a
//! model whose sliding-window layers keep a pool of their own (its release rule assumes positions only grow).
//!
//! How many draft tokens each sequence verifies is decided per step (`plan.rs`): from the step's cost, learned per
//! step size (`engine/step/step_cost.rs`, the scheduler's), and each draft token's chance of acceptance, learned per
//! match length and sequence (`acceptance.rs`). A step already compute-bound (many sequences decoding) takes few
//! drafts or none.
//!
//! A sequence's drafts (`seq_draft.rs`, `Sequence::draft`) pass through three stages: the scheduler plans one for a
//! step, the step runner verifies it, and the output stage appends what it yielded; each changes it through a
//! method of its own.

use serde::{Deserialize, Serialize};

use crate::model::TokenId;

pub mod acceptance;
pub mod ngram;
pub mod plan;
pub mod seq_draft;

use crate::engine::step::step_cost::StepCostModel;
use acceptance::{AcceptanceRates, SeqAcceptance};
use ngram::Draft;
use plan::{plan_drafts, DraftOffer};

/// The most tokens a draft may have (`num_speculative_tokens`) and the longest n-gram looked up.
pub const MAX_SPECULATIVE_TOKENS: usize = 16;

/// The drafting method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SpeculativeMethod {
    /// Prompt lookup: drafts from the sequence's own earlier tokens.
    Ngram,
}

/// How many of the tokens a draft offers a step verifies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DraftPolicy {
    /// As many as raise the step's expected throughput (`plan.rs`): none when drafting does not pay.
    #[default]
    Adaptive,
    /// All of them, within the step's token budget and free blocks (vLLM's `ngram` behaviour): for a backend
    /// known to verify cheaply, and for tests, whose steps must not depend on timing.
    Always,
}

/// The engine's `speculative` option: `{"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": a,
/// "prompt_lookup_max": b, "draft_policy": "adaptive" | "always"}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeConfig {
    pub method: SpeculativeMethod,
    /// Most draft tokens per sequence and step.
    pub num_speculative_tokens: usize,
    /// The shortest n-gram looked up.
    #[serde(default = "default_lookup_min")]
    pub prompt_lookup_min: usize,
    /// The longest n-gram looked up (tried first: a longer match predicts better).
    #[serde(default = "default_lookup_max")]
    pub prompt_lookup_max: usize,
    /// How much of each draft a step verifies.
    #[serde(default)]
    pub draft_policy: DraftPolicy,
}

fn default_lookup_min() -> usize {
    2
}

fn default_lookup_max() -> usize {
    4
}

impl SpeculativeConfig {
    /// Why the option cannot work, if it cannot.
    pub fn problem(&self) -> Option<String> {
        let (k, min, max) = (self.num_speculative_tokens, self.prompt_lookup_min, self.prompt_lookup_max);
        if !(1..=MAX_SPECULATIVE_TOKENS).contains(&k) {
            return Some(format!(
                "speculative.num_speculative_tokens must be in 1..={MAX_SPECULATIVE_TOKENS}, got {k}"
            ));
        }
        if min == 0 || min > max || max > MAX_SPECULATIVE_TOKENS {
            return Some(format!(
                "speculative needs 1 <= prompt_lookup_min <= prompt_lookup_max <= {MAX_SPECULATIVE_TOKENS}, got \
                 {min} and {max}"
            ));
        }
        None
    }

    /// The draft that follows `tokens`, at most `limit` tokens (and the configured most): from the request's
    /// `predicted` text first, when it has one, else from `tokens` themselves; see `ngram.rs`.
    pub fn propose(&self, tokens: &[TokenId], predicted: Option<&[TokenId]>, limit: usize) -> Option<Draft> {
        let limit = self.num_speculative_tokens.min(limit);
        let (min, max) = (self.prompt_lookup_min, self.prompt_lookup_max);
        predicted
            .and_then(|p| ngram::propose_from(p, tokens, min, max, limit))
            .or_else(|| ngram::propose(tokens, min, max, limit))
    }
}

/// The engine's speculation: its option and what it has learned of acceptance. The scheduler holds it when
/// speculation is on, and lends it the cost of steps in which every row samples (`StepCosts::decode`, which the
/// step budget reads too).
#[derive(Clone, Debug)]
pub struct Speculator {
    pub config: SpeculativeConfig,
    rates: AcceptanceRates,
}

impl Speculator {
    pub fn new(config: SpeculativeConfig) -> Self {
        Speculator { config, rates: AcceptanceRates::default() }
    }

    /// Whether any draft could pay in a step of `base_tokens` tokens: one certain token must beat the plain
    /// step's rate (it cannot when each token costs what the last did); always with [`DraftPolicy::Always`].
    /// Checked before drafts are looked up, so that a compute-bound step of many sequences does not search their
    /// texts for nothing.
    pub fn may_pay(&self, cost: &StepCostModel, base_tokens: usize) -> bool {
        if self.config.draft_policy == DraftPolicy::Always {
            return true;
        }
        match (cost.estimate(base_tokens), cost.estimate(base_tokens + 1)) {
            (Some(base), Some(more)) => (base_tokens + 1) as f64 / more > base_tokens as f64 / base,
            _ => false,
        }
    }

    /// The offer of a sequence whose draft came from a `match_len`-token match and has `len` tokens.
    pub fn offer(&self, seq: &SeqAcceptance, match_len: usize, len: usize) -> DraftOffer {
        DraftOffer { len, p: self.rates.probability(seq, match_len) }
    }

    /// The draft tokens each offer gets in a step of `base_tokens` tokens with room for `max_draft_tokens`
    /// more: what the planner finds worth it (`plan.rs`), or with [`DraftPolicy::Always`] every offered token
    /// that fits, in the offers' order.
    pub fn plan(
        &self,
        cost: &StepCostModel,
        base_tokens: usize,
        offers: &[DraftOffer],
        max_draft_tokens: usize,
    ) -> Vec<usize> {
        match self.config.draft_policy {
            DraftPolicy::Adaptive => plan_drafts(base_tokens, offers, max_draft_tokens, cost),
            DraftPolicy::Always => {
                let mut room = max_draft_tokens;
                offers
                    .iter()
                    .map(|o| {
                        let taken = o.len.min(room);
                        room -= taken;
                        taken
                    })
                    .collect()
            }
        }
    }

    /// Records a verification (`AcceptanceRates::record`).
    pub fn record(&mut self, seq: &mut SeqAcceptance, match_len: usize, drafted: usize, accepted: usize) {
        self.rates.record(seq, match_len, drafted, accepted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ngram(k: usize, min: usize, max: usize) -> SpeculativeConfig {
        SpeculativeConfig {
            method: SpeculativeMethod::Ngram,
            num_speculative_tokens: k,
            prompt_lookup_min: min,
            prompt_lookup_max: max,
            draft_policy: DraftPolicy::Adaptive,
        }
    }

    #[test]
    fn a_draft_is_at_most_the_configured_length_and_the_callers_limit() {
        let tokens = [1, 2, 3, 4, 5, 6, 7, 1, 2];
        assert_eq!(ngram(3, 1, 3).propose(&tokens, None, 16).unwrap().tokens, [3, 4, 5]);
        assert_eq!(ngram(3, 1, 3).propose(&tokens, None, 2).unwrap().tokens, [3, 4]);
        assert_eq!(ngram(3, 3, 3).propose(&tokens, None, 16), None, "below the shortest n-gram");
    }

    #[test]
    fn impossible_options_are_named() {
        assert!(ngram(4, 2, 4).problem().is_none());
        assert!(ngram(0, 2, 4).problem().unwrap().contains("num_speculative_tokens"));
        assert!(ngram(4, 3, 2).problem().unwrap().contains("prompt_lookup_min"));
        assert!(ngram(4, 0, 2).problem().is_some());
        let parsed: SpeculativeConfig =
            serde_json::from_str(r#"{"method": "ngram", "num_speculative_tokens": 5}"#).unwrap();
        assert_eq!(parsed, ngram(5, 2, 4));
        assert!(
            serde_json::from_str::<SpeculativeConfig>(r#"{"method": "eagle", "num_speculative_tokens": 5}"#).is_err()
        );
        let always = r#"{"method": "ngram", "num_speculative_tokens": 5, "draft_policy": "always"}"#;
        assert_eq!(serde_json::from_str::<SpeculativeConfig>(always).unwrap().draft_policy, DraftPolicy::Always);
    }

    #[test]
    fn the_always_policy_takes_every_offered_token_that_fits() {
        let always = Speculator::new(SpeculativeConfig { draft_policy: DraftPolicy::Always, ..ngram(4, 2, 4) });
        let offers = [DraftOffer { len: 3, p: 0.0 }, DraftOffer { len: 4, p: 0.9 }, DraftOffer { len: 2, p: 0.5 }];
        let unknown = StepCostModel::default();
        assert!(always.may_pay(&unknown, 64), "whatever the costs (none are known)");
        assert_eq!(always.plan(&unknown, 2, &offers, 16), [3, 4, 2]);
        assert_eq!(always.plan(&unknown, 2, &offers, 5), [3, 2, 0], "within the step's room, in order");
        let adaptive = Speculator::new(ngram(4, 2, 4));
        assert!(!adaptive.may_pay(&unknown, 1), "no costs known: no drafts");
        assert_eq!(adaptive.plan(&unknown, 2, &offers, 16), [0, 0, 0]);
    }
}
