//! The tokenizer and chat template as a host calls them (`protocol::tokenize`, behind `engine_tokenize`,
//! `engine_detokenize` and `engine_apply_chat_template`), on the real model: special tokens parsed only when
//! asked, BOS only when asked and the model wants it, a round trip through the text, and a chat prompt rendered
//! and tokenized exactly as the engine does for a request (the same ids `engine_submit` computes).

mod common;

use common::{chat_ids, model};
use ember::model::TokenId;
use ember::protocol::tokenize::{apply_chat_template, detokenize, tokenize_text};

#[test]
fn special_tokens_are_parsed_and_bos_added_only_when_asked() {
    let model = model();
    let im_start = model.tokenizer.token_to_id("<|im_start|>").unwrap();
    assert_eq!(tokenize_text(&model, "<|im_start|>", false, true), [im_start]);
    assert_ne!(tokenize_text(&model, "<|im_start|>", false, false), [im_start], "plain text");
    // SmolLM2 asks for no BOS: add_special changes nothing there.
    assert!(!model.tokenizer.add_bos());
    assert_eq!(tokenize_text(&model, "Hi", true, true), tokenize_text(&model, "Hi", false, true));
    let ids = tokenize_text(&model, "Hello, world", false, false);
    assert_eq!(detokenize(&model.tokenizer, &ids, false).unwrap(), "Hello, world");
    assert_eq!(detokenize(&model.tokenizer, &[im_start], false).unwrap(), "", "control tokens write nothing");
    assert_eq!(detokenize(&model.tokenizer, &[im_start], true).unwrap(), "<|im_start|>");
    assert_eq!(detokenize(&model.tokenizer, &[1, 999_999], false).unwrap_err().param.as_deref(), Some("tokens[1]"));
}

#[test]
fn a_chat_is_rendered_and_tokenized_as_the_engine_does() {
    let model = model();
    let body = r#"{"messages": [{"role": "user", "content": "Hi!"}]}"#;
    let v: serde_json::Value = serde_json::from_str(&apply_chat_template(&model, body).unwrap()).unwrap();
    let text = v["prompt"].as_str().unwrap();
    assert!(text.contains("<|im_start|>user\nHi!<|im_end|>") && text.ends_with("<|im_start|>assistant\n"), "{text}");
    let ids: Vec<TokenId> = serde_json::from_value(v["prompt_token_ids"].clone()).unwrap();
    assert_eq!(ids, chat_ids("Hi!"), "what a chat request with this message computes");
    let e = apply_chat_template(&model, r#"{"messages": [{"role": "user"}]}"#).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("messages[0].content"));
}

/// `add_generation_prompt: false` ends the prompt after the last turn; `continue_final_message` ends it inside the
/// last message, the end-of-turn SmolLM2's template writes after it cut, so the model continues the reply.
#[test]
fn the_prompt_ends_where_the_request_asks() {
    let model = model();
    let prompt_of = |body: &str| -> String {
        let v: serde_json::Value = serde_json::from_str(&apply_chat_template(&model, body).unwrap()).unwrap();
        v["prompt"].as_str().unwrap().to_owned()
    };
    let closed = prompt_of(r#"{"messages": [{"role": "user", "content": "Hi!"}], "add_generation_prompt": false}"#);
    assert!(closed.ends_with("<|im_start|>user\nHi!<|im_end|>\n"), "{closed:?}");
    let continued = prompt_of(
        r#"{"messages": [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello, I am"}],
            "add_generation_prompt": false, "continue_final_message": true}"#,
    );
    assert!(
        continued.ends_with("<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello, I am"),
        "{continued:?}"
    );
    let both = r#"{"messages": [{"role": "user", "content": "Hi!"}], "continue_final_message": true}"#;
    assert_eq!(apply_chat_template(&model, both).unwrap_err().param.as_deref(), Some("continue_final_message"));
}
