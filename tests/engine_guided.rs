//! Structured outputs through the engine on the real model: the text of a constrained choice parses and matches
//! its constraint, greedy or sampled, alone or batched with unconstrained requests, which it does not change.

mod common;

use common::{chat_ids, engine, greedy, ids_of};
use ember::engine::guided::{GuidedRequest, GuidedSpec};
use ember::engine::sampling::SamplingParams;
use ember::engine::{EngineConfig, FinishReason, RequestOptions, SubmitRequest};
use serde_json::{json, Value};

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "color": {"type": "string", "enum": ["red", "green", "blue"]}
        },
        "required": ["name", "age", "color"],
        "additionalProperties": false
    })
}

const PERSON: &str = "Describe a person as JSON with their name, age and favourite color.";

fn constrained(message: &str, max_tokens: usize, spec: GuidedSpec) -> SubmitRequest {
    greedy(message, max_tokens).map_options(|o| RequestOptions { guided: Some(GuidedRequest::new(spec, "test")), ..o })
}

/// Checks that `text` is a JSON object matching `person_schema`.
fn assert_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} does not parse: {e}"));
    let o = v.as_object().unwrap_or_else(|| panic!("{text:?} is not an object"));
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["age", "color", "name"], "{text}");
    assert!(o["name"].as_str().is_some_and(|n| n.chars().count() <= 16), "{text}");
    assert!(o["age"].as_u64().is_some_and(|a| a <= 150), "{text}");
    assert!(["red", "green", "blue"].contains(&o["color"].as_str().unwrap_or("")), "{text}");
}

#[test]
fn a_json_schema_request_gives_a_matching_object_greedy_and_sampled() {
    let e = engine(EngineConfig::default());
    let h = e.submit(constrained(PERSON, 64, GuidedSpec::JsonSchema(person_schema()))).unwrap();
    h.wait();
    let c = &h.choices()[0];
    assert_eq!(c.finish_reason, Some(FinishReason::Stop), "{:?}", c.text);
    assert_person(&c.text);

    let sampled = SubmitRequest {
        n: 3,
        ..constrained(PERSON, 64, GuidedSpec::JsonSchema(person_schema())).map_options(|o| RequestOptions {
            sampling: SamplingParams { temperature: 1.0, seed: Some(11), ..Default::default() },
            ..o
        })
    };
    let h = e.submit(sampled).unwrap();
    h.wait();
    for c in h.choices() {
        assert_eq!(c.finish_reason, Some(FinishReason::Stop), "{:?}", c.text);
        assert_person(&c.text);
    }
    let m = e.mask_times();
    assert!(m.masks >= 4 && m.steps > 0 && m.mask_p50_us > 0.0, "{m:?}");
}

#[test]
fn json_object_choice_regex_and_grammar_requests_match() {
    let e = engine(EngineConfig::default());
    let object = e.submit(constrained(
        "Give a JSON object with a single key, \"answer\", for: what is 2 + 2?",
        32,
        GuidedSpec::JsonObject,
    ));
    let choices = vec!["positive".to_string(), "negative".to_string()];
    let choice = e.submit(constrained(
        "Is the review 'I loved it' positive or negative?",
        8,
        GuidedSpec::Choice(choices.clone()),
    ));
    let phone = e.submit(constrained("Give me a phone number.", 12, GuidedSpec::Regex("[0-9]{3}-[0-9]{4}".into())));
    let grammar = "start: \"The answer is \" NUMBER \".\"\nNUMBER: /[0-9]{1,3}/";
    let lark = e.submit(constrained("What is 7 times 8?", 16, GuidedSpec::Lark(grammar.into())));

    let done = |h: &ember::engine::RequestHandle| {
        h.wait();
        let c = h.choices().remove(0);
        assert_eq!(c.finish_reason, Some(FinishReason::Stop), "{:?}", c.text);
        c.text
    };
    let text = done(&object.unwrap());
    assert!(serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{text:?}: {e}")).is_object());
    let text = done(&choice.unwrap());
    assert!(choices.contains(&text), "{text:?}");
    let text = done(&phone.unwrap());
    let b = text.as_bytes();
    assert!(b.len() == 8 && b[3] == b'-' && text.chars().filter(char::is_ascii_digit).count() == 7, "{text:?}");
    let text = done(&lark.unwrap());
    let n = text.strip_prefix("The answer is ").and_then(|t| t.strip_suffix('.')).unwrap_or_else(|| panic!("{text:?}"));
    assert!((1..=3).contains(&n.len()) && n.chars().all(|c| c.is_ascii_digit()), "{text:?}");
}

#[test]
fn constrained_and_free_requests_share_a_batch_without_changing_the_free_ones() {
    let e = engine(EngineConfig::default());
    let free = |i: usize| greedy(common::MESSAGES[i], 24);
    let alone: Vec<_> = (0..2).map(|i| ids_of(&e.submit(free(i)).unwrap())).collect();

    let mut handles = Vec::new();
    for i in 0..4 {
        let request = match i % 2 {
            0 => constrained(PERSON, 64, GuidedSpec::JsonSchema(person_schema())),
            _ => free(i / 2),
        };
        handles.push(e.submit(request).unwrap());
    }
    for (i, h) in handles.iter().enumerate() {
        h.wait();
        let c = &h.choices()[0];
        match i % 2 {
            0 => assert_person(&c.text),
            _ => assert_eq!(c.token_ids, alone[i / 2], "free request {} changed by the batch", i / 2),
        }
    }
}

#[test]
fn max_tokens_can_cut_a_constrained_choice_short() {
    let e = engine(EngineConfig::default());
    let h = e.submit(constrained(PERSON, 4, GuidedSpec::JsonSchema(person_schema()))).unwrap();
    h.wait();
    let c = &h.choices()[0];
    assert_eq!((c.finish_reason, c.completion_tokens), (Some(FinishReason::Length), 4));
    assert!(c.text.starts_with('{') && serde_json::from_str::<Value>(&c.text).is_err(), "{:?}", c.text);
}

#[test]
fn an_invalid_constraint_is_refused_at_submit_naming_its_field() {
    let e = engine(EngineConfig::default());
    let bad = SubmitRequest::with_options(
        chat_ids("hi"),
        RequestOptions {
            guided: Some(GuidedRequest::new(GuidedSpec::Regex("(unclosed".into()), "guided_regex")),
            ..Default::default()
        },
    );
    let err = e.submit(bad).unwrap_err();
    assert_eq!(err.field(), Some("guided_regex"));
    assert!(err.to_string().starts_with("invalid guided_regex: ") && err.to_string().contains("unclosed"), "{err}");
    assert_eq!(e.num_waiting() + e.num_running(), 0, "nothing was queued");
}

/// `n` `$ref`s in a chain to an integer.
fn ref_chain(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        defs.insert(format!("d{i}"), json!({"$ref": format!("#/$defs/d{}", i + 1)}));
    }
    defs.insert(format!("d{n}"), json!({"type": "integer"}));
    json!({"$ref": "#/$defs/d0", "$defs": defs})
}

/// Lark alternatives `start: ALT(0) | ALT(1) | ...`.
fn alternatives(n: usize, alt: impl Fn(usize) -> String) -> String {
    format!("start: {}", (0..n).map(alt).collect::<Vec<_>>().join(" | "))
}

/// A constraint of each kind beyond one of the default `grammar_limits` (or that nothing finite matches) is
/// refused by `submit`, naming its field and the limit, and nothing is queued; the engine then serves as before.
/// (Each one cost seconds to minutes, gigabytes, or a stack overflow before the limits: tests/attack/grammar_cases.rs
/// has them all.)
#[test]
fn constraints_beyond_the_limits_are_refused_at_submit_naming_field_and_limit() {
    let e = engine(EngineConfig::default());
    let contains = |c: char| json!({"pattern": format!(".*{c}.*")});
    let patterns: Vec<Value> = ('a'..='z').map(contains).collect();
    let branches: Vec<Value> = (0..1_001).map(|i| json!({"const": i})).collect();
    let properties: serde_json::Map<String, Value> = (0..2_001).map(|i| (format!("p{i}"), json!({}))).collect();
    let chain: String = (0..4_001).map(|i| format!("r{i}: r{} \"a\"\n", i + 1)).collect();
    let cases = [
        (GuidedSpec::JsonSchema(json!({"type": "string", "allOf": patterns})), "max_intersection_product"),
        (GuidedSpec::JsonSchema(ref_chain(500)), "max_schema_depth"),
        (GuidedSpec::JsonSchema(json!({"anyOf": branches})), "max_schema_alternatives"),
        (GuidedSpec::JsonSchema(json!({"type": "object", "properties": properties})), "max_schema_properties"),
        (GuidedSpec::JsonSchema(json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})), "no finite text"),
        (GuidedSpec::Lark("start: start".into()), "no finite text"),
        (GuidedSpec::Lark(alternatives(2_001, |i| format!("\"a{i}\""))), "max_items_in_row"),
        (
            GuidedSpec::Lark(alternatives(1_900, |i| format!("start \"b{}\"", i % 5)) + " | \"b\""),
            "max_earley_row_work",
        ),
        (GuidedSpec::Lark(alternatives(10_001, |i| format!("\"c{i}\""))), "max_lark_terminals"),
        (GuidedSpec::Lark(format!("start: r0\n{chain}r4001: \"z\"")), "max_lark_definitions"),
        (GuidedSpec::Regex("x".repeat(600_000)), "max_bytes"),
        (GuidedSpec::Choice((0..100_000).map(|i| format!("choice{i}")).collect()), "max_bytes"),
    ];
    for (spec, limit) in cases {
        let field = match &spec {
            GuidedSpec::JsonSchema(_) => "guided_json",
            GuidedSpec::Lark(_) => "guided_grammar",
            GuidedSpec::Regex(_) => "guided_regex",
            _ => "guided_choice",
        };
        let request = SubmitRequest::with_options(
            chat_ids("hi"),
            RequestOptions { guided: Some(GuidedRequest::new(spec, field)), ..Default::default() },
        );
        let err = e.submit(request).unwrap_err();
        let message = err.to_string();
        assert_eq!(err.field(), Some(field), "{message}");
        assert!(message.starts_with(&format!("invalid {field}: ")) && message.contains(limit), "{limit}: {message}");
        assert!(!message.contains("panic") && !message.contains('\n'), "{message}");
    }
    assert_eq!(e.num_waiting() + e.num_running(), 0, "nothing was queued");
    let h = e.submit(constrained(PERSON, 64, GuidedSpec::JsonSchema(person_schema()))).unwrap();
    h.wait();
    assert_person(&h.choices()[0].text);
}

/// `grammar_limits` sets the limits: a schema the defaults accept is refused under a smaller `max_bytes`.
#[test]
fn the_grammar_limits_option_sets_the_limits() {
    let config = EngineConfig::from_json(r#"{"grammar_limits": {"max_bytes": 64}}"#).unwrap();
    assert_eq!(config.grammar_limits.max_schema_depth, 128, "the others keep their defaults");
    let e = engine(config);
    let err = e.submit(constrained(PERSON, 8, GuidedSpec::JsonSchema(person_schema()))).unwrap_err();
    assert!(err.to_string().contains("more than grammar_limits.max_bytes (64)"), "{err}");
    let e = EngineConfig::from_json(r#"{"grammar_limits": {"step_max_items": 0}}"#).unwrap_err();
    assert_eq!(e.options, ["grammar_limits"]);
}

/// Through the protocol: the refusal is an `invalid_request_error` whose `param` is the request's field; a
/// tool's schema refused is blamed on that tool, and tools whose schemas use `$ref`s work in every mode.
#[test]
fn protocol_refusals_name_the_request_field_and_the_tool() {
    use ember::protocol::{ApiKind, ApiRequest, INVALID_REQUEST_ERROR};
    let e = engine(EngineConfig::default());
    let refused = |body: Value| ApiRequest::submit(&e, &body.to_string(), Some(ApiKind::Chat)).unwrap_err();
    let messages = json!([{"role": "user", "content": "Call a tool."}]);
    let cyclic = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}});
    let format = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": cyclic}});
    let err = refused(json!({"messages": messages, "response_format": format}));
    assert_eq!(
        (err.error_type, err.param.as_deref()),
        (INVALID_REQUEST_ERROR, Some("response_format.json_schema.schema"))
    );

    let bomb = json!({"type": "object", "properties": {"s": {"type": "string", "allOf":
        ('a'..='z').map(|c| json!({"pattern": format!(".*{c}.*")})).collect::<Vec<_>>()}}});
    let tool = |name: &str, parameters: &Value| json!({"type": "function", "function": {"name": name, "parameters": parameters}});
    let plain = json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    let tools = json!([tool("a", &plain), tool("b", &plain), tool("c", &plain), tool("d", &bomb)]);
    for choice in [json!("required"), json!("auto"), json!({"type": "function", "function": {"name": "d"}})] {
        let err = refused(json!({"messages": messages, "tools": tools, "tool_choice": choice, "max_tokens": 8}));
        assert_eq!(err.param.as_deref(), Some("tools[3].function.parameters"), "{choice}: {}", err.message);
        assert!(err.message.contains("max_intersection_product"), "{}", err.message);
    }

    // A tool whose parameters refer to their own $defs: placed among the others for "required", its $refs
    // still name its own definitions.
    let with_defs = json!({"type": "object", "properties": {"city": {"$ref": "#/$defs/city"}}, "required": ["city"],
        "additionalProperties": false, "$defs": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}});
    let short = json!({"type": "object", "properties": {"q": {"type": "string", "maxLength": 8}}, "required": ["q"],
        "additionalProperties": false});
    let tools = json!([tool("a", &short), tool("weather", &with_defs)]);
    let body =
        json!({"messages": messages, "tools": tools, "tool_choice": "required", "max_tokens": 40, "temperature": 0});
    let r = ApiRequest::submit(&e, &body.to_string(), Some(ApiKind::Chat)).unwrap_or_else(|e| panic!("{e}"));
    r.handle().wait();
    let response: Value = serde_json::from_str(&r.response_json().unwrap()).unwrap();
    let call = &response["choices"][0]["message"]["tool_calls"][0]["function"];
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap_or("null")).unwrap_or(Value::Null);
    match call["name"].as_str() {
        Some("weather") => assert!(["Paris", "Rome"].contains(&arguments["city"].as_str().unwrap_or("")), "{call}"),
        Some("a") => assert!(arguments["q"].is_string(), "{call}"),
        _ => panic!("no call: {response}"),
    }
}
