//! Pre-tokenization by a list of regexes, for the vocabularies without a hand-written pass: each regex in turn
//! splits every piece the previous ones left, its matches becoming pieces and the text between them staying pieces
//! too (Hugging Face's `Split` with the "isolated" behaviour, and llama.cpp's `unicode_regex_split`). A piece's end
//! is the end of the text for the next regex (`$`, `(?!\S)`).
//!
//! The engine is `fancy-regex`: these patterns need look-ahead (`\s+(?!\S)`, Tekken's `(?=[\p{L}])`), which the
//! `regex` crate lacks, and it matches leftmost-first with Unicode classes, as the Oniguruma and `regex` engines the
//! vocabularies were made with do. The patterns are the vocabularies' own (their `tokenizer.json`), as llama.cpp's
//! `llama-vocab.cpp` lists them.

use fancy_regex::Regex;

/// Compiled patterns, applied in order.
pub struct RegexList {
    regexes: Vec<Regex>,
}

impl RegexList {
    /// Compiles `patterns`.
    ///
    /// # Panics
    /// If a pattern does not compile: they are constants of this crate, each compiled by a test.
    pub fn new(patterns: &[&str]) -> Self {
        let regexes = patterns.iter().map(|p| Regex::new(p).unwrap_or_else(|e| panic!("{p:?}: {e}"))).collect();
        RegexList { regexes }
    }

    /// The pieces of `text`, in order; their concatenation is `text`, and none is empty.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut pieces = if text.is_empty() { Vec::new() } else { vec![text] };
        let mut next = Vec::new();
        for regex in &self.regexes {
            next.clear();
            for &piece in &pieces {
                split_one(regex, piece, &mut next);
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        pieces
    }
}

/// Appends `piece` cut at `regex`'s matches to `out`.
fn split_one<'a>(regex: &Regex, piece: &'a str, out: &mut Vec<&'a str>) {
    let mut at = 0;
    for found in regex.find_iter(piece) {
        // An error is the backtracking limit (1,000,000 steps) on a pathological piece: the rest stays whole
        // rather than failing the request.
        let Ok(found) = found else { break };
        if found.start() > at {
            out.push(&piece[at..found.start()]);
        }
        if found.end() > found.start() {
            out.push(found.as_str());
        }
        at = found.end();
    }
    if at < piece.len() {
        out.push(&piece[at..]);
    }
}
