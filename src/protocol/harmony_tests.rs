//! Tests of gpt-oss' harmony format with tools: the grammar walked token by token (harmony's markers as control
//! tokens, as in gpt-oss' vocabulary, and as text, as in a vocabulary without them), and outputs read whole and
//! streamed through the reasoning split and the call reader, as a response and a stream read them.

use serde_json::json;

use super::*;
use crate::protocol::reasoning::{ReasoningDelta, ReasoningReader};
use crate::protocol::test_support::{char_ids, char_tokenizer, harmony_reader, pieces, walk_grammar};
use crate::protocol::tools::auto_stream::{AutoDelta, AutoStream};
use crate::protocol::tools::{CallDelta, CallIdStyle};

/// gpt-oss' special tokens that its outputs write (`<|return|>` and `<|call|>` end them).
const CONTROLS: [&str; 7] =
    ["<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>", "<|call|>"];

const ANALYSIS: &str = "<|channel|>analysis<|message|>The user wants <b>Paris</b>' weather.<|end|><|start|>assistant";
const CALL: &str = r#"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}"#;
const FINAL: &str = "<|channel|>final<|message|>It is sunny.\nWarm, too.";
const ARGS: &str = r#"{"city": "Paris"}"#;

fn tools() -> Vec<Tool> {
    let city = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": false});
    vec![
        Tool { name: "get_weather".into(), parameters: city },
        Tool { name: "now".into(), parameters: json!({"type": "object", "additionalProperties": false}) },
    ]
}

/// The reader of `tools` named `names`, a call required or not, over `char_tokenizer(controls)`.
fn calls(controls: &[&str], names: &[&str], required: bool) -> AutoCalls {
    let tools: Vec<Tool> = tools().into_iter().filter(|t| names.contains(&t.name.as_str())).collect();
    AutoCalls { required, ..AutoCalls::new(HARMONY, &tools, true, &char_tokenizer(controls)) }
}

/// Walks `text` through the grammar of `calls`.
fn walk(controls: &[&str], calls: &AutoCalls, text: &str) -> Result<bool, usize> {
    walk_grammar(&constraint(calls, &tools()), controls, text)
}

/// How many tokens `prefix` is: the index of the token after it.
fn at(controls: &[&str], prefix: &str) -> usize {
    char_ids(&char_tokenizer(controls), controls, prefix).len()
}

#[test]
fn the_markers_are_control_tokens_where_the_vocabulary_has_them() {
    let with = calls(&CONTROLS, &["get_weather", "now"], false);
    assert!(with.is_control("<|end|>") && with.needs_special_text());
    let without = calls(&[], &["get_weather", "now"], false);
    assert!(!without.is_control("<|end|>") && !without.needs_special_text());
    let GuidedSpec::Lark(grammar) = constraint(&with, &tools()).spec else { panic!() };
    assert!(grammar.contains("<[") && !grammar.contains("\"<|channel|>"), "{grammar}");
}

#[test]
fn auto_allows_reasoning_then_an_answer_or_one_valid_call() {
    for controls in [&CONTROLS[..], &[]] {
        let auto = calls(controls, &["get_weather", "now"], false);
        let walk = |text: &str| walk(controls, &auto, text);
        let at = |prefix: &str| at(controls, prefix);
        for text in [
            CALL.to_owned(),
            format!("{ANALYSIS}{CALL}"),
            format!("<|start|>assistant{CALL}"),
            format!("<|start|>assistant{ANALYSIS}{CALL}"),
            "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}".to_owned(),
        ] {
            // The grammar is complete at the arguments' end: the choice ends there, before `<|call|>`.
            assert_eq!(walk(&text), Ok(true), "{text:?} with {} controls", controls.len());
            assert_eq!(walk(&format!("{text}<|call|>")), Ok(false), "{text:?} ends at its arguments");
        }
        for text in [
            format!("{ANALYSIS}{FINAL}"),
            FINAL.to_owned(),
            "<|channel|>final<|message|>".to_owned(),
            "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>Hi".to_owned(),
        ] {
            assert_eq!(walk(&text), Ok(true), "{text:?} is a message");
        }
        for unfinished in [ANALYSIS, &CALL[..CALL.len() - 3], "<|channel|>analysis<|message|>Hm", "<|channel|>"] {
            assert_eq!(walk(unfinished), Ok(false), "{unfinished:?} may not end");
        }
        // Outside the channels, and against the tools' schemas, nothing goes.
        assert_eq!(walk("Hello"), Err(0), "text outside a channel");
        let wrong_name = "<|channel|>commentary to=functions.get_time";
        assert_eq!(walk(wrong_name), Err(at("<|channel|>commentary to=functions.get_")));
        let wrong_key = r#"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"town"#;
        assert_eq!(walk(wrong_key), Err(at(&wrong_key[..wrong_key.len() - 4])), "no key town");
        assert_eq!(walk(&format!("{ANALYSIS}<|channel|>analysis")), Err(at(&format!("{ANALYSIS}<|channel|>"))));
        assert_eq!(walk("<|channel|>commentary<|message|>"), Err(at("<|channel|>commentary")), "no preamble");
        let two = format!("{CALL}<|call|><|start|>assistant{CALL}");
        assert_eq!(walk(&two), Ok(false), "one call: the grammar is complete after the first");
    }
}

#[test]
fn a_forced_call_may_reason_first_and_must_call() {
    for controls in [&CONTROLS[..], &[]] {
        let required = calls(controls, &["get_weather", "now"], true);
        assert_eq!(walk(controls, &required, &format!("{ANALYSIS}{CALL}")), Ok(true));
        assert_eq!(walk(controls, &required, CALL), Ok(true));
        assert_eq!(walk(controls, &required, FINAL), Err(at(controls, "<|channel|>")), "no answer");
        // A named function: that one only.
        let named = calls(controls, &["now"], true);
        let now = "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}";
        assert_eq!(walk(controls, &named, &format!("{ANALYSIS}{now}")), Ok(true));
        assert_eq!(walk(controls, &named, CALL), Err(at(controls, "<|channel|>commentary to=functions.")));
    }
}

/// What a choice says, read whole or streamed: its reasoning, its content and its calls (name, arguments).
#[derive(Debug, PartialEq)]
struct Read {
    reasoning: Option<String>,
    content: Option<String>,
    calls: Vec<(String, String)>,
}

/// `text` read whole, as `chat/response.rs` reads it: the reasoning split, then the calls in the rest.
fn whole(reasoning: &ReasoningReader, calls: &AutoCalls, text: &str) -> Read {
    let split = reasoning.split(text);
    let reasoning = split.reasoning.map(str::to_owned);
    match calls.read(split.content) {
        Some(read) => Read {
            reasoning,
            content: read.content.map(str::to_owned),
            calls: read.calls.into_iter().map(|c| (c.name, c.arguments)).collect(),
        },
        None => Read { reasoning, content: Some(split.content.to_owned()), calls: Vec::new() },
    }
}

/// `text` streamed in pieces of `size` bytes, as `chat/stream.rs` reads it: the split's content deltas go through the
/// call stream. Content is `None` when none was sent and a call was.
fn streamed(reasoning: &ReasoningReader, calls: &AutoCalls, text: &str, size: usize) -> Read {
    let (mut split, mut stream) = (reasoning.stream(), AutoStream::new(calls.clone(), "call_1".into()));
    let mut out = Read { reasoning: None, content: None, calls: Vec::new() };
    let take = |deltas: Vec<ReasoningDelta>, stream: &mut AutoStream, out: &mut Read| {
        for d in deltas {
            match d {
                ReasoningDelta::Reasoning(r) => out.reasoning.get_or_insert_default().push_str(&r),
                ReasoningDelta::Content(c) => out_calls(stream.push(&c), out),
            }
        }
    };
    for piece in pieces(text, size) {
        take(split.push(piece), &mut stream, &mut out);
    }
    take(split.finish(), &mut stream, &mut out);
    out_calls(stream.finish(), &mut out);
    if out.content.is_none() && out.calls.is_empty() {
        out.content = Some(String::new());
    }
    out
}

fn out_calls(deltas: Vec<AutoDelta>, out: &mut Read) {
    for d in deltas {
        match d {
            AutoDelta::Content(c) => out.content.get_or_insert_default().push_str(&c),
            AutoDelta::Call(i, CallDelta::Header { name, .. }) => {
                assert_eq!(i, out.calls.len(), "calls in order");
                out.calls.push((name, String::new()));
            }
            AutoDelta::Call(i, CallDelta::Arguments(a)) => out.calls[i].1.push_str(&a),
        }
    }
}

/// `text` reads as `expected` whole and streamed in pieces of every size, with either vocabulary.
fn assert_reads(text: &str, expected: &Read) {
    for controls in [&CONTROLS[..], &[]] {
        let (reasoning, calls) =
            (harmony_reader(char_tokenizer(controls)), calls(controls, &["get_weather", "now"], false));
        assert_eq!(&whole(&reasoning, &calls, text), expected, "{text:?}");
        for size in 1..=text.len() {
            assert_eq!(&streamed(&reasoning, &calls, text, size), expected, "{text:?} in pieces of {size}");
        }
    }
}

fn read(reasoning: Option<&str>, content: Option<&str>, calls: &[(&str, &str)]) -> Read {
    Read {
        reasoning: reasoning.map(str::to_owned),
        content: content.map(str::to_owned),
        calls: calls.iter().map(|(n, a)| (n.to_string(), a.to_string())).collect(),
    }
}

const THOUGHT: &str = "The user wants <b>Paris</b>' weather.";

#[test]
fn a_call_reads_the_same_whole_and_streamed_with_or_without_reasoning_and_header() {
    let call = read(Some(THOUGHT), None, &[("get_weather", ARGS)]);
    assert_reads(&format!("{ANALYSIS}{CALL}"), &call);
    assert_reads(&format!("<|start|>assistant{ANALYSIS}{CALL}"), &call);
    // The model's own `<|call|>`, where the text keeps it, ends the call too.
    assert_reads(&format!("{ANALYSIS}{CALL}<|call|>"), &call);
    let no_reasoning = read(None, None, &[("get_weather", ARGS)]);
    assert_reads(CALL, &no_reasoning);
    assert_reads(&format!("<|start|>assistant{CALL}"), &no_reasoning);
    assert_reads(&format!(" \n{CALL}"), &no_reasoning);
    let now = "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}<|call|>";
    assert_reads(now, &read(None, None, &[("now", "{}")]));
}

#[test]
fn an_answer_reads_as_content_without_its_headers() {
    let answer = "It is sunny.\nWarm, too.";
    assert_reads(&format!("{ANALYSIS}{FINAL}"), &read(Some(THOUGHT), Some(answer), &[]));
    assert_reads(FINAL, &read(None, Some(answer), &[]));
    assert_reads(&format!("<|start|>assistant{FINAL}"), &read(None, Some(answer), &[]));
    // Reasoning cut short is all reasoning; text outside the channels is content as written.
    assert_reads("<|channel|>analysis<|message|>Hm <|en", &read(Some("Hm <|en"), Some(""), &[]));
    assert_reads(" Plain <|channel|>text.", &read(None, Some(" Plain <|channel|>text."), &[]));
}

/// Calls cut short, malformed or more than one are not calls (the grammar allows none of them; `max_tokens` cuts
/// the first kind short, and its choice ends with "length").
#[test]
fn malformed_unterminated_or_second_calls_are_not_calls() {
    for controls in [&CONTROLS[..], &[]] {
        let (reasoning, auto) =
            (harmony_reader(char_tokenizer(controls)), calls(controls, &["get_weather", "now"], false));
        let not_a_call = |text: &str| {
            let content = reasoning.split(text).content;
            assert_eq!(auto.read(content), None, "{text:?}");
            let mut stream = AutoStream::new(auto.clone(), "call_1".into());
            stream.push(content);
            assert!(!stream.is_complete(), "{text:?}");
        };
        for cut in (0..CALL.len()).filter(|&i| CALL.is_char_boundary(i)) {
            not_a_call(&format!("{ANALYSIS}{}", &CALL[..cut]));
        }
        not_a_call(&CALL.replace("get_weather", "get_time"));
        not_a_call(&CALL.replace(ARGS, "[1]"));
        not_a_call(&CALL.replace(" <|constrain|>json", ""));
        not_a_call(&format!("{CALL} and more"));
        not_a_call(&format!("{CALL}<|call|><|start|>assistant{CALL}"));
    }
}

/// A call's id: the first is the choice's, as in every format.
#[test]
fn the_streamed_header_has_the_choices_id() {
    let auto = AutoCalls { id_style: CallIdStyle::OpenAi, ..calls(&[], &["get_weather"], false) };
    let mut stream = AutoStream::new(auto, "call_7".into());
    let deltas = stream.push(CALL);
    assert_eq!(deltas[0], AutoDelta::Call(0, CallDelta::Header { id: "call_7".into(), name: "get_weather".into() }));
}
