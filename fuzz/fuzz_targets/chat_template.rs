//! Arbitrary bytes as a list of chat messages (role and content split at NUL bytes), rendered with the real
//! models' templates (SmolLM2's and Gemma 3's). Models from the default paths (run from the repository root).
#![no_main]

use ember::model::chat_template::ChatMessage;

#[path = "../common/models.rs"]
mod models;
#[path = "../../tests/common/parser_checks.rs"]
mod parser_checks;

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let Some((&flags, rest)) = bytes.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let parts: Vec<&str> = text.split('\0').collect();
    let messages: Vec<ChatMessage> =
        parts.chunks(2).map(|p| ChatMessage::new(p[0], p.get(1).copied().unwrap_or(""))).collect();
    parser_checks::check_template(&models::models()[usize::from(flags & 1)].chat_template, &messages, flags & 2 != 0);
});
