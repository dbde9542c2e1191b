//! Arbitrary bytes as a list of chat messages (role and content split at NUL bytes), rendered with the real
//! models' templates (SmolLM2's and Gemma 3's). Models from the default paths (run from the repository root).
#![no_main]

use std::sync::OnceLock;

use ember::model::chat_template::{ChatMessage, ChatTemplate};
use ember::model::Model;

#[path = "../../tests/common/parser_checks.rs"]
mod parser_checks;

fn templates() -> &'static [ChatTemplate; 2] {
    static TEMPLATES: OnceLock<[ChatTemplate; 2]> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let load = |path: Option<&str>| {
            Model::load(path.map(std::path::Path::new)).unwrap_or_else(|e| panic!("{e}")).chat_template
        };
        [load(None), load(Some("models/gemma-3-270m-q4_k_m.gguf"))]
    })
}

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let Some((&flags, rest)) = bytes.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let parts: Vec<&str> = text.split('\0').collect();
    let messages: Vec<ChatMessage> =
        parts.chunks(2).map(|p| ChatMessage::new(p[0], p.get(1).copied().unwrap_or(""))).collect();
    parser_checks::check_template(&templates()[usize::from(flags & 1)], &messages, flags & 2 != 0);
});
