//! SentencePiece (`tokenizer.ggml.model = "llama"`): score-driven merges of UTF-8 characters, with byte fallback,
//! equal token for token to llama.cpp's `llm_tokenizer_spm` (`src/llama-vocab.cpp`).
//!
//! A fragment of text (special tokens already cut out) has its spaces written as `▁` (U+2581), then starts as one
//! symbol per character. Every adjacent pair whose concatenation is a token is a candidate; the candidate whose
//! token has the highest score merges first (ties: the leftmost), and the merged symbol's new pairs become
//! candidates, until none is left. Each final symbol is then emitted as its token; a symbol that is no token can only
//! be a single character the vocabulary lacks (a merge always forms a token), whose UTF-8 bytes become byte tokens
//! `<0xNN>`. (llama.cpp's `resegment` also splits symbols back along their merges, a path this makes unreachable.)

use std::collections::BinaryHeap;

use super::vocab::Vocab;
use super::TokenId;

/// What SentencePiece writes for a space.
pub(crate) const SPACE: &str = "\u{2581}";

/// The scores and byte tokens SentencePiece needs beyond the token table.
pub(crate) struct Spm {
    /// `scores[id]` (`tokenizer.ggml.scores`; all 0 when absent).
    scores: Vec<f32>,
    /// The token of each byte, `<0xNN>` (the unknown token where the vocabulary has no such token).
    byte_tokens: Vec<Option<TokenId>>,
}

/// A symbol of the text being merged: a byte range, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    /// Length in bytes; 0 once merged into its left neighbour.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A merge candidate: symbols `left` and `right`, whose texts (`len` bytes together) form a token of `score`.
#[derive(Clone, Copy)]
struct Candidate {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// The greatest candidate merges first: the higher score, then the leftmost (llama.cpp's `llm_bigram_spm`).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score.total_cmp(&other.score).then(other.left.cmp(&self.left))
    }
}

impl Spm {
    pub(crate) fn new(vocab: &Vocab, scores: Option<&[f32]>, unknown_id: Option<TokenId>) -> Self {
        let scores = match scores {
            Some(s) => s.to_vec(),
            None => vec![0.0; vocab.len()],
        };
        let byte_tokens = (0..=255u8).map(|b| vocab.id(&format!("<0x{b:02X}>")).or(unknown_id)).collect();
        Spm { scores, byte_tokens }
    }

    /// Appends the tokens of `text` (one fragment, spaces not yet escaped) to `out`.
    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<TokenId>) {
        let text = text.replace(' ', SPACE);
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            let end = start + c.len_utf8();
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: (end < text.len()).then_some(i + 1),
            });
        }
        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.propose(vocab, &text, &symbols, &mut queue, Some(i - 1), Some(i));
        }
        while let Some(c) = queue.pop() {
            let (left, right) = (symbols[c.left], symbols[c.right]);
            // Stale: one side has merged with something else since.
            if left.len == 0 || right.len == 0 || left.len + right.len != c.len {
                continue;
            }
            symbols[c.left].len += right.len;
            symbols[c.right].len = 0;
            symbols[c.left].next = right.next;
            if let Some(n) = right.next {
                symbols[n].prev = Some(c.left);
            }
            self.propose(vocab, &text, &symbols, &mut queue, symbols[c.left].prev, Some(c.left));
            self.propose(vocab, &text, &symbols, &mut queue, Some(c.left), symbols[c.left].next);
        }
        let mut i = if symbols.is_empty() { None } else { Some(0) };
        while let Some(s) = i {
            let piece = &text[symbols[s].start..symbols[s].start + symbols[s].len];
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => out.extend(piece.bytes().filter_map(|b| self.byte_tokens[b as usize])),
            }
            i = symbols[s].next;
        }
    }

    /// Makes symbols `left` + `right` a candidate when their text is a token.
    fn propose(
        &self,
        vocab: &Vocab,
        text: &str,
        symbols: &[Symbol],
        queue: &mut BinaryHeap<Candidate>,
        left: Option<usize>,
        right: Option<usize>,
    ) {
        let (Some(left), Some(right)) = (left, right) else { return };
        let (l, r) = (symbols[left], symbols[right]);
        let len = l.len + r.len;
        if let Some(id) = vocab.id(&text[l.start..l.start + len]) {
            queue.push(Candidate { score: self.scores[id as usize], left, right, len });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tokenizer::spec::VocabKind;

    /// A vocabulary of `(text, score)`, all normal but `<0x..>` tokens for the bytes of "é" (0xC3 0xA9).
    fn spm(tokens: &[(&str, f32)]) -> (Vocab, Spm) {
        let texts: Vec<String> =
            tokens.iter().map(|(t, _)| t.to_string()).chain(["<0xC3>".into(), "<0xA9>".into()]).collect();
        let types: Vec<i32> = (0..texts.len()).map(|i| if i < tokens.len() { 1 } else { 6 }).collect();
        let scores: Vec<f32> = tokens.iter().map(|&(_, s)| s).chain([0.0, 0.0]).collect();
        let vocab = Vocab::with_kind(&texts, Some(&types), VocabKind::SentencePiece).unwrap();
        let spm = Spm::new(&vocab, Some(&scores), None);
        (vocab, spm)
    }

    fn encode(vocab: &Vocab, spm: &Spm, text: &str) -> Vec<TokenId> {
        let mut out = Vec::new();
        spm.encode(vocab, text, &mut out);
        out
    }

    #[test]
    fn the_best_scoring_pair_merges_first() {
        // "abc": "ab" (score −1) beats "bc" (−2), then "ab"+"c" has no token.
        let (v, s) = spm(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("ab", -1.0), ("bc", -2.0), ("abc", -3.0)]);
        assert_eq!(encode(&v, &s, "abc"), [5]);
        let (v, s) = spm(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("ab", -2.0), ("bc", -1.0)]);
        assert_eq!(encode(&v, &s, "abc"), [0, 4]);
    }

    #[test]
    fn ties_merge_the_leftmost_pair() {
        let (v, s) = spm(&[("a", 0.0), ("aa", -1.0)]);
        assert_eq!(encode(&v, &s, "aaa"), [1, 0]);
    }

    #[test]
    fn spaces_become_the_space_piece_and_unknown_characters_bytes() {
        let (v, s) = spm(&[("a", 0.0), (SPACE, 0.0), ("\u{2581}a", -1.0)]);
        assert_eq!(encode(&v, &s, " a"), [2]);
        assert_eq!(encode(&v, &s, "aé"), [0, 3, 4]);
    }
}
