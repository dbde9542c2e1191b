//! Special tokens in text: cutting the text at every occurrence of a control, unknown or user-defined token's text
//! before pre-tokenization, so that `<|im_start|>` becomes its one id rather than nine pieces of punctuation.
//!
//! The procedure is llama.cpp's `tokenizer_st_partition` (`src/llama-vocab.cpp`): the special tokens are taken one
//! at a time, longest text first, and each cuts every text fragment that remains at all of its non-overlapping
//! occurrences, leftmost first. Taking token by token (rather than scanning the text once for the longest match at
//! each position) decides overlaps the same way llama.cpp does. Two tokens of equal length are taken in id order;
//! llama.cpp's unstable `std::sort` leaves that order unspecified, which can only matter when two such texts overlap
//! in the input.

use super::vocab::{TokenType, Vocab};
use super::TokenId;

/// A stretch of input: text still to be tokenized, or a special token already recognized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    Text(&'a str),
    Token(TokenId),
}

/// The special tokens of a vocabulary, in the order they cut text.
pub(crate) struct SpecialTokens {
    /// Longest text first, ties by id.
    tokens: Vec<SpecialToken>,
}

struct SpecialToken {
    id: TokenId,
    text: Box<str>,
    /// Matched only when the caller parses special tokens (control and unknown tokens); user-defined tokens are
    /// matched always, like Hugging Face's added tokens (llama.cpp: "User-defined tokens are still pre-tokenized
    /// before everything else").
    needs_parse_special: bool,
}

impl SpecialTokens {
    pub(crate) fn new(vocab: &Vocab) -> Self {
        let mut tokens: Vec<SpecialToken> = vocab
            .iter()
            .filter(|&(_, _, t)| matches!(t, TokenType::Control | TokenType::Unknown | TokenType::UserDefined))
            .map(|(id, text, t)| SpecialToken { id, text: text.into(), needs_parse_special: t.is_special() })
            .collect();
        tokens.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        SpecialTokens { tokens }
    }

    /// Cuts `text` into fragments. Their texts and tokens, in order, spell `text`; no text fragment is empty.
    pub(crate) fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut fragments = if text.is_empty() { Vec::new() } else { vec![Fragment::Text(text)] };
        let mut cut = Vec::new();
        for token in self.tokens.iter().filter(|t| parse_special || !t.needs_parse_special) {
            // Most texts contain most special tokens nowhere: leave the list alone then.
            let occurs = fragments.iter().any(|f| matches!(f, Fragment::Text(t) if t.contains(&*token.text)));
            if !occurs {
                continue;
            }
            cut.clear();
            for &fragment in &fragments {
                match fragment {
                    Fragment::Text(t) => split_at_occurrences(t, token, &mut cut),
                    Fragment::Token(_) => cut.push(fragment),
                }
            }
            std::mem::swap(&mut fragments, &mut cut);
        }
        fragments
    }
}

/// Appends `text` cut at every occurrence of `token` to `out`. Token texts are never empty (the vocabulary renames
/// empty ones), so the occurrences are well defined; they lie on character boundaries because both strings are
/// UTF-8.
fn split_at_occurrences<'a>(text: &'a str, token: &SpecialToken, out: &mut Vec<Fragment<'a>>) {
    let mut rest_start = 0;
    for (start, matched) in text.match_indices(&*token.text) {
        if start > rest_start {
            out.push(Fragment::Text(&text[rest_start..start]));
        }
        out.push(Fragment::Token(token.id));
        rest_start = start + matched.len();
    }
    if rest_start < text.len() {
        out.push(Fragment::Text(&text[rest_start..]));
    }
}

#[cfg(test)]
mod tests {
    use super::Fragment::{Text, Token};
    use super::*;

    fn specials(entries: &[(&str, TokenType)]) -> SpecialTokens {
        let texts: Vec<String> = entries.iter().map(|(t, _)| t.to_string()).collect();
        let types: Vec<i32> = entries.iter().map(|&(_, t)| t as i32).collect();
        SpecialTokens::new(&Vocab::new(&texts, Some(&types)).unwrap())
    }

    #[test]
    fn control_tokens_are_cut_out_only_when_parsing_special() {
        let s = specials(&[("<s>", TokenType::Control), ("a", TokenType::Normal)]);
        assert_eq!(s.partition("x<s>y<s><s>", true), [Text("x"), Token(0), Text("y"), Token(0), Token(0)]);
        assert_eq!(s.partition("x<s>y", false), [Text("x<s>y")]);
        assert_eq!(s.partition("", true), []);
    }

    #[test]
    fn user_defined_tokens_are_cut_out_always() {
        let s = specials(&[("<u>", TokenType::UserDefined), ("<c>", TokenType::Control)]);
        assert_eq!(s.partition("<c><u>", false), [Text("<c>"), Token(0)]);
        assert_eq!(s.partition("<c><u>", true), [Token(1), Token(0)]);
    }

    #[test]
    fn longer_tokens_cut_first_even_when_a_shorter_one_starts_earlier() {
        // llama.cpp's order: "bcd" (longer) is cut before "ab" is looked for, so "ab" no longer occurs.
        let s = specials(&[("ab", TokenType::Control), ("bcd", TokenType::Control)]);
        assert_eq!(s.partition("abcd", true), [Text("a"), Token(1)]);
        assert_eq!(s.partition("abab", true), [Token(0), Token(0)]);
    }
}
