//! The paged KV cache's bookkeeping: which blocks are free, and each sequence's block table.
//!
//! The storage itself belongs to the backend; the engine only hands out block numbers. A sequence's positions
//! `0..n` live in its first `⌈n / block_size⌉` blocks, so growing a sequence appends blocks and freeing it returns
//! all of them.

/// Free-list allocator of KV cache blocks.
#[derive(Debug)]
pub struct BlockAllocator {
    block_size: usize,
    num_blocks: usize,
    /// Free block numbers; blocks are taken from the end.
    free: Vec<u32>,
}

impl BlockAllocator {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        // Reversed so that block 0 is handed out first (tidier to debug; no other significance).
        BlockAllocator { block_size, num_blocks, free: (0..num_blocks as u32).rev().collect() }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Blocks needed to hold `positions` positions.
    pub fn blocks_for(&self, positions: usize) -> usize {
        positions.div_ceil(self.block_size)
    }

    /// Grows `table` to hold `positions` positions. On failure (not enough free blocks) nothing changes.
    pub fn grow(&mut self, table: &mut Vec<u32>, positions: usize) -> bool {
        let needed = self.blocks_for(positions).saturating_sub(table.len());
        if needed > self.free.len() {
            return false;
        }
        let start = self.free.len() - needed;
        table.extend(self.free.drain(start..).rev());
        true
    }

    /// Returns all of `table`'s blocks.
    pub fn release(&mut self, table: &mut Vec<u32>) {
        self.free.append(table);
    }

    /// Returns one block (taken by `grow`, and not returned since).
    pub fn release_one(&mut self, block: u32) {
        debug_assert!((block as usize) < self.num_blocks && self.free.len() < self.num_blocks);
        self.free.push(block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_on_demand_and_frees_everything() {
        let mut a = BlockAllocator::new(4, 16);
        let mut t = Vec::new();
        assert!(a.grow(&mut t, 1));
        assert_eq!(t, [0]);
        assert!(a.grow(&mut t, 16));
        assert_eq!(t.len(), 1, "16 positions fit one block");
        assert!(a.grow(&mut t, 33));
        assert_eq!(t, [0, 1, 2]);
        let mut u = Vec::new();
        assert!(!a.grow(&mut u, 17), "two blocks needed, one free");
        assert!(u.is_empty() && a.num_free() == 1);
        a.release(&mut t);
        assert!(t.is_empty() && a.num_free() == 4);
        assert!(a.grow(&mut u, 64));
        assert_eq!(a.num_free(), 0);
    }
}
