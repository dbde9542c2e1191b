//! The Responses `response` object, from what a chat request produced: its output items (reasoning, the
//! message, function calls), status, usage, and, behind chat's double gate, `metrics` and `timings`.

use serde_json::{json, Map, Value};

pub(super) use super::super::translate::new_id;

/// One output item as it accumulates.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Item {
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
    Call { id: String, call_id: String, name: String, arguments: String },
}

impl Item {
    /// The item's JSON; `done` says whether it is complete (`status`, and the text of its parts).
    pub fn json(&self, done: bool) -> Value {
        let status = if done { "completed" } else { "in_progress" };
        match self {
            Item::Reasoning { id, text } => {
                let content = if done { json!([{"type": "reasoning_text", "text": text}]) } else { json!([]) };
                json!({"type": "reasoning", "id": id, "summary": [], "content": content, "status": status})
            }
            Item::Message { id, text } => {
                let content = if done { json!([text_part(text)]) } else { json!([]) };
                json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
            }
            Item::Call { id, call_id, name, arguments } => json!({
                "type": "function_call", "id": id, "call_id": call_id, "name": name,
                "arguments": if done { arguments.as_str() } else { "" }, "status": status,
            }),
        }
    }

    /// The item as a chat message's part, for the stored conversation.
    pub fn id(&self) -> &str {
        match self {
            Item::Reasoning { id, .. } | Item::Message { id, .. } | Item::Call { id, .. } => id,
        }
    }
}

/// An `output_text` content part.
pub(super) fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// How a request ended, read from its chat `finish_reason` and `error`.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Ending {
    Completed,
    /// `incomplete_details.reason`: `max_output_tokens` (chat's `length`) or ember's `deadline`.
    Incomplete(&'static str),
    Cancelled,
    Failed(String),
}

impl Ending {
    pub fn of(finish_reason: Option<&str>, error: Option<&Value>) -> Ending {
        if let Some(error) = error {
            let message = error["message"].as_str().unwrap_or("the engine failed the request");
            return Ending::Failed(message.to_owned());
        }
        match finish_reason {
            Some("length") => Ending::Incomplete("max_output_tokens"),
            Some("deadline") => Ending::Incomplete("deadline"),
            Some("cancelled") => Ending::Cancelled,
            Some("error") => Ending::Failed("the engine failed the request".into()),
            _ => Ending::Completed,
        }
    }

    pub fn status(&self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::Incomplete(_) => "incomplete",
            Ending::Cancelled => "cancelled",
            Ending::Failed(_) => "failed",
        }
    }
}

/// What every version of one request's response object repeats.
#[derive(Clone, Debug)]
pub(super) struct Head {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    /// The request's values it repeats (`input.rs`'s `echo_fields`).
    pub echo: Map<String, Value>,
}

/// The response object. `ending` `None`: still in progress (`response.created`); `usage` is chat's, renamed.
pub(super) fn response_object(head: &Head, items: &[Item], ending: Option<&Ending>, chat_tail: &Value) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), json!(head.id));
    o.insert("object".into(), json!("response"));
    o.insert("created_at".into(), json!(head.created_at));
    o.insert("status".into(), json!(ending.map_or("in_progress", Ending::status)));
    o.insert(
        "error".into(),
        match ending {
            Some(Ending::Failed(message)) => json!({"code": "server_error", "message": message}),
            _ => Value::Null,
        },
    );
    o.insert(
        "incomplete_details".into(),
        match ending {
            Some(Ending::Incomplete(reason)) => json!({"reason": reason}),
            _ => Value::Null,
        },
    );
    o.insert("model".into(), json!(head.model));
    o.insert("output".into(), Value::Array(items.iter().map(|i| i.json(ending.is_some())).collect()));
    for (k, v) in &head.echo {
        o.insert(k.clone(), v.clone());
    }
    o.insert("usage".into(), usage(&chat_tail["usage"]));
    for gated in ["metrics", "timings"] {
        if let Some(v) = chat_tail.get(gated) {
            o.insert(gated.into(), v.clone());
        }
    }
    Value::Object(o)
}

/// Chat's `usage` in the Responses names; `null` when there is none (yet).
fn usage(chat: &Value) -> Value {
    if !chat.is_object() {
        return Value::Null;
    }
    let count = |v: &Value| v.as_u64().unwrap_or(0);
    json!({
        "input_tokens": count(&chat["prompt_tokens"]),
        "input_tokens_details": {"cached_tokens": count(&chat["prompt_tokens_details"]["cached_tokens"])},
        "output_tokens": count(&chat["completion_tokens"]),
        "output_tokens_details": {"reasoning_tokens": count(&chat["completion_tokens_details"]["reasoning_tokens"])},
        "total_tokens": count(&chat["total_tokens"]),
    })
}

/// The items of a whole chat response's message: its reasoning, its text, its calls.
pub(super) fn items_of_message(message: &Value, salt: u64) -> Vec<Item> {
    let mut items = Vec::new();
    if let Some(text) = message["reasoning_content"].as_str() {
        items.push(Item::Reasoning { id: new_id("rs_", salt), text: text.to_owned() });
    }
    let calls = message["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default();
    let text = message["content"].as_str().unwrap_or_default();
    if !text.is_empty() || calls.is_empty() {
        items.push(Item::Message { id: new_id("msg_", salt), text: text.to_owned() });
    }
    for call in calls {
        items.push(Item::Call {
            id: new_id("fc_", salt),
            call_id: call["id"].as_str().unwrap_or_default().to_owned(),
            name: call["function"]["name"].as_str().unwrap_or_default().to_owned(),
            arguments: call["function"]["arguments"].as_str().unwrap_or_default().to_owned(),
        });
    }
    items
}

/// The assistant's turn as a chat message, as a continuation sends it back.
pub(super) fn assistant_message(items: &[Item]) -> Value {
    let text: String = items
        .iter()
        .filter_map(|i| if let Item::Message { text, .. } = i { Some(text.as_str()) } else { None })
        .collect();
    let calls: Vec<Value> = items
        .iter()
        .filter_map(|i| match i {
            Item::Call { call_id, name, arguments, .. } => {
                Some(json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}))
            }
            _ => None,
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_message_becomes_reasoning_text_and_calls_in_order() {
        let message = json!({"role": "assistant", "content": "ok", "reasoning_content": "hmm",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        let items = items_of_message(&message, 1);
        let kinds: Vec<&str> = items
            .iter()
            .map(|i| match i {
                Item::Reasoning { .. } => "reasoning",
                Item::Message { .. } => "message",
                Item::Call { .. } => "call",
            })
            .collect();
        assert_eq!(kinds, ["reasoning", "message", "call"]);
        assert_eq!(assistant_message(&items)["tool_calls"][0]["id"], "call_1");
        // A call with no text before it is no message item.
        let calls_only = json!({"content": null, "tool_calls": message["tool_calls"]});
        assert_eq!(items_of_message(&calls_only, 2).len(), 1);
    }

    #[test]
    fn endings_follow_the_finish_reason() {
        assert_eq!(Ending::of(Some("stop"), None), Ending::Completed);
        assert_eq!(Ending::of(Some("tool_calls"), None), Ending::Completed);
        assert_eq!(Ending::of(Some("length"), None).status(), "incomplete");
        assert_eq!(Ending::of(None, Some(&json!({"message": "boom"}))), Ending::Failed("boom".into()));
    }

    #[test]
    fn usage_takes_responses_names() {
        let u = usage(
            &json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1}}),
        );
        assert_eq!(
            u,
            json!({"input_tokens": 3, "input_tokens_details": {"cached_tokens": 1}, "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5})
        );
    }
}
