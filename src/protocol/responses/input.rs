//! Reading an OpenAI Responses request (`POST /v1/responses`) into a Chat Completions body: `instructions` and
//! `input` (a string, or message, function-call and function-call-output items) become `messages`, after the
//! conversation `previous_response_id` names; `tools`, `tool_choice`, `text.format` and `max_output_tokens`
//! become their chat equivalents. The fields copied across unchanged keep their meaning in chat.

use super::super::translate::EMBER_CHAT_FIELDS;
use serde_json::{json, Map, Value};

use super::super::error::ApiError;
use super::super::fields::{as_array, as_object, as_str, get, opt_bool, opt_str, type_error, Object};

/// The Responses fields, and how each is read. Any other field is refused by name.
const FIELDS: &[(&str, Field)] = &[
    ("model", Field::Copy),
    ("input", Field::Own),
    ("instructions", Field::Own),
    ("previous_response_id", Field::Own),
    ("store", Field::Own),
    ("tools", Field::Own),
    ("tool_choice", Field::Own),
    ("parallel_tool_calls", Field::Copy),
    ("text", Field::Own),
    ("reasoning", Field::Own),
    ("max_output_tokens", Field::Own),
    ("temperature", Field::Copy),
    ("top_p", Field::Copy),
    ("stream", Field::Copy),
    ("stream_options", Field::Own),
    ("metadata", Field::Own),
    ("truncation", Field::Own),
    ("include", Field::Own),
    ("background", Field::Own),
    ("top_logprobs", Field::Own),
    ("max_tool_calls", Field::Own),
    // Accepted with no effect on the output, as in chat (docs/protocol.md, "Field policy").
    ("user", Field::Ignored),
    ("service_tier", Field::Ignored),
    ("prompt_cache_key", Field::Ignored),
    ("safety_identifier", Field::Ignored),
    // ember's own with chat's meaning, besides `translate::EMBER_CHAT_FIELDS`.
    ("top_k", Field::Copy),
    ("stop", Field::Copy),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    /// The chat field of the same name, unchanged.
    Copy,
    /// Read here.
    Own,
    /// Type-free, no effect on the output.
    Ignored,
}

/// One of ember's own fields (`translate::EMBER_CHAT_FIELDS`): copied to the chat body as it is.
fn ember_chat_field(name: &str) -> Option<Field> {
    EMBER_CHAT_FIELDS.contains(&name).then_some(Field::Copy)
}

/// The chat field names the translated body uses, with the Responses name a refusal should give.
pub(super) const FIELD_NAMES: &[(&str, &str)] =
    &[("messages", "input"), ("max_tokens", "max_output_tokens"), ("response_format", "text.format")];

/// A Responses request, read.
pub(super) struct ResponsesRequest {
    /// The chat body.
    pub body: Value,
    /// The conversation so far in chat messages, without `instructions` (which a continuation does not
    /// inherit): what a stored response keeps with its output.
    pub conversation: Vec<Value>,
    /// `store` (default true): keep this response for `previous_response_id`.
    pub store: bool,
    /// The request's own values the response object repeats (`instructions`, `tools`, `text`, ...).
    pub echo: Map<String, Value>,
}

/// Reads `body`; `previous` is the stored conversation `previous_response_id` names, looked up by the caller
/// (`None` when the request names none; an unknown id is the caller's refusal).
pub(super) fn read(body: &Value, previous: Option<&[Value]>) -> Result<ResponsesRequest, ApiError> {
    let o = body.as_object().ok_or_else(|| ApiError::malformed("the request body must be a JSON object"))?;
    let mut chat = Map::new();
    for (name, value) in o.iter().filter(|(_, v)| !v.is_null()) {
        match FIELDS.iter().find(|(known, _)| known == name).map(|&(_, f)| f).or_else(|| ember_chat_field(name)) {
            Some(Field::Copy) => {
                chat.insert(name.clone(), value.clone());
            }
            Some(Field::Own | Field::Ignored) => {}
            None => return Err(ApiError::invalid(name.as_str(), format!("unrecognized request argument: {name}"))),
        }
    }
    refuse_unless(o, "background", |v| v == &json!(false), "background responses are not supported")?;
    refuse_unless(o, "top_logprobs", |v| v == &json!(0), "top_logprobs is not supported on /v1/responses yet")?;
    refuse_unless(o, "max_tool_calls", |_| false, "max_tool_calls is not supported")?;
    if let Some(t) = opt_str(o, "truncation")? {
        if t != "disabled" && t != "auto" {
            return Err(ApiError::invalid(
                "truncation",
                format!("truncation must be \"auto\" or \"disabled\", got {t:?}"),
            ));
        }
    }
    if let Some(include) = get(o, "include") {
        for (i, item) in as_array(include, "include")?.iter().enumerate() {
            as_str(item, &format!("include[{i}]"))?;
        }
    }
    if let Some(options) = get(o, "stream_options") {
        as_object(options, "stream_options")?;
    }
    let store = opt_bool(o, "store")?.unwrap_or(true);

    let mut conversation: Vec<Value> = previous.map(<[Value]>::to_vec).unwrap_or_default();
    let input = get(o, "input").ok_or_else(|| ApiError::invalid("input", "input is required"))?;
    read_input(input, &mut conversation)?;
    let mut messages = Vec::with_capacity(conversation.len() + 1);
    if let Some(instructions) = opt_str(o, "instructions")? {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    messages.extend(conversation.iter().cloned());
    chat.insert("messages".into(), Value::Array(messages));

    if let Some(max) = get(o, "max_output_tokens") {
        chat.insert("max_tokens".into(), max.clone());
    }
    if let Some(tools) = get(o, "tools") {
        chat.insert("tools".into(), read_tools(tools)?);
    }
    if let Some(choice) = get(o, "tool_choice") {
        chat.insert("tool_choice".into(), read_tool_choice(choice)?);
    }
    if let Some(text) = get(o, "text") {
        read_text(as_object(text, "text")?, &mut chat)?;
    }
    if let Some(reasoning) = get(o, "reasoning") {
        let reasoning = as_object(reasoning, "reasoning")?;
        if let Some(effort) = opt_str(reasoning, "effort").map_err(|e| nested(e, "reasoning.effort"))? {
            chat.insert("reasoning_effort".into(), json!(effort));
        }
    }
    if chat.get("stream") == Some(&json!(true)) {
        // The usage comes last in the chat stream, where `response.completed` needs it.
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let echo = echo_fields(o);
    Ok(ResponsesRequest { body: Value::Object(chat), conversation, store, echo })
}

fn refuse_unless(o: &Object, name: &str, allowed: impl Fn(&Value) -> bool, why: &str) -> Result<(), ApiError> {
    match get(o, name) {
        Some(v) if !allowed(v) => Err(ApiError::invalid(name, why)),
        _ => Ok(()),
    }
}

/// `e`, naming `param` (a nested field read with the object's own name).
fn nested(mut e: ApiError, param: &str) -> ApiError {
    e.param = Some(param.to_owned());
    e
}

/// `input`: a string (one user message) or an array of items, appended to `conversation` as chat messages.
fn read_input(input: &Value, conversation: &mut Vec<Value>) -> Result<(), ApiError> {
    if let Some(text) = input.as_str() {
        conversation.push(json!({"role": "user", "content": text}));
        return Ok(());
    }
    for (i, item) in as_array(input, "input")?.iter().enumerate() {
        let param = format!("input[{i}]");
        let item = as_object(item, &param)?;
        let kind = match get(item, "type") {
            Some(t) => as_str(t, &format!("{param}.type"))?,
            None => "message",
        };
        match kind {
            "message" => conversation.push(read_message(item, &param)?),
            "function_call" => {
                let call = json!({
                    "id": required_str(item, "call_id", &param)?,
                    "type": "function",
                    "function": {
                        "name": required_str(item, "name", &param)?,
                        "arguments": required_str(item, "arguments", &param)?,
                    },
                });
                // Calls one after another are one assistant turn.
                match conversation.last_mut() {
                    Some(Value::Object(last))
                        if last.get("role") == Some(&json!("assistant")) && last.contains_key("tool_calls") =>
                    {
                        if let Some(Value::Array(calls)) = last.get_mut("tool_calls") {
                            calls.push(call);
                        }
                    }
                    _ => conversation.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            "function_call_output" => {
                let output = get(item, "output").ok_or_else(|| missing(&param, "output"))?;
                let output = match output {
                    Value::String(s) => s.clone(),
                    other => parts_text(other, &format!("{param}.output"))?,
                };
                conversation.push(json!({
                    "role": "tool",
                    "tool_call_id": required_str(item, "call_id", &param)?,
                    "content": output,
                }));
            }
            // A reasoning item of an earlier turn: the templates that show earlier reasoning take it from the
            // assistant message, which the Responses API sends apart; leaving it out is what they do without it.
            "reasoning" => {}
            other => {
                return Err(ApiError::invalid(
                    format!("{param}.type"),
                    format!("input items of type {other:?} are not supported (message, function_call, function_call_output, reasoning are)"),
                ))
            }
        }
    }
    Ok(())
}

fn missing(param: &str, field: &str) -> ApiError {
    ApiError::invalid(format!("{param}.{field}"), format!("{param}.{field} is required"))
}

fn required_str(item: &Object, field: &str, param: &str) -> Result<String, ApiError> {
    let value = get(item, field).ok_or_else(|| missing(param, field))?;
    Ok(as_str(value, &format!("{param}.{field}"))?.to_owned())
}

/// A message item: `role` (`developer` is the system role templates know) and `content`, a string or text parts.
fn read_message(item: &Object, param: &str) -> Result<Value, ApiError> {
    let role = required_str(item, "role", param)?;
    let role = match role.as_str() {
        "developer" | "system" => "system",
        "user" => "user",
        "assistant" => "assistant",
        other => {
            return Err(ApiError::invalid(
                format!("{param}.role"),
                format!("role {other:?} is not one of user, assistant, system, developer"),
            ))
        }
    };
    let content = get(item, "content").ok_or_else(|| missing(param, "content"))?;
    let text = match content {
        Value::String(s) => s.clone(),
        other => parts_text(other, &format!("{param}.content"))?,
    };
    Ok(json!({"role": role, "content": text}))
}

/// Content parts (`input_text`, `output_text`, `text`, `refusal`), joined: images, files and audio are refused.
fn parts_text(parts: &Value, param: &str) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, part) in as_array(parts, param)?.iter().enumerate() {
        let param = format!("{param}[{j}]");
        let part = as_object(part, &param)?;
        let kind = as_str(get(part, "type").ok_or_else(|| missing(&param, "type"))?, &format!("{param}.type"))?;
        let field = match kind {
            "input_text" | "output_text" | "text" => "text",
            "refusal" => "refusal",
            other => {
                return Err(ApiError::invalid(
                    format!("{param}.type"),
                    format!("content of type {other:?} is not supported: this model reads text only"),
                ))
            }
        };
        text.push_str(&required_str(part, field, &param)?);
    }
    Ok(text)
}

/// Responses tools are flat (`{type, name, description, parameters, strict}`); chat's nest the function.
fn read_tools(tools: &Value) -> Result<Value, ApiError> {
    let mut out = Vec::new();
    for (i, tool) in as_array(tools, "tools")?.iter().enumerate() {
        let param = format!("tools[{i}]");
        let tool = as_object(tool, &param)?;
        let kind = as_str(get(tool, "type").ok_or_else(|| missing(&param, "type"))?, &format!("{param}.type"))?;
        if kind != "function" {
            return Err(ApiError::invalid(
                format!("{param}.type"),
                format!("tools of type {kind:?} are not supported: ember runs function tools only"),
            ));
        }
        let mut function = Map::new();
        for key in ["name", "description", "parameters", "strict"] {
            if let Some(v) = get(tool, key) {
                function.insert(key.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `"auto"`, `"none"`, `"required"`, or `{"type": "function", "name"}`.
fn read_tool_choice(choice: &Value) -> Result<Value, ApiError> {
    if choice.is_string() {
        return Ok(choice.clone());
    }
    let o = as_object(choice, "tool_choice")?;
    match (opt_str(o, "type")?, opt_str(o, "name")?) {
        (Some("function"), Some(name)) => Ok(json!({"type": "function", "function": {"name": name}})),
        _ => Err(type_error(
            "tool_choice",
            "\"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\"}",
            choice,
        )),
    }
}

/// `text.format` (structured outputs) and `text.verbosity`.
fn read_text(text: &Object, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    for (name, value) in text.iter().filter(|(_, v)| !v.is_null()) {
        match name.as_str() {
            "format" => {
                let format = as_object(value, "text.format")?;
                let kind = opt_str(format, "type").map_err(|e| nested(e, "text.format.type"))?;
                let response_format = match kind {
                    Some("text") | None => continue,
                    Some("json_object") => json!({"type": "json_object"}),
                    Some("json_schema") => {
                        let mut schema = Map::new();
                        for key in ["name", "description", "schema", "strict"] {
                            if let Some(v) = get(format, key) {
                                schema.insert(key.into(), v.clone());
                            }
                        }
                        json!({"type": "json_schema", "json_schema": schema})
                    }
                    Some(other) => {
                        return Err(ApiError::invalid(
                            "text.format.type",
                            format!("text.format.type {other:?} is not one of text, json_object, json_schema"),
                        ))
                    }
                };
                chat.insert("response_format".into(), response_format);
            }
            "verbosity" => {
                as_str(value, "text.verbosity")?;
                chat.insert("verbosity".into(), value.clone());
            }
            other => {
                return Err(ApiError::invalid(
                    format!("text.{other}"),
                    format!("unrecognized request argument: text.{other}"),
                ))
            }
        }
    }
    Ok(())
}

/// The request's values a response object repeats, with OpenAI's defaults for those it did not set.
fn echo_fields(o: &Object) -> Map<String, Value> {
    let mut echo = Map::new();
    let value = |name: &str, default: Value| get(o, name).cloned().unwrap_or(default);
    echo.insert("instructions".into(), value("instructions", Value::Null));
    echo.insert("max_output_tokens".into(), value("max_output_tokens", Value::Null));
    echo.insert("metadata".into(), value("metadata", json!({})));
    echo.insert("parallel_tool_calls".into(), value("parallel_tool_calls", json!(true)));
    echo.insert("previous_response_id".into(), value("previous_response_id", Value::Null));
    echo.insert("reasoning".into(), value("reasoning", json!({"effort": null, "summary": null})));
    echo.insert("store".into(), value("store", json!(true)));
    echo.insert("temperature".into(), value("temperature", json!(1.0)));
    echo.insert("text".into(), value("text", json!({"format": {"type": "text"}})));
    echo.insert("tool_choice".into(), value("tool_choice", json!("auto")));
    echo.insert("tools".into(), value("tools", json!([])));
    echo.insert("top_p".into(), value("top_p", json!(1.0)));
    echo.insert("truncation".into(), value("truncation", json!("disabled")));
    echo.insert("user".into(), value("user", Value::Null));
    echo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Value {
        read(&body, None).unwrap_or_else(|e| panic!("{}", e.message)).body
    }

    fn refusal(body: Value) -> String {
        read(&body, None).err().expect("refused").param.unwrap_or_default()
    }

    #[test]
    fn a_string_input_is_one_user_message_after_the_instructions() {
        let body = chat(json!({"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 5}));
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 5})
        );
    }

    #[test]
    fn items_become_chat_messages_and_calls_merge_into_one_turn() {
        let body = chat(json!({"input": [
            {"role": "developer", "content": "rules"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"x\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
        ]}));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "rules"},
                {"role": "user", "content": "ab"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"x\":1}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "one"},
                {"role": "tool", "tool_call_id": "c2", "content": "two"},
            ])
        );
    }

    #[test]
    fn tools_choice_and_format_become_chats() {
        let body = chat(json!({"input": "x", "stream": true,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}, "verbosity": "low"},
            "reasoning": {"effort": "low"}}));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}])
        );
        assert_eq!(body["tool_choice"], json!({"type": "function", "function": {"name": "f"}}));
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}})
        );
        assert_eq!((&body["verbosity"], &body["reasoning_effort"]), (&json!("low"), &json!("low")));
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn a_continuation_follows_the_stored_conversation_without_its_instructions() {
        let previous = [json!({"role": "user", "content": "a"}), json!({"role": "assistant", "content": "b"})];
        let read = read(&json!({"input": "c", "instructions": "new"}), Some(&previous)).unwrap();
        assert_eq!(read.body["messages"].as_array().unwrap().len(), 4);
        assert_eq!(read.body["messages"][0], json!({"role": "system", "content": "new"}));
        assert_eq!(read.conversation.len(), 3, "instructions are not part of what is stored");
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        assert_eq!(refusal(json!({"input": "x", "background": true})), "background");
        assert_eq!(refusal(json!({"input": "x", "conversation": "c"})), "conversation");
        assert_eq!(refusal(json!({"input": "x", "tools": [{"type": "web_search"}]})), "tools[0].type");
        assert_eq!(
            refusal(json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})),
            "input[0].content[0].type"
        );
        assert_eq!(refusal(json!({"input": [{"type": "item_reference", "id": "x"}]})), "input[0].type");
        assert_eq!(refusal(json!({"input": "x", "text": {"format": {"type": "grammar"}}})), "text.format.type");
        assert_eq!(refusal(json!({})), "input");
        assert!(read(&json!({"input": "x", "background": false, "store": false, "include": ["reasoning.encrypted_content"], "user": "u", "truncation": "auto"}), None).is_ok());
    }
}
