//! A vocabulary as plain parts — exactly what the `tokenizer.ggml.*` keys of a GGUF file hold — and reading those
//! parts from a file. Tests build tiny vocabularies this way; [`Tokenizer::from_spec`](super::Tokenizer::from_spec)
//! checks them.

use super::{TokenId, TokenizerError};
use crate::model::gguf::GgufFile;

/// The GGUF keys a tokenizer reads (llama.cpp's `LLM_KV_TOKENIZER_*` names).
pub mod keys {
    pub const MODEL: &str = "tokenizer.ggml.model";
    pub const PRE: &str = "tokenizer.ggml.pre";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    pub const MERGES: &str = "tokenizer.ggml.merges";
    pub const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
    pub const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
    pub const PAD_ID: &str = "tokenizer.ggml.padding_token_id";
    pub const UNKNOWN_ID: &str = "tokenizer.ggml.unknown_token_id";
    pub const EOT_ID: &str = "tokenizer.ggml.eot_token_id";
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
}

/// The only `tokenizer.ggml.model` ember reads: byte-level BPE.
pub const BYTE_LEVEL_BPE_MODEL: &str = "gpt2";

/// A byte-level BPE vocabulary as plain parts, each field named for the GGUF key it stands for.
#[derive(Clone, Copy, Debug)]
pub struct TokenizerSpec<'a> {
    /// `tokenizer.ggml.tokens`: the text of each token, by id, in the byte-level alphabet for normal tokens.
    pub tokens: &'a [String],
    /// `tokenizer.ggml.token_type`: the raw type of each token (the values of
    /// [`TokenType`](super::TokenType)); `None` makes every token normal, as llama.cpp does without the key.
    pub token_types: Option<&'a [i32]>,
    /// `tokenizer.ggml.merges`: `"left right"` token texts; an entry's rank is its index.
    pub merges: &'a [String],
    /// `tokenizer.ggml.pre`: the pre-tokenizer's name.
    pub pre: &'a str,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_id: Option<TokenId>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_id: Option<TokenId>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad_id: Option<TokenId>,
    /// `tokenizer.ggml.unknown_token_id` (byte-level BPE never produces it; kept for callers that ask).
    pub unknown_id: Option<TokenId>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot_id: Option<TokenId>,
    /// `tokenizer.ggml.add_bos_token`: whether prompts should start with BOS (false when absent, llama.cpp's default
    /// for `gpt2` vocabularies).
    pub add_bos: bool,
}

impl<'a> TokenizerSpec<'a> {
    /// A vocabulary with no special ids, for building up in tests.
    pub fn new(tokens: &'a [String], merges: &'a [String], pre: &'a str) -> Self {
        TokenizerSpec {
            tokens,
            token_types: None,
            merges,
            pre,
            bos_id: None,
            eos_id: None,
            pad_id: None,
            unknown_id: None,
            eot_id: None,
            add_bos: false,
        }
    }

    /// Reads the `tokenizer.ggml.*` keys of `file`. Tokens, merges, model and pre-tokenizer are required; a key of
    /// the wrong type is an error even where the key is optional.
    pub fn from_gguf(file: &'a GgufFile) -> Result<Self, TokenizerError> {
        let model = file.str(keys::MODEL)?;
        if model != BYTE_LEVEL_BPE_MODEL {
            return Err(TokenizerError::UnsupportedModel { model: model.to_owned() });
        }
        Ok(TokenizerSpec {
            tokens: file.string_array(keys::TOKENS)?,
            token_types: file.optional(keys::TOKEN_TYPE, GgufFile::i32_array)?,
            merges: file.string_array(keys::MERGES)?,
            // Required: without it llama.cpp falls back to a "default" pre-tokenizer and warns that generation
            // quality will be degraded; ember refuses instead.
            pre: file.str(keys::PRE)?,
            bos_id: file.optional(keys::BOS_ID, GgufFile::u32)?,
            eos_id: file.optional(keys::EOS_ID, GgufFile::u32)?,
            pad_id: file.optional(keys::PAD_ID, GgufFile::u32)?,
            unknown_id: file.optional(keys::UNKNOWN_ID, GgufFile::u32)?,
            eot_id: file.optional(keys::EOT_ID, GgufFile::u32)?,
            add_bos: file.optional(keys::ADD_BOS, GgufFile::bool)?.unwrap_or(false),
        })
    }
}
