//! OpenAI's Responses API: the response object, the stream's event sequence, tools, structured outputs, stored
//! conversations and refusals.

use std::sync::Arc;

use ember::protocol::responses::ResponseStore;
use ember::protocol::Api;
use serde_json::{json, Value};

use super::{chat_text, chunks, engine, refusal, submit, whole};

fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap().iter())
        .filter_map(|c| c["text"].as_str())
        .collect()
}

#[test]
fn a_response_says_what_the_same_chat_says() {
    let e = engine();
    let store = Arc::new(ResponseStore::new());
    let body = json!({"model": "m", "input": "What is the capital of France?", "instructions": "Answer briefly.",
        "max_output_tokens": 12, "temperature": 0});
    let response = whole(&submit(&e, Api::Responses, &body, &store));
    let messages = json!([{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"}]);
    assert_eq!(output_text(&response), chat_text(&e, messages, 12));
    assert_eq!(response["object"], "response");
    assert!(response["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!((&response["model"], &response["instructions"]), (&json!("m"), &json!("Answer briefly.")));
    let status = response["status"].as_str().unwrap();
    assert!(status == "completed" || status == "incomplete", "{status}");
    if status == "incomplete" {
        assert_eq!(response["incomplete_details"], json!({"reason": "max_output_tokens"}));
    }
    let usage = &response["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
    );
    assert!(response.get("metrics").is_none(), "metrics are behind chat's double gate");
}

#[test]
fn the_stream_is_the_event_sequence_of_the_whole_response() {
    let e = engine();
    let store = Arc::new(ResponseStore::new());
    let body = json!({"input": "Name three primary colors.", "max_output_tokens": 16, "temperature": 0});
    let whole_response = whole(&submit(&e, Api::Responses, &body, &store));
    let mut streamed = submit(
        &e,
        Api::Responses,
        &json!({"stream": true, "input": body["input"], "max_output_tokens": 16, "temperature": 0}),
        &store,
    );
    let events = chunks(&mut streamed);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let last = *kinds.last().unwrap();
    assert!(last == "response.completed" || last == "response.incomplete", "{kinds:?}");
    assert_eq!(
        kinds[..4],
        ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    );
    assert_eq!(
        kinds[kinds.len() - 4..kinds.len() - 1],
        ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    );
    // Every event's first member is its type (the SSE event name), and sequence numbers count from 0.
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event.as_object().unwrap().keys().next().map(String::as_str), Some("type"));
        assert_eq!(event["sequence_number"], json!(n));
    }
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let final_response = &events.last().unwrap()["response"];
    assert_eq!(deltas, output_text(&whole_response));
    assert_eq!(output_text(final_response), deltas);
    // The same counts (the second prompt's tokens come from the prefix cache: `cached_tokens` differs).
    for count in ["input_tokens", "output_tokens", "total_tokens"] {
        assert_eq!(final_response["usage"][count], whole_response["usage"][count]);
    }
    // The item the stream announced is the one it completed, by id.
    let added = &events[2]["item"]["id"];
    assert_eq!(&final_response["output"][0]["id"], added);
}

#[test]
fn a_forced_function_call_is_a_function_call_item() {
    let e = engine();
    let store = Arc::new(ResponseStore::new());
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let body = json!({"input": "Weather in Paris?", "tools": tools, "tool_choice": "required", "temperature": 0,
        "max_output_tokens": 64});
    let response = whole(&submit(&e, Api::Responses, &body, &store));
    let call = response["output"].as_array().unwrap().iter().find(|i| i["type"] == "function_call").expect("a call");
    assert_eq!(call["name"], "get_weather");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).expect("JSON arguments");
    assert!(arguments["city"].is_string());
    assert!(call["call_id"].as_str().is_some_and(|id| !id.is_empty()));

    // Streamed: an added function_call item, argument deltas that add up, and its done event.
    let mut streamed = submit(
        &e,
        Api::Responses,
        &json!({"stream": true, "input": body["input"], "tools": tools,
        "tool_choice": "required", "temperature": 0, "max_output_tokens": 64}),
        &store,
    );
    let events = chunks(&mut streamed);
    let added =
        events.iter().find(|e| e["type"] == "response.output_item.added" && e["item"]["type"] == "function_call");
    assert_eq!(added.expect("an added call")["item"]["name"], "get_weather");
    let pieces: String = events
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let done = events.iter().find(|e| e["type"] == "response.function_call_arguments.done").expect("arguments done");
    assert_eq!(done["arguments"].as_str().unwrap(), pieces);
    assert_eq!(pieces, call["arguments"].as_str().unwrap(), "greedy: the same call streamed and whole");
}

#[test]
fn text_format_json_schema_constrains_the_output() {
    let e = engine();
    let store = Arc::new(ResponseStore::new());
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
        "additionalProperties": false});
    let body = json!({"input": "What is 7 times 8?", "temperature": 0, "max_output_tokens": 40,
        "text": {"format": {"type": "json_schema", "name": "math", "schema": schema, "strict": true}}});
    let response = whole(&submit(&e, Api::Responses, &body, &store));
    let parsed: Value = serde_json::from_str(&output_text(&response)).expect("the schema's JSON");
    assert!(parsed["answer"].is_i64());
    assert_eq!(response["text"]["format"]["name"], "math", "the request's text is repeated");
}

#[test]
fn previous_response_id_continues_a_stored_conversation() {
    let e = engine();
    let store = Arc::new(ResponseStore::new());
    let first =
        whole(&submit(&e, Api::Responses, &json!({"input": "hi", "max_output_tokens": 8, "temperature": 0}), &store));
    let id = first["id"].as_str().unwrap();
    assert_eq!(store.len(), 1);
    let second_body =
        json!({"input": "Say it again.", "previous_response_id": id, "max_output_tokens": 8, "temperature": 0});
    let second = whole(&submit(&e, Api::Responses, &second_body, &store));
    assert_eq!(second["previous_response_id"], json!(id));
    let messages = json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": output_text(&first)},
        {"role": "user", "content": "Say it again."}]);
    assert_eq!(output_text(&second), chat_text(&e, messages, 8), "the continuation sees the whole conversation");
    // The first turn's input is counted again: the second prompt holds the first exchange.
    assert!(second["usage"]["input_tokens"].as_u64() > first["usage"]["input_tokens"].as_u64());

    // `store: false` keeps nothing; an unknown id is refused by name.
    whole(&submit(&e, Api::Responses, &json!({"input": "x", "store": false, "max_output_tokens": 2}), &store));
    assert_eq!(store.len(), 2);
    let (param, message) = refusal(&e, Api::Responses, &json!({"input": "x", "previous_response_id": "resp_nope"}));
    assert_eq!(param, "previous_response_id");
    assert!(message.contains("resp_nope"), "{message}");
}

#[test]
fn refusals_name_the_responses_fields() {
    let e = engine();
    assert_eq!(refusal(&e, Api::Responses, &json!({"input": "x", "max_output_tokens": 0})).0, "max_output_tokens");
    assert_eq!(refusal(&e, Api::Responses, &json!({"input": [], "max_output_tokens": 4})).0, "input");
    assert_eq!(refusal(&e, Api::Responses, &json!({"input": "x", "temperature": "hot"})).0, "temperature");
    assert_eq!(refusal(&e, Api::Responses, &json!({"input": "x", "frobnicate": 1})).0, "frobnicate");
    assert_eq!(refusal(&e, Api::Responses, &json!({"input": "x", "background": true})).0, "background");
}

#[test]
fn metrics_follow_chats_double_gate() {
    let e = super::common::engine(ember::engine::EngineConfig {
        kv_cache_tokens: 4096,
        enable_per_request_metrics: true,
        ..Default::default()
    });
    let store = Arc::new(ResponseStore::new());
    let body = json!({"input": "hi", "max_output_tokens": 4, "include_metrics": true});
    let response = whole(&submit(&e, Api::Responses, &body, &store));
    assert!(response["metrics"]["time_to_first_token_ms"].is_number(), "{response}");
    let mut streamed = submit(
        &e,
        Api::Responses,
        &json!({"stream": true, "input": "hi", "max_output_tokens": 4, "include_metrics": true}),
        &store,
    );
    let events = chunks(&mut streamed);
    assert!(events.last().unwrap()["response"]["metrics"]["tokens_per_second"].is_number());
}
