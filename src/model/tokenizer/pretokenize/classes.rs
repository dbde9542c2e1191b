//! The character classes the hand-written pre-tokenizers distinguish, as llama.cpp's `unicode_cpt_flags` and the
//! regexes' `\p{…}` define them: `\p{L}` is general category L (letters), `\p{M}` category M (combining marks),
//! `\p{N}` category N (`char::is_numeric`), `\s` the Unicode `White_Space` property (`char::is_whitespace`; llama.cpp's
//! `unicode_set_whitespace` is the same set). The tables may differ from llama.cpp's for characters assigned in recent
//! Unicode versions (ember's: Unicode 16 for letters and marks via `unicode-general-category`, the standard library's
//! version for numbers and whitespace).

use unicode_general_category::{get_general_category, GeneralCategory};

/// The classes the regexes distinguish. Exclusive: no character is in two of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CharClass {
    Letter,
    /// A combining mark: "other" for GPT-2's and Llama 3's regexes, joined to letters by Qwen 3.5's.
    Mark,
    Number,
    Whitespace,
    /// Anything else: punctuation, symbols, controls, unassigned code points.
    Other,
}

/// Classes of the ASCII characters, so that the common case needs no table search.
const ASCII_CLASS: [CharClass; 128] = {
    let mut table = [CharClass::Other; 128];
    let mut b = 0;
    while b < 128 {
        table[b] = match b as u8 {
            b'a'..=b'z' | b'A'..=b'Z' => CharClass::Letter,
            b'0'..=b'9' => CharClass::Number,
            b'\t'..=b'\r' | b' ' => CharClass::Whitespace,
            _ => CharClass::Other,
        };
        b += 1;
    }
    table
};

#[inline]
pub(super) fn classify(c: char) -> CharClass {
    if c.is_ascii() {
        return ASCII_CLASS[c as usize];
    }
    if c.is_whitespace() {
        return CharClass::Whitespace;
    }
    if c.is_numeric() {
        return CharClass::Number;
    }
    use GeneralCategory::*;
    match get_general_category(c) {
        UppercaseLetter | LowercaseLetter | TitlecaseLetter | ModifierLetter | OtherLetter => CharClass::Letter,
        NonspacingMark | SpacingMark | EnclosingMark => CharClass::Mark,
        _ => CharClass::Other,
    }
}

/// Byte length of the run of characters at the start of `text` for which `keep` holds.
#[inline]
pub(super) fn run_len(text: &str, keep: impl Fn(char) -> bool) -> usize {
    text.char_indices().find(|&(_, c)| !keep(c)).map_or(text.len(), |(i, _)| i)
}
