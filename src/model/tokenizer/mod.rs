//! The tokenizers of GGUF vocabularies, equal token for token to llama.cpp's (`src/llama-vocab.cpp`,
//! `src/unicode.cpp`): byte-level BPE (`tokenizer.ggml.model = "gpt2"`), SentencePiece (`"llama"`), WordPiece
//! (`"bert"`, as the Hugging Face tokenizers of BERT's family, `wordpiece.rs`) and SentencePiece Unigram (`"t5"`,
//! T5's and XLM-RoBERTa's, `unigram.rs`).
//!
//! Encoding a text: cut out special tokens (`special.rs`); then for BPE split the rest into pieces
//! (`pretokenize.rs`), write each piece's bytes in GPT-2's byte-level alphabet (`byte_level.rs`) and merge them
//! (`bpe.rs`); for SentencePiece merge each fragment's characters by score (`spm.rs`); for Unigram normalize each
//! fragment (`charsmap.rs`) and find its best-scoring segmentation (`unigram.rs`, `byte_trie.rs`). Decoding: each
//! token's bytes were computed at load (`vocab.rs`); `stream.rs` decodes incrementally.
//!
//! A [`Tokenizer`] is immutable once built, so one instance serves any number of threads (`Send + Sync`). `encode`
//! keeps its working buffers, and its memory of the pieces it has already encoded, for the one call: measured on
//! 2 MB of English that memory makes encoding ~4× faster, and keeping it per call needs no lock.

mod bpe;
mod byte_level;
mod byte_trie;
mod charsmap;
mod error;
pub mod limits;
mod pretokenize;
mod spec;
mod special;
mod spm;
mod stream;
mod unigram;
mod vocab;
mod wordpiece;

pub use crate::model::TokenId;
pub(crate) use byte_level::BYTE_TO_CHAR;
pub use error::TokenizerError;
pub use pretokenize::{Pieces, PreTokenizer, Split};
pub use spec::{
    keys, TokenizerSpec, VocabKind, BYTE_LEVEL_BPE_MODEL, SENTENCEPIECE_MODEL, UNIGRAM_MODEL, WORDPIECE_MODEL,
};
pub use stream::StreamDecoder;
pub use vocab::TokenType;

use crate::model::gguf::GgufFile;
use bpe::{Bpe, PieceEncoder};
use special::{Fragment, SpecialTokens};
use spm::Spm;
use unigram::{Unigram, UnigramOptions};
use vocab::Vocab;
use wordpiece::WordPiece;

/// Texts of tokens that end generation, from llama.cpp's `special_eog_ids` detection in `llama_vocab::impl::load`.
/// As there, a token with one of these texts is an end-of-generation token and is made a control token when the
/// file typed it otherwise (llama.cpp logs "control-looking token ... will be overridden"; Gemma 3's `</s>` is one).
const EOG_TEXTS: [&str; 13] = [
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<end_of_utterance>",
    "<EOT>",
    "_<EOT>",
    "</s>",
];

/// How text becomes tokens, by vocabulary kind.
enum Encoder {
    // Boxed: the BPE's byte table is large beside SentencePiece's state.
    Bpe { bpe: Box<Bpe>, pre: PreTokenizer },
    SentencePiece { spm: Spm, add_space_prefix: bool },
    WordPiece(WordPiece),
    Unigram(Unigram),
}

// One tokenizer is shared by every request thread.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
};

/// A loaded vocabulary: encodes text to token ids and decodes them back.
pub struct Tokenizer {
    vocab: Vocab,
    encoder: Encoder,
    specials: SpecialTokens,
    bos_id: Option<TokenId>,
    eos_id: Option<TokenId>,
    pad_id: Option<TokenId>,
    unknown_id: Option<TokenId>,
    eot_id: Option<TokenId>,
    sep_id: Option<TokenId>,
    add_bos: bool,
    add_sep: bool,
    add_eos: bool,
    /// The fill-in-the-middle tokens (prefix, suffix, middle), when the vocabulary names all three.
    fim: Option<FimTokens>,
    /// The end-of-generation tokens, ascending, without duplicates.
    eog_ids: Vec<TokenId>,
}

/// The three tokens of a fill-in-the-middle (infill) prompt: `pre` opens the text before the gap, `suf` the text
/// after it, `mid` asks for the gap's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FimTokens {
    pub pre: TokenId,
    pub suf: TokenId,
    pub mid: TokenId,
}

impl Tokenizer {
    /// Loads the vocabulary of a GGUF file (its `tokenizer.ggml.*` keys).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        Self::from_spec(&TokenizerSpec::from_gguf(file)?)
    }

    /// Builds a tokenizer from plain parts, checking them as a file's keys are checked.
    pub fn from_spec(spec: &TokenizerSpec<'_>) -> Result<Self, TokenizerError> {
        // Sizes first: nothing below allocates for a vocabulary that is refused.
        limits::check(spec)?;
        let mut vocab = Vocab::with_kind(spec.tokens, spec.token_types, spec.kind)?;
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
        let sep_id = in_range(keys::SEP_ID, spec.sep_id)?;
        // Infill needs all three; a vocabulary naming only some of them cannot build the prompt.
        let fim = match (
            in_range(keys::FIM_PRE_ID, spec.fim_pre_id)?,
            in_range(keys::FIM_SUF_ID, spec.fim_suf_id)?,
            in_range(keys::FIM_MID_ID, spec.fim_mid_id)?,
        ) {
            (Some(pre), Some(suf), Some(mid)) => Some(FimTokens { pre, suf, mid }),
            _ => None,
        };
        if spec.add_bos && bos_id.is_none() {
            return Err(TokenizerError::AddBosWithoutBos);
        }
        // A WordPiece input that asks for the separator but has none is not what the model was trained on.
        if spec.add_sep && sep_id.is_none() {
            return Err(TokenizerError::AddSepWithoutSep);
        }
        let encoder = match spec.kind {
            VocabKind::ByteLevelBpe => Encoder::Bpe {
                bpe: Box::new(Bpe::new(&vocab, spec.merges)?),
                pre: PreTokenizer::from_gguf_name(spec.pre)
                    .ok_or_else(|| TokenizerError::UnknownPreTokenizer { pre: spec.pre.to_owned() })?,
            },
            VocabKind::SentencePiece => Encoder::SentencePiece {
                spm: Spm::new(&vocab, spec.scores, unknown_id),
                add_space_prefix: spec.add_space_prefix,
            },
            VocabKind::WordPiece => {
                Encoder::WordPiece(WordPiece::new(&vocab, spec.lowercase, spec.strip_accents, unknown_id))
            }
            VocabKind::Unigram => Encoder::Unigram(Unigram::new(
                &vocab,
                &UnigramOptions {
                    scores: spec.scores,
                    charsmap: spec.precompiled_charsmap,
                    unknown_id,
                    add_space_prefix: spec.add_space_prefix,
                    remove_extra_whitespaces: spec.remove_extra_whitespaces,
                },
            )?),
        };
        let eog_texts: Vec<TokenId> =
            vocab.iter().filter(|&(_, text, _)| EOG_TEXTS.contains(&text)).map(|(id, _, _)| id).collect();
        for &id in &eog_texts {
            vocab.make_control(id);
        }
        let specials = SpecialTokens::new(&vocab);
        let mut eog_ids: Vec<TokenId> = eog_texts.into_iter().chain(eos_id).chain(eot_id).collect();
        eog_ids.sort_unstable();
        eog_ids.dedup();
        // gpt-oss' harmony vocabulary (o200k_harmony) ends a message with `<|end|>` and the turn with `<|return|>`
        // or `<|call|>`: there `<|end|>` closes the reasoning and the model goes on, so it must not end generation
        // (llama.cpp's workaround: `<|end|>` leaves the end-of-generation ids when both of the others are there).
        let eog_text = |text: &str| eog_ids.iter().any(|&id| vocab.text(id) == Some(text));
        if eog_text("<|return|>") && eog_text("<|call|>") {
            eog_ids.retain(|&id| vocab.text(id) != Some("<|end|>"));
        }
        Ok(Tokenizer {
            vocab,
            encoder,
            specials,
            bos_id,
            eos_id,
            pad_id,
            unknown_id,
            eot_id,
            sep_id,
            add_bos: spec.add_bos,
            add_sep: spec.add_sep,
            // A file asking for an EOS it does not name gets none (llama.cpp appends its null token nowhere either).
            add_eos: spec.add_eos && eos_id.is_some(),
            fim,
            eog_ids,
        })
    }

    /// The token ids of `text`, without BOS (see [`Tokenizer::add_bos`]).
    ///
    /// With `parse_special`, the texts of control tokens (such as `<|im_start|>`) in `text` become those tokens;
    /// without it they are ordinary text. User-defined tokens are recognized either way (llama.cpp's behaviour).
    ///
    /// SentencePiece vocabularies with `add_space_prefix` give the text, and each text after a special token, a
    /// leading space first (llama.cpp's `tokenize_impl`); Unigram ones give every text between special tokens one
    /// (its normalizer's).
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<TokenId> {
        let mut out = Vec::with_capacity(text.len() / 3);
        let fragments = self.specials.partition(text, parse_special);
        match &self.encoder {
            Encoder::Bpe { bpe, pre } => {
                let mut encoder = PieceEncoder::new(bpe, pre.ignore_merges.then_some(&self.vocab));
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(text) => pre.pieces(text).for_each(|piece| encoder.encode(piece, &mut out)),
                    }
                }
            }
            Encoder::SentencePiece { spm, add_space_prefix } => {
                let mut after_special = true;
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(text) if *add_space_prefix && after_special => {
                            spm.encode(&self.vocab, &format!(" {text}"), &mut out)
                        }
                        Fragment::Text(text) => spm.encode(&self.vocab, text, &mut out),
                    }
                    after_special = matches!(fragment, Fragment::Token(_));
                }
            }
            Encoder::WordPiece(wordpiece) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(text) => wordpiece.encode(&self.vocab, text, &mut out),
                    }
                }
            }
            Encoder::Unigram(unigram) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(text) => unigram.encode(text, &mut out),
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

    /// The id of the token whose text (byte-level alphabet for normal BPE tokens: `"Ġthe"`; `▁` for spaces in
    /// SentencePiece) is `text`.
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

    /// The pre-tokenizer a byte-level BPE vocabulary names (`None` for SentencePiece, WordPiece and Unigram).
    pub fn pre_tokenizer(&self) -> Option<PreTokenizer> {
        match &self.encoder {
            Encoder::Bpe { pre, .. } => Some(*pre),
            Encoder::SentencePiece { .. } | Encoder::WordPiece(_) | Encoder::Unigram(_) => None,
        }
    }

    /// How the vocabulary tokenizes.
    pub fn kind(&self) -> VocabKind {
        match self.encoder {
            Encoder::Bpe { .. } => VocabKind::ByteLevelBpe,
            Encoder::SentencePiece { .. } => VocabKind::SentencePiece,
            Encoder::WordPiece(_) => VocabKind::WordPiece,
            Encoder::Unigram(_) => VocabKind::Unigram,
        }
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

    /// Unknown token (`tokenizer.ggml.unknown_token_id`); byte-level BPE never produces it, SentencePiece only for a
    /// byte without a `<0xNN>` token.
    pub fn unknown_id(&self) -> Option<TokenId> {
        self.unknown_id
    }

    /// End-of-turn token (`tokenizer.ggml.eot_token_id`).
    pub fn eot_id(&self) -> Option<TokenId> {
        self.eot_id
    }

    /// The fill-in-the-middle tokens, when the vocabulary has all three (`tokenizer.ggml.fim_*_token_id`).
    pub fn fim_tokens(&self) -> Option<FimTokens> {
        self.fim
    }

    /// Whether prompts should start with BOS (`tokenizer.ggml.add_bos_token`); `encode` never adds it.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// The separator token (`tokenizer.ggml.seperator_token_id`; WordPiece's `[SEP]`).
    pub fn sep_id(&self) -> Option<TokenId> {
        self.sep_id
    }

    /// Whether the file asks for the separator (`tokenizer.ggml.add_sep_token`; WordPiece's default, where it ends
    /// every input); `encode` never adds it. llama.cpp ends a single Unigram input with EOS only, whatever this says
    /// (an XLM-RoBERTa file sets it for the separator between a pair's texts).
    pub fn add_sep(&self) -> bool {
        self.add_sep
    }

    /// Whether embedding inputs end with EOS (`tokenizer.ggml.add_eos_token`, with an EOS id); `encode` never adds
    /// it, and generation prompts never get it.
    pub fn add_eos(&self) -> bool {
        self.add_eos
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
            .field("kind", &self.kind())
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("eog_ids", &self.eog_ids)
            .finish_non_exhaustive()
    }
}
