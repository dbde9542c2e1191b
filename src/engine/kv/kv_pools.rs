//! A sequence's KV blocks as the scheduler sees them: its blocks of the global pool (every layer's, or every
//! non-windowed layer's) and, when the model has sliding-window layers, of the window pool (`kv_window.rs`). Both
//! grow together and are released together; admission and preemption are decided on the global pool alone, since
//! the window pool is sized so that it has room whenever the global one has.

use super::kv_prefix::PrefixCachingAllocator;
use super::kv_window::WindowBlocks;

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

    /// Grows a sequence's tables so that a chunk at positions `start..end` can run: `block_table` to cover
    /// `..end`, `window_table` to the blocks the chunk reads and writes (releasing those behind the window).
    pub fn grow(&mut self, block_table: &mut Vec<u32>, window_table: &mut Vec<u32>, start: usize, end: usize) -> Grow {
        if !self.global.grow(block_table, end) {
            return Grow::NoRoom;
        }
        match self.window.as_mut().map(|w| w.fit(window_table, start, end)) {
            Some(false) => Grow::WindowShortage,
            Some(true) | None => Grow::Done,
        }
    }

    /// Returns all of a sequence's blocks.
    pub fn release(&mut self, block_table: &mut Vec<u32>, window_table: &mut Vec<u32>) {
        self.global.release(block_table);
        if let Some(window) = &mut self.window {
            window.release(window_table);
        }
    }

    /// Free blocks of the window pool (0 without one).
    pub fn window_free(&self) -> usize {
        self.window.as_ref().map_or(0, WindowBlocks::num_free)
    }
}
