//! Every way a vocabulary can be unusable, and the one way a caller's token id can be: each error names the GGUF
//! key (or merge, or token) at fault.
//!
//! Vocabularies built from plain parts ([`super::TokenizerSpec`]) report the GGUF key their field stands for, so a
//! message reads the same whichever way the vocabulary arrived.

use std::fmt;

use super::spec::keys;
use super::TokenId;
use crate::model::gguf::GgufError;

/// Why a vocabulary cannot be loaded, or a token id cannot be decoded.
#[derive(Debug)]
pub enum TokenizerError {
    /// A key is missing or has the wrong type (the GGUF error names the key).
    Gguf(GgufError),
    /// `tokenizer.ggml.model` names a tokenizer other than byte-level BPE (`gpt2`), SentencePiece (`llama`),
    /// WordPiece (`bert`) and Unigram (`t5`).
    UnsupportedModel { model: String },
    /// `tokenizer.ggml.scores` has another length than `tokenizer.ggml.tokens`.
    ScoreCount { scores: usize, tokens: usize },
    /// `tokenizer.ggml.pre` names a pre-tokenizer ember does not implement. Refused rather than approximated: a
    /// wrong pre-tokenizer silently changes token ids.
    UnknownPreTokenizer { pre: String },
    /// `tokenizer.ggml.tokens` is empty.
    EmptyVocabulary,
    /// More entries in `key` than ember accepts (`limits.rs`), or than 32-bit ids can number.
    TooMany { key: &'static str, count: usize, max: usize },
    /// The texts of `key` together are longer than ember accepts (`limits.rs`).
    TooLarge { key: &'static str, bytes: usize, max: usize },
    /// `tokenizer.ggml.token_type` has another length than `tokenizer.ggml.tokens`.
    TokenTypeCount { types: usize, tokens: usize },
    /// A `tokenizer.ggml.token_type` value outside llama.cpp's `llama_token_type` (0..=6).
    UnknownTokenType { id: TokenId, value: i32 },
    /// A `tokenizer.ggml.merges` entry that is not two token texts separated by a space.
    MalformedMerge { rank: usize, merge: String },
    /// A `tokenizer.ggml.merges` entry naming a text that is not a token.
    MergeNamesUnknownToken { rank: usize, merge: String, part: String },
    /// A special token id key (`tokenizer.ggml.bos_token_id`, ...) beyond the vocabulary.
    SpecialIdOutOfRange { key: &'static str, id: TokenId, vocab_size: usize },
    /// `tokenizer.ggml.add_bos_token` is true but there is no `tokenizer.ggml.bos_token_id` (llama.cpp refuses
    /// this too: `check_add_special_token`).
    AddBosWithoutBos,
    /// `tokenizer.ggml.add_sep_token` is true (WordPiece's default) but there is no separator token.
    AddSepWithoutSep,
    /// A token id given to decode is beyond the vocabulary.
    UnknownTokenId { id: TokenId, vocab_size: usize },
    /// `tokenizer.ggml.precompiled_charsmap` cannot be read safely (`charsmap.rs`): the reason names the offset or
    /// index at fault.
    MalformedCharsmap { reason: String },
    /// A Unigram score that is infinite or NaN (`tokenizer.ggml.scores`).
    NonFiniteScore { id: TokenId, score: f32 },
    /// A Unigram piece longer than ember walks (`unigram.rs`, `MAX_PIECE_BYTES`).
    PieceTooLong { id: TokenId, bytes: usize, max: usize },
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TokenizerError::*;
        match self {
            Gguf(e) => write!(f, "tokenizer metadata: {e}"),
            UnsupportedModel { model } => {
                write!(
                    f,
                    "tokenizer.ggml.model is {model:?}; ember implements byte-level BPE (\"gpt2\"), SentencePiece \
                     (\"llama\"), WordPiece (\"bert\") and Unigram (\"t5\")"
                )
            }
            ScoreCount { scores, tokens } => {
                write!(f, "tokenizer.ggml.scores has {scores} entries but tokenizer.ggml.tokens has {tokens}")
            }
            UnknownPreTokenizer { pre } => write!(
                f,
                "tokenizer.ggml.pre is {pre:?}, a pre-tokenizer ember does not implement (it knows {}); refusing \
                 rather than tokenizing differently from the model's training",
                super::PreTokenizer::names().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
            ),
            EmptyVocabulary => write!(f, "tokenizer.ggml.tokens is empty"),
            TooMany { key, count, max } => {
                write!(f, "{key} has {count} entries, more than the {max} a vocabulary may have in ember")
            }
            TooLarge { key, bytes, max } => {
                write!(f, "{key} holds {bytes} bytes of text, more than the {max} a vocabulary may have in ember")
            }
            TokenTypeCount { types, tokens } => {
                write!(f, "tokenizer.ggml.token_type has {types} entries but tokenizer.ggml.tokens has {tokens}")
            }
            UnknownTokenType { id, value } => {
                write!(f, "tokenizer.ggml.token_type of token {id} is {value}, not a known token type (0..=6)")
            }
            MalformedMerge { rank, merge } => {
                write!(f, "tokenizer.ggml.merges entry {rank} ({merge:?}) is not two tokens separated by a space")
            }
            MergeNamesUnknownToken { rank, merge, part } => {
                write!(f, "tokenizer.ggml.merges entry {rank} ({merge:?}) names {part:?}, which is not a token")
            }
            SpecialIdOutOfRange { key, id, vocab_size } => {
                write!(f, "{key} is {id}, beyond the vocabulary of {vocab_size} tokens")
            }
            AddBosWithoutBos => {
                write!(f, "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set")
            }
            AddSepWithoutSep => write!(
                f,
                "tokenizer.ggml.add_sep_token is true (the default for WordPiece), but there is no \
                 tokenizer.ggml.seperator_token_id and token 102 is beyond the vocabulary"
            ),
            UnknownTokenId { id, vocab_size } => {
                write!(f, "token id {id} is beyond the vocabulary of {vocab_size} tokens")
            }
            MalformedCharsmap { reason } => write!(f, "{} is malformed: {reason}", keys::PRECOMPILED_CHARSMAP),
            NonFiniteScore { id, score } => {
                write!(f, "tokenizer.ggml.scores of token {id} is {score}; a Unigram score must be finite")
            }
            PieceTooLong { id, bytes, max } => write!(
                f,
                "token {id} is {bytes} bytes long, more than the {max} a Unigram piece may have in ember (real ones: \
                 at most 64)"
            ),
        }
    }
}

impl std::error::Error for TokenizerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TokenizerError::Gguf(e) => Some(e),
            _ => None,
        }
    }
}

impl From<GgufError> for TokenizerError {
    fn from(e: GgufError) -> Self {
        TokenizerError::Gguf(e)
    }
}
