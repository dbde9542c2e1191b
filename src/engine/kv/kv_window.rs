//! The sliding-window layers' own pool of KV blocks, and the rule that keeps a sequence's table of it small.
//!
//! A layer with a window of `w` positions reads, for a query at position `p`, the keys `p + 1 − w ..= p` only, and
//! a sequence's queries only move forward: once its next query is at `q`, no windowed layer reads a position
//! before `q + 1 − w` again, and the blocks that hold only such positions go back to the pool. A sequence's window
//! table is indexed by position like its block table (entry `i` covers positions `i·bs .. (i + 1)·bs`); a released
//! entry holds `NO_BLOCK`, and the released entries are always a prefix of the table.
//!
//! Sizing. A step computes a chunk of `n` tokens at positions `p .. p + n`: its first query reads keys from
//! `p + 1 − w`, its last token writes `p + n − 1`, so those `w − 1 + n` positions must all be resident during the
//! step, and [`WindowBlocks::fit`] makes the table hold exactly the blocks they span: at most
//! `cap = 1 + ⌈(w + n − 2) / bs⌉` ([`WindowBlocks::cap`], with `n` the step's token budget). A sequence's window
//! entries are also a subset of its positions, so it never holds more window blocks than global ones. Only the
//! running sequences hold blocks, at most `max_num_seqs` of them, so a pool of
//! `min(global blocks, max_num_seqs × cap)` ([`WindowBlocks::pool_size`]) cannot run out while the global pool
//! has room.

use super::kv_blocks::BlockAllocator;
use crate::model::llama::NO_BLOCK;

/// The window pool: a free list of blocks, and the window its tables keep.
#[derive(Debug)]
pub struct WindowBlocks {
    blocks: BlockAllocator,
    /// The widest window of the model's layers: what every windowed layer may still read.
    window: usize,
}

impl WindowBlocks {
    pub fn new(num_blocks: usize, block_size: usize, window: usize) -> Self {
        WindowBlocks { blocks: BlockAllocator::new(num_blocks, block_size), window }
    }

    /// Most window blocks one sequence holds when its steps compute at most `max_chunk_tokens` tokens: the blocks
    /// `w − 1 + max_chunk_tokens` consecutive positions can span.
    pub fn cap(window: usize, max_chunk_tokens: usize, block_size: usize) -> usize {
        1 + (window + max_chunk_tokens).saturating_sub(2).div_ceil(block_size)
    }

    /// A pool that never runs out for `max_seqs` sequences that each hold at most `cap` blocks and no more than
    /// their blocks of a global pool of `global_blocks` (see the module documentation).
    pub fn pool_size(
        window: usize,
        max_chunk_tokens: usize,
        block_size: usize,
        max_seqs: usize,
        global_blocks: usize,
    ) -> usize {
        global_blocks.min(max_seqs.saturating_mul(Self::cap(window, max_chunk_tokens, block_size)))
    }

    pub fn window(&self) -> usize {
        self.window
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.num_blocks()
    }

    pub fn num_free(&self) -> usize {
        self.blocks.num_free()
    }

    /// Makes `table` hold the blocks a chunk at positions `start..end` needs, and only those: the blocks whose
    /// positions are all before `start + 1 − window` go back to the pool (their entries become `NO_BLOCK`), and
    /// the table grows to cover `..end`. False when the pool has too few free blocks to grow; the table is then
    /// trimmed but not grown.
    pub fn fit(&mut self, table: &mut Vec<u32>, start: usize, end: usize) -> bool {
        let keep_from = (start + 1).saturating_sub(self.window) / self.blocks.block_size();
        // Released entries are a prefix: walk back from the first entry kept to the last one released before.
        let mut entry = keep_from.min(table.len());
        while entry > 0 && table[entry - 1] != NO_BLOCK {
            entry -= 1;
            self.blocks.release_one(table[entry]);
            table[entry] = NO_BLOCK;
        }
        // A table that never covered the positions before the window (none of the engine's) needs no block there.
        while table.len() < keep_from {
            table.push(NO_BLOCK);
        }
        self.blocks.grow(table, end)
    }

    /// Returns all of `table`'s blocks (the sequence finished or was preempted).
    pub fn release(&mut self, table: &mut Vec<u32>) {
        for &block in table.iter().filter(|&&b| b != NO_BLOCK) {
            self.blocks.release_one(block);
        }
        table.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(table: &[u32]) -> usize {
        table.iter().filter(|&&b| b != NO_BLOCK).count()
    }

    #[test]
    fn blocks_go_back_once_the_next_query_is_past_their_window() {
        // Window 8, blocks of 4.
        let mut w = WindowBlocks::new(6, 4, 8);
        let mut t = Vec::new();
        assert!(w.fit(&mut t, 0, 5), "a first chunk of 5");
        assert_eq!(t, [0, 1]);
        assert!(w.fit(&mut t, 5, 11), "the query at 5 reads from 0");
        assert_eq!(t, [0, 1, 2]);
        // The query at 11 reads 4..=11: block 0 (positions 0..4) is no longer read.
        assert!(w.fit(&mut t, 11, 12));
        assert_eq!((t.as_slice(), w.num_free()), ([NO_BLOCK, 1, 2].as_slice(), 4));
        // The next block is the one just released: the pool reuses few distinct blocks (few pages touched).
        assert!(w.fit(&mut t, 12, 13));
        assert_eq!(t, [NO_BLOCK, 1, 2, 0]);
        // A query at 10 would still read position 3, in block 0: the boundary is exact.
        let mut u = Vec::new();
        assert!(w.fit(&mut u, 0, 10) && w.fit(&mut u, 10, 11));
        assert_eq!(held(&u), 3);
        w.release(&mut t);
        w.release(&mut u);
        assert!(t.is_empty() && w.num_free() == 6);
    }

    #[test]
    fn a_prefill_chunk_keeps_its_first_querys_window_and_every_key_it_writes() {
        // Window 8, blocks of 4: a chunk of 6 at position 20 reads from 13 (block 3) and writes up to 25 (block 6).
        let mut w = WindowBlocks::new(16, 4, 8);
        let mut t = Vec::new();
        assert!(w.fit(&mut t, 0, 20));
        assert!(w.fit(&mut t, 20, 26));
        assert_eq!(&t[..3], [NO_BLOCK; 3]);
        assert_eq!(held(&t), 4, "entries 3..=6");
        assert_eq!(t.len(), 7, "indexed by position: entry i covers positions 4i..4i+4");
        // Too few free blocks: trimmed, not grown, and nothing else changed.
        let mut small = WindowBlocks::new(3, 4, 8);
        let mut s = Vec::new();
        assert!(small.fit(&mut s, 0, 12));
        assert!(!small.fit(&mut s, 12, 20), "positions 5..20 span 4 blocks");
        assert_eq!((s.as_slice(), small.num_free()), ([NO_BLOCK, 1, 2].as_slice(), 1));
    }

    #[test]
    fn windows_at_least_the_context_release_nothing() {
        let mut w = WindowBlocks::new(8, 4, 64);
        let mut t = Vec::new();
        for start in 0..30 {
            assert!(w.fit(&mut t, start, start + 1));
        }
        assert_eq!((held(&t), t.len()), (8, 8));
    }

    /// Every window, block size, budget and chunking pattern of small sizes: a sequence's table always holds the
    /// blocks its step reads and writes, never more than `cap`, and `cap` is reached (the bound is tight).
    #[test]
    fn a_sequence_never_holds_more_than_cap_blocks_and_always_what_its_step_reads() {
        for window in 1..=9 {
            for bs in 1..=5 {
                for budget in 1..=7 {
                    let cap = WindowBlocks::cap(window, budget, bs);
                    let mut most = 0;
                    for first in 1..=budget {
                        for chunk in 1..=budget {
                            let mut w = WindowBlocks::new(cap, bs, window);
                            let mut t = Vec::new();
                            let mut pos = 0;
                            while pos < 60 {
                                let n = if pos == 0 { first } else { chunk };
                                assert!(w.fit(&mut t, pos, pos + n), "w {window} bs {bs} budget {budget} at {pos}");
                                let needed = (pos + 1).saturating_sub(window) / bs..(pos + n).div_ceil(bs);
                                assert!(t[needed.clone()].iter().all(|&b| b != NO_BLOCK), "{needed:?} of {t:?}");
                                assert_eq!(held(&t), needed.len(), "only what the step needs");
                                most = most.max(held(&t));
                                pos += n;
                            }
                            w.release(&mut t);
                            assert_eq!(w.num_free(), cap);
                        }
                    }
                    assert_eq!(most, cap, "w {window} bs {bs} budget {budget}: the bound is reached");
                }
            }
        }
    }

    #[test]
    fn the_pool_covers_every_running_sequence_within_the_global_pool() {
        // Gemma 3 with the CPU defaults: window 512, 128-token steps, blocks of 16.
        assert_eq!(WindowBlocks::cap(512, 128, 16), 41);
        assert_eq!(WindowBlocks::pool_size(512, 128, 16, 64, 1024), 1024, "never more than the global pool");
        assert_eq!(WindowBlocks::pool_size(512, 128, 16, 4, 1024), 164);
        assert_eq!(WindowBlocks::pool_size(512, 128, 16, 1, 256), 41);
    }
}
