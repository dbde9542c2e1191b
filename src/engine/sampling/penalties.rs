//! The logit edits that depend on which tokens a request names or has seen: logit bias, and the repetition,
//! frequency and presence penalties. Each touches only the tokens concerned, never the whole row.

use rustc_hash::FxHashMap;

use super::params::SamplingParams;
use crate::model::TokenId;

/// Adds each `(token, bias)` to that token's logit (OpenAI `logit_bias`). Tokens outside the row are skipped:
/// [`SamplingParams::validate`] is where they are rejected, and sampling must not panic on what it was given.
pub(crate) fn apply_logit_bias(logits: &mut [f32], bias: &[(TokenId, f32)]) {
    for &(token, value) in bias {
        if let Some(logit) = logits.get_mut(token as usize) {
            *logit += value;
        }
    }
}

/// Where a token has occurred in one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Occurrences {
    /// Whether the prompt contains it (only recorded when the repetition penalty is on).
    in_prompt: bool,
    /// How many times it has been generated.
    generated: u32,
}

/// The tokens a request's penalties apply to: a sparse map, so that applying them costs time in the number of
/// distinct tokens seen rather than in the vocabulary size, and memory per request stays small when hundreds of
/// requests run at once.
#[derive(Clone, Debug, Default)]
pub(crate) struct TokenHistory {
    seen: FxHashMap<TokenId, Occurrences>,
}

impl TokenHistory {
    /// A history holding the prompt's tokens when the repetition penalty will need them (frequency and presence
    /// penalties count generated tokens only).
    pub(crate) fn new(prompt: &[TokenId], params: &SamplingParams) -> Self {
        let mut history = TokenHistory::default();
        if params.repetition_penalty != 1.0 {
            for &token in prompt {
                history.seen.entry(token).or_default().in_prompt = true;
            }
        }
        history
    }

    /// Records one generated token.
    pub(crate) fn record_generated(&mut self, token: TokenId) {
        let occurrences = self.seen.entry(token).or_default();
        occurrences.generated = occurrences.generated.saturating_add(1);
    }

    /// Applies the repetition penalty, then the frequency and presence penalties, in vLLM's order
    /// (`vllm/model_executor/layers/utils.py`, `apply_penalties`):
    ///
    /// - repetition, to every token in the prompt or generated: a positive logit is divided by the penalty and a
    ///   negative one multiplied, so that a penalty above 1 always makes the token less likely (the "penalized
    ///   sampling" of CTRL, Keskar et al. 2019, which divides every logit; Hugging Face and vLLM multiply negative
    ///   ones instead, since dividing those would raise them);
    /// - frequency and presence, to generated tokens: `logit -= count * frequency_penalty + presence_penalty`
    ///   (OpenAI API reference, "Frequency and presence penalties").
    ///
    /// Each token is edited independently, so the map's iteration order does not affect the result. Tokens
    /// outside the row are skipped.
    pub(crate) fn apply_penalties(&self, logits: &mut [f32], params: &SamplingParams) {
        let repetition = params.repetition_penalty;
        for (&token, occurrences) in &self.seen {
            let Some(logit) = logits.get_mut(token as usize) else { continue };
            if repetition != 1.0 {
                *logit = if *logit > 0.0 { *logit / repetition } else { *logit * repetition };
            }
            if occurrences.generated > 0 {
                *logit -= occurrences.generated as f32 * params.frequency_penalty + params.presence_penalty;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_tokens_are_kept_only_for_the_repetition_penalty() {
        let without = SamplingParams { frequency_penalty: 1.0, ..SamplingParams::default() };
        assert!(TokenHistory::new(&[1, 2, 3], &without).seen.is_empty());
        let with = SamplingParams { repetition_penalty: 1.5, ..SamplingParams::default() };
        assert_eq!(TokenHistory::new(&[1, 2, 2], &with).seen.len(), 2);
    }

    #[test]
    fn out_of_row_tokens_are_ignored() {
        let mut logits = [1.0, 2.0];
        apply_logit_bias(&mut logits, &[(5, 10.0), (1, -1.0)]);
        assert_eq!(logits, [1.0, 1.0]);
        let params = SamplingParams { repetition_penalty: 2.0, presence_penalty: 1.0, ..SamplingParams::default() };
        let mut history = TokenHistory::new(&[7], &params);
        history.record_generated(9);
        history.apply_penalties(&mut logits, &params);
        assert_eq!(logits, [1.0, 1.0]);
    }
}
