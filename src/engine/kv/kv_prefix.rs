//! Automatic prefix caching: the global pool's blocks, kept findable by their contents after their sequences
//! are done, so that a later sequence whose tokens begin alike takes them instead of computing them again.
//!
//! A full block's keys and values depend on the model and on every token up to the block's end, so a block is
//! named by a hash chain: [`BlockHash::of`] its parent block's hash and its own `block_size` token ids, the first
//! block's parent being the engine's `root` key (standing for the model, and anything else that changes the KV).
//! Partial blocks have no hash: they are still being written.
//!
//! [`PrefixCachingAllocator`] is the free list of [`super::kv_blocks::BlockAllocator`] plus, per block, a
//! reference count and an optional hash, a hash → block map, and a free queue in LRU order holding every block no
//! table references, cached or not. A released cached block stays findable until it is taken for new use (and so
//! evicted); a hit on it takes it back out of the middle of the queue, hence a doubly linked list over block
//! numbers. vLLM v1's KVCacheManager / BlockPool work the same way.

use std::collections::hash_map::Entry;
use std::hash::{DefaultHasher, Hash, Hasher};

use rustc_hash::FxHashMap;

use crate::model::TokenId;

/// The contents of a full block: a hash of its parent block's hash and its own token ids.
///
/// The hash is 64-bit SipHash through `DefaultHasher::new()`: keyed with zeros, so the same in every run of one
/// build (hashes never leave the process, so a change of algorithm between Rust releases does no harm), and well
/// mixed, which the map relies on. Each cached block also keeps its parent hash and tokens, and a lookup checks
/// both, so two different (parent, tokens) pairs with one hash never share a block. What remains is a collision of
/// whole chains: a block whose parent hash equals ours although its parent's tokens differ. That needs two
/// different prefixes with one 64-bit hash, about 2⁻⁶⁴ per pair of blocks, and is accepted as vLLM accepts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockHash(pub u64);

impl BlockHash {
    /// The parent of every sequence's first block.
    pub fn root(root: u64) -> Self {
        BlockHash(root)
    }

    /// The hash of a full block holding `tokens` after the block hashed `parent`.
    pub fn of(parent: BlockHash, tokens: &[TokenId]) -> Self {
        let mut hasher = DefaultHasher::new();
        parent.0.hash(&mut hasher);
        tokens.hash(&mut hasher);
        BlockHash(hasher.finish())
    }
}

/// Appends to `hashes` (the hashes of `tokens`' first `hashes.len()` blocks) those of its newly full blocks, so
/// that it holds one hash per full block of `tokens`; a partial last block gets none. `tokens` is the sequence's
/// whole token list; the cost is that of the new blocks only.
pub fn extend_hashes(hashes: &mut Vec<BlockHash>, tokens: &[TokenId], block_size: usize, root: u64) {
    let full = tokens.len() / block_size;
    debug_assert!(hashes.len() <= full, "more hashes than full blocks: the tokens were cut");
    let mut parent = hashes.last().copied().unwrap_or(BlockHash::root(root));
    for block in tokens[hashes.len().min(full) * block_size..full * block_size].chunks_exact(block_size) {
        parent = BlockHash::of(parent, block);
        hashes.push(parent);
    }
}

/// Prompt tokens looked up when sequences were admitted, and those found cached (kept by the scheduler, which
/// counts only lookups whose admission went through: a sequence that waits for room is looked up again).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub queries: u64,
    pub hits: u64,
}

/// What a block holds as far as the cache is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    /// Nothing findable (not full yet, or not registered yet, or caching is off).
    Plain,
    /// Registered: the map sends `hash` here; the tokens are in `PrefixCachingAllocator::tokens`.
    Cached { hash: BlockHash, parent: BlockHash },
    /// Full and computed, but another block held its hash when it was registered; it stays unfindable until it
    /// is freed. Distinct from `Plain` only so that `cache_full_blocks` knows it has been seen.
    Duplicate,
}

/// End of the free queue.
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Block {
    /// Tables holding the block; 0 exactly when it is in the free queue.
    refs: u32,
    content: Content,
    /// Free-queue neighbours (`NIL` at either end, and while the block is referenced).
    prev: u32,
    next: u32,
}

/// The global pool's allocator with automatic prefix caching (see the module documentation). With caching off
/// it hands out the same block numbers as [`super::kv_blocks::BlockAllocator`] for the same calls.
#[derive(Debug)]
pub struct PrefixCachingAllocator {
    block_size: usize,
    root: BlockHash,
    caching: bool,
    blocks: Vec<Block>,
    /// Block `b`'s tokens at `b·block_size ..`, valid while it is `Cached` (empty with caching off).
    tokens: Vec<TokenId>,
    cached: FxHashMap<BlockHash, u32>,
    /// The free queue: blocks are taken at the head. Cached blocks are freed to the tail, so the longest unused
    /// is evicted first; plain ones to the head, since taking them evicts nothing.
    head: u32,
    tail: u32,
    num_free: usize,
}

impl PrefixCachingAllocator {
    /// A pool of `num_blocks` blocks of `block_size` positions, all free. `root` names what the KV depends on
    /// besides the tokens (see [`BlockHash`]). With `caching == false` nothing is hashed, looked up or
    /// registered, and the pool behaves as the plain `BlockAllocator`.
    pub fn new(num_blocks: usize, block_size: usize, root: u64, caching: bool) -> Self {
        assert!(block_size > 0 && num_blocks < NIL as usize);
        let n = num_blocks as u32;
        let blocks = (0..n)
            .map(|b| Block {
                refs: 0,
                content: Content::Plain,
                prev: if b == 0 { NIL } else { b - 1 },
                next: if b + 1 == n { NIL } else { b + 1 },
            })
            .collect();
        PrefixCachingAllocator {
            block_size,
            root: BlockHash::root(root),
            caching,
            blocks,
            tokens: if caching { vec![0; num_blocks * block_size] } else { Vec::new() },
            cached: FxHashMap::default(),
            // Block 0 is handed out first, as with the plain allocator.
            head: if n == 0 { NIL } else { 0 },
            tail: if n == 0 { NIL } else { n - 1 },
            num_free: num_blocks,
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    pub fn caching(&self) -> bool {
        self.caching
    }

    /// Blocks no table holds, which `grow` may take: cached ones included.
    pub fn num_free(&self) -> usize {
        self.num_free
    }

    /// Blocks held by at least one table.
    pub fn num_referenced(&self) -> usize {
        self.blocks.len() - self.num_free
    }

    /// Blocks that are findable by their hash, held or free.
    pub fn num_cached(&self) -> usize {
        self.cached.len()
    }

    /// Tables holding `block`.
    pub fn ref_count(&self, block: u32) -> u32 {
        self.blocks[block as usize].refs
    }

    /// Blocks needed to hold `positions` positions.
    pub fn blocks_for(&self, positions: usize) -> usize {
        positions.div_ceil(self.block_size)
    }

    /// [`extend_hashes`] with this pool's block size and root; nothing with caching off (no hash is needed).
    pub fn extend_hashes(&self, hashes: &mut Vec<BlockHash>, tokens: &[TokenId]) {
        if self.caching {
            extend_hashes(hashes, tokens, self.block_size, self.root.0);
        }
    }

    /// For a sequence not holding blocks yet (`table` empty): takes the longest run of its leading blocks that are
    /// cached, among those lying wholly within `tokens[..max_tokens]`, into `table`, and returns the tokens they
    /// cover (a multiple of the block size), which the sequence need not compute. `hashes` are the sequence's
    /// block hashes ([`Self::extend_hashes`]). The caller passes `max_tokens = tokens.len() − 1`, so that the last
    /// prompt token is computed (its logits are needed); a fully cached prompt then leaves its last block to
    /// compute when the prompt fills it.
    pub fn find_cached_prefix(
        &mut self,
        hashes: &[BlockHash],
        tokens: &[TokenId],
        max_tokens: usize,
        table: &mut Vec<u32>,
    ) -> usize {
        assert!(table.is_empty(), "a prefix is looked up for a sequence holding no blocks");
        if !self.caching {
            return 0;
        }
        let bs = self.block_size;
        let max_tokens = max_tokens.min(tokens.len());
        let mut parent = self.root;
        for (i, &hash) in hashes[..(max_tokens / bs).min(hashes.len())].iter().enumerate() {
            let Some(&b) = self.cached.get(&hash) else { break };
            let block = self.blocks[b as usize];
            let own = &tokens[i * bs..(i + 1) * bs];
            if block.content != (Content::Cached { hash, parent }) || self.tokens_of(b) != own {
                break;
            }
            if block.refs == 0 {
                self.unlink(b);
            }
            self.blocks[b as usize].refs += 1;
            table.push(b);
            parent = hash;
        }
        table.len() * bs
    }

    /// Grows `table` to hold `positions` positions, taking blocks at the free queue's head (a cached one taken is
    /// evicted: no longer findable). On failure (too few free blocks) nothing changes.
    pub fn grow(&mut self, table: &mut Vec<u32>, positions: usize) -> bool {
        let needed = self.blocks_for(positions).saturating_sub(table.len());
        if needed > self.num_free {
            return false;
        }
        for _ in 0..needed {
            let b = self.head;
            self.unlink(b);
            if let Content::Cached { hash, .. } = self.blocks[b as usize].content {
                let removed = self.cached.remove(&hash);
                debug_assert_eq!(removed, Some(b));
            }
            self.blocks[b as usize] = Block { refs: 1, content: Content::Plain, prev: NIL, next: NIL };
            table.push(b);
        }
        true
    }

    /// Registers `table`'s blocks that are full of computed positions (all `< num_computed`) and have a hash in
    /// `hashes`, so later lookups find them; `tokens` is the sequence's token list. A block whose hash another
    /// block already holds (two sequences computed the same prefix at once) is left unfindable, and freed as a
    /// plain block. Meant to be called after every step: blocks registered (or found) earlier are skipped, and
    /// the cost is that of the new blocks. Nothing with caching off.
    pub fn cache_full_blocks(&mut self, table: &[u32], hashes: &[BlockHash], tokens: &[TokenId], num_computed: usize) {
        if !self.caching {
            return;
        }
        let bs = self.block_size;
        let full = (num_computed.min(tokens.len()) / bs).min(hashes.len()).min(table.len());
        // The blocks seen by earlier calls (found, registered or duplicate) are a prefix of the table: each call
        // goes on from the first block not seen, and blocks found by `find_cached_prefix` lead the table.
        let mut first = full;
        while first > 0 && self.blocks[table[first - 1] as usize].content == Content::Plain {
            first -= 1;
        }
        for i in first..full {
            let b = table[i];
            debug_assert!(self.blocks[b as usize].refs > 0, "a table's blocks are referenced");
            let hash = hashes[i];
            let parent = if i == 0 { self.root } else { hashes[i - 1] };
            self.blocks[b as usize].content = match self.cached.entry(hash) {
                Entry::Occupied(_) => Content::Duplicate,
                Entry::Vacant(slot) => {
                    slot.insert(b);
                    let at = b as usize * bs;
                    self.tokens[at..at + bs].copy_from_slice(&tokens[i * bs..(i + 1) * bs]);
                    Content::Cached { hash, parent }
                }
            };
        }
    }

    /// Returns `table`'s blocks (the sequence finished or was preempted), leaving it empty. A block other tables
    /// still hold stays theirs; the others are freed, cached ones staying findable until evicted. They are freed
    /// last block first, so that a sequence's later blocks, shared less often, are evicted before its first ones.
    pub fn release(&mut self, table: &mut Vec<u32>) {
        if self.caching {
            for &b in table.iter().rev() {
                self.release_one(b);
            }
        } else {
            // In order, pushed at the head: the plain allocator's stack order, which `grow` then takes first.
            for &b in table.iter() {
                self.release_one(b);
            }
        }
        table.clear();
    }

    /// Returns one reference to `block` (taken by `grow` or `find_cached_prefix` and not returned since).
    pub fn release_one(&mut self, block: u32) {
        let b = &mut self.blocks[block as usize];
        assert!(b.refs > 0, "block {block} released more often than taken");
        b.refs -= 1;
        if b.refs > 0 {
            return;
        }
        if b.content == Content::Duplicate {
            b.content = Content::Plain;
        }
        if matches!(b.content, Content::Cached { .. }) {
            self.push_back(block);
        } else {
            self.push_front(block);
        }
    }

    /// Panics unless the bookkeeping is consistent: each block is either referenced and out of the free queue or
    /// unreferenced and in it exactly once, the free count is the queue's length, and the map and the blocks'
    /// hashes agree. Linear in the pool's size: for tests.
    pub fn check_invariants(&self) {
        let n = self.blocks.len();
        let mut in_queue = vec![false; n];
        let (mut prev, mut b, mut len) = (NIL, self.head, 0);
        while b != NIL {
            let block = &self.blocks[b as usize];
            assert!(!in_queue[b as usize], "block {b} twice in the free queue");
            in_queue[b as usize] = true;
            assert_eq!(block.prev, prev, "block {b}'s back link");
            assert_eq!(block.refs, 0, "free block {b} is referenced");
            assert_ne!(block.content, Content::Duplicate, "free block {b} is marked duplicate");
            (prev, b, len) = (b, block.next, len + 1);
        }
        assert_eq!(self.tail, prev, "the free queue's tail");
        assert_eq!(len, self.num_free, "free count against the free queue");
        let mut cached = 0;
        for (b, block) in self.blocks.iter().enumerate() {
            assert_eq!(block.refs == 0, in_queue[b], "block {b}: referenced exactly when out of the free queue");
            if block.refs > 0 {
                assert!(block.prev == NIL && block.next == NIL, "referenced block {b} has queue links");
            }
            if let Content::Cached { hash, .. } = block.content {
                assert_eq!(self.cached.get(&hash), Some(&(b as u32)), "block {b}'s hash maps elsewhere");
                cached += 1;
            }
            if !self.caching {
                assert_eq!(block.content, Content::Plain, "block {b} hashed with caching off");
            }
        }
        assert_eq!(cached, self.cached.len(), "map entries without their block");
    }

    fn tokens_of(&self, block: u32) -> &[TokenId] {
        let at = block as usize * self.block_size;
        &self.tokens[at..at + self.block_size]
    }

    /// Takes a free block out of the queue.
    fn unlink(&mut self, b: u32) {
        let Block { prev, next, .. } = self.blocks[b as usize];
        match prev {
            NIL => self.head = next,
            p => self.blocks[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.blocks[n as usize].prev = prev,
        }
        let block = &mut self.blocks[b as usize];
        (block.prev, block.next) = (NIL, NIL);
        self.num_free -= 1;
    }

    fn push_back(&mut self, b: u32) {
        let tail = self.tail;
        let block = &mut self.blocks[b as usize];
        (block.prev, block.next) = (tail, NIL);
        match tail {
            NIL => self.head = b,
            t => self.blocks[t as usize].next = b,
        }
        self.tail = b;
        self.num_free += 1;
    }

    fn push_front(&mut self, b: u32) {
        let head = self.head;
        let block = &mut self.blocks[b as usize];
        (block.prev, block.next) = (NIL, head);
        match head {
            NIL => self.tail = b,
            h => self.blocks[h as usize].prev = b,
        }
        self.head = b;
        self.num_free += 1;
    }
}
