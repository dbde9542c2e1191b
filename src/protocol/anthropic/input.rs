//! Reading an Anthropic Messages request (`POST /v1/messages`) into a Chat Completions body: `system` and
//! `messages` (text, `tool_use`, `tool_result` and thinking blocks) become chat `messages`; `stop_sequences`,
//! `tools`, `tool_choice`, `thinking` and `output_config` become their chat equivalents. The fields copied across
//! unchanged keep their meaning in chat. docs/protocol.md, "Anthropic Messages", has the whole list.

use super::super::translate::{Purpose, EMBER_CHAT_FIELDS};
use serde_json::{json, Map, Value};

use super::super::error::ApiError;
use super::super::fields::{as_array, as_object, as_str, as_u64, get, opt_bool, Object};
use crate::model::chat_template::ChatTemplate;

/// The Messages fields, and how each is read. Any other field is refused by name.
const FIELDS: &[(&str, Field)] = &[
    ("model", Field::Copy),
    ("max_tokens", Field::Copy),
    ("messages", Field::Own),
    ("system", Field::Own),
    ("stop_sequences", Field::Own),
    ("stream", Field::Copy),
    ("temperature", Field::Copy),
    ("top_p", Field::Copy),
    ("top_k", Field::Copy),
    ("tools", Field::Own),
    ("tool_choice", Field::Own),
    ("thinking", Field::Own),
    ("output_config", Field::Own),
    ("metadata", Field::Own),
    // Accepted with no effect on the output: a capacity tier, and automatic prompt caching (ember's prefix cache
    // needs no marker).
    ("service_tier", Field::Ignored),
    ("cache_control", Field::Ignored),
    // ember's own fields are `translate::EMBER_CHAT_FIELDS`.
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

/// The chat field names the translated body uses, with the Messages name a refusal should give.
pub(super) const FIELD_NAMES: &[(&str, &str)] = &[
    ("stop", "stop_sequences"),
    ("parallel_tool_calls", "tool_choice.disable_parallel_tool_use"),
    ("tool_choice.function.name", "tool_choice.name"),
    ("response_format.json_schema.schema", "output_config.format.schema"),
    ("response_format", "output_config.format"),
    ("reasoning_effort", "output_config.effort"),
    // A prefilled assistant turn is continued (`continue_final_message`).
    ("continue_final_message", "messages"),
];

/// A Messages request, read.
#[derive(Debug)]
pub(super) struct MessagesRequest {
    /// The chat body.
    pub body: Value,
    /// `max_tokens`, when it is a count: a `max_tokens` stop short of it was the context's end.
    pub max_tokens: Option<u64>,
    /// `thinking.display: "omitted"`: thinking blocks come without their text.
    pub omit_thinking: bool,
}

/// Reads `body`; `template` is the model's chat template (which variable, if any, switches its thinking).
/// `max_tokens` is required for generation, not for counting (a `count_tokens` body has none).
pub(super) fn read(body: &Value, template: &ChatTemplate, purpose: Purpose) -> Result<MessagesRequest, ApiError> {
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
    // Anthropic's API has no default length: a client that leaves it out is told, as Anthropic tells it.
    let max_tokens = get(o, "max_tokens");
    if max_tokens.is_none() && purpose == Purpose::Generate {
        return Err(ApiError::invalid("max_tokens", "max_tokens is required"));
    }

    let mut messages = Vec::new();
    if let Some(system) = get(o, "system") {
        let text = match system {
            Value::String(s) => s.clone(),
            other => blocks_text(other, "system")?,
        };
        // Anthropic reads an empty system prompt as none; a template would write an empty system turn.
        if !text.is_empty() {
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let turns = get(o, "messages").ok_or_else(|| ApiError::invalid("messages", "messages is required"))?;
    let prefilled = read_messages(turns, &mut messages)?;
    chat.insert("messages".into(), Value::Array(messages));
    if prefilled {
        // A last assistant turn is the start of the reply, which the model continues (Anthropic's prefill).
        chat.insert("add_generation_prompt".into(), json!(false));
        chat.insert("continue_final_message".into(), json!(true));
    }

    if let Some(stops) = get(o, "stop_sequences") {
        for (i, stop) in as_array(stops, "stop_sequences")?.iter().enumerate() {
            as_str(stop, &format!("stop_sequences[{i}]"))?;
        }
        chat.insert("stop".into(), stops.clone());
    }
    if let Some(tools) = get(o, "tools") {
        chat.insert("tools".into(), read_tools(tools)?);
    }
    if let Some(choice) = get(o, "tool_choice") {
        read_tool_choice(as_object(choice, "tool_choice")?, &mut chat)?;
    }
    let omit_thinking = match get(o, "thinking") {
        Some(thinking) => read_thinking(as_object(thinking, "thinking")?, template, &mut chat)?,
        None => false,
    };
    if let Some(config) = get(o, "output_config") {
        read_output_config(as_object(config, "output_config")?, &mut chat)?;
    }
    if let Some(metadata) = get(o, "metadata") {
        let metadata = as_object(metadata, "metadata")?;
        only_keys(metadata, &["user_id"], "metadata")?;
        nested_str(metadata, "user_id", "metadata")?;
    }
    if chat.get("stream") == Some(&json!(true)) {
        // The usage comes last in the chat stream, where `message_delta` needs it.
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(MessagesRequest { body: Value::Object(chat), max_tokens: max_tokens.and_then(Value::as_u64), omit_thinking })
}

/// Refuses any key of `o` but `keys`, naming it under `param`.
fn only_keys(o: &Object, keys: &[&str], param: &str) -> Result<(), ApiError> {
    match o.iter().find(|(k, v)| !v.is_null() && !keys.contains(&k.as_str())) {
        Some((key, _)) => {
            Err(ApiError::invalid(format!("{param}.{key}"), format!("unrecognized request argument: {param}.{key}")))
        }
        None => Ok(()),
    }
}

fn missing(param: &str, field: &str) -> ApiError {
    ApiError::invalid(format!("{param}.{field}"), format!("{param}.{field} is required"))
}

/// `o[field]`, a string when there, named `param.field`.
fn nested_str<'a>(o: &'a Object, field: &str, param: &str) -> Result<Option<&'a str>, ApiError> {
    get(o, field).map(|v| as_str(v, &format!("{param}.{field}"))).transpose()
}

fn required_str<'a>(o: &'a Object, field: &str, param: &str) -> Result<&'a str, ApiError> {
    nested_str(o, field, param)?.ok_or_else(|| missing(param, field))
}

/// A block's `type`, required.
fn block_type<'a>(block: &'a Object, param: &str) -> Result<&'a str, ApiError> {
    required_str(block, "type", param)
}

/// A block of a type ember cannot read where it stands, refused by its `type`.
fn unsupported(param: &str, kind: &str, here: &str) -> ApiError {
    let why = match kind {
        "image" | "document" | "search_result" | "container_upload" => "this model reads text only".to_owned(),
        "tool_use" | "thinking" | "redacted_thinking" => "it belongs in an assistant turn".to_owned(),
        "tool_result" => "it belongs in a user turn".to_owned(),
        _ => format!("ember reads {here} there"),
    };
    ApiError::invalid(format!("{param}.type"), format!("content blocks of type {kind:?} are not supported here: {why}"))
}

/// Text blocks (`system`, a tool result's content), joined with `"\n"` as chat joins text parts.
fn blocks_text(blocks: &Value, param: &str) -> Result<String, ApiError> {
    let mut texts = Vec::new();
    for (j, block) in as_array(blocks, param)?.iter().enumerate() {
        let param = format!("{param}[{j}]");
        let block = as_object(block, &param)?;
        match block_type(block, &param)? {
            "text" => texts.push(text_block(block, &param)?),
            other => return Err(unsupported(&param, other, "text blocks")),
        }
    }
    Ok(texts.join("\n"))
}

/// A text block's text; its `cache_control` and `citations` have no effect.
fn text_block<'a>(block: &'a Object, param: &str) -> Result<&'a str, ApiError> {
    only_keys(block, &["type", "text", "cache_control", "citations"], param)?;
    required_str(block, "text", param)
}

/// `messages`, appended to `chat` as chat messages; whether the last is an assistant turn to continue.
fn read_messages(turns: &Value, chat: &mut Vec<Value>) -> Result<bool, ApiError> {
    let turns = as_array(turns, "messages")?;
    let mut prefilled = false;
    for (i, turn) in turns.iter().enumerate() {
        let param = format!("messages[{i}]");
        let turn = as_object(turn, &param)?;
        only_keys(turn, &["role", "content"], &param)?;
        let role = required_str(turn, "role", &param)?;
        let content = get(turn, "content").ok_or_else(|| missing(&param, "content"))?;
        let blocks = match content {
            Value::String(text) => vec![json!({"type": "text", "text": text})],
            other => as_array(other, &format!("{param}.content"))?.to_vec(),
        };
        let content_param = format!("{param}.content");
        match role {
            "user" => read_user_turn(&blocks, &content_param, chat)?,
            "assistant" => {
                let message = read_assistant_turn(&blocks, &content_param)?;
                let text = message["content"].as_str().unwrap_or_default();
                // A turn with calls, or with nothing to continue, is a whole turn: the reply comes after it.
                prefilled = i + 1 == turns.len() && message.get("tool_calls").is_none() && !text.trim().is_empty();
                push_turn(chat, message);
            }
            other => {
                return Err(ApiError::invalid(
                    format!("{param}.role"),
                    format!("role {other:?} is not one of user, assistant (the system prompt is `system`)"),
                ))
            }
        }
    }
    Ok(prefilled)
}

/// A user turn: its tool results, each a chat `tool` message, then its text (a chat turn follows its calls'
/// results, which Anthropic's clients put first in the turn after the calls).
fn read_user_turn(blocks: &[Value], param: &str, chat: &mut Vec<Value>) -> Result<(), ApiError> {
    let mut texts = Vec::new();
    let mut results = 0;
    for (j, block) in blocks.iter().enumerate() {
        let param = format!("{param}[{j}]");
        let block = as_object(block, &param)?;
        match block_type(block, &param)? {
            "text" => texts.push(text_block(block, &param)?),
            "tool_result" => {
                only_keys(block, &["type", "tool_use_id", "content", "is_error", "cache_control"], &param)?;
                let id = required_str(block, "tool_use_id", &param)?;
                // `is_error` has no chat counterpart: the result's text says what went wrong.
                opt_bool(block, "is_error").map_err(|e| renamed(e, &format!("{param}.is_error")))?;
                let content = match get(block, "content") {
                    None => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => blocks_text(other, &format!("{param}.content"))?,
                };
                chat.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                results += 1;
            }
            other => return Err(unsupported(&param, other, "text and tool_result blocks in a user turn")),
        }
    }
    if !texts.is_empty() || results == 0 {
        push_turn(chat, json!({"role": "user", "content": texts.join("\n")}));
    }
    Ok(())
}

/// Appends a user or assistant turn, joined to the last message when that is a turn of the same role without
/// calls: Anthropic combines consecutive turns of one role into one, where a template would show two.
fn push_turn(chat: &mut Vec<Value>, mut message: Value) {
    match chat.last_mut() {
        Some(last) if last["role"] == message["role"] && last.get("tool_calls").is_none() => {
            let (before, after) =
                (last["content"].as_str().unwrap_or_default(), message["content"].as_str().unwrap_or_default());
            let joined = match (before.is_empty(), after.is_empty()) {
                (false, false) => format!("{before}\n{after}"),
                _ => format!("{before}{after}"),
            };
            last["content"] = json!(joined);
            if let Some(calls) = message.get_mut("tool_calls").map(Value::take) {
                last["tool_calls"] = calls;
            }
        }
        _ => chat.push(message),
    }
}

/// An assistant turn: its text and its calls (`tool_use`, each a chat tool call whose arguments are the JSON
/// text of its input); its thinking is left out.
fn read_assistant_turn(blocks: &[Value], param: &str) -> Result<Value, ApiError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let param = format!("{param}[{j}]");
        let block = as_object(block, &param)?;
        match block_type(block, &param)? {
            "text" => texts.push(text_block(block, &param)?),
            "tool_use" => {
                only_keys(block, &["type", "id", "name", "input", "cache_control"], &param)?;
                let input = get(block, "input").ok_or_else(|| missing(&param, "input"))?;
                as_object(input, &format!("{param}.input"))?;
                calls.push(json!({
                    "id": required_str(block, "id", &param)?,
                    "type": "function",
                    "function": {"name": required_str(block, "name", &param)?, "arguments": input.to_string()},
                }));
            }
            // Earlier thinking: the signature that would vouch for it is Anthropic's, and the templates that show
            // earlier reasoning show it for the turn being answered only; leaving it out is what they do without.
            "thinking" | "redacted_thinking" => {}
            other => return Err(unsupported(&param, other, "text, tool_use and thinking blocks in an assistant turn")),
        }
    }
    let mut message = json!({"role": "assistant", "content": texts.join("\n")});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    Ok(message)
}

/// `e`, naming `param` (a nested field read with the object's own name).
fn renamed(mut e: ApiError, param: &str) -> ApiError {
    if let Some(name) = &e.param {
        e.message = e.message.replace(name.as_str(), param);
    }
    e.param = Some(param.to_owned());
    e
}

/// Client tools (`{name, description, input_schema}`) are chat's function tools; Anthropic's server tools
/// (`web_search`, `bash`, ... with a dated `type`) run on Anthropic's side, and are refused.
fn read_tools(tools: &Value) -> Result<Value, ApiError> {
    let mut out = Vec::new();
    for (i, tool) in as_array(tools, "tools")?.iter().enumerate() {
        let param = format!("tools[{i}]");
        let tool = as_object(tool, &param)?;
        if let Some(kind) = nested_str(tool, "type", &param)? {
            if kind != "custom" {
                return Err(ApiError::invalid(
                    format!("{param}.type"),
                    format!("tools of type {kind:?} are not supported: ember runs client tools only"),
                ));
            }
        }
        let known = ["type", "name", "description", "input_schema", "strict", "cache_control", "eager_input_streaming"];
        only_keys(tool, &known, &param)?;
        let mut function = Map::new();
        function.insert("name".into(), json!(required_str(tool, "name", &param)?));
        if let Some(description) = nested_str(tool, "description", &param)? {
            function.insert("description".into(), json!(description));
        }
        let schema = get(tool, "input_schema").ok_or_else(|| missing(&param, "input_schema"))?;
        as_object(schema, &format!("{param}.input_schema"))?;
        function.insert("parameters".into(), schema.clone());
        if let Some(strict) = get(tool, "strict") {
            function.insert("strict".into(), strict.clone());
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `{"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}`: chat's `"auto"`,
/// `"required"`, a forced function, `"none"`; one call at most is `parallel_tool_calls: false`.
fn read_tool_choice(choice: &Object, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    let kind = required_str(choice, "type", "tool_choice")?;
    let chat_choice = match kind {
        "auto" => json!("auto"),
        "any" => json!("required"),
        "none" => json!("none"),
        "tool" => json!({"type": "function", "function": {"name": required_str(choice, "name", "tool_choice")?}}),
        other => {
            return Err(ApiError::invalid(
                "tool_choice.type",
                format!("tool_choice.type {other:?} is not one of auto, any, tool, none"),
            ))
        }
    };
    let known: &[&str] = match kind {
        "tool" => &["type", "name", "disable_parallel_tool_use"],
        "none" => &["type"],
        _ => &["type", "disable_parallel_tool_use"],
    };
    only_keys(choice, known, "tool_choice")?;
    let one_call = opt_bool(choice, "disable_parallel_tool_use")
        .map_err(|e| renamed(e, "tool_choice.disable_parallel_tool_use"))?
        .unwrap_or(false);
    if one_call {
        chat.insert("parallel_tool_calls".into(), json!(false));
    }
    chat.insert("tool_choice".into(), chat_choice);
    Ok(())
}

/// `thinking`: `{"type": "enabled", "budget_tokens"}`, `{"type": "adaptive"}` or `{"type": "disabled"}`, each with
/// an optional `display`. A template with a thinking switch (`enable_thinking`, `thinking`) is told whether to
/// think, unless `chat_template_kwargs` says so already; one without has none to set. ember has no thinking budget:
/// `max_tokens` bounds thinking and text together. Returns whether the thinking's text is to be left out
/// (`display: "omitted"`).
fn read_thinking(thinking: &Object, template: &ChatTemplate, chat: &mut Map<String, Value>) -> Result<bool, ApiError> {
    let kind = required_str(thinking, "type", "thinking")?;
    let known: &[&str] = match kind {
        "enabled" => &["type", "budget_tokens", "display"],
        "adaptive" => &["type", "display"],
        "disabled" => &["type"],
        other => {
            return Err(ApiError::invalid(
                "thinking.type",
                format!("thinking.type {other:?} is not one of enabled, adaptive, disabled"),
            ))
        }
    };
    only_keys(thinking, known, "thinking")?;
    if kind == "enabled" {
        let budget = get(thinking, "budget_tokens").ok_or_else(|| missing("thinking", "budget_tokens"))?;
        as_u64(budget, "thinking.budget_tokens")?;
    }
    let omit = match nested_str(thinking, "display", "thinking")? {
        None | Some("summarized") => false,
        Some("omitted") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "thinking.display",
                format!("thinking.display {other:?} is not one of summarized, omitted"),
            ))
        }
    };
    if let Some(variable) = ["enable_thinking", "thinking"].into_iter().find(|v| template.reads_variable(v)) {
        let kwargs = chat.entry("chat_template_kwargs").or_insert_with(|| json!({}));
        // Not an object: chat refuses it, naming chat_template_kwargs.
        if let Some(kwargs) = kwargs.as_object_mut() {
            kwargs.entry(variable).or_insert(json!(kind != "disabled"));
        }
    }
    Ok(omit)
}

/// `output_config`: `format` (`{"type": "json_schema", "schema"}`) is chat's structured output; `effort` its
/// `reasoning_effort` (Anthropic's two levels above `high` are `high`).
fn read_output_config(config: &Object, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    only_keys(config, &["format", "effort"], "output_config")?;
    if let Some(format) = get(config, "format") {
        let format = as_object(format, "output_config.format")?;
        only_keys(format, &["type", "schema"], "output_config.format")?;
        match required_str(format, "type", "output_config.format")? {
            "json_schema" => {}
            other => {
                return Err(ApiError::invalid(
                    "output_config.format.type",
                    format!("output_config.format.type {other:?} is not json_schema"),
                ))
            }
        }
        let schema = get(format, "schema").ok_or_else(|| missing("output_config.format", "schema"))?;
        as_object(schema, "output_config.format.schema")?;
        let json_schema = json!({"name": "output", "schema": schema, "strict": true});
        chat.insert("response_format".into(), json!({"type": "json_schema", "json_schema": json_schema}));
    }
    if let Some(effort) = nested_str(config, "effort", "output_config")? {
        let effort = match effort {
            "low" | "medium" | "high" => effort,
            "xhigh" | "max" => "high",
            other => {
                return Err(ApiError::invalid(
                    "output_config.effort",
                    format!("output_config.effort {other:?} is not one of low, medium, high, xhigh, max"),
                ))
            }
        };
        chat.insert("reasoning_effort".into(), json!(effort));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> ChatTemplate {
        ChatTemplate::new(Some("{{ messages[0].content }}"), "", "").unwrap()
    }

    fn read_with(body: Value, template: &ChatTemplate) -> MessagesRequest {
        read(&body, template, Purpose::Generate).unwrap_or_else(|e| panic!("{}", e.message))
    }

    fn chat(body: Value) -> Value {
        read_with(body, &plain()).body
    }

    fn refusal(body: Value) -> String {
        read(&body, &plain(), Purpose::Generate).expect_err("refused").param.unwrap_or_default()
    }

    #[test]
    fn system_and_messages_become_chat_messages() {
        let body = chat(json!({"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "a"},
            {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
                {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}],
            "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3, "metadata": {"user_id": "u"},
            "service_tier": "auto"}));
        assert_eq!(
            body,
            json!({"model": "m", "max_tokens": 5, "temperature": 0.5, "top_k": 3, "messages": [
                {"role": "system", "content": "a\nb"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo"}, {"role": "user", "content": "x\ny"}],
                "stop": ["END"]})
        );
        assert!(chat(json!({"max_tokens": 1, "system": "", "messages": []}))["messages"] == json!([]));
    }

    #[test]
    fn calls_and_results_become_chat_calls_and_tool_messages() {
        let body = chat(json!({"max_tokens": 9, "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "thanks"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                 "content": [{"type": "text", "text": "no clock"}]}]}]}));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "toolu_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "no clock"},
                {"role": "user", "content": "thanks"},
            ])
        );
        assert!(body.get("continue_final_message").is_none());
    }

    #[test]
    fn a_last_assistant_turn_is_continued() {
        let body = chat(json!({"max_tokens": 9, "messages": [{"role": "user", "content": "Count"},
            {"role": "assistant", "content": "1, 2,"}]}));
        assert_eq!((&body["continue_final_message"], &body["add_generation_prompt"]), (&json!(true), &json!(false)));
        let thought_only = chat(json!({"max_tokens": 9, "messages": [{"role": "user", "content": "Count"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]}]}));
        assert!(thought_only.get("continue_final_message").is_none(), "nothing to continue");
    }

    #[test]
    fn consecutive_turns_of_one_role_are_one() {
        let body = chat(json!({"max_tokens": 9, "messages": [
            {"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
            {"role": "user", "content": "d"}]}));
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": "a\nb"},
                {"role": "assistant", "content": "c", "tool_calls": [
                    {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "t", "content": "r"},
                {"role": "user", "content": "d"}])
        );
    }

    #[test]
    fn tools_and_choices_become_chats() {
        let tools = json!([{"name": "f", "description": "d", "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"}, "type": "custom"}]);
        let body = chat(json!({"max_tokens": 9, "messages": [], "tools": tools, "stream": true,
            "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": true}}));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}])
        );
        assert_eq!(body["tool_choice"], json!({"type": "function", "function": {"name": "f"}}));
        assert_eq!(body["parallel_tool_calls"], json!(false));
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        let choice = |c: Value| chat(json!({"max_tokens": 1, "messages": [], "tool_choice": c}))["tool_choice"].clone();
        assert_eq!(choice(json!({"type": "any"})), json!("required"));
        assert_eq!(choice(json!({"type": "auto"})), json!("auto"));
        assert_eq!(choice(json!({"type": "none"})), json!("none"));
    }

    #[test]
    fn thinking_sets_the_templates_switch_when_it_has_one() {
        let qwen3 =
            ChatTemplate::new(Some("{% if enable_thinking is false %}<think></think>{% endif %}"), "", "").unwrap();
        let on = read_with(
            json!({"max_tokens": 9, "messages": [], "thinking": {"type": "enabled", "budget_tokens": 2048}}),
            &qwen3,
        );
        assert_eq!(on.body["chat_template_kwargs"], json!({"enable_thinking": true}));
        assert!(!on.omit_thinking);
        let off = read_with(json!({"max_tokens": 9, "messages": [], "thinking": {"type": "disabled"}}), &qwen3);
        assert_eq!(off.body["chat_template_kwargs"], json!({"enable_thinking": false}));
        let kept = read_with(
            json!({"max_tokens": 9, "messages": [], "thinking": {"type": "adaptive", "display": "omitted"},
                "chat_template_kwargs": {"enable_thinking": false}}),
            &qwen3,
        );
        assert_eq!(kept.body["chat_template_kwargs"], json!({"enable_thinking": false}), "the client's own wins");
        assert!(kept.omit_thinking);
        let none = chat(json!({"max_tokens": 9, "messages": [], "thinking": {"type": "enabled", "budget_tokens": 1}}));
        assert!(none.get("chat_template_kwargs").is_none(), "no switch to set");
    }

    #[test]
    fn output_config_becomes_structured_output_and_effort() {
        let body = chat(json!({"max_tokens": 9, "messages": [], "output_config": {
            "format": {"type": "json_schema", "schema": {"type": "object"}}, "effort": "max"}}));
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "output", "schema": {"type": "object"}, "strict": true}})
        );
        assert_eq!(body["reasoning_effort"], json!("high"));
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let user = |content: Value| json!({"max_tokens": 9, "messages": [{"role": "user", "content": content}]});
        assert_eq!(refusal(json!({"messages": []})), "max_tokens");
        assert_eq!(refusal(json!({"max_tokens": 9})), "messages");
        assert_eq!(refusal(json!({"max_tokens": 9, "messages": [], "frobnicate": 1})), "frobnicate");
        let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}});
        assert_eq!(refusal(user(json!([{"type": "text", "text": "x"}, image]))), "messages[0].content[1].type");
        assert_eq!(refusal(user(json!([{"type": "document", "source": {}}]))), "messages[0].content[0].type");
        assert_eq!(
            refusal(user(json!([{"type": "tool_use", "id": "i", "name": "n", "input": {}}]))),
            "messages[0].content[0].type"
        );
        let result_image = json!([{"type": "tool_result", "tool_use_id": "t", "content": [image]}]);
        assert_eq!(refusal(user(result_image)), "messages[0].content[0].content[0].type");
        assert_eq!(refusal(user(json!([{"type": "text", "text": "x", "extra": 1}]))), "messages[0].content[0].extra");
        assert_eq!(
            refusal(json!({"max_tokens": 9, "messages": [{"role": "system", "content": "x"}]})),
            "messages[0].role"
        );
        assert_eq!(
            refusal(
                json!({"max_tokens": 9, "messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]})
            ),
            "tools[0].type"
        );
        assert_eq!(
            refusal(json!({"max_tokens": 9, "messages": [], "tools": [{"name": "f"}]})),
            "tools[0].input_schema"
        );
        assert_eq!(
            refusal(json!({"max_tokens": 9, "messages": [], "tool_choice": {"type": "tool"}})),
            "tool_choice.name"
        );
        assert_eq!(
            refusal(json!({"max_tokens": 9, "messages": [], "thinking": {"type": "enabled"}})),
            "thinking.budget_tokens"
        );
        assert_eq!(refusal(json!({"max_tokens": 9, "messages": [], "metadata": {"tags": []}})), "metadata.tags");
        assert_eq!(
            refusal(json!({"max_tokens": 9, "messages": [], "output_config": {"format": {"type": "grammar"}}})),
            "output_config.format.type"
        );
        assert_eq!(refusal(json!({"max_tokens": 9, "messages": [], "stop_sequences": [1]})), "stop_sequences[0]");
    }
}
