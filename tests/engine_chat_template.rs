//! The engine option `chat_template` (docs/c_api.md): a template text or a file's path replaces the model's
//! for every chat request, `engine_apply_chat_template` included, and decides the tool-call format; a bad one
//! is refused naming the key before the model is read.

use std::path::PathBuf;
use std::sync::Arc;

use ember::engine::{BackendKind, Engine, EngineConfig, EngineError, Logger};
use ember::model::Model;
use ember::protocol::tokenize::apply_chat_template;

fn config(chat_template: &str) -> EngineConfig {
    EngineConfig {
        chat_template: Some(chat_template.into()),
        backend: BackendKind::Cpu,
        threads: 1,
        kv_cache_tokens: 256,
        ..Default::default()
    }
}

fn prompt(engine: &Engine, body: &str) -> String {
    let json = apply_chat_template(engine.model(), body).unwrap_or_else(|e| panic!("{e:?}"));
    serde_json::from_str::<serde_json::Value>(&json).unwrap()["prompt"].as_str().unwrap().to_owned()
}

const HELLO: &str = r#"{"messages": [{"role": "user", "content": "hello"}]}"#;

#[test]
fn a_template_text_replaces_the_models() {
    let engine =
        Engine::new(config("{{ bos_token }}[{% for m in messages %}{{ m.role }}={{ m.content }}{% endfor %}]"))
            .unwrap();
    // SmolLM2's bos text is its <|im_start|>, as the model's own template would see it.
    assert_eq!(prompt(&engine, HELLO), "<|im_start|>[user=hello]");
}

#[test]
fn a_template_file_replaces_the_models_and_brings_its_tool_format() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hermes_template.jinja");
    let shared = Arc::new(Model::load(None).unwrap());
    let engine = Engine::with_model(config(path.to_str().unwrap()), Arc::clone(&shared), Logger::silent()).unwrap();
    let tools = r#"{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}}}], "tool_choice": "auto"}"#;
    let text = prompt(&engine, tools);
    assert!(text.contains("<tools>") && text.contains("\"get_weather\""), "{text}");
    // The model the host shared keeps its own template; SmolLM2's has no tool format and refuses nothing.
    assert!(!shared.chat_template.supports_tools());
    assert!(engine.model().chat_template.supports_tools());
}

#[test]
fn a_bad_template_is_refused_naming_the_key_before_the_model_loads() {
    let missing_model =
        |template: &str| EngineConfig { model: Some("/nonexistent/model.gguf".into()), ..config(template) };
    for (template, says) in [
        ("{% for m in messages %}", "chat_template: invalid chat template"),
        ("/nonexistent/template.jinja", "neither a Jinja template"),
    ] {
        match Engine::new(missing_model(template)) {
            Err(EngineError::Config(e)) => {
                assert_eq!(e.options, ["chat_template"]);
                assert!(e.message.contains(says), "{}", e.message);
            }
            other => panic!("{template}: {other:?}"),
        }
    }
}

/// A message's keys ember does not read itself (`name`, an earlier answer's `reasoning_content`) reach the
/// template as they came, as transformers passes the whole message.
#[test]
fn other_message_keys_reach_the_template() {
    let engine = Engine::new(config(
        "{% for m in messages %}{{ m.role }}:{{ m.name }}:{{ m.reasoning_content }}:{{ m.content }};{% endfor %}",
    ))
    .unwrap();
    let body = r#"{"messages": [{"role": "user", "content": "hi", "name": "ann"},
        {"role": "assistant", "content": "yo", "reasoning_content": "greet back", "name": null}]}"#;
    assert_eq!(prompt(&engine, body), "user:ann::hi;assistant::greet back:yo;");
}
