//! Structured outputs below the engine: constraints compiled against the real SmolLM2 vocabulary, their compile
//! errors, and matchers walked token by token.

mod common;

use ember::engine::guided::{Accepted, GuidedCompiler, GuidedMatcher, GuidedRequest, GuidedSpec};
use ember::model::TokenId;
use serde_json::json;

fn compile(spec: GuidedSpec) -> Result<GuidedMatcher, String> {
    let model = common::model();
    let compiler = GuidedCompiler::new();
    compiler.compile(&model.tokenizer, &GuidedRequest::new(spec, "test")).map(|g| g.matcher())
}

/// Feeds `text`'s tokens (as the tokenizer cuts it) to a fresh matcher; returns it and the last outcome.
fn walk(spec: GuidedSpec, text: &str) -> (GuidedMatcher, Vec<Accepted>) {
    let model = common::model();
    let mut m = compile(spec).unwrap();
    let mut outcomes = Vec::new();
    for t in model.tokenizer.encode(text, false) {
        assert!(m.allows(t), "{text:?}: token {t} ({:?}) refused", model.tokenizer.token_text(t));
        outcomes.push(m.accept(t));
    }
    (m, outcomes)
}

fn id(text: &str) -> TokenId {
    common::model().tokenizer.token_to_id(text).unwrap()
}

#[test]
fn invalid_constraints_are_compile_errors_that_say_what_is_wrong() {
    for (spec, expected) in [
        (GuidedSpec::JsonSchema(json!({"type": "objekt"})), "objekt"),
        (GuidedSpec::JsonSchema(json!({"type": "integer", "minimum": 5, "maximum": 1})), "nsatisfiable"),
        (GuidedSpec::JsonSchema(json!({"$ref": "#/$defs/missing"})), "missing"),
        (GuidedSpec::JsonSchema(json!(7)), "not a number"),
        (GuidedSpec::Regex("(a".into()), "regex"),
        (GuidedSpec::Lark("start: foo".into()), "foo"),
        (GuidedSpec::Choice(vec![]), "empty"),
    ] {
        let e = compile(spec.clone()).err().unwrap_or_else(|| panic!("{spec:?} compiled"));
        assert!(e.contains(expected), "{spec:?}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn a_json_schema_matcher_accepts_a_matching_document_and_completes() {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false});
    let (m, outcomes) = walk(GuidedSpec::JsonSchema(schema), r#"{"name": "Ann", "age": 31}"#);
    assert_eq!(outcomes.last(), Some(&Accepted::Complete), "the closing brace completes the object");
    assert!(outcomes[..outcomes.len() - 1].iter().all(|o| *o == Accepted::More));
    assert!(m.is_finished());
}

#[test]
fn masks_forbid_what_the_grammar_cannot_continue_with_and_every_special_token() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let mut m = compile(GuidedSpec::JsonSchema(schema)).unwrap();
    let tokenizer = &common::model().tokenizer;
    assert!(m.allows(id("{")));
    assert!(!m.allows(id("[")) && !m.allows(id("hello")));
    let specials: Vec<TokenId> = (0..tokenizer.vocab_size() as TokenId).filter(|&t| tokenizer.is_control(t)).collect();
    assert!(specials.len() > 10);
    assert!(specials.iter().all(|&t| !m.allows(t)), "no control token may be emitted, not even end-of-generation");
    // The mask applied to a row: exactly the allowed tokens stay finite.
    let mut row = vec![0.0f32; tokenizer.vocab_size()];
    m.apply_mask(&mut row).unwrap();
    let finite: Vec<TokenId> = (0..row.len() as TokenId).filter(|&t| row[t as usize].is_finite()).collect();
    assert!(finite.contains(&id("{")) && !finite.is_empty());
    assert!(finite.iter().all(|&t| m.allows(t)));
}

#[test]
fn end_of_generation_is_allowed_exactly_where_the_grammar_may_end() {
    let eos = common::model().tokenizer.eog_ids()[0];
    let (mut m, outcomes) = walk(GuidedSpec::Regex("a+".into()), "a");
    assert_eq!(outcomes, [Accepted::More], "more a's may follow");
    assert!(m.allows(eos) && m.allows(id("a")));
    assert_eq!(m.accept(eos), Accepted::Complete);
    let mut fresh = compile(GuidedSpec::Regex("a+".into())).unwrap();
    assert!(!fresh.allows(eos), "the empty text does not match a+");
}

#[test]
fn choices_are_matched_literally_and_whole() {
    let spec = GuidedSpec::Choice(vec!["yes".into(), "no (.*)".into()]);
    let (_, outcomes) = walk(spec.clone(), "no (.*)");
    assert_eq!(outcomes.last(), Some(&Accepted::Complete));
    let mut m = compile(spec).unwrap();
    assert!(m.allows(id("yes")) && !m.allows(id("maybe")));
}

#[test]
fn a_lark_grammar_constrains_like_its_rules() {
    let grammar = "start: greeting \" \" name\ngreeting: \"hello\" | \"bye\"\nname: /[a-z]+/";
    let (mut m, _) = walk(GuidedSpec::Lark(grammar.into()), "hello bob");
    assert!(!m.allows(id("!")));
}

#[test]
fn choices_of_one_grammar_advance_independently() {
    let model = common::model();
    let compiler = GuidedCompiler::new();
    let g = compiler.compile(&model.tokenizer, &GuidedRequest::new(GuidedSpec::JsonObject, "t")).unwrap();
    let (mut a, mut b) = (g.matcher(), g.matcher());
    assert_eq!(a.accept(id("{")), Accepted::More);
    assert!(!a.allows(id("{")), "inside an object, a key comes next");
    assert!(b.allows(id("{")), "the other choice is still at the start");
}

/// The first mask is computed when the grammar is compiled (proving the grammar can begin), and every matcher
/// starts with it: the same tokens a matcher computing its own would allow.
#[test]
fn matchers_start_with_the_first_mask_computed_at_compile() {
    let model = common::model();
    let compiler = GuidedCompiler::new();
    let g = compiler.compile(&model.tokenizer, &GuidedRequest::new(GuidedSpec::Regex("[0-9]{3}".into()), "t")).unwrap();
    let m = g.matcher();
    assert!(m.has_mask(), "computed at compile");
    let (mut given, mut walked) = (g.matcher(), g.matcher());
    assert_eq!(walked.accept(id("1")), Accepted::More);
    for t in 0..model.tokenizer.vocab_size() as TokenId {
        let digits = model
            .tokenizer
            .token_text(t)
            .is_some_and(|s| (1..=3).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(given.allows(t), digits, "token {t} {:?}", model.tokenizer.token_text(t));
    }
    assert!(walked.allows(id("2")) && !walked.allows(id("a")));
}

/// Compile errors name the limit they hit, and what the grammar compiler was given is never echoed whole.
#[test]
fn refusals_name_the_limit_and_stay_short() {
    let long_regex = format!("({}", "x".repeat(100_000));
    let e = compile(GuidedSpec::Regex(long_regex)).err().unwrap();
    assert!(e.len() < 1_100 && !e.contains('\n'), "{} bytes", e.len());
    let chain: String = (0..4_001).map(|i| format!("r{i}: r{} \"a\"\n", i + 1)).collect();
    let e = compile(GuidedSpec::Lark(format!("start: r0\n{chain}r4001: \"z\""))).err().unwrap();
    assert!(e.contains("grammar_limits.max_lark_definitions (4000)"), "{e}");
}
