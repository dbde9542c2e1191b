//! Which format a model writes a tool call in when it decides for itself (`tool_choice: "auto"`).
//!
//! The format is the one the chat template teaches: a template that formats tools shows the model how to call
//! them, and ember can only read a call back in a format it knows. A GGUF has no metadata key that names the
//! format, so the template's own text is the evidence: Hermes-style templates (Hermes 2 Pro, Qwen2.5, and the
//! many fine-tunes that copied them) write the `<tool_call>` tag around each call. Detection lives here alone so
//! that adding a format is one arm.

use crate::model::chat_template::ChatTemplate;

/// How a call is written in an `"auto"` output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ToolFormat {
    /// The template writes `<tool_call>`: text, then `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`.
    Hermes,
    /// The template has no tool format (SmolLM2's, Gemma 3's): ember describes the tools in the system message,
    /// and a call is a reply that is exactly one JSON object `{"name": …, "arguments": …}`.
    Ember,
    /// The template formats tools some other way (Llama 3.1's `"parameters"` objects, Mistral's
    /// `[TOOL_CALLS]`, ...), which ember cannot read back: `"auto"` is refused.
    Unknown,
}

/// The format `template` teaches the model.
pub(crate) fn tool_format(template: &ChatTemplate) -> ToolFormat {
    match (template.supports_tools(), template.source().contains("<tool_call>")) {
        (false, _) => ToolFormat::Ember,
        (true, true) => ToolFormat::Hermes,
        (true, false) => ToolFormat::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_of(source: Option<&str>) -> ToolFormat {
        tool_format(&ChatTemplate::new(source, "", "").unwrap())
    }

    #[test]
    fn the_template_text_decides_the_format() {
        assert_eq!(format_of(None), ToolFormat::Ember, "ChatML has no tool format");
        let hermes = "{% if tools %}<tools>{{ tools | tojson }}</tools> Call as <tool_call>{\"name\": ...}\
                      </tool_call>{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";
        assert_eq!(format_of(Some(hermes)), ToolFormat::Hermes);
        let llama = "{% if tools %}Respond with {\"name\": function name, \"parameters\": ...}{% endif %}";
        assert_eq!(format_of(Some(llama)), ToolFormat::Unknown);
        // A mention of the tag without a `tools` variable shows the model no tool: ember describes them itself.
        assert_eq!(format_of(Some("<tool_call>{% for m in messages %}{{ m.content }}{% endfor %}")), ToolFormat::Ember);
    }
}
