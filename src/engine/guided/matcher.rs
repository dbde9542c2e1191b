//! One choice's position in its grammar: the mask of the tokens it allows next, and the tokens it accepted.

use llguidance::{Matcher, TokenParser};
use toktrie::SimpleVob;

use super::errors::clean_error;

use crate::model::TokenId;

/// What accepting a sampled token did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// The grammar goes on.
    More,
    /// The grammar is complete: nothing may follow, or the token was an end-of-generation the grammar allowed.
    Complete,
    /// The matcher failed (a token the mask did not allow, or a parser limit); the choice cannot go on.
    Failed(String),
}

/// A choice's matcher, with the mask for its next token once computed.
pub struct GuidedMatcher {
    matcher: Matcher,
    /// The tokens allowed next, or why they could not be computed; `None` until computed for the current state.
    mask: Option<Result<SimpleVob, String>>,
}

impl GuidedMatcher {
    /// A matcher at the start of `parser`'s grammar, with the first mask if it is known (computed at submit).
    pub(super) fn new(parser: TokenParser, first_mask: Option<SimpleVob>) -> Self {
        GuidedMatcher { matcher: Matcher::new(Ok(parser)), mask: first_mask.map(Ok) }
    }

    /// Computes the mask for the next token, unless it is computed already. Depends only on the tokens accepted,
    /// which is what lets it run beside the forward pass.
    pub fn compute_mask(&mut self) {
        if self.mask.is_none() {
            self.mask = Some(self.matcher.compute_mask_or_eos().map_err(|e| clean_error(&e.to_string())));
        }
    }

    /// Whether the mask for the next token is computed.
    pub fn has_mask(&self) -> bool {
        self.mask.is_some()
    }

    /// Sets the logits of the tokens the grammar does not allow next to −∞ (computing the mask first if it is
    /// not). `Err` when the mask cannot be computed; the row is left as it was then, and the choice must fail.
    pub fn apply_mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        self.compute_mask();
        let mask = match self.mask.as_ref().expect("computed above") {
            Ok(mask) => mask,
            Err(e) => return Err(e.clone()),
        };
        // 32 tokens per word of the mask: a word with no bit set (most of them, in most states) is one fill.
        for (word, chunk) in mask.as_slice().iter().zip(logits.chunks_mut(32)) {
            match *word {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                bits => {
                    for (i, l) in chunk.iter_mut().enumerate() {
                        if bits & (1 << i) == 0 {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
        // A vocabulary longer than the mask (the model's rows can be padded past the tokenizer's): never allowed.
        let covered = mask.as_slice().len() * 32;
        if logits.len() > covered {
            logits[covered..].fill(f32::NEG_INFINITY);
        }
        Ok(())
    }

    /// Whether the grammar allows `token` next (computing the mask if needed); for tests and checks.
    pub fn allows(&mut self, token: TokenId) -> bool {
        self.compute_mask();
        matches!(&self.mask, Some(Ok(mask)) if mask.is_allowed(token))
    }

    /// Advances past `token`, the one sampled.
    pub fn accept(&mut self, token: TokenId) -> Accepted {
        if let Some(Err(e)) = self.mask.take() {
            return Accepted::Failed(format!("structured output: {e}"));
        }
        if let Err(e) = self.matcher.consume_token(token) {
            return Accepted::Failed(format!("structured output: {}", clean_error(&e.to_string())));
        }
        match self.matcher.is_stopped() {
            true => Accepted::Complete,
            false => Accepted::More,
        }
    }

    /// Whether the grammar is complete (or the matcher failed): no token may follow.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}
