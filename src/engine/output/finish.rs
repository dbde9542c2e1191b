//! Why a sequence stopped generating.

use std::fmt;

/// Why a sequence finished. [`FinishReason::as_str`] gives the OpenAI `finish_reason` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// An end-of-generation token, a stop token id or a stop string.
    Stop,
    /// `max_tokens` reached, or the model's context is full.
    Length,
    /// The host cancelled the request (or freed it, or shut the engine down).
    Cancelled,
    /// The engine could not continue the request (see the request's error message).
    Error,
    /// The request's `deadline_ms` passed, whether it was still waiting to start or generating.
    Deadline,
}

impl FinishReason {
    /// `"stop"`, `"length"`, `"cancelled"`, `"error"` or `"deadline"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Error => "error",
            FinishReason::Deadline => "deadline",
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
