//! A tokenizer vocabulary for synthetic models, so that an engine (which needs a tokenizer) can run one: byte-level
//! tokens only, no merges, so that any text encodes (one token per byte) and any generated id decodes.
//!
//! Ids follow SmolLM2's specials: 0 `<|endoftext|>`, 1 `<|im_start|>` (BOS), 2 `<|im_end|>` (EOS), all control
//! tokens; then the 256 bytes, each written as GPT-2's `bytes_to_unicode` writes it; then filler tokens up to the
//! model's vocabulary size. The pre-tokenizer is SmolLM2's (`smollm`).
//!
//! Written for the GPU check, which must build a model on a machine the 98 MB model cannot reach; it depends on
//! nothing in this binary and could move beside `SyntheticSpec` for other users (the FFI tests).

use ember::model::gguf::writer::GgufWriter;
use ember::model::gguf::{Array, Value};
use ember::model::llama::SyntheticSpec;
use ember::model::tokenizer::{keys, TokenType, BYTE_LEVEL_BPE_MODEL};

/// The special tokens, in id order.
pub const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
pub const BOS_ID: u32 = 1;
pub const EOS_ID: u32 = 2;

/// The character GPT-2's byte-level alphabet writes byte `b` as (OpenAI's `encoder.py`, `bytes_to_unicode`):
/// printable Latin-1 bytes stand for themselves, the other 68, in order, for U+0100, U+0101, ...
/// (ember's own table is private to its tokenizer; the test below holds this one to it.)
fn byte_char(b: u8) -> char {
    let itself = |c: u8| matches!(c, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if itself(b) {
        return char::from(b);
    }
    let shifted = (0..b).filter(|&c| !itself(c)).count() as u32;
    char::from_u32(0x100 + shifted).expect("below U+0144")
}

/// The token texts and types of a vocabulary of `vocab_size` (≥ 259) tokens.
pub fn vocabulary(vocab_size: usize) -> (Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    let mut types = vec![TokenType::Control as i32; SPECIALS.len()];
    for b in 0..=255u8 {
        tokens.push(byte_char(b).to_string());
        types.push(TokenType::Normal as i32);
    }
    for i in tokens.len()..vocab_size {
        tokens.push(format!("filler{i}"));
        types.push(TokenType::Normal as i32);
    }
    (tokens, types)
}

/// `spec`'s model with the vocabulary above.
pub fn synthetic_model_with_vocab(spec: &SyntheticSpec) -> GgufWriter {
    let (tokens, types) = vocabulary(spec.vocab_size);
    spec.writer()
        .metadata(keys::MODEL, Value::String(BYTE_LEVEL_BPE_MODEL.into()))
        .metadata(keys::PRE, Value::String("smollm".into()))
        .metadata(keys::TOKENS, Value::Array(Array::String(tokens)))
        .metadata(keys::TOKEN_TYPE, Value::Array(Array::I32(types)))
        .metadata(keys::MERGES, Value::Array(Array::String(Vec::new())))
        .metadata(keys::BOS_ID, Value::U32(BOS_ID))
        .metadata(keys::EOS_ID, Value::U32(EOS_ID))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember::model::gguf::GgufFile;
    use ember::model::Model;

    #[test]
    fn an_engine_can_load_and_round_trip_text_through_it() {
        let spec = SyntheticSpec { vocab_size: 600, ..SyntheticSpec::tiny(3) };
        let bytes = synthetic_model_with_vocab(&spec).to_bytes();
        let model = Model::from_file("synthetic.gguf".into(), GgufFile::from_bytes(&bytes).unwrap()).unwrap();
        let t = &model.tokenizer;
        assert_eq!(t.vocab_size(), 600);
        // Every byte is one token, and decodes to itself: the alphabet above is GPT-2's.
        let text = "Hé\n\t<|im_start|> ok\u{0}\u{7f}";
        let ids = t.encode(text, false);
        assert_eq!(ids.len(), text.len());
        assert_eq!(t.decode(&ids, false).unwrap(), text);
        assert_eq!(t.encode("<|im_start|>", true), [BOS_ID]);
        assert_eq!(t.eog_ids(), [0, EOS_ID]);
        // A chat prompt renders (ChatML, the fallback template) and encodes.
        let message = ember::model::chat_template::ChatMessage::new("user", "hi");
        let prompt = model.chat_template.render(&[message], true).unwrap();
        assert!(t.encode(&prompt, true).contains(&BOS_ID));
    }
}
