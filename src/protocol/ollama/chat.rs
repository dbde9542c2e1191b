//! Reading Ollama's `POST /api/chat` into a Chat Completions body: `messages` (their `thinking`, `tool_calls` with
//! object arguments, `tool_name`), `tools` (already OpenAI's shape), and what `/api/generate` shares with it
//! (`request.rs`, `options.rs`).

use serde_json::{json, Map, Value};

use super::super::error::ApiError;
use super::super::fields::{as_array, as_object, as_str, get};
use super::super::request::ApiKind;
use super::options::read_options;
use super::request::{
    check_keep_alive, copy_fields, read_format, read_logprobs, read_stream, read_think, refuse_images, Field,
};
use crate::model::chat_template::ChatTemplate;

/// The `/api/chat` fields. Any other is refused by name.
const FIELDS: &[(&str, Field)] = &[
    ("model", Field::Copy),
    ("messages", Field::Own),
    ("tools", Field::Own),
    ("format", Field::Own),
    ("options", Field::Own),
    ("stream", Field::Own),
    ("think", Field::Own),
    ("keep_alive", Field::Own),
    ("logprobs", Field::Own),
    ("top_logprobs", Field::Own),
    // ember's own, with chat's meaning: the gateway sets `deadline_ms` from a client's timeout header.
    ("priority", Field::Copy),
    ("deadline_ms", Field::Copy),
];

/// Reads an `/api/chat` body into its chat body; `template` is the model's, which `think` is given to.
pub(super) fn read(body: &Value, template: &ChatTemplate) -> Result<Value, ApiError> {
    let o = body.as_object().ok_or_else(|| ApiError::malformed("the request body must be a JSON object"))?;
    let mut chat = Map::new();
    copy_fields(o, FIELDS, &mut chat)?;
    check_keep_alive(o)?;
    let messages = get(o, "messages").ok_or_else(|| ApiError::invalid("messages", "messages is required"))?;
    chat.insert("messages".into(), read_messages(messages)?);
    if let Some(tools) = get(o, "tools") {
        // Ollama's clients send `tools: []` when there are none; chat refuses an empty list.
        if !as_array(tools, "tools")?.is_empty() {
            chat.insert("tools".into(), tools.clone());
        }
    }
    read_format(o, &mut chat)?;
    read_options(get(o, "options"), &mut chat)?;
    read_stream(o, &mut chat)?;
    read_think(o, template, &mut chat)?;
    read_logprobs(o, ApiKind::Chat, &mut chat)?;
    Ok(Value::Object(chat))
}

/// Ollama's messages as chat's: `thinking` is chat's `reasoning_content` (which templates get as `thinking`),
/// `tool_name` the tool message's `name`, `tool_calls` OpenAI's calls. `content` may be absent (Ollama's Python
/// client leaves an empty one out).
fn read_messages(messages: &Value) -> Result<Value, ApiError> {
    let mut out = Vec::new();
    for (i, message) in as_array(messages, "messages")?.iter().enumerate() {
        let param = format!("messages[{i}]");
        let mut chat = Map::new();
        for (key, value) in as_object(message, &param)?.iter().filter(|(_, v)| !v.is_null()) {
            let name = match key.as_str() {
                "role" | "content" | "tool_call_id" => key.as_str(),
                "thinking" => "reasoning_content",
                "tool_name" => "name",
                "tool_calls" => {
                    chat.insert("tool_calls".into(), read_calls(value, &format!("{param}.tool_calls"))?);
                    continue;
                }
                "images" => {
                    refuse_images(Some(value), &format!("{param}.images"))?;
                    continue;
                }
                other => {
                    let field = format!("{param}.{other}");
                    return Err(ApiError::invalid(field.clone(), format!("unrecognized message field: {field}")));
                }
            };
            chat.insert(name.into(), value.clone());
        }
        chat.entry("content").or_insert(json!(""));
        out.push(Value::Object(chat));
    }
    Ok(Value::Array(out))
}

/// An assistant turn's calls, `[{"function": {"name", "arguments": {...}}}]` (an `id` kept where Ollama gave
/// one), as OpenAI's, whose `arguments` is the JSON text.
fn read_calls(calls: &Value, param: &str) -> Result<Value, ApiError> {
    let mut out = Vec::new();
    for (j, call) in as_array(calls, param)?.iter().enumerate() {
        let param = format!("{param}[{j}]");
        let call = as_object(call, &param)?;
        let function_param = format!("{param}.function");
        let function = get(call, "function")
            .ok_or_else(|| ApiError::invalid(function_param.clone(), format!("{function_param} is required")))?;
        let function = as_object(function, &function_param)?;
        let name_param = format!("{function_param}.name");
        let name = as_str(
            get(function, "name")
                .ok_or_else(|| ApiError::invalid(name_param.clone(), format!("{name_param} is required")))?,
            &name_param,
        )?;
        let arguments = match get(function, "arguments") {
            None => "{}".to_owned(),
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        };
        let mut openai = Map::new();
        if let Some(id) = get(call, "id") {
            openai.insert("id".into(), id.clone());
        }
        openai.insert("type".into(), json!("function"));
        openai.insert("function".into(), json!({"name": name, "arguments": arguments}));
        out.push(Value::Object(openai));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> ChatTemplate {
        ChatTemplate::new(None, "", "").unwrap()
    }

    fn chat(body: Value) -> Value {
        read(&body, &template()).unwrap_or_else(|e| panic!("{}", e.message))
    }

    fn refusal(body: Value) -> String {
        read(&body, &template()).expect_err("refused").param.unwrap_or_default()
    }

    #[test]
    fn messages_calls_and_options_become_chats() {
        let body = chat(json!({"model": "m", "stream": false, "tools": [],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "thinking": "look it up", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
            ],
            "options": {"temperature": 0, "num_predict": 5}, "keep_alive": "5m", "format": "json"}));
        assert_eq!(
            body,
            json!({"model": "m",
                "messages": [
                    {"role": "user", "content": "weather?"},
                    {"role": "assistant", "reasoning_content": "look it up", "tool_calls": [{"type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}], "content": ""},
                    {"role": "tool", "content": "sunny", "name": "get_weather"},
                ],
                "response_format": {"type": "json_object"},
                "temperature": 0, "max_tokens": 5, "top_k": 40, "top_p": 0.9, "stream": false})
        );
    }

    #[test]
    fn it_streams_unless_told_not_to_and_a_schema_is_json_schema() {
        let body = chat(json!({"messages": [], "format": {"type": "object"}, "logprobs": true, "top_logprobs": 2}));
        assert_eq!(body["stream"], json!(true));
        assert_eq!(body["response_format"]["json_schema"]["schema"], json!({"type": "object"}));
        assert_eq!((&body["logprobs"], &body["top_logprobs"]), (&json!(true), &json!(2)));
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let image = json!({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]});
        assert_eq!(refusal(image), "messages[0].images");
        assert_eq!(refusal(json!({"messages": [], "options": {"mirostat": 1}})), "options.mirostat");
        assert_eq!(refusal(json!({"messages": [], "format": "yaml"})), "format");
        assert_eq!(refusal(json!({"messages": [], "truncate": true})), "truncate");
        assert_eq!(refusal(json!({"messages": [{"role": "user", "content": "x", "name": "n"}]})), "messages[0].name");
        assert_eq!(refusal(json!({"messages": [], "keep_alive": [1]})), "keep_alive");
        assert_eq!(refusal(json!({"messages": [], "top_logprobs": 3})), "top_logprobs");
        // ChatML's fallback neither thinks nor has a switch: `think: true` is refused, `false` has nothing to do.
        assert_eq!(refusal(json!({"messages": [], "think": true})), "think");
        assert!(chat(json!({"messages": [], "think": false})).get("reasoning_effort").is_none());
        assert!(chat(json!({"messages": [{"role": "user", "content": "x", "images": []}]})).is_object());
    }
}
