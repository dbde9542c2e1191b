//! Tests of `request.rs`: each field's parsing, defaults and refusals (a child module of `request`, so that its
//! private parsers are in reach).

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
    assert_eq!(
        r.options.sampling,
        SamplingParams { temperature: 1.0, ..SamplingParams::default() },
        "OpenAI's default"
    );
    assert_eq!((r.options.max_tokens, r.n, r.stream, r.include_usage), (None, 1, false, false));
    assert_eq!((r.options.include_stop_str_in_output, r.options.skip_special_tokens, r.suffix), (false, true, None));
    assert_eq!((r.options.include_metrics, r.include_choice_metrics, r.options.ignore_eos), (false, false, false));
    assert_eq!(r.names, RequestFieldNames { prompt: "messages", max_tokens: "max_tokens" });
    // Every option the body leaves out is the engine's own default, but for the two OpenAI sets otherwise.
    let sampling = SamplingParams { temperature: OPENAI_DEFAULT_TEMPERATURE, ..SamplingParams::default() };
    assert_eq!(r.options, RequestOptions { sampling: sampling.clone(), ..RequestOptions::default() });
    let completion = ParsedRequest::parse(r#"{"prompt": "x"}"#, None).unwrap();
    let max_tokens = Some(COMPLETION_DEFAULT_MAX_TOKENS);
    assert_eq!(completion.options, RequestOptions { sampling, max_tokens, ..RequestOptions::default() });
}

#[test]
fn every_field_is_read() {
    let r = chat(
        r#", "model": "m", "max_completion_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
        "min_p": 0.1, "n": 2, "stop": ["a", "b"], "seed": 7, "presence_penalty": 0.5, "frequency_penalty": -0.5,
        "repetition_penalty": 1.1, "logit_bias": {"12": -100, "7": 2.5}, "stream": true,
        "stream_options": {"include_usage": true}, "include_metrics": true, "include_choice_metrics": true,
        "ignore_eos": true, "user": "u", "stop_token_ids": [2], "tools": [], "logprobs": true, "top_logprobs": 3,
        "include_stop_str_in_output": true, "skip_special_tokens": false, "suffix": """#,
    )
    .unwrap();
    assert!(r.options.include_stop_str_in_output && !r.options.skip_special_tokens && r.suffix.is_none());
    let s = &r.options.sampling;
    assert_eq!((s.temperature, s.top_p, s.top_k, s.min_p), (0.5, 0.9, 40, 0.1));
    assert_eq!((s.presence_penalty, s.frequency_penalty, s.repetition_penalty), (0.5, -0.5, 1.1));
    assert_eq!((s.seed, s.logit_bias.len()), (Some(7), 2));
    assert!(s.logit_bias.contains(&(12, -100.0)) && s.logit_bias.contains(&(7, 2.5)));
    assert_eq!((r.model.as_deref(), r.options.max_tokens, r.n), (Some("m"), Some(5), 2));
    assert_eq!((r.options.stop, r.options.stop_token_ids), (vec!["a".to_owned(), "b".to_owned()], vec![2]));
    assert!(
        r.stream && r.include_usage && r.options.include_metrics && r.include_choice_metrics && r.options.ignore_eos
    );
    let bad_tool = chat(r#", "tools": [{"type": "function"}], "tool_choice": "required""#).unwrap_err();
    assert_eq!(bad_tool.param.as_deref(), Some("tools[0].function"), "a malformed tool is refused by path");
    let forced = chat(r#", "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required""#);
    assert!(forced.as_ref().is_ok_and(|r| r.tools.is_some() && r.options.guided.is_none()), "{forced:?}");
    let both = r#", "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
        "response_format": {"type": "json_object"}"#;
    assert_eq!(param(both), "response_format", "one constraint per request");
    let auto = r#", "tools": [{"type": "function", "function": {"name": "f"}}], "guided_regex": "a""#;
    assert_eq!(param(auto), "guided_regex", "\"auto\" (the default) constrains as well");
    let auto = chat(r#", "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto""#);
    assert!(auto.as_ref().is_ok_and(|r| r.tools.is_some()), "{auto:?}");
    let none = r#", "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none",
        "guided_regex": "a""#;
    assert!(chat(none).is_ok_and(|r| r.tools.is_none() && r.options.guided.is_some()), "no call, one constraint");
    let streamed_auto = r#", "tools": [{"type": "function", "function": {"name": "f"}}], "stream": true,
        "logprobs": true"#;
    assert_eq!(param(streamed_auto), "logprobs");
    let streamed = r#", "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
        "stream": true, "logprobs": true"#;
    assert_eq!(param(streamed), "logprobs");
    let completion = ParsedRequest::parse(r#"{"prompt": "x", "tools": []}"#, None).unwrap_err();
    assert_eq!(completion.param.as_deref(), Some("tools"), "a chat field");
    assert_eq!(r.names.max_tokens, "max_completion_tokens");
    assert_eq!(r.options.logprobs, Some(3));
    assert_eq!(chat(r#", "min_tokens": 4"#).unwrap().options.min_tokens, 4);
    assert!(chat("").unwrap().options.speculative_decoding, "speculates by default");
    assert!(!chat(r#", "speculative_decoding": false"#).unwrap().options.speculative_decoding);
    assert_eq!(param(r#", "speculative_decoding": 0"#), "speculative_decoding");
    assert_eq!(chat(r#", "deadline_ms": 1500"#).unwrap().options.deadline_ms, Some(1500));
    assert_eq!(param(r#", "deadline_ms": -1"#), "deadline_ms");
    assert_eq!(chat(r#", "priority": -3"#).unwrap().options.priority, -3);
    assert_eq!(chat("").unwrap().options.priority, 0);
    assert_eq!(param(r#", "priority": 1.5"#), "priority");
    assert_eq!(param(r#", "priority": 4294967296"#), "priority");
    assert!(!chat("").unwrap().options.return_progress, "no progress unless asked");
    assert!(chat(r#", "return_progress": true"#).unwrap().options.return_progress);
    assert_eq!(param(r#", "return_progress": 1"#), "return_progress");
    assert_eq!(param(r#", "min_tokens": -1"#), "min_tokens");
    assert!(chat(r#", "best_of": 2, "n": 2"#).is_ok(), "best_of = n returns every candidate");
    assert_eq!(param(r#", "best_of": 2"#), "best_of");
    assert_eq!(param(r#", "echo": true"#), "echo", "a completions field");
    let completion = |extra: &str| ParsedRequest::parse(&format!(r#"{{"prompt": "x"{extra}}}"#), None);
    assert!(completion(r#", "echo": true"#).unwrap().echo);
    assert!(!completion(r#", "echo": false"#).unwrap().echo);
    let echoed = completion(r#", "echo": true, "logprobs": 2"#).unwrap();
    assert!(echoed.echo && echoed.options.logprobs == Some(2), "echo with logprobs scores the prompt");
    assert_eq!(completion(r#", "echo": 1"#).unwrap_err().param.as_deref(), Some("echo"));
    assert_eq!(completion(r#", "prompt_logprobs": 3"#).unwrap().options.prompt_logprobs, Some(3));
    assert_eq!(completion(r#", "prompt_logprobs": 0"#).unwrap().options.prompt_logprobs, Some(0));
    assert_eq!(completion("").unwrap().options.prompt_logprobs, None);
    for bad in [r#", "prompt_logprobs": 21"#, r#", "prompt_logprobs": -1"#, r#", "prompt_logprobs": true"#] {
        assert_eq!(completion(bad).unwrap_err().param.as_deref(), Some("prompt_logprobs"), "{bad}");
    }
    assert_eq!(param(r#", "prompt_logprobs": 1"#), "prompt_logprobs", "a completions field in ember");
}

#[test]
fn logprobs_are_a_flag_and_a_count_in_chat_and_a_count_in_completions() {
    assert_eq!(chat("").unwrap().options.logprobs, None);
    assert_eq!(chat(r#", "logprobs": false"#).unwrap().options.logprobs, None);
    assert_eq!(chat(r#", "logprobs": true"#).unwrap().options.logprobs, Some(0));
    assert_eq!(chat(r#", "logprobs": true, "top_logprobs": 20"#).unwrap().options.logprobs, Some(20));
    assert_eq!(param(r#", "logprobs": true, "top_logprobs": 21"#), "top_logprobs");
    assert_eq!(param(r#", "top_logprobs": 2"#), "top_logprobs", "alternatives need logprobs: true");
    assert_eq!(param(r#", "logprobs": 1"#), "logprobs", "chat's logprobs is a boolean");
    let completion = |extra: &str| ParsedRequest::parse(&format!(r#"{{"prompt": "x"{extra}}}"#), None);
    assert_eq!(completion("").unwrap().options.logprobs, None);
    assert_eq!(completion(r#", "logprobs": 0"#).unwrap().options.logprobs, Some(0));
    assert_eq!(completion(r#", "logprobs": 5"#).unwrap().options.logprobs, Some(5));
    for (extra, field) in [
        (r#", "logprobs": 21"#, "logprobs"),
        (r#", "logprobs": true"#, "logprobs"),
        (r#", "top_logprobs": 1"#, "top_logprobs"),
    ] {
        assert_eq!(completion(extra).unwrap_err().param.as_deref(), Some(field), "{extra}");
    }
}

#[test]
fn kind_is_forced_or_decided_by_the_input_field() {
    let completion = ParsedRequest::parse(r#"{"prompt": "x"}"#, None).unwrap();
    assert_eq!(
        (completion.kind, completion.options.max_tokens),
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
        (r#", "include_stop_str_in_output": 1"#, "include_stop_str_in_output"),
        (r#", "skip_special_tokens": "false""#, "skip_special_tokens"),
        (r#", "suffix": 3"#, "suffix"),
    ] {
        assert_eq!(param(extra), field, "{extra}");
    }
}

#[test]
fn conflicting_or_misplaced_options_are_errors() {
    assert_eq!(param(r#", "max_tokens": 4, "max_completion_tokens": 5"#), "max_completion_tokens");
    assert_eq!(chat(r#", "max_tokens": 4, "max_completion_tokens": 4"#).unwrap().options.max_tokens, Some(4));
    assert_eq!(param(r#", "stream_options": {"include_usage": true}"#), "stream_options");
    let e = chat(r#", "suffix": "}""#).unwrap_err();
    assert_eq!((e.param.as_deref(), e.error_type), (Some("suffix"), "invalid_request_error"));
    assert!(e.message.contains("completions"), "{}", e.message);
}

#[test]
fn a_completion_reads_its_suffix() {
    let r = ParsedRequest::parse(r#"{"prompt": "def f(", "suffix": "  return x"}"#, None).unwrap();
    assert_eq!(r.suffix.as_deref(), Some("  return x"));
    let r = ParsedRequest::parse(r#"{"prompt": "x", "suffix": null}"#, None).unwrap();
    assert_eq!(r.suffix, None);
}

#[test]
fn temperature_defaults_to_openais_and_zero_is_greedy() {
    assert_eq!(chat("").unwrap().options.sampling.temperature, OPENAI_DEFAULT_TEMPERATURE);
    assert_eq!(chat(r#", "temperature": 0"#).unwrap().options.sampling.temperature, 0.0);
    assert_eq!(SamplingParams::default().temperature, 0.0, "the engine's own default stays greedy");
}

#[test]
fn nulls_are_defaults_and_vllm_conventions_are_accepted() {
    let r = chat(r#", "temperature": null, "stop": null, "stream_options": null, "top_k": -1, "seed": -1"#).unwrap();
    assert_eq!(
        (r.options.sampling.temperature, r.options.sampling.top_k, r.options.sampling.seed),
        (1.0, 0, Some(u64::MAX))
    );
    assert!(r.options.stop.is_empty());
}
