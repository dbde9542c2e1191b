//! Ollama's API: `/api/chat` and `/api/generate` (templated and raw), whole and as NDJSON objects, with their
//! durations and counts; `format`, tools, logprobs, and refusals by Ollama's names.

use std::sync::Arc;

use ember::protocol::responses::ResponseStore;
use ember::protocol::{Api, ApiRequest};
use serde_json::{json, Value};

use super::{chat_text, chunks, common, engine, refusal, submit, whole};

fn chat(e: &ember::engine::Engine, body: Value) -> ApiRequest {
    submit(e, Api::OllamaChat, &body, &Arc::new(ResponseStore::new()))
}

fn generate(e: &ember::engine::Engine, body: Value) -> ApiRequest {
    submit(e, Api::OllamaGenerate, &body, &Arc::new(ResponseStore::new()))
}

/// Greedy, at most `n` tokens.
fn greedy(n: u64) -> Value {
    json!({"temperature": 0, "num_predict": n})
}

/// Checks the last object of an answer: `done`, a `done_reason`, the durations non-negative integers with the
/// total at least the prompt's and the generation's together, the counts, and Go's RFC 3339 `created_at`.
fn check_done(o: &Value) {
    assert_eq!(o["done"], json!(true), "{o}");
    let reason = o["done_reason"].as_str().unwrap();
    assert!(reason == "stop" || reason == "length", "{o}");
    let ns = |name: &str| o[name].as_u64().unwrap_or_else(|| panic!("{name} is not a non-negative integer: {o}"));
    assert!(ns("total_duration") >= ns("prompt_eval_duration") + ns("eval_duration"), "{o}");
    assert!(ns("prompt_eval_duration") > 0, "the prompt took some time: {o}");
    assert_eq!(ns("load_duration"), 0);
    assert!(ns("prompt_eval_count") > 0 && ns("eval_count") > 0, "{o}");
    let created_at = o["created_at"].as_str().unwrap();
    assert!(created_at.len() >= 20 && created_at.ends_with('Z') && created_at.as_bytes()[10] == b'T', "{created_at}");
}

const QUESTION: &str = "What is the capital of France?";

#[test]
fn a_chat_says_what_the_same_chat_completion_says() {
    let e = engine();
    let messages = json!([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTION}]);
    let body = json!({"model": "smollm2:135m", "messages": messages, "stream": false, "options": greedy(12)});
    let request = chat(&e, body);
    assert!(!request.is_stream());
    let response = whole(&request);
    assert_eq!(response["message"]["content"].as_str().unwrap(), chat_text(&e, messages, 12));
    assert_eq!(response["message"]["role"], "assistant");
    assert_eq!(response["model"], "smollm2:135m", "the request's model is echoed");
    check_done(&response);
    assert!(response["eval_count"].as_u64().unwrap() <= 12);
    assert!(response.get("context").is_none() && response["message"].get("thinking").is_none());
}

#[test]
fn a_chat_streams_by_default_and_its_objects_add_up() {
    let e = engine();
    let messages = json!([{"role": "user", "content": "Name three primary colors."}]);
    let whole_response = whole(&chat(&e, json!({"messages": messages, "stream": false, "options": greedy(16)})));
    let mut streamed = chat(&e, json!({"messages": messages, "options": greedy(16)}));
    assert!(streamed.is_stream(), "Ollama streams unless told not to");
    let objects = chunks(&mut streamed);
    let (last, pieces) = objects.split_last().unwrap();
    assert!(pieces.len() > 1 && pieces.iter().all(|o| o["done"] == json!(false)), "{objects:?}");
    let text: String = pieces.iter().map(|o| o["message"]["content"].as_str().unwrap()).collect();
    assert_eq!(text, whole_response["message"]["content"].as_str().unwrap());
    assert_eq!(last["message"], json!({"role": "assistant", "content": ""}));
    check_done(last);
    assert_eq!(last["eval_count"], whole_response["eval_count"]);
    assert_eq!(last["prompt_eval_count"], whole_response["prompt_eval_count"]);
    assert_eq!(last["done_reason"], whole_response["done_reason"]);
}

#[test]
fn generate_templated_is_a_chat_and_raw_is_a_completion() {
    let e = engine();
    let templated = whole(&generate(
        &e,
        json!({"prompt": QUESTION, "system": "Answer briefly.", "stream": false, "options": greedy(12)}),
    ));
    let messages = json!([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTION}]);
    assert_eq!(templated["response"].as_str().unwrap(), chat_text(&e, messages, 12));
    check_done(&templated);

    let prompt = "The capital of France is";
    let raw = whole(&generate(&e, json!({"prompt": prompt, "raw": true, "stream": false, "options": greedy(8)})));
    let completion = common::whole_response(&e, &json!({"prompt": prompt, "max_tokens": 8, "temperature": 0}));
    assert_eq!(raw["response"], completion["choices"][0]["text"]);
    assert_eq!(raw["prompt_eval_count"], completion["usage"]["prompt_tokens"], "the prompt as it is, no template");
    check_done(&raw);

    let mut streamed = generate(&e, json!({"prompt": prompt, "raw": true, "options": greedy(8)}));
    let objects = chunks(&mut streamed);
    let text: String = objects.iter().map(|o| o["response"].as_str().unwrap()).collect();
    assert_eq!(text, raw["response"].as_str().unwrap());
    check_done(objects.last().unwrap());
}

#[test]
fn format_json_and_a_schema_constrain_the_output() {
    let e = engine();
    let messages = json!([{"role": "user", "content": "Give me a JSON object describing a cat."}]);
    let body = json!({"messages": messages, "stream": false, "format": "json", "options": greedy(48)});
    let response = whole(&chat(&e, body));
    if response["done_reason"] == "stop" {
        let parsed: Value = serde_json::from_str(response["message"]["content"].as_str().unwrap()).expect("JSON");
        assert!(parsed.is_object());
    }
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
        "additionalProperties": false});
    let body = json!({"prompt": "What is 7 times 8?", "stream": false, "format": schema, "options": greedy(40)});
    let response = whole(&generate(&e, body));
    let parsed: Value = serde_json::from_str(response["response"].as_str().unwrap()).expect("the schema's JSON");
    assert!(parsed["answer"].is_i64(), "{parsed}");
}

/// An earlier call of `get_weather` for `city`, its result and the answer: Ollama's shapes of a tool turn.
fn weather_turn(question: &str, city: &str, weather: &str) -> [Value; 4] {
    [
        json!({"role": "user", "content": question}),
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": city}}}]}),
        json!({"role": "tool", "content": weather, "tool_name": "get_weather"}),
        json!({"role": "assistant", "content": format!("It is {weather} in {city}.")}),
    ]
}

#[test]
fn a_tool_call_comes_back_whole_with_object_arguments() {
    let e = engine();
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Get the current weather in a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string", "description": "The city's name"}}, "required": ["city"]}}}]);
    // SmolLM2-135M calls a tool (chat's "auto": Ollama has no tool_choice) once two earlier turns showed it how;
    // those turns go in as Ollama writes them, the calls' arguments objects.
    let mut messages = Vec::from(weather_turn("What is the weather in London?", "London", "rainy"));
    messages.extend(weather_turn("What is the weather in Berlin?", "Berlin", "sunny"));
    messages.push(json!({"role": "user", "content": "And in Paris?"}));
    let body = json!({"messages": messages, "tools": tools, "stream": false, "options": greedy(64)});
    let response = whole(&chat(&e, body));
    let calls = response["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("no call: {response}"));
    let function = &calls[0]["function"];
    assert_eq!(*function, json!({"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}));
    assert!(calls[0]["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(response["done_reason"], "stop", "Ollama ends a call with stop");

    // Streamed: the call comes whole in one object before the last.
    let body = json!({"messages": messages, "tools": tools, "options": greedy(64)});
    let objects = chunks(&mut chat(&e, body));
    let streamed_calls: Vec<&Value> = objects.iter().filter_map(|o| o["message"].get("tool_calls")).collect();
    assert_eq!(streamed_calls.len(), 1, "{objects:?}");
    assert_eq!(streamed_calls[0][0]["function"], *function, "greedy: the same call streamed and whole");
    check_done(objects.last().unwrap());

    // The call and its result go back, and the model answers.
    messages.extend([
        json!({"role": "assistant", "content": "", "tool_calls": calls}),
        json!({"role": "tool", "content": "cloudy", "tool_name": "get_weather"}),
    ]);
    let body = json!({"messages": messages, "tools": tools, "stream": false, "options": greedy(24)});
    check_done(&whole(&chat(&e, body)));
}

#[test]
fn logprobs_come_per_token_with_their_alternatives() {
    let e = engine();
    let messages = json!([{"role": "user", "content": "hi"}]);
    let body =
        json!({"messages": messages, "stream": false, "logprobs": true, "top_logprobs": 2, "options": greedy(4)});
    let response = whole(&chat(&e, body));
    let entries = response["logprobs"].as_array().expect("logprobs");
    assert!(!entries.is_empty() && entries.len() as u64 <= response["eval_count"].as_u64().unwrap());
    assert!(entries.iter().all(|t| t["token"].is_string() && t["top_logprobs"].as_array().unwrap().len() == 2));

    let body = json!({"prompt": "The capital of France is", "raw": true, "logprobs": true, "top_logprobs": 2,
        "options": greedy(4)});
    let objects = chunks(&mut generate(&e, body));
    let entries: Vec<&Value> = objects.iter().filter_map(|o| o["logprobs"].as_array()).flatten().collect();
    assert!(!entries.is_empty());
    assert!(entries.iter().all(|t| t["logprob"].is_number() && t["top_logprobs"].as_array().unwrap().len() <= 2));
}

#[test]
fn refusals_name_ollamas_fields() {
    let e = engine();
    let m = json!([{"role": "user", "content": "hi"}]);
    let chat_refusal = |body: Value| refusal(&e, Api::OllamaChat, &body).0;
    let generate_refusal = |body: Value| refusal(&e, Api::OllamaGenerate, &body).0;
    assert_eq!(chat_refusal(json!({"messages": m, "options": {"mirostat": 2}})), "options.mirostat");
    assert_eq!(
        chat_refusal(json!({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]})),
        "messages[0].images"
    );
    assert_eq!(generate_refusal(json!({"prompt": "x", "images": ["aGk="]})), "images");
    assert_eq!(generate_refusal(json!({"prompt": "x", "template": "{{ .Prompt }}"})), "template");
    assert_eq!(generate_refusal(json!({"prompt": "x", "context": [1, 2, 3]})), "context");
    assert_eq!(generate_refusal(json!({"prompt": ""})), "prompt");
    assert_eq!(generate_refusal(json!({"prompt": "x", "raw": true, "system": "s"})), "system");
    assert_eq!(generate_refusal(json!({"prompt": "x", "suffix": "y"})), "suffix", "SmolLM2 has no FIM tokens");
    // SmolLM2's template neither thinks nor has a switch.
    assert_eq!(chat_refusal(json!({"messages": m, "think": true})), "think");
    // The chat core's own checks, renamed.
    let (param, message) = refusal(&e, Api::OllamaChat, &json!({"messages": m, "options": {"temperature": 5}}));
    assert_eq!(param, "options.temperature");
    assert!(message.starts_with("options.temperature"), "{message}");
    assert_eq!(chat_refusal(json!({"messages": m, "options": {"num_predict": 0}})), "options.num_predict");
    assert_eq!(chat_refusal(json!({"messages": m, "format": {"type": "objekt"}})), "format");
    assert_eq!(chat_refusal(json!({"messages": m, "frobnicate": 1})), "frobnicate");
    // Accepted without effect.
    let body = json!({"messages": m, "keep_alive": "5m", "think": false, "stream": false,
        "options": {"num_ctx": 8192, "num_thread": 4, "use_mmap": true, "num_predict": 1}});
    check_done(&whole(&chat(&e, body)));
}
