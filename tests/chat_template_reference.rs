//! The model's chat template renders each reference conversation exactly as llama.cpp did
//! (`tests/fixtures/greedy_ref.json`, see `tests/fixtures/README.md`).

use ember::model::chat_template::{ChatMessage, ChatTemplate};
use ember::model::gguf::GgufFile;

#[test]
fn rendered_prompts_match_the_reference() {
    let path = ember::model::path::resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
    let file = GgufFile::open(path).unwrap();
    let template = ChatTemplate::from_gguf(&file).unwrap();
    assert!(!template.is_fallback(), "SmolLM2 ships its own template");
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/greedy_ref.json")).expect("fixture parses");
    let cases = reference["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 8);
    for case in cases {
        let message = ChatMessage::new("user", case["message"].as_str().unwrap());
        let rendered = template.render(&[message], true).unwrap();
        assert_eq!(rendered, case["rendered_prompt"].as_str().unwrap());
    }
}
