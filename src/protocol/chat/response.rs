//! Whole (non-streamed) response bodies: `chat.completion` and `text_completion`, with `usage` and `metrics`.
//! Built from a request's accumulated output (`RequestHandle::choices`), never from its event queue.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::super::error::ApiError;
use super::super::json::{encode, Slot};
use super::super::metrics_gate::{MetricsGate, TimingMetricsJson, TimingsJson};
use super::super::reasoning::ReasoningReader;
use super::super::request::ApiKind;
use super::super::tools::call_reader::CallReader;
use super::super::tools::{CallIdStyle, TOOL_CALLS_FINISH_REASON};
use super::logprobs::{encode_logprobs, prepend_echoed, LogprobsJson, TextOffsets, TokenPieces};
use super::prompt_logprobs::{PositionJson, PromptScores};
use crate::engine::{ChoiceOutput, FinishReason, RequestHandle};

/// What every body and chunk of one request repeats: `id`, `created`, `model`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResponseHeader {
    /// `chatcmpl-…` or `cmpl-…` followed by 32 hex digits.
    pub id: String,
    /// Wall clock, Unix seconds, when the request was submitted.
    pub created: u64,
    /// The request's `model`, else the model's own name.
    pub model: String,
}

impl ResponseHeader {
    pub fn new(kind: ApiKind, model: String, request_id: u64) -> Self {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let prefix = match kind {
            ApiKind::Chat => "chatcmpl-",
            ApiKind::Completion => "cmpl-",
        };
        // Unique across requests, engines and processes without global state: each `RandomState` is keyed from
        // the OS's randomness (per thread, then varied per instance), and the hashed tuple differs per request.
        let draw = |salt: u64| RandomState::new().hash_one((salt, request_id, now.as_nanos()));
        ResponseHeader { id: format!("{prefix}{:016x}{:016x}", draw(0), draw(1)), created: now.as_secs(), model }
    }
}

/// `usage`: prompt tokens counted once per prompt (not once per choice), completion tokens summed over choices,
/// and OpenAI's `prompt_tokens_details.cached_tokens`: the prompt tokens whose KV the prefix cache supplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub prompt_tokens_details: PromptTokensDetails,
    /// Only for a thinking model's chat (`reasoning.rs`): how many completion tokens wrote reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct PromptTokensDetails {
    pub cached_tokens: u64,
}

/// OpenAI's `usage.completion_tokens_details`, with the counts ember has, summed over choices like
/// `completion_tokens`: `reasoning_tokens` (a thinking model's chat), and with `prediction` how many draft tokens
/// taken from it (or from the output's own earlier text) speculative decoding accepted and rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct CompletionTokensDetails {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_prediction_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected_prediction_tokens: Option<u64>,
}

impl Usage {
    /// The usage of `handle`'s request, from its choices' outputs (read by `reasoning` for a thinking model).
    /// `predicted`: the request has a `prediction`, whose drafts are counted.
    pub fn of(
        handle: &RequestHandle,
        choices: &[ChoiceOutput],
        reasoning: Option<&ReasoningReader>,
        predicted: bool,
    ) -> Self {
        let prompt_tokens = u64::from(handle.prompt_tokens());
        let completion_tokens = choices.iter().map(|c| u64::from(c.completion_tokens)).sum();
        let reasoning_tokens = reasoning.map(|r| choices.iter().map(|c| u64::from(r.reasoning_tokens(c))).sum());
        let (mut drafted, mut accepted) = (0u64, 0u64);
        if predicted {
            for choice in 0..choices.len() {
                let m = handle.extended_metrics(choice);
                drafted += u64::from(m.num_draft_tokens.unwrap_or(0));
                accepted += u64::from(m.num_accepted_tokens.unwrap_or(0));
            }
        }
        let details = CompletionTokensDetails {
            reasoning_tokens,
            accepted_prediction_tokens: predicted.then_some(accepted),
            rejected_prediction_tokens: predicted.then_some(drafted.saturating_sub(accepted)),
        };
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens: u64::from(handle.cached_prompt_tokens()) },
            completion_tokens_details: (reasoning.is_some() || predicted).then_some(details),
        }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<Choice<'a>>,
    usage: Usage,
    #[serde(skip_serializing_if = "Slot::is_absent")]
    metrics: Slot<TimingMetricsJson>,
    /// llama.cpp server's `timings`, behind the same gate as `metrics`.
    #[serde(skip_serializing_if = "Slot::is_absent")]
    timings: Slot<TimingsJson>,
    /// Only when the engine failed the request: why (its unfinished choices end with `"error"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ApiError>,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: usize,
    #[serde(flatten)]
    output: ChoiceOutputJson<'a>,
    /// `null` unless the request asked for log probabilities.
    logprobs: Option<LogprobsJson>,
    /// OpenAI's `"stop"` / `"length"`, and ours: `"cancelled"`, `"error"`.
    finish_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Slot::is_absent")]
    metrics: Slot<TimingMetricsJson>,
    /// vLLM's `prompt_logprobs`, only when asked for (`null` if the prompt was never scored).
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_logprobs: Option<Option<Vec<Option<PositionJson>>>>,
}

/// A choice's output: `"message": {...}` (chat) or `"text": "..."` (completion).
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum ChoiceOutputJson<'a> {
    Message(AssistantMessage<'a>),
    Text(&'a str),
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    /// `null` when the message is a tool call with no text before it.
    content: Option<&'a str>,
    /// A thinking model's reasoning (`reasoning.rs`), when it wrote some.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCallJson>>,
}

/// OpenAI's `message.tool_calls[i]`: `arguments` is the JSON text of the arguments, as the model wrote it.
#[derive(Serialize)]
struct ToolCallJson {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionCallJson,
}

#[derive(Serialize)]
struct FunctionCallJson {
    name: String,
    arguments: String,
}

/// What a request asked to add to its choices: log probabilities (named by these pieces), with `echo` each
/// choice's prompt before its text (empty: no echo), with tools how calls are read with each choice's call id,
/// for a thinking model how its outputs split into reasoning and content, and its prompts' scores (`prompt_logprobs`, `echo` with `logprobs`).
#[derive(Clone, Copy, Default)]
pub(crate) struct ChoiceExtras<'a> {
    pub logprobs: Option<&'a dyn TokenPieces>,
    pub echo: &'a [String],
    pub calls: Option<(&'a CallReader, &'a [String])>,
    pub reasoning: Option<&'a ReasoningReader>,
    pub prompt_scores: Option<(&'a PromptScores, &'a dyn TokenPieces)>,
    /// The request has a `prediction`: usage counts its drafts.
    pub predicted: bool,
}

/// The whole response body of an ended request.
pub(crate) fn response_body(
    kind: ApiKind,
    header: &ResponseHeader,
    gate: MetricsGate,
    handle: &RequestHandle,
    extras: ChoiceExtras<'_>,
) -> String {
    let mut outputs = handle.choices();
    for (output, prompt) in outputs.iter_mut().zip(extras.echo) {
        output.text.insert_str(0, prompt);
    }
    let logprobs = extras.logprobs;
    let metrics: Vec<_> = (0..outputs.len()).map(|i| handle.timing_metrics(i)).collect();
    let choices = outputs.iter().enumerate().map(|(index, c)| {
        let (reasoning, text) = match (kind, extras.reasoning) {
            (ApiKind::Chat, Some(r)) => {
                let split = r.split(&c.text);
                (split.reasoning, split.content)
            }
            _ => (None, c.text.as_str()),
        };
        // A call that completed (a choice cut short by max_tokens keeps its text and its reason).
        let call = extras
            .calls
            .filter(|_| c.finish_reason == Some(FinishReason::Stop))
            .and_then(|(reader, ids)| Some((&ids[index], reader.read(text)?)));
        let (output, finish_reason) = match (kind, call) {
            (ApiKind::Chat, Some((id, read))) => {
                // The first call has the choice's id (a stream announces it with that one); later calls new ones.
                let style = extras.calls.map_or(CallIdStyle::OpenAi, |(reader, _)| reader.id_style());
                let tool_calls = read.calls.into_iter().enumerate().map(|(i, call)| ToolCallJson {
                    id: if i == 0 { id.clone() } else { style.new_id(i as u64) },
                    kind: "function",
                    function: FunctionCallJson { name: call.name, arguments: call.arguments },
                });
                let tool_calls = Some(tool_calls.collect());
                let message = AssistantMessage {
                    role: "assistant",
                    content: read.content,
                    reasoning_content: reasoning,
                    tool_calls,
                };
                (ChoiceOutputJson::Message(message), Some(TOOL_CALLS_FINISH_REASON))
            }
            (ApiKind::Chat, _) => {
                let message = AssistantMessage {
                    role: "assistant",
                    content: Some(text),
                    reasoning_content: reasoning,
                    tool_calls: None,
                };
                (ChoiceOutputJson::Message(message), c.finish_reason.map(FinishReason::as_str))
            }
            (ApiKind::Completion, _) => (ChoiceOutputJson::Text(&c.text), c.finish_reason.map(FinishReason::as_str)),
        };
        let echo = extras.echo.get(index).map_or("", String::as_str);
        let echoed = extras.prompt_scores.and_then(|(scores, pieces)| scores.echoed(index, handle, pieces, echo));
        let logprobs = logprobs.map(|p| {
            let own = encode_logprobs(kind, &c.logprobs, p, &mut TextOffsets::starting_at(echo.chars().count()));
            match echoed {
                Some(prompt) => prepend_echoed(prompt, own),
                None => own,
            }
        });
        Choice {
            index,
            output,
            logprobs,
            finish_reason,
            metrics: gate.choice(|| metrics[index]),
            prompt_logprobs: extras
                .prompt_scores
                .and_then(|(scores, pieces)| scores.prompt_logprobs_json(index, handle, pieces)),
        }
    });
    encode(&Body {
        id: &header.id,
        object: match kind {
            ApiKind::Chat => "chat.completion",
            ApiKind::Completion => "text_completion",
        },
        created: header.created,
        model: &header.model,
        choices: choices.collect(),
        usage: Usage::of(handle, &outputs, extras.reasoning, extras.predicted),
        metrics: gate.response(&metrics),
        timings: gate.timings(outputs.len(), || handle.llamacpp_timings(0)),
        error: handle.error().map(ApiError::server),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::protocol::test_support::{header, FakeRequest};

    fn body(kind: ApiKind, gate: MetricsGate, r: &FakeRequest) -> Value {
        serde_json::from_str(&response_body(kind, &header(), gate, &r.handle, ChoiceExtras::default())).unwrap()
    }

    fn one_choice_request() -> FakeRequest {
        let r = FakeRequest::new(1, 7);
        r.token(0, "Par", 2.0);
        r.token(0, "is", 2.25);
        r.finish(0, FinishReason::Stop);
        r
    }

    #[test]
    fn a_chat_completion_body() {
        let r = one_choice_request();
        let expected = json!({
            "id": "chatcmpl-test", "object": "chat.completion", "created": 1_700_000_000, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "logprobs": null,
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9,
                      "prompt_tokens_details": {"cached_tokens": 0}},
            "metrics": {"time_to_first_token_ms": 500.0, "generation_time_ms": 250.0, "queue_time_ms": 500.0,
                        "mean_itl_ms": 250.0, "tokens_per_second": 2.0 / 0.75},
            "timings": {"cache_n": 0, "prompt_n": 7, "prompt_ms": 500.0, "prompt_per_token_ms": 500.0 / 7.0,
                        "prompt_per_second": 14.0, "predicted_n": 2, "predicted_ms": 250.0,
                        "predicted_per_token_ms": 250.0, "predicted_per_second": 4.0},
        });
        assert_eq!(body(ApiKind::Chat, MetricsGate::new(true, true, false), &r), expected);
    }

    #[test]
    fn a_closed_gate_leaves_the_metrics_keys_out() {
        let r = one_choice_request();
        for (engine, request) in [(false, false), (false, true), (true, false)] {
            let b = body(ApiKind::Completion, MetricsGate::new(engine, request, true), &r);
            assert_eq!(
                (b["object"].as_str(), b["choices"][0]["text"].as_str()),
                (Some("text_completion"), Some("Paris"))
            );
            assert!(b.get("metrics").is_none() && b["choices"][0].get("metrics").is_none(), "{b}");
            assert!(b.get("timings").is_none(), "{b}");
        }
    }

    #[test]
    fn several_choices_have_null_request_metrics_and_per_choice_metrics_on_demand() {
        let r = FakeRequest::new(2, 7);
        r.token(0, "a", 2.0);
        r.token(1, "b", 3.0);
        r.finish(0, FinishReason::Stop);
        r.finish(1, FinishReason::Length);
        let b = body(ApiKind::Completion, MetricsGate::new(true, true, true), &r);
        assert_eq!((&b["metrics"], &b["timings"]), (&Value::Null, &Value::Null));
        assert_eq!(b["choices"][0]["metrics"]["time_to_first_token_ms"], json!(500.0));
        assert_eq!(b["choices"][1]["metrics"]["time_to_first_token_ms"], json!(1500.0));
        let details = json!({"cached_tokens": 0});
        let usage =
            json!({"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9, "prompt_tokens_details": details});
        assert_eq!(b["usage"], usage);
        let b = body(ApiKind::Completion, MetricsGate::new(true, true, false), &r);
        assert!(b["metrics"].is_null() && b["choices"][1].get("metrics").is_none());
    }

    #[test]
    fn a_failed_request_says_why() {
        let r = FakeRequest::new(2, 7);
        r.token(0, "a", 2.0);
        r.finish(0, FinishReason::Stop);
        r.shared.fail("forward pass failed: boom".into());
        let b = body(ApiKind::Chat, MetricsGate::new(false, false, false), &r);
        assert_eq!(
            (b["choices"][0]["finish_reason"].as_str(), b["choices"][1]["finish_reason"].as_str()),
            (Some("stop"), Some("error"))
        );
        assert_eq!(b["error"]["message"], "forward pass failed: boom");
        assert!(body(ApiKind::Chat, MetricsGate::new(false, false, false), &one_choice_request())
            .get("error")
            .is_none());
    }

    #[test]
    fn ids_are_unique_and_prefixed() {
        let a = ResponseHeader::new(ApiKind::Chat, "m".into(), 1);
        let b = ResponseHeader::new(ApiKind::Chat, "m".into(), 1);
        assert!(a.id.starts_with("chatcmpl-") && a.id.len() == "chatcmpl-".len() + 32, "{}", a.id);
        assert_ne!(a.id, b.id);
        assert!(ResponseHeader::new(ApiKind::Completion, "m".into(), 1).id.starts_with("cmpl-"));
        assert!(a.created > 1_600_000_000);
    }

    /// `"auto"` (Hermes): the text before the call is the message's content; a message without a call, or a
    /// call cut short, is an ordinary message.
    #[test]
    fn an_auto_call_keeps_the_text_before_it() {
        use crate::protocol::tools::auto_call::AutoCalls;
        use crate::protocol::tools::call_syntax::HERMES;
        let calls = AutoCalls::new(HERMES, &[], true, &crate::protocol::test_support::tokenizer());
        let calls = AutoCalls { names: vec!["f".into()], ..calls };
        let reader = CallReader::Auto(calls);
        let ids = ["call_1".to_owned()];
        let run = |text: &str, reason: FinishReason| {
            let r = FakeRequest::new(1, 7);
            r.token(0, text, 2.0);
            r.finish(0, reason);
            let extras = ChoiceExtras { calls: Some((&reader, &ids)), ..ChoiceExtras::default() };
            let gate = MetricsGate::new(false, false, false);
            let b: Value =
                serde_json::from_str(&response_body(ApiKind::Chat, &header(), gate, &r.handle, extras)).unwrap();
            (b["choices"][0]["message"].clone(), b["choices"][0]["finish_reason"].clone())
        };
        let call = "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let tool_calls =
            json!([{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]);
        let message = json!({"role": "assistant", "content": "Let me look.", "tool_calls": tool_calls});
        assert_eq!(run(call, FinishReason::Stop), (message, json!("tool_calls")));
        let message = json!({"role": "assistant", "content": call});
        assert_eq!(run(call, FinishReason::Length), (message, json!("length")), "cut short: max_tokens, not a call");
        // Two calls: the second gets an id of its own.
        let two = format!("{call}\n<tool_call>\n{{\"name\": \"f\", \"arguments\": {{}}}}\n</tool_call>");
        let (message, reason) = run(&two, FinishReason::Stop);
        assert_eq!((message["tool_calls"].as_array().unwrap().len(), reason), (2, json!("tool_calls")), "{message}");
        let second = &message["tool_calls"][1];
        assert_eq!((&second["function"]["arguments"], second["id"].as_str().unwrap().len()), (&json!("{}"), 29));
        let message = json!({"role": "assistant", "content": "Hello."});
        assert_eq!(run("Hello.", FinishReason::Stop), (message, json!("stop")));
    }

    /// A thinking model's reply: its reasoning apart, the rest read as calls (Hermes) or as the content.
    #[test]
    fn the_reasoning_is_apart_and_the_rest_is_read_as_calls() {
        use crate::protocol::test_support::{thinking_reader, tokenizer};
        use crate::protocol::tools::auto_call::AutoCalls;
        use crate::protocol::tools::call_syntax::HERMES;
        let reader =
            CallReader::Auto(AutoCalls { names: vec!["f".into()], ..AutoCalls::new(HERMES, &[], true, &tokenizer()) });
        let reasoning = thinking_reader();
        let ids = ["call_1".to_owned()];
        let run = |text: &str, calls: bool| {
            let r = FakeRequest::new(1, 7);
            r.token(0, text, 2.0);
            r.finish(0, FinishReason::Stop);
            let extras = ChoiceExtras {
                calls: calls.then_some((&reader, ids.as_slice())),
                reasoning: Some(&reasoning),
                ..ChoiceExtras::default()
            };
            let gate = MetricsGate::new(false, false, false);
            let b: Value =
                serde_json::from_str(&response_body(ApiKind::Chat, &header(), gate, &r.handle, extras)).unwrap();
            b["choices"][0]["message"].clone()
        };
        let call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        let m = run(&format!("<think>Look it up.</think>\n\n{call}"), true);
        assert_eq!((&m["reasoning_content"], &m["content"]), (&json!("Look it up."), &Value::Null), "{m}");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "f");
        let m = run("<think>Easy.</think>\n\nParis.", false);
        assert_eq!(m, json!({"role": "assistant", "content": "Paris.", "reasoning_content": "Easy."}));
    }

    /// gpt-oss' harmony (`"auto"`): the analysis channel is the reasoning, a call on the commentary channel the
    /// message's call, the final channel's text its content; a call cut short is text.
    #[test]
    fn harmony_channels_make_one_message() {
        use crate::protocol::test_support::{harmony_reader, tokenizer};
        use crate::protocol::tools::auto_call::AutoCalls;
        use crate::protocol::tools::call_syntax::HARMONY;
        let reader = CallReader::Auto(AutoCalls {
            names: vec!["f".into()],
            ..AutoCalls::new(HARMONY, &[], false, &tokenizer())
        });
        let reasoning = harmony_reader(tokenizer());
        let ids = ["call_1".to_owned()];
        let run = |text: &str, reason: FinishReason| {
            let r = FakeRequest::new(1, 7);
            r.token(0, text, 2.0);
            r.finish(0, reason);
            let extras = ChoiceExtras {
                calls: Some((&reader, ids.as_slice())),
                reasoning: Some(&reasoning),
                ..ChoiceExtras::default()
            };
            let gate = MetricsGate::new(false, false, false);
            let b: Value =
                serde_json::from_str(&response_body(ApiKind::Chat, &header(), gate, &r.handle, extras)).unwrap();
            (b["choices"][0]["message"].clone(), b["choices"][0]["finish_reason"].clone())
        };
        let call = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}";
        let (m, reason) = run(
            &format!("<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant{call}"),
            FinishReason::Stop,
        );
        assert_eq!(reason, "tool_calls");
        assert_eq!((&m["reasoning_content"], &m["content"]), (&json!("Look it up."), &Value::Null), "{m}");
        let tool_calls =
            json!([{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]);
        assert_eq!(m["tool_calls"], tool_calls);
        let (m, reason) = run(
            "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Paris.",
            FinishReason::Stop,
        );
        assert_eq!(
            (m, reason),
            (json!({"role": "assistant", "content": "Paris.", "reasoning_content": "Easy."}), json!("stop"))
        );
        let (m, reason) = run(&call[..call.len() - 3], FinishReason::Length);
        assert_eq!((m, reason), (json!({"role": "assistant", "content": &call[..call.len() - 3]}), json!("length")));
    }
}
