//! `tool_choice: "auto"`: the model writes a message or calls, in its template's format (`tool_format.rs`,
//! `call_syntax.rs`), and ember reads the calls back.
//!
//! The output is constrained by a "lazy" grammar: free text, or (from the point where the format's calls begin)
//! valid calls of the tools' schemas, each a tool's name and arguments of its `parameters` schema. So a call in
//! `"auto"` mode is as certain to be valid as a forced one, while a message is left alone:
//! - ember's format and Llama 3.x's: text whose first non-whitespace character is not `{`, or one call object
//!   (after optional whitespace). A reply that starts with `{` is a call.
//! - the others: text without the format's opening marker (`<tool_call>`, `[TOOL_CALLS]`...), or text, then the
//!   marker and calls, and nothing after them: the grammar ends there, and so does the choice. Several calls
//!   where the format separates them, unless the request sets `parallel_tool_calls: false`.
//!
//! A marker that is a control token of the model's vocabulary (Mistral's `[TOOL_CALLS]`, DeepSeek's
//! `<｜tool▁sep｜>`) is that token in the grammar, and the request's text then keeps control tokens' text (as
//! vLLM turns `skip_special_tokens` off for its Mistral parser) so that the calls can be read back.
//!
//! gpt-oss' harmony format is the exception: its grammar (`harmony.rs`) holds the whole output to its channels,
//! since its control tokens are part of every message and a constrained output writes only those its grammar
//! names; a forced call (`required`) uses it too.
//!
//! Reading back is exact, not a search (`CallSyntax::read`). Anything else, such as a call cut short by
//! `max_tokens`, is a message.

use serde_json::Value;

use super::super::harmony;
use super::call_syntax::{Arguments, CallSyntax, ReadCalls, HARMONY, MARKER_TOKENS};
use super::xml_arguments;
use super::{CallIdStyle, Tool};
use crate::engine::guided::{json_layout, GuidedRequest, GuidedSpec};
use crate::model::tokenizer::Tokenizer;
use crate::model::TokenId;

/// How `"auto"` outputs of one request are constrained and read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AutoCalls {
    pub syntax: CallSyntax,
    pub names: Vec<String>,
    /// Per tool, its parameters written as raw text in Qwen3-Coder's blocks (`xml_arguments.rs`).
    pub strings: Vec<Vec<String>>,
    /// Several calls per choice (where the format has a separator).
    pub parallel: bool,
    /// The markers that are control tokens of the model's vocabulary, and their ids.
    pub control_markers: Vec<(&'static str, TokenId)>,
    /// The ids of calls after a choice's first (whose id the request draws).
    pub id_style: CallIdStyle,
    /// The output must be a call (a forced `tool_choice` in harmony's format, whose grammar holds the whole
    /// output: `harmony.rs`); `names` are then the tools it may call.
    pub required: bool,
}

impl AutoCalls {
    pub fn new(syntax: CallSyntax, tools: &[Tool], parallel: bool, tokenizer: &Tokenizer) -> Self {
        let control_markers = MARKER_TOKENS
            .iter()
            .filter_map(|&m| tokenizer.token_to_id(m).filter(|&id| tokenizer.is_control(id)).map(|id| (m, id)))
            .collect();
        let names = tools.iter().map(|t| t.name.clone()).collect();
        let strings = tools.iter().map(|t| xml_arguments::string_parameters(&t.parameters)).collect();
        AutoCalls { syntax, names, strings, parallel, control_markers, id_style: CallIdStyle::OpenAi, required: false }
    }

    /// Whether `marker` is a control token of the model's vocabulary.
    pub fn is_control(&self, marker: &str) -> bool {
        self.control_markers.iter().any(|(m, _)| *m == marker)
    }

    /// Whether the output's text must keep control tokens' text for its calls to be read back.
    pub fn needs_special_text(&self) -> bool {
        let s = &self.syntax;
        let markers = [s.open, s.pre, s.mid, s.post, s.sep.unwrap_or(""), s.close];
        self.control_markers.iter().any(|(m, _)| markers.iter().any(|text| text.contains(m)))
    }

    /// The lazy grammar (see the module comment) over each tool's `parameters` schema.
    pub fn constraint(&self, tools: &[Tool]) -> GuidedRequest {
        if self.syntax == HARMONY {
            return harmony::constraint(self, tools);
        }
        let s = &self.syntax;
        let mut rules = String::new();
        let mut alternatives = Vec::new();
        for (i, tool) in tools.iter().enumerate() {
            let mut schema = tool.parameters.clone();
            match s.arguments {
                Arguments::Json => {
                    if let Value::Object(o) = &mut schema {
                        o.insert("x-guidance".into(), json_layout());
                    }
                    rules.push_str(&format!("args{i}: %json {schema}\n"));
                }
                Arguments::XmlBlocks => {
                    rules.push_str(&xml_arguments::grammar(&format!("args{i}"), &schema, &json_layout(), |text| {
                        self.literal(text)
                    }))
                }
            }
            alternatives.push(format!("{} args{i}", self.literal(&format!("{}{}{}", s.pre, tool.name, s.mid))));
        }
        let post = self.literal(s.post);
        let call = format!("call: ({}) {post}\n", alternatives.join(" | "));
        let more = match s.sep.filter(|_| self.parallel) {
            Some(sep) => format!("({} call)*", self.literal(sep)),
            None => String::new(),
        };
        let calls = format!("calls: call {more} {}\n", self.literal(s.close));
        let start = match (s.text_first, self.control_markers.iter().find(|(m, _)| s.open.starts_with(m))) {
            // `TEXT` is all text whose first non-whitespace character is not `{` (an empty reply included); a
            // call may follow whitespace (`LEAD`).
            (false, _) => format!(
                "start: TEXT | LEAD? {open} calls\nTEXT: /\\s*/ | /\\s*[^\\s{{][\\s\\S]*/\nLEAD: /\\s+/\n",
                open = self.literal(s.open)
            ),
            // The opening marker is a control token, which text cannot contain.
            (true, Some(_)) => format!("start: TEXT? | TEXT? {} calls\nTEXT: /[\\s\\S]+/\n", self.literal(s.open)),
            // `TEXT` never contains the marker; `pre` is text up to the marker's first occurrence, matched lazily:
            // it ends at the first marker (llguidance's lexer, greedy otherwise, could not split text from it).
            (true, None) => format!(
                "start: TEXT | pre calls\npre[lazy]: /[\\s\\S]*{open}/\nTEXT: /[\\s\\S]*/ & ~/[\\s\\S]*{open}[\\s\\S]*/\n",
                open = regex_syntax::escape(s.open)
            ),
        };
        GuidedRequest::new(GuidedSpec::Lark(format!("{start}{calls}{call}{rules}")), "tools")
    }

    /// `text` as a sequence of Lark terminals: control-token markers as those tokens (`<[id]>`), the rest as
    /// string literals; `""` when empty.
    pub(crate) fn literal(&self, text: &str) -> String {
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let next = self.control_markers.iter().filter_map(|(m, id)| rest.find(m).map(|at| (at, *m, *id))).min();
            let Some((at, marker, id)) = next else {
                parts.push(string_literal(rest));
                break;
            };
            if at > 0 {
                parts.push(string_literal(&rest[..at]));
            }
            parts.push(format!("<[{id}]>"));
            rest = &rest[at + marker.len()..];
        }
        match parts.is_empty() {
            true => "\"\"".into(),
            false => parts.join(" "),
        }
    }

    /// `text`, a whole output, read as calls; `None` when it is a message.
    pub fn read<'t>(&self, text: &'t str) -> Option<ReadCalls<'t>> {
        self.syntax.read(text, &self.names, &self.strings, self.parallel)
    }
}

/// A Lark string literal of `text` (JSON's escapes, which Lark's strings share).
fn string_literal(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::test_support::{char_tokenizer, walk_grammar};
    use crate::protocol::tools::call_syntax::{
        DEEPSEEK_V31, EMBER, HERMES, LLAMA3_JSON, MISTRAL_LIST, MISTRAL_NAMED, QWEN3_XML,
    };

    fn tools() -> Vec<Tool> {
        let city = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
            "additionalProperties": false});
        vec![
            Tool { name: "get_weather".into(), parameters: city },
            Tool { name: "now".into(), parameters: json!({"type": "object", "additionalProperties": false}) },
        ]
    }

    const CALL: &str = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;

    /// Walks `text` through the grammar of `syntax`: `Ok(may_end)` (whether end-of-generation is allowed after
    /// it, or the grammar completed on its last token) or `Err(i)`, the first token the grammar refuses.
    fn walk_with(syntax: CallSyntax, controls: &[&str], parallel: bool, text: &str) -> Result<bool, usize> {
        let tokenizer = char_tokenizer(controls);
        let calls = AutoCalls::new(syntax, &tools(), parallel, &tokenizer);
        assert_eq!(calls.control_markers.len(), controls.len());
        walk_grammar(&calls.constraint(&tools()), controls, text)
    }

    fn walk(syntax: CallSyntax, text: &str) -> Result<bool, usize> {
        walk_with(syntax, &[], true, text)
    }

    #[test]
    fn the_ember_grammar_leaves_text_free_and_makes_a_begun_call_valid() {
        assert_eq!(walk(EMBER, CALL), Ok(true), "a call, complete");
        assert_eq!(walk(EMBER, &format!("\n {CALL}")), Ok(true), "after whitespace");
        for text in ["It is sunny in Paris.", "Sunny {\"city\": 1} }", "", "  ", " a\n{"] {
            assert_eq!(walk(EMBER, text), Ok(true), "{text:?} is a message");
        }
        assert_eq!(walk(EMBER, &CALL[..20]), Ok(false), "a begun call cannot end");
        // Once the reply starts with `{`, only a valid call goes on.
        assert_eq!(walk(EMBER, r#"{"name": "get_time""#), Err(14), "get_weather's t");
        assert_eq!(walk(EMBER, r#"{"name": "get_weather", "arguments": {"town""#), Err(39));
        assert_eq!(walk(EMBER, r#"{"a": 1}"#), Err(2), "a key other than name");
        assert_eq!(walk(EMBER, &format!("{CALL}{CALL}")), Ok(false), "one call");
        let llama = CALL.replace("arguments", "parameters");
        assert_eq!(walk(LLAMA3_JSON, &llama), Ok(true));
        assert_eq!(walk(LLAMA3_JSON, CALL), Err(25), "Llama 3.x writes parameters");
    }

    #[test]
    fn the_hermes_grammar_allows_text_then_valid_tagged_calls() {
        let tagged = format!("<tool_call>\n{CALL}\n</tool_call>");
        assert_eq!(walk(HERMES, &tagged), Ok(true));
        assert_eq!(walk(HERMES, &format!("Let me <b>look</b>.\n{tagged}")), Ok(true));
        for text in ["It is sunny.", "", "a <tool_ca", "x </tool_call> {\"name\"}", "<tool_call"] {
            assert_eq!(walk(HERMES, text), Ok(true), "{text:?} is a message");
        }
        assert_eq!(walk(HERMES, "Hi <tool_call>"), Ok(false), "a begun call cannot end");
        assert_eq!(walk(HERMES, "Hi <tool_call> is"), Err(14), "the tag begins a call");
        assert_eq!(walk(HERMES, "Hi <tool_call>\n{\"name\": \"nope\""), Err(27), "no tool nope");
        assert_eq!(walk(HERMES, &format!("{tagged}\nmore")), Err(tagged.len() + 1));
        let two = format!("{tagged}\n<tool_call>\n{{\"name\": \"now\", \"arguments\": {{}}}}\n</tool_call>");
        assert_eq!(walk(HERMES, &two), Ok(true), "parallel calls");
        // Not parallel: the grammar is complete after the first call, and the choice ends there.
        assert_eq!(walk_with(HERMES, &[], false, &two), Ok(false), "one call when not parallel");
    }

    /// Qwen3-Coder's blocks: text, then calls whose string values are raw text (any characters, several lines)
    /// ending at the first `\n</parameter>\n`, and whose required parameters must come.
    #[test]
    fn the_xml_grammar_allows_text_then_valid_parameter_blocks() {
        let call =
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis <b>\"x\"</b>\nand more\n</parameter>\n\
                    </function>\n</tool_call>";
        assert_eq!(walk(QWEN3_XML, call), Ok(true));
        assert_eq!(walk(QWEN3_XML, &format!("Let me look.\n{call}")), Ok(true));
        let now = "\n<tool_call>\n<function=now>\n</function>\n</tool_call>";
        assert_eq!(walk(QWEN3_XML, &format!("{call}{now}")), Ok(true), "parallel calls");
        assert_eq!(walk(QWEN3_XML, "It is sunny. <tool_ca"), Ok(true), "a message");
        let no_city = "<tool_call>\n<function=get_weather>\n</function>";
        assert_eq!(walk(QWEN3_XML, no_city), Err(no_city.len() - "/function>".len()), "city is required");
        let unknown = "<tool_call>\n<function=get_weather>\n<parameter=town>";
        assert!(walk(QWEN3_XML, unknown).is_err(), "no parameter town");
        // The call read back is the JSON object of its values.
        let tokenizer = char_tokenizer(&[]);
        let read = AutoCalls::new(QWEN3_XML, &tools(), true, &tokenizer).read(call).unwrap();
        assert_eq!(read.calls[0].arguments, r#"{"city": "Paris <b>\"x\"</b>\nand more"}"#);
    }

    #[test]
    fn control_token_markers_are_those_tokens_in_the_grammar() {
        let controls = ["[TOOL_CALLS]", "[ARGS]"];
        let call = r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}"#;
        assert_eq!(walk_with(MISTRAL_NAMED, &controls, true, call), Ok(true));
        assert_eq!(walk_with(MISTRAL_NAMED, &controls, true, &format!("Sure. {call}")), Ok(true));
        assert_eq!(walk_with(MISTRAL_NAMED, &controls, true, &format!("{call}[TOOL_CALLS]now[ARGS]{{}}")), Ok(true));
        for text in ["", "It is sunny [TOOL_CALLS is text"] {
            assert_eq!(walk_with(MISTRAL_NAMED, &controls, true, text), Ok(true), "{text:?} is a message");
        }
        assert_eq!(walk_with(MISTRAL_NAMED, &controls, true, "[TOOL_CALLS]get_time"), Err(5), "get_t");
        // Without the control tokens, the same markers are text (SmolLM2 with a Mistral template).
        assert_eq!(walk(MISTRAL_NAMED, call), Ok(true));
        assert_eq!(walk(MISTRAL_LIST, &format!("[TOOL_CALLS][{CALL}]")), Ok(true));
        let v31 = [
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁sep｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁calls▁end｜>",
        ];
        let text =
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        assert_eq!(walk_with(DEEPSEEK_V31, &v31, true, text), Ok(true));
    }

    #[test]
    fn special_text_is_kept_only_when_a_marker_is_a_control_token() {
        let with = AutoCalls::new(MISTRAL_NAMED, &tools(), true, &char_tokenizer(&["[TOOL_CALLS]"]));
        assert!(with.needs_special_text());
        assert!(!AutoCalls::new(MISTRAL_NAMED, &tools(), true, &char_tokenizer(&[])).needs_special_text());
        assert!(!AutoCalls::new(HERMES, &tools(), true, &char_tokenizer(&["[TOOL_CALLS]"])).needs_special_text());
    }
}
