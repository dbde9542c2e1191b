//! Qwen3-Coder's arguments (also Qwen 3.5's and Nemotron 3's): not a JSON object but one XML-like block per
//! parameter, a string parameter's value as raw text (code, several lines) and any other as JSON:
//!
//! ```text
//! <parameter=city>
//! Paris
//! </parameter>
//! <parameter=days>
//! 3
//! </parameter>
//! ```
//!
//! ember writes the grammar of these blocks from each tool's `parameters` schema (its properties in their order,
//! the required ones always, the others optionally; a string's `enum` and `maxLength` kept), reads them back into
//! the JSON object OpenAI's `arguments` carries (`{"city": "Paris", "days": 3}`, with the separators of the other
//! formats' arguments), and turns them into that JSON while they stream, piece by piece, so that the streamed
//! arguments add up to the whole response's.

use serde_json::Value;

/// What opens a parameter's block; its name and `>\n` follow.
const OPEN: &str = "<parameter=";
/// What ends a parameter's value, whatever the value.
const CLOSE: &str = "\n</parameter>\n";
/// What ends the arguments (the call's `post` begins with it).
pub(crate) const END: &str = "</function>";

/// The names of a tool's parameters whose values are written as raw text (the schema says `"type": "string"`).
pub(crate) fn string_parameters(schema: &Value) -> Vec<String> {
    properties(schema).filter(|(_, p)| is_string(p)).map(|(name, _)| name.to_owned()).collect()
}

fn properties(schema: &Value) -> impl Iterator<Item = (&str, &Value)> {
    schema["properties"].as_object().into_iter().flatten().map(|(k, v)| (k.as_str(), v))
}

/// A string parameter: `"type": "string"`, or no type and an `enum` of strings only.
fn is_string(property: &Value) -> bool {
    match (&property["type"], property["enum"].as_array()) {
        (Value::String(t), _) => t == "string",
        (Value::Null, Some(options)) => !options.is_empty() && options.iter().all(Value::is_string),
        _ => false,
    }
}

/// The Lark rule `name` for the blocks of a tool whose arguments' schema is `schema`, with the rules it needs
/// (named after it). `literal` writes a string as Lark terminals.
pub(crate) fn grammar(name: &str, schema: &Value, layout: &Value, literal: impl Fn(&str) -> String) -> String {
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let mut rules = String::new();
    let mut blocks = Vec::new();
    for (j, (key, property)) in properties(schema).enumerate() {
        let value = format!("{name}_{j}");
        let open = literal(&format!("{OPEN}{key}>\n"));
        let close = literal(CLOSE);
        match (is_string(property), property["enum"].as_array()) {
            (true, Some(options)) => {
                let options: Vec<String> = options.iter().filter_map(Value::as_str).map(&literal).collect();
                rules.push_str(&format!("{value}: ({}) {close}\n", options.join(" | ")));
            }
            // Raw text up to the first `\n</parameter>\n`, which ends it (a lazy lexeme, as `auto_call.rs`'s
            // text before a marker); `maxLength` bounds it in characters.
            (true, None) => {
                let length = match property["maxLength"].as_u64() {
                    Some(n) => format!("{{0,{}}}", n.min(10_000)),
                    None => "*".into(),
                };
                rules.push_str(&format!("{value}[lazy]: /[\\s\\S]{length}\\n<\\/parameter>\\n/\n"));
            }
            _ => {
                let mut schema = property.clone();
                if let Value::Object(o) = &mut schema {
                    o.insert("x-guidance".into(), layout.clone());
                }
                rules.push_str(&format!("{value}_json: %json {schema}\n{value}: {value}_json {close}\n"));
            }
        }
        let optional = if required.contains(&key) { "" } else { "?" };
        blocks.push(format!("({open} {value}){optional}"));
    }
    let blocks = if blocks.is_empty() { "\"\"".to_owned() } else { blocks.join(" ") };
    format!("{name}: {blocks}\n{rules}")
}

/// The arguments at the start of `text` (up to `</function>`, excluded), as JSON text, and their length in
/// `text`; `None` when they are not complete blocks.
pub(crate) fn read(text: &str, strings: &[String]) -> Option<(String, usize)> {
    let mut scan = XmlScan::new(strings.to_vec());
    let json = scan.feed(text);
    // Each JSON value was written under the grammar; checked all the same, as reading back is exact.
    let end = scan.end.filter(|_| serde_json::from_str::<Value>(&json).is_ok_and(|v| v.is_object()))?;
    Some((json, end))
}

/// The arguments' blocks read as their text grows, turned into their JSON text as far as it is certain.
#[derive(Clone, Debug)]
pub(crate) struct XmlScan {
    strings: Vec<String>,
    /// Bytes of the text read.
    pos: usize,
    state: State,
    /// Blocks begun so far.
    count: usize,
    /// Where `</function>` begins, once it has come.
    pub end: Option<usize>,
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    /// Between blocks: `<parameter=` or `</function>` next.
    Between,
    /// In a block's value, raw text (JSON-escaped as it goes) or JSON as it is.
    Value {
        string: bool,
    },
    Ended,
}

impl XmlScan {
    pub fn new(strings: Vec<String>) -> Self {
        XmlScan { strings, pos: 0, state: State::Between, count: 0, end: None }
    }

    /// The JSON text that the arguments' text so far (`text`, which only grows) adds; `end` is set once they
    /// have ended. Text that could still be the start of a marker waits for the next call.
    pub fn feed(&mut self, text: &str) -> String {
        let mut out = String::new();
        loop {
            let rest = &text[self.pos..];
            match self.state {
                State::Ended => return out,
                State::Between => {
                    if rest.starts_with(END) {
                        out.push_str(if self.count == 0 { "{}" } else { "}" });
                        self.end = Some(self.pos);
                        self.state = State::Ended;
                        continue;
                    }
                    let Some(after_open) = rest.strip_prefix(OPEN) else { return out };
                    let Some(name_end) = after_open.find(">\n") else { return out };
                    let name = &after_open[..name_end];
                    let string = self.strings.iter().any(|s| s == name);
                    out.push_str(if self.count == 0 { "{" } else { ", " });
                    out.push_str(&serde_json::to_string(name).unwrap_or_default());
                    out.push_str(if string { ": \"" } else { ": " });
                    self.count += 1;
                    self.pos += OPEN.len() + name_end + 2;
                    self.state = State::Value { string };
                }
                State::Value { string } => {
                    let (value, closed) = match rest.find(CLOSE) {
                        Some(at) => (&rest[..at], true),
                        // Keep back the longest end that could begin the closing marker (ASCII).
                        None => {
                            let keep = (1..CLOSE.len()).rev().find(|&k| rest.ends_with(&CLOSE[..k])).unwrap_or(0);
                            (&rest[..rest.len() - keep], false)
                        }
                    };
                    match string {
                        true => {
                            let escaped = serde_json::to_string(value).unwrap_or_default();
                            out.push_str(&escaped[1..escaped.len() - 1]);
                        }
                        false => out.push_str(value),
                    }
                    self.pos += value.len();
                    if !closed {
                        return out;
                    }
                    if string {
                        out.push('"');
                    }
                    self.pos += CLOSE.len();
                    self.state = State::Between;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::test_support::pieces;

    fn strings() -> Vec<String> {
        vec!["city".into(), "code".into()]
    }

    const BLOCKS: &str = "<parameter=city>\nParis \"<b>\"\n</parameter>\n<parameter=days>\n3\n</parameter>\n\
                          <parameter=code>\nif a:\n    b()\n</parameter>\n</function>\n</tool_call>";
    const JSON: &str = r#"{"city": "Paris \"<b>\"", "days": 3, "code": "if a:\n    b()"}"#;

    #[test]
    fn blocks_read_as_the_json_object_of_their_values() {
        let (json, end) = read(BLOCKS, &strings()).unwrap();
        assert_eq!(json, JSON);
        assert_eq!(&BLOCKS[end..], "</function>\n</tool_call>");
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap()["code"], "if a:\n    b()");
        assert_eq!(read("</function>", &strings()).unwrap().0, "{}");
        for cut in (0..BLOCKS.find(END).unwrap()).filter(|&i| BLOCKS.is_char_boundary(i)) {
            assert_eq!(read(&BLOCKS[..cut], &strings()), None, "cut at {cut}");
        }
    }

    #[test]
    fn streamed_pieces_add_up_to_the_whole_json() {
        for size in [1, 2, 3, 7, 13, 1000] {
            let mut scan = XmlScan::new(strings());
            let (mut text, mut json) = (String::new(), String::new());
            for piece in pieces(BLOCKS, size) {
                text.push_str(piece);
                json.push_str(&scan.feed(&text));
            }
            assert_eq!(json, JSON, "pieces of {size}");
            assert_eq!(scan.end, BLOCKS.find(END));
        }
    }

    #[test]
    fn the_grammar_names_each_parameter_with_its_value_shape() {
        let schema = json!({"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 24}, "unit": {"enum": ["c", "f"]},
            "days": {"type": "integer"}}, "required": ["city"]});
        let literal = |s: &str| serde_json::to_string(s).unwrap();
        let rules = grammar("args0", &schema, &json!({}), literal);
        assert!(
            rules.starts_with(
                "args0: (\"<parameter=city>\\n\" args0_0) (\"<parameter=unit>\\n\" args0_1)? \
             (\"<parameter=days>\\n\" args0_2)?\n"
            ),
            "{rules}"
        );
        assert!(rules.contains("args0_0[lazy]: /[\\s\\S]{0,24}\\n<\\/parameter>\\n/\n"), "{rules}");
        assert!(rules.contains("args0_1: (\"c\" | \"f\") \"\\n</parameter>\\n\"\n"), "{rules}");
        assert!(rules.contains("args0_2_json: %json {"), "{rules}");
        assert_eq!(string_parameters(&schema), ["city", "unit"]);
    }
}
