//! A conversation fitted to the roles its chat template takes, as llama.cpp fits it, so that a request the model
//! could answer is not refused for its shape.
//!
//! - A template without a system role (Gemma's, which raises "System role not supported"; Phi-3's, which drops
//!   the text): each system message's text goes into the user turn after it, `system + "\n\n" + user` (how Gemma's
//!   own instructions place it, and llama.cpp's built-in Gemma format; llama.cpp's Jinja path joins the first
//!   system message with "\n"). ember's description of the tools is in the system message by then, so it goes
//!   too. System text with no user turn after it becomes a user turn of its own.
//! - A template that neither shows tools nor takes a `tool` message (Gemma 2's alternates user and assistant
//!   turns): a call's result becomes user text, `{"tool_response": {"name": …, "content": …}}` (the form
//!   llama.cpp's minja gave such templates), joined with the results and the user turn right after it, so that
//!   the turns still alternate. Earlier calls are text already (`tools.rs`, `calls_as_text`).
//!
//! Templates that take these roles get the conversation as it came. What a template takes is found by rendering
//! probes (`model/chat_template/caps.rs`).

use serde_json::Value;

use crate::model::chat_template::{ChatMessage, TemplateCaps};

/// `messages` as the template of `caps` takes them; `None` when they need no change. `sent` are the request's
/// messages, whose assistant turns still carry their `tool_calls` (by now written as text in `messages`, without
/// ids): a result's function is looked up there.
pub(crate) fn fit_to_template(
    messages: &[ChatMessage],
    sent: &[ChatMessage],
    caps: TemplateCaps,
) -> Option<Vec<ChatMessage>> {
    let results_as_text = !caps.renders_tools && !caps.tool_role && messages.iter().any(|m| m.role == "tool");
    let has_system = messages.iter().any(|m| m.role == "system");
    let fold_system = !caps.system_role && has_system;
    if !results_as_text && !fold_system {
        return None;
    }
    let mut fitted = messages.to_vec();
    if results_as_text {
        fitted = tool_results_as_user_text(&fitted, sent);
    }
    if fold_system {
        fitted = system_text_in_user_turns(&fitted);
    }
    Some(fitted)
}

/// Between two parts of one turn's text.
const JOIN: &str = "\n\n";

fn joined(first: &str, then: &str) -> String {
    match (first.is_empty(), then.is_empty()) {
        (true, _) => then.to_owned(),
        (false, true) => first.to_owned(),
        (false, false) => format!("{first}{JOIN}{then}"),
    }
}

/// Each system message's text at the start of the next user turn, or as a user turn of its own before the next
/// other turn (or at the end) when no user turn comes first.
fn system_text_in_user_turns(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut pending = String::new();
    for m in messages {
        match m.role.as_str() {
            "system" => pending = joined(&pending, &m.content),
            "user" => out.push(ChatMessage { content: joined(&std::mem::take(&mut pending), &m.content), ..m.clone() }),
            _ => {
                if !pending.is_empty() {
                    out.push(ChatMessage::new("user", std::mem::take(&mut pending)));
                }
                out.push(m.clone());
            }
        }
    }
    if !pending.is_empty() {
        out.push(ChatMessage::new("user", pending));
    }
    out
}

/// Each `tool` message as user text naming the function it answers (its own `name`, or the call of `sent` its
/// `tool_call_id` names), joined with the results and the user message right after it.
fn tool_results_as_user_text(messages: &[ChatMessage], sent: &[ChatMessage]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    // Whether the last turn of `out` is results written as user text, which what follows may join.
    let mut after_results = false;
    for m in messages {
        let text = match m.role.as_str() {
            "tool" => result_text(m, sent),
            "user" if after_results => m.content.clone(),
            _ => {
                after_results = false;
                out.push(m.clone());
                continue;
            }
        };
        match out.last_mut() {
            Some(last) if after_results => last.content = joined(&last.content, &text),
            _ => out.push(ChatMessage::new("user", text)),
        }
        after_results = m.role == "tool";
    }
    out
}

/// `{"tool_response": {"name": NAME, "content": CONTENT}}`, written as ember writes a call: CONTENT is the
/// result's text as it came when that is JSON, else its JSON string. No name when none is found.
fn result_text(result: &ChatMessage, sent: &[ChatMessage]) -> String {
    let content = match serde_json::from_str::<Value>(&result.content) {
        Ok(_) => result.content.trim().to_owned(),
        Err(_) => Value::String(result.content.clone()).to_string(),
    };
    match called_name(result, sent) {
        Some(name) => format!("{{\"tool_response\": {{\"name\": {}, \"content\": {content}}}}}", Value::String(name)),
        None => format!("{{\"tool_response\": {{\"content\": {content}}}}}"),
    }
}

/// The function a `tool` message answers: its own `name`, else that of the call of `sent` its `tool_call_id`
/// names.
fn called_name(result: &ChatMessage, sent: &[ChatMessage]) -> Option<String> {
    if let Some(name) = result.extra.get("name").and_then(Value::as_str) {
        return Some(name.to_owned());
    }
    let id = result.tool_call_id.as_deref()?;
    sent.iter()
        .filter_map(|m| m.tool_calls.as_ref()?.as_array())
        .flatten()
        .find(|call| call["id"].as_str() == Some(id))
        .and_then(|call| call["function"]["name"].as_str())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TAKES_ALL: TemplateCaps = TemplateCaps { system_role: true, renders_tools: false, tool_role: true };
    /// Gemma 2's: user and assistant turns only.
    const ALTERNATES: TemplateCaps = TemplateCaps { system_role: false, renders_tools: false, tool_role: false };

    fn m(role: &str, content: &str) -> ChatMessage {
        ChatMessage::new(role, content)
    }

    fn turns(messages: &[ChatMessage]) -> Vec<(&str, &str)> {
        messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect()
    }

    #[test]
    fn a_template_that_takes_the_roles_gets_the_conversation_as_it_came() {
        let messages = [m("system", "Be brief."), m("user", "hi"), m("tool", "1")];
        assert_eq!(fit_to_template(&messages, &messages, TAKES_ALL), None);
        let no_system = [m("user", "hi"), m("assistant", "hello")];
        assert_eq!(fit_to_template(&no_system, &no_system, ALTERNATES), None);
    }

    #[test]
    fn system_text_starts_the_next_user_turn() {
        let messages = [m("system", "Be brief."), m("system", "Use French."), m("user", "hi"), m("assistant", "salut")];
        let fitted = fit_to_template(&messages, &messages, ALTERNATES).unwrap();
        assert_eq!(turns(&fitted), [("user", "Be brief.\n\nUse French.\n\nhi"), ("assistant", "salut")]);
        // No user turn after it: a user turn of its own, before the next other turn or at the end.
        let alone = [m("system", "Be brief.")];
        assert_eq!(turns(&fit_to_template(&alone, &alone, ALTERNATES).unwrap()), [("user", "Be brief.")]);
        let before_assistant =
            [m("system", "Be brief."), m("assistant", "hello"), m("user", "hi"), m("system", "Bye.")];
        let fitted = fit_to_template(&before_assistant, &before_assistant, ALTERNATES).unwrap();
        assert_eq!(turns(&fitted), [("user", "Be brief."), ("assistant", "hello"), ("user", "hi"), ("user", "Bye.")]);
        // An empty system message adds nothing; the user turn keeps its other keys.
        let named = ChatMessage { extra: json!({"name": "ana"}).as_object().unwrap().clone(), ..m("user", "hi") };
        let fitted = fit_to_template(&[m("system", ""), named.clone()], &[], ALTERNATES).unwrap();
        assert_eq!(fitted, [named]);
    }

    #[test]
    fn tool_results_become_user_text_joined_with_the_next_user_turn() {
        let calls = json!([
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call00002", "type": "function", "function": {"name": "now", "arguments": {}}},
        ]);
        let sent = [
            m("system", "Be brief."),
            m("user", "Weather and time?"),
            ChatMessage { tool_calls: Some(calls), ..m("assistant", "") },
            ChatMessage { tool_call_id: Some("call00001".into()), ..m("tool", "{\"sky\": \"clear\"}") },
            ChatMessage { tool_call_id: Some("call00002".into()), ..m("tool", "noon") },
            m("user", "Thanks."),
        ];
        // What `calls_as_text` gives the template: the calls are the assistant turn's text.
        let mut as_text = sent.clone();
        as_text[2] = m("assistant", "{\"name\": \"get_weather\", …}");
        let fitted = fit_to_template(&as_text, &sent, ALTERNATES).unwrap();
        let results = "{\"tool_response\": {\"name\": \"get_weather\", \"content\": {\"sky\": \"clear\"}}}\n\n\
                       {\"tool_response\": {\"name\": \"now\", \"content\": \"noon\"}}\n\nThanks.";
        assert_eq!(
            turns(&fitted),
            [
                ("user", "Be brief.\n\nWeather and time?"),
                ("assistant", "{\"name\": \"get_weather\", …}"),
                ("user", results)
            ]
        );
        // A result whose call is unknown has no name; one that names itself keeps it.
        let unknown = [m("assistant", "x"), m("tool", "1")];
        let fitted = fit_to_template(&unknown, &unknown, ALTERNATES).unwrap();
        assert_eq!(fitted[1].content, "{\"tool_response\": {\"content\": 1}}");
        let named = ChatMessage { extra: json!({"name": "f"}).as_object().unwrap().clone(), ..m("tool", "1") };
        let fitted = fit_to_template(std::slice::from_ref(&named), std::slice::from_ref(&named), ALTERNATES).unwrap();
        assert_eq!(fitted[0].content, "{\"tool_response\": {\"name\": \"f\", \"content\": 1}}");
    }

    #[test]
    fn a_template_with_a_tools_branch_keeps_its_tool_messages() {
        let caps = TemplateCaps { system_role: false, renders_tools: true, tool_role: false };
        let messages = [m("system", "Be brief."), m("user", "hi"), m("tool", "1")];
        let fitted = fit_to_template(&messages, &messages, caps).unwrap();
        assert_eq!(turns(&fitted), [("user", "Be brief.\n\nhi"), ("tool", "1")]);
    }
}
