//! What a host submits: prompt tokens, sampling, limits and stops; and why a submission is refused.

use std::fmt;
use std::sync::Arc;

use crate::engine::guided::GuidedRequest;
use crate::engine::sampling::{SamplingError, SamplingParams, MAX_TOP_LOGPROBS};
use crate::model::TokenId;

/// Most choices one request may ask for.
pub const MAX_CHOICES: usize = 128;
/// Most stop strings, and the longest one (bytes): stop matching holds back up to that many bytes of output.
pub const MAX_STOP_STRINGS: usize = 16;
pub const MAX_STOP_LEN: usize = 256;
/// The longest `deadline_ms`: a week, far beyond any request, but small enough that the engine clock adds it
/// without losing the milliseconds.
pub const MAX_DEADLINE_MS: u64 = 7 * 24 * 3600 * 1000;

/// A generation request, already tokenized. It has `prompts.len() × n` choices: choice `p × n + j` is the `j`-th
/// sample of prompt `p` (the order of OpenAI's multi-prompt completions).
#[derive(Clone, Debug, PartialEq)]
pub struct SubmitRequest {
    /// One prompt, or several (a completions request with a list of prompts).
    pub prompts: Vec<Vec<TokenId>>,
    /// Independent choices sampled from each prompt, each its own sequence.
    pub n: usize,
    /// How every choice is generated: built once by the host (or the protocol layer), kept unchanged, and shared
    /// by the request's sequences.
    pub options: RequestOptions,
}

/// How a request's choices are generated: sampling, limits, stops, what to report, scheduling. One value per
/// request; the engine reads it where it needs a field and never copies it field by field.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestOptions {
    /// How each token is drawn.
    pub sampling: SamplingParams,
    /// Most tokens to generate per choice; `None` = until the context (or the KV cache) is full.
    pub max_tokens: Option<usize>,
    /// Extra token ids that end a choice (besides the model's end-of-generation tokens).
    pub stop_token_ids: Vec<TokenId>,
    /// Strings that end a choice; the stop string itself is not part of the output unless
    /// `include_stop_str_in_output`.
    pub stop: Vec<String>,
    /// Keep what stopped a choice at the end of its text: the stop string, or a stop token's text (vLLM's
    /// `include_stop_str_in_output`; a control token has text only with `skip_special_tokens` false).
    pub include_stop_str_in_output: bool,
    /// Control tokens write nothing into the text (vLLM's `skip_special_tokens`, default true); false writes
    /// their text (`<|im_start|>`, ...).
    pub skip_special_tokens: bool,
    /// Generate past the model's end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    /// The request asks for `metrics` in its response (the second half of the double gate).
    pub include_metrics: bool,
    /// `Some(k)`: report each generated token's log probability with its `k` most likely alternatives
    /// (`k` ≤ [`MAX_TOP_LOGPROBS`]); see `sampling/logprobs.rs` for what they are.
    pub logprobs: Option<usize>,
    /// `Some(k)`: report each prompt token's log probability (the first's excepted) with its `k` most likely
    /// alternatives and its rank (vLLM's `prompt_logprobs`; `k` ≤ [`MAX_TOP_LOGPROBS`]), computed once per
    /// prompt; see `prompt_logprobs.rs`.
    pub prompt_logprobs: Option<usize>,
    /// Tokens each choice generates before its stop ids can be sampled and its stop strings match (vLLM's
    /// `min_tokens`); at most `max_tokens`. The context can still end a choice earlier.
    pub min_tokens: usize,
    /// Structured outputs: every choice's text is constrained to this (compiled at submit; an invalid one is
    /// refused, naming its field).
    pub guided: Option<GuidedRequest>,
    /// Whether the request's choices may speculate when the engine does (`speculative/`; default true): false
    /// keeps them out of speculative decoding, whose outputs are the same but whose timing differs.
    pub speculative_decoding: bool,
    /// Milliseconds from submission after which the request ends with `FinishReason::Deadline`, whether it is
    /// still waiting to start or generating (its output so far stands); `None`: no deadline. Checked between
    /// engine steps, so a request ends within one step of its deadline.
    pub deadline_ms: Option<u64>,
    /// vLLM's `priority`: requests of a lower value are scheduled first (first come first served within a
    /// value), and a request that does not fit preempts running ones of a higher value. Default 0.
    pub priority: i32,
    /// Report how far each prompt has been computed, as `RequestEvent::PromptProgress` events before the first
    /// token (llama-server's `return_progress`; `prompt_progress.rs`). Default false: no such events.
    pub return_progress: bool,
    /// The text the output is expected to repeat (OpenAI's Predicted Outputs, `prediction`), tokenized: when the
    /// engine speculates, a choice's drafts come first from what follows its last tokens here
    /// (`speculative/ngram.rs`). Speculation is exact, so the output is the same with or without it.
    pub prediction: Option<Arc<[TokenId]>>,
}

impl Default for RequestOptions {
    /// Greedy sampling, no limit but the context, the model's stops, no reports, default scheduling.
    fn default() -> Self {
        RequestOptions {
            sampling: SamplingParams::default(),
            max_tokens: None,
            stop_token_ids: Vec::new(),
            stop: Vec::new(),
            include_stop_str_in_output: false,
            skip_special_tokens: true,
            ignore_eos: false,
            include_metrics: false,
            logprobs: None,
            prompt_logprobs: None,
            min_tokens: 0,
            guided: None,
            speculative_decoding: true,
            deadline_ms: None,
            priority: 0,
            return_progress: false,
            prediction: None,
        }
    }
}

impl SubmitRequest {
    /// A request for `prompt` with greedy sampling and one choice.
    pub fn new(prompt: Vec<TokenId>) -> Self {
        Self::with_options(prompt, RequestOptions::default())
    }

    /// A request for `prompt` with one choice, generated as `options` say.
    pub fn with_options(prompt: Vec<TokenId>, options: RequestOptions) -> Self {
        SubmitRequest { prompts: vec![prompt], n: 1, options }
    }

    /// The same request with its options changed by `change` (for struct-update syntax on the options:
    /// `request.map_options(|o| RequestOptions { max_tokens: Some(8), ..o })`).
    pub fn map_options(self, change: impl FnOnce(RequestOptions) -> RequestOptions) -> Self {
        SubmitRequest { options: change(self.options), ..self }
    }
}

/// Why a request was refused. Nothing was queued.
#[derive(Clone, Debug, PartialEq)]
pub enum SubmitError {
    EmptyPrompt,
    /// A prompt token outside the vocabulary.
    TokenOutOfVocab {
        token: TokenId,
        vocab_size: usize,
    },
    /// The prompt plus the tokens to generate cannot fit in the model's context or the engine's KV cache, even
    /// with the engine otherwise idle.
    TooLong {
        prompt_tokens: usize,
        max_tokens: usize,
        limit: usize,
        limited_by: &'static str,
    },
    /// A parameter out of range; `field` is the request field.
    Invalid {
        field: &'static str,
        message: String,
    },
    Sampling(SamplingError),
    /// The engine has shut down.
    EngineStopped,
    /// `max_waiting_requests` requests are already waiting to start.
    Overloaded {
        limit: usize,
    },
}

impl SubmitError {
    /// The request field at fault, when one is.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            SubmitError::EmptyPrompt | SubmitError::TokenOutOfVocab { .. } => Some("prompt"),
            SubmitError::TooLong { .. } => Some("max_tokens"),
            SubmitError::Invalid { field, .. } => Some(field),
            SubmitError::Sampling(e) => Some(e.field()),
            SubmitError::EngineStopped | SubmitError::Overloaded { .. } => None,
        }
    }
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::EmptyPrompt => write!(f, "the prompt is empty"),
            SubmitError::TokenOutOfVocab { token, vocab_size } => {
                write!(f, "prompt token {token} is outside the vocabulary of {vocab_size} tokens")
            }
            SubmitError::TooLong { prompt_tokens, max_tokens, limit, limited_by } => write!(
                f,
                "the prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) exceeds the {limited_by} \
                 of {limit} tokens"
            ),
            SubmitError::Invalid { message, .. } => f.write_str(message),
            SubmitError::Sampling(e) => e.fmt(f),
            SubmitError::EngineStopped => write!(f, "the engine has shut down"),
            SubmitError::Overloaded { limit } => write!(
                f,
                "the engine is overloaded: {limit} requests are already waiting to start (max_waiting_requests); \
                 retry later"
            ),
        }
    }
}

impl std::error::Error for SubmitError {}

/// The room a sequence has: the model's context and the KV cache's capacity, whichever is smaller.
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    pub context_length: usize,
    pub kv_cache_tokens: usize,
    pub vocab_size: usize,
}

impl Capacity {
    /// The most positions one sequence can ever have, and which limit sets it.
    pub fn limit(&self) -> (usize, &'static str) {
        if self.kv_cache_tokens < self.context_length {
            (self.kv_cache_tokens, "KV cache capacity")
        } else {
            (self.context_length, "model context")
        }
    }
}

/// Checks a request and resolves each prompt's `max_tokens` (the default fills the remaining room).
pub fn validate_request(request: &SubmitRequest, capacity: Capacity) -> Result<Vec<usize>, SubmitError> {
    let options = &request.options;
    let invalid = |field, message: String| Err(SubmitError::Invalid { field, message });
    if request.prompts.is_empty() {
        return Err(SubmitError::EmptyPrompt);
    }
    if request.n == 0 || request.n.saturating_mul(request.prompts.len()) > MAX_CHOICES {
        return invalid(
            "n",
            format!("n = {} for {} prompts is not in 1..={MAX_CHOICES} choices", request.n, request.prompts.len()),
        );
    }
    if options.max_tokens == Some(0) {
        return invalid("max_tokens", "max_tokens must be at least 1".into());
    }
    if options.stop.len() > MAX_STOP_STRINGS {
        return invalid("stop", format!("at most {MAX_STOP_STRINGS} stop strings are allowed"));
    }
    if let Some(s) = options.stop.iter().find(|s| s.is_empty() || s.len() > MAX_STOP_LEN) {
        return invalid("stop", format!("stop strings must be 1..={MAX_STOP_LEN} bytes long, got {} bytes", s.len()));
    }
    if let Some(&t) = options.stop_token_ids.iter().find(|&&t| t as usize >= capacity.vocab_size) {
        return invalid("stop_token_ids", format!("stop token {t} is outside the vocabulary"));
    }
    if let Some(max) = options.max_tokens.filter(|&max| options.min_tokens > max) {
        return invalid("min_tokens", format!("min_tokens ({}) exceeds max_tokens ({max})", options.min_tokens));
    }
    if let Some(k) = options.logprobs.filter(|&k| k > MAX_TOP_LOGPROBS) {
        return invalid("logprobs", format!("at most {MAX_TOP_LOGPROBS} alternatives per token, got {k}"));
    }
    if let Some(ms) = options.deadline_ms.filter(|&ms| ms == 0 || ms > MAX_DEADLINE_MS) {
        return invalid("deadline_ms", format!("deadline_ms must be in 1..={MAX_DEADLINE_MS}, got {ms}"));
    }
    if let Some(k) = options.prompt_logprobs.filter(|&k| k > MAX_TOP_LOGPROBS) {
        return invalid("prompt_logprobs", format!("at most {MAX_TOP_LOGPROBS} alternatives per token, got {k}"));
    }
    options.sampling.validate(capacity.vocab_size).map_err(SubmitError::Sampling)?;
    let (limit, limited_by) = capacity.limit();
    request
        .prompts
        .iter()
        .map(|prompt| {
            if prompt.is_empty() {
                return Err(SubmitError::EmptyPrompt);
            }
            if let Some(&token) = prompt.iter().find(|&&t| t as usize >= capacity.vocab_size) {
                return Err(SubmitError::TokenOutOfVocab { token, vocab_size: capacity.vocab_size });
            }
            let prompt_tokens = prompt.len();
            let max_tokens = options.max_tokens.unwrap_or_else(|| limit.saturating_sub(prompt_tokens));
            // Checked: `max_tokens` can be any u64 a host sends (2^64 - 1 wrapped this sum to a small number).
            if prompt_tokens.checked_add(max_tokens).is_none_or(|total| total > limit) || max_tokens == 0 {
                return Err(SubmitError::TooLong { prompt_tokens, max_tokens, limit, limited_by });
            }
            Ok(max_tokens)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Capacity = Capacity { context_length: 100, kv_cache_tokens: 1000, vocab_size: 50 };

    #[test]
    fn max_tokens_defaults_to_the_remaining_room() {
        assert_eq!(validate_request(&SubmitRequest::new(vec![1; 30]), CAP), Ok(vec![70]));
        let small_cache = Capacity { kv_cache_tokens: 40, ..CAP };
        assert_eq!(validate_request(&SubmitRequest::new(vec![1; 30]), small_cache), Ok(vec![10]));
        let two = SubmitRequest { prompts: vec![vec![1; 30], vec![1; 5]], ..SubmitRequest::new(vec![]) };
        assert_eq!(validate_request(&two, CAP), Ok(vec![70, 95]));
    }

    #[test]
    fn requests_that_can_never_fit_are_refused() {
        let r = SubmitRequest::with_options(vec![1; 30], RequestOptions { max_tokens: Some(71), ..Default::default() });
        let e = validate_request(&r, CAP).unwrap_err();
        assert!(matches!(e, SubmitError::TooLong { limit: 100, limited_by: "model context", .. }), "{e}");
        let e = validate_request(&SubmitRequest::new(vec![1; 100]), CAP).unwrap_err();
        assert_eq!(e.field(), Some("max_tokens"));
        let small_cache = Capacity { kv_cache_tokens: 40, ..CAP };
        let r = SubmitRequest::with_options(vec![1; 30], RequestOptions { max_tokens: Some(11), ..Default::default() });
        assert!(validate_request(&r, small_cache).unwrap_err().to_string().contains("KV cache capacity of 40"));
    }

    #[test]
    fn each_bad_field_is_named() {
        let base = SubmitRequest::new(vec![1, 2]);
        let field = |r: SubmitRequest| validate_request(&r, CAP).unwrap_err().field();
        assert_eq!(field(SubmitRequest::new(vec![])), Some("prompt"));
        assert_eq!(field(SubmitRequest::new(vec![1, 50])), Some("prompt"));
        assert_eq!(field(SubmitRequest { n: 0, ..base.clone() }), Some("n"));
        assert_eq!(field(SubmitRequest { prompts: vec![], ..base.clone() }), Some("prompt"));
        assert_eq!(field(SubmitRequest { prompts: vec![vec![1; 3]; 3], n: 50, ..base.clone() }), Some("n"));
        assert_eq!(
            field(base.clone().map_options(|o| RequestOptions { max_tokens: Some(0), ..o })),
            Some("max_tokens")
        );
        assert_eq!(
            field(base.clone().map_options(|o| RequestOptions { stop: vec![String::new()], ..o })),
            Some("stop")
        );
        assert_eq!(
            field(base.clone().map_options(|o| RequestOptions { stop_token_ids: vec![99], ..o })),
            Some("stop_token_ids")
        );
        assert_eq!(
            field(base.clone().map_options(|o| RequestOptions { min_tokens: 3, max_tokens: Some(2), ..o })),
            Some("min_tokens")
        );
        assert_eq!(
            validate_request(
                &base.clone().map_options(|o| RequestOptions { min_tokens: 3, max_tokens: Some(3), ..o }),
                CAP
            ),
            Ok(vec![3])
        );
        assert_eq!(field(base.clone().map_options(|o| RequestOptions { logprobs: Some(21), ..o })), Some("logprobs"));
        assert_eq!(
            validate_request(&base.clone().map_options(|o| RequestOptions { logprobs: Some(20), ..o }), CAP),
            Ok(vec![98])
        );
        assert_eq!(
            field(base.clone().map_options(|o| RequestOptions { prompt_logprobs: Some(21), ..o })),
            Some("prompt_logprobs")
        );
        assert!(validate_request(
            &base.clone().map_options(|o| RequestOptions { prompt_logprobs: Some(20), ..o }),
            CAP
        )
        .is_ok());
        let hot = SamplingParams { temperature: 3.0, ..Default::default() };
        assert_eq!(field(base.map_options(|o| RequestOptions { sampling: hot, ..o })), Some("temperature"));
    }
}
