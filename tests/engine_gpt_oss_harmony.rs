//! gpt-oss end to end with harmony's markers as control tokens: a synthetic gpt-oss (its layout at small widths,
//! MXFP4 experts, `SyntheticSpec` family `gpt-oss-small-mxfp4`) whose byte vocabulary has harmony's special tokens
//! (`<|start|>`, `<|channel|>`, `<|message|>`, `<|end|>`, `<|return|>`, `<|call|>`, `<|constrain|>`) and whose file
//! carries gpt-oss' chat template (llama.cpp's, `tests/fixtures/gpt_oss_template.jinja`). The weights are random,
//! so what it says means nothing; what is checked is the path a real gpt-oss file takes: the template renders the
//! tools with the control tokens, a forced call is generated in harmony's channels (the grammar naming the
//! markers by their ids) and comes back as a valid OpenAI call, and `"auto"` is an answer or a call, whole and
//! streamed alike. (`tests/protocol_tools.rs` runs the same template on SmolLM2, whose vocabulary has none of these
//! tokens, so that there they are text.)

mod common;

use std::sync::Arc;

use ember::engine::{Engine, EngineConfig, Logger};
use ember::model::gguf::{GgufFile, Value as Meta};
use ember::model::llama::SyntheticSpec;
use ember::model::Model;
use serde_json::{json, Value};

const HARMONY: [&str; 7] =
    ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"];

fn engine() -> Engine {
    // A context long enough for the template's system and developer messages in byte tokens.
    let spec = SyntheticSpec {
        matrix_type: None,
        context_length: 4096,
        ..SyntheticSpec::family("gpt-oss-small-mxfp4", 41, 2).unwrap()
    };
    let return_id = 257 + HARMONY.iter().position(|t| *t == "<|return|>").unwrap() as u32;
    let bytes = spec
        .writer_with_byte_vocabulary_and(&HARMONY)
        .set_metadata("tokenizer.ggml.eos_token_id", Meta::U32(return_id))
        .set_metadata(
            "tokenizer.chat_template",
            Meta::String(include_str!("fixtures/gpt_oss_template.jinja").to_owned()),
        )
        .to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let model = Arc::new(Model::from_file("gpt-oss-small.gguf".into(), file).unwrap_or_else(|e| panic!("{e}")));
    let config = EngineConfig { threads: 2, kv_cache_tokens: 8192, ..Default::default() };
    Engine::with_model(config, model, Logger::silent()).unwrap_or_else(|e| panic!("{e}"))
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["unit"], "additionalProperties": false}}}])
}

fn body(tool_choice: Value) -> Value {
    json!({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools(),
        "tool_choice": tool_choice, "max_tokens": 96, "temperature": 0})
}

#[test]
fn harmony_control_tokens_carry_a_forced_call_and_the_template_renders_them() {
    let e = engine();
    // The prompt: harmony's markers are the vocabulary's control tokens, one id each.
    let rendered = ember::protocol::tokenize::apply_chat_template(e.model(), &body(json!("required")).to_string());
    let prompt: Value = serde_json::from_str(&rendered.unwrap()).unwrap();
    let prompt = prompt["prompt"].as_str().unwrap().to_owned();
    assert!(prompt.ends_with("<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant"), "{prompt}");
    let ids = e.model().tokenizer.encode(&prompt, true);
    for (i, marker) in HARMONY.iter().enumerate().filter(|(_, m)| prompt.contains(**m)) {
        assert!(ids.contains(&(257 + i as u32)), "{marker} is one control token of the prompt");
    }

    // A forced call: one valid call of the tool, finish reason tool_calls, whatever the random weights prefer; the
    // channel's markers were generated as their control tokens, not spelled out in bytes.
    let r = ember::protocol::ApiRequest::submit(&e, &body(json!("required")).to_string(), None).unwrap();
    r.handle().wait();
    let generated = r.handle().choices()[0].token_ids.clone();
    for marker in ["<|channel|>", "<|message|>"] {
        let id = 257 + HARMONY.iter().position(|m| *m == marker).unwrap() as u32;
        assert!(generated.contains(&id), "{marker} generated as its token: {generated:?}");
    }
    let v: Value = serde_json::from_str(&r.response_json().unwrap()).unwrap();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["function"]["name"], "get_weather", "{v}");
    let arguments: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(["celsius", "fahrenheit"].contains(&arguments["unit"].as_str().unwrap_or_default()), "{arguments}");
    for marker in HARMONY {
        let text = serde_json::to_string(&choice["message"]).unwrap();
        assert!(!text.contains(marker), "no marker leaks into the message: {text}");
    }

    // "auto": an answer (no marker in it) or one valid call.
    let v = common::whole_response(&e, &body(json!("auto")));
    let message = &v["choices"][0]["message"];
    match message["tool_calls"].as_array() {
        Some(calls) => assert_eq!((calls.len(), &v["choices"][0]["finish_reason"]), (1, &json!("tool_calls"))),
        None => {
            let content = message["content"].as_str().unwrap_or_default();
            assert!(HARMONY.iter().all(|m| !content.contains(m)), "{v}");
        }
    }
}
