//! Log probabilities on the real model, through the OpenAI layer: the numbers against llama.cpp's distributions
//! (`greedy_ref.json`, the same semantics: log-softmax of the raw logits over the whole vocabulary), the two
//! response shapes, streams against whole bodies, and sampling left exactly as it was.

mod common;

use std::time::Duration;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::{ApiRequest, ChunkPoll};
use serde::Deserialize;
use serde_json::{json, Value};

const GREEDY_REF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/greedy_ref.json");

#[derive(Deserialize)]
struct GreedyRef {
    cases: Vec<RefCase>,
}

#[derive(Deserialize)]
struct RefCase {
    prompt_ids: Vec<u32>,
    generated_ids: Vec<u32>,
    top5_per_position: Vec<RefPosition>,
}

#[derive(Deserialize)]
struct RefPosition {
    top5: Vec<RefToken>,
}

#[derive(Deserialize)]
struct RefToken {
    id: u32,
    bytes: Vec<u8>,
    logprob: f64,
}

fn engine() -> Engine {
    common::engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() })
}

fn submit(e: &Engine, body: &Value) -> ApiRequest {
    ApiRequest::submit(e, &body.to_string(), None).unwrap_or_else(|err| panic!("{body}: {err}"))
}

fn whole(request: &ApiRequest) -> Value {
    request.handle().wait();
    serde_json::from_str(&request.response_json().unwrap()).unwrap()
}

fn chunks(request: &mut ApiRequest) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        match request.next_chunk_json(Some(Duration::from_secs(600))) {
            ChunkPoll::Chunk(json) => out.push(serde_json::from_str(&json).unwrap()),
            ChunkPoll::Done => return out,
            ChunkPoll::TimedOut => panic!("no chunk in 10 minutes"),
        }
    }
}

fn bytes_of(v: &Value) -> Vec<u8> {
    v.as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect()
}

/// Greedy tokens teacher-forced on llama.cpp's own prompts: each position's log probability and top five against
/// the reference's, while the tokens agree. 8-bit activations move a probability by up to ~0.12 at confident
/// positions (`generate_greedy.rs`), so single positions get that much room and the mean a tenth of it.
#[test]
fn greedy_logprobs_follow_llama_cpp_distributions() {
    let text = std::fs::read_to_string(GREEDY_REF).unwrap();
    let reference: GreedyRef = serde_json::from_str(&text).unwrap();
    let e = engine();
    let (mut compared, mut sum_dp, mut worst_dp) = (0usize, 0f64, 0f64);
    for (n, case) in reference.cases.iter().enumerate().take(4) {
        let body = json!({"prompt": case.prompt_ids, "max_tokens": 12, "temperature": 0, "logprobs": 5});
        let request = submit(&e, &body);
        let v = whole(&request);
        let lp = &v["choices"][0]["logprobs"];
        let ours = request.handle().choices()[0].token_ids.clone();
        let positions = lp["token_logprobs"].as_array().unwrap();
        assert!(!positions.is_empty(), "case {n}: {v}");
        for (i, (logprob, top)) in positions.iter().zip(lp["top_logprobs"].as_array().unwrap()).enumerate() {
            let theirs = &case.top5_per_position[i];
            // Compare while both generated the same tokens.
            if case.generated_ids.get(i) != Some(&theirs.top5[0].id) || ours.get(i) != Some(&case.generated_ids[i]) {
                break;
            }
            let logprob = logprob.as_f64().unwrap();
            let dp = (logprob.exp() - theirs.top5[0].logprob.exp()).abs();
            assert!(
                dp < 0.15,
                "case {n} position {i}: p {} vs llama.cpp {}",
                logprob.exp(),
                theirs.top5[0].logprob.exp()
            );
            sum_dp += dp;
            worst_dp = worst_dp.max(dp);
            compared += 1;
            // The top map: five alternatives, the greedy token among them with the same number, llama.cpp's most
            // likely token too.
            let top = top.as_object().unwrap();
            assert!(top.len() == 5, "case {n} position {i}: {top:?}");
            let greedy_text = String::from_utf8_lossy(&theirs.top5[0].bytes).into_owned();
            assert_eq!(top.get(&greedy_text).and_then(Value::as_f64), Some(logprob), "case {n} position {i}");
            assert!(top.values().all(|x| x.as_f64().unwrap() <= logprob + 1e-6), "greedy is the most likely");
        }
    }
    println!("{compared} positions: mean |Δp| {:.4}, max {:.4}", sum_dp / compared as f64, worst_dp);
    assert!(compared >= 20, "only {compared} positions compared");
    assert!(sum_dp / (compared as f64) < 0.02, "mean |Δp| {}", sum_dp / compared as f64);
}

/// The chat shape: one entry per token of the text, its bytes adding up to the text, exactly `top_logprobs`
/// alternatives in order, the sampled token's number the same as among them when it is; a stop string cuts the
/// logprobs where it cuts the text.
#[test]
fn chat_logprobs_cover_the_text_token_by_token() {
    let e = engine();
    for (stop, top_n) in [(None, 3), (Some("Paris"), 0), (Some(","), 20)] {
        let mut body = json!({"messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 24, "temperature": 0, "logprobs": true, "top_logprobs": top_n});
        if let Some(stop) = stop {
            body["stop"] = json!(stop);
        }
        let v = whole(&submit(&e, &body));
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
        assert_eq!(v["choices"][0]["logprobs"]["refusal"], Value::Null);
        let mut all_bytes = Vec::new();
        for t in content {
            let bytes = bytes_of(&t["bytes"]);
            assert_eq!(t["token"].as_str().unwrap(), String::from_utf8_lossy(&bytes), "{t}");
            let logprob = t["logprob"].as_f64().unwrap();
            assert!(logprob <= 0.0, "{t}");
            let top = t["top_logprobs"].as_array().unwrap();
            assert_eq!(top.len(), top_n, "{t}");
            let numbers: Vec<f64> = top.iter().map(|a| a["logprob"].as_f64().unwrap()).collect();
            assert!(numbers.windows(2).all(|w| w[0] >= w[1]), "most likely first: {t}");
            if let Some(first) = top.first() {
                // Greedy: the sampled token is the most likely one.
                assert_eq!((first["bytes"].clone(), first["logprob"].as_f64()), (t["bytes"].clone(), Some(logprob)));
            }
            all_bytes.extend(bytes);
        }
        // The tokens' bytes hold the text; past it, at most part of the last token (a stop string inside it).
        assert!(
            all_bytes.starts_with(text.as_bytes()),
            "{stop:?}: {text:?} vs {:?}",
            String::from_utf8_lossy(&all_bytes)
        );
        let last_len = content.last().map_or(0, |t| bytes_of(&t["bytes"]).len());
        assert!(all_bytes.len() - text.len() < last_len.max(1), "{stop:?}: logprobs past the text");
        let completion_tokens = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
        // Every generated token is there but an end-of-generation token or the tokens of a stop string.
        assert!(content.len() <= completion_tokens && content.len() + 2 >= completion_tokens.min(24), "{v}");
    }
    let v = whole(&submit(&e, &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})));
    assert_eq!(v["choices"][0]["logprobs"], Value::Null, "not asked for: null");
}

/// A stream's logprobs, chunk after chunk, are the whole body's, in both shapes; `text_offset` continues across
/// chunks and points at each token's text.
#[test]
fn streamed_logprobs_add_up_to_the_whole_body() {
    let e = engine();
    let body = json!({"prompt": "The three primary colors are", "max_tokens": 20, "temperature": 0, "logprobs": 2});
    let v = whole(&submit(&e, &body));
    let whole_lp = &v["choices"][0]["logprobs"];
    let text = v["choices"][0]["text"].as_str().unwrap();
    let mut streamed = submit(
        &e,
        &json!({"prompt": "The three primary colors are", "max_tokens": 20,
        "temperature": 0, "logprobs": 2, "stream": true}),
    );
    let (mut tokens, mut numbers, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for c in chunks(&mut streamed) {
        let lp = &c["choices"][0]["logprobs"];
        if lp.is_null() {
            continue;
        }
        tokens.extend(lp["tokens"].as_array().unwrap().clone());
        numbers.extend(lp["token_logprobs"].as_array().unwrap().clone());
        tops.extend(lp["top_logprobs"].as_array().unwrap().clone());
        offsets.extend(lp["text_offset"].as_array().unwrap().clone());
    }
    assert_eq!(Value::from(tokens.clone()), whole_lp["tokens"]);
    assert_eq!(Value::from(numbers), whole_lp["token_logprobs"]);
    assert_eq!(Value::from(tops.clone()), whole_lp["top_logprobs"]);
    assert_eq!(Value::from(offsets.clone()), whole_lp["text_offset"]);
    let chars: Vec<char> = text.chars().collect();
    for ((token, offset), top) in tokens.iter().zip(&offsets).zip(&tops) {
        let token = token.as_str().unwrap();
        let at: String = chars[offset.as_u64().unwrap() as usize..].iter().collect();
        if !token.contains('\u{FFFD}') {
            assert!(at.starts_with(token), "offset {offset} of {text:?} does not start with {token:?}");
        }
        // Two alternatives plus the sampled token, which greedy makes one of them.
        assert_eq!(top.as_object().unwrap().len(), 2, "{top}");
    }
    // The chat shape streams too: each content chunk carries the logprobs of its own tokens.
    let mut chat = submit(
        &e,
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
        "temperature": 0, "logprobs": true, "top_logprobs": 1, "stream": true}),
    );
    let mut content = String::new();
    for c in chunks(&mut chat) {
        let choice = &c["choices"][0];
        match choice["delta"]["content"].as_str() {
            Some(piece) if !piece.is_empty() => {
                let entries = choice["logprobs"]["content"].as_array().unwrap();
                let bytes: Vec<u8> = entries.iter().flat_map(|t| bytes_of(&t["bytes"])).collect();
                assert!(bytes.starts_with(piece.as_bytes()), "{c}");
                content.push_str(piece);
            }
            _ => assert!(choice["logprobs"].is_null(), "{c}"),
        }
    }
    assert!(!content.is_empty());
}

/// Asking for logprobs changes nothing about what is sampled: the same seeded request gives the same text with
/// and without them, alone and batched with greedy requests that take the device-argmax path without them.
#[test]
fn logprobs_leave_sampling_unchanged() {
    let e = engine();
    let sampled = |logprobs: bool| {
        let mut body = json!({"messages": [{"role": "user", "content": "Tell me a fun fact about cats."}],
            "max_tokens": 24, "temperature": 1.0, "top_p": 0.9, "seed": 42, "n": 2});
        if logprobs {
            body["logprobs"] = json!(true);
            body["top_logprobs"] = json!(5);
        }
        submit(&e, &body)
    };
    let plain = whole(&sampled(false));
    let greedy: Vec<ApiRequest> = (0..3)
        .map(|i| {
            let body = json!({"messages": [{"role": "user", "content": common::MESSAGES[i]}], "max_tokens": 16,
                "temperature": 0});
            submit(&e, &body)
        })
        .collect();
    let with = whole(&sampled(true));
    for g in &greedy {
        g.handle().wait();
    }
    for i in 0..2 {
        assert_eq!(plain["choices"][i]["message"], with["choices"][i]["message"], "choice {i}");
        assert!(plain["choices"][i]["logprobs"].is_null());
        assert!(!with["choices"][i]["logprobs"]["content"].as_array().unwrap().is_empty());
    }
}

/// The `logprobs` arrays of a stream's chunks of choice 0, concatenated.
fn streamed_completion_logprobs(chunks: &[Value]) -> Value {
    let mut joined = json!({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []});
    for c in chunks {
        let lp = &c["choices"][0]["logprobs"];
        if lp.is_null() {
            continue;
        }
        for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
            let more = lp[key].as_array().unwrap().clone();
            joined[key].as_array_mut().unwrap().extend(more);
        }
    }
    joined
}

/// `echo` with `logprobs` (the legacy API's way to score a text): the prompt's tokens lead the choice's logprobs,
/// the first with `null`s, each offset pointing at its token in the echoed text; the completion's continue after
/// it. A stream carries the same, the prompt's in its first chunk. The scores are those a prompt's generation
/// would give: teacher-forcing the prompt and its greedy continuation scores the continuation as it was sampled.
#[test]
fn echo_with_logprobs_scores_the_prompt_then_the_completion() {
    let e = engine();
    let prompt = "The three primary colors are red, yellow and";
    let body = json!({"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 2, "echo": true});
    let v = whole(&submit(&e, &body));
    let choice = &v["choices"][0];
    let text = choice["text"].as_str().unwrap();
    assert!(text.starts_with(prompt) && text.len() > prompt.len(), "{text:?}");
    let lp = &choice["logprobs"];
    let tokens: Vec<&str> = lp["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let n_prompt = common::model().tokenizer.encode(prompt, true).len();
    assert_eq!(tokens.len(), n_prompt + 6);
    assert_eq!(tokens.concat(), text, "byte-level BPE: the tokens spell the text");
    assert_eq!((lp["token_logprobs"][0].clone(), lp["top_logprobs"][0].clone()), (Value::Null, Value::Null));
    let chars: Vec<char> = text.chars().collect();
    for (i, token) in tokens.iter().enumerate() {
        let offset = lp["text_offset"][i].as_u64().unwrap() as usize;
        assert!(chars[offset..].iter().collect::<String>().starts_with(token), "token {i} {token:?} at {offset}");
        if i > 0 {
            let top = lp["top_logprobs"][i].as_object().unwrap();
            assert!(top.contains_key(*token) && (2..=3).contains(&top.len()), "{i}: {top:?}");
            assert!(lp["token_logprobs"][i].as_f64().unwrap() <= 0.0);
        }
    }
    // Streamed: the first chunk is the echoed prompt with its scores, and the chunks add up to the whole body.
    let mut streamed = submit(
        &e,
        &json!({"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 2,
        "echo": true, "stream": true}),
    );
    let all = chunks(&mut streamed);
    assert_eq!(all[0]["choices"][0]["text"], prompt);
    assert_eq!(all[0]["choices"][0]["logprobs"]["tokens"].as_array().unwrap().len(), n_prompt);
    assert_eq!(&streamed_completion_logprobs(&all), lp);
    // Teacher-forced: echoing the whole text with no new token scores the completion as its generation did.
    let forced = json!({"prompt": text, "max_tokens": 1, "temperature": 0, "logprobs": 2, "echo": true});
    let f = whole(&submit(&e, &forced));
    let flp = &f["choices"][0]["logprobs"];
    for i in n_prompt..n_prompt + 6 {
        assert_eq!(flp["tokens"][i], lp["tokens"][i]);
        assert_eq!(flp["token_logprobs"][i], lp["token_logprobs"][i], "token {i}: scored as generated");
        assert_eq!(flp["top_logprobs"][i], lp["top_logprobs"][i]);
    }
}

/// vLLM's `prompt_logprobs`: per choice, `null` then one map per prompt token (the token first, with its rank,
/// then the most likely), in the whole body and in each choice's first chunk; alone, with `n`, and with echo.
#[test]
fn prompt_logprobs_in_vllm_shape_whole_and_streamed() {
    let e = engine();
    let prompt = "Water boils at one hundred degrees";
    let ids = common::model().tokenizer.encode(prompt, true);
    let body = json!({"prompt": prompt, "max_tokens": 3, "temperature": 0, "prompt_logprobs": 3, "n": 2});
    let v = whole(&submit(&e, &body));
    let first = &v["choices"][0]["prompt_logprobs"];
    let positions = first.as_array().unwrap();
    assert_eq!(positions.len(), ids.len());
    assert!(positions[0].is_null());
    for (pos, entry) in positions.iter().enumerate().skip(1) {
        let map = entry.as_object().unwrap();
        let (key, own) = map.iter().next().unwrap();
        assert_eq!(key, &ids[pos].to_string(), "position {pos}: the prompt token first");
        assert!(own["rank"].as_u64().unwrap() >= 1 && own["logprob"].as_f64().unwrap() <= 0.0);
        assert!((3..=4).contains(&map.len()), "{map:?}");
        let ranks: Vec<u64> = map.values().skip(1).map(|t| t["rank"].as_u64().unwrap()).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]) && ranks[0] <= 2, "{ranks:?}");
        let decoded: String = map[key]["decoded_token"].as_str().unwrap().to_owned();
        assert_eq!(decoded.as_bytes(), common::model().tokenizer.token_bytes(ids[pos], true).unwrap());
    }
    assert_eq!(&v["choices"][1]["prompt_logprobs"], first, "every choice of the prompt");
    assert!(v["choices"][0]["logprobs"].is_null(), "no generated-token logprobs unless asked");
    let mut streamed = submit(
        &e,
        &json!({"prompt": prompt, "max_tokens": 3, "temperature": 0,
        "prompt_logprobs": 3, "stream": true}),
    );
    let all = chunks(&mut streamed);
    assert_eq!(&all[0]["choices"][0]["prompt_logprobs"], first, "the first chunk");
    assert_eq!(all[0]["choices"][0]["text"], "");
    assert!(all[1..].iter().all(|c| c["choices"]
        .as_array()
        .unwrap()
        .iter()
        .all(|ch| ch.get("prompt_logprobs").is_none())));
    let plain = whole(&submit(&e, &json!({"prompt": prompt, "max_tokens": 3, "temperature": 0})));
    assert!(plain["choices"][0].get("prompt_logprobs").is_none(), "absent unless asked for");
}
