//! The Llama 3 family's pre-tokenization, by hand: the regex
//! `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//!  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` that Llama 3.x (`llama-bpe`), DBRX and GLM-4 vocabularies
//! name, and its two variants: Qwen 2's (`\p{N}` alone instead of `\p{N}{1,3}`; also Qwen 3, DeepSeek-R1's Qwen
//! distills, StableLM 2, Grok 2) and Qwen 3.5's (combining marks join letter runs: `[\p{L}\p{M}]+`, and leave the
//! "other" class `[^\s\p{L}\p{M}\p{N}]`).
//!
//! Each alternative is tried in order at the current position and the first that matches is taken (leftmost-first,
//! as every regex engine these vocabularies were trained with does); together they match every character, so the
//! pieces cover the text. A separate hand-written pass instead of a regex engine: these vocabularies are the most
//! deployed, and the pass is several times faster than a backtracking engine on the look-ahead `\s+(?!\S)` (the
//! module tests check it against the regex itself).

use super::classes::{classify, run_len, CharClass};

/// Which member of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Llama3Rules {
    /// Longest run of number characters one piece takes: 3 for Llama 3, 1 for Qwen.
    pub max_digits: usize,
    /// Whether combining marks count as letters (Qwen 3.5).
    pub marks_are_letters: bool,
}

impl Llama3Rules {
    #[inline]
    fn is_letter(self, c: char) -> bool {
        match classify(c) {
            CharClass::Letter => true,
            CharClass::Mark => self.marks_are_letters,
            _ => false,
        }
    }

    /// `[^\s\p{L}\p{N}]` (Qwen 3.5: `[^\s\p{L}\p{M}\p{N}]`).
    #[inline]
    fn is_other(self, c: char) -> bool {
        match classify(c) {
            CharClass::Other => true,
            CharClass::Mark => !self.marks_are_letters,
            _ => false,
        }
    }

    /// Byte length of the first piece of `text` (non-empty).
    fn piece_len(self, text: &str) -> usize {
        let bytes = text.as_bytes();
        // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]): ASCII letters in either case.
        if bytes[0] == b'\'' {
            let lower = |i: usize| bytes.get(i).map(u8::to_ascii_lowercase);
            if let Some(b's' | b't' | b'm' | b'd') = lower(1) {
                return 2;
            }
            if let (Some(a), Some(b)) = (lower(1), lower(2)) {
                if matches!([a, b], [b'r', b'e'] | [b'v', b'e'] | [b'l', b'l']) {
                    return 3;
                }
            }
        }
        let mut chars = text.chars();
        let c0 = chars.next().expect("a piece is taken from a non-empty text");
        let c1 = chars.next();
        let class0 = classify(c0);
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if self.is_letter(c0) {
            return run_len(text, |c| self.is_letter(c));
        }
        if c0 != '\r' && c0 != '\n' && class0 != CharClass::Number && c1.is_some_and(|c| self.is_letter(c)) {
            let start = c0.len_utf8();
            return start + run_len(&text[start..], |c| self.is_letter(c));
        }
        // \p{N}{1,3}
        if class0 == CharClass::Number {
            return text
                .char_indices()
                .take(self.max_digits)
                .take_while(|&(_, c)| classify(c) == CharClass::Number)
                .last()
                .map_or(0, |(i, c)| i + c.len_utf8());
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let other_start = if self.is_other(c0) {
            Some(0)
        } else if c0 == ' ' && c1.is_some_and(|c| self.is_other(c)) {
            Some(1)
        } else {
            None
        };
        if let Some(start) = other_start {
            let end = start + run_len(&text[start..], |c| self.is_other(c));
            return end + run_len(&text[end..], |c| c == '\r' || c == '\n');
        }
        // What is left starts with whitespace.
        whitespace_piece_len(text)
    }
}

/// `\s*[\r\n]+`, then `\s+(?!\S)`, then `\s+`, for a `text` that starts with whitespace: a run holding a line break
/// ends after its last one; a run without reaching the end of the text gives up its last character (which then
/// leads the next piece) when it has several; otherwise the run is taken whole.
fn whitespace_piece_len(text: &str) -> usize {
    let mut run_end = 0;
    let mut last_start = 0;
    let mut count = 0;
    let mut after_last_break = 0;
    for (i, c) in text.char_indices() {
        if classify(c) != CharClass::Whitespace {
            break;
        }
        last_start = i;
        run_end = i + c.len_utf8();
        count += 1;
        if c == '\r' || c == '\n' {
            after_last_break = run_end;
        }
    }
    if after_last_break > 0 {
        after_last_break
    } else if count > 1 && run_end < text.len() {
        last_start
    } else {
        run_end
    }
}

/// Iterator over the pieces of a text under one member of the family.
pub struct Llama3Pieces<'a> {
    rules: Llama3Rules,
    rest: &'a str,
}

impl<'a> Llama3Pieces<'a> {
    pub(super) fn new(text: &'a str, rules: Llama3Rules) -> Self {
        Llama3Pieces { rules, rest: text }
    }
}

impl<'a> Iterator for Llama3Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let (piece, rest) = self.rest.split_at(self.rules.piece_len(self.rest));
        self.rest = rest;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA3: Llama3Rules = Llama3Rules { max_digits: 3, marks_are_letters: false };
    const QWEN2: Llama3Rules = Llama3Rules { max_digits: 1, marks_are_letters: false };
    const QWEN35: Llama3Rules = Llama3Rules { max_digits: 1, marks_are_letters: true };

    fn pieces(rules: Llama3Rules, text: &str) -> Vec<&str> {
        Llama3Pieces::new(text, rules).collect()
    }

    #[test]
    fn contractions_take_either_case() {
        assert_eq!(pieces(LLAMA3, "DON'T we'Re"), ["DON", "'T", " we", "'Re"]);
        assert_eq!(pieces(LLAMA3, "'x"), ["'x"]);
    }

    #[test]
    fn a_word_takes_one_leading_non_letter() {
        assert_eq!(pieces(LLAMA3, "Hello world"), ["Hello", " world"]);
        assert_eq!(pieces(LLAMA3, "(yes)\tno"), ["(yes", ")", "\tno"]);
        // Not a line break, not a number.
        assert_eq!(pieces(LLAMA3, "a\nb 1c"), ["a", "\n", "b", " ", "1", "c"]);
    }

    #[test]
    fn numbers_in_runs_of_three_or_one() {
        assert_eq!(pieces(LLAMA3, "1234567"), ["123", "456", "7"]);
        assert_eq!(pieces(QWEN2, "123"), ["1", "2", "3"]);
    }

    #[test]
    fn punctuation_takes_a_space_before_and_line_breaks_after() {
        assert_eq!(pieces(LLAMA3, "a ...\n\nb"), ["a", " ...\n\n", "b"]);
    }

    #[test]
    fn whitespace_runs() {
        assert_eq!(pieces(LLAMA3, "a   b"), ["a", "  ", " b"]);
        assert_eq!(pieces(LLAMA3, "a \n \n  b"), ["a", " \n \n", " ", " b"]);
        assert_eq!(pieces(LLAMA3, "end   "), ["end", "   "]);
    }

    #[test]
    fn marks_join_letters_only_for_qwen35() {
        assert_eq!(pieces(LLAMA3, "Cafe\u{301}s"), ["Cafe", "\u{301}s"]);
        assert_eq!(pieces(QWEN35, "Cafe\u{301}s"), ["Cafe\u{301}s"]);
    }
}
