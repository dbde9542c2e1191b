//! WordPiece (`tokenizer.ggml.model = "bert"`): the tokenizer of BERT's family (BGE, E5, all-MiniLM, GTE, nomic-embed),
//! equal token for token to the models' Hugging Face tokenizers (`BertNormalizer`, `BertPreTokenizer`, `WordPiece`),
//! which llama.cpp's `llm_tokenizer_wpm` (`src/llama-vocab.cpp`) follows.
//!
//! A text is normalized character by character: NUL, U+FFFD and the "other" characters (categories Cc, Cf, Cs, Co,
//! Cn) but tab and newlines are dropped, whitespace becomes a space, CJK ideographs get a space on each side; with
//! `strip_accents` each character is decomposed (NFD) and its non-spacing marks (Mn) dropped; with `lowercase` it is
//! lowercased. Words are then split at whitespace, and each punctuation character (ASCII punctuation, or a Unicode
//! P category) is a word of its own. Each word becomes its longest vocabulary prefix, then the longest continuation
//! of what remains, and so on; a word that cannot be covered this way, or longer than
//! [`MAX_WORD_CHARS`] characters, is the unknown token.
//!
//! llama.cpp's converter stores a word-start piece with a leading `▁` (U+2581) and a continuation (Hugging Face's
//! `##` prefix) without one, so a word is matched as `▁word`.
//!
//! Files written before llama.cpp's converter recorded the normalizer (`tokenizer.ggml.normalizer.lowercase`, absent
//! in llama.cpp's own `ggml-vocab-bert-bge.gguf`) do not say whether to lowercase. llama.cpp then does not; ember
//! lowercases when lowercasing changes no normal token of the vocabulary, since such a vocabulary can spell no
//! uppercase word (BGE's: its Hugging Face tokenizer lowercases). `strip_accents` follows `lowercase` unless the file
//! says otherwise, as in Hugging Face's `BertNormalizer`.

use unicode_general_category::{get_general_category, GeneralCategory};
use unicode_normalization::char::decompose_canonical;

use super::spm::SPACE;
use super::vocab::{TokenType, Vocab};
use super::TokenId;

/// Words longer than this (in characters) are the unknown token, as Hugging Face's `max_input_chars_per_word`.
pub const MAX_WORD_CHARS: usize = 100;

/// How a WordPiece vocabulary normalizes text.
pub(crate) struct WordPiece {
    lowercase: bool,
    strip_accents: bool,
    /// The token of a word the vocabulary cannot spell.
    unknown_id: Option<TokenId>,
    /// The longest token text in bytes: no match is tried beyond it.
    max_token_bytes: usize,
}

impl WordPiece {
    /// `lowercase` and `strip_accents` as the file says (`None`: absent; see the module's comment).
    pub(crate) fn new(
        vocab: &Vocab,
        lowercase: Option<bool>,
        strip_accents: Option<bool>,
        unknown_id: Option<TokenId>,
    ) -> Self {
        let lowercase = lowercase.unwrap_or_else(|| {
            !vocab.iter().any(|(_, text, t)| t == TokenType::Normal && text.chars().any(has_lowercase_form))
        });
        let max_token_bytes = vocab.iter().map(|(_, text, _)| text.len()).max().unwrap_or(0);
        WordPiece { lowercase, strip_accents: strip_accents.unwrap_or(lowercase), unknown_id, max_token_bytes }
    }

    /// Appends the tokens of `text` (one fragment, special tokens already cut out) to `out`.
    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<TokenId>) {
        let mut word = String::from(SPACE);
        let finish = |word: &mut String, out: &mut Vec<TokenId>| {
            if word.len() > SPACE.len() {
                self.encode_word(vocab, word, out);
                word.truncate(SPACE.len());
            }
        };
        for c in text.chars() {
            if c == '\0' || c == '\u{FFFD}' || is_control(c) {
                continue;
            }
            if c.is_whitespace() {
                finish(&mut word, out);
                continue;
            }
            if is_cjk_ideograph(c) {
                finish(&mut word, out);
                word.push(c);
                finish(&mut word, out);
                continue;
            }
            let mut push = |c: char| {
                if self.lowercase {
                    c.to_lowercase().for_each(|c| push_normalized(c, &mut word, out, &finish));
                } else {
                    push_normalized(c, &mut word, out, &finish);
                }
            };
            if self.strip_accents {
                decompose_canonical(c, |c| {
                    if get_general_category(c) != GeneralCategory::NonspacingMark {
                        push(c)
                    }
                });
            } else {
                push(c);
            }
        }
        finish(&mut word, out);
    }

    /// Appends the tokens of one word (`▁` and at least one character) to `out`.
    fn encode_word(&self, vocab: &Vocab, word: &str, out: &mut Vec<TokenId>) {
        let start_len = out.len();
        if word[SPACE.len()..].chars().count() <= MAX_WORD_CHARS {
            let mut rest = word;
            while !rest.is_empty() {
                let longest = rest
                    .char_indices()
                    .rev()
                    .map(|(i, c)| i + c.len_utf8())
                    .filter(|&end| end <= self.max_token_bytes)
                    .find_map(|end| vocab.id(&rest[..end]).map(|id| (id, end)));
                match longest {
                    Some((id, end)) => {
                        out.push(id);
                        rest = &rest[end..];
                    }
                    None => {
                        out.truncate(start_len);
                        break;
                    }
                }
            }
        }
        if out.len() == start_len {
            out.extend(self.unknown_id);
        }
    }
}

/// Whether lowercasing changes `c` (`ℝ` is uppercase but has no lowercase: BGE's uncased vocabulary holds it).
fn has_lowercase_form(c: char) -> bool {
    !c.to_lowercase().eq([c])
}

/// Adds a normalized character to the word being built, or, for punctuation, ends the word and adds the character
/// as a word of its own.
fn push_normalized(
    c: char,
    word: &mut String,
    out: &mut Vec<TokenId>,
    finish: &impl Fn(&mut String, &mut Vec<TokenId>),
) {
    if is_punctuation(c) {
        finish(word, out);
        word.push(c);
        finish(word, out);
    } else {
        word.push(c);
    }
}

/// Hugging Face's `BertNormalizer` drops these: the "other" categories (C*), but tab and newlines (whitespace).
fn is_control(c: char) -> bool {
    use GeneralCategory::*;
    !matches!(c, '\t' | '\n' | '\r')
        && matches!(get_general_category(c), Control | Format | Surrogate | PrivateUse | Unassigned)
}

/// `BertPreTokenizer`'s punctuation: ASCII punctuation (symbols such as `$` and `+` included) and the Unicode P
/// categories.
fn is_punctuation(c: char) -> bool {
    use GeneralCategory::*;
    c.is_ascii_punctuation()
        || matches!(
            get_general_category(c),
            ConnectorPunctuation
                | DashPunctuation
                | ClosePunctuation
                | FinalPunctuation
                | InitialPunctuation
                | OtherPunctuation
                | OpenPunctuation
        )
}

/// The CJK ideograph blocks `BertNormalizer` puts spaces around (its ranges, one of which, 0x2B920..=0x2CEAF,
/// differs from the Unicode block's start 0x2B820 as in its source).
fn is_cjk_ideograph(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tokenizer::spec::VocabKind;

    fn wordpiece(tokens: &[&str], lowercase: Option<bool>) -> (Vocab, WordPiece) {
        // Token 0 is `[UNK]`, typed unknown as in BERT's vocabularies; the others are normal.
        let texts: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
        let types: Vec<i32> = (0..texts.len()).map(|i| if i == 0 { 2 } else { 1 }).collect();
        let vocab = Vocab::with_kind(&texts, Some(&types), VocabKind::WordPiece).unwrap();
        let wp = WordPiece::new(&vocab, lowercase, None, Some(0));
        (vocab, wp)
    }

    fn encode(vocab: &Vocab, wp: &WordPiece, text: &str) -> Vec<TokenId> {
        let mut out = Vec::new();
        wp.encode(vocab, text, &mut out);
        out
    }

    #[test]
    fn words_take_the_longest_prefix_then_continuations() {
        let (v, wp) = wordpiece(&["[UNK]", "▁un", "▁unaff", "able", "aff", "▁!"], None);
        assert_eq!(encode(&v, &wp, "unaffable!"), [2, 3, 5]);
        // "unaffx": nothing continues "x", so the whole word is unknown.
        assert_eq!(encode(&v, &wp, "  unaffx  un"), [0, 1]);
    }

    #[test]
    fn an_uncased_vocabulary_lowercases_and_strips_accents() {
        let (v, wp) = wordpiece(&["[UNK]", "▁apfel", "▁cafe"], None);
        assert_eq!(encode(&v, &wp, "Äpfel CAFÉ"), [1, 2]);
        let (v, wp) = wordpiece(&["[UNK]", "▁apfel", "▁Apfel"], None);
        assert_eq!(encode(&v, &wp, "Apfel apfel"), [2, 1]);
        let (v, wp) = wordpiece(&["[UNK]", "▁apfel", "▁Apfel"], Some(true));
        assert_eq!(encode(&v, &wp, "Apfel"), [1]);
    }

    #[test]
    fn controls_go_and_ideographs_stand_alone() {
        let (v, wp) = wordpiece(&["[UNK]", "▁a", "▁我", "▁b"], None);
        assert_eq!(encode(&v, &wp, "a\u{200d}我b\u{0}"), [1, 2, 3]);
    }

    #[test]
    fn overlong_words_are_unknown() {
        let (v, wp) = wordpiece(&["[UNK]", "▁a", "a"], None);
        assert_eq!(encode(&v, &wp, &"a".repeat(MAX_WORD_CHARS)).len(), MAX_WORD_CHARS);
        assert_eq!(encode(&v, &wp, &"a".repeat(MAX_WORD_CHARS + 1)), [0]);
    }
}
