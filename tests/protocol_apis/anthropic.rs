//! Anthropic's Messages API: the message object, the stream's event sequence, tool use and tool results, stop
//! sequences, a prefilled reply, and refusals naming Anthropic's fields.

use std::sync::Arc;

use ember::protocol::responses::ResponseStore;
use ember::protocol::Api;
use serde_json::{json, Value};

use super::common::whole_response;
use super::{chat_text, chunks, engine, refusal, submit, whole};

const API: Api = Api::AnthropicMessages;

fn store() -> Arc<ResponseStore> {
    Arc::new(ResponseStore::new())
}

/// The text of a message's text blocks.
fn text(message: &Value) -> String {
    blocks(message, "text").filter_map(|b| b["text"].as_str()).collect()
}

fn blocks<'a>(message: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> {
    message["content"].as_array().unwrap().iter().filter(move |b| b["type"] == kind)
}

/// The deltas of one kind (`text_delta`, `input_json_delta`, ...) of a stream, joined.
fn deltas(events: &[Value], kind: &str, field: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "content_block_delta" && e["delta"]["type"] == kind)
        .map(|e| e["delta"][field].as_str().unwrap())
        .collect()
}

const WEATHER: &str = "get_weather";

fn weather_tools() -> Value {
    json!([{"name": WEATHER, "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
            "additionalProperties": false}}])
}

#[test]
fn a_message_says_what_the_same_chat_says() {
    let e = engine();
    let body = json!({"model": "claude-x", "max_tokens": 12, "temperature": 0, "system": "Answer briefly.",
        "messages": [{"role": "user", "content": "What is the capital of France?"}]});
    let message = whole(&submit(&e, API, &body, &store()));
    let messages = json!([{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"}]);
    assert_eq!(text(&message), chat_text(&e, messages, 12));
    assert_eq!(
        (&message["type"], &message["role"], &message["model"]),
        (&json!("message"), &json!("assistant"), &json!("claude-x"))
    );
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    let reason = message["stop_reason"].as_str().unwrap();
    assert!(reason == "end_turn" || reason == "max_tokens", "{reason}");
    assert_eq!(message["stop_sequence"], Value::Null);
    let usage = &message["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(usage["cache_creation_input_tokens"], 0);
    assert!(usage["output_tokens"].as_u64().unwrap() > 0);
    assert!(message.get("metrics").is_none(), "metrics are behind chat's double gate");
}

#[test]
fn the_stream_is_the_event_sequence_of_the_whole_message() {
    let e = engine();
    let body = json!({"max_tokens": 16, "temperature": 0, "messages": [{"role": "user", "content": "Name three primary colors."}]});
    let whole_message = whole(&submit(&e, API, &body, &store()));
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let events = chunks(&mut submit(&e, API, &streamed_body, &store()));
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[..2], ["message_start", "content_block_start"]);
    assert_eq!(kinds[kinds.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    assert!(kinds[2..kinds.len() - 3].iter().all(|k| *k == "content_block_delta"), "{kinds:?}");
    // Every event's first member is its type (the SSE event name).
    for event in &events {
        assert_eq!(event.as_object().unwrap().keys().next().map(String::as_str), Some("type"));
    }
    let start = &events[0]["message"];
    assert_eq!((&start["content"], &start["stop_reason"]), (&json!([]), &Value::Null));
    assert_eq!(events[1]["content_block"], json!({"type": "text", "text": ""}));
    assert_eq!(deltas(&events, "text_delta", "text"), text(&whole_message));
    let end = &events[events.len() - 2];
    assert_eq!(end["delta"]["stop_reason"], whole_message["stop_reason"]);
    assert_eq!(end["usage"]["output_tokens"], whole_message["usage"]["output_tokens"]);
    // The second prompt's tokens come from the prefix cache: the total is the same, split otherwise.
    let input = |u: &Value| u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(input(&end["usage"]), input(&whole_message["usage"]));
}

#[test]
fn a_forced_tool_is_a_tool_use_block_with_its_input() {
    let e = engine();
    let body = json!({"max_tokens": 64, "temperature": 0, "tools": weather_tools(),
        "tool_choice": {"type": "tool", "name": WEATHER},
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let message = whole(&submit(&e, API, &body, &store()));
    let call = blocks(&message, "tool_use").next().expect("a tool_use block");
    assert_eq!(call["name"], WEATHER);
    assert!(call["input"]["city"].is_string(), "{call}");
    assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(message["stop_reason"], "tool_use");

    // Streamed: a tool_use block opened empty, whose input_json_delta pieces add up to the same input.
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let events = chunks(&mut submit(&e, API, &streamed_body, &store()));
    let start = events.iter().find(|e| e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use");
    let start = start.expect("a tool_use block");
    assert_eq!((&start["content_block"]["name"], &start["content_block"]["input"]), (&json!(WEATHER), &json!({})));
    let input: Value = serde_json::from_str(&deltas(&events, "input_json_delta", "partial_json")).expect("JSON");
    assert_eq!(input, call["input"], "greedy: the same call streamed and whole");
    assert_eq!(events[events.len() - 2]["delta"]["stop_reason"], "tool_use");
}

#[test]
fn a_tool_result_conversation_renders_as_the_same_chat() {
    let e = engine();
    let body = json!({"max_tokens": 16, "temperature": 0, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should look it up.", "signature": "sig"},
            {"type": "tool_use", "id": "toolu_01", "name": WEATHER, "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "sunny, 21 C"}]},
            {"type": "text", "text": "Is that warm?", "cache_control": {"type": "ephemeral"}}]}]});
    let message = whole(&submit(&e, API, &body, &store()));
    let messages = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "toolu_01", "type": "function",
            "function": {"name": WEATHER, "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "sunny, 21 C"},
        {"role": "user", "content": "Is that warm?"}]);
    assert_eq!(text(&message), chat_text(&e, messages, 16));
}

#[test]
fn a_stop_sequence_ends_the_message_and_is_named() {
    let e = engine();
    let prompt = json!([{"role": "user", "content": "Count from 1 to 20."}]);
    let full = chat_text(&e, prompt.clone(), 40);
    // A word the greedy answer has past its start, listed after a stop that never comes.
    let stop = full.split_whitespace().nth(3).expect("a few words").to_owned();
    let body = json!({"max_tokens": 40, "temperature": 0, "messages": prompt, "stop_sequences": ["@@@", stop]});
    let message = whole(&submit(&e, API, &body, &store()));
    assert_eq!((&message["stop_reason"], &message["stop_sequence"]), (&json!("stop_sequence"), &json!(stop)));
    let cut = text(&message);
    assert!(full.starts_with(&cut) && !cut.contains(&stop), "{cut:?} of {full:?} before {stop:?}");

    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let events = chunks(&mut submit(&e, API, &streamed_body, &store()));
    let end = &events[events.len() - 2];
    assert_eq!(end["delta"], json!({"stop_reason": "stop_sequence", "stop_sequence": stop}));
    assert_eq!(deltas(&events, "text_delta", "text"), cut);
}

#[test]
fn a_last_assistant_turn_is_continued() {
    let e = engine();
    let prompt = [
        json!({"role": "user", "content": "Count from 1 to 10."}),
        json!({"role": "assistant", "content": "1, 2, 3,"}),
    ];
    let body = json!({"max_tokens": 12, "temperature": 0, "messages": prompt});
    let message = whole(&submit(&e, API, &body, &store()));
    let chat = whole_response(
        &e,
        &json!({"messages": prompt, "max_tokens": 12, "temperature": 0, "add_generation_prompt": false,
            "continue_final_message": true}),
    );
    assert_eq!(json!(text(&message)), chat["choices"][0]["message"]["content"]);
}

#[test]
fn refusals_name_the_anthropic_fields() {
    let e = engine();
    let user = json!([{"role": "user", "content": "hi"}]);
    assert_eq!(refusal(&e, API, &json!({"messages": user})).0, "max_tokens");
    assert_eq!(refusal(&e, API, &json!({"messages": user, "max_tokens": 0})).0, "max_tokens");
    assert_eq!(refusal(&e, API, &json!({"messages": user, "max_tokens": 4, "temperature": "hot"})).0, "temperature");
    assert_eq!(
        refusal(&e, API, &json!({"messages": user, "max_tokens": 4, "stop_sequences": [""]})).0,
        "stop_sequences"
    );
    assert_eq!(refusal(&e, API, &json!({"messages": user, "max_tokens": 4, "frobnicate": 1})).0, "frobnicate");
    assert_eq!(refusal(&e, API, &json!({"messages": [], "max_tokens": 4})).0, "messages");
    let image = json!({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}});
    let with_image = json!([{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]);
    let (param, message) = refusal(&e, API, &json!({"messages": with_image, "max_tokens": 4}));
    assert_eq!(param, "messages[0].content[1].type");
    assert!(message.contains("image"), "{message}");
    let tool = json!({"messages": user, "max_tokens": 4, "tools": weather_tools(),
        "tool_choice": {"type": "tool", "name": "nope"}});
    assert_eq!(refusal(&e, API, &tool).0, "tool_choice.name");
}

#[test]
fn metrics_follow_chats_double_gate() {
    let e = super::common::engine(ember::engine::EngineConfig {
        kv_cache_tokens: 4096,
        enable_per_request_metrics: true,
        ..Default::default()
    });
    let body = json!({"max_tokens": 4, "include_metrics": true, "messages": [{"role": "user", "content": "hi"}]});
    let message = whole(&submit(&e, API, &body, &store()));
    assert!(message["metrics"]["time_to_first_token_ms"].is_number(), "{message}");
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let events = chunks(&mut submit(&e, API, &streamed_body, &store()));
    assert!(events[events.len() - 2]["metrics"]["tokens_per_second"].is_number(), "{:?}", events.last());
}
