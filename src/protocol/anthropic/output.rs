//! The Anthropic `message` object, from what a chat request produced: its content blocks (thinking, text,
//! tool uses), stop reason, usage, and, behind chat's double gate, `metrics` and `timings`.

use serde_json::{json, Map, Value};

/// What every event and body of one request repeats, and what its request said about the output.
#[derive(Clone, Debug)]
pub(super) struct Head {
    pub id: String,
    pub model: String,
    /// The request's `max_tokens`: a choice cut short before it ran out of context, not of `max_tokens`.
    pub max_tokens: Option<u64>,
    /// `thinking.display: "omitted"`: thinking blocks without their text.
    pub omit_thinking: bool,
}

/// `stop_reason` and `stop_sequence`, from chat's `finish_reason`, the stop string that ended the choice, and
/// how many tokens it generated. ember's own endings (`cancelled`, `deadline`) keep chat's word.
pub(super) fn stop_reason(
    head: &Head,
    finish_reason: Option<&str>,
    stop_string: Option<&str>,
    output_tokens: u64,
) -> (Value, Value) {
    let reason = match finish_reason {
        None | Some("stop") if stop_string.is_some() => return (json!("stop_sequence"), json!(stop_string)),
        None | Some("stop") => "end_turn",
        Some("tool_calls") => "tool_use",
        Some("length") if head.max_tokens.is_some_and(|max| output_tokens < max) => "model_context_window_exceeded",
        Some("length") => "max_tokens",
        Some(other) => other,
    };
    (json!(reason), Value::Null)
}

/// Chat's `usage` in Anthropic's names: `input_tokens` are the prompt tokens the prefix cache did not supply
/// (`cache_read_input_tokens` are those it did), as Anthropic counts them; nothing is ever written to a cache
/// that bills its writing.
pub(super) fn usage(chat: &Value) -> Value {
    let count = |v: &Value| v.as_u64().unwrap_or(0);
    let prompt = count(&chat["prompt_tokens"]);
    let cached = count(&chat["prompt_tokens_details"]["cached_tokens"]).min(prompt);
    json!({
        "input_tokens": prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": count(&chat["completion_tokens"]),
    })
}

/// A `tool_use` block's `input`: the call's arguments parsed, `{}` when they are no JSON object (a call cut short
/// by `max_tokens`).
pub(super) fn tool_input(arguments: &str) -> Value {
    serde_json::from_str::<Value>(arguments).ok().filter(Value::is_object).unwrap_or_else(|| json!({}))
}

/// A thinking block; its `signature` is empty: no one vouches for ember's thinking, and ember checks none.
pub(super) fn thinking_block(text: &str) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": ""})
}

/// The content blocks of a whole chat response's message: its thinking, its text, its calls.
pub(super) fn content_of_message(head: &Head, message: &Value) -> Vec<Value> {
    let mut content = Vec::new();
    if let Some(thinking) = message["reasoning_content"].as_str() {
        content.push(thinking_block(if head.omit_thinking { "" } else { thinking }));
    }
    // No text, no text block: Anthropic's content is empty when the model wrote nothing.
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let function = &call["function"];
        content.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": function["name"],
            "input": tool_input(function["arguments"].as_str().unwrap_or_default()),
        }));
    }
    content
}

/// The message object: `content` and its ending (`stop_reason`, `stop_sequence`; null while streaming), `usage`,
/// and the chat body's gated `metrics` and `timings`.
pub(super) fn message_object(
    head: &Head,
    content: Vec<Value>,
    ending: (Value, Value),
    usage: Value,
) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("id".into(), json!(head.id));
    o.insert("type".into(), json!("message"));
    o.insert("role".into(), json!("assistant"));
    o.insert("model".into(), json!(head.model));
    o.insert("content".into(), Value::Array(content));
    o.insert("stop_reason".into(), ending.0);
    o.insert("stop_sequence".into(), ending.1);
    o.insert("usage".into(), usage);
    o
}

/// The gated `metrics` and `timings` of a chat body or usage chunk, into `o`.
pub(super) fn copy_gated(chat: &Value, o: &mut Map<String, Value>) {
    for gated in ["metrics", "timings"] {
        if let Some(v) = chat.get(gated).filter(|v| !v.is_null()) {
            o.insert(gated.into(), v.clone());
        }
    }
}

/// An Anthropic error body: what a failed request's answer, or its stream's last event, is.
pub(super) fn error_object(message: &str) -> Value {
    json!({"type": "error", "error": {"type": "api_error", "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> Head {
        Head { id: "msg_1".into(), model: "m".into(), max_tokens: Some(10), omit_thinking: false }
    }

    #[test]
    fn stop_reasons_follow_the_finish_reason() {
        let h = head();
        assert_eq!(stop_reason(&h, Some("stop"), None, 3), (json!("end_turn"), Value::Null));
        assert_eq!(stop_reason(&h, Some("stop"), Some("END"), 3), (json!("stop_sequence"), json!("END")));
        assert_eq!(stop_reason(&h, Some("tool_calls"), None, 3).0, json!("tool_use"));
        assert_eq!(stop_reason(&h, Some("length"), None, 10).0, json!("max_tokens"));
        assert_eq!(stop_reason(&h, Some("length"), None, 4).0, json!("model_context_window_exceeded"));
        assert_eq!(stop_reason(&h, Some("deadline"), None, 4).0, json!("deadline"));
    }

    #[test]
    fn a_chat_message_becomes_thinking_text_and_tool_uses_in_order() {
        let message = json!({"role": "assistant", "content": "ok", "reasoning_content": "hmm",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{\"a\""}}]});
        assert_eq!(
            content_of_message(&head(), &message),
            [
                json!({"type": "thinking", "thinking": "hmm", "signature": ""}),
                json!({"type": "text", "text": "ok"}),
                json!({"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}}),
                json!({"type": "tool_use", "id": "call_2", "name": "g", "input": {}}),
            ]
        );
        let omitted = Head { omit_thinking: true, ..head() };
        assert_eq!(content_of_message(&omitted, &message)[0]["thinking"], "");
        assert!(content_of_message(&head(), &json!({"content": ""})).is_empty());
    }

    #[test]
    fn usage_takes_anthropics_names_and_splits_off_the_cached_prompt() {
        let u = usage(&json!({"prompt_tokens": 30, "completion_tokens": 2, "total_tokens": 32,
            "prompt_tokens_details": {"cached_tokens": 16}}));
        assert_eq!(
            u,
            json!({"input_tokens": 14, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 16, "output_tokens": 2})
        );
    }
}
