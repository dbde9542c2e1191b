//! GPT-2's pre-tokenization, by hand, and SmolLM's (numbers first):
//! - `gpt-2` (`LLAMA_VOCAB_PRE_TYPE_GPT2`): the GPT-2 regex
//!   `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`, as llama.cpp's hand-written
//!   `unicode_regex_split_custom_gpt2` (`src/unicode.cpp`) runs it.
//! - `smollm` (`LLAMA_VOCAB_PRE_TYPE_SMOLLM`, which shares STARCODER's regex list): first `\p{N}` — every number
//!   character becomes a piece of its own and the text between stays whole — then the GPT-2 regex within each of
//!   those pieces independently. The end of a piece is the end of the text for the GPT-2 regex, which matters for
//!   `\s+(?!\S)`: in `"a  1"` the two spaces before the digit end their piece, so they stay together.
//!
//! Contractions are matched case-sensitively and the optional leading space is U+0020 only; combining marks are
//! `[^\s\p{L}\p{N}]` (`classes.rs` for the classes).

use super::classes::{classify, CharClass};

/// GPT-2's view of a character: marks are "other".
#[inline]
fn class(c: char) -> CharClass {
    match classify(c) {
        CharClass::Mark => CharClass::Other,
        class => class,
    }
}

/// Iterator over the GPT-2 pieces of a text, optionally after SmolLM's number split.
pub struct Gpt2Pieces<'a> {
    /// Whether number characters are split off first (`smollm`).
    split_numbers: bool,
    /// Text not yet divided into segments.
    unsplit: &'a str,
    /// The rest of the current segment: the text the GPT-2 regex sees, its end being the regex's end of input.
    segment: &'a str,
}

impl<'a> Gpt2Pieces<'a> {
    pub(super) fn new(text: &'a str, split_numbers: bool) -> Self {
        Gpt2Pieces { split_numbers, unsplit: text, segment: "" }
    }
}

impl<'a> Iterator for Gpt2Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.segment.is_empty() {
            if self.unsplit.is_empty() {
                return None;
            }
            let len = if self.split_numbers { number_segment_len(self.unsplit) } else { self.unsplit.len() };
            (self.segment, self.unsplit) = self.unsplit.split_at(len);
        }
        let (piece, rest) = self.segment.split_at(gpt2_piece_len(self.segment));
        self.segment = rest;
        Some(piece)
    }
}

/// Byte length of the first segment of `text` (non-empty) under the `\p{N}` split: one number character, or the
/// text up to the next one.
fn number_segment_len(text: &str) -> usize {
    let mut chars = text.char_indices();
    match chars.next() {
        Some((_, c)) if class(c) == CharClass::Number => c.len_utf8(),
        _ => chars.find(|&(_, c)| class(c) == CharClass::Number).map_or(text.len(), |(i, _)| i),
    }
}

/// Byte length of the first piece of `segment` (non-empty) under the GPT-2 regex, the alternatives tried in the
/// order of llama.cpp's `unicode_regex_split_custom_gpt2`.
fn gpt2_piece_len(segment: &str) -> usize {
    let bytes = segment.as_bytes();
    // 's|'t|'re|'ve|'m|'ll|'d
    if bytes[0] == b'\'' {
        if let Some(b's' | b't' | b'm' | b'd') = bytes.get(1) {
            return 2;
        }
        if let Some(b"re" | b"ve" | b"ll") = bytes.get(1..3) {
            return 3;
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the class of the first character after an optional space.
    let (body_start, body_class) = match segment.chars().next() {
        Some(' ') => (1, segment[1..].chars().next().map(class)),
        first => (0, first.map(class)),
    };
    match body_class {
        Some(class @ (CharClass::Letter | CharClass::Number | CharClass::Other)) => {
            body_start + run_len(&segment[body_start..], class)
        }
        // The first character is whitespace (a lone space at the end included).
        Some(CharClass::Whitespace) | None => whitespace_piece_len(segment),
        Some(CharClass::Mark) => unreachable!("`class` maps marks to other"),
    }
}

/// Byte length of the run of `of` characters at the start of `text`.
fn run_len(text: &str, of: CharClass) -> usize {
    super::classes::run_len(text, |c| class(c) == of)
}

/// `\s+(?!\S)` then `\s+`, for a `text` that starts with whitespace: a run of several whitespace characters
/// followed by something else gives up its last character, which then leads the next piece (a space there joins
/// the word after it); a run reaching the end of the text, or of one character, is taken whole.
fn whitespace_piece_len(text: &str) -> usize {
    let mut run_end = 0;
    let mut last_start = 0;
    let mut count = 0;
    for (i, c) in text.char_indices() {
        if class(c) != CharClass::Whitespace {
            break;
        }
        last_start = i;
        run_end = i + c.len_utf8();
        count += 1;
    }
    if count > 1 && run_end < text.len() {
        last_start
    } else {
        run_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpt2(text: &str) -> Vec<&str> {
        Gpt2Pieces::new(text, false).collect()
    }

    fn smollm(text: &str) -> Vec<&str> {
        Gpt2Pieces::new(text, true).collect()
    }

    #[test]
    fn empty_text_has_no_pieces() {
        assert!(gpt2("").is_empty());
        assert!(smollm("").is_empty());
    }

    #[test]
    fn contractions_are_case_sensitive() {
        assert_eq!(
            gpt2("don't I'll we've they're I'm he'd it's"),
            ["don", "'t", " I", "'ll", " we", "'ve", " they", "'re", " I", "'m", " he", "'d", " it", "'s"]
        );
        // Upper case is not a contraction: the apostrophe is punctuation, the letters a word.
        assert_eq!(gpt2("DON'T"), ["DON", "'", "T"]);
        // A lone or final apostrophe is punctuation; `'x` is not a contraction.
        assert_eq!(gpt2("'"), ["'"]);
        assert_eq!(gpt2("'x"), ["'", "x"]);
        assert_eq!(gpt2("'r"), ["'", "r"]);
    }

    #[test]
    fn letters_take_one_leading_space() {
        assert_eq!(gpt2("Hello world"), ["Hello", " world"]);
        assert_eq!(gpt2(" Hello"), [" Hello"]);
        // Marks are not letters: a decomposed `é` splits (U+0301 is punctuation-like for the regex).
        assert_eq!(gpt2("Cafe\u{301} naïve"), ["Cafe", "\u{301}", " naïve"]);
        assert_eq!(gpt2("Ñandú Straße"), ["Ñandú", " Straße"]);
    }

    #[test]
    fn gpt2_keeps_digit_runs_together_and_smollm_splits_every_digit() {
        assert_eq!(gpt2("12345 67"), ["12345", " 67"]);
        assert_eq!(smollm("12345 67"), ["1", "2", "3", "4", "5", " ", "6", "7"]);
        assert_eq!(smollm("3.14"), ["3", ".", "1", "4"]);
        assert_eq!(smollm("abc123def"), ["abc", "1", "2", "3", "def"]);
        // Non-ASCII numbers are numbers too: Arabic-Indic digits, superscripts, Roman numerals.
        assert_eq!(smollm("x٣²Ⅻ"), ["x", "٣", "²", "Ⅻ"]);
        assert_eq!(gpt2("x ٣²Ⅻ"), ["x", " ٣²Ⅻ"]);
    }

    #[test]
    fn the_number_split_ends_the_gpt2_input() {
        // With `smollm` the spaces before a digit end their segment, so `\s+(?!\S)` takes them all.
        assert_eq!(smollm("a  1"), ["a", "  ", "1"]);
        assert_eq!(gpt2("a  1"), ["a", " ", " 1"]);
    }

    #[test]
    fn punctuation_runs_take_one_leading_space() {
        assert_eq!(gpt2("Wait... what?!?!"), ["Wait", "...", " what", "?!?!"]);
        assert_eq!(gpt2("a --- ***///"), ["a", " ---", " ***///"]);
        assert_eq!(gpt2("(yes) [no]"), ["(", "yes", ")", " [", "no", "]"]);
        assert_eq!(gpt2("add(a, b):"), ["add", "(", "a", ",", " b", "):"]);
    }

    #[test]
    fn whitespace_runs_leave_their_last_space_to_the_next_word() {
        assert_eq!(gpt2("  leading two spaces"), [" ", " leading", " two", " spaces"]);
        assert_eq!(gpt2("a   b"), ["a", "  ", " b"]);
        // A run before punctuation leaves its last space too; the space then leads the punctuation.
        assert_eq!(gpt2("a  !"), ["a", " ", " !"]);
        // At the end of the text the whole run is one piece.
        assert_eq!(gpt2("trailing   "), ["trailing", "   "]);
        assert_eq!(gpt2("Hello "), ["Hello", " "]);
        assert_eq!(gpt2(" "), [" "]);
    }

    #[test]
    fn newlines_and_tabs_are_whitespace_but_never_a_leading_space() {
        // `\n\n` before a word gives up its last `\n`, which (not being a space) stands alone.
        assert_eq!(gpt2("one\ntwo\n\nfour"), ["one", "\n", "two", "\n", "\n", "four"]);
        assert_eq!(gpt2("end\n\n"), ["end", "\n\n"]);
        assert_eq!(gpt2("\ttab\tvalues\t"), ["\t", "tab", "\t", "values", "\t"]);
        assert_eq!(gpt2(" \n \n"), [" \n \n"]);
        assert_eq!(gpt2("x \n y"), ["x", " \n", " y"]);
        assert_eq!(gpt2(":\n    return"), [":", "\n   ", " return"]);
        // Non-ASCII whitespace: U+00A0 and U+3000 are `\s`, and not the optional leading space.
        assert_eq!(gpt2("a\u{a0}b\u{3000}\u{3000}c"), ["a", "\u{a0}", "b", "\u{3000}", "\u{3000}", "c"]);
    }

    #[test]
    fn cjk_is_letters_and_its_punctuation_is_not() {
        assert_eq!(gpt2("你好，世界！"), ["你好", "，", "世界", "！"]);
        assert_eq!(gpt2("日本語 テキスト"), ["日本語", " テキスト"]);
    }

    #[test]
    fn emoji_and_joiners_are_other() {
        // Emoji are symbols; U+FE0F (variation selector) is a mark and U+200D (joiner) a format control: all
        // `[^\s\p{L}\p{N}]`, so a run of them is one piece.
        assert_eq!(gpt2("Emoji: 😀👍🏽🚀 ❤️ 🇫🇷"), ["Emoji", ":", " 😀👍🏽🚀", " ❤️", " 🇫🇷"]);
        assert_eq!(gpt2("a👨\u{200d}👩b"), ["a", "👨\u{200d}👩", "b"]);
    }

    #[test]
    fn control_characters_are_other() {
        assert_eq!(gpt2("a\u{0}\u{1f}b"), ["a", "\u{0}\u{1f}", "b"]);
        assert_eq!(gpt2("a \u{7f}"), ["a", " \u{7f}"]);
    }

    #[test]
    fn pieces_cover_the_text() {
        for text in ["", "x", "  a  b  ", "1 2  3\n\n4", "'s's 's", "é\u{301}\u{301} ١٢"] {
            for split_numbers in [false, true] {
                let pieces: Vec<&str> = Gpt2Pieces::new(text, split_numbers).collect();
                assert!(pieces.iter().all(|p| !p.is_empty()), "{split_numbers} {text:?}: {pieces:?}");
                assert_eq!(pieces.concat(), text);
            }
        }
    }
}
