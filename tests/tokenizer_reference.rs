//! The tokenizer against llama.cpp on the real vocabulary (SmolLM2-135M-Instruct): every reference text gives
//! exactly llama.cpp's ids, special ids come from the metadata, and refused vocabularies name what is wrong.
//!
//! Fixtures: `tests/fixtures/tokenize_ref.json` (texts and ids from llama.cpp's tokenizer) and
//! `tests/fixtures/greedy_ref.json` (rendered chat prompts with their ids, and generated ids with their text); see
//! `tests/fixtures/README.md`.

use std::sync::OnceLock;

use ember::model::gguf::writer::GgufWriter;
use ember::model::gguf::{Array, GgufError, GgufFile, Value};
use ember::model::tokenizer::{keys, TokenId, TokenType, Tokenizer, TokenizerError, TokenizerSpec};
use serde::Deserialize;

fn model_tokenizer() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let path = ember::model::path::resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

#[derive(Deserialize)]
struct TokenizeCase {
    text: String,
    ids: Vec<TokenId>,
    parse_special: bool,
}

fn tokenize_cases() -> Vec<TokenizeCase> {
    serde_json::from_str(include_str!("fixtures/tokenize_ref.json")).expect("tokenize_ref.json parses")
}

#[derive(Deserialize)]
struct GreedyReference {
    cases: Vec<GreedyCase>,
}

#[derive(Deserialize)]
struct GreedyCase {
    rendered_prompt: String,
    prompt_ids: Vec<TokenId>,
    generated_ids: Vec<TokenId>,
    generated_text: String,
}

#[test]
fn every_reference_text_gives_llama_cpp_s_ids() {
    let tok = model_tokenizer();
    let cases = tokenize_cases();
    assert_eq!(cases.len(), 44, "the fixture has 44 cases");
    let mut failures = Vec::new();
    for case in &cases {
        let ids = tok.encode(&case.text, case.parse_special);
        if ids != case.ids {
            failures.push(format!(
                "{:?} (parse_special {}):\n  ours     {ids:?}\n  llama.cpp {:?}",
                case.text, case.parse_special, case.ids
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn reference_ids_decode_back_to_their_text() {
    let tok = model_tokenizer();
    for case in tokenize_cases() {
        assert_eq!(tok.decode(&case.ids, true).unwrap(), case.text, "ids {:?}", case.ids);
    }
}

#[test]
fn rendered_chat_prompts_give_llama_cpp_s_prompt_ids() {
    let tok = model_tokenizer();
    let reference: GreedyReference =
        serde_json::from_str(include_str!("fixtures/greedy_ref.json")).expect("greedy_ref.json parses");
    assert!(!reference.cases.is_empty());
    for case in &reference.cases {
        assert_eq!(tok.encode(&case.rendered_prompt, true), case.prompt_ids, "{:?}", case.rendered_prompt);
        // The generated text leaves out the final end-of-turn token, as decoding without specials does.
        assert_eq!(tok.decode(&case.generated_ids, false).unwrap(), case.generated_text);
    }
}

#[test]
fn special_ids_come_from_the_metadata() {
    let tok = model_tokenizer();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    assert_eq!(tok.pad_id(), Some(2));
    assert_eq!(tok.unknown_id(), Some(0));
    assert_eq!(tok.eot_id(), None);
    assert!(!tok.add_bos());
    // `<|endoftext|>` (0) and `<|im_end|>` (2, also EOS) end generation; `<|im_start|>` does not.
    assert_eq!(tok.eog_ids(), [0, 2]);
    assert!(tok.is_eog(2) && !tok.is_eog(1));
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_text(2), Some("<|im_end|>"));
    assert!(tok.is_control(0) && tok.is_control(16) && !tok.is_control(17));
    assert_eq!(tok.token_type(17), Some(TokenType::Normal));
    assert_eq!(tok.token_type(49152), None);
}

/// gpt-oss' harmony vocabulary ends a turn with `<|return|>` or `<|call|>`; its `<|end|>` only closes a message
/// (the reasoning, before the answer), so it does not end generation there, as llama.cpp decides. Elsewhere
/// (Phi-3's vocabulary, without the other two) `<|end|>` ends generation.
#[test]
fn harmonys_end_of_message_does_not_end_generation() {
    let eog = |specials: &[&str]| {
        let mut tokens: Vec<String> = ["a", "b"].map(String::from).to_vec();
        tokens.extend(specials.iter().map(|s| s.to_string()));
        let types: Vec<i32> = (0..tokens.len())
            .map(|i| if i < 2 { TokenType::Normal as i32 } else { TokenType::Control as i32 })
            .collect();
        let spec = TokenizerSpec { token_types: Some(&types), ..TokenizerSpec::new(&tokens, &[], "smollm") };
        let tok = Tokenizer::from_spec(&spec).unwrap();
        let eog: Vec<&str> = tok.eog_ids().iter().map(|&id| tok.token_text(id).unwrap()).collect();
        (eog.join(" "), tok.token_to_id("<|end|>").is_some_and(|id| tok.is_control(id)))
    };
    let harmony = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"];
    assert_eq!(eog(&harmony), ("<|return|> <|call|>".into(), true), "a control token still");
    assert_eq!(eog(&["<|end|>", "<|endoftext|>"]), ("<|end|> <|endoftext|>".into(), true));
    assert_eq!(eog(&["<|end|>", "<|return|>"]), ("<|end|> <|return|>".into(), true), "both are needed");
}

#[test]
fn control_tokens_decode_only_with_specials() {
    let tok = model_tokenizer();
    let ids = tok.encode("<|im_start|>user\nHi<|im_end|>", true);
    assert_eq!(tok.decode(&ids, true).unwrap(), "<|im_start|>user\nHi<|im_end|>");
    assert_eq!(tok.decode(&ids, false).unwrap(), "user\nHi");
    assert!(matches!(
        tok.decode(&[5, 49152], true),
        Err(TokenizerError::UnknownTokenId { id: 49152, vocab_size: 49152 })
    ));
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A GGUF file with a three-token byte-level vocabulary and `pre`.
fn tiny_gguf(pre: &str) -> GgufWriter {
    GgufWriter::new()
        .metadata(keys::MODEL, Value::String("gpt2".into()))
        .metadata(keys::PRE, Value::String(pre.into()))
        .metadata(keys::TOKENS, Value::Array(Array::String(strings(&["a", "b", "ab"]))))
        .metadata(keys::TOKEN_TYPE, Value::Array(Array::I32(vec![1, 1, 1])))
        .metadata(keys::MERGES, Value::Array(Array::String(strings(&["a b"]))))
        .metadata(keys::EOS_ID, Value::U32(2))
}

fn load(w: GgufWriter) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_gguf(&GgufFile::from_bytes(&w.to_bytes()).unwrap())
}

#[test]
fn a_tiny_gguf_vocabulary_loads_and_encodes() {
    let tok = load(tiny_gguf("smollm")).unwrap();
    assert_eq!(tok.encode("abba", false), [2, 1, 0]);
    assert_eq!(tok.eos_id(), Some(2));
    assert_eq!(tok.bos_id(), None);
}

#[test]
fn an_unknown_pre_tokenizer_is_refused_by_name() {
    // `viking` is a name llama.cpp knows whose split ember does not implement; `llama 3` no name at all.
    let err = load(tiny_gguf("viking")).unwrap_err();
    assert!(matches!(&err, TokenizerError::UnknownPreTokenizer { pre } if pre == "viking"), "{err}");
    assert!(err.to_string().contains("\"viking\""), "{err}");

    let tokens = strings(&["a"]);
    let err = Tokenizer::from_spec(&TokenizerSpec::new(&tokens, &[], "llama 3")).unwrap_err();
    assert!(err.to_string().contains("\"llama 3\""), "{err}");
}

#[test]
fn a_merge_naming_a_missing_token_is_refused() {
    let tokens = strings(&["a", "b"]);
    let merges = strings(&["a b", "a c"]);
    let err = Tokenizer::from_spec(&TokenizerSpec::new(&tokens, &merges, "smollm")).unwrap_err();
    match &err {
        TokenizerError::MergeNamesUnknownToken { rank, merge, part } => {
            assert_eq!((*rank, merge.as_str(), part.as_str()), (1, "a c", "c"));
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");
}

#[test]
fn other_bad_metadata_is_refused_naming_the_key() {
    let missing = |key: &str| match load(tiny_gguf("smollm").without_metadata(key)) {
        Err(TokenizerError::Gguf(GgufError::MissingKey { key })) => key,
        other => panic!("{other:?}"),
    };
    assert_eq!(missing(keys::TOKENS), keys::TOKENS);
    assert_eq!(missing(keys::MERGES), keys::MERGES);
    assert_eq!(missing(keys::PRE), keys::PRE);
    assert_eq!(missing(keys::MODEL), keys::MODEL);

    // RWKV's tokenizer: not implemented.
    let err = load(tiny_gguf("smollm").set_metadata(keys::MODEL, Value::String("rwkv".into()))).unwrap_err();
    assert!(matches!(&err, TokenizerError::UnsupportedModel { model } if model == "rwkv"), "{err}");

    let err =
        load(tiny_gguf("smollm").set_metadata(keys::TOKEN_TYPE, Value::Array(Array::I32(vec![1, 1])))).unwrap_err();
    assert!(matches!(err, TokenizerError::TokenTypeCount { types: 2, tokens: 3 }), "{err}");

    let err = load(tiny_gguf("smollm").set_metadata(keys::BOS_ID, Value::U32(3))).unwrap_err();
    assert!(matches!(err, TokenizerError::SpecialIdOutOfRange { key: keys::BOS_ID, id: 3, .. }), "{err}");
    assert!(err.to_string().contains(keys::BOS_ID));

    let err = load(tiny_gguf("smollm").set_metadata(keys::EOS_ID, Value::String("2".into()))).unwrap_err();
    assert!(matches!(&err, TokenizerError::Gguf(GgufError::WrongType { key, .. }) if key == keys::EOS_ID), "{err}");

    let err = load(tiny_gguf("smollm").metadata(keys::ADD_BOS, Value::Bool(true))).unwrap_err();
    assert!(matches!(err, TokenizerError::AddBosWithoutBos), "{err}");
}

#[test]
fn eog_ids_gather_eos_eot_and_end_markers() {
    let tokens = strings(&["<|endoftext|>", "<|im_end|>", "<end_of_turn>", "<stop>", "a"]);
    let types = [TokenType::Control, TokenType::Normal, TokenType::Control, TokenType::Control, TokenType::Normal]
        .map(|t| t as i32);
    let spec = TokenizerSpec {
        token_types: Some(&types),
        eos_id: Some(3),
        eot_id: Some(4),
        ..TokenizerSpec::new(&tokens, &[], "gpt-2")
    };
    let tok = Tokenizer::from_spec(&spec).unwrap();
    // 1 is `<|im_end|>` typed normal: an end marker all the same, made a control token, as llama.cpp does.
    assert_eq!(tok.eog_ids(), [0, 1, 2, 3, 4]);
    assert!(tok.is_control(1));
}

#[test]
fn sentencepiece_adds_the_space_prefix_at_the_start_and_after_special_tokens() {
    use ember::model::tokenizer::VocabKind;
    let tokens = strings(&["a", "\u{2581}", "\u{2581}a", "<x>"]);
    let types = [TokenType::Normal, TokenType::Normal, TokenType::Normal, TokenType::Control].map(|t| t as i32);
    let scores = [0.0, 0.0, -1.0, 0.0];
    let spec = |add_space_prefix| TokenizerSpec {
        kind: VocabKind::SentencePiece,
        token_types: Some(&types),
        scores: Some(&scores),
        add_space_prefix,
        ..TokenizerSpec::new(&tokens, &[], "")
    };
    let tok = Tokenizer::from_spec(&spec(true)).unwrap();
    assert_eq!(tok.encode("a<x>a", true), [2, 3, 2]);
    assert_eq!(tok.decode(&[2, 3, 2], true).unwrap(), " a<x> a");
    let tok = Tokenizer::from_spec(&spec(false)).unwrap();
    assert_eq!(tok.encode("a<x>a", true), [0, 3, 0]);
    assert!(matches!(
        Tokenizer::from_spec(&TokenizerSpec { scores: Some(&scores[..2]), ..spec(true) }),
        Err(TokenizerError::ScoreCount { scores: 2, tokens: 4 })
    ));
}
