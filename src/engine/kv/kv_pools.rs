//! A sequence's KV blocks as the scheduler sees them: its blocks of the global pool (every layer's, or every
//! non-windowed layer's) and, when the model has sliding-window layers, of the window pool (`kv_window.rs`). Both
//! grow together and are released together; admission and preemption are decided on the global pool alone, since
//! the window pool is sized so that it has room whenever the global one has.
//!
//! A sequence's part of the pools is its [`SeqKv`]: only [`KvPools`] changes its tables and hashes, when the
//! scheduler admits, grows, preempts or frees the sequence; its computed positions advance as steps compute them
//! ([`SeqKv::computed`]).

use super::kv_prefix::{BlockHash, PrefixCachingAllocator};
use super::kv_window::WindowBlocks;
use crate::model::TokenId;

/// Where a sequence's keys and values are: the KV stage's part of a sequence (`Sequence::kv`).
#[derive(Debug, Default)]
pub struct SeqKv {
    /// Positions whose keys and values are in the KV cache: `tokens[..num_computed]`.
    num_computed: usize,
    /// KV cache blocks holding positions `0..num_computed` (and room scheduled for more).
    block_table: Vec<u32>,
    /// Window-pool blocks of the sliding-window layers, indexed like `block_table`: those of the positions the
    /// next step may still read, `NO_BLOCK` before them (empty without a window pool).
    window_table: Vec<u32>,
    /// Hashes of the sequence's full blocks of tokens, in order: its keys in the prefix cache (`kv_prefix.rs`;
    /// empty when the engine caches no prefixes).
    block_hashes: Vec<BlockHash>,
}

impl SeqKv {
    /// Positions whose keys and values are in the KV cache (the sequence's first `num_computed` tokens).
    pub fn num_computed(&self) -> usize {
        self.num_computed
    }

    /// The global pool's blocks of the sequence's positions, in order.
    pub fn block_table(&self) -> &[u32] {
        &self.block_table
    }

    /// The window pool's blocks of the positions the next step may still read, `NO_BLOCK` before them.
    pub fn window_table(&self) -> &[u32] {
        &self.window_table
    }

    /// A step computed the keys and values of the sequence's next `n` positions: the scheduler's update after each
    /// step, and the output stage for each token a verified draft yields after the first (its position was
    /// computed in the step that verified it).
    pub fn computed(&mut self, n: usize) {
        self.num_computed += n;
    }
}

/// The engine's block pools.
#[derive(Debug)]
pub struct KvPools {
    /// Every layer's blocks (but the windowed layers' when they have their own pool), with the prefix cache.
    pub global: PrefixCachingAllocator,
    /// The sliding-window layers' pool (`None` for a model without such layers, or a backend without the pool).
    pub window: Option<WindowBlocks>,
}

/// What growing a sequence's tables came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grow {
    Done,
    /// The global pool has too few free blocks; nothing changed.
    NoRoom,
    /// The global pool had room but the window pool had not, which its sizing rules out (an engine bug): the
    /// caller releases the sequence's blocks and fails it.
    WindowShortage,
}

impl KvPools {
    pub fn new(global: PrefixCachingAllocator, window: Option<WindowBlocks>) -> Self {
        KvPools { global, window }
    }

    /// Admission: takes the longest run of `kv`'s leading blocks that is cached, among those wholly within
    /// `tokens[..most]`, and counts their positions computed. Returns that number of positions (0 without a hit,
    /// or without prefix caching).
    pub fn take_cached_prefix(&mut self, kv: &mut SeqKv, tokens: &[TokenId], most: usize) -> usize {
        debug_assert!(kv.block_table.is_empty() && kv.num_computed == 0);
        kv.num_computed = self.global.find_cached_prefix(&kv.block_hashes, tokens, most, &mut kv.block_table);
        kv.num_computed
    }

    /// Grows `kv`'s tables so that a chunk at positions `start..end` can run: the block table to cover `..end`,
    /// the window table to the blocks the chunk reads and writes (releasing those behind the window).
    pub fn grow(&mut self, kv: &mut SeqKv, start: usize, end: usize) -> Grow {
        if !self.global.grow(&mut kv.block_table, end) {
            return Grow::NoRoom;
        }
        match self.window.as_mut().map(|w| w.fit(&mut kv.window_table, start, end)) {
            Some(false) => Grow::WindowShortage,
            Some(true) | None => Grow::Done,
        }
    }

    /// The global pool's blocks `kv` still needs to hold positions `..end`.
    pub fn blocks_missing(&self, kv: &SeqKv, end: usize) -> usize {
        self.global.blocks_for(end).saturating_sub(kv.block_table.len())
    }

    /// Returns all of `kv`'s blocks: none of its positions is computed any more.
    pub fn release(&mut self, kv: &mut SeqKv) {
        self.global.release(&mut kv.block_table);
        if let Some(window) = &mut self.window {
            window.release(&mut kv.window_table);
        }
        kv.num_computed = 0;
    }

    /// Hashes the full blocks of `tokens` (the sequence's) that `kv` has no hash for yet: its keys in the prefix
    /// cache (nothing without prefix caching).
    pub fn hash_blocks(&self, kv: &mut SeqKv, tokens: &[TokenId]) {
        self.global.extend_hashes(&mut kv.block_hashes, tokens);
    }

    /// After a step: hashes `kv`'s newly full blocks of `tokens` and makes those whose positions are all computed
    /// findable in the prefix cache (a token sampled this step is not computed yet, but its block is hashed now,
    /// to be registered once it is).
    pub fn cache_computed_blocks(&mut self, kv: &mut SeqKv, tokens: &[TokenId]) {
        self.global.extend_hashes(&mut kv.block_hashes, tokens);
        self.global.cache_full_blocks(&kv.block_table, &kv.block_hashes, tokens, kv.num_computed);
    }

    /// Free blocks of the window pool (0 without one).
    pub fn window_free(&self) -> usize {
        self.window.as_ref().map_or(0, WindowBlocks::num_free)
    }
}
