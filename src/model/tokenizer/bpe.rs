//! Byte-pair encoding of one pre-tokenized piece: start from one symbol per byte and merge adjacent pairs, lowest
//! merge rank first and leftmost on ties, until no adjacent pair has a rank (llama.cpp's
//! `llm_tokenizer_bpe_session::tokenize`).
//!
//! llama.cpp merges strings; ember merges ids. A symbol is a token id, or — for a byte-level string that is no
//! token (a byte whose character the vocabulary lacks, or a merge whose result it lacks) — an id past the
//! vocabulary. Such a symbol cannot merge further (a merge naming a non-token is refused at load), and at the end
//! it is replaced by llama.cpp's fallback: the tokens of its single bytes, where they exist.
//!
//! Text repeats its words, so a [`PieceEncoder`] remembers the tokens of every piece it has encoded. It lives for one
//! `encode` call: no state is shared between calls or threads, so no lock is needed, and its memory is bounded by
//! the text's.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::byte_level::BYTE_TO_CHAR;
use super::spec::keys;
use super::vocab::Vocab;
use super::{TokenId, TokenizerError};

/// A token id when below the vocabulary size; symbol `vocab_size + i` is a non-token, replaced on output by
/// the tokens of `Bpe::non_token_fallbacks` for `i`.
type Symbol = u32;

/// What merging one (left, right) pair gives.
#[derive(Clone, Copy, Debug)]
struct Merge {
    /// Position in `tokenizer.ggml.merges`: lower merges first.
    rank: u32,
    merged: Symbol,
}

/// The merge rules of one vocabulary.
pub(crate) struct Bpe {
    /// `pair_key(left, right)` → the merge of that pair. Where `tokenizer.ggml.merges` lists a pair twice, the
    /// first (lowest) rank is kept, as llama.cpp's `bpe_ranks.emplace` does.
    merges: FxHashMap<u64, Merge>,
    /// `byte_symbols[b]`: the symbol byte `b` starts as — the token whose text is `b`'s byte-level character.
    byte_symbols: [Symbol; 256],
    /// The number of tokens: symbols from here on are not tokens.
    vocab_size: u32,
    /// For symbol `vocab_size + i`: the tokens llama.cpp emits in its place. It looks up each byte of the symbol's
    /// byte-level text as a one-byte token text; only ASCII bytes can be one (a token text is UTF-8).
    non_token_fallbacks: Fallbacks,
}

/// What stands in for each non-token: the ASCII bytes of its text, concatenated, each emitted as its one-character
/// token (`ascii_tokens`) where there is one. Bytes rather than token ids, and one allocation rather than one per
/// non-token: a crafted vocabulary can make every merge's result a non-token, two million of them.
struct Fallbacks {
    /// The token whose text is ASCII byte `b`'s one character, where there is one.
    ascii_tokens: [Option<TokenId>; 128],
    bytes: Vec<u8>,
    /// End of each non-token's bytes in `bytes`.
    ends: Vec<usize>,
}

impl Fallbacks {
    fn new(vocab: &Vocab) -> Self {
        let mut ascii_tokens = [None; 128];
        for (b, token) in (0u8..).zip(&mut ascii_tokens) {
            *token = vocab.id(char::from(b).encode_utf8(&mut [0; 4]));
        }
        Fallbacks { ascii_tokens, bytes: Vec::new(), ends: Vec::new() }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn push(&mut self, text: &str) {
        self.bytes.extend(text.bytes().filter(u8::is_ascii));
        self.ends.push(self.bytes.len());
    }

    /// Appends the tokens of non-token `i` to `out`.
    fn emit(&self, i: usize, out: &mut Vec<TokenId>) {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        out.extend(self.bytes[start..self.ends[i]].iter().filter_map(|&b| self.ascii_tokens[usize::from(b)]));
    }
}

fn pair_key(left: Symbol, right: Symbol) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

/// Interns byte-level strings that are no token as symbols past the vocabulary.
struct NonTokens<'v> {
    vocab: &'v Vocab,
    index: FxHashMap<Box<str>, Symbol>,
    fallbacks: Fallbacks,
}

impl NonTokens<'_> {
    fn symbol(&mut self, text: &str) -> Symbol {
        if let Some(id) = self.vocab.id(text) {
            return id;
        }
        if let Some(&symbol) = self.index.get(text) {
            return symbol;
        }
        let symbol = (self.vocab.len() + self.fallbacks.len()) as Symbol;
        self.fallbacks.push(text);
        self.index.insert(text.into(), symbol);
        symbol
    }
}

impl Bpe {
    /// Reads `tokenizer.ggml.merges`: entry `rank` is `"left right"`, split at the first space after the first
    /// byte (llama.cpp's `word.find(' ', 1)`, so that a left part may itself start with a space).
    pub(crate) fn new(vocab: &Vocab, merges: &[String]) -> Result<Self, TokenizerError> {
        // Every symbol, the non-token ones included (at most one per byte and one per merge), and every rank must
        // fit a u32 (`limits.rs` keeps a file's vocabulary far below; this holds for one built from parts too).
        let symbol_bound = vocab.len() + 256 + merges.len();
        if u32::try_from(symbol_bound).is_err() {
            let max = (u32::MAX as usize).saturating_sub(vocab.len() + 256);
            return Err(TokenizerError::TooMany { key: keys::MERGES, count: merges.len(), max });
        }
        let mut non_tokens = NonTokens { vocab, index: FxHashMap::default(), fallbacks: Fallbacks::new(vocab) };
        let mut byte_symbols = [0; 256];
        for (symbol, c) in byte_symbols.iter_mut().zip(BYTE_TO_CHAR) {
            *symbol = non_tokens.symbol(c.encode_utf8(&mut [0; 4]));
        }
        let mut table = FxHashMap::with_capacity_and_hasher(merges.len(), Default::default());
        for (rank, merge) in merges.iter().enumerate() {
            let malformed = || TokenizerError::MalformedMerge { rank, merge: merge.clone() };
            let space = merge.bytes().skip(1).position(|b| b == b' ').ok_or_else(malformed)? + 1;
            let (left, right) = (&merge[..space], &merge[space + 1..]);
            let token = |part: &str| {
                vocab.id(part).ok_or_else(|| TokenizerError::MergeNamesUnknownToken {
                    rank,
                    merge: merge.clone(),
                    part: part.to_owned(),
                })
            };
            let (left_id, right_id) = (token(left)?, token(right)?);
            // A pair listed again keeps its first rank, and its result is the same: nothing more to intern.
            if let Entry::Vacant(slot) = table.entry(pair_key(left_id, right_id)) {
                let merged = non_tokens.symbol(&[left, right].concat());
                slot.insert(Merge { rank: rank as u32, merged });
            }
        }
        Ok(Bpe {
            merges: table,
            byte_symbols,
            vocab_size: vocab.len() as u32,
            non_token_fallbacks: non_tokens.fallbacks,
        })
    }

    /// Appends the tokens of one pre-tokenized piece (its UTF-8 bytes) to `out`, merging from scratch.
    fn merge_piece(&self, piece: &[u8], nodes: &mut Vec<SymbolNode>, queue: &mut MergeQueue, out: &mut Vec<TokenId>) {
        match piece {
            [] => return,
            [byte] => return self.emit(self.byte_symbols[usize::from(*byte)], out),
            _ => {}
        }
        nodes.clear();
        queue.clear();
        nodes.extend(piece.iter().enumerate().map(|(i, &b)| SymbolNode {
            symbol: self.byte_symbols[usize::from(b)],
            len: 1,
            prev: i.checked_sub(1).unwrap_or(NONE),
            next: if i + 1 < piece.len() { i + 1 } else { NONE },
        }));
        for left in 0..nodes.len() - 1 {
            self.queue_pair(nodes, queue, left);
        }
        while let Some(Reverse(candidate)) = queue.pop() {
            let left = candidate.left;
            let right = nodes[left].next;
            // Stale when either side has merged since: a symbol only grows (or vanishes, length 0), so equal
            // lengths mean the same pair.
            if nodes[left].len == 0 || right == NONE || nodes[left].len + nodes[right].len != candidate.len {
                continue;
            }
            let absorbed = nodes[right];
            nodes[right].len = 0;
            let node = &mut nodes[left];
            node.symbol = candidate.merged;
            node.len += absorbed.len;
            node.next = absorbed.next;
            let prev = node.prev;
            if absorbed.next != NONE {
                nodes[absorbed.next].prev = left;
            }
            if prev != NONE {
                self.queue_pair(nodes, queue, prev);
            }
            self.queue_pair(nodes, queue, left);
        }
        let mut i = 0;
        while i != NONE {
            self.emit(nodes[i].symbol, out);
            i = nodes[i].next;
        }
    }

    /// Queues the pair of symbol `left` and its successor, if there is one and the pair has a merge.
    fn queue_pair(&self, nodes: &[SymbolNode], queue: &mut MergeQueue, left: usize) {
        let node = nodes[left];
        if node.next == NONE {
            return;
        }
        let right = nodes[node.next];
        if let Some(merge) = self.merges.get(&pair_key(node.symbol, right.symbol)) {
            queue.push(Reverse(Candidate { rank: merge.rank, left, len: node.len + right.len, merged: merge.merged }));
        }
    }

    fn emit(&self, symbol: Symbol, out: &mut Vec<TokenId>) {
        match symbol.checked_sub(self.vocab_size) {
            None => out.push(symbol),
            Some(i) => self.non_token_fallbacks.emit(i as usize, out),
        }
    }
}

/// "No symbol" in [`SymbolNode`] links.
const NONE: usize = usize::MAX;

/// One symbol of the piece being merged, in a doubly linked list over the piece's bytes.
#[derive(Clone, Copy, Debug)]
struct SymbolNode {
    symbol: Symbol,
    /// Bytes of the piece this symbol covers; 0 once merged into its left neighbour.
    len: usize,
    /// Index of the previous live symbol, or `NONE`.
    prev: usize,
    /// Index of the next live symbol, or `NONE`.
    next: usize,
}

/// A pair that may merge. Ordered by rank, then by position: the queue pops the lowest rank, leftmost first (the
/// order of llama.cpp's `llm_bigram_bpe::comparator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    /// Index of the left symbol.
    left: usize,
    /// Bytes the pair covered when queued: if the two symbols now cover more, the candidate is stale.
    len: usize,
    merged: Symbol,
}

/// Pending merges, lowest rank (then leftmost) on top.
type MergeQueue = BinaryHeap<Reverse<Candidate>>;

/// Encodes the pieces of one text, remembering each distinct piece's tokens.
pub(crate) struct PieceEncoder<'b, 't> {
    bpe: &'b Bpe,
    /// With llama.cpp's `ignore_merges` (Llama 3, Tekken): the vocabulary, in which a whole piece is looked up
    /// first; a piece that is a token is that token, whatever the merges would make of it.
    whole_pieces: Option<&'b Vocab>,
    /// The byte-level text of the piece being looked up (reused across pieces).
    text: String,
    /// One node per byte of the piece being merged (reused across pieces).
    nodes: Vec<SymbolNode>,
    queue: MergeQueue,
    /// Piece → the range of `out` where its tokens were first written. Valid because every call appends to the
    /// same `out`, which only grows.
    seen: FxHashMap<&'t str, (usize, usize)>,
}

impl<'b, 't> PieceEncoder<'b, 't> {
    pub(crate) fn new(bpe: &'b Bpe, whole_pieces: Option<&'b Vocab>) -> Self {
        PieceEncoder {
            bpe,
            whole_pieces,
            text: String::new(),
            nodes: Vec::new(),
            queue: BinaryHeap::new(),
            seen: FxHashMap::default(),
        }
    }

    /// Appends the tokens of `piece` to `out`.
    ///
    /// # Panics
    /// If `out` is not the vector every earlier call of this encoder appended to, or was shortened since.
    pub(crate) fn encode(&mut self, piece: &'t str, out: &mut Vec<TokenId>) {
        if let [byte] = piece.as_bytes() {
            return self.bpe.emit(self.bpe.byte_symbols[usize::from(*byte)], out);
        }
        if let Some(&(start, end)) = self.seen.get(piece) {
            return out.extend_from_within(start..end);
        }
        let start = out.len();
        if let Some(id) = self.whole_token(piece) {
            out.push(id);
        } else {
            self.bpe.merge_piece(piece.as_bytes(), &mut self.nodes, &mut self.queue, out);
        }
        self.seen.insert(piece, (start, out.len()));
    }

    /// The token that is `piece` whole, when merges are ignored for such pieces.
    fn whole_token(&mut self, piece: &str) -> Option<TokenId> {
        let vocab = self.whole_pieces?;
        self.text.clear();
        self.text.extend(piece.bytes().map(|b| BYTE_TO_CHAR[usize::from(b)]));
        vocab.id(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of the single bytes `a`..`e` and the given merges' results.
    fn bpe(merges: &[&str], extra_tokens: &[&str]) -> (Vocab, Bpe) {
        let texts: Vec<String> = ["a", "b", "c", "d", "e"].iter().chain(extra_tokens).map(|s| s.to_string()).collect();
        let vocab = Vocab::new(&texts, None).unwrap();
        let merges: Vec<String> = merges.iter().map(|s| s.to_string()).collect();
        let bpe = Bpe::new(&vocab, &merges).unwrap();
        (vocab, bpe)
    }

    fn encode(vocab: &Vocab, bpe: &Bpe, piece: &str) -> Vec<String> {
        let mut out = Vec::new();
        PieceEncoder::new(bpe, None).encode(piece, &mut out);
        out.iter().map(|&id| vocab.text(id).unwrap().to_owned()).collect()
    }

    #[test]
    fn a_repeated_piece_gives_the_same_tokens() {
        let (v, b) = bpe(&["a b", "ab c"], &["ab", "abc"]);
        let mut encoder = PieceEncoder::new(&b, None);
        let mut out = Vec::new();
        for piece in ["abc", "ab", "abc", "c", "abca", "abc"] {
            encoder.encode(piece, &mut out);
        }
        let texts: Vec<&str> = out.iter().map(|&id| v.text(id).unwrap()).collect();
        assert_eq!(texts, ["abc", "ab", "abc", "c", "abc", "a", "abc"]);
    }

    #[test]
    fn lowest_rank_merges_first() {
        let (v, b) = bpe(&["b c", "a b", "a bc"], &["bc", "ab", "abc"]);
        // "b c" (rank 0) beats "a b" (rank 1), then "a bc" applies.
        assert_eq!(encode(&v, &b, "abc"), ["abc"]);
        let (v, b) = bpe(&["a b", "b c"], &["ab", "bc"]);
        assert_eq!(encode(&v, &b, "abc"), ["ab", "c"]);
    }

    #[test]
    fn ties_go_to_the_leftmost_pair() {
        let (v, b) = bpe(&["a a"], &["aa"]);
        assert_eq!(encode(&v, &b, "aaa"), ["aa", "a"]);
        assert_eq!(encode(&v, &b, "aaaa"), ["aa", "aa"]);
        let (v, b) = bpe(&["a a", "aa aa"], &["aa", "aaaa"]);
        assert_eq!(encode(&v, &b, "aaaaaa"), ["aaaa", "aa"]);
    }

    #[test]
    fn a_merge_result_missing_from_the_vocabulary_falls_back_to_single_bytes() {
        // "c d" merges to "cd", which is no token: llama.cpp emits the tokens of "c" and "d" instead.
        let (v, b) = bpe(&["c d"], &[]);
        assert_eq!(encode(&v, &b, "acde"), ["a", "c", "d", "e"]);
    }

    #[test]
    fn a_byte_missing_from_the_vocabulary_is_dropped_unless_ascii() {
        // "x" is ASCII and not a token: nothing to fall back to. "é" (byte-level "Ã©") has no one-byte tokens.
        let (v, b) = bpe(&[], &[]);
        assert_eq!(encode(&v, &b, "axé"), ["a"]);
    }

    #[test]
    fn malformed_and_unknown_merges_are_refused() {
        let texts: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let vocab = Vocab::new(&texts, None).unwrap();
        let err = Bpe::new(&vocab, &["ab".to_string()]).err().unwrap();
        assert!(matches!(err, TokenizerError::MalformedMerge { rank: 0, .. }), "{err}");
        let err = Bpe::new(&vocab, &["a b".to_string(), "a z".to_string()]).err().unwrap();
        assert!(matches!(&err, TokenizerError::MergeNamesUnknownToken { rank: 1, part, .. } if part == "z"), "{err}");
        assert!(err.to_string().contains("tokenizer.ggml.merges"));
    }

    /// The merge loop written the plain way: scan all adjacent pairs, merge the best, repeat.
    fn reference_merge(bpe: &Bpe, piece: &[u8]) -> Vec<Symbol> {
        let mut symbols: Vec<Symbol> = piece.iter().map(|&b| bpe.byte_symbols[usize::from(b)]).collect();
        loop {
            let best = (0..symbols.len().saturating_sub(1))
                .filter_map(|i| bpe.merges.get(&pair_key(symbols[i], symbols[i + 1])).map(|m| (m.rank, i, m.merged)))
                .min();
            let Some((_, i, merged)) = best else { return symbols };
            symbols[i] = merged;
            symbols.remove(i + 1);
        }
    }

    #[test]
    fn the_queue_agrees_with_a_plain_scan_on_random_merges() {
        // A small alphabet, every merge of two existing symbols, in a shuffled order: many ties and stale pairs.
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..50 {
            let mut texts: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
            let mut merges = Vec::new();
            for _ in 0..12 {
                let l = texts[(next() % texts.len() as u64) as usize].clone();
                let r = texts[(next() % texts.len() as u64) as usize].clone();
                merges.push(format!("{l} {r}"));
                if next() % 4 != 0 {
                    texts.push(l + &r);
                }
            }
            let vocab = Vocab::new(&texts, None).unwrap();
            let bpe = Bpe::new(&vocab, &merges).unwrap();
            for _ in 0..20 {
                let len = 1 + (next() % 12) as usize;
                let piece: Vec<u8> = (0..len).map(|_| b"abc"[(next() % 3) as usize]).collect();
                let mut out = Vec::new();
                bpe.merge_piece(&piece, &mut Vec::new(), &mut BinaryHeap::new(), &mut out);
                let mut expected = Vec::new();
                for symbol in reference_merge(&bpe, &piece) {
                    bpe.emit(symbol, &mut expected);
                }
                assert_eq!(out, expected, "merges {merges:?}, piece {:?}", String::from_utf8_lossy(&piece));
            }
        }
    }
}
