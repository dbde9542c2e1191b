//! What a host asks an embedder for, what it gets back, and why a request is refused.

use std::fmt;
use std::time::Instant;

use crate::model::encoder::Pooling;
use crate::model::TokenId;

/// One embedding request: its inputs, already tokenized (special tokens included; `Embedder::tokenize`).
#[derive(Clone, Debug, PartialEq)]
pub struct EmbedRequest {
    pub inputs: Vec<Vec<TokenId>>,
    /// The pooling to use instead of the file's (`mean`, `cls`, `last`; `rank`: the classification head's scores).
    pub pooling: Option<Pooling>,
    /// L2-normalize each vector (after truncation), as the embedding servers do by default.
    pub normalize: bool,
    /// Keep only the first `dimensions` of each vector (Matryoshka truncation), then normalize.
    pub dimensions: Option<usize>,
    /// A lower value first (vLLM's order, as chat requests'); ties in order of arrival.
    pub priority: i32,
    /// The request's `deadline_ms` on the monotonic clock: a request none of whose inputs has reached a batch by
    /// then is refused ([`EmbedError::DeadlineExceeded`]); one whose inputs have started finishes. `None`: none.
    pub deadline: Option<Instant>,
}

impl EmbedRequest {
    /// Normalized vectors of the file's pooling, priority 0, no deadline.
    pub fn new(inputs: Vec<Vec<TokenId>>) -> Self {
        EmbedRequest { inputs, pooling: None, normalize: true, dimensions: None, priority: 0, deadline: None }
    }

    /// Whether a request that is still waiting (`started` false: none of its inputs in a batch yet) is past its
    /// deadline at `now`. A started request is never refused: part of its work is done (a batch is not
    /// interrupted), and unlike a chat request's tokens, part of a request's vectors is no answer to give.
    pub(super) fn waited_past_deadline(&self, started: bool, now: Instant) -> bool {
        !started && self.deadline.is_some_and(|deadline| deadline <= now)
    }
}

/// A request's timing, in seconds: the embedding counterpart of a chat request's metrics (the time to the vectors
/// takes the place of the time to the first token).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EmbedTiming {
    /// From the call to the first batch holding one of its inputs.
    pub queue_time: f64,
    /// From that batch to the last of its vectors.
    pub compute_time: f64,
    /// From the call to the last of its vectors (`queue_time + compute_time`).
    pub time_to_vectors: f64,
}

/// The vectors of a request.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbedOutput {
    /// The width of each vector.
    pub dimensions: usize,
    /// `[inputs][dimensions]`, in input order.
    pub vectors: Vec<f32>,
    /// Each input's token count.
    pub input_tokens: Vec<usize>,
    pub timing: EmbedTiming,
}

impl EmbedOutput {
    pub fn vector(&self, index: usize) -> &[f32] {
        &self.vectors[index * self.dimensions..(index + 1) * self.dimensions]
    }

    pub fn total_tokens(&self) -> usize {
        self.input_tokens.iter().sum()
    }
}

/// Why an embedding request was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmbedError {
    NoInputs,
    TooManyInputs {
        inputs: usize,
        max: usize,
    },
    EmptyInput {
        index: usize,
    },
    InputTooLong {
        index: usize,
        tokens: usize,
        max: usize,
    },
    TokenOutOfRange {
        index: usize,
        token: TokenId,
        vocab_size: usize,
    },
    Pooling(Pooling),
    /// Vectors asked of a reranker (a file whose pooling is `rank`): it scores query–document pairs.
    RankerNeedsPairs,
    Dimensions {
        requested: usize,
        width: usize,
    },
    /// A reranker's pair prompt for document `index` would be longer than any input the model takes.
    PromptTooLong {
        index: usize,
        max_bytes: usize,
    },
    /// `max_waiting_requests` requests are waiting already.
    Overloaded {
        waiting: usize,
    },
    /// The request's deadline passed before any of its inputs reached a batch: nothing was computed.
    DeadlineExceeded,
    /// The embedder is shutting down.
    Stopped,
    /// The forward pass refused the batch (a bug: requests are checked before they are queued).
    Encoder(String),
}

impl EmbedError {
    /// Whether the request itself is at fault (HTTP 400), rather than the server (429, 503, 500).
    pub fn is_invalid_request(&self) -> bool {
        !matches!(
            self,
            EmbedError::Overloaded { .. } | EmbedError::DeadlineExceeded | EmbedError::Stopped | EmbedError::Encoder(_)
        )
    }
}

impl fmt::Display for EmbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmbedError::NoInputs => write!(f, "input: at least one input is needed"),
            EmbedError::TooManyInputs { inputs, max } => write!(f, "input: {inputs} inputs, at most {max} per request"),
            EmbedError::EmptyInput { index } => write!(f, "input[{index}] has no tokens"),
            EmbedError::InputTooLong { index, tokens, max } => {
                write!(f, "input[{index}] has {tokens} tokens, more than the {max} this model takes")
            }
            EmbedError::TokenOutOfRange { index, token, vocab_size } => {
                write!(f, "input[{index}]: token {token} is beyond the vocabulary of {vocab_size}")
            }
            EmbedError::Pooling(p) => {
                write!(f, "pooling {:?} gives no vector per input (use mean, cls or last)", p.name())
            }
            EmbedError::RankerNeedsPairs => write!(
                f,
                "this model is a reranker: it scores query-document pairs (POST /v1/rerank), pass pooling \"cls\" \
                 or \"mean\" for vectors of its encoder"
            ),
            EmbedError::Dimensions { width: 0, .. } => write!(f, "dimensions: scores cannot be truncated"),
            EmbedError::Dimensions { requested, width } => {
                write!(f, "dimensions: {requested} is not in 1..={width} (the model's width)")
            }
            EmbedError::PromptTooLong { index, max_bytes } => write!(
                f,
                "input[{index}]: the rerank prompt of the query and this document would exceed {max_bytes} bytes, \
                 more than the model takes"
            ),
            EmbedError::Overloaded { waiting } => write!(f, "{waiting} embedding requests are waiting already"),
            EmbedError::DeadlineExceeded => {
                write!(f, "deadline_ms: the deadline passed while the request waited; none of its inputs was computed")
            }
            EmbedError::Stopped => write!(f, "the embedder is shutting down"),
            EmbedError::Encoder(e) => write!(f, "the encoder failed: {e}"),
        }
    }
}

impl std::error::Error for EmbedError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_a_waiting_request_is_past_its_deadline() {
        let now = Instant::now();
        let at = |deadline| EmbedRequest { deadline, ..EmbedRequest::new(vec![vec![1]]) };
        assert!(at(Some(now)).waited_past_deadline(false, now), "a deadline is inclusive");
        assert!(!at(Some(now)).waited_past_deadline(true, now), "a started request finishes");
        assert!(!at(Some(now + Duration::from_millis(1))).waited_past_deadline(false, now));
        assert!(!at(None).waited_past_deadline(false, now + Duration::from_secs(3600)));
    }
}
