//! The request fields that shape the output text, on the real model: `include_stop_str_in_output` (stop strings
//! and stop tokens), `skip_special_tokens`, and `suffix` (refused by SmolLM2, which has no infill tokens). Every
//! request is greedy (`temperature: 0`), so two runs of one request give the same tokens.

mod common;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::{ApiRequest, ChunkPoll};
use serde_json::{json, Value};

/// SmolLM2's `<|im_end|>`: a control token, and one of its end-of-generation tokens.
const IM_END: u32 = 2;

fn engine() -> Engine {
    common::engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() })
}

/// A greedy completion of "One, two, three," with `extra` fields.
fn body(extra: Value) -> Value {
    let mut body = json!({"prompt": "One, two, three,", "max_tokens": 16, "temperature": 0, "ignore_eos": true});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// The whole body of `body`'s request.
fn whole(e: &Engine, body: &Value) -> Value {
    let request = ApiRequest::submit(e, &body.to_string(), None).unwrap_or_else(|err| panic!("{body}: {err}"));
    request.handle().wait();
    serde_json::from_str(&request.response_json().unwrap()).unwrap()
}

/// The text a stream of `body` delivers, its pieces joined.
fn streamed(e: &Engine, body: &Value) -> String {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let mut request = ApiRequest::submit(e, &body.to_string(), None).unwrap();
    let mut text = String::new();
    loop {
        match request.next_chunk_json(None) {
            ChunkPoll::Chunk(json) => {
                let chunk: Value = serde_json::from_str(&json).unwrap();
                text.push_str(chunk["choices"][0]["text"].as_str().unwrap_or(""));
            }
            ChunkPoll::Done => return text,
            ChunkPoll::TimedOut => panic!("an unbounded wait timed out"),
        }
    }
}

fn text(body: &Value) -> &str {
    body["choices"][0]["text"].as_str().unwrap()
}

#[test]
fn include_stop_str_in_output_keeps_the_matched_stop_string() {
    let e = engine();
    let free = whole(&e, &body(json!({})));
    let full = text(&free);
    // A stop string from the middle of the greedy output, starting at its first occurrence.
    let start = full.char_indices().nth(4).map(|(i, _)| i).unwrap();
    let stop: String = full[start..].chars().take(3).collect();
    let at = full.find(&stop).unwrap();
    let dropped = whole(&e, &body(json!({"stop": [&stop]})));
    assert_eq!(text(&dropped), &full[..at], "the default: the stop string is not output");
    let kept = whole(&e, &body(json!({"stop": [&stop], "include_stop_str_in_output": true})));
    assert_eq!(text(&kept), &full[..at + stop.len()], "{full:?} stopped at {stop:?}");
    assert_eq!(kept["choices"][0]["finish_reason"], "stop");
    assert_eq!(kept["usage"]["completion_tokens"], dropped["usage"]["completion_tokens"], "the same tokens");
    let kept_body = body(json!({"stop": [&stop], "include_stop_str_in_output": true}));
    assert_eq!(streamed(&e, &kept_body), text(&kept), "a stream delivers the same text");
    let off = whole(&e, &body(json!({"stop": [&stop], "include_stop_str_in_output": false})));
    assert_eq!(text(&off), text(&dropped));
}

#[test]
fn a_stop_tokens_text_is_kept_with_include_stop_str_in_output() {
    let e = engine();
    // The greedy tokens, read from the engine's side; the third becomes a stop token.
    let request = ApiRequest::submit(&e, &body(json!({})).to_string(), None).unwrap();
    request.handle().wait();
    let ids = request.handle().choices()[0].token_ids.clone();
    let stop_id = ids[2];
    let piece = common::model().tokenizer.decode(&ids[2..3], false).unwrap();
    let before = common::model().tokenizer.decode(&ids[..2], false).unwrap();
    let dropped = whole(&e, &body(json!({"stop_token_ids": [stop_id]})));
    assert_eq!(text(&dropped), before);
    let kept = whole(&e, &body(json!({"stop_token_ids": [stop_id], "include_stop_str_in_output": true})));
    assert_eq!(text(&kept), format!("{before}{piece}"));
    assert_eq!(
        (kept["usage"]["completion_tokens"].as_u64(), dropped["usage"]["completion_tokens"].as_u64()),
        (Some(3), Some(3))
    );
}

#[test]
fn skip_special_tokens_false_writes_control_tokens() {
    let e = engine();
    // `<|im_end|>` forced three times (past end-of-generation with ignore_eos).
    let forced = json!({"logit_bias": {IM_END.to_string(): 100}, "max_tokens": 3});
    let skipped = whole(&e, &body(forced.clone()));
    assert_eq!(text(&skipped), "", "control tokens write nothing by default");
    let mut written = forced.clone();
    written["skip_special_tokens"] = json!(false);
    assert_eq!(text(&whole(&e, &body(written.clone()))), "<|im_end|>".repeat(3));
    assert_eq!(streamed(&e, &body(written)), "<|im_end|>".repeat(3));
    let mut explicit = forced;
    explicit["skip_special_tokens"] = json!(true);
    assert_eq!(text(&whole(&e, &body(explicit))), "");
}

#[test]
fn an_end_of_generation_tokens_text_needs_both_fields() {
    let e = engine();
    // `<|im_end|>` forced once, now ending the choice (no ignore_eos).
    let base = json!({"prompt": "Hi", "max_tokens": 4, "temperature": 0, "logit_bias": {IM_END.to_string(): 100}});
    let with = |fields: Value| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        let r = whole(&e, &b);
        assert_eq!(
            (r["choices"][0]["finish_reason"].as_str(), r["usage"]["completion_tokens"].as_u64()),
            (Some("stop"), Some(1))
        );
        text(&r).to_owned()
    };
    assert_eq!(with(json!({})), "");
    assert_eq!(with(json!({"include_stop_str_in_output": true})), "", "a control token has no text by default");
    assert_eq!(with(json!({"skip_special_tokens": false})), "", "a stop token is not output by default");
    assert_eq!(with(json!({"include_stop_str_in_output": true, "skip_special_tokens": false})), "<|im_end|>");
}

#[test]
fn suffix_is_refused_by_a_model_without_infill_tokens() {
    let e = engine();
    assert!(common::model().tokenizer.fim_tokens().is_none(), "SmolLM2's GGUF names no FIM tokens");
    let error = ApiRequest::submit(&e, r#"{"prompt": "def add(a, b):", "suffix": "    return c"}"#, None).unwrap_err();
    assert_eq!((error.param.as_deref(), error.error_type), (Some("suffix"), "invalid_request_error"));
    assert!(error.message.contains("fill-in-the-middle"), "{}", error.message);
    // The empty suffix (OpenAI's default) asks for nothing.
    let r = whole(&e, &json!({"prompt": "def add(a, b):", "suffix": "", "max_tokens": 2, "temperature": 0}));
    assert_eq!(r["usage"]["completion_tokens"], 2);
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "suffix": "x"});
    let error = ApiRequest::submit(&e, &chat.to_string(), None).unwrap_err();
    assert_eq!(error.param.as_deref(), Some("suffix"));
}
