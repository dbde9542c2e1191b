//! What one input to each parser a host feeds must do: give `Ok` or `Err`, never panic, and keep the invariants
//! below. Shared by the seeded mutation tests (`tests/fuzz_seeded.rs`) and the cargo-fuzz targets (`fuzz/`), which
//! include this file with `#[path]`, so that both check the same things.
#![allow(dead_code)] // each includer uses some of the checks

use ember::engine::{Engine, EngineConfig};
use ember::model::chat_template::{ChatMessage, ChatTemplate};
use ember::model::gguf::GgufFile;
use ember::model::llama::LlamaConfig;
use ember::model::tokenizer::{TokenId, Tokenizer};
use ember::protocol::ApiRequest;

/// What reading a GGUF file got to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgufOutcome {
    Refused,
    Opened,
    /// Opened, and its vocabulary loaded and encoded.
    Tokenizer,
}

/// Reads `bytes` as a GGUF file and, if it opens, what a loader reads next: hyperparameters, vocabulary, chat
/// template.
pub fn check_gguf(bytes: &[u8]) -> GgufOutcome {
    let Ok(file) = GgufFile::from_bytes(bytes) else { return GgufOutcome::Refused };
    let _ = LlamaConfig::from_gguf(&file);
    let _ = ChatTemplate::from_gguf(&file);
    let Ok(tok) = Tokenizer::from_gguf(&file) else { return GgufOutcome::Opened };
    let ids = tok.encode("abba<|im_end|>", true);
    let _ = tok.decode(&ids, true);
    GgufOutcome::Tokenizer
}

/// Reads `text` as an engine configuration; whether it was accepted (parsed and consistent).
pub fn check_config(text: &str) -> bool {
    EngineConfig::from_json(text).is_ok_and(|c| c.validate().is_ok())
}

/// Submits `text` as a request body, as `engine_submit` does; a request that is served is cancelled at once (what
/// is checked is the reading of requests, not generation). Whether it was served. A refusal must carry a message.
pub fn check_request(engine: &Engine, text: &str) -> bool {
    match ApiRequest::submit(engine, text, None) {
        Ok(request) => {
            request.handle().cancel();
            request.handle().wait();
            assert!(request.response_json().is_some(), "a finished request has a response");
            true
        }
        Err(e) => {
            let body = e.to_json();
            assert!(body.contains("\"message\""), "an error without a message: {body}");
            false
        }
    }
}

/// Encodes `text` both ways (special tokens parsed and not): every id is in the vocabulary, and the ids decode.
pub fn check_text(tok: &Tokenizer, text: &str) {
    for parse_special in [false, true] {
        let ids = tok.encode(text, parse_special);
        assert!(ids.iter().all(|&id| (id as usize) < tok.vocab_size()), "an id outside the vocabulary");
        tok.decode(&ids, true).expect("the encoding of a text decodes");
    }
}

/// Decodes arbitrary ids: those in the vocabulary decode, one outside it is an error.
pub fn check_ids(tok: &Tokenizer, ids: &[TokenId], include_special: bool) {
    let decoded = tok.decode(ids, include_special);
    let in_range = ids.iter().all(|&id| (id as usize) < tok.vocab_size());
    assert_eq!(decoded.is_ok(), in_range, "{ids:?}: {decoded:?}");
}

/// Renders `messages`; whether the template rendered them (a template may refuse, e.g. roles out of order).
pub fn check_template(template: &ChatTemplate, messages: &[ChatMessage], add_generation_prompt: bool) -> bool {
    template.render(messages, add_generation_prompt).is_ok()
}
