//! Arbitrary bytes as a chat template's source (up to the first NUL) and a user message (after it), compiled and
//! rendered within the default `chat_template_limits`: a template is code from a model file, and whatever it
//! says, compiling and rendering it must end in a prompt or an error, never a crash, a hang or an allocation past
//! the limits (libFuzzer's -rss_limit_mb and -timeout catch those). `fuzz/template_source.dict` gives it Jinja's words.
#![no_main]

use ember::model::chat_template::{ChatMessage, ChatTemplate};

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let (source, content) = text.split_once('\0').unwrap_or((&text, "hi"));
    let Ok(template) = ChatTemplate::new(Some(source), "<s>", "</s>") else { return };
    let messages = [ChatMessage::new("system", "You are helpful."), ChatMessage::new("user", content)];
    let _ = template.render(&messages, true);
    let _ = template.render_with_tools(&messages, Some(&serde_json::json!([{"type": "function"}])), false);
});
