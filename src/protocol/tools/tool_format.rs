//! Which format a model writes a tool call in when it decides for itself (`tool_choice: "auto"`).
//!
//! The format is the one the chat template teaches: a template that formats tools shows the model how to call
//! them, and ember can only read a call back in a format it knows. A GGUF has no metadata key that names the
//! format, so ember asks the template: it renders a probe conversation whose assistant turn made one call, and
//! recognizes how the template wrote it (`call_syntax.rs` has each format's markers). A template that formats
//! tools but not calls (Granite 3.x's) is recognized by what it tells the model to write, and Phi-4-mini's, which
//! reads the tools from the system message instead of a `tools` variable, by that. Detection lives here alone so
//! that adding a format is one arm; whether the template shows tools at all (and takes a system message) is the
//! template's capability, probed once per template (`model/chat_template/caps.rs`).

use serde_json::json;

use super::call_syntax::{
    CallSyntax, APRIEL, DEEPSEEK_R1, DEEPSEEK_V31, GRANITE, HARMONY, HERMES, LLAMA3_JSON, MISTRAL_LIST, MISTRAL_NAMED,
    PHI4_MINI, QWEN3_XML,
};
use super::CallIdStyle;
use crate::model::chat_template::{ChatMessage, ChatTemplate};

/// How a call is written in an `"auto"` output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ToolFormat {
    /// The template shows no tools (SmolLM2's, Gemma 3's): ember describes the tools in the system message,
    /// and a call is a reply that is exactly one JSON object `{"name": …, "arguments": …}`.
    Ember,
    /// One of the formats of `call_syntax.rs`, named for the documentation and the logs.
    Known(&'static str, CallSyntax),
    /// The template formats tools some other way (GLM's `<arg_key>`, Kimi's, ...), which ember cannot read
    /// back: `"auto"` is refused.
    Unknown,
}

/// How the probe call is written by each known format, and that format. The probe's names cannot occur in a
/// template by chance.
const PROBE_TOOL: &str = "ember_probe_tool";
const RENDERED_CALLS: [(&str, &str, CallSyntax); 11] = [
    (
        "Hermes",
        "<tool_call>\n{\"name\": \"ember_probe_tool\", \"arguments\": {\"ember_probe\": 1}}\n</tool_call>",
        HERMES,
    ),
    ("Llama 3.x JSON", "{\"name\": \"ember_probe_tool\", \"parameters\": {\"ember_probe\": 1}}", LLAMA3_JSON),
    ("Mistral", "[TOOL_CALLS][{\"name\": \"ember_probe_tool\", \"arguments\": {\"ember_probe\": 1}", MISTRAL_LIST),
    ("Mistral v11", "[TOOL_CALLS]ember_probe_tool[", MISTRAL_NAMED),
    ("DeepSeek R1", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>ember_probe_tool\n```json\n", DEEPSEEK_R1),
    ("DeepSeek V3.1", "<｜tool▁call▁begin｜>ember_probe_tool<｜tool▁sep｜>{", DEEPSEEK_V31),
    ("Granite 3", "<|tool_call|>[{\"name\": \"ember_probe_tool\"", GRANITE),
    // Apriel 1.5's and 1.6's templates write the arguments with `tojson`: an object as it is, OpenAI's JSON text as a
    // string; the model is told to write the object (their system prompt), which is what the grammar allows.
    ("Apriel", "<tool_calls>[{\"name\": \"ember_probe_tool\", \"arguments\": ", APRIEL),
    (
        "Qwen3-Coder XML",
        "<tool_call>\n<function=ember_probe_tool>\n<parameter=ember_probe>\n1\n</parameter>\n</function>",
        QWEN3_XML,
    ),
    // gpt-oss' template puts the recipient in the message header; the model writes it after the channel (as
    // OpenAI's harmony renderer does): either is the harmony format.
    ("gpt-oss harmony", "to=functions.ember_probe_tool<|channel|>commentary", HARMONY),
    ("gpt-oss harmony", "<|channel|>commentary to=functions.ember_probe_tool", HARMONY),
];

/// The format `template` teaches the model.
pub(crate) fn tool_format(template: &ChatTemplate) -> ToolFormat {
    if reads_tools_from_system_message(template) {
        return ToolFormat::Known("Phi-4-mini", PHI4_MINI);
    }
    if !template.supports_tools() {
        return ToolFormat::Ember;
    }
    let rendered = probe_render(template).unwrap_or_default();
    if let Some((name, _, syntax)) = RENDERED_CALLS.iter().find(|(_, written, _)| rendered.contains(written)) {
        return ToolFormat::Known(name, *syntax);
    }
    // Granite 3.x's templates list the tools and say "respond only with <|tool_call|> followed by a JSON list of
    // tools used", but render an earlier call as nothing.
    if template.source().contains("<|tool_call|> followed by a JSON list") {
        return ToolFormat::Known("Granite 3", GRANITE);
    }
    ToolFormat::Unknown
}

/// Whether the template shows the tools from the system message's own `tools` (JSON text between `<|tool|>` and
/// `<|/tool|>`: Phi-4-mini's, whose callers put them there) rather than from a `tools` variable.
pub(crate) fn reads_tools_from_system_message(template: &ChatTemplate) -> bool {
    let source = template.source();
    source.contains("<|tool|>") && (source.contains("message['tools']") || source.contains("message.tools"))
}

/// The ids of calls `template` accepts back: OpenAI's, unless it refuses them where it renders a 9-character one
/// (Mistral's templates).
pub(crate) fn call_id_style(template: &ChatTemplate) -> CallIdStyle {
    let refuses_openai_ids = template.supports_tools()
        && probe_render_with_id(template, &CallIdStyle::OpenAi.new_id(0)).is_none()
        && probe_render(template).is_some();
    match refuses_openai_ids {
        true => CallIdStyle::NineAlphanumeric,
        false => CallIdStyle::OpenAi,
    }
}

/// The template's text for a conversation whose assistant turn called the probe tool (an id of 9 characters,
/// which Mistral's templates require), its arguments given as ember gives them (an object), else as the JSON
/// string of OpenAI's API, for a template that only concatenates them; `None` when the template refuses both.
fn probe_render(template: &ChatTemplate) -> Option<String> {
    probe_render_with_id(template, "probe0001")
}

fn probe_render_with_id(template: &ChatTemplate, id: &str) -> Option<String> {
    let tools = json!([{"type": "function", "function": {"name": PROBE_TOOL, "description": "A probe.",
        "parameters": {"type": "object", "properties": {"ember_probe": {"type": "integer"}}}}}]);
    let render = |arguments: serde_json::Value| {
        let calls = json!([{"id": id, "type": "function",
            "function": {"name": PROBE_TOOL, "arguments": arguments}}]);
        let messages = [
            ChatMessage::new("user", "ember probe"),
            ChatMessage { tool_calls: Some(calls), ..ChatMessage::new("assistant", "") },
            ChatMessage { tool_call_id: Some(id.into()), ..ChatMessage::new("tool", "1") },
        ];
        template.render_with_tools(&messages, Some(&tools), false).ok()
    };
    render(json!({"ember_probe": 1})).or_else(|| render(json!("{\"ember_probe\": 1}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_of(source: Option<&str>) -> ToolFormat {
        tool_format(&ChatTemplate::new(source, "", "").unwrap())
    }

    #[test]
    fn a_template_without_tools_gets_embers_format() {
        assert_eq!(format_of(None), ToolFormat::Ember, "ChatML has no tool format");
        // A mention of a tag without a `tools` variable shows the model no tool.
        assert_eq!(format_of(Some("<tool_call>{% for m in messages %}{{ m.content }}{% endfor %}")), ToolFormat::Ember);
    }

    #[test]
    fn the_rendered_call_decides_the_format() {
        let hermes = "{% if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}{% for m in messages %}\
                      {% for c in m.tool_calls or [] %}<tool_call>\n{{ {'name': c.function.name, \
                      'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}{% endfor %}";
        assert_eq!(format_of(Some(hermes)), ToolFormat::Known("Hermes", HERMES));
        let mistral = "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}{% endif %}{% for m in messages %}{% if m.tool_calls %}\
                       [TOOL_CALLS]{% for c in m.tool_calls %}{{ c.function.name }}[ARGS]\
                       {{ c.function.arguments | tojson }}{% endfor %}{% endif %}{% endfor %}";
        assert_eq!(format_of(Some(mistral)), ToolFormat::Known("Mistral v11", MISTRAL_NAMED));
        let nine = ChatTemplate::new(
            Some(&format!(
                "{{% for m in messages %}}{{% for c in m.tool_calls or [] %}}\
            {{% if c.id | length != 9 %}}{{{{ raise_exception('9') }}}}{{% endif %}}{{% endfor %}}{{% endfor %}}\
            {mistral}"
            )),
            "",
            "",
        )
        .unwrap();
        assert_eq!(call_id_style(&nine), CallIdStyle::NineAlphanumeric);
        assert_eq!(call_id_style(&ChatTemplate::new(Some(mistral), "", "").unwrap()), CallIdStyle::OpenAi);
        // Tools, and calls written in no format ember knows.
        let other = "{{ tools | tojson }}{% for m in messages %}{{ m.tool_calls | tojson }}{% endfor %}";
        assert_eq!(format_of(Some(other)), ToolFormat::Unknown);
        // Apriel's (its 1.5 and 1.6 templates' calls): the arguments through `tojson`, an object or a string.
        let apriel = "{% if tools %}<available_tools>{{ tools }}</available_tools>{% endif %}{% for m in messages %}\
                      {% if m.tool_calls %}\n<tool_calls>[{% for c in m.tool_calls %}{{ '{\"name\": \"' + \
                      c.function.name + '\", \"arguments\": ' + c.function.arguments | tojson }}}\
                      {% if not loop.last %}, {% endif %}{% endfor %}]</tool_calls>{% endif %}{% endfor %}";
        assert_eq!(format_of(Some(apriel)), ToolFormat::Known("Apriel", APRIEL));
        // Phi-4-mini's (its model's tokenizer_config.json): tools in the system message, calls as `functools[...]`.
        let phi4 = include_str!("../../../tests/fixtures/phi4_mini_template.jinja");
        assert_eq!(format_of(Some(phi4)), ToolFormat::Known("Phi-4-mini", PHI4_MINI));
        // gpt-oss' (llama.cpp's copy): the recipient in the header of an earlier call, the model's harmony format.
        let gpt_oss = include_str!("../../../tests/fixtures/gpt_oss_template.jinja");
        assert_eq!(format_of(Some(gpt_oss)), ToolFormat::Known("gpt-oss harmony", HARMONY));
        assert_eq!(call_id_style(&ChatTemplate::new(Some(gpt_oss), "", "").unwrap()), CallIdStyle::OpenAi);
        // A template that shows the tools but refuses the probe conversation is not a format ember can read either.
        let refuses_calls =
            "{{ tools | tojson }}{% for m in messages %}{% if m.tool_calls %}{{ raise_exception('no') }}{% endif %}{% endfor %}";
        assert_eq!(format_of(Some(refuses_calls)), ToolFormat::Unknown);
        // One that only tests `tools` never shows the model a tool: ember describes them.
        assert_eq!(format_of(Some("{% if tools %}Tools!{% endif %}{{ messages[0].content }}")), ToolFormat::Ember);
    }
}
