//! Arbitrary structured-output constraints compiled against the real vocabulary, as `engine_submit` compiles
//! them: the first byte picks the kind (JSON schema, Lark grammar, regex, or choices split at newlines), the rest
//! is its text. Every input must compile or be refused with a one-line message that carries no panic (nor may a
//! panic have happened inside llguidance), within the default `grammar_limits` (libFuzzer's `-timeout` and
//! `-rss_limit_mb` catch what runs past them). When one compiles, its first matcher is stepped with the first
//! allowed token. The model comes from the default path (run from the repository root).
#![no_main]

use std::sync::OnceLock;

use ember::engine::guided::{GuidedCompiler, GuidedRequest, GuidedSpec};
use ember::model::Model;

fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| Model::load(None).unwrap_or_else(|e| panic!("{e}")))
}

fn compiler() -> &'static GuidedCompiler {
    static COMPILER: OnceLock<GuidedCompiler> = OnceLock::new();
    COMPILER.get_or_init(GuidedCompiler::new)
}

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let Some((&kind, rest)) = bytes.split_first() else { return };
    let text = String::from_utf8_lossy(rest).into_owned();
    let spec = match kind % 4 {
        // serde_json's `Value` (a dependency of ember's, not of this crate's) through its `FromStr`.
        0 => match text.parse() {
            Ok(schema) => GuidedSpec::JsonSchema(schema),
            Err(_) => return,
        },
        1 => GuidedSpec::Lark(text),
        2 => GuidedSpec::Regex(text),
        _ => GuidedSpec::Choice(text.split('\n').map(str::to_owned).collect()),
    };
    match compiler().compile(&model().tokenizer, &GuidedRequest::new(spec, "fuzz")) {
        Ok(grammar) => {
            let mut matcher = grammar.matcher();
            let vocab = model().tokenizer.vocab_size() as u32;
            if let Some(token) = (0..vocab).find(|&t| matcher.allows(t)) {
                matcher.accept(token);
            }
        }
        Err(message) => {
            assert!(!message.contains('\n'), "a multi-line message: {message:?}");
            assert!(!message.contains("panic: ") && !message.contains("<backtrace>"), "{message}");
            // What a panic inside llguidance becomes: the client is spared it, but it is a bug to look at.
            assert!(!message.contains("internal error of llguidance"), "llguidance panicked");
        }
    }
});
