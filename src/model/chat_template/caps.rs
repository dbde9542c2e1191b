//! What a template does with the parts of a conversation it may not take: a system message, the tools of its
//! `tools` variable, a `tool` message. A template does not declare it, so it is found as llama.cpp finds its
//! templates' capabilities: by rendering small probe conversations and looking for a needle text in the prompt.
//! Each probe is one render within the template's limits; the answers are computed once per template, on first
//! use (the engine asks at load).
//!
//! The protocol layer reads them to fit a conversation to the template (`protocol/template_roles.rs`) and to
//! decide who describes the tools (`protocol/prompt.rs`); `protocol/tool_format.rs` recognizes the call format.
//! `scripts/llamacpp/render_tool_conversations.py` applies the same probes with transformers' jinja2, and
//! `tests/template_tool_conversations.rs` checks that both find the same on llama.cpp's real templates.

use serde_json::json;

use super::{ChatMessage, ChatTemplate};

/// What a template renders of the conversation parts it may refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateCaps {
    /// A system message's text reaches the prompt. False only for a template that renders a conversation of one
    /// user message but refuses a system message before it (`raise_exception`, Gemma's) or drops its text
    /// (Phi-3's): one that renders nothing at all is left to say so with the request's own messages.
    pub system_role: bool,
    /// The template writes the tools of its `tools` variable into the prompt (their names appear): it has a tools
    /// branch of its own. A template that only tests `tools`, or sets it before reading it, is told apart from
    /// one that shows them.
    pub renders_tools: bool,
    /// A `tool` message's text reaches the prompt after an assistant turn without calls: how ember gives an
    /// earlier call and its result to a template without a tools branch. Templates that only alternate user and
    /// assistant turns refuse it (Gemma 2's) or drop it (Phi-3.5's).
    pub tool_role: bool,
}

/// Texts that cannot occur in a template by chance.
const SYSTEM_NEEDLE: &str = "ember_probe_system_text";
const TOOL_NEEDLE: &str = "ember_probe_tool_result";
const TOOL_NAME_NEEDLE: &str = "ember_probe_tool_name";

/// Renders the probes. A render that fails (the template's refusal, a limit) shows no needle.
pub(super) fn detect(template: &ChatTemplate) -> TemplateCaps {
    let shows = |messages: &[ChatMessage], tools: Option<&serde_json::Value>, needle: &str| {
        template.render_with_tools(messages, tools, true).is_ok_and(|text| text.contains(needle))
    };
    let user = || ChatMessage::new("user", "Hello.");
    let takes_a_user_turn = template.render(&[user()], true).is_ok();
    let system = [ChatMessage::new("system", SYSTEM_NEEDLE), user()];
    let tools = json!([{"type": "function", "function": {"name": TOOL_NAME_NEEDLE, "description": "A probe.",
        "parameters": {"type": "object", "properties": {"ember_probe": {"type": "integer", "description": "A number."}},
        "required": ["ember_probe"]}}}]);
    // Some templates show the tools only beside a system message of the caller's, others only without one.
    let renders_tools = shows(&[user()], Some(&tools), TOOL_NAME_NEEDLE)
        || shows(&[ChatMessage::new("system", "Be brief."), user()], Some(&tools), TOOL_NAME_NEEDLE);
    let result = ChatMessage { tool_call_id: Some("probe0001".into()), ..ChatMessage::new("tool", TOOL_NEEDLE) };
    TemplateCaps {
        system_role: !takes_a_user_turn || shows(&system, None, SYSTEM_NEEDLE),
        renders_tools,
        tool_role: shows(&[user(), ChatMessage::new("assistant", "Hi."), result], None, TOOL_NEEDLE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps_of(source: &str) -> TemplateCaps {
        ChatTemplate::new(Some(source), "", "").unwrap().caps()
    }

    #[test]
    fn chatml_takes_every_role_and_shows_no_tools() {
        let chatml = ChatTemplate::new(None, "", "").unwrap().caps();
        assert_eq!(chatml, TemplateCaps { system_role: true, renders_tools: false, tool_role: true });
    }

    #[test]
    fn a_refused_or_dropped_system_message_is_no_system_role() {
        let gemma = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}\
                     {% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
        assert!(!caps_of(gemma).system_role, "refused");
        let users_only = "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}";
        let caps = caps_of(users_only);
        assert!(!caps.system_role && !caps.tool_role, "dropped");
        // A template that renders nothing says so itself: its system role is not the matter.
        assert!(caps_of("{{ raise_exception('never') }}").system_role);
    }

    #[test]
    fn a_tools_branch_is_one_that_shows_the_tools() {
        let shows = "{% for t in tools or [] %}{{ t.function.name }}{% endfor %}{{ messages[-1].content }}";
        assert!(caps_of(shows).renders_tools);
        // Apriel 1.6's opening: `tools` set from itself, then shown; static analysis sees no `tools` read.
        let set_first = "{% set tools = tools or [] %}{% for t in tools %}{{ t | string }}{% endfor %}";
        assert!(caps_of(set_first).renders_tools);
        let tests_only = "{% if tools %}You have tools.{% endif %}{{ messages[-1].content }}";
        assert!(!caps_of(tests_only).renders_tools, "the model never sees their names");
        let with_system_only = "{% if messages[0].role == 'system' %}{{ tools | tojson }}{% endif %}";
        assert!(caps_of(with_system_only).renders_tools);
    }
}
