//! Arbitrary bytes to the real vocabularies (SmolLM2's byte-level BPE, Gemma 3's SentencePiece): as text
//! (lossy UTF-8) encoded and decoded, and as token ids decoded. Models from the default paths (run from the
//! repository root).
#![no_main]

use std::sync::OnceLock;

use ember::model::tokenizer::{TokenId, Tokenizer};
use ember::model::Model;

#[path = "../../tests/common/parser_checks.rs"]
mod parser_checks;

fn tokenizers() -> &'static [Tokenizer; 2] {
    static TOKENIZERS: OnceLock<[Tokenizer; 2]> = OnceLock::new();
    TOKENIZERS.get_or_init(|| {
        let load = |path: Option<&str>| {
            Model::load(path.map(std::path::Path::new)).unwrap_or_else(|e| panic!("{e}")).tokenizer
        };
        [load(None), load(Some("models/gemma-3-270m-q4_k_m.gguf"))]
    })
}

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let Some((&which, rest)) = bytes.split_first() else { return };
    let tok = &tokenizers()[usize::from(which & 1)];
    parser_checks::check_text(tok, &String::from_utf8_lossy(rest));
    let ids: Vec<TokenId> =
        rest.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) % 300_000).collect();
    parser_checks::check_ids(tok, &ids, which & 2 != 0);
});
