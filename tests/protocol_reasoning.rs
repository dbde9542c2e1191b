//! Reasoning (docs/protocol.md, "Reasoning"), through the real model with real thinking families' templates
//! (llama.cpp's `models/templates`): the output is steered by `guided_regex` so that its reasoning and answer are
//! known, and the split is checked whole and streamed, with `reasoning_tokens` counted against the tokens'
//! own bytes (from `logprobs`).

mod common;

use std::time::Duration;

use ember::engine::{Engine, EngineConfig, Logger};
use ember::model::chat_template::TemplateChoice;
use ember::protocol::tokenize::apply_chat_template;
use ember::protocol::{ApiRequest, ChunkPoll};
use serde_json::{json, Value};

/// The real model under a family's template (its weights and tokenizer shared).
fn engine(template: &str) -> Engine {
    let choice = TemplateChoice { source: Some(common::llamacpp_template(template)), ..Default::default() };
    let model = common::model().with_chat_template(&choice).unwrap();
    let config = EngineConfig { kv_cache_tokens: 1024, threads: 2, ..Default::default() };
    Engine::with_model(config, std::sync::Arc::new(model), Logger::silent()).unwrap_or_else(|e| panic!("{e}"))
}

const QWEN3: &str = "Qwen-Qwen3-0.6B";
const QWQ: &str = "Qwen-QwQ-32B";

fn body(extra: Value) -> Value {
    let base = json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 48, "temperature": 0,
        "logprobs": true});
    common::with_fields(base, &extra)
}

use common::whole_response as whole;

/// What a stream said: its reasoning, its content, how many tokens its log probabilities named, and its usage.
#[derive(Debug, Default)]
struct Streamed {
    reasoning: Option<String>,
    content: String,
    logprob_tokens: usize,
    usage: Value,
}

fn streamed(e: &Engine, body: &Value) -> Streamed {
    let mut body = body.clone();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let mut r = ApiRequest::submit(e, &body.to_string(), None).unwrap();
    let mut s = Streamed::default();
    loop {
        match r.next_chunk_json(Some(Duration::from_secs(600))) {
            ChunkPoll::Chunk(json) => {
                let chunk: Value = serde_json::from_str(&json).unwrap();
                if !chunk["usage"].is_null() {
                    s.usage = chunk["usage"].clone();
                }
                let Some(choice) = chunk["choices"].get(0) else { continue };
                let delta = &choice["delta"];
                assert!(delta.get("content").is_none() || delta.get("reasoning_content").is_none(), "{chunk}");
                if let Some(text) = delta["reasoning_content"].as_str() {
                    s.reasoning.get_or_insert_default().push_str(text);
                }
                s.content.push_str(delta["content"].as_str().unwrap_or_default());
                s.logprob_tokens += choice["logprobs"]["content"].as_array().map_or(0, Vec::len);
            }
            ChunkPoll::Done => return s,
            ChunkPoll::TimedOut => panic!("no chunk in 10 minutes"),
        }
    }
}

/// A usage's completion counts (its prompt's cached tokens differ once the prefix cache has the prompt).
fn completion_counts(usage: &Value) -> (Value, Value) {
    (usage["completion_tokens"].clone(), usage["completion_tokens_details"].clone())
}

/// How many of the response's tokens it takes to write `prefix` of its text, from their log probabilities' bytes.
fn tokens_covering(response: &Value, prefix: &str) -> u64 {
    let mut written = 0;
    for (i, entry) in response["choices"][0]["logprobs"]["content"].as_array().unwrap().iter().enumerate() {
        written += entry["bytes"].as_array().unwrap().len();
        if written >= prefix.len() {
            return i as u64 + 1;
        }
    }
    panic!("the tokens do not cover {prefix:?}")
}

/// A Qwen 3 answer that thinks first: reasoning and content apart, whole and streamed; the reasoning tokens are
/// those up to `</think>`; with `reasoning_format: "none"` the text is as the model wrote it.
#[test]
fn a_thinking_answer_splits_into_reasoning_and_content() {
    let e = engine(QWEN3);
    let thought = "<think>\nI should greet.\n</think>";
    let steer = json!({"guided_regex": "<think>\\nI should greet\\.\\n</think>\\n\\nHello!"});
    let v = whole(&e, &body(steer.clone()));
    let message = &v["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], "\nI should greet.\n", "{v}");
    assert_eq!(message["content"], "Hello!", "{v}");
    let reasoning_tokens = tokens_covering(&v, thought);
    assert_eq!(v["usage"]["completion_tokens_details"], json!({"reasoning_tokens": reasoning_tokens}), "{v}");
    assert!(reasoning_tokens < v["usage"]["completion_tokens"].as_u64().unwrap());

    let s = streamed(&e, &body(steer.clone()));
    assert_eq!((s.reasoning.as_deref(), s.content.as_str()), (Some("\nI should greet.\n"), "Hello!"));
    assert_eq!(completion_counts(&s.usage), completion_counts(&v["usage"]), "the usage chunk has the same counts");
    let whole_logprobs = v["choices"][0]["logprobs"]["content"].as_array().unwrap().len();
    assert_eq!(s.logprob_tokens, whole_logprobs, "every token's log probability is streamed once");

    let mut inline = body(steer);
    inline["reasoning_format"] = json!("none");
    let v = whole(&e, &inline);
    let message = &v["choices"][0]["message"];
    assert_eq!(message["content"], format!("{thought}\n\nHello!"), "{v}");
    assert!(message.get("reasoning_content").is_none() && v["usage"].get("completion_tokens_details").is_none());
}

/// A template that opens `<think>` in the prompt (QwQ's, with thinking on through `reasoning_effort`): the output
/// begins inside its reasoning; free generation splits the same way whole and streamed, and reasoning cut short
/// by `max_tokens` is all reasoning, every token counted.
#[test]
fn a_prompt_that_opens_the_reasoning_starts_the_output_inside_it() {
    let e = engine(QWQ);
    let v = whole(&e, &body(json!({"reasoning_effort": "high", "guided_regex": "Hm\\.\\n</think>\\n\\nHi\\."})));
    let message = &v["choices"][0]["message"];
    assert_eq!((&message["reasoning_content"], &message["content"]), (&json!("Hm.\n"), &json!("Hi.")), "{v}");
    let reasoning_tokens = tokens_covering(&v, "Hm.\n</think>");
    assert_eq!(v["usage"]["completion_tokens_details"]["reasoning_tokens"], reasoning_tokens);

    let free = body(json!({"reasoning_effort": "high", "max_tokens": 16}));
    let v = whole(&e, &free);
    let (message, usage) = (&v["choices"][0]["message"], &v["usage"]);
    let s = streamed(&e, &free);
    assert_eq!(s.reasoning.as_deref(), message["reasoning_content"].as_str(), "{v}");
    assert_eq!(s.content, message["content"].as_str().unwrap(), "{v}");
    assert_eq!(completion_counts(&s.usage), completion_counts(usage));
    // The text as the model wrote it (the same greedy generation) says where the reasoning ends.
    let mut raw = free.clone();
    raw["reasoning_format"] = json!("none");
    let raw = whole(&e, &raw)["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    let counted = usage["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap();
    match raw.split_once("</think>") {
        Some((reasoning, _)) => {
            assert_eq!(message["reasoning_content"].as_str(), Some(reasoning).filter(|r| !r.is_empty()))
        }
        None => {
            assert_eq!(message["reasoning_content"].as_str(), Some(raw.as_str()).filter(|r| !r.is_empty()), "{v}");
            assert_eq!(
                (message["content"].as_str(), counted),
                (Some(""), usage["completion_tokens"].as_u64().unwrap())
            );
        }
    }
}

/// `reasoning_effort` reaches the template as the variable it reads (`enable_thinking` here), and is accepted with
/// a warning by a template that has no such setting; thinking off, the model's answer is all content.
#[test]
fn reasoning_effort_turns_thinking_on_and_off() {
    let e = engine(QWEN3);
    let prompt = |effort: &str| {
        let json = apply_chat_template(e.model(), &body(json!({"reasoning_effort": effort})).to_string()).unwrap();
        serde_json::from_str::<Value>(&json).unwrap()["prompt"].as_str().unwrap().to_owned()
    };
    assert!(prompt("none").ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert!(prompt("low").ends_with("<|im_start|>assistant\n"));
    let v = whole(&e, &body(json!({"reasoning_effort": "none", "guided_regex": "Hello!"})));
    assert_eq!(v["choices"][0]["message"], json!({"role": "assistant", "content": "Hello!"}), "{v}");
    assert_eq!(v["usage"]["completion_tokens_details"], json!({"reasoning_tokens": 0}));

    let smollm2 = common::engine(EngineConfig::default());
    // A template without a reasoning setting: accepted, with a warning (docs/protocol.md, "Field policy").
    let accepted = ApiRequest::submit(&smollm2, &body(json!({"reasoning_effort": "low"})).to_string(), None).unwrap();
    assert!(accepted.warnings().iter().any(|w| w.contains("reasoning_effort")), "{:?}", accepted.warnings());
    // A model that does not think is untouched: no split, no reasoning count.
    let v = whole(&smollm2, &body(json!({"max_tokens": 4})));
    assert!(v["choices"][0]["message"].get("reasoning_content").is_none());
    assert!(v["usage"].get("completion_tokens_details").is_none(), "{v}");
}

/// gpt-oss' template: the analysis channel is the reasoning and the final channel's text the content, whole and
/// streamed; `reasoning_effort` goes in as the template's own variable.
#[test]
fn gpt_oss_channels_split_into_reasoning_and_content() {
    let e = engine("openai-gpt-oss-120b");
    let prompt = apply_chat_template(e.model(), &body(json!({"reasoning_effort": "high"})).to_string()).unwrap();
    assert!(prompt.contains("Reasoning: high"), "{prompt}");
    let steer = json!({"guided_regex":
        "<\\|channel\\|>analysis<\\|message\\|>Greet\\.<\\|end\\|><\\|start\\|>assistant<\\|channel\\|>final<\\|message\\|>Hi\\."});
    let v = whole(&e, &body(steer.clone()));
    let message = &v["choices"][0]["message"];
    assert_eq!((&message["reasoning_content"], &message["content"]), (&json!("Greet."), &json!("Hi.")), "{v}");
    let reasoning_tokens = tokens_covering(&v, "<|channel|>analysis<|message|>Greet.<|end|>");
    assert_eq!(v["usage"]["completion_tokens_details"]["reasoning_tokens"], reasoning_tokens);
    let s = streamed(&e, &body(steer));
    assert_eq!((s.reasoning.as_deref(), s.content.as_str()), (Some("Greet."), "Hi."));
    assert_eq!(completion_counts(&s.usage), completion_counts(&v["usage"]));
}
