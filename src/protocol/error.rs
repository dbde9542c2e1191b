//! The OpenAI error object, and how an engine refusal becomes one.
//!
//! Shape (OpenAI API reference, "Error codes"): `{"error": {"message", "type", "param", "code"}}`, where `param`
//! names the request field at fault (`"temperature"`, `"messages[1].content"`) and `code` is a machine-readable
//! reason when there is one (`"context_length_exceeded"`).

use serde::Serialize;

use crate::engine::SubmitError;

/// The `type` of every error a client can fix by changing its request.
pub const INVALID_REQUEST_ERROR: &str = "invalid_request_error";
/// The `type` of errors that are the engine's, not the request's.
pub const SERVER_ERROR: &str = "server_error";
/// The `code` of a request whose prompt plus `max_tokens` cannot fit the context (OpenAI's code for it).
pub const CONTEXT_LENGTH_EXCEEDED: &str = "context_length_exceeded";
/// The `code` of a request refused because too many wait to start (`max_waiting_requests`): retry later.
pub const OVERLOADED: &str = "overloaded";
/// The `code` of an embeddings or rerank request refused because its `deadline_ms` passed while it waited: the
/// word of a chat request's `finish_reason` for the same event.
pub const DEADLINE: &str = "deadline";

/// OpenAI error object: {"error": {"message", "type", "param", "code"}}.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApiError {
    pub message: String,
    #[serde(rename = "type")]
    pub error_type: &'static str,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// The envelope OpenAI wraps an error object in.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a ApiError,
}

impl ApiError {
    /// A request error naming the field at fault.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError { message: message.into(), error_type: INVALID_REQUEST_ERROR, param: Some(param.into()), code: None }
    }

    /// A body that is not JSON, or not a JSON object: no field to name.
    pub fn malformed(message: impl Into<String>) -> Self {
        ApiError { message: message.into(), error_type: INVALID_REQUEST_ERROR, param: None, code: None }
    }

    /// A failure of the engine rather than of the request.
    pub fn server(message: impl Into<String>) -> Self {
        ApiError { message: message.into(), error_type: SERVER_ERROR, param: None, code: None }
    }

    /// The whole error body: `{"error": {...}}`.
    pub fn to_json(&self) -> String {
        super::json::encode(&ErrorBody { error: self })
    }

    /// An engine refusal, with the engine's field names translated to the ones this request used: `prompt` is
    /// `"messages"` for chat, and `max_tokens` is `"max_completion_tokens"` when the client wrote that.
    pub(crate) fn from_submit(error: &SubmitError, names: RequestFieldNames) -> Self {
        let message = error.to_string();
        match error {
            // The prompt alone overflowing is the prompt's fault; otherwise a smaller max_tokens would fit.
            SubmitError::TooLong { prompt_tokens, limit, .. } => {
                let param = if prompt_tokens >= limit { names.prompt } else { names.max_tokens };
                ApiError { code: Some(CONTEXT_LENGTH_EXCEEDED.into()), ..ApiError::invalid(param, message) }
            }
            SubmitError::EngineStopped => ApiError::server(message),
            SubmitError::Overloaded { .. } => ApiError { code: Some(OVERLOADED.into()), ..ApiError::server(message) },
            _ => match error.field() {
                Some("prompt") => ApiError::invalid(names.prompt, message),
                Some("max_tokens") => ApiError::invalid(names.max_tokens, message),
                Some(field) => ApiError::invalid(field, message),
                None => ApiError::malformed(message),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.param {
            Some(param) => write!(f, "{} ({}: {})", self.message, self.error_type, param),
            None => write!(f, "{} ({})", self.message, self.error_type),
        }
    }
}

impl std::error::Error for ApiError {}

/// The request fields that the engine's generic names (`prompt`, `max_tokens`) stand for in one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestFieldNames {
    /// `"messages"` (chat) or `"prompt"` (completion).
    pub prompt: &'static str,
    /// `"max_tokens"`, or `"max_completion_tokens"` when the request set that.
    pub max_tokens: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sampling::SamplingError;

    const CHAT: RequestFieldNames = RequestFieldNames { prompt: "messages", max_tokens: "max_completion_tokens" };

    #[test]
    fn to_json_has_the_openai_shape() {
        let e = ApiError::invalid("temperature", "temperature must be in [0, 2], got 3");
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": {
                "message": "temperature must be in [0, 2], got 3",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": null,
            }})
        );
        let v: serde_json::Value = serde_json::from_str(&ApiError::server("boom").to_json()).unwrap();
        assert_eq!(v["error"]["type"], "server_error");
        assert!(v["error"]["param"].is_null());
    }

    #[test]
    fn engine_field_names_become_the_request_field_names() {
        let from = |e: SubmitError| ApiError::from_submit(&e, CHAT);
        assert_eq!(from(SubmitError::EmptyPrompt).param.as_deref(), Some("messages"));
        let zero = SubmitError::Invalid { field: "max_tokens", message: "max_tokens must be at least 1".into() };
        assert_eq!(from(zero).param.as_deref(), Some("max_completion_tokens"));
        let hot = SamplingError::OutOfRange { field: "top_p", value: 0.0, allowed: "(0, 1]" };
        assert_eq!(from(SubmitError::Sampling(hot)).param.as_deref(), Some("top_p"));
        assert_eq!(from(SubmitError::EngineStopped).error_type, SERVER_ERROR);
        let overloaded = from(SubmitError::Overloaded { limit: 4 });
        assert_eq!((overloaded.error_type, overloaded.code.as_deref()), (SERVER_ERROR, Some(OVERLOADED)));
    }

    #[test]
    fn too_long_blames_the_prompt_only_when_it_alone_overflows() {
        let too_long = |prompt_tokens, max_tokens| {
            let e = SubmitError::TooLong { prompt_tokens, max_tokens, limit: 100, limited_by: "model context" };
            ApiError::from_submit(&e, CHAT)
        };
        let e = too_long(100, 0);
        assert_eq!((e.param.as_deref(), e.code.as_deref()), (Some("messages"), Some(CONTEXT_LENGTH_EXCEEDED)));
        let e = too_long(60, 50);
        assert_eq!(
            (e.param.as_deref(), e.code.as_deref()),
            (Some("max_completion_tokens"), Some(CONTEXT_LENGTH_EXCEEDED))
        );
        assert_eq!(e.error_type, INVALID_REQUEST_ERROR);
    }
}
