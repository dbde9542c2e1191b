//! n-gram speculative decoding (prompt lookup; vLLM's `ngram` method, llama.cpp's lookup decoding): decode past
//! the memory-bandwidth limit by verifying several tokens per pass over the weights.
//!
//! # How
//!
//! A decoding sequence's last `n` tokens (`n` from `prompt_lookup_max` down to `prompt_lookup_min`) are looked up
//! in its own tokens (prompt and generated so far); the tokens that followed their most recent earlier occurrence
//! are the draft, up to `num_speculative_tokens`. The step computes the sequence's last token and the draft as
//! one chunk (`k + 1` positions, every row's logits), and the step runner accepts the longest prefix of the draft
//! that the model's own greedy choice agrees with, plus the model's next token: 1 to `k + 1` tokens per step, each
//! exactly the token plain decoding would have produced, since the kernels compute a row of a chunk as they
//! compute a decode row (batch invariance, `docs/architecture.md`). Rejected positions' keys and values are left
//! behind `num_computed` and overwritten by the next step; prefix-cache blocks are registered only up to
//! `num_computed`, so no rejected position is ever cached.
//!
//! # When
//!
//! Only greedy sequences without penalties, bias, constraints, log probabilities or `min_tokens` speculate (the
//! speculative-sampling rule for temperature > 0 is not implemented yet), and not on a model whose sliding-window
//! layers keep a pool of their own (its release rule assumes positions only grow). Each step drafts at most
//! [`STEP_DRAFT_BUDGET`] tokens over all its sequences: with many sequences decoding the step is compute-bound
//! already, and verifying drafts would cost more than it saves.

use serde::{Deserialize, Serialize};

use crate::model::TokenId;

/// Draft tokens one step may verify over all its sequences.
pub const STEP_DRAFT_BUDGET: usize = 16;

/// The most tokens a draft may have (`num_speculative_tokens`) and the longest n-gram looked up.
pub const MAX_SPECULATIVE_TOKENS: usize = 16;

/// The drafting method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SpeculativeMethod {
    /// Prompt lookup: drafts from the sequence's own earlier tokens.
    Ngram,
}

/// The engine's `speculative` option: `{"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": a,
/// "prompt_lookup_max": b}`.
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

    /// The draft that follows `tokens`, at most `limit` tokens (and the configured most): the continuation of
    /// the most recent earlier occurrence of the longest suffix of `tokens` that occurs earlier, among the
    /// lengths `prompt_lookup_max` down to `prompt_lookup_min`. Empty when nothing matches.
    pub fn propose(&self, tokens: &[TokenId], limit: usize) -> Vec<TokenId> {
        let k = self.num_speculative_tokens.min(limit);
        if k == 0 {
            return Vec::new();
        }
        let len = tokens.len();
        for n in (self.prompt_lookup_min..=self.prompt_lookup_max).rev() {
            if len <= n {
                continue;
            }
            let suffix = &tokens[len - n..];
            // Occurrences start before the suffix's own start; the latest one is the closest context.
            if let Some(at) = (0..len - n).rev().find(|&i| &tokens[i..i + n] == suffix) {
                let from = at + n;
                return tokens[from..(from + k).min(len)].to_vec();
            }
        }
        Vec::new()
    }
}

/// How many tokens of `draft` the model's own choices confirm: `choices[i]` is the model's token after the
/// sequence's last token and `draft[..i]`. The accepted tokens are `draft[..a]`, then `choices[a]`.
pub fn accepted_prefix(draft: &[TokenId], choices: &[TokenId]) -> usize {
    draft.iter().zip(choices).take_while(|(d, c)| d == c).count()
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
        }
    }

    #[test]
    fn the_longest_suffix_found_earlier_gives_its_most_recent_continuation() {
        let c = ngram(3, 1, 3);
        // "1 2 3 9 ... 1 2 3 7 8 ... 2 3": the 3-gram "x 2 3" is not earlier, the 2-gram "2 3" is, last at 6.
        let tokens = [1, 2, 3, 9, 5, 1, 2, 3, 7, 8, 4, 2, 3];
        assert_eq!(c.propose(&tokens, 16), [7, 8, 4]);
        assert_eq!(c.propose(&tokens, 2), [7, 8], "limited by the caller");
        assert_eq!(ngram(3, 1, 3).propose(&[5, 6, 1, 2, 3, 1, 2, 3], 16), [1, 2, 3], "the 3-gram match at 2");
        assert_eq!(ngram(4, 1, 2).propose(&[7, 7, 7], 16), [7], "an overlapping match runs to the end");
    }

    #[test]
    fn nothing_matches_nothing_is_drafted() {
        assert!(ngram(3, 2, 3).propose(&[1, 2, 3, 4, 5], 16).is_empty());
        assert!(ngram(3, 2, 3).propose(&[1], 16).is_empty());
        assert!(ngram(3, 1, 1).propose(&[1, 2, 1], 0).is_empty(), "no room for a draft");
        assert_eq!(ngram(3, 1, 1).propose(&[1, 2, 1], 16), [2, 1]);
    }

    #[test]
    fn the_model_confirms_a_prefix_of_the_draft() {
        assert_eq!(accepted_prefix(&[4, 5, 6], &[4, 5, 9, 1]), 2);
        assert_eq!(accepted_prefix(&[4, 5, 6], &[4, 5, 6, 1]), 3);
        assert_eq!(accepted_prefix(&[4, 5, 6], &[3, 5, 6, 1]), 0);
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
    }
}
