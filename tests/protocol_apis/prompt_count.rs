//! Counting a request's prompt tokens without submitting it (`count_prompt_tokens`, which
//! `engine_count_prompt_tokens` and the gateway's `/v1/messages/count_tokens` serve): for every API, the count is
//! the prompt tokens the same request's answer bills, with and without a system prompt, tools and earlier tool
//! calls; refusals name the API's own fields.

use std::sync::Arc;

use ember::engine::Engine;
use ember::protocol::responses::ResponseStore;
use ember::protocol::{count_prompt_tokens, Api};
use serde_json::{json, Value};

use super::{engine, submit, whole};

/// The prompt tokens an answer of `api` bills.
fn billed(api: Api, answer: &Value) -> u64 {
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("no count in {answer}"));
    match api {
        Api::OpenAi | Api::ChatCompletions | Api::Completions => n(&answer["usage"]["prompt_tokens"]),
        Api::Responses => n(&answer["usage"]["input_tokens"]),
        // Anthropic's input_tokens leave out what the prefix cache supplied.
        Api::AnthropicMessages => n(&answer["usage"]["input_tokens"]) + n(&answer["usage"]["cache_read_input_tokens"]),
        Api::OllamaChat | Api::OllamaGenerate => n(&answer["prompt_eval_count"]),
        Api::LlamaCompletion => n(&answer["tokens_evaluated"]),
    }
}

fn count(e: &Engine, api: Api, body: &Value, store: &Arc<ResponseStore>) -> usize {
    count_prompt_tokens(e, &body.to_string(), api, store).unwrap_or_else(|err| panic!("{body}: {}", err.to_json()))
}

/// The count of `body` and the prompt tokens its submission billed, which must agree.
fn assert_count_is_billed(e: &Engine, api: Api, body: Value, store: &Arc<ResponseStore>) -> usize {
    let counted = count(e, api, &body, store);
    let answer = whole(&submit(e, api, &body, store));
    assert_eq!(counted as u64, billed(api, &answer), "{api:?} {body}");
    assert!(counted > 0);
    counted
}

fn weather_tool_anthropic() -> Value {
    json!([{"name": "get_weather", "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

#[test]
fn an_anthropic_count_is_the_messages_input_tokens() {
    let e = engine();
    let store = Arc::new(ResponseStore::new());
    let question = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    let plain = json!({"max_tokens": 2, "temperature": 0, "messages": question});
    let n_plain = assert_count_is_billed(&e, Api::AnthropicMessages, plain.clone(), &store);
    let system = json!({"max_tokens": 2, "temperature": 0, "system": "Answer briefly.", "messages": question});
    let n_system = assert_count_is_billed(&e, Api::AnthropicMessages, system, &store);
    let tools = json!({"max_tokens": 2, "temperature": 0, "system": [{"type": "text", "text": "Answer briefly."}],
        "messages": question, "tools": weather_tool_anthropic()});
    let n_tools = assert_count_is_billed(&e, Api::AnthropicMessages, tools, &store);
    // SmolLM2's template writes a default system prompt of its own when the request has none.
    assert!(n_plain != n_system && n_system < n_tools, "{n_plain} {n_system} {n_tools}");
    let conversation = json!({"max_tokens": 2, "temperature": 0, "tools": weather_tool_anthropic(), "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
            "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C"}]}]});
    assert_count_is_billed(&e, Api::AnthropicMessages, conversation, &store);
    // A count_tokens body has no max_tokens: the count is the same request's.
    let mut without = plain.clone();
    without.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(count(&e, Api::AnthropicMessages, &without, &store), n_plain);
}

#[test]
fn every_apis_count_is_its_billed_prompt() {
    let e = engine();
    let store = Arc::new(ResponseStore::new());
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]);
    let chat = json!({"messages": messages, "max_tokens": 2, "temperature": 0});
    assert_count_is_billed(&e, Api::OpenAi, chat.clone(), &store);
    assert_count_is_billed(&e, Api::ChatCompletions, chat.clone(), &store);
    let mut with_tools = chat.clone();
    with_tools["tools"] = tools;
    // A reasoning effort this template cannot be told is dropped, with a warning, before the prompt is rendered.
    with_tools["reasoning_effort"] = json!("low");
    assert_count_is_billed(&e, Api::ChatCompletions, with_tools, &store);
    // Several prompts add up; `n` bills each once.
    let completions = json!({"prompt": ["One two", "Three four five"], "n": 2, "max_tokens": 2, "temperature": 0});
    assert_count_is_billed(&e, Api::Completions, completions, &store);
    let response = json!({"input": "Hi there", "instructions": "Be brief.", "max_output_tokens": 2, "temperature": 0});
    assert_count_is_billed(&e, Api::Responses, response.clone(), &store);
    let first = whole(&submit(&e, Api::Responses, &response, &store));
    let next = json!({"input": "And again?", "previous_response_id": first["id"], "max_output_tokens": 2,
        "temperature": 0});
    let continued = assert_count_is_billed(&e, Api::Responses, next, &store);
    assert!(continued > count(&e, Api::Responses, &response, &store), "the stored conversation is counted");
    let ollama = json!({"model": "m", "messages": messages, "stream": false, "options": {"num_predict": 2}});
    assert_count_is_billed(&e, Api::OllamaChat, ollama, &store);
    for raw in [false, true] {
        let generate =
            json!({"model": "m", "prompt": "Hi there", "raw": raw, "stream": false, "options": {"num_predict": 2}});
        assert_count_is_billed(&e, Api::OllamaGenerate, generate, &store);
    }
    let llama = json!({"prompt": [1, 2, 3, "and text"], "n_predict": 2, "temperature": 0});
    assert_count_is_billed(&e, Api::LlamaCompletion, llama, &store);
}

#[test]
fn refusals_name_the_apis_fields_and_nothing_is_submitted() {
    let e = engine();
    let store = Arc::new(ResponseStore::new());
    let refusal = |api: Api, body: &str| {
        let error = count_prompt_tokens(&e, body, api, &store).expect_err(body);
        (error.param.unwrap_or_default(), error.message)
    };
    let (param, message) = refusal(Api::AnthropicMessages, "{\"messages\": [");
    assert!(param.is_empty() && message.contains("not valid JSON"), "{message}");
    let bad_stop = r#"{"messages": [{"role": "user", "content": "x"}], "stop_sequences": 5}"#;
    assert_eq!(refusal(Api::AnthropicMessages, bad_stop).0, "stop_sequences");
    let no_messages = r#"{"model": "m"}"#;
    assert_eq!(refusal(Api::AnthropicMessages, no_messages).0, "messages");
    let non_object_input = r#"{"messages": [{"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}]}"#;
    assert_eq!(refusal(Api::AnthropicMessages, non_object_input).0, "messages[1].content[0].input");
    let vocab = e.model().config.vocab_size;
    let out_of_vocab = format!(r#"{{"prompt": [1, {vocab}]}}"#);
    let (param, message) = refusal(Api::LlamaCompletion, &out_of_vocab);
    assert_eq!(param, "prompt");
    assert!(message.contains(&vocab.to_string()), "{message}");
    assert_eq!(refusal(Api::Completions, r#"{"prompt": []}"#).0, "prompt");
    let (param, _) = refusal(Api::Responses, r#"{"input": "x", "previous_response_id": "resp_unknown"}"#);
    assert_eq!(param, "previous_response_id");
    assert_eq!(
        refusal(Api::OllamaGenerate, r#"{"model": "m", "prompt": "x", "options": {"num_predict": "9"}}"#).0,
        "options.num_predict"
    );
    count(&e, Api::Completions, &json!({"prompt": "Counted, not served"}), &store);
    // Request ids are drawn at submission from 1: counting drew none.
    let served = submit(&e, Api::Completions, &json!({"prompt": "x", "max_tokens": 1}), &store);
    assert_eq!(served.handle().id(), 1, "counting submits nothing");
}
