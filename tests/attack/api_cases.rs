//! Hostile bodies of every API `engine_submit_api` reads (OpenAI Responses, Anthropic Messages, Ollama chat and
//! generate, llama-server's `/completion`): nesting past and within the parser's depth, huge arrays of content
//! blocks, integers at their extremes, `previous_response_id` absurd, unknown or chained to the context's end,
//! items and blocks of the wrong type, token ids outside the vocabulary, invalid UTF-8, and API numbers out of
//! range. Each body goes to `engine_submit_api` and to `engine_count_prompt_tokens`: both end with a clear status
//! (the refusal naming the field as the API names it) or a bounded success, never a crash.

use std::path::Path;

use serde_json::{json, Value};

use super::cases::{measured, outcome, serves, tiny_config, tiny_model, Outcome};
use super::host::{Engine, Refused};
use ember::ffi::{
    EmberStatus, EMBER_API_ANTHROPIC_MESSAGES, EMBER_API_LLAMA_COMPLETION, EMBER_API_OLLAMA_CHAT,
    EMBER_API_OLLAMA_GENERATE, EMBER_API_OPENAI, EMBER_API_RESPONSES,
};

/// What a case must end with.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// `EMBER_STATUS_INVALID_REQUEST`, its OpenAI error naming this field (its `param` starts with it, or its
    /// message says it).
    Refused(&'static str),
    /// Served to its end.
    Served,
    /// Another status, its message saying this.
    Status(EmberStatus, &'static str),
}

/// A hostile body of one API.
pub struct ApiBomb {
    pub name: String,
    pub api: u32,
    pub body: Vec<u8>,
    pub expect: Expect,
}

const U64_MAX: &str = "18446744073709551615";
const I64_MIN: &str = "-9223372036854775808";
const TWO_TO_63: &str = "9223372036854775808";

fn bomb(name: &str, api: u32, body: impl Into<Vec<u8>>, expect: Expect) -> ApiBomb {
    ApiBomb { name: name.to_owned(), api, body: body.into(), expect }
}

/// `depth` nested arrays around `inner`.
fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

/// `count` copies of `item`, comma-separated.
fn repeated(item: &str, count: usize) -> String {
    vec![item; count].join(",")
}

/// A body with a raw 0xFF byte (no UTF-8) inside the JSON string `before…after`.
fn with_invalid_utf8(before: &str, after: &str) -> Vec<u8> {
    [before.as_bytes(), &[0xFF], after.as_bytes()].concat()
}

/// The bodies past serde_json's recursion limit (128): the parser refuses them, naming the body.
const PAST_THE_PARSER: usize = 100_000;
/// Within the parser's limit: the API's reader meets them, and refuses the field.
const WITHIN_THE_PARSER: usize = 100;
/// Content blocks of one message: their text is a prompt far past the tiny model's context.
const MANY_BLOCKS: usize = 100_000;

pub fn api_bombs() -> Vec<ApiBomb> {
    use Expect::{Refused, Served, Status};
    let r = EMBER_API_RESPONSES;
    let a = EMBER_API_ANTHROPIC_MESSAGES;
    let oc = EMBER_API_OLLAMA_CHAT;
    let og = EMBER_API_OLLAMA_GENERATE;
    let l = EMBER_API_LLAMA_COMPLETION;
    let user = |content: &str| format!(r#"{{"role": "user", "content": {content}}}"#);
    let anthropic = |extra: &str| format!(r#"{{"max_tokens": 4, "messages": [{}]{extra}}}"#, user(r#""hi""#));
    let responses = |extra: &str| format!(r#"{{"input": "hi"{extra}}}"#);
    let ollama =
        |options: &str| format!(r#"{{"model": "m", "messages": [{}], "options": {options}}}"#, user(r#""hi""#));
    let llama = |prompt: &str, extra: &str| format!(r#"{{"prompt": {prompt}, "n_predict": 2{extra}}}"#);
    let mut v = vec![
        // OpenAI Responses.
        bomb(
            "responses_input_nested_past_the_parser",
            r,
            format!(r#"{{"input": {}}}"#, nested(PAST_THE_PARSER, "")),
            Refused("body"),
        ),
        bomb(
            "responses_content_nested_100_deep",
            r,
            format!(
                r#"{{"input": [{}]}}"#,
                user(&format!(r#"[{{"type": "input_text", "text": {}}}]"#, nested(WITHIN_THE_PARSER, "1")))
            ),
            Refused("input[0].content[0].text"),
        ),
        bomb(
            "responses_100000_content_parts",
            r,
            format!(
                r#"{{"input": [{}], "max_output_tokens": 2}}"#,
                user(&format!("[{}]", repeated(r#"{"type": "input_text", "text": "a"}"#, MANY_BLOCKS)))
            ),
            Refused("input"),
        ),
        bomb(
            "responses_max_output_tokens_1e308",
            r,
            responses(r#", "max_output_tokens": 1e308"#),
            Refused("max_output_tokens"),
        ),
        bomb(
            "responses_max_output_tokens_negative",
            r,
            responses(r#", "max_output_tokens": -1"#),
            Refused("max_output_tokens"),
        ),
        bomb(
            "responses_max_output_tokens_u64_max",
            r,
            responses(&format!(r#", "max_output_tokens": {U64_MAX}"#)),
            Refused("max_output_tokens"),
        ),
        bomb(
            "responses_previous_response_id_1_mib",
            r,
            responses(&format!(r#", "previous_response_id": "resp_{}""#, "x".repeat(1 << 20))),
            Refused("previous_response_id"),
        ),
        bomb(
            "responses_previous_response_id_unknown",
            r,
            responses(r#", "previous_response_id": "resp_0""#),
            Refused("previous_response_id"),
        ),
        bomb(
            "responses_previous_response_id_not_a_string",
            r,
            responses(r#", "previous_response_id": {}"#),
            Refused("previous_response_id"),
        ),
        bomb(
            "responses_input_item_of_unknown_type",
            r,
            r#"{"input": [{"type": "teleport", "to": "mars"}]}"#,
            Refused("input[0]"),
        ),
        bomb(
            "responses_invalid_utf8",
            r,
            with_invalid_utf8(r#"{"input": "a"#, r#""}"#),
            Status(EmberStatus::InvalidUtf8, "UTF-8"),
        ),
        // Anthropic Messages.
        bomb(
            "anthropic_content_nested_past_the_parser",
            a,
            format!(r#"{{"max_tokens": 4, "messages": [{}]}}"#, user(&nested(PAST_THE_PARSER, ""))),
            Refused("body"),
        ),
        bomb(
            "anthropic_content_nested_100_deep",
            a,
            format!(
                r#"{{"max_tokens": 4, "messages": [{}]}}"#,
                user(&nested(WITHIN_THE_PARSER, r#"{"type": "text", "text": "x"}"#))
            ),
            Refused("messages[0].content[0]"),
        ),
        bomb(
            "anthropic_100000_content_blocks",
            a,
            format!(
                r#"{{"max_tokens": 4, "messages": [{}]}}"#,
                user(&format!("[{}]", repeated(r#"{"type": "text", "text": "a"}"#, MANY_BLOCKS)))
            ),
            Refused("messages"),
        ),
        bomb(
            "anthropic_max_tokens_1e308",
            a,
            anthropic("").replace(r#""max_tokens": 4"#, r#""max_tokens": 1e308"#),
            Refused("max_tokens"),
        ),
        bomb(
            "anthropic_max_tokens_negative",
            a,
            anthropic("").replace(r#""max_tokens": 4"#, r#""max_tokens": -5"#),
            Refused("max_tokens"),
        ),
        bomb(
            "anthropic_max_tokens_u64_max",
            a,
            anthropic("").replace(r#""max_tokens": 4"#, &format!(r#""max_tokens": {U64_MAX}"#)),
            Refused("max_tokens"),
        ),
        bomb(
            "anthropic_thinking_budget_u64_max",
            a,
            anthropic(&format!(r#", "thinking": {{"type": "enabled", "budget_tokens": {U64_MAX}}}"#)),
            // Accepted: a budget is no separate limit in ember (docs/protocol.md); max_tokens bounds the answer.
            Served,
        ),
        bomb(
            "anthropic_invalid_utf8",
            a,
            with_invalid_utf8(r#"{"max_tokens": 4, "system": "a"#, r#"", "messages": []}"#),
            Status(EmberStatus::InvalidUtf8, "UTF-8"),
        ),
        bomb("anthropic_top_k_i64_min", a, anthropic(&format!(r#", "top_k": {I64_MIN}"#)), Refused("top_k")),
        // Ollama.
        bomb("ollama_options_not_an_object", oc, ollama("5"), Refused("options")),
        bomb("ollama_num_predict_a_string", oc, ollama(r#"{"num_predict": "9"}"#), Refused("options.num_predict")),
        bomb(
            "ollama_num_predict_i64_min",
            oc,
            ollama(&format!(r#"{{"num_predict": {I64_MIN}}}"#)),
            Refused("options.num_predict"),
        ),
        bomb(
            "ollama_num_predict_2_63",
            oc,
            ollama(&format!(r#"{{"num_predict": {TWO_TO_63}}}"#)),
            Refused("options.num_predict"),
        ),
        // -2 fills the context: bounded by the KV cache (1024 tokens).
        bomb(
            "ollama_num_predict_minus_2",
            oc,
            ollama(r#"{"num_predict": -2, "temperature": 0}"#)
                .replace(r#""model": "m""#, r#""model": "m", "stream": false"#),
            Served,
        ),
        bomb("ollama_temperature_an_array", oc, ollama(r#"{"temperature": []}"#), Refused("options.temperature")),
        bomb("ollama_stop_an_object", oc, ollama(r#"{"stop": {"a": 1}}"#), Refused("options.stop")),
        bomb("ollama_num_ctx_u64_max", oc, ollama(&format!(r#"{{"num_ctx": {U64_MAX}, "num_predict": 2}}"#)), Served),
        bomb(
            "ollama_messages_nested_past_the_parser",
            oc,
            format!(r#"{{"model": "m", "messages": {}}}"#, nested(PAST_THE_PARSER, "")),
            Refused("body"),
        ),
        bomb(
            "ollama_generate_context_out_of_range",
            og,
            format!(r#"{{"model": "m", "prompt": "hi", "context": [{U64_MAX}]}}"#),
            Refused("context"),
        ),
        bomb(
            "ollama_generate_invalid_utf8",
            og,
            with_invalid_utf8(r#"{"model": "m", "raw": true, "prompt": "a"#, r#""}"#),
            Status(EmberStatus::InvalidUtf8, "UTF-8"),
        ),
        // llama-server's /completion.
        bomb("llama_prompt_token_u32_max", l, llama("[1, 4294967295]", ""), Refused("prompt")),
        bomb("llama_prompt_token_u64_max", l, llama(&format!("[1, {U64_MAX}]"), ""), Refused("prompt")),
        bomb("llama_prompt_token_outside_the_vocabulary", l, llama("[1, 100000]", ""), Refused("prompt")),
        bomb("llama_prompt_token_negative", l, llama("[1, -1]", ""), Refused("prompt")),
        bomb("llama_prompt_token_fraction", l, llama("[1, 2.5]", ""), Refused("prompt")),
        bomb(
            "llama_prompt_100000_prompts",
            l,
            llama(&format!("[{}]", repeated("[1, 2]", MANY_BLOCKS)), ""),
            Refused("prompt"),
        ),
        bomb("llama_prompt_nested_past_the_parser", l, llama(&nested(PAST_THE_PARSER, ""), ""), Refused("body")),
        bomb("llama_n_probs_2_63", l, llama(r#""hi""#, &format!(r#", "n_probs": {TWO_TO_63}"#)), Refused("n_probs")),
        bomb("llama_n_probs_negative", l, llama(r#""hi""#, r#", "n_probs": -1"#), Refused("n_probs")),
        // llama-server reads any negative n_predict as no limit: the context bounds the answer.
        bomb(
            "llama_n_predict_i64_min",
            l,
            llama(r#""hi""#, "").replace(r#""n_predict": 2"#, &format!(r#""n_predict": {I64_MIN}"#)),
            Served,
        ),
        bomb(
            "llama_n_predict_minus_2",
            l,
            llama(r#""hi""#, "").replace(r#""n_predict": 2"#, r#""n_predict": -2"#),
            Served,
        ),
        // API numbers out of range.
        bomb("api_number_8", 8, responses(""), Status(EmberStatus::InvalidArgument, "api = 8")),
        bomb("api_number_u32_max", u32::MAX, responses(""), Status(EmberStatus::InvalidArgument, "api = 4294967295")),
        bomb(
            "openai_invalid_utf8",
            EMBER_API_OPENAI,
            with_invalid_utf8(r#"{"prompt": "a"#, r#""}"#),
            Status(EmberStatus::InvalidUtf8, "UTF-8"),
        ),
    ];
    // A tool call's input must be an object, whatever else it is.
    for (tag, input) in [("array", "[1]"), ("string", r#""{}""#), ("null", "null"), ("number", "1e308")] {
        let turns = format!(
            r#"[{}, {{"role": "assistant", "content": [{{"type": "tool_use", "id": "t1", "name": "f", "input": {input}}}]}}]"#,
            user(r#""hi""#)
        );
        v.push(bomb(
            &format!("anthropic_tool_use_input_{tag}"),
            a,
            format!(r#"{{"max_tokens": 4, "messages": {turns}}}"#),
            Refused("messages[1].content[0].input"),
        ));
    }
    v
}

/// The chained case's name: Responses continuing each other through `previous_response_id` until the stored
/// conversation fills the context.
pub const CHAINED: &str = "responses_previous_response_id_chained_to_the_context";
/// The chain's context: the KV cache bounds the longest request.
const CHAIN_CONTEXT: usize = 1024;
/// More links than that context can hold (each adds a turn of a few tokens, and one generated token).
const MOST_LINKS: usize = 2000;

/// Runs the case `name`: the bombs', or the chained one.
pub fn api_case(name: &str, dir: &Path) -> Result<Outcome, String> {
    let (engine, result) = if name == CHAINED {
        // The real model, whose context holds a long chain (the tiny one's 256 tokens hold two links).
        let engine = Engine::new(&json!({"threads": 1, "kv_cache_tokens": CHAIN_CONTEXT}))
            .map_err(|r| format!("the engine did not load: {}", r.message))?;
        let result = chained(&engine)?;
        (engine, result)
    } else {
        let bomb = api_bombs().into_iter().find(|b| b.name == name).ok_or(format!("no api case {name}"))?;
        let engine = Engine::new(&tiny_config(&tiny_model(dir, None)))
            .map_err(|r| format!("the engine did not load: {}", r.message))?;
        let result = bomb_case(&engine, &bomb)?;
        (engine, result)
    };
    serves(&engine, true)?;
    Ok(result)
}

fn bomb_case(engine: &Engine, bomb: &ApiBomb) -> Result<Outcome, String> {
    let (submitted, ms, peak) = measured(|| engine.submit_api(bomb.api, &bomb.body).map(|request| request.finish()));
    let refusal = match (submitted, bomb.expect) {
        (Ok(served), Expect::Served) => served.map(|v| v.to_string().chars().take(200).collect())?,
        (Ok(_), expect) => return Err(format!("accepted; expected {expect:?}")),
        (Err(r), Expect::Served) => return Err(format!("refused: {:?}: {}", r.status, r.message)),
        (Err(r), expect) => {
            check_refusal(&r, expect)?;
            r.message
        }
    };
    // Counting reads the body as submitting does: the same refusal, or a count (what only the engine checks at
    // submission, as a prompt too long for the context, is counted).
    match engine.count_prompt_tokens(bomb.api, &bomb.body) {
        Ok(_) => {}
        Err(r) => check_refusal(&r, bomb.expect).map_err(|e| format!("engine_count_prompt_tokens: {e}"))?,
    }
    Ok(outcome(refusal, ms, peak))
}

/// Whether `refused` is what `expect` asks for, without a panic's words.
fn check_refusal(refused: &Refused, expect: Expect) -> Result<(), String> {
    let text = refused.message.to_lowercase();
    if text.contains("panick") || text.contains("backtrace") {
        return Err(format!("the refusal carries a panic: {}", refused.message));
    }
    match expect {
        Expect::Refused(field) => {
            let error: Value = serde_json::from_str(&refused.message).unwrap_or(Value::Null);
            let param = error["error"]["param"].as_str().unwrap_or_default();
            if refused.status != EmberStatus::InvalidRequest
                || !(param.starts_with(field) || refused.message.contains(field))
            {
                return Err(format!("the refusal does not name {field}: {:?}: {}", refused.status, refused.message));
            }
        }
        Expect::Status(status, says) => {
            if refused.status != status || !refused.message.contains(says) {
                return Err(format!("expected {status:?} saying {says:?}: {:?}: {}", refused.status, refused.message));
            }
        }
        Expect::Served => return Err(format!("refused: {:?}: {}", refused.status, refused.message)),
    }
    Ok(())
}

/// Each response continues the last until the conversation no longer fits the context: that one is refused for
/// the context, naming `input` or `max_output_tokens`, and counted.
fn chained(engine: &Engine) -> Result<Outcome, String> {
    let body = |previous: &str| {
        let previous =
            if previous.is_empty() { String::new() } else { format!(r#", "previous_response_id": "{previous}""#) };
        format!(r#"{{"input": "More.", "max_output_tokens": 1, "temperature": 0{previous}}}"#)
    };
    let mut previous = String::new();
    let ((links, refused), ms, peak) = measured(|| {
        for link in 0..MOST_LINKS {
            match engine.submit_api(EMBER_API_RESPONSES, body(&previous).as_bytes()) {
                Ok(request) => match request.finish() {
                    Ok(response) => previous = response["id"].as_str().unwrap_or_default().to_owned(),
                    Err(e) => return (link, Err(format!("link {link} failed: {e}"))),
                },
                Err(r) => return (link, Ok(r)),
            }
        }
        (MOST_LINKS, Err(format!("{MOST_LINKS} links were all served")))
    });
    let refused = refused?;
    // The prompt alone past the context names `input`; prompt and max_output_tokens together name the latter.
    let names_input = check_refusal(&refused, Expect::Refused("input")).is_ok();
    check_refusal(&refused, Expect::Refused("max_output_tokens"))
        .or_else(|e| if names_input { Ok(()) } else { Err(e) })?;
    if !refused.message.contains("context_length_exceeded") {
        return Err(format!("the last link was not refused for the context: {}", refused.message));
    }
    let counted = engine
        .count_prompt_tokens(EMBER_API_RESPONSES, body(&previous).as_bytes())
        .map_err(|r| format!("the refused link was not counted: {}", r.message))?;
    Ok(outcome(format!("{links} links, then {counted} prompt tokens: {}", refused.message), ms, peak))
}
