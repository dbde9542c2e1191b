//! Tools on the real model, through the OpenAI layer: a forced call (`tool_choice: "required"` or a named
//! function) is always a valid call of the tools' schemas, whole and streamed; a call cut short is text; `"auto"`
//! is refused by name; a conversation that carries earlier calls and their results renders.

mod common;

use std::time::Duration;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::{ApiRequest, ChunkPoll};
use serde_json::{json, Value};

fn engine() -> Engine {
    common::engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() })
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}},
        {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 24}},
                "required": ["zone"]}}}
    ])
}

fn body(tool_choice: Value, extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": tools(), "tool_choice": tool_choice, "max_tokens": 64, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn whole(e: &Engine, body: &Value) -> Value {
    let r = ApiRequest::submit(e, &body.to_string(), None).unwrap_or_else(|err| panic!("{body}: {err}"));
    r.handle().wait();
    serde_json::from_str(&r.response_json().unwrap()).unwrap()
}

/// Checks a call against the tools' schemas by hand: the name is a tool's, the arguments its required keys.
fn check_call(call: &Value) -> (String, Value) {
    assert_eq!(call["type"], "function", "{call}");
    let id = call["id"].as_str().unwrap();
    assert!(id.starts_with("call_") && id.len() == 29, "{call}");
    let name = call["function"]["name"].as_str().unwrap().to_owned();
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    match name.as_str() {
        "get_weather" => {
            assert!(arguments["city"].is_string(), "{arguments}");
            assert!(["celsius", "fahrenheit"].contains(&arguments["unit"].as_str().unwrap()), "{arguments}");
        }
        "get_time" => assert!(arguments["zone"].is_string(), "{arguments}"),
        other => panic!("no tool {other}"),
    }
    (name, arguments)
}

#[test]
fn a_forced_call_is_a_valid_call_whole_and_streamed() {
    let e = engine();
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    for choice in [json!("required"), named.clone()] {
        let v = whole(&e, &body(choice.clone(), json!({})));
        let c = &v["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{v}");
        assert_eq!(c["message"]["content"], Value::Null);
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1);
        let (name, arguments) = check_call(&calls[0]);
        if choice == named {
            assert_eq!(name, "get_weather");
        }

        // The stream: the header (id, name) once and first, then argument pieces adding up to the same call.
        let mut r = ApiRequest::submit(&e, &body(choice, json!({"stream": true})).to_string(), None).unwrap();
        let (mut header, mut args, mut reasons) = (Vec::new(), String::new(), Vec::new());
        loop {
            match r.next_chunk_json(Some(Duration::from_secs(600))) {
                ChunkPoll::Chunk(json) => {
                    let chunk: Value = serde_json::from_str(&json).unwrap();
                    let choice = &chunk["choices"][0];
                    if let Some(reason) = choice["finish_reason"].as_str() {
                        reasons.push(reason.to_owned());
                    }
                    assert!(choice["delta"].get("content").is_none_or(|c| c == ""), "no content: {chunk}");
                    let Some(deltas) = choice["delta"]["tool_calls"].as_array() else { continue };
                    let d = &deltas[0];
                    assert_eq!(d["index"], 0);
                    if let Some(id) = d["id"].as_str() {
                        assert!(args.is_empty(), "the header comes first");
                        header.push((id.to_owned(), d["function"]["name"].as_str().unwrap().to_owned()));
                    }
                    args.push_str(d["function"]["arguments"].as_str().unwrap());
                }
                ChunkPoll::Done => break,
                ChunkPoll::TimedOut => panic!("no chunk in 10 minutes"),
            }
        }
        assert_eq!(header.len(), 1, "{header:?}");
        assert_eq!(header[0].1, name);
        assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), arguments, "{args}");
        assert_eq!(args, calls[0]["function"]["arguments"].as_str().unwrap(), "same text, streamed or whole");
        assert_eq!(reasons, ["tool_calls"]);
    }
}

#[test]
fn a_call_cut_short_is_text_and_auto_is_refused() {
    let e = engine();
    let v = whole(&e, &body(json!("required"), json!({"max_tokens": 4})));
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "length", "{v}");
    assert!(c["message"].get("tool_calls").is_none() && c["message"]["content"].is_string(), "{v}");
    for (choice, param) in [(json!("auto"), "tool_choice"), (Value::Null, "tools")] {
        let mut b = body(choice, json!({}));
        if b["tool_choice"].is_null() {
            b.as_object_mut().unwrap().remove("tool_choice");
        }
        let err = ApiRequest::submit(&e, &b.to_string(), None).unwrap_err();
        assert_eq!(err.param.as_deref(), Some(param), "{}", err.message);
        assert!(err.message.contains("\"required\""), "{}", err.message);
    }
    let none = whole(&e, &body(json!("none"), json!({"max_tokens": 8})));
    assert!(
        none["choices"][0]["message"]["content"].is_string() && none["choices"][0]["finish_reason"] != "tool_calls"
    );
}

#[test]
fn a_conversation_with_earlier_calls_and_their_results_renders() {
    let e = engine();
    let b = json!({"messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"}],
        "tools": tools(), "tool_choice": "none", "max_tokens": 8, "temperature": 0});
    let v = whole(&e, &b);
    assert!(v["choices"][0]["message"]["content"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    let mut bad = b.clone();
    bad["messages"][1]["tool_calls"][0]["function"]["arguments"] = json!({"city": "Paris"});
    let err = ApiRequest::submit(&e, &bad.to_string(), None).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("messages[1].tool_calls[0].function.arguments"));
}
