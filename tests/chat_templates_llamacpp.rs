//! Every chat template llama.cpp tests its own template engine with (its `models/templates/*.jinja`, 70 models'
//! real templates) renders in ember as Hugging Face transformers renders it, for each conversation of
//! `tests/fixtures/templates/conversations.json` (system + user, several turns of non-ASCII text, a finished turn
//! without the generation prompt, tools, a tool call with its result).
//!
//! The expected texts are transformers' own (`render_jinja_template`, what `apply_chat_template` calls), written
//! by `scripts/llamacpp/render_templates.py` into `tests/fixtures/templates/expected.json` with the clock fixed.
//! The templates come from the pinned llama-cpp-python 0.3.36 sdist: `scripts/llamacpp/fetch-templates.sh` copies
//! them into `.cache/llamacpp/templates/` (`make test` runs it first); `EMBER_LLAMACPP_TEMPLATES` names another
//! folder. Each file's SHA-256 is checked against the one the expected texts were made from.
//!
//! The renders that differ are listed in `KNOWN_DIFFERENCES`, each with its cause: a new difference fails the
//! test, and so does a listed one that has gone (the list must say what is true).

use std::collections::BTreeSet;
use std::path::PathBuf;

use ember::model::chat_template::{ChatMessage, ChatTemplate};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// (template, conversation) pairs ember renders differently from transformers, and why.
const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[
    // The template adds `t | tojson` to a `"..." | safe` string. In jinja2 that `+` is Markup's, which HTML-escapes
    // the plain side, so transformers writes the tools' JSON with `&#34;` for every quote; minijinja concatenates
    // (as llama.cpp's own engine does), and the model sees JSON.
    ("meetkai-functionary-medium-v3.1", "tools", JINJA2_MARKUP_ESCAPES),
    ("meetkai-functionary-medium-v3.1", "tool_call_and_result", JINJA2_MARKUP_ESCAPES),
];
const JINJA2_MARKUP_ESCAPES: &str = "jinja2's Markup + str escapes the str";

fn templates_dir() -> PathBuf {
    let dir = std::env::var_os("EMBER_LLAMACPP_TEMPLATES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/templates"));
    assert!(
        dir.join("meta-llama-Llama-3.1-8B-Instruct.jinja").exists(),
        "llama.cpp's chat templates are not in {}: run scripts/llamacpp/fetch-templates.sh (make test does)",
        dir.display()
    );
    dir
}

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn message(value: &Value) -> ChatMessage {
    ChatMessage {
        tool_calls: value.get("tool_calls").cloned(),
        tool_call_id: value.get("tool_call_id").and_then(Value::as_str).map(str::to_owned),
        ..ChatMessage::new(value["role"].as_str().unwrap(), value["content"].as_str().unwrap())
    }
}

/// What ember renders for each (template, conversation): the text, or the error.
fn render_all(spec: &Value, expected: &Value) -> Vec<(String, String, Result<String, String>)> {
    let dir = templates_dir();
    let (bos, eos) = (spec["bos_token"].as_str().unwrap(), spec["eos_token"].as_str().unwrap());
    let mut out = Vec::new();
    for (name, entry) in expected["templates"].as_object().unwrap() {
        let bytes = std::fs::read(dir.join(format!("{name}.jinja"))).unwrap();
        let sha = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(sha, entry["sha256"].as_str().unwrap(), "{name}.jinja is not the file expected.json was made from");
        let template = ChatTemplate::new(Some(std::str::from_utf8(&bytes).unwrap()), bos, eos)
            .map(|t| t.with_fixed_clock(spec["unix_seconds"].as_i64().unwrap()));
        for conversation in spec["conversations"].as_array().unwrap() {
            let messages: Vec<ChatMessage> = conversation["messages"].as_array().unwrap().iter().map(message).collect();
            let tools = conversation.get("tools").map(|_| &spec["tools"]);
            let generation_prompt = conversation["add_generation_prompt"].as_bool().unwrap();
            let rendered = match &template {
                Ok(t) => t.render_with_tools(&messages, tools, generation_prompt).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            out.push((name.clone(), conversation["name"].as_str().unwrap().to_owned(), rendered));
        }
    }
    out
}

#[test]
fn llamacpp_templates_render_as_transformers_does() {
    let (spec, expected) = (fixture("conversations.json"), fixture("expected.json"));
    let renders = render_all(&spec, &expected);
    assert_eq!(renders.len(), 350, "70 templates × 5 conversations");
    let mut differ = BTreeSet::new();
    let mut comparable = 0;
    for (template, conversation, ours) in &renders {
        let want = &expected["templates"][template]["renders"][conversation];
        let Some(want) = want.get("text").and_then(Value::as_str) else {
            continue; // transformers cannot render it either (the template refuses the conversation)
        };
        comparable += 1;
        if ours.as_deref() != Ok(want) {
            let shown = match ours {
                Ok(text) => first_difference(text, want),
                Err(e) => format!("error: {e}"),
            };
            eprintln!("{template} × {conversation}: {shown}");
            differ.insert((template.as_str(), conversation.as_str()));
        }
    }
    let known: BTreeSet<_> = KNOWN_DIFFERENCES.iter().map(|(t, c, _)| (*t, *c)).collect();
    let identical = comparable - differ.len();
    eprintln!("{identical} of {comparable} renders identical to transformers'");
    assert_eq!(differ, known, "the renders that differ are not the known ones");
    assert!(identical * 100 >= comparable * 97, "{identical} of {comparable} identical, under 97 %");
}

/// Where `ours` and `want` part, with some context.
fn first_difference(ours: &str, want: &str) -> String {
    let at = ours
        .char_indices()
        .zip(want.chars())
        .find(|((_, a), b)| a != b)
        .map_or(ours.len().min(want.len()), |((i, _), _)| i);
    let from = ours[..at].char_indices().rev().nth(40).map_or(0, |(i, _)| i);
    let cut = |s: &str| s.get(from..).unwrap_or("").chars().take(100).collect::<String>();
    format!("differ at byte {at}:\n  ours: {:?}\n  want: {:?}", cut(ours), cut(want))
}
