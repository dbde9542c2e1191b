//! llguidance's error messages as a client reads them: one line, no drawings, no panic.
//!
//! llguidance catches panics in its compiler and matcher (`panic_utils::catch_unwind`, behind
//! `ParserFactory::create_parser` and every `Matcher` operation) and returns them as errors whose text is
//! `panic: MESSAGE` followed by `<backtrace>` and the whole stack. A panic is llguidance's failure, not the
//! request's; its text and stack say nothing a client can act on and show the server's internals, so the
//! message becomes a fixed sentence.
//!
//! llguidance's own limits are reported in its words (`limit for this grammar: 50000`); the message is given the
//! name of the engine option that sets the limit (`grammar_limits.max_grammar_symbols`).

/// What a client reads instead of a panic's text.
pub(super) const INTERNAL_FAILURE: &str =
    "the grammar compiler failed on this input (an internal error of llguidance; simplify the constraint)";

/// llguidance's messages for its limits, and the `grammar_limits` option that sets each (llguidance's own
/// advice, which names its internals, replaced where it has one).
const LIMIT_MESSAGES: [(&str, &str, Option<&str>); 8] = [
    (
        "lexer precomputation failed; either increase limits.initial_lexer_fuel or disable limits.precompute_large_lexemes",
        "lexer_fuel",
        Some("precomputing the lexer ran out of fuel"),
    ),
    ("initial lexer configuration (grammar) too big", "lexer_fuel", None),
    ("fuel exhausted when checking relevance of lexemes", "lexer_fuel", None),
    ("grammar size (number of symbols) too big", "max_grammar_symbols", None),
    ("too many expressions constructed", "step_lexer_fuel", None),
    ("too many states", "max_lexer_states", None),
    ("Too many items (limit", "step_max_items", None),
    ("Current row has", "max_items_in_row", None),
];

/// llguidance's JSON schema compiler stops after 50,000 subschemas (its `SchemaBuilderOptions::max_size`, which
/// no option reaches): said so, since the message alone does not say which limit.
const SCHEMA_TOO_LARGE: (&str, &str) = (
    "schema too large",
    "the schema is too large: llguidance compiles at most 50,000 subschemas (allOf over anyOf multiplies them)",
);

/// The longest message kept: llguidance quotes the regex or grammar at fault, which can be half a megabyte.
const MAX_MESSAGE: usize = 1_000;

/// `message` as one line: a panic replaced by [`INTERNAL_FAILURE`]; the drawings of a regex or grammar error
/// (a caret under the pattern, the grammar's line quoted) dropped and the rest joined; cut at [`MAX_MESSAGE`]
/// bytes.
pub(super) fn clean_error(message: &str) -> String {
    if message.contains("panic: ") || message.contains("<backtrace>") {
        return INTERNAL_FAILURE.into();
    }
    let mut line = one_line(message);
    if let Some((needle, option, instead)) = LIMIT_MESSAGES.iter().find(|(needle, ..)| line.contains(needle)) {
        if let Some(instead) = instead {
            line = line.replace(needle, instead);
        }
        line.push_str(&format!(" (grammar_limits.{option})"));
    } else if line == SCHEMA_TOO_LARGE.0 {
        line = SCHEMA_TOO_LARGE.1.into();
    }
    if line.len() > MAX_MESSAGE {
        let cut = (0..=MAX_MESSAGE).rev().find(|&i| line.is_char_boundary(i)).unwrap_or(0);
        line.truncate(cut);
        line.push_str("...");
    }
    line
}

fn one_line(message: &str) -> String {
    let drawing = |l: &str| {
        let t = l.trim();
        t.is_empty()
            || t.chars().all(|c| c == '^' || c == '~' || c == '-')
            || t.split_once(" | ").is_some_and(|(n, _)| n.trim().chars().all(|c| c.is_ascii_digit()))
    };
    message.lines().filter(|l| !drawing(l)).map(str::trim).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_one_line_without_drawings() {
        let regex = "at 1(8): invalid regex \"(a\" (in regex): regex parse error:\n    (a\n     ^\nerror: unclosed group\n   1 | start: /(a/\n       ^";
        assert_eq!(
            clean_error(regex),
            "at 1(8): invalid regex \"(a\" (in regex): regex parse error: (a error: unclosed group"
        );
    }

    #[test]
    fn panics_lose_their_text_and_backtrace() {
        let panic = "panic: assertion failed: grammar.symbols.len() < u16::MAX as usize - 10\n<backtrace>\n   0: \
                     llguidance::panic_utils::catch_unwind\n</backtrace>";
        assert_eq!(clean_error(panic), INTERNAL_FAILURE);
        assert_eq!(clean_error("structured output: panic: index out of bounds"), INTERNAL_FAILURE);
    }

    #[test]
    fn llguidance_limits_are_named_as_options() {
        let e = clean_error("grammar size (number of symbols) too big (limit for this grammar: 50000)");
        assert_eq!(e, "grammar size (number of symbols) too big (limit for this grammar: 50000) (grammar_limits.max_grammar_symbols)");
        let e = clean_error("lexer precomputation failed; either increase limits.initial_lexer_fuel or disable limits.precompute_large_lexemes");
        assert_eq!(e, "precomputing the lexer ran out of fuel (grammar_limits.lexer_fuel)");
        assert_eq!(clean_error("schema too large"), SCHEMA_TOO_LARGE.1);
    }

    #[test]
    fn long_messages_are_cut() {
        let long = format!("invalid regex \"{}\"", "é".repeat(2_000));
        let cut = clean_error(&long);
        assert!(cut.len() <= MAX_MESSAGE + 3 && cut.ends_with("...") && cut.starts_with("invalid regex"));
    }
}
