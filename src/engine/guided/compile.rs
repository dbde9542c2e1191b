//! Compiling a constraint at submit time: the spec becomes an llguidance parser, or an error that names the
//! request field and the problem.
//!
//! The parser factory (the token environment and llguidance's per-vocabulary precomputation, some tens of
//! milliseconds for a 49,152-token vocabulary) is built on the first constrained request, so an engine that never
//! sees one never pays for it. Compiling runs on the submitting host's thread, never on the engine thread: a
//! large schema delays only its own request.

use std::sync::OnceLock;

use llguidance::{ParserFactory, TokenParser};

use super::matcher::GuidedMatcher;
use super::spec::GuidedRequest;
use super::vocab::token_env;
use crate::model::tokenizer::Tokenizer;

/// A constraint compiled against the engine's vocabulary, ready to give each choice its own matcher.
#[derive(Clone)]
pub struct CompiledGrammar {
    parser: TokenParser,
}

impl CompiledGrammar {
    /// A fresh matcher at the start of the grammar. Matchers of one grammar share its lexer's caches (behind
    /// llguidance's lock) and nothing else.
    pub fn matcher(&self) -> GuidedMatcher {
        GuidedMatcher::new(self.parser.clone())
    }
}

/// One engine's grammar compiler.
#[derive(Default)]
pub struct GuidedCompiler {
    factory: OnceLock<Result<ParserFactory, String>>,
}

impl GuidedCompiler {
    pub fn new() -> Self {
        GuidedCompiler::default()
    }

    /// Compiles `request` for `tokenizer` (always the engine's: the factory is built from the first one seen).
    /// The error is the message for the request's field: what is wrong with the schema, regex or grammar.
    pub fn compile(&self, tokenizer: &Tokenizer, request: &GuidedRequest) -> Result<CompiledGrammar, String> {
        let factory = self.factory.get_or_init(|| build_factory(tokenizer)).as_ref()?;
        let grammar = request.spec.grammar()?;
        let parser = factory.create_parser(grammar).map_err(|e| clean_error(&e.to_string()))?;
        Ok(CompiledGrammar { parser })
    }
}

fn build_factory(tokenizer: &Tokenizer) -> Result<ParserFactory, String> {
    let env = token_env(tokenizer)?;
    let mut factory = ParserFactory::new_simple(&env).map_err(|e| format!("structured outputs: {e}"))?;
    // llguidance logs warnings to stderr by default; a library embedded in a host must not write there.
    factory.quiet();
    // Errors are returned to clients: they carry the problem, not the parser's internal state.
    factory.limits_mut().verbose_errors = false;
    Ok(factory)
}

/// llguidance's messages can span lines: a regex error draws a caret under the pattern, a grammar error quotes its
/// line with a caret. An error field is one line, so the drawings are dropped and the rest joined.
fn clean_error(message: &str) -> String {
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
    #[test]
    fn errors_are_one_line_without_drawings() {
        let regex = "at 1(8): invalid regex \"(a\" (in regex): regex parse error:\n    (a\n     ^\nerror: unclosed group\n   1 | start: /(a/\n       ^";
        assert_eq!(
            super::clean_error(regex),
            "at 1(8): invalid regex \"(a\" (in regex): regex parse error: (a error: unclosed group"
        );
    }
}
