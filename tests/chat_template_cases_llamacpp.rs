//! llama.cpp's own chat-template cases (`tests/test-chat-template.cpp`, `main_automated_tests`): 35 templates,
//! from ChatML to Seed-OSS and Granite's tool calls, each rendered with llama.cpp's six-turn conversation (and a
//! case's extra turns) and compared with the text llama.cpp expects from its Jinja engine.
//!
//! `tests/fixtures/templates/llamacpp_cases.json` holds the cases as llama.cpp wrote them (the pinned
//! llama-cpp-python 0.3.36 sdist, extracted by `scripts/llamacpp/extract_template_cases.py`); the ones llama.cpp
//! marks unsupported with Jinja are left out there. A case rendered differently must be listed in
//! `KNOWN_DIFFERENCES` with its cause, and a listed one that passes fails the test: 29 of 35 render identically,
//! the other six test llama.cpp's own system-message polyfill, which transformers (ember's reference) does not do.

use ember::model::chat_template::{ChatMessage, ChatTemplate};
use serde_json::Value;

/// Cases whose text ember does not render as llama.cpp expects, and why.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    ("mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)", SYSTEM_POLYFILL),
    ("google/gemma-7b-it", SYSTEM_POLYFILL),
    ("OrionStarAI/Orion-14B-Chat", SYSTEM_POLYFILL),
    ("Phi-3-mini", SYSTEM_POLYFILL),
    ("Phi-3-medium", SYSTEM_POLYFILL),
    ("yandex/YandexGPT-5-Lite-8B-instruct", SYSTEM_POLYFILL),
];
/// llama.cpp probes whether a template renders a system message and, when it does not (it drops it, or raises
/// "System role not supported"), moves the system text into the first user turn before rendering. transformers
/// renders what the template does, and so does ember's template engine, which this test runs. ember's chat API
/// moves the text too (`src/protocol/template_roles.rs`, `tests/template_tool_conversations.rs`), joined by
/// `"\n\n"` as Gemma's own format has it, where llama.cpp's Jinja path joins it by `"\n"`.
const SYSTEM_POLYFILL: &str = "llama.cpp moves a system message the template cannot render into the first user turn";

#[test]
fn llamacpps_template_cases_render_as_llamacpp_expects() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/templates/llamacpp_cases.json")).unwrap();
    let turn = |pair: &Value| ChatMessage::new(pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
    let conversation: Vec<ChatMessage> = fixture["conversation"].as_array().unwrap().iter().map(turn).collect();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 30, "the fixture has llama.cpp's cases");
    let mut differing = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let mut messages = conversation.clone();
        messages.extend(case["extra_conversation"].as_array().unwrap().iter().map(turn));
        let text = |key: &str| case[key].as_str().unwrap();
        let rendered = ChatTemplate::new(Some(text("template")), text("bos_token"), text("eos_token"))
            .and_then(|t| t.render(&messages, true));
        match rendered {
            Ok(output) if output == text("expected") => {}
            Ok(output) => differing.push((name, format!("expected {:?}\n     got {output:?}", text("expected")))),
            Err(e) => differing.push((name, e.to_string())),
        }
    }
    let unexpected: Vec<_> = differing.iter().filter(|(n, _)| !KNOWN_DIFFERENCES.iter().any(|(k, _)| k == n)).collect();
    assert!(unexpected.is_empty(), "renders differ from llama.cpp's:\n{unexpected:#?}");
    let gone: Vec<_> = KNOWN_DIFFERENCES.iter().filter(|(k, _)| !differing.iter().any(|(n, _)| n == k)).collect();
    assert!(gone.is_empty(), "listed differences that no longer occur: {gone:?}");
    eprintln!("{} of {} llama.cpp cases render as llama.cpp expects", cases.len() - differing.len(), cases.len());
}
