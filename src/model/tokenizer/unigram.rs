//! SentencePiece Unigram (`tokenizer.ggml.model = "t5"`): the tokenizer of T5 and XLM-RoBERTa (bge-m3,
//! bge-reranker-v2-m3, multilingual-e5, nomic-embed-text-v2), equal token for token to llama.cpp's `llm_tokenizer_ugm`
//! (`src/llama-vocab.cpp`), which follows SentencePiece's own.
//!
//! A fragment of text (special tokens already cut out) is first normalized: each stretch of it becomes its
//! replacement in the precompiled map (`charsmap.rs`), or stays as it is when no key matches (a byte that is not
//! UTF-8 becomes U+FFFD); a stretch that begins a user-defined token's text is kept verbatim (llama.cpp's rule: the
//! longest stretch on the path of such a text, even where no token ends). Spaces (after normalization) become `▁`;
//! with `remove_extra_whitespaces` a run of them becomes one `▁` before the next word and leading and trailing ones
//! go; with `add_space_prefix` the fragment starts with `▁`.
//!
//! The normalized text is then cut into the pieces whose scores (log-probabilities) sum highest: Viterbi over byte
//! positions, moving one character at a time, every piece that starts there found in one trie walk (`byte_trie.rs`).
//! A user-defined piece scores 0; a character no piece of its exact length covers may also be the unknown token,
//! scored 10 below the lowest normal piece, and a run of unknown tokens is emitted as one. Of two paths with equal
//! sums the one whose last piece starts earlier wins (it is offered first), as llama.cpp's strict comparison of the
//! sums, in doubles, decides it.
//!
//! Cost: each position walks the trie at most as deep as the longest piece ([`MAX_PIECE_BYTES`]), so O(n · that).
//! Memory: the normalized text, and the lattice only back to the last position no piece spans (a space before a word,
//! in most texts): there every path meets, so the pieces before it are final and emitted, and the lattice restarts
//! from it with the same score, which keeps every later comparison the one llama.cpp makes.

use super::byte_trie::ByteTrie;
use super::charsmap::Charsmap;
use super::spm::SPACE;
use super::vocab::{TokenType, Vocab};
use super::{TokenId, TokenizerError};

/// The longest text of a piece the lattice can use, in bytes. SentencePiece's trainer caps pieces at 16 characters
/// (XLM-RoBERTa's longest: 48 bytes); the cap bounds every position's walk.
pub const MAX_PIECE_BYTES: usize = 256;
/// How far below the lowest normal piece's score the unknown token scores (llama.cpp's
/// `unknown_token_score_penalty`, SentencePiece's `kUnkPenalty`).
const UNKNOWN_PENALTY: f32 = 10.0;
/// The lattice is cut at a position no piece spans only once it holds this many bytes: cutting costs a walk back.
const MIN_CUT_BYTES: usize = 4096;
/// A lattice entry's id where the vocabulary has no unknown token.
const NO_TOKEN: TokenId = TokenId::MAX;

/// The normalizer and the pieces of a Unigram vocabulary.
pub(crate) struct Unigram {
    /// Normal, user-defined and unused tokens by text: the pieces the lattice may use (llama.cpp's `token_matcher`).
    pieces: ByteTrie,
    /// The user-defined tokens' texts, whose paths the normalizer keeps verbatim.
    user_defined: ByteTrie,
    charsmap: Option<Charsmap>,
    /// The score each token counts for in the lattice: the file's, 0 for user-defined tokens.
    scores: Vec<f32>,
    unknown_score: f32,
    /// The token for a character no piece covers ([`NO_TOKEN`] when the vocabulary has none: nothing is emitted).
    unknown_id: TokenId,
    add_space_prefix: bool,
    remove_extra_whitespaces: bool,
}

/// How the text read from a file shapes normalization.
pub(crate) struct UnigramOptions<'a> {
    /// `tokenizer.ggml.scores` (all 0 when absent, as llama.cpp).
    pub scores: Option<&'a [f32]>,
    /// `tokenizer.ggml.precompiled_charsmap`.
    pub charsmap: Option<&'a [u8]>,
    pub unknown_id: Option<TokenId>,
    /// `tokenizer.ggml.add_space_prefix` (false when absent, as llama.cpp for `t5`).
    pub add_space_prefix: bool,
    /// `tokenizer.ggml.remove_extra_whitespaces` (false when absent).
    pub remove_extra_whitespaces: bool,
}

/// The best way found so far to tokenize the text up to a position: its last piece and the sum of scores.
#[derive(Clone, Copy)]
struct Link {
    /// Summed in doubles, as llama.cpp and SentencePiece do (their tie-breaking depends on it).
    score: f64,
    /// Where the last piece starts.
    start: usize,
    id: TokenId,
}

impl Unigram {
    pub(crate) fn new(vocab: &Vocab, options: &UnigramOptions<'_>) -> Result<Self, TokenizerError> {
        // `limits::check` has matched the scores to the tokens; a missing one counts as 0, as an absent key does.
        let file_score = |id: TokenId| options.scores.and_then(|s| s.get(id as usize).copied()).unwrap_or(0.0);
        let mut scores = Vec::with_capacity(vocab.len());
        let mut min_normal_score = f32::MAX;
        for (id, text, token_type) in vocab.iter() {
            let score = file_score(id);
            // Infinite or NaN scores would leave positions the lattice cannot reach; no real vocabulary has one.
            if !score.is_finite() {
                return Err(TokenizerError::NonFiniteScore { id, score });
            }
            let in_lattice = matches!(token_type, TokenType::Normal | TokenType::UserDefined | TokenType::Unused);
            if in_lattice && text.len() > MAX_PIECE_BYTES {
                return Err(TokenizerError::PieceTooLong { id, bytes: text.len(), max: MAX_PIECE_BYTES });
            }
            if token_type == TokenType::Normal && score < min_normal_score {
                min_normal_score = score;
            }
            scores.push(if token_type == TokenType::UserDefined { 0.0 } else { score });
        }
        let of_types = |types: &'static [TokenType]| {
            vocab.iter().filter(move |(_, _, t)| types.contains(t)).map(|(id, text, _)| (text.as_bytes(), id))
        };
        Ok(Unigram {
            pieces: ByteTrie::new(of_types(&[TokenType::Normal, TokenType::UserDefined, TokenType::Unused])),
            user_defined: ByteTrie::new(of_types(&[TokenType::UserDefined])),
            charsmap: options.charsmap.map(Charsmap::parse).transpose()?,
            scores,
            // In f32, as llama.cpp computes it.
            unknown_score: min_normal_score - UNKNOWN_PENALTY,
            unknown_id: options.unknown_id.unwrap_or(NO_TOKEN),
            add_space_prefix: options.add_space_prefix,
            remove_extra_whitespaces: options.remove_extra_whitespaces,
        })
    }

    /// Appends the tokens of `text` (one fragment, special tokens already cut out) to `out`.
    pub(crate) fn encode(&self, text: &str, out: &mut Vec<TokenId>) {
        let normalized = self.normalize(text.as_bytes());
        self.segment(&normalized, out);
    }

    /// The text as the lattice sees it: replaced by the charsmap, spaces escaped (llama.cpp's `normalize`).
    fn normalize(&self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len() + input.len() / 2 + SPACE.len());
        let merge_spaces = self.remove_extra_whitespaces;
        let mut space_prepended = false;
        let mut in_word = false;
        let mut offset = 0;
        while offset < input.len() {
            let (piece, consumed) = self.normalize_prefix(&input[offset..]);
            for &c in piece {
                if c == b' ' {
                    in_word = false;
                    if !merge_spaces {
                        out.extend_from_slice(SPACE.as_bytes());
                    }
                    continue;
                }
                if !in_word {
                    in_word = true;
                    if (self.add_space_prefix && !space_prepended) || merge_spaces {
                        out.extend_from_slice(SPACE.as_bytes());
                        space_prepended = true;
                    }
                }
                out.push(c);
            }
            offset += consumed;
        }
        out
    }

    /// The normalized form of the start of `input` and how many bytes of it that consumes (at least one): llama.cpp's
    /// `normalize_prefix`.
    fn normalize_prefix<'a>(&'a self, input: &'a [u8]) -> (&'a [u8], usize) {
        if !self.user_defined.is_empty() {
            let kept = self.user_defined.longest_path(input);
            if kept > 0 {
                return (&input[..kept], kept);
            }
        }
        if let Some(found) = self.charsmap.as_ref().and_then(|map| map.longest_match(input)) {
            return found;
        }
        match utf8_sequence_len(input) {
            Some(len) => (&input[..len], len),
            None => ("\u{FFFD}".as_bytes(), 1),
        }
    }

    /// Appends the best segmentation of `text` (normalized) to `out`.
    fn segment(&self, text: &[u8], out: &mut Vec<TokenId>) {
        if text.is_empty() {
            return;
        }
        let unset = Link { score: f64::MIN, start: 0, id: self.unknown_id };
        // lattice[i]: the best path to position `lattice_start + i`.
        let mut lattice = vec![Link { score: 0.0, start: 0, id: self.unknown_id }];
        let mut lattice_start = 0;
        // The furthest position a piece offered so far ends at.
        let mut reach = 0;
        let mut emitter = Emitter { unknown_id: self.unknown_id, after_unknown: false, path: Vec::new() };
        let mut start = 0;
        while start < text.len() {
            // No piece offered so far ends beyond here: every path passes through `start`.
            if reach == start && start - lattice_start >= MIN_CUT_BYTES {
                emitter.emit(&lattice, lattice_start, start, out);
                lattice.drain(..start - lattice_start);
                lattice_start = start;
            }
            let char_len = utf8_len_from_lead(text[start]).min(text.len() - start);
            let base = lattice[start - lattice_start].score;
            let offer = |end: usize, id: TokenId, score: f32, lattice: &mut Vec<Link>| {
                let i = end - lattice_start;
                if lattice.len() <= i {
                    lattice.resize(i + 1, unset);
                }
                let challenger = base + f64::from(score);
                if challenger > lattice[i].score {
                    lattice[i] = Link { score: challenger, start, id };
                }
            };
            let mut covers_char = false;
            let mut node = self.pieces.root();
            for (end, &byte) in (start + 1..).zip(&text[start..]) {
                let Some(next) = self.pieces.child(node, byte) else { break };
                node = next;
                if let Some(id) = self.pieces.value(node) {
                    covers_char |= end - start == char_len;
                    offer(end, id, self.scores[id as usize], &mut lattice);
                    reach = reach.max(end);
                }
            }
            if !covers_char {
                offer(start + char_len, self.unknown_id, self.unknown_score, &mut lattice);
                reach = reach.max(start + char_len);
            }
            start += char_len;
        }
        emitter.emit(&lattice, lattice_start, text.len(), out);
    }
}

/// Writes the lattice's best path out, piece by piece, one stretch at a time.
struct Emitter {
    unknown_id: TokenId,
    /// Whether the last piece emitted was the unknown token: a run of them is emitted as one.
    after_unknown: bool,
    /// Scratch: a stretch's ids, last first.
    path: Vec<TokenId>,
}

impl Emitter {
    /// Emits the best path from `lattice_start` to `end` (every path passes through both).
    fn emit(&mut self, lattice: &[Link], lattice_start: usize, end: usize, out: &mut Vec<TokenId>) {
        self.path.clear();
        let mut at = end;
        while at > lattice_start {
            let Some(&link) = lattice.get(at - lattice_start) else { break };
            self.path.push(link.id);
            // A reached position's piece starts within the stretch, before it (see `segment`); stop otherwise
            // rather than trust it.
            if link.start < lattice_start || link.start >= at {
                break;
            }
            at = link.start;
        }
        for &id in self.path.iter().rev() {
            let unknown = id == self.unknown_id;
            if !(unknown && self.after_unknown) && id != NO_TOKEN {
                out.push(id);
            }
            self.after_unknown = unknown;
        }
    }
}

/// The length of the UTF-8 sequence a lead byte announces (1 for a continuation byte): llama.cpp's
/// `unicode_len_utf8`, which the lattice steps by.
fn utf8_len_from_lead(lead: u8) -> usize {
    match lead >> 4 {
        0xC | 0xD => 2,
        0xE => 3,
        0xF => 4,
        _ => 1,
    }
}

/// The length of the UTF-8 sequence `bytes` starts with, checking only the bit patterns of the lead and its
/// continuation bytes, as llama.cpp's `unicode_cpt_from_utf8` does; `None` where they do not fit.
fn utf8_sequence_len(bytes: &[u8]) -> Option<usize> {
    let lead = *bytes.first()?;
    let len = match lead {
        _ if lead & 0x80 == 0 => return Some(1),
        _ if lead & 0x40 == 0 => return None,
        _ if lead & 0x20 == 0 => 2,
        _ if lead & 0x10 == 0 => 3,
        _ if lead & 0x08 == 0 => 4,
        _ => return None,
    };
    let continuation = bytes.get(1..len)?;
    continuation.iter().all(|&b| b & 0xC0 == 0x80).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tokenizer::charsmap;
    use crate::model::tokenizer::spec::VocabKind;

    const UNK: TokenId = 0;

    /// A vocabulary of `<unk>` (id 0) and `(text, score, type)`, spaces written `▁`.
    fn unigram(tokens: &[(&str, f32, TokenType)], options: UnigramOptions<'_>) -> (Vocab, Unigram) {
        let texts: Vec<String> =
            std::iter::once("<unk>".to_string()).chain(tokens.iter().map(|(t, _, _)| t.to_string())).collect();
        let types: Vec<i32> =
            std::iter::once(TokenType::Unknown as i32).chain(tokens.iter().map(|&(_, _, t)| t as i32)).collect();
        let scores: Vec<f32> = std::iter::once(0.0).chain(tokens.iter().map(|&(_, s, _)| s)).collect();
        let vocab = Vocab::with_kind(&texts, Some(&types), VocabKind::Unigram).unwrap();
        let unigram = Unigram::new(&vocab, &UnigramOptions { scores: Some(&scores), ..options }).unwrap();
        (vocab, unigram)
    }

    fn plain() -> UnigramOptions<'static> {
        UnigramOptions {
            scores: None,
            charsmap: None,
            unknown_id: Some(UNK),
            add_space_prefix: false,
            remove_extra_whitespaces: false,
        }
    }

    fn encode(u: &Unigram, text: &str) -> Vec<TokenId> {
        let mut out = Vec::new();
        u.encode(text, &mut out);
        out
    }

    fn normal(text: &str, score: f32) -> (&str, f32, TokenType) {
        (text, score, TokenType::Normal)
    }

    #[test]
    fn the_highest_scoring_segmentation_wins() {
        // "abc": a+b+c = -3, ab+c = -2.5, a+bc = -2 (best), abc = -4.
        let (_, u) = unigram(
            &[
                normal("a", -1.0),
                normal("b", -1.0),
                normal("c", -1.0),
                normal("ab", -1.5),
                normal("bc", -1.0),
                normal("abc", -4.0),
            ],
            plain(),
        );
        assert_eq!(encode(&u, "abc"), [1, 5]);
        assert!(encode(&u, "").is_empty());
    }

    #[test]
    fn ties_go_to_the_path_offered_first() {
        // a+bc and ab+c both score -2 at position 3: "bc" is offered from position 1, before "c" from position 2,
        // and a later equal score does not replace it.
        let (_, u) = unigram(
            &[normal("a", -1.0), normal("b", -1.0), normal("c", -1.0), normal("ab", -1.0), normal("bc", -1.0)],
            plain(),
        );
        assert_eq!(encode(&u, "abc"), [1, 5]);
    }

    #[test]
    fn uncovered_characters_are_one_unknown_token_per_run() {
        let (_, u) = unigram(&[normal("a", -1.0)], plain());
        assert_eq!(encode(&u, "a€€a€"), [1, UNK, 1, UNK]);
        // Without an unknown token, nothing stands for them.
        let (_, u) = unigram(&[normal("a", -1.0)], UnigramOptions { unknown_id: None, ..plain() });
        assert_eq!(encode(&u, "a€€a€"), [1, 1]);
    }

    #[test]
    fn a_longer_piece_does_not_hide_a_missing_character() {
        // "€x" is a piece, "€" is not: "€y" has no piece for "€" of its length, so it is unknown.
        let (_, u) = unigram(&[normal("€x", -1.0), normal("y", -1.0)], plain());
        assert_eq!(encode(&u, "€x"), [1]);
        assert_eq!(encode(&u, "€y"), [UNK, 2]);
    }

    #[test]
    fn user_defined_pieces_score_zero_and_unused_ones_their_own() {
        let (_, u) = unigram(
            &[
                normal("a", -1.0),
                normal("b", -1.0),
                ("ab", -100.0, TokenType::UserDefined),
                ("ba", -0.5, TokenType::Unused),
            ],
            plain(),
        );
        assert_eq!(encode(&u, "ab"), [3]);
        assert_eq!(encode(&u, "ba"), [4]);
    }

    #[test]
    fn spaces_are_escaped_prefixed_and_merged_as_the_file_says() {
        let tokens = [normal("\u{2581}", -2.0), normal("a", -1.0), normal("\u{2581}a", -1.0)];
        let (_, u) = unigram(&tokens, plain());
        assert_eq!(encode(&u, " a  a"), [3, 1, 3]);
        let (_, u) = unigram(&tokens, UnigramOptions { add_space_prefix: true, ..plain() });
        assert_eq!(encode(&u, "a a"), [3, 3]);
        // Prefixed once, before the first word; a leading space is escaped too.
        assert_eq!(encode(&u, " a"), [1, 3]);
        let (_, u) =
            unigram(&tokens, UnigramOptions { add_space_prefix: true, remove_extra_whitespaces: true, ..plain() });
        assert_eq!(encode(&u, "  a   a  "), [3, 3]);
        assert!(encode(&u, "   ").is_empty());
    }

    #[test]
    fn the_charsmap_replaces_before_segmentation() {
        let map = charsmap::tests::build(&[("\u{fb01}".as_bytes(), "fi"), (b"\x07", ""), ("\u{3000}".as_bytes(), " ")]);
        let tokens = [normal("\u{2581}", -2.0), normal("fi", -1.0), normal("\u{2581}fi", -1.0)];
        let (_, u) =
            unigram(&tokens, UnigramOptions { charsmap: Some(&map), remove_extra_whitespaces: true, ..plain() });
        assert_eq!(encode(&u, "\u{fb01}\x07\u{3000}fi"), [3, 3]);
    }

    #[test]
    fn user_defined_paths_are_kept_verbatim() {
        // "<x>" is user-defined; "<y" lies on its path up to "<", which the charsmap would otherwise replace.
        let map = charsmap::tests::build(&[(b"<", "L")]);
        let tokens = [("<x>", 0.0, TokenType::UserDefined), normal("<", -1.0), normal("L", -1.0), normal("y", -1.0)];
        let (_, u) = unigram(&tokens, UnigramOptions { charsmap: Some(&map), ..plain() });
        assert_eq!(encode(&u, "<y"), [2, 4]);
        let (_, u) = unigram(&tokens[1..], UnigramOptions { charsmap: Some(&map), ..plain() });
        assert_eq!(encode(&u, "<y"), [2, 3]);
    }

    #[test]
    fn hostile_scores_and_pieces_are_refused() {
        let texts = ["<unk>".to_string(), "a".repeat(MAX_PIECE_BYTES + 1)];
        let vocab = Vocab::with_kind(&texts, Some(&[2, 1]), VocabKind::Unigram).unwrap();
        assert!(matches!(
            Unigram::new(&vocab, &plain()),
            Err(TokenizerError::PieceTooLong { id: 1, bytes: 257, max: MAX_PIECE_BYTES })
        ));
        let texts = ["<unk>".to_string(), "a".to_string()];
        let vocab = Vocab::with_kind(&texts, Some(&[2, 1]), VocabKind::Unigram).unwrap();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let scores = [0.0, bad];
            assert!(matches!(
                Unigram::new(&vocab, &UnigramOptions { scores: Some(&scores), ..plain() }),
                Err(TokenizerError::NonFiniteScore { id: 1, .. })
            ));
        }
    }

    #[test]
    fn a_long_input_is_cut_where_no_piece_spans_and_gives_the_same_tokens() {
        // Pieces never span a space here, so the lattice is cut before words; the result must equal the
        // word-by-word segmentation.
        let tokens = [
            normal("\u{2581}", -3.0),
            normal("\u{2581}ab", -1.0),
            normal("a", -2.0),
            normal("b", -2.0),
            normal("ba", -1.5),
            normal("aa", -3.5),
        ];
        let (_, u) =
            unigram(&tokens, UnigramOptions { add_space_prefix: true, remove_extra_whitespaces: true, ..plain() });
        let word = "abab bab €a ";
        let text = word.repeat(20_000);
        let one = encode(&u, word);
        let all = encode(&u, &text);
        assert_eq!(all.len(), one.len() * 20_000);
        assert!(all.chunks(one.len()).all(|c| c == one));
        // A word no cut can split ("aa" spans every position of "aaaa..."): its lattice is held whole.
        let long = encode(&u, &"a".repeat(100_000));
        assert_eq!(long.len(), 50_001);
        assert!(long[1..].iter().all(|&id| id == 6));
    }

    #[test]
    fn utf8_is_checked_by_its_bit_patterns() {
        assert_eq!(utf8_sequence_len("é".as_bytes()), Some(2));
        assert_eq!(utf8_sequence_len("€".as_bytes()), Some(3));
        assert_eq!(utf8_sequence_len("🦙".as_bytes()), Some(4));
        assert_eq!(utf8_sequence_len(&[0xA9]), None);
        assert_eq!(utf8_sequence_len(&[0xC3]), None);
        assert_eq!(utf8_sequence_len(&[0xE2, 0x82, 0x41]), None);
        assert_eq!(utf8_sequence_len(&[0xF8, 0x80, 0x80, 0x80, 0x80]), None);
        assert_eq!(utf8_len_from_lead(0xA9), 1);
        assert_eq!(utf8_len_from_lead(0xF0), 4);
    }
}
