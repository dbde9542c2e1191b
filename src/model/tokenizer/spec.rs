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
    pub const SCORES: &str = "tokenizer.ggml.scores";
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    pub const FIM_PRE_ID: &str = "tokenizer.ggml.fim_pre_token_id";
    pub const FIM_SUF_ID: &str = "tokenizer.ggml.fim_suf_token_id";
    pub const FIM_MID_ID: &str = "tokenizer.ggml.fim_mid_token_id";
    /// The separator token that ends a WordPiece input (llama.cpp's spelling of the key).
    pub const SEP_ID: &str = "tokenizer.ggml.seperator_token_id";
    pub const CLS_ID: &str = "tokenizer.ggml.cls_token_id";
    pub const ADD_SEP: &str = "tokenizer.ggml.add_sep_token";
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    pub const NORMALIZER_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
    pub const NORMALIZER_STRIP_ACCENTS: &str = "tokenizer.ggml.normalizer.strip_accents";
    /// SentencePiece's normalizer for Unigram vocabularies (`charsmap.rs`).
    pub const PRECOMPILED_CHARSMAP: &str = "tokenizer.ggml.precompiled_charsmap";
    pub const REMOVE_EXTRA_WHITESPACES: &str = "tokenizer.ggml.remove_extra_whitespaces";
}

/// `tokenizer.ggml.model` of byte-level BPE vocabularies.
pub const BYTE_LEVEL_BPE_MODEL: &str = "gpt2";
/// `tokenizer.ggml.model` of SentencePiece vocabularies (llama.cpp's `LLAMA_VOCAB_TYPE_SPM`).
pub const SENTENCEPIECE_MODEL: &str = "llama";
/// `tokenizer.ggml.model` of WordPiece vocabularies (llama.cpp's `LLAMA_VOCAB_TYPE_WPM`).
pub const WORDPIECE_MODEL: &str = "bert";
/// `tokenizer.ggml.model` of SentencePiece Unigram vocabularies, T5's and XLM-RoBERTa's (llama.cpp's
/// `LLAMA_VOCAB_TYPE_UGM`).
pub const UNIGRAM_MODEL: &str = "t5";
/// The ids BERT's vocabulary gives `[CLS]` and `[SEP]`, which llama.cpp assumes when a `bert` file names neither.
const BERT_CLS_ID: TokenId = 101;
const BERT_SEP_ID: TokenId = 102;
/// The ids llama.cpp assumes for a `t5` file's EOS, unknown and padding tokens when it names none (T5's).
const T5_EOS_ID: TokenId = 1;
const T5_UNKNOWN_ID: TokenId = 2;
const T5_PAD_ID: TokenId = 0;

/// How a vocabulary turns text into tokens (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// `gpt2`: byte-level BPE with a pre-tokenizer and ranked merges; normal tokens in GPT-2's byte alphabet.
    ByteLevelBpe,
    /// `llama`: SentencePiece, score-driven merges with byte fallback; `▁` for spaces.
    SentencePiece,
    /// `bert`: WordPiece, the longest token first, over normalized words; `▁` starts a word.
    WordPiece,
    /// `t5`: SentencePiece Unigram, the segmentation of highest total score over text normalized by the file's
    /// precompiled charsmap; `▁` for spaces.
    Unigram,
}

/// A vocabulary as plain parts, each field named for the GGUF key it stands for.
#[derive(Clone, Copy, Debug)]
pub struct TokenizerSpec<'a> {
    /// `tokenizer.ggml.model`.
    pub kind: VocabKind,
    /// `tokenizer.ggml.tokens`: the text of each token, by id, in the byte-level alphabet for normal tokens.
    pub tokens: &'a [String],
    /// `tokenizer.ggml.token_type`: the raw type of each token (the values of
    /// [`TokenType`](super::TokenType)); `None` makes every token normal, as llama.cpp does without the key.
    pub token_types: Option<&'a [i32]>,
    /// `tokenizer.ggml.merges`: `"left right"` token texts; an entry's rank is its index (byte-level BPE).
    pub merges: &'a [String],
    /// `tokenizer.ggml.pre`: the pre-tokenizer's name (byte-level BPE).
    pub pre: &'a str,
    /// `tokenizer.ggml.scores`: each token's merge priority (SentencePiece) or log-probability (Unigram; `None`:
    /// all 0, as llama.cpp).
    pub scores: Option<&'a [f32]>,
    /// `tokenizer.ggml.add_space_prefix`: whether a text (and the text after a special token) gets a leading
    /// space before SentencePiece (true when absent, llama.cpp's default), and each text fragment before Unigram
    /// (false when absent).
    pub add_space_prefix: bool,
    /// `tokenizer.ggml.precompiled_charsmap` (Unigram): the normalizer's map; `None`: text is not normalized.
    pub precompiled_charsmap: Option<&'a [u8]>,
    /// `tokenizer.ggml.remove_extra_whitespaces` (Unigram): runs of spaces become one, leading and trailing ones go
    /// (false when absent).
    pub remove_extra_whitespaces: bool,
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
    /// `tokenizer.ggml.add_bos_token`: whether prompts should start with BOS (when absent, llama.cpp's default:
    /// true for `llama` and `bert` vocabularies, false for `t5` ones; for `gpt2` ones true with the Llama 3, Tekken
    /// and Chameleon pre-tokenizers, false with the others).
    pub add_bos: bool,
    /// `tokenizer.ggml.fim_pre_token_id`, `fim_suf_token_id`, `fim_mid_token_id`: the fill-in-the-middle
    /// tokens that open the prefix, the suffix and the middle of an infill prompt.
    pub fim_pre_id: Option<TokenId>,
    pub fim_suf_id: Option<TokenId>,
    pub fim_mid_id: Option<TokenId>,
    /// `tokenizer.ggml.seperator_token_id`: the token that ends an input (WordPiece's `[SEP]`).
    pub sep_id: Option<TokenId>,
    /// `tokenizer.ggml.add_sep_token`: whether inputs end with the separator (true for WordPiece when absent). An
    /// XLM-RoBERTa file sets it for its pairs (`<s> query </s></s> document </s>`, llama-server's rerank input); a
    /// single Unigram input gets no separator from llama.cpp whatever it says.
    pub add_sep: bool,
    /// `tokenizer.ggml.add_eos_token`: whether inputs end with EOS (embedding models such as Qwen3-Embedding, whose
    /// last-token pooling reads the vector at that EOS; when absent: true for `t5` vocabularies, false otherwise).
    pub add_eos: bool,
    /// `tokenizer.ggml.normalizer.lowercase` and `.strip_accents` (WordPiece; `None` when absent, see
    /// `wordpiece.rs`).
    pub lowercase: Option<bool>,
    pub strip_accents: Option<bool>,
}

impl<'a> TokenizerSpec<'a> {
    /// A byte-level BPE vocabulary with no special ids, for building up in tests.
    pub fn new(tokens: &'a [String], merges: &'a [String], pre: &'a str) -> Self {
        TokenizerSpec {
            kind: VocabKind::ByteLevelBpe,
            scores: None,
            add_space_prefix: false,
            precompiled_charsmap: None,
            remove_extra_whitespaces: false,
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
            fim_pre_id: None,
            fim_suf_id: None,
            fim_mid_id: None,
            sep_id: None,
            add_sep: false,
            add_eos: false,
            lowercase: None,
            strip_accents: None,
        }
    }

    /// Reads the `tokenizer.ggml.*` keys of `file`. Tokens and model are required, and for byte-level BPE merges
    /// and pre-tokenizer too; a key of the wrong type is an error even where the key is optional.
    pub fn from_gguf(file: &'a GgufFile) -> Result<Self, TokenizerError> {
        let model = file.str(keys::MODEL)?;
        let kind = match model {
            BYTE_LEVEL_BPE_MODEL => VocabKind::ByteLevelBpe,
            SENTENCEPIECE_MODEL => VocabKind::SentencePiece,
            WORDPIECE_MODEL => VocabKind::WordPiece,
            UNIGRAM_MODEL => VocabKind::Unigram,
            _ => return Err(TokenizerError::UnsupportedModel { model: model.to_owned() }),
        };
        let bpe = kind == VocabKind::ByteLevelBpe;
        let wordpiece = kind == VocabKind::WordPiece;
        let unigram = kind == VocabKind::Unigram;
        let tokens = file.string_array(keys::TOKENS)?;
        // llama.cpp's defaults for `bert` files, where converters wrote `[CLS]` as the CLS key (which llama.cpp does
        // not read) and no BOS: BOS is `[CLS]`, the separator `[SEP]`, at BERT's ids when the file names neither.
        let in_vocab = |id: TokenId| ((id as usize) < tokens.len()).then_some(id);
        let bos_id = match file.optional(keys::BOS_ID, GgufFile::u32)? {
            None if wordpiece => file.optional(keys::CLS_ID, GgufFile::u32)?.or(in_vocab(BERT_CLS_ID)),
            id => id,
        };
        let sep_id = match file.optional(keys::SEP_ID, GgufFile::u32)? {
            None if wordpiece => in_vocab(BERT_SEP_ID),
            id => id,
        };
        // llama.cpp's defaults for `t5` files that name these tokens not.
        let t5_default = |key: &str, id: TokenId| -> Result<Option<TokenId>, TokenizerError> {
            Ok(match file.optional(key, GgufFile::u32)? {
                None if unigram => in_vocab(id),
                id => id,
            })
        };
        Ok(TokenizerSpec {
            kind,
            tokens,
            token_types: file.optional(keys::TOKEN_TYPE, GgufFile::i32_array)?,
            merges: if bpe { file.string_array(keys::MERGES)? } else { &[] },
            // Required for BPE: without it llama.cpp falls back to a "default" pre-tokenizer and warns that
            // generation quality will be degraded; ember refuses instead. SentencePiece has no pre-tokenizer.
            pre: if bpe { file.str(keys::PRE)? } else { "" },
            scores: if kind == VocabKind::SentencePiece || unigram {
                file.optional(keys::SCORES, GgufFile::f32_array)?
            } else {
                None
            },
            add_space_prefix: match kind {
                VocabKind::SentencePiece => file.optional(keys::ADD_SPACE_PREFIX, GgufFile::bool)?.unwrap_or(true),
                VocabKind::Unigram => file.optional(keys::ADD_SPACE_PREFIX, GgufFile::bool)?.unwrap_or(false),
                VocabKind::ByteLevelBpe | VocabKind::WordPiece => false,
            },
            // llama.cpp reads neither `escape_whitespaces` nor `treat_whitespace_as_suffix` from a file: Unigram
            // text always has its spaces escaped, as a prefix. ember follows it.
            precompiled_charsmap: if unigram {
                file.optional(keys::PRECOMPILED_CHARSMAP, GgufFile::byte_array)?
            } else {
                None
            },
            remove_extra_whitespaces: unigram
                && file.optional(keys::REMOVE_EXTRA_WHITESPACES, GgufFile::bool)?.unwrap_or(false),
            bos_id,
            eos_id: t5_default(keys::EOS_ID, T5_EOS_ID)?,
            pad_id: t5_default(keys::PAD_ID, T5_PAD_ID)?,
            unknown_id: t5_default(keys::UNKNOWN_ID, T5_UNKNOWN_ID)?,
            eot_id: file.optional(keys::EOT_ID, GgufFile::u32)?,
            add_bos: match file.optional(keys::ADD_BOS, GgufFile::bool)? {
                Some(add) => add,
                None if bpe => adds_bos_by_default(file.str(keys::PRE)?),
                None => !unigram,
            },
            fim_pre_id: file.optional(keys::FIM_PRE_ID, GgufFile::u32)?,
            fim_suf_id: file.optional(keys::FIM_SUF_ID, GgufFile::u32)?,
            fim_mid_id: file.optional(keys::FIM_MID_ID, GgufFile::u32)?,
            sep_id,
            add_sep: file.optional(keys::ADD_SEP, GgufFile::bool)?.unwrap_or(wordpiece),
            // llama.cpp ends a `t5` file's inputs with EOS unless the file says otherwise.
            add_eos: file.optional(keys::ADD_EOS, GgufFile::bool)?.unwrap_or(unigram),
            lowercase: file.optional(keys::NORMALIZER_LOWERCASE, GgufFile::bool)?,
            strip_accents: file.optional(keys::NORMALIZER_STRIP_ACCENTS, GgufFile::bool)?,
        })
    }
}

/// Whether a byte-level BPE vocabulary whose file has no `tokenizer.ggml.add_bos_token` starts prompts with BOS:
/// llama.cpp's defaults by pre-tokenizer (`llama_vocab::impl::load`): the Llama 3 family's (`llama-bpe` and its
/// aliases), Tekken's (Mistral Nemo and later) and Chameleon's do; every other one does not.
fn adds_bos_by_default(pre: &str) -> bool {
    const ADD_BOS: [&str; 11] = [
        "llama3",
        "llama-v3",
        "llama-bpe",
        "falcon3",
        "falcon-h1",
        "pixtral",
        "midm-2.0",
        "lfm2",
        "jina-v5-nano",
        "tekken",
        "chameleon",
    ];
    ADD_BOS.contains(&pre)
}
