//! What compiling one request's constraint may cost: the engine's `grammar_limits` option.
//!
//! Compiling happens in `engine_submit`, on the host's thread, before the request exists, so nothing can cancel
//! it: every stage must be bounded by the input it is given. llguidance bounds some stages itself (its
//! `ParserLimits`: lexer fuel, grammar symbols, lexer states, Earley items); the rest are bounded here, by checks
//! on the input before llguidance sees it (`schema_check.rs`, `lark_check.rs`) and on the compiled grammar
//! before a parser is built from it (`grammar_check.rs`):
//!
//! | stage | bounded by |
//! | --- | --- |
//! | reading the schema, grammar, regex or choices | `max_bytes` |
//! | JSON schema to grammar: recursion through subschemas and `$ref`s | `max_schema_depth` |
//! | JSON schema: `anyOf`/`oneOf` (oneOf's disjointness check is quadratic) | `max_schema_alternatives` |
//! | JSON schema: an object's properties, an array's `prefixItems` (built with quadratic hashing) | `max_schema_properties` |
//! | JSON schema: intersecting regexes on one string (derivre's derivative of an intersection is the product of its parts', computed whole) | `max_intersection_product` |
//! | Lark to grammar: rules compiled recursively; each terminal compared with every earlier one | `max_lark_definitions`, `max_lark_terminals` |
//! | grammar size | `max_grammar_symbols` (llguidance's `max_grammar_size`) |
//! | regexes into the lexer, precomputing large lexemes | `lexer_fuel` (llguidance's `initial_lexer_fuel`) |
//! | an Earley row: predictions, each looked up in the row (no llguidance limit applies within a row) | `max_earley_row_work` |
//! | a row's items (a symbol of more alternatives can never be used) | `max_items_in_row` |
//! | each mask, at submit (the first) and at every step | `step_lexer_fuel`, `step_max_items`, and at submit `max_compile_cpu_ms` |
//! | the lexer's automaton as generation explores it (memory) | `max_lexer_states` |
//!
//! Every default lets the tests' grammars and ordinary real-world schemas through, and refuses every case of
//! `tests/attack/grammar_cases.rs` within 2 s of CPU and 256 MiB (docs/reliability.md has the figures).

use llguidance::api::ParserLimits;
use serde::{Deserialize, Serialize};

/// The `grammar_limits` option. Every field has a default; an object sets some of them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrammarLimits {
    /// Most bytes of a constraint's text: a schema as compact JSON, a grammar, a regex, or the choices together.
    pub max_bytes: usize,
    /// Most milliseconds of CPU compiling one constraint may take, its first mask included: the compiling
    /// thread's CPU time where Linux tells it (`src/cpu_clock.rs`), else wall-clock time. Checked between the stages,
    /// and the first mask is cancelled when it runs past; the stages before it are bounded by the limits below,
    /// not by time (llguidance cannot interrupt them).
    pub max_compile_cpu_ms: u64,
    /// Deepest path through a JSON schema's subschemas, following `$ref`s (cycles, which are recursion in the
    /// output, are fine): llguidance compiles a schema recursively, about 6 KB of stack per level.
    pub max_schema_depth: usize,
    /// Most branches of one `anyOf` or `oneOf` of a JSON schema (an `enum` is one regex, bounded by `max_bytes`).
    pub max_schema_alternatives: usize,
    /// Most `properties` of one object schema, and `prefixItems` of one array schema: llguidance builds the
    /// sequence recursively, hashing the rest of the list at every step (12,000 properties: 3.6 s).
    pub max_schema_properties: usize,
    /// The largest intersection of regexes on one JSON string (`allOf` patterns, a pattern with a `format` or
    /// length bounds): the product over the regexes of each one's size in character positions (at most 256
    /// counted per regex). derivre computes an intersection's derivative as the product of its parts' before
    /// any fuel is checked.
    pub max_intersection_product: u64,
    /// Most rules and terminals a Lark grammar may define: llguidance compiles a rule when it is first used,
    /// recursively, about 4 KB of stack per rule in a chain.
    pub max_lark_definitions: usize,
    /// Most string and regex literals in a Lark grammar: llguidance compares each new terminal with every
    /// earlier one.
    pub max_lark_terminals: usize,
    /// Most symbols of the grammar (llguidance's `max_grammar_size`; its compiled grammar cannot exceed 65,525).
    pub max_grammar_symbols: usize,
    /// Fuel for turning the grammar's regexes into the lexer and precomputing its large lexemes (llguidance's
    /// `initial_lexer_fuel`; about 50 per microsecond).
    pub lexer_fuel: u64,
    /// Bound on the comparisons building one Earley row can make: the predictions the grammar's rules make
    /// (each rule's alternatives of the symbols that can start it), times its rules (each prediction is looked
    /// up in the row). llguidance checks its item limits only between rows.
    pub max_earley_row_work: u64,
    /// Most items in an Earley row (llguidance's `max_items_in_row`): a symbol with more alternatives could
    /// never be used, so such a grammar is refused at submit.
    pub max_items_in_row: usize,
    /// Lexer fuel for one mask (llguidance's `step_lexer_fuel`; about 14 per microsecond).
    pub step_lexer_fuel: u64,
    /// Earley items for one mask (llguidance's `step_max_items`; about 20 per microsecond).
    pub step_max_items: usize,
    /// Most states of a grammar's lexer automaton, built as generation explores it (llguidance's
    /// `max_lexer_states`; one to two kilobytes each).
    pub max_lexer_states: usize,
}

impl Default for GrammarLimits {
    fn default() -> Self {
        GrammarLimits {
            max_bytes: 512 * 1024,
            max_compile_cpu_ms: 1_000,
            max_schema_depth: 128,
            max_schema_alternatives: 1_000,
            max_schema_properties: 2_000,
            max_intersection_product: 65_536,
            max_lark_definitions: 4_000,
            max_lark_terminals: 10_000,
            max_grammar_symbols: 50_000,
            lexer_fuel: 1_000_000,
            max_earley_row_work: 2_000_000_000,
            max_items_in_row: 2_000,
            step_lexer_fuel: 200_000,
            step_max_items: 50_000,
            max_lexer_states: 50_000,
        }
    }
}

/// The compiled grammar's symbol indices are 16-bit (llguidance's `CSymIdx`): more symbols would fail an
/// assertion deep in its compiler.
const SYMBOLS_CEILING: usize = 65_000;

impl GrammarLimits {
    /// Why the option cannot work, if it cannot: every limit at least 1 (0 would refuse every grammar), symbols
    /// under llguidance's ceiling.
    pub fn problem(&self) -> Option<String> {
        let sizes: [(&str, u64); 15] = [
            ("max_bytes", self.max_bytes as u64),
            ("max_compile_cpu_ms", self.max_compile_cpu_ms),
            ("max_schema_depth", self.max_schema_depth as u64),
            ("max_schema_alternatives", self.max_schema_alternatives as u64),
            ("max_schema_properties", self.max_schema_properties as u64),
            ("max_intersection_product", self.max_intersection_product),
            ("max_lark_definitions", self.max_lark_definitions as u64),
            ("max_lark_terminals", self.max_lark_terminals as u64),
            ("max_grammar_symbols", self.max_grammar_symbols as u64),
            ("lexer_fuel", self.lexer_fuel),
            ("max_earley_row_work", self.max_earley_row_work),
            ("max_items_in_row", self.max_items_in_row as u64),
            ("step_lexer_fuel", self.step_lexer_fuel),
            ("step_max_items", self.step_max_items as u64),
            ("max_lexer_states", self.max_lexer_states as u64),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Some(format!("grammar_limits.{name} must be at least 1"));
        }
        if self.max_grammar_symbols > SYMBOLS_CEILING {
            return Some(format!(
                "grammar_limits.max_grammar_symbols = {} is more than llguidance's grammars can hold ({SYMBOLS_CEILING})",
                self.max_grammar_symbols
            ));
        }
        None
    }

    /// llguidance's own limits, from ours.
    pub(super) fn parser_limits(&self) -> ParserLimits {
        ParserLimits {
            max_items_in_row: self.max_items_in_row,
            initial_lexer_fuel: self.lexer_fuel,
            step_lexer_fuel: self.step_lexer_fuel,
            step_max_items: self.step_max_items,
            max_lexer_states: self.max_lexer_states,
            max_grammar_size: self.max_grammar_symbols,
            precompute_large_lexemes: true,
            // Errors are returned to clients: they carry the problem, not the parser's internal state.
            verbose_errors: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zero_or_too_many_symbols_is_not() {
        assert_eq!(GrammarLimits::default().problem(), None);
        let zero = GrammarLimits { max_lark_terminals: 0, ..Default::default() };
        assert_eq!(zero.problem().unwrap(), "grammar_limits.max_lark_terminals must be at least 1");
        let huge = GrammarLimits { max_grammar_symbols: 100_000, ..Default::default() };
        assert!(huge.problem().unwrap().contains("max_grammar_symbols = 100000"));
    }

    #[test]
    fn an_object_sets_some_limits_and_keeps_the_rest() {
        let l: GrammarLimits = serde_json::from_str(r#"{"max_bytes": 100, "max_compile_cpu_ms": 5}"#).unwrap();
        assert_eq!((l.max_bytes, l.max_compile_cpu_ms), (100, 5));
        assert_eq!(l.max_schema_depth, GrammarLimits::default().max_schema_depth);
        assert!(serde_json::from_str::<GrammarLimits>(r#"{"max_byte": 1}"#).is_err());
        let p = GrammarLimits::default().parser_limits();
        assert_eq!((p.max_grammar_size, p.verbose_errors), (50_000, false));
    }
}
