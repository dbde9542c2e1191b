//! The byte-level BPE tokenizer of GGUF vocabularies with `tokenizer.ggml.model = "gpt2"`, equal token for token to
//! llama.cpp's (`src/llama-vocab.cpp`, `src/unicode.cpp`).
//!
//! Encoding a text: cut out special tokens (`special.rs`), split the rest into pieces (`pretokenize.rs`), write each
//! piece's bytes in GPT-2's byte-level alphabet (`byte_level.rs`) and merge them (`bpe.rs`). Decoding: each token's
//! bytes were computed at load (`vocab.rs`); `stream.rs` decodes incrementally.
//!
//! A [`Tokenizer`] is immutable once built, so one instance serves any number of threads (`Send + Sync`). `encode`
//! keeps its working buffers, and its memory of the pieces it has already encoded, for the one call: measured on
//! 2 MB of English that memory makes encoding ~4× faster, and keeping it per call needs no lock.

mod bpe;
mod byte_level;
mod error;
mod pretokenize;
mod spec;
mod special;
mod stream;
mod vocab;

pub use crate::model::TokenId;
pub use error::TokenizerError;
pub use pretokenize::{Pieces, PreTokenizer};
pub use spec::{keys, TokenizerSpec, BYTE_LEVEL_BPE_MODEL};
pub use stream::StreamDecoder;
pub use vocab::TokenType;

use crate::model::gguf::GgufFile;
use bpe::{Bpe, PieceEncoder};
use special::{Fragment, SpecialTokens};
use vocab::Vocab;

/// Texts of control tokens that end generation, from llama.cpp's `special_eog_ids` detection in
/// `llama_vocab::impl::load`. llama.cpp's list is longer (it adds model-specific markers such as `<|eom_id|>`,
/// `<EOT>`, `<|return|>`) and it also promotes a non-control token with one of these texts to control; ember keeps
/// the common chat markers and trusts the vocabulary's token types.
const EOG_TEXTS: [&str; 6] =
    ["<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>", "<end_of_turn>"];

// One tokenizer is shared by every request thread.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
};

/// A loaded vocabulary: encodes text to token ids and decodes them back.
pub struct Tokenizer {
    vocab: Vocab,
    bpe: Bpe,
    pre: PreTokenizer,
    specials: SpecialTokens,
    bos_id: Option<TokenId>,
    eos_id: Option<TokenId>,
    pad_id: Option<TokenId>,
    unknown_id: Option<TokenId>,
    eot_id: Option<TokenId>,
    add_bos: bool,
    /// The end-of-generation tokens, ascending, without duplicates.
    eog_ids: Vec<TokenId>,
}

impl Tokenizer {
    /// Loads the vocabulary of a GGUF file (its `tokenizer.ggml.*` keys).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        Self::from_spec(&TokenizerSpec::from_gguf(file)?)
    }

    /// Builds a tokenizer from plain parts, checking them as a file's keys are checked.
    pub fn from_spec(spec: &TokenizerSpec<'_>) -> Result<Self, TokenizerError> {
        let pre = PreTokenizer::from_gguf_name(spec.pre)
            .ok_or_else(|| TokenizerError::UnknownPreTokenizer { pre: spec.pre.to_owned() })?;
        let vocab = Vocab::new(spec.tokens, spec.token_types)?;
        let in_range = |key: &'static str, id: Option<TokenId>| match id {
            Some(id) if id as usize >= vocab.len() => {
                Err(TokenizerError::SpecialIdOutOfRange { key, id, vocab_size: vocab.len() })
            }
            _ => Ok(id),
        };
        let bos_id = in_range(keys::BOS_ID, spec.bos_id)?;
        let eos_id = in_range(keys::EOS_ID, spec.eos_id)?;
        let pad_id = in_range(keys::PAD_ID, spec.pad_id)?;
        let unknown_id = in_range(keys::UNKNOWN_ID, spec.unknown_id)?;
        let eot_id = in_range(keys::EOT_ID, spec.eot_id)?;
        if spec.add_bos && bos_id.is_none() {
            return Err(TokenizerError::AddBosWithoutBos);
        }
        let bpe = Bpe::new(&vocab, spec.merges)?;
        let specials = SpecialTokens::new(&vocab);
        let mut eog_ids: Vec<TokenId> = vocab
            .iter()
            .filter(|&(_, text, t)| t == TokenType::Control && EOG_TEXTS.contains(&text))
            .map(|(id, _, _)| id)
            .chain(eos_id)
            .chain(eot_id)
            .collect();
        eog_ids.sort_unstable();
        eog_ids.dedup();
        Ok(Tokenizer {
            vocab,
            bpe,
            pre,
            specials,
            bos_id,
            eos_id,
            pad_id,
            unknown_id,
            eot_id,
            add_bos: spec.add_bos,
            eog_ids,
        })
    }

    /// The token ids of `text`, without BOS (see [`Tokenizer::add_bos`]).
    ///
    /// With `parse_special`, the texts of control tokens (such as `<|im_start|>`) in `text` become those tokens;
    /// without it they are ordinary text. User-defined tokens are recognized either way (llama.cpp's behaviour).
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<TokenId> {
        let mut out = Vec::with_capacity(text.len() / 3);
        let mut encoder = PieceEncoder::new(&self.bpe);
        for fragment in self.specials.partition(text, parse_special) {
            match fragment {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(text) => {
                    for piece in self.pre.pieces(text) {
                        encoder.encode(piece, &mut out);
                    }
                }
            }
        }
        out
    }

    /// The text of `ids`: their bytes concatenated, invalid UTF-8 replaced as [`String::from_utf8_lossy`] replaces
    /// it. Control and unknown tokens are written as their text when `include_special`, left out otherwise.
    pub fn decode(&self, ids: &[TokenId], include_special: bool) -> Result<String, TokenizerError> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let piece = self
                .token_bytes(id, include_special)
                .ok_or(TokenizerError::UnknownTokenId { id, vocab_size: self.vocab_size() })?;
            bytes.extend_from_slice(piece);
        }
        Ok(match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// The bytes token `id` stands for in text (`None` beyond the vocabulary). Control and unknown tokens give
    /// their text when `include_special` and nothing otherwise; unused and byte-type tokens give nothing (llama.cpp's
    /// `token_to_piece` for BPE vocabularies).
    pub fn token_bytes(&self, id: TokenId, include_special: bool) -> Option<&[u8]> {
        self.vocab.piece(id, include_special)
    }

    /// The number of tokens; every id below it is valid.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The id of the token whose text (byte-level alphabet for normal tokens: `"Ġthe"`) is `text`.
    pub fn token_to_id(&self, text: &str) -> Option<TokenId> {
        self.vocab.id(text)
    }

    /// The text of token `id` as the vocabulary stores it (byte-level alphabet for normal tokens).
    pub fn token_text(&self, id: TokenId) -> Option<&str> {
        self.vocab.text(id)
    }

    pub fn token_type(&self, id: TokenId) -> Option<TokenType> {
        self.vocab.token_type(id)
    }

    /// Whether token `id` is a control token (false beyond the vocabulary).
    pub fn is_control(&self, id: TokenId) -> bool {
        self.token_type(id) == Some(TokenType::Control)
    }

    /// The pre-tokenizer the vocabulary names.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// Beginning-of-sequence token (`tokenizer.ggml.bos_token_id`).
    pub fn bos_id(&self) -> Option<TokenId> {
        self.bos_id
    }

    /// End-of-sequence token (`tokenizer.ggml.eos_token_id`).
    pub fn eos_id(&self) -> Option<TokenId> {
        self.eos_id
    }

    /// Padding token (`tokenizer.ggml.padding_token_id`).
    pub fn pad_id(&self) -> Option<TokenId> {
        self.pad_id
    }

    /// Unknown token (`tokenizer.ggml.unknown_token_id`); byte-level BPE never produces it.
    pub fn unknown_id(&self) -> Option<TokenId> {
        self.unknown_id
    }

    /// End-of-turn token (`tokenizer.ggml.eot_token_id`).
    pub fn eot_id(&self) -> Option<TokenId> {
        self.eot_id
    }

    /// Whether prompts should start with BOS (`tokenizer.ggml.add_bos_token`); `encode` never adds it.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// The tokens that end generation, ascending: EOS, EOT, and every control token whose text is a known
    /// end-of-turn marker (`<|im_end|>`, `<|endoftext|>`, ...).
    pub fn eog_ids(&self) -> &[TokenId] {
        &self.eog_ids
    }

    pub fn is_eog(&self, id: TokenId) -> bool {
        self.eog_ids.binary_search(&id).is_ok()
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("pre", &self.pre)
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("eog_ids", &self.eog_ids)
            .finish_non_exhaustive()
    }
}
