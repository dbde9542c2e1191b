//! Reading an OpenAI Chat Completions or Completions request body into what the engine needs. Types are checked
//! here, each error naming its field; ranges are checked once, by the engine (`SamplingParams::validate`,
//! `validate_request`), whose field names are the OpenAI ones.

use serde_json::Value;

use super::error::{ApiError, RequestFieldNames};
use super::fields::{
    as_array, as_object, as_str, as_u64, get, opt_bool, opt_f32, opt_integer_bits, opt_str, opt_u64, type_error, Object,
};
use super::guided::parse_guided;
use super::prompt::PromptInput;
use super::request_fields::check_fields;
use crate::engine::guided::GuidedRequest;
use crate::engine::sampling::SamplingParams;
use crate::model::TokenId;

/// Which OpenAI endpoint a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKind {
    /// `/v1/chat/completions`: `messages` in, `chat.completion` out.
    Chat,
    /// `/v1/completions`: `prompt` in, `text_completion` out.
    Completion,
}

/// OpenAI's legacy Completions API generates 16 tokens when `max_tokens` is absent (API reference, "Create
/// completion": "Defaults to 16"); chat has no such default and fills the remaining context.
pub const COMPLETION_DEFAULT_MAX_TOKENS: usize = 16;

/// A request body, read and type-checked, not yet tokenized.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ParsedRequest {
    pub kind: ApiKind,
    /// `model`, echoed in responses; `None` → the model's own name.
    pub model: Option<String>,
    pub input: PromptInput,
    pub sampling: SamplingParams,
    /// Most tokens per choice; `None` → until the context is full.
    pub max_tokens: Option<usize>,
    pub n: usize,
    pub stop: Vec<String>,
    /// `stop_token_ids` (vLLM's extension): token ids that end a choice besides the model's own.
    pub stop_token_ids: Vec<TokenId>,
    pub stream: bool,
    /// `stream_options.include_usage`: the stream ends with a usage chunk.
    pub include_usage: bool,
    pub include_metrics: bool,
    /// Our addition: each choice carries its own `metrics` (same double gate as `metrics`).
    pub include_choice_metrics: bool,
    /// Our addition: generate past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Structured outputs (`response_format`, vLLM's `guided_*`), compiled by the engine at submit.
    pub guided: Option<GuidedRequest>,
    /// What the engine's field names stand for in this request.
    pub names: RequestFieldNames,
}

impl ParsedRequest {
    /// Reads `json`. `kind: Some(k)` forces the endpoint; `None` decides by which of `messages` (chat) and
    /// `prompt` (completion) is present: both or neither is an error. A field ember does not implement is an
    /// error naming it, as the OpenAI API answers unknown arguments (`request_fields.rs`); so is a known field
    /// with the wrong type.
    pub fn parse(json: &str, kind: Option<ApiKind>) -> Result<Self, ApiError> {
        let body: Value = serde_json::from_str(json)
            .map_err(|e| ApiError::malformed(format!("the request body is not valid JSON: {e}")))?;
        let Some(o) = body.as_object() else {
            return Err(ApiError::malformed("the request body must be a JSON object"));
        };
        let kind = match (kind, get(o, "messages"), get(o, "prompt")) {
            (Some(kind), _, _) => kind,
            (None, Some(_), None) => ApiKind::Chat,
            (None, None, Some(_)) => ApiKind::Completion,
            (None, Some(_), Some(_)) => {
                return Err(ApiError::invalid("messages", "a request has either messages (chat) or prompt, not both"))
            }
            (None, None, None) => {
                return Err(ApiError::invalid("messages", "a request needs messages (chat) or prompt (completion)"))
            }
        };
        let input = match kind {
            ApiKind::Chat => PromptInput::parse_messages(required(o, "messages")?)?,
            ApiKind::Completion => PromptInput::parse_prompt(required(o, "prompt")?)?,
        };
        check_fields(o, kind)?;
        let (max_tokens, max_tokens_name) = parse_max_tokens(o, kind)?;
        let stream = opt_bool(o, "stream")?.unwrap_or(false);
        let include_usage = parse_stream_options(o, stream)?;
        opt_str(o, "user")?; // Accepted for compatibility; only its type is checked.
        Ok(ParsedRequest {
            kind,
            model: opt_str(o, "model")?.map(str::to_owned),
            input,
            sampling: parse_sampling(o)?,
            max_tokens,
            n: opt_u64(o, "n")?.map_or(1, saturating_usize),
            stop: parse_stop(o)?,
            stop_token_ids: parse_stop_token_ids(o)?,
            stream,
            include_usage,
            include_metrics: opt_bool(o, "include_metrics")?.unwrap_or(false),
            include_choice_metrics: opt_bool(o, "include_choice_metrics")?.unwrap_or(false),
            ignore_eos: opt_bool(o, "ignore_eos")?.unwrap_or(false),
            guided: parse_guided(o)?,
            names: RequestFieldNames {
                prompt: match kind {
                    ApiKind::Chat => "messages",
                    ApiKind::Completion => "prompt",
                },
                max_tokens: max_tokens_name,
            },
        })
    }
}

fn required<'a>(o: &'a Object, name: &str) -> Result<&'a Value, ApiError> {
    get(o, name).ok_or_else(|| ApiError::invalid(name, format!("{name} is required")))
}

/// Counts beyond `usize` are refused by the engine's range checks all the same.
fn saturating_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// `max_completion_tokens` (OpenAI's current name) or `max_tokens` (its deprecated one), and which was used.
/// Both with different values would make one a guess, so that is an error.
fn parse_max_tokens(o: &Object, kind: ApiKind) -> Result<(Option<usize>, &'static str), ApiError> {
    let current = opt_u64(o, "max_completion_tokens")?;
    let legacy = opt_u64(o, "max_tokens")?;
    match (current, legacy) {
        (Some(a), Some(b)) if a != b => Err(ApiError::invalid(
            "max_completion_tokens",
            format!("max_completion_tokens ({a}) and max_tokens ({b}) disagree; set one"),
        )),
        (Some(a), _) => Ok((Some(saturating_usize(a)), "max_completion_tokens")),
        (None, Some(b)) => Ok((Some(saturating_usize(b)), "max_tokens")),
        (None, None) => {
            let default = (kind == ApiKind::Completion).then_some(COMPLETION_DEFAULT_MAX_TOKENS);
            Ok((default, "max_tokens"))
        }
    }
}

/// `stream_options.include_usage`. OpenAI refuses `stream_options` on a request that does not stream.
fn parse_stream_options(o: &Object, stream: bool) -> Result<bool, ApiError> {
    let Some(options) = get(o, "stream_options") else { return Ok(false) };
    let options = as_object(options, "stream_options")?;
    if !stream {
        return Err(ApiError::invalid("stream_options", "stream_options is only allowed when stream is true"));
    }
    Ok(get(options, "include_usage")
        .map(|v| v.as_bool().ok_or_else(|| type_error("stream_options.include_usage", "a boolean", v)))
        .transpose()?
        .unwrap_or(false))
}

/// The sampling fields, each with the default that turns it off. `top_k: -1` also turns top-k off (vLLM's
/// convention, which clients written for vLLM send).
fn parse_sampling(o: &Object) -> Result<SamplingParams, ApiError> {
    let defaults = SamplingParams::default();
    let top_k = match get(o, "top_k") {
        None => defaults.top_k,
        Some(v) if v.as_i64() == Some(-1) => 0,
        Some(v) => {
            let k = v.as_u64().ok_or_else(|| type_error("top_k", "-1 or a non-negative integer", v))?;
            // Any k at least the vocabulary size keeps every token, which is what "off" means.
            u32::try_from(k).unwrap_or(u32::MAX)
        }
    };
    Ok(SamplingParams {
        temperature: opt_f32(o, "temperature")?.unwrap_or(defaults.temperature),
        top_k,
        top_p: opt_f32(o, "top_p")?.unwrap_or(defaults.top_p),
        min_p: opt_f32(o, "min_p")?.unwrap_or(defaults.min_p),
        presence_penalty: opt_f32(o, "presence_penalty")?.unwrap_or(defaults.presence_penalty),
        frequency_penalty: opt_f32(o, "frequency_penalty")?.unwrap_or(defaults.frequency_penalty),
        repetition_penalty: opt_f32(o, "repetition_penalty")?.unwrap_or(defaults.repetition_penalty),
        logit_bias: parse_logit_bias(o)?,
        seed: opt_integer_bits(o, "seed")?,
    })
}

/// `logit_bias`: an object from token id (a decimal string, as JSON keys must be strings) to a bias.
fn parse_logit_bias(o: &Object) -> Result<Vec<(TokenId, f32)>, ApiError> {
    let Some(value) = get(o, "logit_bias") else { return Ok(Vec::new()) };
    as_object(value, "logit_bias")?
        .iter()
        .map(|(key, bias)| {
            let token = key.parse::<TokenId>().map_err(|_| {
                ApiError::invalid("logit_bias", format!("logit_bias keys must be token ids, got \"{key}\""))
            })?;
            let bias = bias.as_f64().ok_or_else(|| type_error(&format!("logit_bias.{key}"), "a number", bias))?;
            Ok((token, bias as f32))
        })
        .collect()
}

/// `stop`: a string or an array of strings (counts and lengths are the engine's to check).
fn parse_stop(o: &Object) -> Result<Vec<String>, ApiError> {
    match get(o, "stop") {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(list)) => {
            list.iter().enumerate().map(|(i, v)| Ok(as_str(v, &format!("stop[{i}]"))?.to_owned())).collect()
        }
        Some(other) => Err(type_error("stop", "a string or an array of strings", other)),
    }
}

fn parse_stop_token_ids(o: &Object) -> Result<Vec<TokenId>, ApiError> {
    let Some(value) = get(o, "stop_token_ids") else { return Ok(Vec::new()) };
    as_array(value, "stop_token_ids")?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let param = format!("stop_token_ids[{i}]");
            let id = as_u64(v, &param)?;
            TokenId::try_from(id).map_err(|_| ApiError::invalid(param, format!("token id {id} is out of range")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::chat_template::ChatMessage;

    const CHAT: &str = r#"{"messages": [{"role": "user", "content": "hi"}]"#;

    /// A chat request with `extra` fields (`, "name": value...`).
    fn chat(extra: &str) -> Result<ParsedRequest, ApiError> {
        ParsedRequest::parse(&format!("{CHAT}{extra}}}"), None)
    }

    fn param(extra: &str) -> String {
        chat(extra).unwrap_err().param.unwrap_or_default()
    }

    #[test]
    fn defaults_of_a_minimal_chat_request() {
        let r = chat("").unwrap();
        assert_eq!(r.kind, ApiKind::Chat);
        assert_eq!(r.input, PromptInput::Messages(vec![ChatMessage::new("user", "hi")]));
        assert_eq!(r.sampling, SamplingParams::default());
        assert_eq!((r.max_tokens, r.n, r.stream, r.include_usage), (None, 1, false, false));
        assert_eq!((r.include_metrics, r.include_choice_metrics, r.ignore_eos), (false, false, false));
        assert_eq!(r.names, RequestFieldNames { prompt: "messages", max_tokens: "max_tokens" });
    }

    #[test]
    fn every_field_is_read() {
        let r = chat(
            r#", "model": "m", "max_completion_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
            "min_p": 0.1, "n": 2, "stop": ["a", "b"], "seed": 7, "presence_penalty": 0.5, "frequency_penalty": -0.5,
            "repetition_penalty": 1.1, "logit_bias": {"12": -100, "7": 2.5}, "stream": true,
            "stream_options": {"include_usage": true}, "include_metrics": true, "include_choice_metrics": true,
            "ignore_eos": true, "user": "u", "stop_token_ids": [2], "tools": [], "logprobs": false"#,
        )
        .unwrap();
        let s = &r.sampling;
        assert_eq!((s.temperature, s.top_p, s.top_k, s.min_p), (0.5, 0.9, 40, 0.1));
        assert_eq!((s.presence_penalty, s.frequency_penalty, s.repetition_penalty), (0.5, -0.5, 1.1));
        assert_eq!((s.seed, s.logit_bias.len()), (Some(7), 2));
        assert!(s.logit_bias.contains(&(12, -100.0)) && s.logit_bias.contains(&(7, 2.5)));
        assert_eq!((r.model.as_deref(), r.max_tokens, r.n), (Some("m"), Some(5), 2));
        assert_eq!((r.stop, r.stop_token_ids), (vec!["a".to_owned(), "b".to_owned()], vec![2]));
        assert!(r.stream && r.include_usage && r.include_metrics && r.include_choice_metrics && r.ignore_eos);
        let unknown = chat(r#", "tools": [{"type": "function"}]"#).unwrap_err();
        assert_eq!(unknown.param.as_deref(), Some("tools"), "an unimplemented field is refused by name");
        assert_eq!(r.names.max_tokens, "max_completion_tokens");
    }

    #[test]
    fn kind_is_forced_or_decided_by_the_input_field() {
        let completion = ParsedRequest::parse(r#"{"prompt": "x"}"#, None).unwrap();
        assert_eq!(
            (completion.kind, completion.max_tokens),
            (ApiKind::Completion, Some(COMPLETION_DEFAULT_MAX_TOKENS))
        );
        assert_eq!(completion.names.prompt, "prompt");
        let both = ParsedRequest::parse(r#"{"prompt": "x", "messages": []}"#, None).unwrap_err();
        assert_eq!(both.param.as_deref(), Some("messages"));
        assert!(ParsedRequest::parse("{}", None).unwrap_err().message.contains("needs messages"));
        let forced = ParsedRequest::parse(r#"{"prompt": "x"}"#, Some(ApiKind::Chat)).unwrap_err();
        assert_eq!((forced.param.as_deref(), forced.message.as_str()), (Some("messages"), "messages is required"));
        let forced = ParsedRequest::parse(r#"{"prompt": [1]}"#, Some(ApiKind::Completion)).unwrap();
        assert_eq!(forced.input, PromptInput::Tokens(vec![vec![1]]));
        // The other endpoint's input is not silently dropped.
        let forced = ParsedRequest::parse(&format!("{CHAT}, \"prompt\": [1]}}"), Some(ApiKind::Completion));
        assert_eq!(forced.unwrap_err().param.as_deref(), Some("messages"));
    }

    #[test]
    fn malformed_bodies_have_no_param() {
        for body in ["", "{", "[1]", "\"x\"", "{\"messages\": [}"] {
            let e = ParsedRequest::parse(body, None).unwrap_err();
            assert_eq!((e.param, e.error_type), (None, "invalid_request_error"), "{body}");
        }
    }

    #[test]
    fn wrong_types_name_their_field() {
        for (extra, field) in [
            (r#", "model": 1"#, "model"),
            (r#", "max_tokens": "5""#, "max_tokens"),
            (r#", "max_tokens": -1"#, "max_tokens"),
            (r#", "max_completion_tokens": 1.5"#, "max_completion_tokens"),
            (r#", "temperature": "hot""#, "temperature"),
            (r#", "top_p": [1]"#, "top_p"),
            (r#", "top_k": 1.5"#, "top_k"),
            (r#", "top_k": -2"#, "top_k"),
            (r#", "min_p": true"#, "min_p"),
            (r#", "n": "2""#, "n"),
            (r#", "stop": 1"#, "stop"),
            (r#", "stop": ["a", 1]"#, "stop[1]"),
            (r#", "seed": "7""#, "seed"),
            (r#", "presence_penalty": {}"#, "presence_penalty"),
            (r#", "frequency_penalty": "0""#, "frequency_penalty"),
            (r#", "repetition_penalty": false"#, "repetition_penalty"),
            (r#", "logit_bias": [1]"#, "logit_bias"),
            (r#", "logit_bias": {"x": 1}"#, "logit_bias"),
            (r#", "logit_bias": {"-1": 1}"#, "logit_bias"),
            (r#", "logit_bias": {"5": "1"}"#, "logit_bias.5"),
            (r#", "stream": 1"#, "stream"),
            (r#", "stream": true, "stream_options": true"#, "stream_options"),
            (r#", "stream": true, "stream_options": {"include_usage": 1}"#, "stream_options.include_usage"),
            (r#", "include_metrics": "yes""#, "include_metrics"),
            (r#", "include_choice_metrics": 1"#, "include_choice_metrics"),
            (r#", "ignore_eos": "true""#, "ignore_eos"),
            (r#", "user": 5"#, "user"),
            (r#", "stop_token_ids": 2"#, "stop_token_ids"),
            (r#", "stop_token_ids": [2, "3"]"#, "stop_token_ids[1]"),
        ] {
            assert_eq!(param(extra), field, "{extra}");
        }
    }

    #[test]
    fn conflicting_or_misplaced_options_are_errors() {
        assert_eq!(param(r#", "max_tokens": 4, "max_completion_tokens": 5"#), "max_completion_tokens");
        assert_eq!(chat(r#", "max_tokens": 4, "max_completion_tokens": 4"#).unwrap().max_tokens, Some(4));
        assert_eq!(param(r#", "stream_options": {"include_usage": true}"#), "stream_options");
    }

    #[test]
    fn nulls_are_defaults_and_vllm_conventions_are_accepted() {
        let r =
            chat(r#", "temperature": null, "stop": null, "stream_options": null, "top_k": -1, "seed": -1"#).unwrap();
        assert_eq!((r.sampling.temperature, r.sampling.top_k, r.sampling.seed), (0.0, 0, Some(u64::MAX)));
        assert!(r.stop.is_empty());
    }
}
