//! What a request constrains its output to, and the llguidance grammar that says it.
//!
//! The spec is plain data (`Clone + PartialEq`, no tokenizer), so the protocol layer can build it and tests can
//! compare it; turning it into a parser needs the engine's vocabulary and happens in `compile.rs`.

use llguidance::api::TopLevelGrammar;
use serde_json::{json, Value};

/// A constraint on a choice's output.
#[derive(Clone, Debug, PartialEq)]
pub enum GuidedSpec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON value matching this JSON schema (`response_format` `json_schema`, vLLM's `guided_json`).
    JsonSchema(Value),
    /// Text matching this regular expression, whole (vLLM's `guided_regex`; Rust `regex` syntax).
    Regex(String),
    /// Exactly one of these strings (vLLM's `guided_choice`).
    Choice(Vec<String>),
    /// Text in the language of this Lark grammar (vLLM's `guided_grammar`; llguidance's Lark dialect).
    Lark(String),
}

/// A constraint with the request field it came from, which an error names (`response_format`, `guided_regex`…).
#[derive(Clone, Debug, PartialEq)]
pub struct GuidedRequest {
    pub spec: GuidedSpec,
    pub field: &'static str,
}

impl GuidedRequest {
    pub fn new(spec: GuidedSpec, field: &'static str) -> Self {
        GuidedRequest { spec, field }
    }
}

/// How JSON is written when the schema does not say (its `x-guidance` object can): one fixed layout, the one
/// Python's `json.dumps` writes. Flexible whitespace would let a small model pad its output with newlines until
/// `max_tokens` runs out; a fixed layout leaves it only the values to choose. Public for grammars that embed a
/// schema (`%json` in Lark), which set it themselves.
pub fn json_layout() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

impl GuidedSpec {
    /// The llguidance grammar, or why there is none (a shape error; syntax errors come from the compiler).
    pub(super) fn grammar(&self) -> Result<TopLevelGrammar, String> {
        match self {
            GuidedSpec::JsonObject => Ok(json_grammar(json!({"type": "object"}))),
            GuidedSpec::JsonSchema(schema) => match schema {
                Value::Object(_) | Value::Bool(_) => Ok(json_grammar(schema.clone())),
                other => Err(format!("a JSON schema is an object (or a boolean), not {}", json_kind(other))),
            },
            GuidedSpec::Regex(rx) => Ok(TopLevelGrammar::from_regex(rx)),
            GuidedSpec::Choice(choices) => {
                if choices.is_empty() {
                    return Err("the list of choices is empty".into());
                }
                // An alternation of the escaped strings: each is matched literally, whole.
                let alternatives: Vec<String> = choices.iter().map(|c| regex_syntax::escape(c)).collect();
                Ok(TopLevelGrammar::from_regex(&format!("(?:{})", alternatives.join("|"))))
            }
            GuidedSpec::Lark(grammar) => {
                if grammar.trim().is_empty() {
                    return Err("the grammar is empty".into());
                }
                Ok(TopLevelGrammar::from_lark(grammar.clone()))
            }
        }
    }
}

/// A JSON schema grammar with ember's layout unless the schema sets its own.
fn json_grammar(mut schema: Value) -> TopLevelGrammar {
    if let Value::Object(o) = &mut schema {
        if !o.contains_key("x-guidance") {
            o.insert("x-guidance".into(), json_layout());
        }
    }
    TopLevelGrammar::from_json_schema(schema)
}

/// A JSON value's kind, as error messages name it ("a string", "an array", ...).
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_that_are_not_grammars_are_refused() {
        let e = GuidedSpec::JsonSchema(json!("object")).grammar().unwrap_err();
        assert_eq!(e, "a JSON schema is an object (or a boolean), not a string");
        assert_eq!(GuidedSpec::Choice(vec![]).grammar().unwrap_err(), "the list of choices is empty");
        assert_eq!(GuidedSpec::Lark(" \n".into()).grammar().unwrap_err(), "the grammar is empty");
    }

    #[test]
    fn json_gets_the_fixed_layout_unless_the_schema_sets_one() {
        let layout = |g: TopLevelGrammar| g.grammars[0].json_schema.clone().unwrap()["x-guidance"].clone();
        assert_eq!(layout(GuidedSpec::JsonObject.grammar().unwrap()), json_layout());
        let own = json!({"type": "object", "x-guidance": {"whitespace_flexible": true}});
        assert_eq!(layout(GuidedSpec::JsonSchema(own).grammar().unwrap()), json!({"whitespace_flexible": true}));
    }
}
