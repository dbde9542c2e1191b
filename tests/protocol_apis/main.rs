//! The other APIs ember serves over its one request core (`src/protocol/translate.rs`), on the real model: each
//! API's requests read as its reference says, its answers and streams in its shape, agreeing with the same
//! request made through Chat Completions (or Completions). One module per API.

#[path = "../common/mod.rs"]
mod common;

mod anthropic;
mod field_policy;
mod llama_server;
mod ollama;
mod prompt_count;
mod responses;

use std::sync::Arc;
use std::time::Duration;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::responses::ResponseStore;
use ember::protocol::{Api, ApiRequest, ChunkPoll};
use serde_json::Value;

/// An engine with room for a few short conversations.
pub fn engine() -> Engine {
    common::engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() })
}

/// Submits `body` as a request of `api`, panicking on a refusal.
pub fn submit(engine: &Engine, api: Api, body: &Value, store: &Arc<ResponseStore>) -> ApiRequest {
    ApiRequest::submit_api(engine, &body.to_string(), api, store).unwrap_or_else(|e| panic!("{body}: {}", e.to_json()))
}

/// The refusal of `body`: its OpenAI error's `param` and `message`.
pub fn refusal(engine: &Engine, api: Api, body: &Value) -> (String, String) {
    match ApiRequest::submit_api(engine, &body.to_string(), api, &Arc::new(ResponseStore::new())) {
        Ok(_) => panic!("{body} was accepted"),
        Err(e) => (e.param.unwrap_or_default(), e.message),
    }
}

/// The whole response body, once the request has ended.
pub fn whole(request: &ApiRequest) -> Value {
    request.handle().wait();
    serde_json::from_str(&request.response_json().expect("ended")).expect("a JSON body")
}

/// Every stream chunk up to `Done`, parsed; `Done` must then repeat.
pub fn chunks(request: &mut ApiRequest) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        match request.next_chunk_json(None) {
            ChunkPoll::Chunk(json) => out.push(serde_json::from_str(&json).expect("a JSON chunk")),
            ChunkPoll::Done => break,
            ChunkPoll::TimedOut => panic!("an unbounded wait timed out"),
        }
    }
    assert_eq!(request.next_chunk_json(Some(Duration::ZERO)), ChunkPoll::Done);
    out
}

/// The text of a greedy Chat Completions request with these messages and `max_tokens`.
pub fn chat_text(engine: &Engine, messages: Value, max_tokens: u64) -> String {
    let body = serde_json::json!({"messages": messages, "max_tokens": max_tokens, "temperature": 0});
    let response = common::whole_response(engine, &body);
    response["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_owned()
}
