//! A Lark grammar's costs, read from its text before llguidance compiles it: how many rules and terminals it
//! defines (llguidance compiles a rule where it is first used, recursively: a chain of 30,000 rules overflows
//! an 8 MiB stack), how many string and regex literals it writes (each new terminal is compared with every
//! earlier one: 100,000 of them take 11 s), and the JSON schemas it embeds (`%json`), checked as schemas.
//!
//! The text is scanned with llguidance's token rules for what matters here: comments (`#`, `//`), strings
//! (JSON syntax), regexes (`/.../flags`), special tokens (`<...>`), and the JSON after `%json`, `%regex` and
//! `%llguidance`. Every definition has one `:` outside those (`::` is another token). A grammar this scanner
//! misreads is one llguidance's lexer refuses too; the counts are then only approximate, which is harmless.

use serde_json::Value;

use super::limits::GrammarLimits;
use super::schema_check::check_schema;

/// Checks the Lark `grammar` against `limits`; the error says which limit.
pub(super) fn check_lark(grammar: &str, limits: &GrammarLimits) -> Result<(), String> {
    let counts = scan(grammar, limits)?;
    if counts.definitions > limits.max_lark_definitions {
        return Err(format!(
            "the grammar defines {} rules and terminals, more than grammar_limits.max_lark_definitions ({})",
            counts.definitions, limits.max_lark_definitions
        ));
    }
    if counts.literals > limits.max_lark_terminals {
        return Err(format!(
            "the grammar writes {} string and regex literals, more than grammar_limits.max_lark_terminals ({})",
            counts.literals, limits.max_lark_terminals
        ));
    }
    Ok(())
}

#[derive(Debug, Default, PartialEq)]
struct Counts {
    definitions: usize,
    literals: usize,
}

/// Counts definitions and literals, checking each embedded schema on the way.
fn scan(text: &str, limits: &GrammarLimits) -> Result<Counts, String> {
    let bytes = text.as_bytes();
    let mut counts = Counts::default();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => i = line_end(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = line_end(bytes, i),
            quote @ (b'"' | b'/') => {
                counts.literals += 1;
                i = closing(bytes, i + 1, quote);
            }
            b'<' => i = bytes[i..].iter().position(|&b| b == b'>').map_or(bytes.len(), |n| i + n + 1),
            b':' if bytes.get(i + 1) == Some(&b':') => i += 2,
            b':' => {
                counts.definitions += 1;
                i += 1;
            }
            b'%' => {
                let word_end = i + 1 + bytes[i + 1..].iter().take_while(|b| b.is_ascii_alphanumeric()).count();
                let keyword = &text[i..word_end];
                i = word_end;
                if matches!(keyword, "%json" | "%regex" | "%llguidance") {
                    let (value, end) = json_after(text, i);
                    i = end;
                    match (keyword, value) {
                        ("%json", Some(schema)) => check_schema(&schema, limits)?,
                        ("%regex", Some(_)) => counts.literals += 1,
                        _ => {}
                    }
                }
            }
            _ => i += 1,
        }
    }
    Ok(counts)
}

/// Where the line holding `i` ends.
fn line_end(bytes: &[u8], i: usize) -> usize {
    bytes[i..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |n| i + n)
}

/// Just past the `quote` that closes a literal whose text starts at `i` (backslash escapes skipped), or the end.
fn closing(bytes: &[u8], mut i: usize, quote: u8) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return i + 1,
            b'\n' => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The JSON value starting after whitespace at `i`, and where it ends; `None` (and the rest skipped to the line's
/// end) where none parses, which llguidance refuses.
fn json_after(text: &str, i: usize) -> (Option<Value>, usize) {
    let mut values = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
    match values.next() {
        Some(Ok(value)) => (Some(value), i + values.byte_offset()),
        _ => (None, line_end(text.as_bytes(), i)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(grammar: &str) -> Counts {
        scan(grammar, &GrammarLimits::default()).unwrap()
    }

    #[test]
    fn definitions_and_literals_are_counted_outside_comments_and_json() {
        let grammar = r#"
            // a comment: "not a literal" /nor this/
            start: greeting NAME "!"   # another: comment
            greeting: "hello" | "hi\"::" | /h(ey)+/i
            NAME: /[A-Z][a-z]+/ <[12]> <|tok|>
            obj: %json {"type": "object", "properties": {"a:b": {"type": "string"}}}
            %ignore " "
        "#;
        assert_eq!(counts(grammar), Counts { definitions: 4, literals: 6 });
    }

    #[test]
    fn limits_name_themselves_and_embedded_schemas_are_checked() {
        let limits = GrammarLimits { max_lark_definitions: 2, max_lark_terminals: 3, ..Default::default() };
        let e = check_lark("start: a\na: b\nb: \"x\"", &limits).unwrap_err();
        assert!(e.contains("defines 3 rules") && e.contains("max_lark_definitions (2)"), "{e}");
        let e = check_lark(r#"start: "a" "b" "c" /d/"#, &limits).unwrap_err();
        assert!(e.contains("writes 4 string and regex literals") && e.contains("max_lark_terminals (3)"), "{e}");
        let wide: Vec<String> = (0..1_001).map(|i| format!("{{\"const\": {i}}}")).collect();
        let e = check_lark(&format!("start: %json {{\"anyOf\": [{}]}}", wide.join(",")), &GrammarLimits::default())
            .unwrap_err();
        assert!(e.contains("max_schema_alternatives"), "{e}");
        assert!(check_lark("start: %json {broken", &GrammarLimits::default()).is_ok(), "llguidance says why");
    }
}
