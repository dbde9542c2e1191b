//! Hostile request bodies that are neither templates nor grammars: the integer extremes of every field a check
//! adds or multiplies (2^64 − 1 once wrapped `max_tokens`' context check to a small number and was accepted),
//! bodies nested or sized past what a parser should take, and requests that ask for unbounded work per token.
//! Each is refused naming its field, or served to its end within its bounds.

/// A request bomb: the body, and the field its refusal must name (`None`: it must be served).
pub struct RequestBomb {
    pub name: String,
    pub body: String,
    pub refused_naming: Option<&'static str>,
}

const U64_MAX: &str = "18446744073709551615";
const I64_MAX: &str = "9223372036854775807";
const U32_MAX_PLUS: &str = "4294967296";

fn chat(extra: &str) -> String {
    format!(r#"{{"messages": [{{"role": "user", "content": "hi"}}]{extra}}}"#)
}

fn completion(extra: &str) -> String {
    format!(r#"{{"prompt": "hi"{extra}}}"#)
}

fn refused(name: impl Into<String>, body: String, field: &'static str) -> RequestBomb {
    RequestBomb { name: name.into(), body, refused_naming: Some(field) }
}

fn served(name: impl Into<String>, body: String) -> RequestBomb {
    RequestBomb { name: name.into(), body, refused_naming: None }
}

pub fn request_bombs() -> Vec<RequestBomb> {
    let mut v = Vec::new();
    // Token counts that a check adds to the prompt's length, at the integer extremes.
    for (field, value) in [("max_tokens", U64_MAX), ("max_tokens", I64_MAX), ("max_completion_tokens", U64_MAX)] {
        let tag = if value == U64_MAX { "u64_max" } else { "i64_max" };
        v.push(refused(format!("chat_{field}_{tag}"), chat(&format!(r#", "{field}": {value}"#)), field));
        v.push(refused(format!("completion_{field}_{tag}"), completion(&format!(r#", "{field}": {value}"#)), field));
    }
    for (field, value) in [
        ("n", U64_MAX),
        ("best_of", U64_MAX),
        ("min_tokens", U64_MAX),
        ("top_logprobs", U64_MAX),
        ("prompt_logprobs", U64_MAX),
        ("deadline_ms", U64_MAX),
        ("priority", "-9223372036854775809"),
        ("priority", I64_MAX),
    ] {
        let body = if field == "top_logprobs" {
            chat(&format!(r#", "logprobs": true, "{field}": {value}, "max_tokens": 2"#))
        } else {
            completion(&format!(r#", "{field}": {value}, "max_tokens": 2"#))
        };
        let tag = if value.starts_with('-') { "below" } else { "above" };
        v.push(refused(format!("{field}_{tag}_its_range"), body, field));
    }
    v.push(refused(
        "logprobs_u64_max",
        completion(&format!(r#", "logprobs": {U64_MAX}, "max_tokens": 2"#)),
        "logprobs",
    ));
    v.push(refused(
        "min_tokens_over_max_tokens",
        completion(&format!(r#", "min_tokens": {U32_MAX_PLUS}, "max_tokens": 2"#)),
        "min_tokens",
    ));
    v.push(refused(
        "stop_token_id_u64_max",
        chat(&format!(r#", "stop_token_ids": [{U64_MAX}], "max_tokens": 2"#)),
        "stop_token_ids",
    ));
    v.push(refused(
        "logit_bias_key_u64_max",
        chat(&format!(r#", "logit_bias": {{"{U64_MAX}": 1}}, "max_tokens": 2"#)),
        "logit_bias",
    ));
    v.push(refused("prompt_token_u64_max", format!(r#"{{"prompt": [{U64_MAX}], "max_tokens": 2}}"#), "prompt"));
    v.push(refused("seed_over_u64", completion(r#", "seed": 18446744073709551616, "max_tokens": 2"#), "seed"));
    v.push(served("seed_u64_max", completion(&format!(r#", "seed": {U64_MAX}, "max_tokens": 2"#))));
    // A top_k past the vocabulary keeps every token, as no top_k does.
    v.push(served("top_k_u64_max", completion(&format!(r#", "top_k": {U64_MAX}, "max_tokens": 2"#))));
    v.push(refused("temperature_huge", completion(r#", "temperature": 1e308, "max_tokens": 2"#), "temperature"));
    v.push(refused("max_tokens_fraction", completion(r#", "max_tokens": 1.5"#), "max_tokens"));
    // Shapes a parser should not follow: nesting past serde_json's depth, many stops, a large body.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    v.push(refused(
        "nesting_100000_deep",
        format!(r#"{{"messages": [{{"role": "user", "content": "hi", "x": {deep}}}]}}"#),
        "body",
    ));
    let stops: Vec<String> = (0..100_000).map(|i| format!("\"{}{i}\"", "s".repeat(100))).collect();
    v.push(refused(
        "stop_100000_strings",
        chat(&format!(r#", "stop": [{}], "max_tokens": 2"#, stops.join(", "))),
        "stop",
    ));
    let bias: Vec<String> = (0..1_000_000).map(|i| format!("\"{i}\": 1")).collect();
    v.push(refused(
        "logit_bias_1000000_tokens",
        chat(&format!(r#", "logit_bias": {{{}}}, "max_tokens": 2"#, bias.join(", "))),
        "logit_bias",
    ));
    let messages: Vec<&str> = vec![r#"{"role": "user", "content": "hi"}"#; 100_000];
    // The chat template's fuel (chat_template_limits.fuel) bounds what so many messages cost to render.
    v.push(refused(
        "messages_100000",
        format!(r#"{{"messages": [{}], "max_tokens": 2}}"#, messages.join(", ")),
        "messages",
    ));
    v.push(refused(
        "prompt_4_mib",
        format!(r#"{{"prompt": "{}", "max_tokens": 2}}"#, "word ".repeat(800_000)),
        "max_tokens",
    ));
    v
}
