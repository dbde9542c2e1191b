//! Other APIs over OpenAI's: a request body in another API's shape becomes a Chat Completions or Completions
//! body, and the OpenAI response body or streaming chunks of that request become the other API's. One request
//! core (`request.rs`, `api_request.rs`) serves every API, so each has the engine's whole behaviour (sampling,
//! tools, structured outputs, reasoning, metrics), and a new API is one folder: its request reader and its
//! output writer.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::fmt::Debug;
use std::hash::BuildHasher;
use std::sync::Arc;

use serde_json::Value;

use super::anthropic;
use super::api::Api;
use super::error::ApiError;
use super::llama_server;
use super::ollama;
use super::request::{ApiKind, ParsedRequest};
use super::responses::{self, ResponseStore};
use crate::engine::{Engine, RequestHandle};

/// A request read from another API: the OpenAI body it became, and how its answers are written back.
pub(crate) struct Translation {
    /// The Chat Completions or Completions body.
    pub body: Value,
    pub kind: ApiKind,
    pub output: Box<dyn OutputWriter>,
    /// The request's own names of the OpenAI fields the body has (OpenAI's name, its name), so that a refusal
    /// names the field the client sent.
    pub field_names: FieldNames,
}

/// Writes one request's answers in its API's shape, from the OpenAI ones.
pub(crate) trait OutputWriter: Send + Debug {
    /// The whole response body, from the OpenAI body of the ended request.
    fn response(&self, openai: Value, handle: &RequestHandle) -> String;
    /// The stream events one OpenAI chunk becomes (none, one or several), appended to `out` in order.
    fn chunk(&mut self, openai: Value, handle: &RequestHandle, out: &mut VecDeque<String>);
    /// The OpenAI stream has ended: the events that close this API's stream.
    fn end(&mut self, handle: &RequestHandle, out: &mut VecDeque<String>);
}

/// What translating a request may use besides its body.
pub(crate) struct TranslateContext<'a> {
    pub engine: &'a Engine,
    /// The stored responses `previous_response_id` refers to (OpenAI Responses).
    pub responses: &'a Arc<ResponseStore>,
    pub purpose: Purpose,
}

/// What a request is read for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// To be submitted: every field generation needs must be there.
    Generate,
    /// To have its prompt tokens counted (`prompt_tokens.rs`): a field only generation needs may be absent
    /// (Anthropic's `max_tokens`, which its `count_tokens` body has not).
    CountPrompt,
}

/// Reads `json`, a request of `api` (not OpenAI's own), into its OpenAI body.
pub(crate) fn translate(api: Api, json: &str, context: &TranslateContext<'_>) -> Result<Translation, ApiError> {
    let body: Value = serde_json::from_str(json)
        .map_err(|e| ApiError::malformed(format!("the request body is not valid JSON: {e}")))?;
    match api {
        Api::Responses => responses::translate(body, context),
        Api::AnthropicMessages => anthropic::translate(body, context),
        Api::LlamaCompletion => llama_server::translate(body, context),
        Api::OllamaChat => ollama::translate_chat(body, context),
        Api::OllamaGenerate => ollama::translate_generate(body, context),
        Api::OpenAi | Api::ChatCompletions | Api::Completions => {
            Err(ApiError::server("OpenAI's own APIs are not translated"))
        }
    }
}

/// The names a request's API gives the OpenAI fields (`Translation::field_names`); none for OpenAI's own.
pub(crate) type FieldNames = &'static [(&'static str, &'static str)];

/// Another API's side of a read request: the writer of its answers, and its names of the OpenAI fields.
pub(crate) type Translated = (Box<dyn OutputWriter>, FieldNames);

/// `json`, a request body of `api`, read into the OpenAI request it stands for: another API's is translated
/// first, and also gives its [`Translated`] (its refusals here already name its fields).
pub(crate) fn read_request(
    api: Api,
    json: &str,
    context: &TranslateContext<'_>,
) -> Result<(ParsedRequest, Option<Translated>), ApiError> {
    let kind = match api {
        Api::OpenAi => None,
        Api::ChatCompletions => Some(ApiKind::Chat),
        Api::Completions => Some(ApiKind::Completion),
        _ => {
            let translation = translate(api, json, context)?;
            let names = translation.field_names;
            let parsed = ParsedRequest::from_value(&translation.body, Some(translation.kind))
                .map_err(|e| rename_fields(e, names))?;
            return Ok((parsed, Some((translation.output, names))));
        }
    };
    Ok((ParsedRequest::parse(json, kind)?, None))
}

/// A fresh id for another API's objects: `prefix` and 32 hex digits, unique without global state (as chat's
/// `chatcmpl-` ids).
pub(crate) fn new_id(prefix: &str, salt: u64) -> String {
    let draw = |n: u64| RandomState::new().hash_one((n, salt));
    format!("{prefix}{:016x}{:016x}", draw(0), draw(1))
}

/// ember's own request fields that another API's body may carry, copied into its chat body unchanged: their
/// meaning is chat's (docs/protocol.md, "Our additions").
pub(crate) const EMBER_CHAT_FIELDS: &[&str] = &[
    "seed",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "include_metrics",
    "priority",
    "deadline_ms",
    "speculative_decoding",
    "ignore_eos",
    "chat_template_kwargs",
];

/// `error` with the OpenAI field it names renamed to the request's own, in `param` and in its message.
pub(crate) fn rename_fields(mut error: ApiError, names: &[(&str, &str)]) -> ApiError {
    if let Some(param) = &error.param {
        // The parameter may be a path into the field (`max_tokens`, `messages[2].content`); a name may be a path
        // too, and the longest that the parameter begins with wins.
        let within = |openai: &str| {
            param.strip_prefix(openai).is_some_and(|rest| rest.is_empty() || rest.starts_with(['[', '.']))
        };
        if let Some((openai, own)) =
            names.iter().filter(|(openai, _)| within(openai)).max_by_key(|(openai, _)| openai.len())
        {
            error.message = error.message.replace(openai, own);
            error.param = Some(format!("{own}{}", &param[openai.len()..]));
        }
    }
    // The message may name another field than the parameter (the context check names the prompt and
    // `max_tokens`): each OpenAI field name that is one identifier of its own (`max_tokens`, not a plain word such
    // as `messages` that a sentence may use) is written as the request's.
    for (openai, own) in names.iter().filter(|(openai, _)| openai.contains('_') && !openai.contains('.')) {
        error.message = replace_identifier(&error.message, openai, own);
    }
    error
}

/// `text` with each occurrence of the identifier `name` replaced by `with`, except inside a longer identifier or
/// path (`max_tokens_x`, `a.max_tokens`, `max_tokens.x`).
fn replace_identifier(text: &str, name: &str, with: &str) -> String {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(name) {
        let before = rest[..at].chars().last().or_else(|| out.chars().last());
        let mut after = rest[at + name.len()..].chars();
        let joined = before.is_some_and(|c| word(c) || c == '.')
            || match after.next() {
                Some('.') => after.next().is_some_and(word),
                next => next.is_some_and(word),
            };
        out.push_str(&rest[..at]);
        out.push_str(if joined { name } else { with });
        rest = &rest[at + name.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_clients_field() {
        let names = [("max_tokens", "max_output_tokens"), ("messages", "input")];
        let e = rename_fields(ApiError::invalid("max_tokens", "max_tokens must be at least 1"), &names);
        assert_eq!(
            (e.param.as_deref(), e.message.as_str()),
            (Some("max_output_tokens"), "max_output_tokens must be at least 1")
        );
        let e = rename_fields(ApiError::invalid("messages[1].content", "bad"), &names);
        assert_eq!(e.param.as_deref(), Some("input[1].content"));
        let nested = [("tool_choice.function.name", "tool_choice.name"), ("tool_choice", "tool")];
        let e = rename_fields(ApiError::invalid("tool_choice.function.name", "no tool"), &nested);
        assert_eq!(e.param.as_deref(), Some("tool_choice.name"), "the longest name that fits");
        let e = rename_fields(ApiError::invalid("tool_choices", "x"), &nested);
        assert_eq!(e.param.as_deref(), Some("tool_choices"), "a name is a whole path segment");
        let e = rename_fields(ApiError::invalid("temperature", "too hot"), &names);
        assert_eq!(e.param.as_deref(), Some("temperature"));
        // A name is a whole segment: `max_tokens_x` is another field.
        let e = rename_fields(ApiError::invalid("max_tokens_x", "bad"), &names);
        assert_eq!(e.param.as_deref(), Some("max_tokens_x"));
        // The context check names the prompt and max_tokens: both are the request's.
        let e = rename_fields(
            ApiError::invalid("messages", "the prompt (9 tokens) plus max_tokens (1) exceeds the context of 9 tokens"),
            &[("messages", "input"), ("max_tokens", "max_output_tokens")],
        );
        assert_eq!(e.message, "the prompt (9 tokens) plus max_output_tokens (1) exceeds the context of 9 tokens");
        let e = rename_fields(ApiError::invalid("x", "max_tokens_x, my.max_tokens and max_tokens."), &names);
        assert_eq!(e.message, "max_tokens_x, my.max_tokens and max_output_tokens.");
        let names = [("response_format.json_schema.schema", "format"), ("response_format", "format")];
        let e = rename_fields(
            ApiError::invalid("response_format.json_schema.schema", "invalid response_format.json_schema.schema: x"),
            &names,
        );
        assert_eq!((e.param.as_deref(), e.message.as_str()), (Some("format"), "invalid format: x"));
    }
}
