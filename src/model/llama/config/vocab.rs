//! How many tokens a model has, and which tensor projects to its logits, checked against the file's tensors the way
//! llama.cpp's loader checks them.
//!
//! llama.cpp sizes the embedding and the output projection by its vocabulary (`vocab.n_tokens()`, the length of
//! `tokenizer.ggml.tokens`) and refuses any other shape, so every token has exactly one row: converters pad a
//! vocabulary smaller than the model's table with `[PAD{i}]` tokens rather than leave rows without a token. Its
//! `{arch}.vocab_size` key is only read to tell model sizes apart. A file whose rows and tokens disagree would load
//! and then fail every request (a sampled id with no token to decode, or a token with no row), so it is refused here,
//! naming both numbers.

use crate::model::gguf::{GgufFile, Value};
use crate::model::tokenizer::{keys, limits::MAX_TOKENS};

use super::super::architecture::{Architecture, OutputProjection};
use super::ModelConfigError;

/// The token embedding, one row per token.
pub(super) const TOKEN_EMBD: &str = "token_embd.weight";
/// The output projection, one row per token, when the model does not reuse the embedding.
pub(super) const OUTPUT: &str = "output.weight";

/// The number of tokens: the length of `tokenizer.ggml.tokens` when the file has a vocabulary (its type is the
/// tokenizer's to check), else the `vocab_size_key` value, else the embedding's rows. Each of the embedding and the
/// output projection present must have exactly that many rows.
pub(super) fn vocab_size(file: &GgufFile, vocab_size_key: &'static str) -> Result<usize, ModelConfigError> {
    let rows = |tensor: &str| file.tensor_info(tensor).map(|t| t.shape.get(1).copied().unwrap_or(1));
    if let Some(Value::Array(tokens)) = file.get(keys::TOKENS) {
        let tokens = tokens.len();
        for tensor in [TOKEN_EMBD, OUTPUT] {
            match rows(tensor) {
                Some(rows) if rows != tokens as u64 => {
                    return Err(ModelConfigError::VocabularyRows { tokens, tensor, rows })
                }
                _ => {}
            }
        }
        return in_range(keys::TOKENS, tokens);
    }
    let from_table = rows(TOKEN_EMBD).map_or(0, |r| usize::try_from(r).unwrap_or(usize::MAX));
    in_range(vocab_size_key, file.optional(vocab_size_key, GgufFile::u32)?.map_or(from_table, |v| v as usize))
}

/// A vocabulary of at least one token and no more than a tokenizer accepts (which also bounds every buffer of
/// logits).
fn in_range(key: &'static str, n: usize) -> Result<usize, ModelConfigError> {
    if n == 0 || n > MAX_TOKENS {
        return Err(ModelConfigError::Invalid { key, detail: format!("{n} tokens is not in 1..={MAX_TOKENS}") });
    }
    Ok(n)
}

/// Whether the model projects to logits with the token embedding (`true`) or its own `output.weight`, as
/// `arch` allows: OLMo 2 needs its own, Gemma never has one.
pub(super) fn tied_output(
    file: &GgufFile,
    arch: Architecture,
    output: OutputProjection,
) -> Result<bool, ModelConfigError> {
    let has_output = file.tensor_info(OUTPUT).is_some();
    let detail = match (output, has_output) {
        (OutputProjection::Own, false) => format!(
            "{} does not reuse the token embedding for its logits: tensor {OUTPUT:?} is required (llama.cpp \
             requires it too)",
            arch.name()
        ),
        (OutputProjection::Tied, true) => format!(
            "{} projects its logits with {TOKEN_EMBD:?}: a tensor {OUTPUT:?} would be left unused (llama.cpp never \
             reads it, and refuses the file for it)",
            arch.name()
        ),
        _ => return Ok(!has_output),
    };
    Err(ModelConfigError::Invalid { key: "general.architecture", detail })
}

#[cfg(test)]
mod tests {
    use super::super::{LlamaConfig, ModelConfigError};
    use super::*;
    use crate::model::gguf::writer::GgufWriter;
    use crate::model::gguf::{Array, GgmlType};
    use crate::model::llama::{families, SyntheticSpec};

    fn config(w: GgufWriter) -> Result<LlamaConfig, ModelConfigError> {
        LlamaConfig::from_gguf(&GgufFile::from_bytes(&w.to_bytes()).unwrap())
    }

    fn tokens(n: usize) -> Value {
        Value::Array(Array::String((0..n).map(|i| format!("t{i}")).collect()))
    }

    #[test]
    fn the_vocabulary_counts_and_the_vocab_size_key_only_stands_in_without_one() {
        let spec = SyntheticSpec::tiny(1);
        assert_eq!(config(spec.writer_with_byte_vocabulary()).unwrap().vocab_size, 512);
        // As in llama.cpp, a key that disagrees with the tokens and the table is not what sizes the model.
        let w = spec.writer_with_byte_vocabulary().set_metadata("llama.vocab_size", Value::U32(7));
        assert_eq!(config(w).unwrap().vocab_size, 512);
        // Without a vocabulary (synthetic weights), the key, then the table.
        assert_eq!(config(spec.writer()).unwrap().vocab_size, 512);
        let w = spec.writer().set_metadata("llama.vocab_size", Value::U32(2 << 20));
        assert!(matches!(config(w), Err(ModelConfigError::Invalid { key: "llama.vocab_size", .. })));
    }

    #[test]
    fn rows_and_tokens_must_agree_and_both_numbers_are_named() {
        let spec = SyntheticSpec::tiny(1);
        let w = spec.writer_with_byte_vocabulary().set_metadata(keys::TOKENS, tokens(100));
        let e = config(w).unwrap_err();
        assert!(matches!(e, ModelConfigError::VocabularyRows { tokens: 100, tensor: TOKEN_EMBD, rows: 512 }));
        assert!(e.to_string().contains("100 tokens") && e.to_string().contains("512 rows"), "{e}");
        // More tokens than rows is refused alike: llama.cpp sizes both tensors by the tokens.
        let w = spec.writer_with_byte_vocabulary().set_metadata(keys::TOKENS, tokens(600));
        assert!(matches!(config(w), Err(ModelConfigError::VocabularyRows { tokens: 600, rows: 512, .. })));
        // An output projection of its own is held to the same count.
        let out = |rows: u64| vec![0u8; (64 * rows / 32 * 34) as usize];
        let w = spec.writer_with_byte_vocabulary().tensor(OUTPUT, GgmlType::Q8_0, &[64, 500], out(500));
        assert!(matches!(config(w), Err(ModelConfigError::VocabularyRows { tensor: OUTPUT, rows: 500, .. })));
        let w = spec.writer_with_byte_vocabulary().tensor(OUTPUT, GgmlType::Q8_0, &[64, 512], out(512));
        assert!(!config(w).unwrap().tied_output);
    }

    #[test]
    fn each_architecture_has_the_output_projection_llama_cpp_gives_it() {
        let olmo2 = SyntheticSpec { arch: families::OLMO2, ..SyntheticSpec::tiny(1) };
        assert!(!config(olmo2.writer_with_byte_vocabulary()).unwrap().tied_output);
        let e = config(olmo2.writer_with_byte_vocabulary().without_tensor(OUTPUT)).unwrap_err();
        assert!(e.to_string().contains("tensor \"output.weight\" is required"), "{e}");
        let gemma3 = SyntheticSpec::tiny_gemma3(1);
        assert!(config(gemma3.writer_with_byte_vocabulary()).unwrap().tied_output);
        let rows = vec![0.0; gemma3.n_embd * gemma3.vocab_size];
        let shape = [gemma3.n_embd as u64, gemma3.vocab_size as u64];
        let e = config(gemma3.writer_with_byte_vocabulary().tensor_f32(OUTPUT, &shape, &rows)).unwrap_err();
        assert!(e.to_string().contains("would be left unused"), "{e}");
        for arch in [families::LLAMA, families::QWEN3, families::SMOLLM3, families::GRANITE] {
            assert_eq!(arch.traits().output, OutputProjection::OwnOrTied, "{arch:?}");
        }
    }
}
