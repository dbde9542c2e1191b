//! Bad requests through `ApiRequest::submit` on the real model: each gets the OpenAI error object with the
//! `param` at fault, whether the protocol layer (types, shapes) or the engine (ranges, lengths) refused it.

mod common;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::{ApiError, ApiKind, ApiRequest, CONTEXT_LENGTH_EXCEEDED, INVALID_REQUEST_ERROR, SERVER_ERROR};
use serde_json::{json, Value};

/// The model's context (`llama.context_length` of SmolLM2-135M).
const CONTEXT: usize = 8192;

/// An engine whose KV cache is larger than the model's context, so that the context is the limit.
fn engine() -> Engine {
    common::engine(EngineConfig { kv_cache_tokens: 2 * CONTEXT, ..Default::default() })
}

fn submit(e: &Engine, body: &str) -> Result<ApiRequest, ApiError> {
    ApiRequest::submit(e, body, None)
}

/// The error of a request body that must be refused, checked to be a well-formed OpenAI error object.
fn refused(e: &Engine, body: &str) -> ApiError {
    let error = match submit(e, body) {
        Ok(_) => panic!("accepted: {body}"),
        Err(error) => error,
    };
    let json: Value = serde_json::from_str(&error.to_json()).unwrap();
    let object = json["error"].as_object().unwrap();
    assert_eq!(object.len(), 4, "{json}");
    assert_eq!(object["message"].as_str(), Some(error.message.as_str()));
    assert_eq!(object["type"].as_str(), Some(error.error_type));
    assert_eq!(object["param"].as_str(), error.param.as_deref());
    assert_eq!(object["code"].as_str(), error.code.as_deref());
    error
}

/// A chat request for "hi" with `extra` fields merged in.
fn chat(extra: Value) -> String {
    let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body.to_string()
}

#[test]
fn malformed_json_has_no_param() {
    let e = engine();
    for body in ["", "{\"messages\": ", "not json", "[]", "42"] {
        let error = refused(&e, body);
        assert_eq!((error.error_type, error.param), (INVALID_REQUEST_ERROR, None), "{body}");
    }
}

#[test]
fn wrong_types_name_their_field() {
    let e = engine();
    for (extra, param) in [
        (json!({"temperature": "0.5"}), "temperature"),
        (json!({"top_p": true}), "top_p"),
        (json!({"top_k": 2.5}), "top_k"),
        (json!({"min_p": [0.1]}), "min_p"),
        (json!({"n": -1}), "n"),
        (json!({"max_tokens": "16"}), "max_tokens"),
        (json!({"max_completion_tokens": 1.5}), "max_completion_tokens"),
        (json!({"stop": {"a": 1}}), "stop"),
        (json!({"seed": 1.5}), "seed"),
        (json!({"presence_penalty": "0"}), "presence_penalty"),
        (json!({"frequency_penalty": null, "repetition_penalty": "1"}), "repetition_penalty"),
        (json!({"logit_bias": {"hello": 1}}), "logit_bias"),
        (json!({"stream": "yes"}), "stream"),
        (json!({"stream": true, "stream_options": {"include_usage": "yes"}}), "stream_options.include_usage"),
        (json!({"include_metrics": 1}), "include_metrics"),
        (json!({"include_choice_metrics": "true"}), "include_choice_metrics"),
        (json!({"ignore_eos": 0}), "ignore_eos"),
        (json!({"model": 3}), "model"),
        (json!({"user": []}), "user"),
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": 7}]}),
            "messages[1].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
            "messages[0].content[0].type",
        ),
    ] {
        let error = refused(&e, &chat(extra.clone()));
        assert_eq!(error.param.as_deref(), Some(param), "{extra}: {error}");
        assert_eq!(error.error_type, INVALID_REQUEST_ERROR);
    }
}

#[test]
fn out_of_range_values_name_their_field() {
    let e = engine();
    for (extra, param) in [
        (json!({"temperature": 2.5}), "temperature"),
        (json!({"temperature": 1e300}), "temperature"),
        (json!({"top_p": 0}), "top_p"),
        (json!({"min_p": 1.5}), "min_p"),
        (json!({"presence_penalty": 3}), "presence_penalty"),
        (json!({"frequency_penalty": -2.5}), "frequency_penalty"),
        (json!({"repetition_penalty": 0}), "repetition_penalty"),
        (json!({"logit_bias": {"10": 101}}), "logit_bias"),
        (json!({"logit_bias": {"49152": 1}}), "logit_bias"),
        (json!({"n": 0}), "n"),
        (json!({"n": 129}), "n"),
        (json!({"n": 9_223_372_036_854_775_808u64}), "n"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"max_tokens": null, "max_completion_tokens": 0}), "max_completion_tokens"),
        (json!({"stop": ""}), "stop"),
        (json!({"stop": vec!["x"; 17]}), "stop"),
        (json!({"stop_token_ids": [49152]}), "stop_token_ids"),
    ] {
        let error = refused(&e, &chat(extra.clone()));
        assert_eq!(error.param.as_deref(), Some(param), "{extra}: {error}");
        assert_eq!((error.error_type, error.code), (INVALID_REQUEST_ERROR, None), "{extra}");
    }
}

/// What stock OpenAI clients send for OpenAI's own services is accepted without effect; `stream_options` keys are
/// read, accepted without effect (`include_obfuscation`), or refused by name, like the top-level fields.
#[test]
fn fields_of_openai_services_are_accepted_and_unknown_stream_options_refused() {
    let e = engine();
    let no_effect = json!({"store": true, "metadata": {"tenant": "a"}, "service_tier": "auto",
        "prompt_cache_key": "k", "safety_identifier": "u1"});
    let request = submit(&e, &chat(no_effect)).unwrap_or_else(|error| panic!("{error}"));
    request.handle().cancel();
    let streamed = json!({"stream": true, "stream_options": {"include_usage": true, "include_obfuscation": false}});
    submit(&e, &chat(streamed)).unwrap_or_else(|error| panic!("{error}")).handle().cancel();
    for (options, param) in [
        (json!({"include_obfuscation": "no"}), "stream_options.include_obfuscation"),
        (json!({"include_usage": true, "chunk_size": 4}), "stream_options.chunk_size"),
    ] {
        let error = refused(&e, &chat(json!({"stream": true, "stream_options": options})));
        assert_eq!(error.param.as_deref(), Some(param), "{options}: {error}");
    }
}

#[test]
fn messages_and_prompt_shapes() {
    let e = engine();
    let param = |body: Value| refused(&e, &body.to_string()).param;
    assert_eq!(param(json!({"messages": []})), Some("messages".into()));
    assert_eq!(param(json!({"messages": [{"role": "user"}]})), Some("messages[0].content".into()));
    assert_eq!(param(json!({"messages": [{"content": "x"}]})), Some("messages[0].role".into()));
    assert_eq!(param(json!({"messages": [{"role": "", "content": "x"}]})), Some("messages[0].role".into()));
    assert_eq!(param(json!({"messages": [{"role": "user", "content": "x"}], "prompt": "y"})), Some("messages".into()));
    assert_eq!(param(json!({"model": "m"})), Some("messages".into()));
    assert_eq!(param(json!({"prompt": []})), Some("prompt".into()));
    assert_eq!(param(json!({"prompt": ""})), Some("prompt".into()), "an empty prompt has no token to continue");
    assert_eq!(param(json!({"prompt": [[1, 2], []]})), Some("prompt".into()));
    assert_eq!(param(json!({"prompt": [1, 49152]})), Some("prompt".into()), "a token outside the vocabulary");
    assert_eq!(param(json!({"prompt": ["a", 1]})), Some("prompt[1]".into()));
    // A forced kind needs its own input field.
    let error = ApiRequest::submit(&e, r#"{"prompt": "x"}"#, Some(ApiKind::Chat)).unwrap_err();
    assert_eq!(error.param.as_deref(), Some("messages"));
}

#[test]
fn any_role_the_template_renders_is_accepted() {
    let e = engine();
    let body = json!({"messages": [{"role": "narrator", "content": "Once upon a time"}], "max_tokens": 1});
    let request = submit(&e, &body.to_string()).expect("SmolLM2's template renders any role");
    request.handle().wait();
    assert!(request.response_json().is_some());
}

#[test]
fn prompts_too_long_for_the_context() {
    let e = engine();
    // The prompt alone fills the context: the prompt is at fault.
    let error = refused(&e, &json!({"prompt": vec![28; CONTEXT]}).to_string());
    assert_eq!((error.param.as_deref(), error.code.as_deref()), (Some("prompt"), Some(CONTEXT_LENGTH_EXCEEDED)));
    assert!(error.message.contains("model context of 8192 tokens"), "{error}");
    let long_message = "word ".repeat(CONTEXT);
    let error = refused(&e, &json!({"messages": [{"role": "user", "content": long_message}]}).to_string());
    assert_eq!((error.param.as_deref(), error.code.as_deref()), (Some("messages"), Some(CONTEXT_LENGTH_EXCEEDED)));
    // A short prompt with too many tokens asked for: max_tokens (under the name the client used) is at fault.
    for name in ["max_tokens", "max_completion_tokens"] {
        let mut extra = json!({"max_tokens": null});
        extra[name] = json!(CONTEXT);
        let error = refused(&e, &chat(extra));
        assert_eq!((error.param.as_deref(), error.code.as_deref()), (Some(name), Some(CONTEXT_LENGTH_EXCEEDED)));
        assert_eq!(error.error_type, INVALID_REQUEST_ERROR);
    }
}

#[test]
fn a_stopped_engine_is_a_server_error() {
    let mut e = common::engine(EngineConfig { kv_cache_tokens: 256, ..Default::default() });
    e.shutdown();
    let error = refused(&e, &chat(json!({})));
    assert_eq!((error.error_type, error.param), (SERVER_ERROR, None));
}

#[test]
fn the_model_field_is_echoed_or_defaults_to_the_model_name() {
    let e = engine();
    let model_of = |body: String| {
        let request = submit(&e, &body).unwrap();
        request.handle().wait();
        serde_json::from_str::<Value>(&request.response_json().unwrap()).unwrap()["model"].clone()
    };
    assert_eq!(model_of(chat(json!({"model": "gpt-4o-mini"}))), json!("gpt-4o-mini"));
    assert_eq!(model_of(chat(json!({}))), json!(e.model().name()));
    assert!(!e.model().name().is_empty());
}

#[test]
fn an_invalid_structured_output_constraint_is_refused_naming_its_field_and_the_problem() {
    let e = engine();
    let schema =
        |s: Value| json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}});
    for (extra, param, problem) in [
        (schema(json!({"type": "objekt"})), "response_format.json_schema.schema", "objekt"),
        (
            schema(json!({"type": "integer", "minimum": 3, "maximum": 1})),
            "response_format.json_schema.schema",
            "minimum",
        ),
        (json!({"guided_json": {"properties": {"a": {"$ref": "#/nowhere"}}}}), "guided_json", "nowhere"),
        (json!({"guided_regex": "[a-"}), "guided_regex", "regex"),
        (json!({"guided_grammar": "start: undefined_rule"}), "guided_grammar", "undefined_rule"),
        (json!({"guided_choice": []}), "guided_choice", "empty"),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}),
            "response_format.json_schema.name",
            "required",
        ),
    ] {
        let error = refused(&e, &chat(extra.clone()));
        assert_eq!((error.error_type, error.param.as_deref()), (INVALID_REQUEST_ERROR, Some(param)), "{extra}");
        assert!(error.message.contains(problem), "{extra}: {}", error.message);
    }
}

#[test]
fn a_json_schema_response_format_gives_content_that_parses() {
    let e = engine();
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
        "additionalProperties": false});
    let body = chat(json!({"max_tokens": 16, "response_format": {"type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": true}}}));
    let request = submit(&e, &body).unwrap();
    request.handle().wait();
    let response: Value = serde_json::from_str(&request.response_json().unwrap()).unwrap();
    let choice = &response["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{response}");
    let content: Value = serde_json::from_str(choice["message"]["content"].as_str().unwrap()).unwrap();
    assert!(content["ok"].is_boolean(), "{content}");
}
