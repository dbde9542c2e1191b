//! Streaming through the protocol on the real model: chunks are valid OpenAI chunks, their deltas add up to the
//! non-streamed text, the usage chunk comes last, cancellation and timeouts end or pause a stream cleanly.

mod common;

use std::time::Duration;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::{ApiKind, ApiRequest, ChunkPoll};
use serde_json::{json, Value};

const FINISH_REASONS: [&str; 4] = ["stop", "length", "cancelled", "error"];

fn engine(config: EngineConfig) -> Engine {
    common::engine(EngineConfig { kv_cache_tokens: 4096, ..config })
}

fn submit(e: &Engine, body: &Value) -> ApiRequest {
    ApiRequest::submit(e, &body.to_string(), None).unwrap_or_else(|err| panic!("{body}: {err}"))
}

/// Every chunk up to `Done`, parsed; `Done` must then repeat.
fn chunks(request: &mut ApiRequest) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        match request.next_chunk_json(None) {
            ChunkPoll::Chunk(json) => out.push(serde_json::from_str(&json).unwrap()),
            ChunkPoll::Done => break,
            ChunkPoll::TimedOut => panic!("an unbounded wait timed out"),
        }
    }
    assert_eq!(request.next_chunk_json(Some(Duration::ZERO)), ChunkPoll::Done);
    out
}

/// The whole body of a request, once it has ended.
fn whole(request: &ApiRequest) -> Value {
    request.handle().wait();
    serde_json::from_str(&request.response_json().unwrap()).unwrap()
}

/// Checks one chunk's shape against the OpenAI chunk objects (`ChatCompletionChunk` / `Completion`): the field
/// names and types, the id shared by the stream, the role in a chat choice's first chunk only.
fn check_chunk(chunk: &Value, kind: ApiKind, id: &str, usage_expected: bool) {
    let o = chunk.as_object().unwrap_or_else(|| panic!("not an object: {chunk}"));
    let (prefix, object) = match kind {
        ApiKind::Chat => ("chatcmpl-", "chat.completion.chunk"),
        ApiKind::Completion => ("cmpl-", "text_completion"),
    };
    assert!(o["id"].as_str().unwrap().starts_with(prefix), "{chunk}");
    assert_eq!((o["id"].as_str(), o["object"].as_str()), (Some(id), Some(object)), "{chunk}");
    assert!(o["created"].is_u64() && o["model"].is_string(), "{chunk}");
    assert_eq!(o.contains_key("usage"), usage_expected, "{chunk}");
    for choice in o["choices"].as_array().unwrap() {
        let c = choice.as_object().unwrap();
        assert!(c["index"].is_u64() && c["logprobs"].is_null(), "{chunk}");
        match &c["finish_reason"] {
            Value::Null => {}
            Value::String(reason) => assert!(FINISH_REASONS.contains(&reason.as_str()), "{chunk}"),
            other => panic!("finish_reason {other}"),
        }
        match kind {
            ApiKind::Chat => {
                let delta = c["delta"].as_object().unwrap();
                assert!(delta.keys().all(|k| k == "role" || k == "content"), "{chunk}");
                assert!(delta.get("role").is_none_or(|r| r == "assistant"), "{chunk}");
                assert!(delta.get("content").is_none_or(Value::is_string), "{chunk}");
            }
            ApiKind::Completion => assert!(c["text"].is_string(), "{chunk}"),
        }
    }
}

/// Each choice's streamed text and finish reason, after checking the per-choice order of chunks: (chat: role
/// first), pieces, one finish chunk, nothing after it.
fn assemble(chunks: &[Value], kind: ApiKind, choices: usize) -> Vec<(String, String)> {
    let mut out = vec![(String::new(), String::new()); choices];
    let mut announced = vec![false; choices];
    for chunk in chunks.iter().filter(|c| c["choices"].as_array().is_some_and(|l| !l.is_empty())) {
        let c = &chunk["choices"][0];
        let i = c["index"].as_u64().unwrap() as usize;
        assert!(out[i].1.is_empty(), "a chunk after choice {i} finished: {chunk}");
        let piece = match kind {
            ApiKind::Chat => {
                let role = c["delta"].get("role").is_some();
                assert_eq!(role, !announced[i], "the role comes in the first chunk of a choice only: {chunk}");
                announced[i] = true;
                c["delta"].get("content").and_then(Value::as_str).unwrap_or("")
            }
            ApiKind::Completion => c["text"].as_str().unwrap(),
        };
        out[i].0.push_str(piece);
        if let Some(reason) = c["finish_reason"].as_str() {
            out[i].1 = reason.to_owned();
        }
    }
    assert!(out.iter().all(|(_, reason)| !reason.is_empty()), "every choice finishes: {out:?}");
    out
}

/// The texts and finish reasons of a whole body.
fn texts(body: &Value, kind: ApiKind) -> Vec<(String, String)> {
    let text = |c: &Value| match kind {
        ApiKind::Chat => c["message"]["content"].as_str().unwrap().to_owned(),
        ApiKind::Completion => c["text"].as_str().unwrap().to_owned(),
    };
    let choices = body["choices"].as_array().unwrap();
    choices.iter().map(|c| (text(c), c["finish_reason"].as_str().unwrap().to_owned())).collect()
}

#[test]
fn greedy_streams_add_up_to_the_whole_response() {
    let e = engine(EngineConfig::default());
    let cases = [
        (ApiKind::Chat, json!({"messages": [{"role": "user", "content": "What is the capital of France?"}]}), 1),
        (ApiKind::Chat, json!({"messages": [{"role": "user", "content": "Write a haiku about rain."}], "n": 2}), 2),
        (ApiKind::Completion, json!({"prompt": ["The capital of France is", "1, 2, 3,"], "stop": ["\n"]}), 2),
    ];
    for (kind, input, choices) in cases {
        let mut body = input.clone();
        body["max_tokens"] = json!(24);
        body["temperature"] = json!(0); // greedy: the two runs give the same tokens
        let whole = whole(&submit(&e, &body));
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let mut streamed = submit(&e, &body);
        let chunks = chunks(&mut streamed);
        let id = chunks[0]["id"].as_str().unwrap().to_owned();
        for chunk in &chunks {
            check_chunk(chunk, kind, &id, true);
        }
        assert_eq!(assemble(&chunks, kind, choices), texts(&whole, kind), "{input}");
        // The usage chunk is last, alone, and agrees with the whole response's usage.
        let (last, others) = chunks.split_last().unwrap();
        assert_eq!(last["choices"], json!([]), "{input}");
        assert!(others.iter().all(|c| c["usage"].is_null() && c["choices"].as_array().unwrap().len() == 1));
        // The same counts, but for the cached tokens: the streamed repeat finds the whole request's prompt.
        let usage = &last["usage"];
        for count in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            assert_eq!(usage[count], whole["usage"][count], "{input}");
        }
        let cached = |u: &Value| u["prompt_tokens_details"]["cached_tokens"].as_u64().expect("cached_tokens");
        assert!(cached(usage) >= cached(&whole["usage"]), "{input}");
        let sum = usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap();
        assert_eq!(usage["total_tokens"].as_u64(), Some(sum));
        // The whole body can still be read after streaming.
        assert_eq!(
            texts(&serde_json::from_str(&streamed.response_json().unwrap()).unwrap(), kind),
            texts(&whole, kind)
        );
    }
}

#[test]
fn without_include_usage_there_is_no_usage_chunk_unless_the_engine_forces_it() {
    let body = json!({"prompt": "Hello", "max_tokens": 3, "stream": true});
    let e = engine(EngineConfig::default());
    let plain = chunks(&mut submit(&e, &body));
    let id = plain[0]["id"].as_str().unwrap().to_owned();
    assert!(plain.iter().all(|c| c["choices"].as_array().unwrap().len() == 1));
    plain.iter().for_each(|c| check_chunk(c, ApiKind::Completion, &id, false));
    let forced = engine(EngineConfig { force_include_usage: true, ..Default::default() });
    let chunks = chunks(&mut submit(&forced, &body));
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    assert!(chunks.last().unwrap()["usage"]["completion_tokens"].is_u64());
}

#[test]
fn a_cancelled_stream_ends_with_cancelled_and_done() {
    let e = engine(EngineConfig::default());
    let body = json!({"messages": [{"role": "user", "content": "Count to 1000."}], "ignore_eos": true,
                      "max_tokens": 2000, "stream": true, "stream_options": {"include_usage": true}});
    let mut request = submit(&e, &body);
    let first = request.next_chunk_json(None);
    assert!(matches!(first, ChunkPoll::Chunk(_)), "{first:?}");
    request.handle().cancel();
    let rest = chunks(&mut request);
    let finish = rest.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str()).unwrap();
    assert_eq!(finish, "cancelled");
    assert!(rest.last().unwrap()["usage"]["completion_tokens"].as_u64().unwrap() < 2000);
    assert_eq!(whole(&request)["choices"][0]["finish_reason"], "cancelled");
}

#[test]
fn a_request_queued_behind_another_times_out_then_streams() {
    // One sequence at a time: the second request cannot start until the first, unbounded, is cancelled.
    let e = engine(EngineConfig { max_num_seqs: 1, ..Default::default() });
    let blocker = submit(&e, &json!({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true}));
    blocker.handle().poll(None); // it is running
    let mut queued = submit(&e, &json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0, "stream": true}));
    assert_eq!(queued.next_chunk_json(Some(Duration::ZERO)), ChunkPoll::TimedOut);
    assert_eq!(queued.next_chunk_json(Some(Duration::from_millis(1))), ChunkPoll::TimedOut);
    assert!(queued.response_json().is_none(), "no whole body before the end");
    blocker.handle().cancel();
    let chunks = chunks(&mut queued);
    assert_eq!(assemble(&chunks, ApiKind::Completion, 1)[0].1, "length");
}

/// `echo`: each completion choice's text starts with its prompt (a string as given, token ids decoded), in the
/// whole body and as the first chunk of each streamed choice; usage counts only the generated tokens.
#[test]
fn echo_puts_the_prompt_before_each_choice() {
    let e = engine(EngineConfig::default());
    let ids = e.model().tokenizer.encode("Roses are red,", false);
    for prompt in [json!("Roses are red,"), json!(ids)] {
        let body = json!({"prompt": [prompt.clone(), prompt], "max_tokens": 4, "temperature": 0, "echo": true, "n": 2});
        let v = whole(&submit(&e, &body));
        let plain = whole(&submit(&e, &json!({"prompt": "Roses are red,", "max_tokens": 4, "temperature": 0})));
        let generated = plain["choices"][0]["text"].as_str().unwrap();
        for c in v["choices"].as_array().unwrap() {
            assert_eq!(c["text"].as_str().unwrap(), format!("Roses are red,{generated}"), "{v}");
        }
        assert_eq!(v["usage"]["completion_tokens"], json!(4 * plain["usage"]["completion_tokens"].as_u64().unwrap()));
        let mut stream = submit(
            &e,
            &json!({"prompt": "Roses are red,", "max_tokens": 4, "temperature": 0,
            "echo": true, "stream": true}),
        );
        let texts: Vec<String> =
            chunks(&mut stream).iter().map(|c| c["choices"][0]["text"].as_str().unwrap().to_owned()).collect();
        assert_eq!(texts[0], "Roses are red,");
        assert_eq!(texts.concat(), format!("Roses are red,{generated}"));
    }
}
