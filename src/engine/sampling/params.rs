//! The sampling parameters of one request, and the ranges a request may set them to.
//!
//! Field names are the OpenAI request names, so that the protocol layer maps JSON fields 1:1 and an error names
//! the field the client wrote. Ranges follow the OpenAI chat-completions reference, and vLLM where OpenAI has no
//! such field (`top_k`, `min_p`, `repetition_penalty`).

use std::fmt;

use crate::model::TokenId;

/// Temperatures below this are greedy. vLLM uses the same cut (`_SAMPLING_EPS = 1e-5`): dividing logits by a
/// smaller temperature only risks overflow and selects the argmax anyway.
pub const GREEDY_TEMPERATURE: f32 = 1e-5;

/// How to turn one logits row into the next token. `Default` is greedy decoding with no penalties.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Divides the logits before the softmax; 0 (anything below [`GREEDY_TEMPERATURE`]) means greedy. Range [0, 2].
    pub temperature: f32,
    /// Keep only the `top_k` highest logits; 0 (or at least the vocabulary size) turns it off.
    pub top_k: u32,
    /// Keep the smallest set of most likely tokens whose probability sums to at least `top_p`; 1 turns it off.
    /// Range (0, 1].
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the largest probability; 0 turns it off. Range [0, 1].
    pub min_p: f32,
    /// Subtracted once from the logit of every token generated so far (OpenAI semantics). Range [-2, 2].
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it was generated so far (OpenAI semantics). Range [-2, 2].
    pub frequency_penalty: f32,
    /// Divides positive and multiplies negative logits of every token in the prompt or generated so far (CTRL,
    /// Keskar et al. 2019, as implemented by Hugging Face and vLLM); 1 turns it off. Range (0, 2] (vLLM's).
    pub repetition_penalty: f32,
    /// `(token, bias)` pairs added to the logits before anything else. Bias range [-100, 100]; each token at most
    /// once.
    pub logit_bias: Vec<(TokenId, f32)>,
    /// Seeds the request's random generator; `None` lets the engine choose.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

/// A sampling parameter outside the range ember accepts. [`SamplingError::field`] is the OpenAI request field.
#[derive(Clone, Debug, PartialEq)]
pub enum SamplingError {
    /// A numeric field is NaN or outside `allowed` (written as an interval).
    OutOfRange { field: &'static str, value: f32, allowed: &'static str },
    /// A `logit_bias` value is NaN or outside [-100, 100].
    BiasOutOfRange { token: TokenId, bias: f32 },
    /// A `logit_bias` token id is not in the vocabulary.
    BiasTokenOutOfVocab { token: TokenId, vocab_size: usize },
    /// A `logit_bias` token appears more than once, so which bias applies would be a guess.
    DuplicateBiasToken { token: TokenId },
}

impl SamplingError {
    /// The request field at fault, as OpenAI names it.
    pub fn field(&self) -> &'static str {
        match self {
            SamplingError::OutOfRange { field, .. } => field,
            SamplingError::BiasOutOfRange { .. }
            | SamplingError::BiasTokenOutOfVocab { .. }
            | SamplingError::DuplicateBiasToken { .. } => "logit_bias",
        }
    }
}

impl fmt::Display for SamplingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SamplingError::OutOfRange { field, value, allowed } => {
                write!(f, "{field} must be in {allowed}, got {value}")
            }
            SamplingError::BiasOutOfRange { token, bias } => {
                write!(f, "logit_bias for token {token} must be in [-100, 100], got {bias}")
            }
            SamplingError::BiasTokenOutOfVocab { token, vocab_size } => {
                write!(f, "logit_bias names token {token}, outside the vocabulary of {vocab_size} tokens")
            }
            SamplingError::DuplicateBiasToken { token } => write!(f, "logit_bias names token {token} more than once"),
        }
    }
}

impl std::error::Error for SamplingError {}

impl SamplingParams {
    /// Checks every field against its range (NaN is outside every range) and every `logit_bias` token against
    /// the vocabulary. The first field at fault is reported, in declaration order.
    pub fn validate(&self, vocab_size: usize) -> Result<(), SamplingError> {
        check("temperature", self.temperature, 0.0 <= self.temperature && self.temperature <= 2.0, "[0, 2]")?;
        check("top_p", self.top_p, 0.0 < self.top_p && self.top_p <= 1.0, "(0, 1]")?;
        check("min_p", self.min_p, (0.0..=1.0).contains(&self.min_p), "[0, 1]")?;
        check("presence_penalty", self.presence_penalty, (-2.0..=2.0).contains(&self.presence_penalty), "[-2, 2]")?;
        check("frequency_penalty", self.frequency_penalty, (-2.0..=2.0).contains(&self.frequency_penalty), "[-2, 2]")?;
        let repetition = self.repetition_penalty;
        check("repetition_penalty", repetition, 0.0 < repetition && repetition <= 2.0, "(0, 2]")?;
        for &(token, bias) in &self.logit_bias {
            if !(-100.0..=100.0).contains(&bias) {
                return Err(SamplingError::BiasOutOfRange { token, bias });
            }
            if token as usize >= vocab_size {
                return Err(SamplingError::BiasTokenOutOfVocab { token, vocab_size });
            }
        }
        // Quadratic, but OpenAI caps logit_bias at a few hundred entries and this runs once per request.
        for (i, &(token, _)) in self.logit_bias.iter().enumerate() {
            if self.logit_bias[..i].iter().any(|&(earlier, _)| earlier == token) {
                return Err(SamplingError::DuplicateBiasToken { token });
            }
        }
        Ok(())
    }

    /// Whether the argmax decides the token (temperature below [`GREEDY_TEMPERATURE`]).
    pub fn is_greedy(&self) -> bool {
        // Written so that a NaN temperature (unvalidated params) is not greedy; the sampler copes with it.
        self.temperature < GREEDY_TEMPERATURE
    }

    /// Whether any of the repetition, frequency or presence penalties changes the logits.
    pub fn has_penalties(&self) -> bool {
        self.repetition_penalty != 1.0 || self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }
}

/// `Ok` when `in_range` (a comparison that is false for NaN), else the error naming `field`.
fn check(field: &'static str, value: f32, in_range: bool, allowed: &'static str) -> Result<(), SamplingError> {
    if in_range {
        Ok(())
    } else {
        Err(SamplingError::OutOfRange { field, value, allowed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_greedy_without_penalties() {
        let params = SamplingParams::default();
        assert_eq!(params.validate(10), Ok(()));
        assert!(params.is_greedy());
        assert!(!params.has_penalties());
    }

    #[test]
    fn range_ends_are_inclusive_or_exclusive_as_documented() {
        let edges = SamplingParams {
            temperature: 2.0,
            top_p: 1.0,
            min_p: 1.0,
            presence_penalty: -2.0,
            frequency_penalty: 2.0,
            repetition_penalty: 2.0,
            logit_bias: vec![(0, -100.0), (9, 100.0)],
            ..SamplingParams::default()
        };
        assert_eq!(edges.validate(10), Ok(()));
        let zero_top_p = SamplingParams { top_p: 0.0, ..SamplingParams::default() };
        assert_eq!(zero_top_p.validate(10).unwrap_err().field(), "top_p");
        let zero_repetition = SamplingParams { repetition_penalty: 0.0, ..SamplingParams::default() };
        assert_eq!(zero_repetition.validate(10).unwrap_err().field(), "repetition_penalty");
    }

    #[test]
    fn message_names_field_range_and_value() {
        let params = SamplingParams { temperature: 2.5, ..SamplingParams::default() };
        let message = params.validate(10).unwrap_err().to_string();
        assert_eq!(message, "temperature must be in [0, 2], got 2.5");
    }
}
