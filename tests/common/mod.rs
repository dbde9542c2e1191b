//! Helpers shared by the engine tests: the real model loaded once per test binary, chat prompts, engines.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use ember::engine::{Engine, EngineConfig, Logger, RequestHandle, RequestOptions, SubmitRequest};
use ember::model::chat_template::ChatMessage;
use ember::model::{Model, TokenId};

/// The real model, loaded once.
pub fn model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL.get_or_init(|| Arc::new(Model::load(None).unwrap_or_else(|e| panic!("{e}")))).clone()
}

/// The token ids of a one-message chat prompt.
pub fn chat_ids(message: &str) -> Vec<TokenId> {
    let m = model();
    let text = m.chat_template.render(&[ChatMessage::new("user", message)], true).unwrap();
    m.tokenizer.encode(&text, true)
}

/// An engine on the shared model with `config` (2 threads unless set).
pub fn engine(config: EngineConfig) -> Engine {
    let config = EngineConfig { threads: if config.threads == 0 { 2 } else { config.threads }, ..config };
    Engine::with_model(config, model(), Logger::silent()).unwrap_or_else(|e| panic!("{e}"))
}

/// A greedy request for a chat message.
pub fn greedy(message: &str, max_tokens: usize) -> SubmitRequest {
    SubmitRequest::with_options(
        chat_ids(message),
        RequestOptions { max_tokens: Some(max_tokens), ..Default::default() },
    )
}

/// `greedy`, generating exactly `tokens` tokens (`min_tokens` holds back the end): how far each sequence grows then
/// does not depend on where the model would have ended it (the tests of preemption under a tiny cache).
pub fn greedy_exactly(message: &str, tokens: usize) -> SubmitRequest {
    greedy(message, tokens).map_options(|o| RequestOptions { min_tokens: tokens, ..o })
}

/// Sixteen different short user messages.
pub const MESSAGES: [&str; 16] = [
    "What is the capital of France?",
    "hi",
    "Count from 1 to 20.",
    "List five fruits that are red.",
    "Translate 'good morning' into Spanish.",
    "What is the boiling point of water in Celsius?",
    "Write a haiku about rain.",
    "Name three primary colors.",
    "What is 7 times 8?",
    "Give me a synonym for happy.",
    "Who wrote Romeo and Juliet?",
    "What day comes after Monday?",
    "Describe the ocean in one sentence.",
    "What is the largest planet?",
    "Spell the word cat backwards.",
    "Tell me a fun fact about cats.",
];

/// Waits for a request to end and returns the token ids of its first choice.
pub fn ids_of(h: &RequestHandle) -> Vec<TokenId> {
    h.wait();
    h.choices()[0].token_ids.clone()
}

/// A real model family's chat template, from llama.cpp's `models/templates` (scripts/llamacpp/fetch-templates.sh,
/// which `make test` runs).
pub fn llamacpp_template(name: &str) -> String {
    let dir = std::env::var_os("EMBER_LLAMACPP_TEMPLATES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/templates"));
    let path = dir.join(format!("{name}.jinja"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}: run scripts/llamacpp/fetch-templates.sh", path.display()))
}

/// `body` (a JSON object) with each field of `extra` set.
pub fn with_fields(mut body: serde_json::Value, extra: &serde_json::Value) -> serde_json::Value {
    for (k, v) in extra.as_object().expect("fields are an object") {
        body[k] = v.clone();
    }
    body
}

/// The whole response body of an OpenAI request `body` submitted to `engine`, once it has ended.
pub fn whole_response(engine: &Engine, body: &serde_json::Value) -> serde_json::Value {
    let r = ember::protocol::ApiRequest::submit(engine, &body.to_string(), None)
        .unwrap_or_else(|err| panic!("{body}: {err}"));
    r.handle().wait();
    serde_json::from_str(&r.response_json().unwrap()).unwrap()
}
