//! The unit of work of one forward step: a batch of sequences, each with its new tokens and KV positions.
//!
//! A step mixes prefill chunks (many new tokens of one prompt) and decodes (one new token) of different
//! sequences; the engine builds it, a backend runs it. Positions index each sequence's KV cache, which lives in
//! fixed-size blocks: position `p` is slot `p % block_size` of block `block_table[p / block_size]`. A backend may
//! keep the layers with a sliding window in a second, smaller pool of blocks (`window_table`, indexed the same
//! way), since those layers never read a key older than their window again.

use std::fmt;

use crate::model::TokenId;

/// A window table's entry whose block went back to the window pool: every query still to come is past its
/// positions' window, so no layer reads them again.
pub const NO_BLOCK: u32 = u32::MAX;

/// One sequence's share of a forward step.
#[derive(Clone, Copy, Debug)]
pub struct SeqChunk<'a> {
    /// The new tokens: a prefill chunk, or the one token sampled last step.
    pub tokens: &'a [TokenId],
    /// KV position of `tokens[0]`; the tokens occupy positions `start_pos .. start_pos + tokens.len()`, and
    /// positions before `start_pos` must already hold this sequence's keys and values.
    pub start_pos: usize,
    /// The sequence's KV cache blocks, covering at least positions `0 .. start_pos + tokens.len()`.
    pub block_table: &'a [u32],
    /// The sequence's blocks in the window pool, for the sliding-window layers of a backend that keeps them in a
    /// pool of their own (empty otherwise). Indexed like `block_table`; only the entries of positions
    /// `start_pos + 1 − max_window .. start_pos + tokens.len()` must name blocks (the keys the chunk's first query
    /// reads, through the ones it writes), earlier ones may be [`NO_BLOCK`].
    pub window_table: &'a [u32],
    /// Logits are returned for the chunk's last `logit_rows` new tokens, in order (at most `tokens.len()`): 0 for
    /// a prompt chunk that samples nothing, 1 for the last token's (what samples the next one), more to score the
    /// chunk's own tokens (a prompt's log probabilities: row `i` predicts the token after position
    /// `start_pos + i`).
    pub logit_rows: usize,
}

impl SeqChunk<'_> {
    /// One past the last position this chunk writes.
    pub fn end_pos(&self) -> usize {
        self.start_pos + self.tokens.len()
    }

    /// The indices in `tokens` whose logits are returned: the last `logit_rows`.
    pub fn logit_token_range(&self) -> std::ops::Range<usize> {
        self.tokens.len().saturating_sub(self.logit_rows)..self.tokens.len()
    }
}

/// Logits rows a batch returns: the sum of its chunks' `logit_rows`.
pub fn total_logit_rows(batch: &[SeqChunk<'_>]) -> usize {
    batch.iter().map(|s| s.logit_rows).sum()
}

/// Why a batch cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchError {
    /// The batch has no tokens at all, or a sequence has none.
    Empty,
    /// More tokens than the backend was sized for.
    TooManyTokens { tokens: usize, max: usize },
    /// A position beyond the model's context.
    BeyondContext { seq: usize, end_pos: usize, context: usize },
    /// The block table does not cover the sequence's positions, or names a block that does not exist.
    BadBlockTable { seq: usize, detail: String },
    /// A token id outside the vocabulary.
    BadToken { seq: usize, token: TokenId, vocab_size: usize },
    /// The logits buffer does not have one row per requested logits row.
    LogitsBuffer { expected: usize, found: usize },
    /// A chunk asks for more logits rows than it has tokens.
    TooManyLogitRows { seq: usize, rows: usize, tokens: usize },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Empty => write!(f, "empty batch or sequence"),
            BatchError::TooManyTokens { tokens, max } => {
                write!(f, "batch has {tokens} tokens, the backend was sized for {max}")
            }
            BatchError::BeyondContext { seq, end_pos, context } => {
                write!(f, "sequence {seq} reaches position {end_pos}, beyond the context of {context}")
            }
            BatchError::BadBlockTable { seq, detail } => write!(f, "sequence {seq}: bad block table: {detail}"),
            BatchError::BadToken { seq, token, vocab_size } => {
                write!(f, "sequence {seq}: token {token} is outside the vocabulary of {vocab_size}")
            }
            BatchError::LogitsBuffer { expected, found } => {
                write!(f, "logits buffer holds {found} floats, {expected} needed")
            }
            BatchError::TooManyLogitRows { seq, rows, tokens } => {
                write!(f, "sequence {seq} asks for {rows} logits rows of its {tokens} tokens")
            }
        }
    }
}

impl std::error::Error for BatchError {}

/// Checks a batch against the model and cache geometry, so that backends can index without further checks.
pub fn validate_batch(
    batch: &[SeqChunk<'_>],
    max_tokens: usize,
    context: usize,
    vocab_size: usize,
    block_size: usize,
    num_blocks: usize,
) -> Result<usize, BatchError> {
    let mut total = 0usize;
    for (i, s) in batch.iter().enumerate() {
        if s.tokens.is_empty() {
            return Err(BatchError::Empty);
        }
        total += s.tokens.len();
        if s.logit_rows > s.tokens.len() {
            return Err(BatchError::TooManyLogitRows { seq: i, rows: s.logit_rows, tokens: s.tokens.len() });
        }
        if s.end_pos() > context {
            return Err(BatchError::BeyondContext { seq: i, end_pos: s.end_pos(), context });
        }
        let blocks_needed = s.end_pos().div_ceil(block_size);
        if s.block_table.len() < blocks_needed {
            return Err(BatchError::BadBlockTable {
                seq: i,
                detail: format!("{} blocks cover fewer than {} positions", s.block_table.len(), s.end_pos()),
            });
        }
        if let Some(&b) = s.block_table[..blocks_needed].iter().find(|&&b| b as usize >= num_blocks) {
            return Err(BatchError::BadBlockTable { seq: i, detail: format!("block {b} of {num_blocks}") });
        }
        if let Some(&t) = s.tokens.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(BatchError::BadToken { seq: i, token: t, vocab_size });
        }
    }
    if total == 0 {
        return Err(BatchError::Empty);
    }
    if total > max_tokens {
        return Err(BatchError::TooManyTokens { tokens: total, max: max_tokens });
    }
    Ok(total)
}

/// Checks the window tables of a batch: with a window pool of `num_blocks` blocks, each table must name one of its
/// blocks for every position a chunk's queries read or write in a layer of window `window` (the widest of the
/// model's); without a pool (`None`), every table must be empty, so that an engine and a backend that disagree on
/// the pool fail loudly.
pub fn validate_window_tables(
    batch: &[SeqChunk<'_>],
    window: usize,
    block_size: usize,
    num_blocks: Option<usize>,
) -> Result<(), BatchError> {
    for (i, s) in batch.iter().enumerate() {
        let Some(num_blocks) = num_blocks else {
            if !s.window_table.is_empty() {
                let detail = "a window table, but the backend keeps every layer in one block pool".to_owned();
                return Err(BatchError::BadBlockTable { seq: i, detail });
            }
            continue;
        };
        let resident = (s.start_pos + 1).saturating_sub(window) / block_size..s.end_pos().div_ceil(block_size);
        if s.window_table.len() < resident.end {
            let detail = format!("{} window blocks cover fewer than {} positions", s.window_table.len(), s.end_pos());
            return Err(BatchError::BadBlockTable { seq: i, detail });
        }
        if let Some(at) = s.window_table[resident.clone()].iter().position(|&b| b as usize >= num_blocks) {
            let entry = resident.start + at;
            let detail = format!(
                "window block {} (positions from {}) of {num_blocks}",
                s.window_table[entry],
                entry * block_size
            );
            return Err(BatchError::BadBlockTable { seq: i, detail });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk<'a>(tokens: &'a [TokenId], start_pos: usize, window_table: &'a [u32]) -> SeqChunk<'a> {
        SeqChunk { tokens, start_pos, block_table: &[], window_table, logit_rows: 0 }
    }

    #[test]
    fn window_tables_need_blocks_from_the_first_query_window_to_the_last_key() {
        // Window 8, blocks of 4: a chunk of 3 at position 13 reads keys from 6 (block 1) and writes up to 15.
        let tokens = [1, 2, 3];
        let ok = [NO_BLOCK, 5, 0, 2];
        assert_eq!(validate_window_tables(&[chunk(&tokens, 13, &ok)], 8, 4, Some(6)), Ok(()));
        let released_too_early = [NO_BLOCK, NO_BLOCK, 0, 2];
        let e = validate_window_tables(&[chunk(&tokens, 13, &released_too_early)], 8, 4, Some(6)).unwrap_err();
        assert!(e.to_string().contains("window block 4294967295 (positions from 4) of 6"), "{e}");
        let short = [NO_BLOCK, 5, 0];
        assert!(validate_window_tables(&[chunk(&tokens, 13, &short)], 8, 4, Some(6)).is_err());
        let foreign = [NO_BLOCK, 5, 6, 2];
        assert!(validate_window_tables(&[chunk(&tokens, 13, &foreign)], 8, 4, Some(6)).is_err());
        // Early in a sequence the window reaches back to position 0.
        assert_eq!(validate_window_tables(&[chunk(&tokens, 0, &[3])], 8, 4, Some(6)), Ok(()));
    }

    #[test]
    fn without_a_window_pool_window_tables_must_be_empty() {
        let tokens = [1];
        assert_eq!(validate_window_tables(&[chunk(&tokens, 0, &[])], 8, 4, None), Ok(()));
        assert!(validate_window_tables(&[chunk(&tokens, 0, &[0])], 8, 4, None).is_err());
    }
}
