//! Reading an OpenAI Chat Completions or Completions request body into what the engine needs. Types are checked
//! here, each error naming its field; ranges are checked once, by the engine (`SamplingParams::validate`,
//! `validate_request`), whose field names are the OpenAI ones.

use serde_json::Value;

use super::super::error::{ApiError, RequestFieldNames};
use super::super::fields::{
    as_array, as_object, as_str, as_u64, get, opt_bool, opt_f32, opt_integer_bits, opt_str, opt_u64, type_error, Object,
};
use super::super::guided::parse_guided;
use super::super::prediction::{check_modalities, parse_prediction};
use super::super::prompt::PromptInput;
use super::super::reasoning::parse_reasoning_format;
use super::super::request::{ApiKind, ParsedRequest};
use super::super::template_options::parse_template_options;
use super::super::tools::{parse_tools, ToolsRequest};
use super::request_fields::check_fields;
use crate::engine::guided::GuidedRequest;
use crate::engine::request::MAX_CHOICES;
use crate::engine::sampling::{SamplingParams, MAX_TOP_LOGPROBS};
use crate::engine::RequestOptions;
use crate::model::TokenId;

/// OpenAI's legacy Completions API generates 16 tokens when `max_tokens` is absent (API reference, "Create
/// completion": "Defaults to 16"); chat has no such default and fills the remaining context.
pub const COMPLETION_DEFAULT_MAX_TOKENS: usize = 16;

/// OpenAI's default `temperature` (API reference: "Defaults to 1"), for a request that does not set one. The
/// engine's own `SamplingParams::default()` stays greedy: Rust callers of `Engine::submit` build their
/// parameters themselves, while OpenAI clients expect OpenAI's default.
pub const OPENAI_DEFAULT_TEMPERATURE: f32 = 1.0;

impl ParsedRequest {
    /// Reads `json`. `kind: Some(k)` forces the endpoint; `None` decides by which of `messages` (chat) and
    /// `prompt` (completion) is present: both or neither is an error. A field ember does not implement is an
    /// error naming it, as the OpenAI API answers unknown arguments (`request_fields.rs`); so is a known field
    /// with the wrong type.
    pub fn parse(json: &str, kind: Option<ApiKind>) -> Result<Self, ApiError> {
        let body: Value = serde_json::from_str(json)
            .map_err(|e| ApiError::malformed(format!("the request body is not valid JSON: {e}")))?;
        Self::from_value(&body, kind)
    }

    /// [`ParsedRequest::parse`] of a body already read: another API's request, translated into OpenAI's
    /// (`translate.rs`).
    pub fn from_value(body: &Value, kind: Option<ApiKind>) -> Result<Self, ApiError> {
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
        check_modalities(o)?;
        let (max_tokens, max_tokens_name) = parse_max_tokens(o, kind)?;
        let stream = opt_bool(o, "stream")?.unwrap_or(false);
        let include_usage = parse_stream_options(o, stream)?;
        // OpenAI's `suffix` is "" by default, so "" is no suffix.
        let suffix = opt_str(o, "suffix")?.filter(|s| !s.is_empty()).map(str::to_owned);
        if suffix.is_some() && kind == ApiKind::Chat {
            return Err(ApiError::invalid("suffix", "suffix is a completions field: a chat request cannot have one"));
        }
        opt_str(o, "user")?; // Accepted for compatibility; only its type is checked.
        let n = parse_n(o)?;
        check_best_of(o, n)?;
        let (tools, guided) = parse_tools_and_guided(o, kind, stream)?;
        let model = opt_str(o, "model")?.map(str::to_owned);
        // The fields are read in this order, so that of two faulty fields the same one is named first.
        let mut options =
            RequestOptions { sampling: parse_sampling(o)?, max_tokens, guided, ..RequestOptions::default() };
        options.stop = parse_stop(o)?;
        options.stop_token_ids = parse_stop_token_ids(o)?;
        fill(&mut options.include_stop_str_in_output, opt_bool(o, "include_stop_str_in_output")?);
        fill(&mut options.skip_special_tokens, opt_bool(o, "skip_special_tokens")?);
        fill(&mut options.include_metrics, opt_bool(o, "include_metrics")?);
        let include_choice_metrics = opt_bool(o, "include_choice_metrics")?.unwrap_or(false);
        fill(&mut options.ignore_eos, opt_bool(o, "ignore_eos")?);
        options.logprobs = parse_logprobs(o, kind)?;
        options.prompt_logprobs = parse_prompt_logprobs(o, kind)?;
        fill(&mut options.min_tokens, opt_u64(o, "min_tokens")?.map(saturating_usize));
        fill(&mut options.speculative_decoding, opt_bool(o, "speculative_decoding")?);
        options.deadline_ms = opt_u64(o, "deadline_ms")?;
        fill(&mut options.priority, parse_priority(o)?);
        fill(&mut options.return_progress, opt_bool(o, "return_progress")?);
        Ok(ParsedRequest {
            kind,
            model,
            input,
            options,
            n,
            suffix,
            stream,
            include_usage,
            include_choice_metrics,
            echo: parse_echo(o, kind)?,
            tools,
            template: parse_template_options(o, kind)?,
            reasoning_format: parse_reasoning_format(o, kind)?,
            prediction: parse_prediction(o)?,
            warnings: get(o, "verbosity")
                .map(|_| "verbosity has no effect: ember's models have no verbosity setting".to_owned())
                .into_iter()
                .collect(),
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

/// A field's value over its default (`RequestOptions::default()`'s, the one place the engine's defaults are
/// written), when the body has the field.
fn fill<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

fn required<'a>(o: &'a Object, name: &str) -> Result<&'a Value, ApiError> {
    get(o, name).ok_or_else(|| ApiError::invalid(name, format!("{name} is required")))
}

/// `n`, choices per prompt: 1..=MAX_CHOICES (the engine also caps n × prompts). Checked here, before anything is
/// sized by it.
fn parse_n(o: &Object) -> Result<usize, ApiError> {
    match opt_u64(o, "n")? {
        None => Ok(1),
        Some(n @ 1..) if n <= MAX_CHOICES as u64 => Ok(n as usize),
        Some(n) => Err(ApiError::invalid("n", format!("n = {n} is not in 1..={MAX_CHOICES}"))),
    }
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
    for (name, value) in options.iter().filter(|(_, v)| !v.is_null()) {
        match name.as_str() {
            "include_usage" => {}
            // OpenAI pads its stream chunks against length side channels; ember's chunks are not padded, so the
            // option has no effect. Its type is still checked.
            "include_obfuscation" if value.is_boolean() => {}
            "include_obfuscation" => return Err(type_error("stream_options.include_obfuscation", "a boolean", value)),
            other => {
                let param = format!("stream_options.{other}");
                return Err(ApiError::invalid(&param, format!("unrecognized request argument: {param}")));
            }
        }
    }
    Ok(get(options, "include_usage")
        .map(|v| v.as_bool().ok_or_else(|| type_error("stream_options.include_usage", "a boolean", v)))
        .transpose()?
        .unwrap_or(false))
}

/// The sampling fields, each with the default that turns it off, except `temperature`, whose default is OpenAI's
/// ([`OPENAI_DEFAULT_TEMPERATURE`]: a request that wants greedy output says `temperature: 0`). `top_k: -1` also
/// turns top-k off (vLLM's convention, which clients written for vLLM send).
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
        temperature: opt_f32(o, "temperature")?.unwrap_or(OPENAI_DEFAULT_TEMPERATURE),
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

/// `tools` and `tool_choice` (chat only), and the structured-output fields: tools are a constraint of their own
/// (a forced call, or `"auto"`'s lazy grammar), so they cannot be combined with another.
fn parse_tools_and_guided(
    o: &Object,
    kind: ApiKind,
    stream: bool,
) -> Result<(Option<ToolsRequest>, Option<GuidedRequest>), ApiError> {
    let guided = parse_guided(o)?;
    if kind == ApiKind::Completion {
        if let Some(name) = ["tools", "tool_choice"].into_iter().find(|n| get(o, n).is_some()) {
            return Err(ApiError::invalid(name, format!("{name} is a chat field")));
        }
        return Ok((None, guided));
    }
    let Some(tools) = parse_tools(o)? else { return Ok((None, guided)) };
    if let Some(other) = guided {
        let field = other.field.split('.').next().unwrap_or(other.field);
        return Err(ApiError::invalid(
            field,
            format!(
                "{field} cannot constrain a request with tools: their calls are constrained already (with \
                 tool_choice \"auto\", the default, too); set tool_choice to \"none\" to use {field}"
            ),
        ));
    }
    if stream && get(o, "logprobs").and_then(Value::as_bool) == Some(true) {
        return Err(ApiError::invalid(
            "logprobs",
            "logprobs in a stream with tools are not supported by ember (they are in a whole response): a streamed \
             call's deltas carry no tokens",
        ));
    }
    Ok((Some(tools), None))
}

/// `best_of`: OpenAI generates that many candidates and returns the `n` most likely. ember does not rank
/// candidates, so only `best_of` = `n` (every candidate is returned, the ranking is moot) is accepted.
fn check_best_of(o: &Object, n: usize) -> Result<(), ApiError> {
    match opt_u64(o, "best_of")? {
        Some(b) if saturating_usize(b) != n => Err(ApiError::invalid(
            "best_of",
            format!("best_of ({b}) other than n ({n}) is not supported by ember: it does not rank candidates"),
        )),
        _ => Ok(()),
    }
}

/// `echo` (completions only): each choice's text starts with its prompt; with `logprobs`, so do its log
/// probabilities (the prompt's are then computed, as for `prompt_logprobs`).
fn parse_echo(o: &Object, kind: ApiKind) -> Result<bool, ApiError> {
    let echo = opt_bool(o, "echo")?.unwrap_or(false);
    if echo && kind == ApiKind::Chat {
        return Err(ApiError::invalid("echo", "echo is a completions field"));
    }
    Ok(echo)
}

/// `prompt_logprobs` (vLLM's extension; completions only in ember): 0..=20 alternatives per prompt token.
fn parse_prompt_logprobs(o: &Object, kind: ApiKind) -> Result<Option<usize>, ApiError> {
    let k = alternatives(o, "prompt_logprobs")?;
    if k.is_some() && kind == ApiKind::Chat {
        return Err(ApiError::invalid("prompt_logprobs", "prompt_logprobs is a completions field in ember"));
    }
    Ok(k)
}

/// A count of alternatives per token, 0..=20 (`top_logprobs`, completions' `logprobs`, `prompt_logprobs`).
fn alternatives(o: &Object, name: &str) -> Result<Option<usize>, ApiError> {
    let Some(k) = opt_u64(o, name)? else { return Ok(None) };
    if k > MAX_TOP_LOGPROBS as u64 {
        return Err(ApiError::invalid(name, format!("{name} must be in 0..={MAX_TOP_LOGPROBS}, got {k}")));
    }
    Ok(Some(k as usize))
}

/// Chat: `logprobs` (a boolean) and `top_logprobs` (0..=20, only with `logprobs: true`, as OpenAI requires).
/// Completions: `logprobs` is the count of alternatives itself (0..=20; OpenAI's legacy API allows 5, vLLM 20),
/// and `top_logprobs` is not a completions field.
fn parse_logprobs(o: &Object, kind: ApiKind) -> Result<Option<usize>, ApiError> {
    match kind {
        ApiKind::Chat => {
            let on = opt_bool(o, "logprobs")?.unwrap_or(false);
            match (on, alternatives(o, "top_logprobs")?) {
                (true, top) => Ok(Some(top.unwrap_or(0))),
                (false, None) => Ok(None),
                (false, Some(_)) => Err(ApiError::invalid("top_logprobs", "top_logprobs requires logprobs to be true")),
            }
        }
        ApiKind::Completion => {
            if get(o, "top_logprobs").is_some() {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "top_logprobs is a chat field; a completions request sets logprobs to the number of alternatives",
                ));
            }
            alternatives(o, "logprobs")
        }
    }
}

/// vLLM's `priority`: an integer in `i32` range.
fn parse_priority(o: &Object) -> Result<Option<i32>, ApiError> {
    get(o, "priority")
        .map(|v| {
            v.as_i64().and_then(|i| i32::try_from(i).ok()).ok_or_else(|| {
                ApiError::invalid("priority", format!("priority must be an integer in i32 range, got {v}"))
            })
        })
        .transpose()
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
#[path = "request_tests.rs"]
mod tests;
