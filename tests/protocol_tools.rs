//! Tools on the real model, through the OpenAI layer: a forced call (`tool_choice: "required"` or a named
//! function) is always a valid call of the tools' schemas, whole and streamed; a call cut short is text; `"auto"`
//! is a message or valid calls, in ember's format (SmolLM2's template has none), in Hermes' (a fixture template
//! on the same model) and in real families' (their templates from llama.cpp), and refused for a template whose
//! format ember cannot read; a conversation that carries earlier calls and their results renders. gpt-oss'
//! template renders the tools and earlier calls itself, and its harmony channels hold "auto" and forced calls.

mod common;

use std::time::Duration;

use ember::engine::{Engine, EngineConfig};
use ember::protocol::{ApiRequest, ChunkPoll};
use serde_json::{json, Value};

fn engine() -> Engine {
    common::engine(EngineConfig { kv_cache_tokens: 4096, ..Default::default() })
}

/// The real model with another chat template.
fn engine_with_template(source: &str) -> Engine {
    let config =
        EngineConfig { chat_template: Some(source.into()), kv_cache_tokens: 4096, threads: 2, ..Default::default() };
    Engine::new(config).unwrap_or_else(|e| panic!("{e}"))
}

/// What a stream said: its content, its calls' (id, name, arguments) and its finish reasons.
struct Streamed {
    content: String,
    calls: Vec<(String, String, String)>,
    reasons: Vec<String>,
}

fn streamed(e: &Engine, body: &Value) -> Streamed {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let mut r = ApiRequest::submit(e, &body.to_string(), None).unwrap_or_else(|err| panic!("{body}: {err}"));
    let mut s = Streamed { content: String::new(), calls: Vec::new(), reasons: Vec::new() };
    loop {
        match r.next_chunk_json(Some(Duration::from_secs(600))) {
            ChunkPoll::Chunk(json) => {
                let chunk: Value = serde_json::from_str(&json).unwrap();
                let choice = &chunk["choices"][0];
                if let Some(reason) = choice["finish_reason"].as_str() {
                    s.reasons.push(reason.to_owned());
                }
                if let Some(text) = choice["delta"]["content"].as_str() {
                    assert!(s.calls.is_empty() || text.is_empty(), "content after the call: {chunk}");
                    s.content.push_str(text);
                }
                for d in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
                    // Calls are numbered from 0, each announced (its header) before its arguments.
                    let index = d["index"].as_u64().unwrap() as usize;
                    assert_eq!(index + usize::from(d["id"].is_null()), s.calls.len(), "{chunk}");
                    if let Some(id) = d["id"].as_str() {
                        assert_eq!(d["function"]["arguments"], "", "the header has no arguments: {chunk}");
                        s.calls.push((
                            id.to_owned(),
                            d["function"]["name"].as_str().unwrap().to_owned(),
                            String::new(),
                        ));
                    } else {
                        let call = s.calls.last_mut().expect("the header comes first");
                        call.2.push_str(d["function"]["arguments"].as_str().unwrap());
                    }
                }
            }
            ChunkPoll::Done => return s,
            ChunkPoll::TimedOut => panic!("no chunk in 10 minutes"),
        }
    }
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"],
                "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 24}},
                "required": ["zone"], "additionalProperties": false}}}
    ])
}

fn body(tool_choice: Value, extra: Value) -> Value {
    let base = json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": tools(), "tool_choice": tool_choice, "max_tokens": 64, "temperature": 0});
    common::with_fields(base, &extra)
}

use common::whole_response as whole;

/// OpenAI's shape (`call_` and 24 characters), or the nine alphanumerics that Mistral's templates insist on.
fn is_call_id(id: &str) -> bool {
    let alphanumeric = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric());
    (id.len() == 29 && id.strip_prefix("call_").is_some_and(alphanumeric)) || (id.len() == 9 && alphanumeric(id))
}

/// Checks a call against the tools' schemas by hand: the name is a tool's, the arguments its required keys.
fn check_call(call: &Value) -> (String, Value) {
    assert_eq!(call["type"], "function", "{call}");
    assert!(is_call_id(call["id"].as_str().unwrap()), "{call}");
    let name = call["function"]["name"].as_str().unwrap().to_owned();
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    match name.as_str() {
        "get_weather" => {
            assert!(arguments["city"].is_string(), "{arguments}");
            assert!(["celsius", "fahrenheit"].contains(&arguments["unit"].as_str().unwrap()), "{arguments}");
        }
        "get_time" => assert!(arguments["zone"].is_string(), "{arguments}"),
        other => panic!("no tool {other}"),
    }
    (name, arguments)
}

#[test]
fn a_forced_call_is_a_valid_call_whole_and_streamed() {
    let e = engine();
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    for choice in [json!("required"), named.clone()] {
        let v = whole(&e, &body(choice.clone(), json!({})));
        let c = &v["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{v}");
        assert_eq!(c["message"]["content"], Value::Null);
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1);
        let (name, arguments) = check_call(&calls[0]);
        if choice == named {
            assert_eq!(name, "get_weather");
        }

        // The stream: the header (id, name) once and first, then argument pieces adding up to the same call.
        let mut r = ApiRequest::submit(&e, &body(choice, json!({"stream": true})).to_string(), None).unwrap();
        let (mut header, mut args, mut reasons) = (Vec::new(), String::new(), Vec::new());
        loop {
            match r.next_chunk_json(Some(Duration::from_secs(600))) {
                ChunkPoll::Chunk(json) => {
                    let chunk: Value = serde_json::from_str(&json).unwrap();
                    let choice = &chunk["choices"][0];
                    if let Some(reason) = choice["finish_reason"].as_str() {
                        reasons.push(reason.to_owned());
                    }
                    assert!(choice["delta"].get("content").is_none_or(|c| c == ""), "no content: {chunk}");
                    let Some(deltas) = choice["delta"]["tool_calls"].as_array() else { continue };
                    let d = &deltas[0];
                    assert_eq!(d["index"], 0);
                    if let Some(id) = d["id"].as_str() {
                        assert!(args.is_empty(), "the header comes first");
                        header.push((id.to_owned(), d["function"]["name"].as_str().unwrap().to_owned()));
                    }
                    args.push_str(d["function"]["arguments"].as_str().unwrap());
                }
                ChunkPoll::Done => break,
                ChunkPoll::TimedOut => panic!("no chunk in 10 minutes"),
            }
        }
        assert_eq!(header.len(), 1, "{header:?}");
        assert_eq!(header[0].1, name);
        assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), arguments, "{args}");
        assert_eq!(args, calls[0]["function"]["arguments"].as_str().unwrap(), "same text, streamed or whole");
        assert_eq!(reasons, ["tool_calls"]);
    }
}

#[test]
fn a_call_cut_short_is_text_and_none_is_a_message() {
    let e = engine();
    let v = whole(&e, &body(json!("required"), json!({"max_tokens": 4})));
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "length", "{v}");
    assert!(c["message"].get("tool_calls").is_none() && c["message"]["content"].is_string(), "{v}");
    let none = whole(&e, &body(json!("none"), json!({"max_tokens": 8})));
    assert!(
        none["choices"][0]["message"]["content"].is_string() && none["choices"][0]["finish_reason"] != "tool_calls"
    );
}

/// An `"auto"` response, whole and streamed (the same greedy generation): either one valid call, with what the
/// model wrote before it as content, or a message; the stream says the same thing. Returns the whole message.
fn check_auto(e: &Engine, body: &Value) -> Value {
    let v = whole(e, body);
    let (c, s) = (&v["choices"][0], streamed(e, body));
    let message = &c["message"];
    assert_eq!(s.reasons, [c["finish_reason"].as_str().unwrap()], "{v}");
    assert_eq!(s.content, message["content"].as_str().unwrap_or_default(), "{v}");
    match message["tool_calls"].as_array() {
        Some(calls) => {
            assert_eq!(c["finish_reason"], "tool_calls", "{v}");
            assert_eq!(s.calls.len(), calls.len(), "as many streamed calls: {v}");
            for (call, (id, name, arguments)) in calls.iter().zip(&s.calls) {
                check_call(call);
                assert!(is_call_id(id), "{id}");
                assert_eq!(name, call["function"]["name"].as_str().unwrap(), "{v}");
                assert_eq!(arguments, call["function"]["arguments"].as_str().unwrap(), "{v}");
            }
        }
        None => {
            assert!(message["content"].is_string() && c["finish_reason"] != "tool_calls", "{v}");
            assert!(s.calls.is_empty(), "no streamed call for a message: {v}");
        }
    }
    message.clone()
}

/// A body without `tool_choice` ("auto", OpenAI's default with tools), with this `logit_bias`.
fn auto_body(logit_bias: Value) -> Value {
    // Room for a call whose strings the bias fills up to their maxLength.
    let mut b = body(Value::Null, json!({"logit_bias": logit_bias, "max_tokens": 128}));
    b.as_object_mut().unwrap().remove("tool_choice");
    b
}

/// Token ids of the real vocabulary, for `logit_bias` keys.
fn ids(pieces: &[&str]) -> Value {
    let t = &common::model().tokenizer;
    pieces.iter().map(|p| (t.token_to_id(p).unwrap_or_else(|| panic!("{p}")).to_string(), json!(100))).collect()
}

#[test]
fn auto_in_embers_format_is_a_message_or_a_valid_call() {
    let e = engine();
    // The model decides: SmolLM2 answers this in prose, but either way the response must be well formed.
    check_auto(&e, &auto_body(json!({})));
    // Its first token made `{` (the bias): the grammar then makes the reply one valid call.
    let message = check_auto(&e, &auto_body(ids(&["{", "{\""])));
    assert!(message["tool_calls"].is_array() && message["content"].is_null(), "{message}");
    // The same call cut short is a message, whole and streamed.
    let mut short = auto_body(ids(&["{", "{\""]));
    short["max_tokens"] = json!(6);
    let message = check_auto(&e, &short);
    assert!(message["content"].as_str().is_some_and(|t| t.starts_with('{')), "{message}");
    // A message streams as content (the first token cannot begin a call).
    let message = check_auto(&e, &auto_body(ids(&["The"])));
    assert!(message["content"].as_str().is_some_and(|t| t.starts_with("The")), "{message}");
}

#[test]
fn auto_in_hermes_format_is_a_message_or_a_tagged_valid_call() {
    let e = engine_with_template(include_str!("fixtures/hermes_template.jinja"));
    check_auto(&e, &auto_body(json!({})));
    // The bias makes the tag likely (it is in the prompt, and each of its tokens is pushed up); once written,
    // the grammar makes what follows one valid call, and the tags are not part of it. With parallel calls the
    // bias would start another call after each one until max_tokens: one call, then the grammar ends the choice.
    let mut one_call = auto_body(ids(&["<", "tool", "_", "call", ">"]));
    one_call["parallel_tool_calls"] = json!(false);
    let message = check_auto(&e, &one_call);
    assert_eq!(message["tool_calls"].as_array().map(Vec::len), Some(1), "{message}");
    // A template that formats tools in a way ember cannot read back: "auto" is refused by name, a forced call is
    // still one.
    let other = engine_with_template("{{ tools | tojson }}{% for m in messages %}{{ m.content }}{% endfor %}");
    let err = ApiRequest::submit(&other, &auto_body(json!({})).to_string(), None).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("tools"), "{}", err.message);
    let mut explicit = auto_body(json!({}));
    explicit["tool_choice"] = json!("auto");
    let err = ApiRequest::submit(&other, &explicit.to_string(), None).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("tool_choice"), "{}", err.message);
    let forced = whole(&other, &body(json!("required"), json!({})));
    assert_eq!(forced["choices"][0]["finish_reason"], "tool_calls", "{forced}");
}

#[test]
fn a_conversation_with_earlier_calls_and_their_results_renders() {
    let e = engine();
    let b = json!({"messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"}],
        "tools": tools(), "tool_choice": "none", "max_tokens": 8, "temperature": 0});
    let v = whole(&e, &b);
    assert!(v["choices"][0]["message"]["content"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    let mut bad = b.clone();
    bad["messages"][1]["tool_calls"][0]["function"]["arguments"] = json!({"city": "Paris"});
    let err = ApiRequest::submit(&e, &bad.to_string(), None).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("messages[1].tool_calls[0].function.arguments"));
}

/// The ids SmolLM2 writes `text` with, each pushed up: the model then writes the text (the marker that opens a
/// family's calls), and the grammar makes what follows valid calls.
fn bias_towards(text: &str) -> Value {
    let ids = common::model().tokenizer.encode(text, false);
    ids.iter().map(|id| (id.to_string(), json!(100))).collect()
}

/// `"auto"` in the formats of real families' templates (set with the engine option `chat_template` on SmolLM2,
/// whose vocabulary has none of their markers as control tokens, so they are text): Llama 3.1's JSON with
/// `"parameters"`, Mistral Nemo's `[TOOL_CALLS][...]` list, Mistral v11's `[TOOL_CALLS]name[ARGS]{...}`,
/// Qwen 2.5's `<tool_call>`, Qwen3-Coder's parameter blocks (its template's, Qwen 3.5's and Nemotron 3's), Apriel's
/// `<tool_calls>[...]</tool_calls>` and Phi-4-mini's `functools[...]`. (DeepSeek's markers, control tokens in its vocabulary, are many byte tokens in
/// SmolLM2's, which a bias cannot order: `auto_call.rs` walks their grammar with them as control tokens.) Each
/// call is valid and streams as the whole response says; one call when `parallel_tool_calls` is false.
#[test]
fn auto_in_real_families_formats_is_a_message_or_valid_calls() {
    let templates = [
        ("meta-llama-Llama-3.1-8B-Instruct", "{\""),
        ("mistralai-Mistral-Nemo-Instruct-2407", "[TOOL_CALLS]["),
        ("unsloth-mistral-Devstral-Small-2507", "[TOOL_CALLS]"),
        ("Qwen-Qwen2.5-7B-Instruct", "<tool_call>"),
        ("Qwen3-Coder", "<tool_call>"),
        ("Qwen3.5-4B", "<tool_call>"),
        ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "<tool_call>"),
        ("unsloth-Apriel-1.5", "<tool_calls>["),
        ("Apriel-1.6-15b-Thinker-fixed", "<tool_calls>["),
    ]
    .map(|(name, marker)| (name, common::llamacpp_template(name), marker));
    let phi4 = ("Phi-4-mini", include_str!("fixtures/phi4_mini_template.jinja").to_owned(), "functools[");
    for (template, source, marker) in templates.into_iter().chain([phi4]) {
        let e = engine_with_template(&source);
        // Thinking templates (Qwen 3.5's, Nemotron 3's) open `<think>` for the model, which SmolLM2 never closes:
        // thinking off, its reply is the content where calls are read.
        let thinking_off = |mut body: Value| {
            if source.contains("</think>") {
                body["reasoning_effort"] = json!("none");
            }
            body
        };
        check_auto(&e, &thinking_off(auto_body(json!({}))));
        // An earlier call in the conversation shows the marker in the prompt, which the bias then copies.
        let mut one_call = thinking_off(auto_body(bias_towards(marker)));
        one_call["parallel_tool_calls"] = json!(false);
        one_call["messages"] = json!([
            {"role": "user", "content": "What is the time in Tokyo?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call00001", "type": "function",
                "function": {"name": "get_time", "arguments": "{\"zone\": \"Asia/Tokyo\"}"}}]},
            {"role": "tool", "tool_call_id": "call00001", "content": "09:00"},
            {"role": "assistant", "content": "It is 09:00 in Tokyo."},
            {"role": "user", "content": "What is the weather in Paris?"}]);
        let message = check_auto(&e, &one_call);
        assert_eq!(message["tool_calls"].as_array().map(Vec::len), Some(1), "{template}: {message}");
    }
}

/// Phi-4-mini's template reads the tools from the system message (JSON text, as Python's `json.dumps` writes it),
/// and an earlier turn's calls are written into its content as the model writes them.
#[test]
fn phi4_minis_tools_go_in_the_system_message() {
    let e = engine_with_template(include_str!("fixtures/phi4_mini_template.jinja"));
    let tools = json!([{"type": "function", "function": {"name": "now", "description": "The time, ~ UTC",
        "parameters": {"type": "object"}, "strict": true}}]);
    let prompt = |messages: Value| {
        let body = json!({"messages": messages, "tools": tools});
        let json = ember::protocol::tokenize::apply_chat_template(e.model(), &body.to_string()).unwrap();
        serde_json::from_str::<Value>(&json).unwrap()["prompt"].as_str().unwrap().to_owned()
    };
    let listed = r#"[{"name": "now", "description": "The time, ~ UTC", "parameters": {"type": "object"}}]"#;
    assert_eq!(
        prompt(json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Time?"}])),
        format!("<|system|>Be brief.<|tool|>{listed}<|/tool|><|end|><|user|>Time?<|end|><|assistant|>")
    );
    let earlier = json!([{"role": "user", "content": "Time?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "now", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "09:00"}]);
    assert_eq!(
        prompt(earlier),
        format!(
            "<|system|><|tool|>{listed}<|/tool|><|end|><|user|>Time?<|end|>\
             <|assistant|>functools[{{\"name\": \"now\", \"arguments\": {{}}}}]<|end|><|tool|>09:00<|end|><|assistant|>"
        )
    );
}

/// gpt-oss' chat template (llama.cpp's copy, `tests/fixtures/gpt_oss_template.jinja`) on SmolLM2, whose vocabulary
/// has none of harmony's special tokens, so that they are text.
fn gpt_oss() -> Engine {
    engine_with_template(include_str!("fixtures/gpt_oss_template.jinja"))
}

/// The prompt `body` renders to on `e`.
fn prompt_of(e: &Engine, body: &Value) -> String {
    let json = ember::protocol::tokenize::apply_chat_template(e.model(), &body.to_string()).unwrap();
    serde_json::from_str::<Value>(&json).unwrap()["prompt"].as_str().unwrap().to_owned()
}

/// The tools reach gpt-oss through its template's own `tools` (a TypeScript-like namespace in the developer
/// message, no description of ember's), and a conversation that sends back a call and its result renders as the
/// template writes harmony's messages (the call's arguments as their JSON, the result as a JSON string, the call's
/// `reasoning_content` as the analysis before it).
#[test]
fn gpt_oss_renders_the_tools_and_earlier_calls_in_its_own_messages() {
    let e = gpt_oss();
    let prompt = prompt_of(&e, &auto_body(json!({})));
    let developer = "<|end|><|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n\
                     // The weather in a city\ntype get_weather = (_: {\ncity: string,\nunit: any,\n}) => any;\n\n\
                     // The time in a time zone\ntype get_time = (_: {\nzone: string,\n}) => any;\n\n\
                     } // namespace functions<|end|>";
    assert!(prompt.contains(developer), "{prompt}");
    assert!(prompt.contains("Calls to these tools must go to the commentary channel: 'functions'.<|end|>"), "{prompt}");
    assert!(!prompt.contains("\"parameters\""), "no description of ember's: {prompt}");
    assert!(prompt.ends_with("<|start|>user<|message|>What is the weather in Paris?<|end|><|start|>assistant"));
    let earlier = json!({"messages": [
        {"role": "user", "content": "What is the time in Tokyo?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_time", "arguments": "{\"zone\": \"Asia/Tokyo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "09:00"}], "tools": tools()});
    let prompt = prompt_of(&e, &earlier);
    assert!(
        prompt.ends_with(
            "<|start|>user<|message|>What is the time in Tokyo?<|end|>\
             <|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{\"zone\": \"Asia/Tokyo\"}<|call|>\
             <|start|>functions.get_time to=assistant<|channel|>commentary<|message|>\"09:00\"<|end|><|start|>assistant"
        ),
        "{prompt}"
    );
    // The reasoning ember returned with the call (`reasoning_content`) comes back as the template's `thinking`:
    // the analysis before the call, which the model goes on from.
    let mut reasoned = earlier.clone();
    reasoned["messages"][1]["reasoning_content"] = json!("The user wants Tokyo's time.");
    reasoned["messages"][1]["content"] = json!("Checking.");
    assert!(
        prompt_of(&e, &reasoned).contains(
            "<|start|>assistant<|channel|>analysis<|message|>The user wants Tokyo's time.<|end|>\
             <|start|>assistant to=functions.get_time<|channel|>commentary json"
        ),
        "{}",
        prompt_of(&e, &reasoned)
    );
    // The same conversation generates (a message or a call, in harmony's channels).
    let mut next = earlier.clone();
    next["max_tokens"] = json!(16);
    next["temperature"] = json!(0);
    check_auto(&e, &next);
}

/// Biases towards the tokens SmolLM2 writes harmony's commentary channel with: under harmony's grammar (which
/// holds the output to the channels from its first token) the model then calls a tool.
fn towards_commentary() -> Value {
    bias_towards("<|channel|>commentary")
}

/// `"auto"` in gpt-oss' harmony format on the real model: free, the output is in the channels whatever the model
/// decides (reasoning apart, then an answer or one call), whole and streamed alike; steered to the commentary
/// channel, it is one valid call, `parallel_tool_calls` or not.
#[test]
fn gpt_oss_auto_is_an_answer_or_one_valid_call_in_its_channels() {
    let e = gpt_oss();
    let free = check_auto(&e, &auto_body(json!({})));
    assert!(
        free["content"].as_str().is_some_and(|c| !c.contains("<|channel|>")) || free["tool_calls"].is_array(),
        "{free}"
    );
    for parallel in [true, false] {
        let mut body = auto_body(towards_commentary());
        body["parallel_tool_calls"] = json!(parallel);
        let message = check_auto(&e, &body);
        assert_eq!(message["tool_calls"].as_array().map(Vec::len), Some(1), "{message}");
        assert!(message["content"].is_null(), "{message}");
    }
}

/// `"required"` and a named function in harmony's format: one valid call (of the named function), whole and
/// streamed alike; steered to reason first on the analysis channel, the reasoning comes apart from the call.
#[test]
fn gpt_oss_forced_calls_are_valid_calls_in_its_channels() {
    let e = gpt_oss();
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    for choice in [json!("required"), named.clone()] {
        let mut body = auto_body(towards_commentary());
        body["tool_choice"] = choice.clone();
        let message = check_auto(&e, &body);
        let calls = message["tool_calls"].as_array().unwrap_or_else(|| panic!("{choice}: {message}"));
        assert_eq!(calls.len(), 1, "{message}");
        if choice == named {
            assert_eq!(calls[0]["function"]["name"], "get_time", "{message}");
        }
    }
    // Steered through the analysis channel first: the reasoning comes apart, then the call.
    let mut body = auto_body(bias_towards("<|channel|>analysis<|end|><|start|>assistant<|channel|>commentary"));
    body["tool_choice"] = json!("required");
    let message = check_auto(&e, &body);
    assert!(message["reasoning_content"].as_str().is_some_and(|r| !r.is_empty()), "{message}");
    assert_eq!(message["tool_calls"].as_array().map(Vec::len), Some(1), "{message}");
}
