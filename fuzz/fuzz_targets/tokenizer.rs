//! Arbitrary bytes to the real vocabularies (SmolLM2's byte-level BPE, Gemma 3's SentencePiece): as text
//! (lossy UTF-8) encoded and decoded, and as token ids decoded. Models from the default paths (run from the
//! repository root).
#![no_main]

use ember::model::tokenizer::TokenId;

#[path = "../common/models.rs"]
mod models;
#[path = "../../tests/common/parser_checks.rs"]
mod parser_checks;

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let Some((&which, rest)) = bytes.split_first() else { return };
    let tok = &models::models()[usize::from(which & 1)].tokenizer;
    parser_checks::check_text(tok, &String::from_utf8_lossy(rest));
    let ids: Vec<TokenId> =
        rest.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) % 300_000).collect();
    parser_checks::check_ids(tok, &ids, which & 2 != 0);
});
