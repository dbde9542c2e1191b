//! SentencePiece against llama.cpp on a real vocabulary (Gemma 3 270M: 262,144 tokens, byte fallback,
//! user-defined runs of spaces, newlines and tabs, `add_space_prefix = false`): every reference text gives exactly
//! llama.cpp's ids, and decoding them gives llama.cpp's text, at once and token by token.
//!
//! Fixture: `tests/fixtures/gemma3/tokenize_ref.json` (see `tests/fixtures/README.md`); BOS is part of every
//! reference, as `add_bos_token` asks.

#[path = "common/gemma3.rs"]
mod gemma3;

use std::sync::OnceLock;

use ember::model::gguf::GgufFile;
use ember::model::tokenizer::{StreamDecoder, TokenId, Tokenizer, VocabKind};
use serde::Deserialize;

fn tokenizer() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let file = GgufFile::open(gemma3::gemma3_path()).unwrap();
        Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"))
    })
}

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<TokenId>,
    parse_special: bool,
    detokenized: String,
}

fn cases() -> Vec<Case> {
    serde_json::from_str(include_str!("fixtures/gemma3/tokenize_ref.json")).expect("tokenize_ref.json parses")
}

/// The prompt's ids as the engine builds them: BOS when the vocabulary asks for it, then the text's.
fn with_bos(tok: &Tokenizer, text: &str, parse_special: bool) -> Vec<TokenId> {
    let mut ids: Vec<TokenId> = tok.add_bos().then(|| tok.bos_id().unwrap()).into_iter().collect();
    ids.extend(tok.encode(text, parse_special));
    ids
}

#[test]
fn the_vocabulary_is_sentencepiece_with_gemma_s_specials() {
    let tok = tokenizer();
    assert_eq!(tok.kind(), VocabKind::SentencePiece);
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!((tok.bos_id(), tok.eos_id(), tok.pad_id(), tok.unknown_id()), (Some(2), Some(1), Some(0), Some(3)));
    assert!(tok.add_bos());
    // llama.cpp: "EOG tokens: 1 <eos>, 106 <end_of_turn>, 212 </s>".
    assert_eq!(tok.eog_ids(), [1, 106, 212]);
}

#[test]
fn every_reference_text_gives_llama_cpp_s_ids() {
    let tok = tokenizer();
    let cases = cases();
    assert_eq!(cases.len(), 60, "the fixture has 60 cases");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let ids = with_bos(tok, &c.text, c.parse_special);
            (ids != c.ids).then(|| {
                format!(
                    "{:?} (parse_special {}):\n  ours      {ids:?}\n  llama.cpp {:?}",
                    c.text, c.parse_special, c.ids
                )
            })
        })
        .collect();
    assert!(failures.is_empty(), "{} of {} differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn decoding_the_reference_ids_gives_llama_cpp_s_text_at_once_and_streamed() {
    let tok = tokenizer();
    for c in cases() {
        assert_eq!(tok.decode(&c.ids, true).unwrap(), c.detokenized, "{:?}", c.text);
        let mut stream = StreamDecoder::new(true);
        let mut text = String::new();
        for &id in &c.ids {
            text.push_str(stream.push(tok, id).unwrap());
        }
        text.push_str(stream.finish());
        assert_eq!(text, c.detokenized, "streamed {:?}", c.text);
    }
}
