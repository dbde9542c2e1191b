//! `tool_choice: "auto"`: the model writes a message or a call, in its template's format (`tool_format.rs`), and
//! ember reads the call back.
//!
//! The output is constrained by a "lazy" grammar: free text, or (at the point where the format's call begins) one
//! valid call of the tools' schemas, the same `{"name": …, "arguments": …}` object a `"required"` call is. So a
//! call in `"auto"` mode is as certain to be valid as a forced one, while a message is left alone:
//! - ember's format: text whose first non-whitespace character is not `{`, or one call object (after optional
//!   whitespace). A reply that starts with `{` is a call.
//! - Hermes: text without `<tool_call>`, or text, then `<tool_call>\n`, one call object, `\n</tool_call>`, and
//!   nothing after it: one call per choice (the grammar ends there, and so does the choice).
//!
//! Reading back is exact, not a search: a whole output is a call when it has the shape above, with the layout
//! the grammar writes (`json_layout`: `{"name": "NAME", "arguments": ARGS}`), a tool's name and arguments that
//! are a JSON object. Anything else, such as a call cut short by `max_tokens`, is a message.

use serde_json::Value;

use super::tool_format::ToolFormat;
use super::tools::{parse_call, CallShape, Tool};
use crate::engine::guided::{json_layout, GuidedRequest, GuidedSpec};

/// The tag that opens a Hermes call, and the one that closes it.
pub(crate) const HERMES_OPEN: &str = "<tool_call>";
pub(crate) const HERMES_CLOSE: &str = "</tool_call>";

/// The formats `"auto"` can read (a template of [`ToolFormat::Unknown`] is refused before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AutoFormat {
    Hermes,
    Ember,
}

impl AutoFormat {
    pub fn of(format: ToolFormat) -> Option<Self> {
        match format {
            ToolFormat::Hermes => Some(AutoFormat::Hermes),
            ToolFormat::Ember => Some(AutoFormat::Ember),
            ToolFormat::Unknown => None,
        }
    }
}

/// One choice's output read as a call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReadCall<'t> {
    /// Text the model wrote before the call (Hermes), without its trailing whitespace; `None` when there is none.
    pub content: Option<&'t str>,
    pub name: String,
    /// The arguments' JSON text, as written.
    pub arguments: String,
}

/// How `"auto"` outputs of one request are constrained and read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AutoCalls {
    pub format: AutoFormat,
    pub names: Vec<String>,
}

impl AutoCalls {
    pub fn new(format: AutoFormat, tools: &[Tool]) -> Self {
        AutoCalls { format, names: tools.iter().map(|t| t.name.clone()).collect() }
    }

    /// The lazy grammar (see the module comment) over `call_schema`, the `"required"` call's schema.
    pub fn constraint(&self, call_schema: &Value) -> GuidedRequest {
        let mut schema = call_schema.clone();
        if let Value::Object(o) = &mut schema {
            o.insert("x-guidance".into(), json_layout());
        }
        let call = format!("%json {schema}");
        let grammar = match self.format {
            // `TEXT` is all text whose first non-whitespace character is not `{` (an empty reply included); a
            // call may follow whitespace (`LEAD`).
            AutoFormat::Ember => format!(
                "start: TEXT | LEAD? call\ncall: {call}\nTEXT: /\\s*/ | /\\s*[^\\s{{][\\s\\S]*/\nLEAD: /\\s+/\n"
            ),
            // `TEXT` never contains the tag; `pre` is text up to the tag's first occurrence, matched lazily: it
            // ends at the first tag (llguidance's lexer, greedy otherwise, could not split text from the tag).
            AutoFormat::Hermes => format!(
                "start: TEXT | pre \"\\n\" call CLOSE\npre[lazy]: /[\\s\\S]*{open}/\ncall: {call}\n\
                 CLOSE: \"\\n{close}\"\nTEXT: /[\\s\\S]*/ & ~/[\\s\\S]*{open}[\\s\\S]*/\n",
                open = regex_syntax::escape(HERMES_OPEN),
                close = HERMES_CLOSE,
            ),
        };
        GuidedRequest::new(GuidedSpec::Lark(grammar), "tools")
    }

    /// `text`, a whole output, read as a call; `None` when it is a message.
    pub fn read<'t>(&self, text: &'t str) -> Option<ReadCall<'t>> {
        let (content, object) = match self.format {
            AutoFormat::Ember => (None, text.trim()),
            AutoFormat::Hermes => {
                let at = text.find(HERMES_OPEN)?;
                let inner = text[at + HERMES_OPEN.len()..].trim_end().strip_suffix(HERMES_CLOSE)?;
                let before = text[..at].trim_end();
                (Some(before).filter(|b| !b.is_empty()), inner.trim())
            }
        };
        let (name, arguments) = parse_call(&CallShape::NameAndArguments, object)?;
        let is_object = serde_json::from_str::<Value>(&arguments).is_ok_and(|a| a.is_object());
        (is_object && self.names.contains(&name)).then_some(ReadCall { content, name, arguments })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::guided::{Accepted, GuidedCompiler};
    use crate::model::tokenizer::{TokenType, Tokenizer, TokenizerSpec};
    use crate::model::TokenId;

    fn calls(format: AutoFormat) -> AutoCalls {
        AutoCalls { format, names: vec!["get_weather".into(), "now".into()] }
    }

    const CALL: &str = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;

    fn call(content: Option<&str>) -> Option<ReadCall<'_>> {
        Some(ReadCall { content, name: "get_weather".into(), arguments: r#"{"city": "Paris"}"#.into() })
    }

    #[test]
    fn ember_outputs_are_a_call_only_when_exactly_one_call_object() {
        let e = calls(AutoFormat::Ember);
        assert_eq!(e.read(CALL), call(None));
        assert_eq!(e.read(&format!("\n  {CALL}\n")), call(None), "whitespace around the object");
        for text in [
            "It is sunny in Paris.",
            "",
            &CALL[..CALL.len() - 1],                                    // cut short
            &CALL.replace("get_weather", "get_time"),                   // no such tool
            r#"{"name": "get_weather", "arguments": {"city": Paris}}"#, // arguments are not JSON
            r#"{"name": "get_weather", "arguments": [1]}"#,             // nor an object
            &format!("Sure: {CALL}"),                                   // text first: a message
            &format!("{CALL} and more"),
        ] {
            assert_eq!(e.read(text), None, "{text:?}");
        }
    }

    #[test]
    fn hermes_outputs_are_text_then_one_tagged_call() {
        let h = calls(AutoFormat::Hermes);
        assert_eq!(h.read(&format!("<tool_call>\n{CALL}\n</tool_call>")), call(None));
        assert_eq!(h.read(&format!("\n<tool_call>\n{CALL}\n</tool_call>\n")), call(None), "blank text is none");
        let text = format!("Let me look.\n<tool_call>\n{CALL}\n</tool_call>");
        assert_eq!(h.read(&text), call(Some("Let me look.")));
        for text in [
            "It is sunny.".to_owned(),
            CALL.to_owned(),                         // no tags: a message
            format!("<tool_call>\n{CALL}"),          // cut short before the closing tag
            format!("<tool_call>\n{}", &CALL[..20]), // or inside the call
            format!("<tool_call>\n{}\n</tool_call>", CALL.replace("get_weather", "nope")),
            "<tool_call>\n{\"name\": \"now\", \"arguments\": {]}\n</tool_call>".to_owned(),
        ] {
            assert_eq!(h.read(&text), None, "{text:?}");
        }
    }

    #[test]
    fn the_grammars_embed_the_call_schema_with_the_fixed_layout() {
        let schema = json!({"anyOf": [{"type": "object"}]});
        for format in [AutoFormat::Ember, AutoFormat::Hermes] {
            let g = calls(format).constraint(&schema);
            let GuidedSpec::Lark(lark) = &g.spec else { panic!("{g:?}") };
            assert_eq!(g.field, "tools");
            let embedded = format!("{}", json!({"anyOf": [{"type": "object"}], "x-guidance": json_layout()}));
            assert!(lark.contains(&embedded), "{lark}");
        }
    }

    /// One token per printable ASCII character, space and newline, and an end-of-generation token: a text is one
    /// token per character, so a grammar is walked character by character.
    fn char_tokenizer() -> Tokenizer {
        let mut tokens: Vec<String> = ('!'..='~').map(String::from).collect();
        tokens.extend(["\u{120}", "\u{10a}", "<|im_end|>"].map(String::from)); // byte-level space, newline
        let mut types = vec![TokenType::Normal as i32; tokens.len()];
        types[tokens.len() - 1] = TokenType::Control as i32;
        let spec = TokenizerSpec {
            token_types: Some(&types),
            eos_id: Some(tokens.len() as TokenId - 1),
            ..TokenizerSpec::new(&tokens, &[], "smollm")
        };
        Tokenizer::from_spec(&spec).unwrap()
    }

    fn char_id(c: char) -> TokenId {
        match c {
            ' ' => 94,
            '\n' => 95,
            c => c as TokenId - '!' as TokenId,
        }
    }

    /// Walks `text` through `format`'s grammar: `Ok(may_end)` (whether end-of-generation is allowed after it,
    /// or the grammar completed on its last character) or `Err(i)`, the first character the grammar refuses.
    fn walk(format: AutoFormat, text: &str) -> Result<bool, usize> {
        let tokenizer = char_tokenizer();
        let tools = json!({"anyOf": [{"type": "object", "properties": {"name": {"const": "get_weather"},
            "arguments": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
            "additionalProperties": false}}, "required": ["name", "arguments"], "additionalProperties": false}]});
        let request = calls(format).constraint(&tools);
        let mut m = GuidedCompiler::new().compile(&tokenizer, &request).unwrap_or_else(|e| panic!("{e}")).matcher();
        for (i, c) in text.chars().enumerate() {
            if !m.allows(char_id(c)) {
                return Err(i);
            }
            if m.accept(char_id(c)) == Accepted::Complete {
                return Ok(i + 1 == text.chars().count());
            }
        }
        Ok(m.allows(tokenizer.eos_id().unwrap()))
    }

    #[test]
    fn the_ember_grammar_leaves_text_free_and_makes_a_begun_call_valid() {
        assert_eq!(walk(AutoFormat::Ember, CALL), Ok(true), "a call, complete");
        assert_eq!(walk(AutoFormat::Ember, &format!("\n {CALL}")), Ok(true), "after whitespace");
        for text in ["It is sunny in Paris.", "Sunny {\"city\": 1} }", "", "  ", " a\n{"] {
            assert_eq!(walk(AutoFormat::Ember, text), Ok(true), "{text:?} is a message");
        }
        assert_eq!(walk(AutoFormat::Ember, &CALL[..20]), Ok(false), "a begun call cannot end");
        // Once the reply starts with `{`, only a valid call goes on.
        assert_eq!(walk(AutoFormat::Ember, r#"{"name": "get_time""#), Err(14), "get_weather's t");
        assert_eq!(walk(AutoFormat::Ember, r#"{"name": "get_weather", "arguments": {"town""#), Err(39));
        assert_eq!(walk(AutoFormat::Ember, r#"{"a": 1}"#), Err(2), "a key other than name");
    }

    #[test]
    fn the_hermes_grammar_allows_text_then_one_valid_tagged_call() {
        let tagged = format!("<tool_call>\n{CALL}\n</tool_call>");
        assert_eq!(walk(AutoFormat::Hermes, &tagged), Ok(true));
        assert_eq!(walk(AutoFormat::Hermes, &format!("Let me <b>look</b>.\n{tagged}")), Ok(true));
        for text in ["It is sunny.", "", "a <tool_ca", "x </tool_call> {\"name\"}", "<tool_call"] {
            assert_eq!(walk(AutoFormat::Hermes, text), Ok(true), "{text:?} is a message");
        }
        assert_eq!(walk(AutoFormat::Hermes, "Hi <tool_call>"), Ok(false), "a begun call cannot end");
        assert_eq!(walk(AutoFormat::Hermes, "Hi <tool_call> is"), Err(14), "the tag begins a call");
        assert_eq!(walk(AutoFormat::Hermes, "Hi <tool_call>\n{\"name\": \"now\""), Err(25));
        assert_eq!(walk(AutoFormat::Hermes, &format!("<tool_call>\n{CALL}\n</tool_call>\nmore")), Ok(false));
    }
}
