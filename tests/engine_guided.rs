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
