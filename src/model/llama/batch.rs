//! The unit of work of one forward step: a batch of sequences, each with its new tokens and KV positions.
//!
//! A step mixes prefill chunks (many new tokens of one prompt) and decodes (one new token) of different
//! sequences; the engine builds it, a backend runs it. Positions index each sequence's KV cache, which lives in
//! fixed-size blocks: position `p` is slot `p % block_size` of block `block_table[p / block_size]`.

use std::fmt;

use crate::model::TokenId;

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
    /// Whether to return logits for the last new token (false for all but the last chunk of a prompt).
    pub want_logits: bool,
}

impl SeqChunk<'_> {
    /// One past the last position this chunk writes.
    pub fn end_pos(&self) -> usize {
        self.start_pos + self.tokens.len()
    }
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
    /// The logits buffer does not have one row per requested sequence.
    LogitsBuffer { expected: usize, found: usize },
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
