//! The token table: each token's text and type, the text → id lookup, and the bytes each token decodes to
//! (computed once at load).

use rustc_hash::FxHashMap;

use super::byte_level;
use super::spec::{keys, VocabKind};
use super::spm::SPACE;
use super::{TokenId, TokenizerError};

/// What a token is, as `tokenizer.ggml.token_type` says (llama.cpp's `llama_token_type`; the numbers are the GGUF
/// values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum TokenType {
    Undefined = 0,
    /// Ordinary text, in the byte-level alphabet.
    Normal = 1,
    Unknown = 2,
    /// A marker such as `<|im_start|>`: matched in text only when special tokens are parsed, decoded only when
    /// special tokens are included.
    Control = 3,
    /// A token added by hand: always matched in text before BPE, always decoded as its text.
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
}

impl TokenType {
    pub fn from_gguf(value: i32) -> Option<Self> {
        use TokenType::*;
        Some(match value {
            0 => Undefined,
            1 => Normal,
            2 => Unknown,
            3 => Control,
            4 => UserDefined,
            5 => Unused,
            6 => Byte,
            _ => return None,
        })
    }

    /// Control and unknown tokens: llama.cpp's `attr_special` in `token_to_piece`, the tokens left out of text
    /// unless special tokens are asked for.
    pub fn is_special(self) -> bool {
        matches!(self, TokenType::Control | TokenType::Unknown)
    }
}

/// The token table of one vocabulary.
pub(crate) struct Vocab {
    /// `texts[id]`: the token's text (byte-level alphabet for normal tokens, literal for the others).
    texts: Vec<Box<str>>,
    /// `types[id]`.
    types: Vec<TokenType>,
    /// Text → id. Where two tokens share a text, the later id wins, as in llama.cpp's `token_to_id`.
    ids: FxHashMap<Box<str>, TokenId>,
    /// The bytes every token decodes to with special tokens included, concatenated in id order; token `id`'s are
    /// `piece_bytes[piece_ends[id - 1]..piece_ends[id]]` (from 0 for id 0).
    piece_bytes: Vec<u8>,
    /// End offset of each token's bytes in `piece_bytes`; one entry per token.
    piece_ends: Vec<usize>,
}

impl Vocab {
    /// Builds a byte-level BPE table (see [`Vocab::with_kind`]).
    #[cfg(test)]
    pub(crate) fn new(texts: &[String], raw_types: Option<&[i32]>) -> Result<Self, TokenizerError> {
        Self::with_kind(texts, raw_types, VocabKind::ByteLevelBpe)
    }

    /// Builds the table from `texts` and optional raw `tokenizer.ggml.token_type` values (absent: all normal, as in
    /// llama.cpp); `kind` decides what normal and byte tokens decode to.
    pub(crate) fn with_kind(
        texts: &[String],
        raw_types: Option<&[i32]>,
        kind: VocabKind,
    ) -> Result<Self, TokenizerError> {
        if texts.is_empty() {
            return Err(TokenizerError::EmptyVocabulary);
        }
        // `limits.rs` holds a file's vocabulary far below this; a table built from parts must still number its
        // tokens in 32 bits.
        if TokenId::try_from(texts.len()).is_err() {
            return Err(TokenizerError::TooMany { key: keys::TOKENS, count: texts.len(), max: TokenId::MAX as usize });
        }
        let types = match raw_types {
            None => vec![TokenType::Normal; texts.len()],
            Some(raw) if raw.len() != texts.len() => {
                return Err(TokenizerError::TokenTypeCount { types: raw.len(), tokens: texts.len() })
            }
            Some(raw) => (0..)
                .zip(raw)
                .map(|(id, &value)| TokenType::from_gguf(value).ok_or(TokenizerError::UnknownTokenType { id, value }))
                .collect::<Result<_, _>>()?,
        };
        let texts: Vec<Box<str>> = (0..)
            .zip(texts)
            .map(|(id, text): (TokenId, _)| {
                // llama.cpp renames empty tokens so that no token matches the empty string (`llama_vocab::load`).
                if text.is_empty() {
                    format!("[EMPTY_{id}]").into_boxed_str()
                } else {
                    text.as_str().into()
                }
            })
            .collect();
        let mut ids = FxHashMap::with_capacity_and_hasher(texts.len(), Default::default());
        for (id, text) in (0..).zip(&texts) {
            ids.insert(text.clone(), id);
        }
        let mut piece_bytes = Vec::new();
        let mut piece_ends = Vec::with_capacity(texts.len());
        for (text, &token_type) in texts.iter().zip(&types) {
            push_piece(text, token_type, kind, &mut piece_bytes);
            piece_ends.push(piece_bytes.len());
        }
        Ok(Vocab { texts, types, ids, piece_bytes, piece_ends })
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    pub(crate) fn id(&self, text: &str) -> Option<TokenId> {
        self.ids.get(text).copied()
    }

    pub(crate) fn text(&self, id: TokenId) -> Option<&str> {
        self.texts.get(id as usize).map(|t| &**t)
    }

    pub(crate) fn token_type(&self, id: TokenId) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// Makes token `id` a control token (llama.cpp does so for end-of-generation markers the file typed otherwise).
    pub(crate) fn make_control(&mut self, id: TokenId) {
        self.types[id as usize] = TokenType::Control;
    }

    /// All tokens as `(id, text, type)`, in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TokenId, &str, TokenType)> {
        (0..).zip(self.texts.iter().zip(&self.types)).map(|(id, (text, &t))| (id, &**text, t))
    }

    /// The bytes token `id` decodes to; control and unknown tokens decode to nothing unless `include_special`.
    pub(crate) fn piece(&self, id: TokenId, include_special: bool) -> Option<&[u8]> {
        let i = id as usize;
        let end = *self.piece_ends.get(i)?;
        if !include_special && self.types[i].is_special() {
            return Some(&[]);
        }
        let start = if i == 0 { 0 } else { self.piece_ends[i - 1] };
        Some(&self.piece_bytes[start..end])
    }
}

/// Appends what one token decodes to, following llama.cpp's `token_to_piece`: control, unknown and user-defined
/// tokens are their text; normal tokens are their byte-level text decoded (BPE) or their text with `▁` as a space
/// (SentencePiece, WordPiece, Unigram); a SentencePiece or Unigram byte token `<0xNN>` is its byte; the other types
/// decode to nothing.
fn push_piece(text: &str, token_type: TokenType, kind: VocabKind, out: &mut Vec<u8>) {
    match (token_type, kind) {
        (TokenType::Control | TokenType::Unknown | TokenType::UserDefined, _) => out.extend_from_slice(text.as_bytes()),
        (TokenType::Normal, VocabKind::ByteLevelBpe) => byte_level::decode_token_text(text, out),
        (TokenType::Normal, VocabKind::SentencePiece | VocabKind::WordPiece | VocabKind::Unigram) => {
            out.extend_from_slice(text.replace(SPACE, " ").as_bytes())
        }
        (TokenType::Byte, VocabKind::SentencePiece | VocabKind::Unigram) => out.extend(byte_token_value(text)),
        (TokenType::Undefined | TokenType::Unused | TokenType::Byte, _) => {}
    }
}

/// The byte a SentencePiece byte token such as `<0x0A>` stands for (`None` for another text).
fn byte_token_value(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn pieces_follow_the_token_type() {
        let texts = strings(&["<|end|>", "ĠHi", "<user>", "x", "y", "<unk>"]);
        let types = [3, 1, 4, 5, 6, 2];
        let v = Vocab::new(&texts, Some(&types)).unwrap();
        assert_eq!(v.piece(0, true), Some(&b"<|end|>"[..]));
        assert_eq!(v.piece(0, false), Some(&b""[..]));
        assert_eq!(v.piece(1, false), Some(&b" Hi"[..]));
        assert_eq!(v.piece(2, false), Some(&b"<user>"[..]));
        assert_eq!(v.piece(3, true), Some(&b""[..]));
        assert_eq!(v.piece(4, true), Some(&b""[..]));
        assert_eq!(v.piece(5, true), Some(&b"<unk>"[..]));
        assert_eq!(v.piece(5, false), Some(&b""[..]));
        assert_eq!(v.piece(6, true), None);
    }

    #[test]
    fn later_duplicates_win_and_empty_tokens_are_renamed() {
        let v = Vocab::new(&strings(&["a", "", "a"]), None).unwrap();
        assert_eq!(v.id("a"), Some(2));
        assert_eq!(v.text(1), Some("[EMPTY_1]"));
        assert_eq!(v.id(""), None);
    }

    #[test]
    fn token_types_are_checked() {
        let texts = strings(&["a", "b"]);
        assert!(matches!(Vocab::new(&texts, Some(&[1])), Err(TokenizerError::TokenTypeCount { types: 1, tokens: 2 })));
        assert!(matches!(Vocab::new(&texts, Some(&[1, 7])), Err(TokenizerError::UnknownTokenType { id: 1, value: 7 })));
        assert!(matches!(Vocab::new(&[], None), Err(TokenizerError::EmptyVocabulary)));
    }
}
