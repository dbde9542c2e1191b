//! llama-server's `POST /completion`: the answer object and what it sums up, the stream of partial objects and its
//! final `stop: true` one, `completion_probabilities`, `stop_type` and `stopping_word`, prompts of ids and
//! strings, and refusals naming llama-server's fields.

use std::sync::Arc;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::responses::ResponseStore;
use ember::protocol::tokenize::tokenize_text;
use ember::protocol::Api;
use serde_json::{json, Value};

use super::common;
use super::{chunks, engine, refusal, submit, whole};

const PROMPT: &str = "The capital of France is";

fn completion(e: &Engine, body: Value) -> Value {
    whole(&submit(e, Api::LlamaCompletion, &body, &Arc::new(ResponseStore::new())))
}

fn stream(e: &Engine, body: Value) -> Vec<Value> {
    chunks(&mut submit(e, Api::LlamaCompletion, &body, &Arc::new(ResponseStore::new())))
}

/// The text and finish reason of the same request through OpenAI's Completions.
fn completions_text(e: &Engine, prompt: Value, max_tokens: u64, extra: Value) -> (String, String) {
    let body = common::with_fields(json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}), &extra);
    let response = common::whole_response(e, &body);
    let choice = &response["choices"][0];
    (choice["text"].as_str().unwrap().to_owned(), choice["finish_reason"].as_str().unwrap().to_owned())
}

#[test]
fn a_completion_says_what_the_same_completions_request_says() {
    let e = engine();
    let answer = completion(&e, json!({"prompt": PROMPT, "n_predict": 12, "temperature": 0}));
    let (text, reason) = completions_text(&e, json!(PROMPT), 12, json!({}));
    assert_eq!(answer["content"], json!(text));
    let prompt_ids = tokenize_text(e.model(), PROMPT, true, true);
    assert_eq!(answer["tokens_evaluated"], json!(prompt_ids.len()));
    assert_eq!(answer["prompt"], json!(e.model().tokenizer.decode(&prompt_ids, true).unwrap()));
    assert_eq!((&answer["index"], &answer["id_slot"], &answer["stop"]), (&json!(0), &json!(0), &json!(true)));
    assert_eq!(answer["tokens"], json!([]), "tokens only with return_tokens");
    assert_eq!(answer["truncated"], json!(false));
    assert_eq!(answer["has_new_line"], json!(text.contains('\n')));
    let predicted = answer["tokens_predicted"].as_u64().unwrap();
    match reason.as_str() {
        "length" => assert_eq!((answer["stop_type"].as_str(), predicted), (Some("limit"), 12)),
        _ => assert_eq!(answer["stop_type"], "eos"),
    }
    assert_eq!(answer["stopping_word"], "");
    let settings = &answer["generation_settings"];
    assert_eq!(
        (&settings["n_predict"], &settings["temperature"], &settings["top_k"]),
        (&json!(12), &json!(0.0), &json!(40))
    );
    assert!(answer.get("timings").is_none(), "timings are behind the metrics gate");
    assert!(answer.get("completion_probabilities").is_none());
}

#[test]
fn the_stream_adds_up_to_the_whole_answer_and_ends_with_a_summary() {
    let e = engine();
    let body = json!({"prompt": PROMPT, "n_predict": 16, "temperature": 0, "return_tokens": true});
    let answer = completion(&e, body.clone());
    let objects = stream(&e, common::with_fields(body, &json!({"stream": true})));
    let (last, partials) = objects.split_last().unwrap();
    assert!(!partials.is_empty());
    for p in partials {
        assert_eq!((&p["stop"], &p["index"]), (&json!(false), &json!(0)), "{p}");
        assert!(p.get("generation_settings").is_none());
    }
    let content: String = partials.iter().map(|p| p["content"].as_str().unwrap()).collect();
    assert_eq!(content, answer["content"].as_str().unwrap());
    let tokens: Vec<Value> = partials.iter().flat_map(|p| p["tokens"].as_array().unwrap().clone()).collect();
    assert_eq!(Value::Array(tokens), answer["tokens"]);
    assert_eq!(answer["tokens"].as_array().unwrap().len() as u64, answer["tokens_predicted"].as_u64().unwrap());
    // The final object: llama-server's, its content and tokens already sent.
    assert_eq!((&last["stop"], &last["content"], &last["tokens"]), (&json!(true), &json!(""), &json!([])));
    for field in
        ["tokens_predicted", "tokens_evaluated", "stop_type", "stopping_word", "truncated", "has_new_line", "prompt"]
    {
        assert_eq!(last[field], answer[field], "{field}");
    }
    assert_eq!(last["generation_settings"]["stream"], json!(true));
}

#[test]
fn n_probs_gives_completion_probabilities_with_ids() {
    let e = engine();
    let body = json!({"prompt": PROMPT, "n_predict": 6, "temperature": 0, "n_probs": 3, "return_tokens": true});
    let answer = completion(&e, body.clone());
    let probs = answer["completion_probabilities"].as_array().unwrap();
    let tokens = answer["tokens"].as_array().unwrap();
    assert!(!probs.is_empty() && probs.len() <= tokens.len());
    for (p, id) in probs.iter().zip(tokens) {
        assert_eq!(&p["id"], id);
        assert!(p["logprob"].as_f64().unwrap() <= 0.0);
        assert!(p["token"].is_string() && p["bytes"].is_array());
        let top = p["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // Greedy: the sampled token is the most likely one.
        assert_eq!(top[0]["id"], p["id"]);
        for t in top {
            let keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(keys, ["id", "token", "bytes", "logprob"]);
        }
    }
    let bytes: Vec<u8> =
        probs.iter().flat_map(|p| p["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8)).collect();
    assert_eq!(String::from_utf8(bytes).unwrap(), answer["content"].as_str().unwrap());
    // Streamed, each partial carries its own tokens' probabilities, and the final object none.
    let objects = stream(&e, common::with_fields(body, &json!({"stream": true})));
    let streamed: Vec<Value> =
        objects.iter().flat_map(|o| o["completion_probabilities"].as_array().cloned().unwrap_or_default()).collect();
    assert_eq!(&streamed, probs);
    assert!(objects.last().unwrap().get("completion_probabilities").is_none());
}

#[test]
fn a_stop_word_is_named_and_left_out() {
    let e = engine();
    let (text, _) = completions_text(&e, json!(PROMPT), 12, json!({}));
    // A word the greedy output has after its start.
    let word = text.split_whitespace().nth(1).expect("a few words").to_owned();
    let answer = completion(&e, json!({"prompt": PROMPT, "n_predict": 12, "temperature": 0, "stop": ["", word]}));
    assert_eq!((answer["stop_type"].as_str(), answer["stopping_word"].as_str()), (Some("word"), Some(word.as_str())));
    assert_eq!(answer["content"].as_str().unwrap(), &text[..text.find(&word).unwrap()]);
    assert_eq!(answer["generation_settings"]["stop"], json!([word]), "llama-server drops empty stop words");
    let limit = completion(&e, json!({"prompt": PROMPT, "n_predict": 2, "temperature": 0}));
    assert_eq!((limit["stop_type"].as_str(), limit["tokens_predicted"].as_u64()), (Some("limit"), Some(2)));
    assert_eq!(limit["truncated"], json!(false), "n_predict ended it, not the context");
}

#[test]
fn an_end_of_generation_token_is_eos() {
    let e = engine();
    // A chat prompt whose answer the instruct model ends itself, within the bound.
    let prompt = common::MESSAGES
        .iter()
        .map(|m| json!(common::chat_ids(m)))
        .find(|ids| completions_text(&e, ids.clone(), 96, json!({})).1 == "stop")
        .expect("one of the messages gets a short answer");
    let answer = completion(&e, json!({"prompt": prompt, "n_predict": 96, "temperature": 0}));
    assert_eq!((answer["stop_type"].as_str(), answer["stopping_word"].as_str()), (Some("eos"), Some("")));
    assert_eq!(answer["truncated"], json!(false));
}

#[test]
fn prompts_of_ids_and_strings_are_one_prompt() {
    let e = engine();
    let head = tokenize_text(e.model(), "The capital of", true, true);
    let tail = tokenize_text(e.model(), " France is", false, true);
    let mut mixed: Vec<Value> = head.iter().map(|&id| json!(id)).collect();
    mixed.push(json!(" France is"));
    let answer = completion(&e, json!({"prompt": mixed, "n_predict": 8, "temperature": 0}));
    let ids: Vec<u32> = head.iter().chain(&tail).copied().collect();
    let (text, _) = completions_text(&e, json!(ids), 8, json!({}));
    assert_eq!(answer["content"], json!(text));
    assert_eq!(answer["tokens_evaluated"], json!(ids.len()));
    let wrapped = completion(&e, json!({"prompt": {"prompt_string": PROMPT}, "n_predict": 8, "temperature": 0}));
    let plain = completion(&e, json!({"prompt": [PROMPT], "n_predict": 8, "temperature": 0}));
    assert_eq!(wrapped["content"], plain["content"]);
}

#[test]
fn response_fields_keep_only_the_paths_asked_for() {
    let e = engine();
    let body = json!({"prompt": PROMPT, "n_predict": 3, "temperature": 0,
        "response_fields": ["content", "generation_settings/n_predict"]});
    let answer = completion(&e, body);
    let keys: Vec<&str> = answer.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["content", "generation_settings/n_predict"]);
    assert_eq!(answer["generation_settings/n_predict"], json!(3));
}

#[test]
fn timings_follow_the_metrics_gate() {
    let e =
        common::engine(EngineConfig { kv_cache_tokens: 4096, enable_per_request_metrics: true, ..Default::default() });
    let body = json!({"prompt": PROMPT, "n_predict": 4, "temperature": 0});
    assert!(completion(&e, body.clone()).get("timings").is_none(), "the request's half is closed");
    let gated = common::with_fields(body, &json!({"include_metrics": true}));
    let answer = completion(&e, gated.clone());
    let timings = &answer["timings"];
    assert_eq!(timings["predicted_n"], answer["tokens_predicted"]);
    assert_eq!(
        timings["prompt_n"].as_u64().unwrap() + timings["cache_n"].as_u64().unwrap(),
        answer["tokens_evaluated"].as_u64().unwrap()
    );
    let objects = stream(&e, common::with_fields(gated.clone(), &json!({"stream": true})));
    assert_eq!(objects.last().unwrap()["timings"]["predicted_n"], answer["tokens_predicted"]);
    assert!(objects[0].get("timings").is_none(), "partials carry timings only with timings_per_token");
    let objects = stream(&e, common::with_fields(gated, &json!({"stream": true, "timings_per_token": true})));
    assert!(objects.iter().all(|o| o["timings"].is_object()), "every object carries the timings so far");
}

#[test]
fn refusals_name_llama_servers_fields() {
    let e = engine();
    let refused =
        |extra: Value| refusal(&e, Api::LlamaCompletion, &common::with_fields(json!({"prompt": PROMPT}), &extra));
    for (extra, field) in [
        (json!({"mirostat": 2}), "mirostat"),
        (json!({"typical_p": 0.5}), "typical_p"),
        (json!({"dry_multiplier": 0.8}), "dry_multiplier"),
        (json!({"xtc_probability": 0.5}), "xtc_probability"),
        (json!({"grammar": "root ::= \"yes\""}), "grammar"),
        (json!({"samplers": ["top_k", "temperature"]}), "samplers"),
        (json!({"n_predict": 0}), "n_predict"),
        (json!({"n_probs": 50}), "n_probs"),
        (json!({"temperature": 5}), "temperature"),
        (json!({"repeat_penalty": 1.1, "repeat_last_n": 64}), "repeat_last_n"),
        (json!({"repeat_penalty": -1}), "repeat_penalty"),
        (json!({"json_schema": "yes"}), "json_schema"),
        (json!({"n_cmpl": 2}), "n_cmpl"),
        (json!({"post_sampling_probs": true}), "post_sampling_probs"),
        (json!({"lora": [{"id": 0, "scale": 1.0}]}), "lora"),
        (json!({"cache_prompt": "yes"}), "cache_prompt"),
        (json!({"slot_id": 1}), "slot_id"),
        (json!({"prompt": ["one", "two"]}), "prompt"),
        (json!({"prompt": [1, -2]}), "prompt[1]"),
    ] {
        let (param, message) = refused(extra.clone());
        assert_eq!(param, field, "{extra}: {message}");
        assert!(message.contains(field.split('[').next().unwrap()), "{extra}: {message}");
    }
}

#[test]
fn fields_without_effect_and_off_samplers_are_accepted() {
    let e = engine();
    let body = json!({"prompt": PROMPT, "n_predict": 4, "temperature": 0, "cache_prompt": true, "id_slot": -1,
        "n_keep": 0, "n_cache_reuse": 0, "mirostat": 0, "mirostat_tau": 5.0, "dry_multiplier": 0.0, "dry_base": 1.75,
        "xtc_probability": 0.0, "xtc_threshold": 0.1, "typical_p": 1.0, "min_keep": 0, "grammar": "",
        "samplers": ["dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"], "repeat_last_n": 64,
        "seed": -1, "logit_bias": [], "lora": []});
    let (text, _) = completions_text(&e, json!(PROMPT), 4, json!({}));
    assert_eq!(completion(&e, body)["content"], json!(text));
}

#[test]
fn logit_bias_takes_ids_and_strings_and_false_bans() {
    let e = engine();
    let (text, _) = completions_text(&e, json!(PROMPT), 1, json!({}));
    let first = tokenize_text(e.model(), &text, false, false)[0];
    let banned =
        completion(&e, json!({"prompt": PROMPT, "n_predict": 1, "temperature": 0, "logit_bias": [[first, false]]}));
    assert_ne!(banned["content"], json!(text));
    assert_eq!(banned["generation_settings"]["logit_bias"], json!([{"bias": -100.0, "token": first}]));
    let mut by_text = serde_json::Map::new();
    by_text.insert(text.clone(), json!(false));
    let by_text = completion(&e, json!({"prompt": PROMPT, "n_predict": 1, "temperature": 0, "logit_bias": by_text}));
    assert_eq!(by_text["content"], banned["content"]);
}

#[test]
fn n_predict_unbounded_stops_at_the_context() {
    let e = common::engine(EngineConfig { kv_cache_tokens: 64, ..Default::default() });
    let answer = completion(&e, json!({"prompt": PROMPT, "temperature": 0, "ignore_eos": true}));
    let room = 64 - answer["tokens_evaluated"].as_u64().unwrap();
    assert_eq!(answer["tokens_predicted"].as_u64(), Some(room));
    assert_eq!((answer["stop_type"].as_str(), &answer["truncated"]), (Some("limit"), &json!(true)));
    assert_eq!(answer["generation_settings"]["n_predict"], json!(-1));
    // A bound past the context is the context's too, as llama-server stops there.
    let past = completion(&e, json!({"prompt": PROMPT, "n_predict": 500, "temperature": 0, "ignore_eos": true}));
    assert_eq!((past["tokens_predicted"].as_u64(), &past["truncated"]), (Some(room), &json!(true)));
}

#[test]
fn json_schema_constrains_the_output_and_its_errors_name_it() {
    let e = engine();
    let schema = json!({"type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"],
        "additionalProperties": false});
    let answer = completion(
        &e,
        json!({"prompt": "The year the Eiffel Tower was finished, as JSON:", "n_predict": 24, "temperature": 0,
            "json_schema": schema}),
    );
    let value: Value = serde_json::from_str(answer["content"].as_str().unwrap()).expect("JSON");
    assert!(value["year"].is_i64(), "{value}");
    let (param, message) = refusal(
        &e,
        Api::LlamaCompletion,
        &json!({"prompt": PROMPT, "json_schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}),
    );
    assert_eq!(param, "json_schema", "{message}");
    assert_eq!(answer["model"], json!(e.served_model_name()), "the name /v1/models lists");
}
