//! Tool conversations through ember's chat API (`apply_chat_template`, the prompt a chat request renders to) on
//! every chat template llama.cpp tests with (its `models/templates/*.jinja`, 70 models' real templates) and on
//! `tests/fixtures/*.jinja`, against jinja2 set up as transformers sets it up
//! (`tests/fixtures/templates/tool_expected.json`, written by `scripts/llamacpp/render_tool_conversations.py` from
//! `tool_conversations.json`: a system message, a user message, one or two tools, an assistant turn with calls,
//! their results, a final user turn, and shorter ones).
//!
//! The rules checked:
//! - Both renderers find the same capabilities with the same probes (`src/model/chat_template/caps.rs`).
//! - A template with a tools branch, and any template in a conversation without tools, renders exactly what
//!   transformers renders, as the template intends: the conversation as sent, or with the system text in the
//!   first user turn for a template without a system role (transformers refuses or drops it there; ember and
//!   llama.cpp move it).
//! - A template without a tools branch (transformers ignores the tools there) gets ember's description of the
//!   tools, the calls as text, and where it takes no `tool` message the results as user text
//!   (`src/protocol/template_roles.rs`): its prompt shows every tool, the system text, each call's arguments and
//!   each result, and never fails where transformers renders the conversation.
//! - Nowhere does ember fail where transformers renders the conversation, as sent or system-folded.
//!
//! The templates come from the pinned llama-cpp-python sdist (`scripts/llamacpp/fetch-templates.sh`, which
//! `make rust-test` runs first); each file's SHA-256 is checked against the one the expected texts were made from.

use std::path::PathBuf;

use ember::model::chat_template::{ChatTemplate, TemplateCaps};
use ember::model::Model;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// (template, conversation) pairs ember renders differently from transformers where the rules want the same text,
/// and why.
const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[
    // The template adds `t | tojson` to a `"..." | safe` string. In jinja2 that `+` is Markup's, which HTML-escapes
    // the plain side, so transformers writes the tools' JSON with `&#34;` for every quote; minijinja concatenates
    // (as llama.cpp's own engine does), and the model sees JSON (tests/chat_templates_llamacpp.rs lists it too).
    ("meetkai-functionary-medium-v3.1", "one_tool_round_trip", JINJA2_MARKUP_ESCAPES),
    ("meetkai-functionary-medium-v3.1", "two_tools_two_calls", JINJA2_MARKUP_ESCAPES),
    ("meetkai-functionary-medium-v3.1", "one_tool_result_to_answer", JINJA2_MARKUP_ESCAPES),
    ("meetkai-functionary-medium-v3.1", "two_tools_first_turn", JINJA2_MARKUP_ESCAPES),
    ("meetkai-functionary-medium-v3.1", "one_tool_answered_then_user", JINJA2_MARKUP_ESCAPES),
];
const JINJA2_MARKUP_ESCAPES: &str = "jinja2's Markup + str escapes the str";

/// Templates that show the tools of the system message's `tools` rather than of a `tools` variable: ember puts
/// them there instead of describing them (Phi-4-mini's, `tools.rs`, `in_system_message`).
const READS_SYSTEM_MESSAGE_TOOLS: &[&str] = &["fixtures/phi4_mini_template"];

/// ember's description of the tools, for a template without a tools branch (`tools.rs`, `with_instruction`).
const EMBERS_DESCRIPTION: &str = "You can call these functions: ";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> Value {
    let path = root().join("tests/fixtures/templates").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The template's file: `fixtures/NAME` is `tests/fixtures/NAME.jinja`, any other llama.cpp's.
fn template_path(name: &str) -> PathBuf {
    match name.strip_prefix("fixtures/") {
        Some(fixture) => root().join("tests/fixtures").join(format!("{fixture}.jinja")),
        None => {
            let dir = root().join(".cache/llamacpp/templates");
            assert!(
                dir.join("COMPLETE").exists(),
                "llama.cpp's chat templates are not in {}: run scripts/llamacpp/fetch-templates.sh (make rust-test does)",
                dir.display()
            );
            dir.join(format!("{name}.jinja"))
        }
    }
}

fn caps_of(value: &Value) -> TemplateCaps {
    let flag = |key: &str| value[key].as_bool().unwrap();
    TemplateCaps {
        system_role: flag("system_role"),
        renders_tools: flag("renders_tools"),
        tool_role: flag("tool_role"),
    }
}

/// The chat request of a conversation: its messages as a client sends them, and its tools.
fn request(spec: &Value, conversation: &Value) -> Value {
    let tools: Vec<Value> =
        conversation["tools"].as_array().unwrap().iter().map(|t| spec["tools"][t.as_str().unwrap()].clone()).collect();
    let mut body = json!({"messages": conversation["messages"]});
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    body
}

/// The prompt ember renders for `body`, or its error.
fn prompt(model: &Model, body: &Value) -> Result<String, String> {
    let answer = ember::protocol::tokenize::apply_chat_template(model, &body.to_string()).map_err(|e| e.message)?;
    Ok(serde_json::from_str::<Value>(&answer).unwrap()["prompt"].as_str().unwrap().to_owned())
}

/// What a prompt must show of a conversation when the template has no tools branch: every tool's name, the text of
/// each message (the system's, the users', the results'), each call's arguments, and ember's description (unless
/// the template shows the tools of the system message, where ember puts them for it).
fn missing_parts(prompt: &str, body: &Value, own_tools_in_system_message: bool) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    for tool in body["tools"].as_array().into_iter().flatten() {
        parts.push(tool["function"]["name"].as_str().unwrap().to_owned());
    }
    if body.get("tools").is_some() && !own_tools_in_system_message {
        parts.push(EMBERS_DESCRIPTION.to_owned());
    }
    for message in body["messages"].as_array().unwrap() {
        parts.extend(message["content"].as_str().filter(|c| !c.is_empty()).map(str::to_owned));
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            // ember writes a call's arguments as transformers' `tojson` does, as the fixture's requests have them:
            // `{"name": "get_weather", "arguments": {"city": "Paris"}}`.
            parts.push(format!("\"arguments\": {}", call["function"]["arguments"].as_str().unwrap()));
        }
    }
    parts.into_iter().filter(|part| !prompt.contains(part.as_str())).collect()
}

/// One rule broken: (template, conversation, what).
type Failure = (String, String, String);

/// Checks one template's conversations, returning the rules they break.
fn check_template(model: &mut Model, spec: &Value, name: &str, entry: &Value) -> Vec<Failure> {
    let bytes = std::fs::read(template_path(name)).unwrap();
    let sha = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(sha, entry["sha256"].as_str().unwrap(), "{name}: not the file tool_expected.json was made from");
    let (bos, eos) = (spec["bos_token"].as_str().unwrap(), spec["eos_token"].as_str().unwrap());
    let template = ChatTemplate::new(Some(std::str::from_utf8(&bytes).unwrap()), bos, eos).unwrap();
    model.chat_template = template.with_fixed_clock(spec["unix_seconds"].as_i64().unwrap());
    let mut failures = Vec::new();
    let mut fail = |conversation: &str, what: String| failures.push((name.to_owned(), conversation.to_owned(), what));
    let caps = model.chat_template.caps();
    let mut want = caps_of(&entry["caps"]);
    if caps.renders_tools {
        // `tool_role` is read only for a template without a tools branch. Its probe gives no tools, and some
        // templates with a branch loop over `tools` unguarded (Hermes 2 Pro's, Command R+'s): jinja2 refuses to
        // iterate `none`, minijinja iterates nothing.
        want.tool_role = caps.tool_role;
    }
    if caps != want {
        fail("(probes)", format!("ember finds {caps:?}, jinja2 {}", entry["caps"]));
    }
    for conversation in spec["conversations"].as_array().unwrap() {
        let conversation_name = conversation["name"].as_str().unwrap();
        let body = request(spec, conversation);
        let ours = prompt(model, &body);
        let renders = &entry["renders"][conversation_name];
        let intended = renders.get("system_folded").unwrap_or(&renders["as_sent"]);
        let transformers_renders = ["as_sent", "system_folded"].iter().any(|k| renders[k].get("text").is_some());
        let with_tools = body.get("tools").is_some();
        match (&ours, intended.get("text").and_then(Value::as_str)) {
            (Err(e), _) if transformers_renders => fail(conversation_name, format!("ember fails: {e}")),
            (Ok(text), Some(want)) if (caps.renders_tools || !with_tools) && text != want => {
                fail(conversation_name, first_difference(text, want))
            }
            (Ok(text), _) if !caps.renders_tools && with_tools => {
                let missing = missing_parts(text, &body, READS_SYSTEM_MESSAGE_TOOLS.contains(&name));
                if !missing.is_empty() {
                    fail(conversation_name, format!("the prompt lacks {missing:?}:\n{text}"));
                }
            }
            _ => {}
        }
    }
    failures
}

#[test]
fn tool_conversations_render_as_each_template_intends() {
    let (spec, expected) = (fixture("tool_conversations.json"), fixture("tool_expected.json"));
    let mut model = Model::load(None).unwrap_or_else(|e| panic!("{e}"));
    let templates = expected["templates"].as_object().unwrap();
    assert!(templates.len() >= 73, "llama.cpp's 70 templates and the fixtures'");
    let mut failures = Vec::new();
    for (name, entry) in templates {
        failures.extend(check_template(&mut model, &spec, name, entry));
    }
    let unexpected: Vec<_> =
        failures.iter().filter(|(t, c, _)| !KNOWN_DIFFERENCES.iter().any(|(kt, kc, _)| kt == t && kc == c)).collect();
    for (template, conversation, what) in &unexpected {
        eprintln!("{template} × {conversation}: {what}\n");
    }
    assert!(unexpected.is_empty(), "{} renders break the rules (above)", unexpected.len());
    let gone: Vec<_> =
        KNOWN_DIFFERENCES.iter().filter(|(kt, kc, _)| !failures.iter().any(|(t, c, _)| t == kt && c == kc)).collect();
    assert!(gone.is_empty(), "listed differences that no longer occur: {gone:?}");
}

/// Where `ours` and `want` part, with some context.
fn first_difference(ours: &str, want: &str) -> String {
    let at = ours
        .char_indices()
        .zip(want.chars())
        .find(|((_, a), b)| a != b)
        .map_or(ours.len().min(want.len()), |((i, _), _)| i);
    let from = ours[..at].char_indices().rev().nth(60).map_or(0, |(i, _)| i);
    let cut = |s: &str| s.get(from..).unwrap_or("").chars().take(160).collect::<String>();
    format!("differs from transformers' at byte {at}:\n  ours: {:?}\n  want: {:?}", cut(ours), cut(want))
}

/// ember's prompt for one conversation of the fixture on one template.
fn prompt_on(template: &str, conversation: &str) -> Result<String, String> {
    let spec = fixture("tool_conversations.json");
    let source = std::fs::read_to_string(template_path(template)).unwrap();
    let mut model = Model::load(None).unwrap_or_else(|e| panic!("{e}"));
    let (bos, eos) = (spec["bos_token"].as_str().unwrap(), spec["eos_token"].as_str().unwrap());
    model.chat_template = ChatTemplate::new(Some(&source), bos, eos).unwrap();
    let conversations = spec["conversations"].as_array().unwrap();
    let conversation = conversations.iter().find(|c| c["name"] == conversation).unwrap();
    prompt(&model, &request(&spec, conversation))
}

/// Gemma 2's template refuses a system message ("System role not supported") and any turn but alternating user
/// and model turns. The system text and ember's description of the tools open the first user turn, the call is
/// the model turn's text, and its result opens the next user turn, before the user's question.
#[test]
fn gemma_2_gets_the_system_text_the_tools_and_the_results_in_its_user_turns() {
    let gemma = "google-gemma-2-2b-it";
    let description = concat!(
        r#"You can call these functions: [{"name":"get_weather","parameters":{"type":"object","properties":{"city":"#,
        r#"{"type":"string","description":"The city's name, e.g. Zürich"},"unit":{"type":"string","enum":"#,
        r#"["celsius","fahrenheit"]}},"required":["city"]}}]"#,
        "\nTo call a function, reply with only a JSON object: {\"name\": the function, \"arguments\": its arguments}. \
         Otherwise, answer normally."
    );
    let want = format!(
        "<s><start_of_turn>user\nYou are a concise assistant. Use the tools when they help.\n\n{description}\n\n\
         What's the weather in Zürich?<end_of_turn>\n\
         <start_of_turn>model\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Zürich\", \"unit\": \"celsius\"}}}}\
         <end_of_turn>\n\
         <start_of_turn>user\n{{\"tool_response\": {{\"name\": \"get_weather\", \"content\": {{\"temperature\": 18, \
         \"sky\": \"clear\"}}}}}}\n\nDo I need an umbrella?<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    assert_eq!(prompt_on(gemma, "one_tool_round_trip").unwrap(), want);
    // An ordinary chat with a system message, which transformers refuses, renders too.
    let plain = prompt_on(gemma, "system_without_tools").unwrap();
    let want = "<s><start_of_turn>user\nYou are a concise assistant.\n\nWhat is the capital of France?<end_of_turn>\n\
                <start_of_turn>model\n";
    assert_eq!(plain, want);
}

/// Apriel's templates show the tools themselves (`<available_tools>`, each tool as Python writes a dict): they
/// get the request's tools, and ember's description stays out. Apriel 1.6's sets `tools` from itself before
/// reading it, which a static read of the template took for a template without tools.
#[test]
fn apriels_templates_keep_their_own_tool_prompt() {
    for apriel in ["Apriel-1.6-15b-Thinker-fixed", "unsloth-Apriel-1.5"] {
        let text = prompt_on(apriel, "two_tools_first_turn").unwrap();
        assert!(text.contains("<available_tools>") && text.contains("'name': 'get_local_time'"), "{apriel}: {text}");
        assert!(!text.contains(EMBERS_DESCRIPTION), "{apriel}: {text}");
        let round_trip = prompt_on(apriel, "one_tool_round_trip").unwrap();
        assert!(round_trip.contains("<tool_calls>[{\"name\": \"get_weather\""), "{apriel}: {round_trip}");
    }
}
