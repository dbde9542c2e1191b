//! Tests of `kv_prefix.rs`: block hashes, and the prefix-caching pool's lookups, eviction order and reference
//! counts, by hand and in a seeded random run against a model of what each block holds.

use super::kv_blocks::BlockAllocator;
use super::kv_prefix::{extend_hashes, BlockHash, PrefixCachingAllocator};
use crate::engine::sampling::rng::Xoshiro256StarStar;
use crate::model::TokenId;

const ROOT: u64 = 0x5eed;

fn hashes(tokens: &[TokenId], block_size: usize) -> Vec<BlockHash> {
    let mut h = Vec::new();
    extend_hashes(&mut h, tokens, block_size, ROOT);
    h
}

/// A sequence as the scheduler would drive it: admitted with a lookup, grown, computed, registered.
struct Seq {
    tokens: Vec<TokenId>,
    hashes: Vec<BlockHash>,
    table: Vec<u32>,
    computed: usize,
}

impl Seq {
    /// Looks the prompt's prefix up (all but its last token) and grows the table to the whole prompt.
    fn admit(pool: &mut PrefixCachingAllocator, tokens: &[TokenId]) -> Seq {
        let mut s = Seq { tokens: tokens.to_vec(), hashes: Vec::new(), table: Vec::new(), computed: 0 };
        pool.extend_hashes(&mut s.hashes, &s.tokens);
        s.computed = pool.find_cached_prefix(&s.hashes, &s.tokens, s.tokens.len() - 1, &mut s.table);
        assert!(pool.grow(&mut s.table, s.tokens.len()));
        s
    }

    /// Computes every token and registers the full blocks.
    fn compute(&mut self, pool: &mut PrefixCachingAllocator) {
        self.computed = self.tokens.len();
        pool.cache_full_blocks(&self.table, &self.hashes, &self.tokens, self.computed);
    }
}

#[test]
fn hashes_name_the_whole_prefix() {
    let a: Vec<TokenId> = (0..10).collect();
    let ha = hashes(&a, 4);
    assert_eq!(ha.len(), 2, "the partial third block gets no hash");
    assert_eq!(ha, hashes(&a, 4), "deterministic");
    assert_eq!(ha[0], BlockHash::of(BlockHash::root(ROOT), &a[..4]));
    assert_eq!(ha[1], BlockHash::of(ha[0], &a[4..8]));

    let mut b = a.clone();
    b[9] = 99;
    assert_eq!(hashes(&b, 4), ha, "a token of the partial block changes no hash");
    b[5] = 99;
    let hb = hashes(&b, 4);
    assert_eq!(hb[0], ha[0]);
    assert_ne!(hb[1], ha[1], "a token of a block changes its hash");
    let mut c = a.clone();
    c[0] = 99;
    let hc = hashes(&c, 4);
    assert!(hc[0] != ha[0] && hc[1] != ha[1], "a token changes every later block's hash through the parent");
    let mut other_root = Vec::new();
    extend_hashes(&mut other_root, &a, 4, ROOT + 1);
    assert!(other_root[0] != ha[0] && other_root[1] != ha[1], "the root is every chain's parent");
    assert_ne!(BlockHash::of(BlockHash(1), &a[..4]), BlockHash::of(BlockHash(2), &a[..4]));

    // Token by token, as a sequence grows, gives the same hashes as all at once.
    let mut grown = Vec::new();
    for n in 0..=a.len() {
        extend_hashes(&mut grown, &a[..n], 4, ROOT);
        assert_eq!(grown.len(), n / 4);
    }
    assert_eq!(grown, ha);
}

#[test]
fn a_shared_prefix_is_found_and_shared() {
    let mut pool = PrefixCachingAllocator::new(8, 4, ROOT, true);
    let mut a = Seq::admit(&mut pool, &(0..10).collect::<Vec<_>>());
    assert_eq!(a.computed, 0, "nothing cached yet");
    a.compute(&mut pool);
    assert_eq!(pool.num_cached(), 2, "two full blocks; the third is partial");

    let prompt: Vec<TokenId> = (0..8).chain([50, 51, 52]).collect();
    let b = Seq::admit(&mut pool, &prompt);
    assert_eq!(b.computed, 8);
    assert_eq!(b.table[..2], a.table[..2]);
    assert_ne!(b.table[2], a.table[2]);
    assert_eq!((pool.ref_count(a.table[0]), pool.ref_count(a.table[1]), pool.ref_count(a.table[2])), (2, 2, 1));
    assert_eq!(pool.num_referenced(), 4);
    pool.check_invariants();

    // A prompt differing in its first block finds nothing, though its second block's tokens match.
    let c = Seq::admit(&mut pool, &[9, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(c.computed, 0);
    pool.check_invariants();
}

#[test]
fn the_last_prompt_token_is_always_computed() {
    let mut pool = PrefixCachingAllocator::new(8, 4, ROOT, true);
    let prompt: Vec<TokenId> = (0..8).collect();
    let mut a = Seq::admit(&mut pool, &prompt);
    a.compute(&mut pool);
    assert_eq!(pool.num_cached(), 2);
    let b = Seq::admit(&mut pool, &prompt);
    assert_eq!(b.computed, 4, "a fully cached prompt of two blocks still computes its last block");
    assert_eq!(b.table[0], a.table[0]);
    assert_ne!(b.table[1], a.table[1]);
    let mut t = Vec::new();
    assert_eq!(pool.find_cached_prefix(&b.hashes, &prompt, 8, &mut t), 8, "the cap is the caller's");
    assert_eq!(pool.find_cached_prefix(&b.hashes, &prompt, 3, &mut Vec::new()), 0);
    pool.check_invariants();
}

#[test]
fn eviction_takes_the_longest_unused_and_a_sequences_tail_first() {
    let mut pool = PrefixCachingAllocator::new(4, 2, ROOT, true);
    let mut a = Seq::admit(&mut pool, &[1, 2, 3, 4]);
    let mut b = Seq::admit(&mut pool, &[5, 6, 7, 8]);
    a.compute(&mut pool);
    b.compute(&mut pool);
    let (a_blocks, b_blocks) = (a.table.clone(), b.table.clone());
    pool.release(&mut a.table);
    pool.release(&mut b.table);
    assert_eq!((pool.num_free(), pool.num_cached()), (4, 4));

    let mut t = Vec::new();
    assert!(pool.grow(&mut t, 1));
    assert_eq!(t, [a_blocks[1]], "the oldest freed sequence's last block goes first");
    assert_eq!(pool.num_cached(), 3);
    let probe = |pool: &mut PrefixCachingAllocator, tokens: &[TokenId]| {
        let mut table = Vec::new();
        let n = pool.find_cached_prefix(&hashes(tokens, 2), tokens, tokens.len(), &mut table);
        pool.release(&mut table);
        n
    };
    assert_eq!(probe(&mut pool, &[1, 2, 3, 4]), 2, "a's first block is still there");
    // The probe freed a's first block again, after b's blocks: b's go next, tail first.
    assert!(pool.grow(&mut t, 4));
    assert_eq!(t, [a_blocks[1], b_blocks[1]]);
    assert!(pool.grow(&mut t, 6));
    assert_eq!(t[2], b_blocks[0]);
    assert_eq!(probe(&mut pool, &[1, 2, 3, 4]), 2);
    assert_eq!(probe(&mut pool, &[5, 6, 7, 8]), 0);
    pool.check_invariants();
}

#[test]
fn plain_free_blocks_are_taken_before_cached_ones() {
    let mut pool = PrefixCachingAllocator::new(4, 2, ROOT, true);
    let mut a = Seq::admit(&mut pool, &[1, 2, 3, 4]);
    a.compute(&mut pool);
    let cached = a.table.clone();
    pool.release(&mut a.table);
    let mut partial = Vec::new();
    assert!(pool.grow(&mut partial, 3));
    pool.release(&mut partial);
    let mut t = Vec::new();
    assert!(pool.grow(&mut t, 4));
    assert!(t.iter().all(|b| !cached.contains(b)), "taking a plain block evicts nothing");
    assert_eq!(pool.num_cached(), 2);
    pool.check_invariants();
}

#[test]
fn a_hit_on_a_free_block_takes_it_out_of_the_free_queue() {
    let mut pool = PrefixCachingAllocator::new(6, 2, ROOT, true);
    let mut a = Seq::admit(&mut pool, &[1, 2, 3, 4, 5, 6, 7]);
    a.compute(&mut pool);
    let a_blocks = a.table.clone();
    pool.release(&mut a.table);
    assert_eq!((pool.num_free(), pool.num_cached()), (6, 3));

    let b = Seq::admit(&mut pool, &[1, 2, 3, 4, 9, 9]);
    assert_eq!(b.computed, 4);
    assert_eq!(b.table[..2], a_blocks[..2]);
    assert_eq!(pool.num_free(), 3);
    pool.check_invariants();
    let mut rest = Vec::new();
    assert!(pool.grow(&mut rest, 6));
    assert!(!pool.grow(&mut rest, 7));
    assert!(rest.iter().all(|r| !b.table.contains(r)), "a block found is not handed out again");
    pool.check_invariants();
}

#[test]
fn two_sharers_each_hold_a_reference() {
    let mut pool = PrefixCachingAllocator::new(8, 2, ROOT, true);
    let prompt = [1, 2, 3, 4, 5];
    let mut a = Seq::admit(&mut pool, &prompt);
    a.compute(&mut pool);
    let mut b = Seq::admit(&mut pool, &prompt);
    assert_eq!(b.computed, 4);
    b.compute(&mut pool);
    let shared = a.table[0];
    assert_eq!(pool.ref_count(shared), 2);
    pool.release(&mut a.table);
    assert_eq!(pool.ref_count(shared), 1, "b still holds it");
    assert_eq!(pool.num_referenced(), 3, "b's two found blocks and its own");
    pool.check_invariants();
    pool.release(&mut b.table);
    assert_eq!((pool.num_referenced(), pool.num_free(), pool.num_cached()), (0, 8, 2));
    pool.check_invariants();
}

#[test]
fn an_evicted_block_gives_no_stale_hit() {
    let mut pool = PrefixCachingAllocator::new(2, 2, ROOT, true);
    let mut a = Seq::admit(&mut pool, &[1, 2, 3, 4]);
    a.compute(&mut pool);
    pool.release(&mut a.table);
    let mut d = Seq::admit(&mut pool, &[7, 8, 9, 10]);
    assert_eq!(d.computed, 0);
    assert_eq!(pool.num_cached(), 0, "both of a's blocks were evicted");
    d.compute(&mut pool);
    pool.release(&mut d.table);
    let mut t = Vec::new();
    assert_eq!(pool.find_cached_prefix(&hashes(&[1, 2, 3, 4], 2), &[1, 2, 3, 4], 4, &mut t), 0);
    assert_eq!(pool.find_cached_prefix(&hashes(&[7, 8, 9, 10], 2), &[7, 8, 9, 10], 4, &mut t), 4);
    pool.check_invariants();
}

#[test]
fn a_hash_registered_twice_keeps_the_first_block() {
    let mut pool = PrefixCachingAllocator::new(6, 2, ROOT, true);
    let prompt = [1, 2, 3, 4, 5];
    let mut a = Seq::admit(&mut pool, &prompt);
    let mut b = Seq::admit(&mut pool, &prompt);
    assert_eq!(b.computed, 0, "a has computed nothing yet");
    a.compute(&mut pool);
    b.compute(&mut pool);
    b.compute(&mut pool);
    assert_eq!(pool.num_cached(), 2, "b's copies are not registered");
    pool.check_invariants();
    let a_blocks = a.table.clone();
    pool.release(&mut b.table);
    pool.release(&mut a.table);
    let mut t = Vec::new();
    assert!(pool.grow(&mut t, 6));
    assert!(t.iter().all(|x| !a_blocks[..2].contains(x)), "b's copies are freed as plain blocks, taken first");
    assert_eq!(pool.find_cached_prefix(&hashes(&prompt, 2), &prompt, 4, &mut Vec::new()), 4);
    pool.check_invariants();
}

#[test]
fn blocks_are_registered_as_they_fill_and_get_computed() {
    let mut pool = PrefixCachingAllocator::new(4, 4, ROOT, true);
    let tokens: Vec<TokenId> = (0..11).collect();
    let mut h = Vec::new();
    pool.extend_hashes(&mut h, &tokens);
    let mut table = Vec::new();
    assert!(pool.grow(&mut table, 11));
    for (computed, expected) in [(0, 0), (3, 0), (4, 1), (7, 1), (8, 2), (11, 2)] {
        pool.cache_full_blocks(&table, &h, &tokens, computed);
        assert_eq!(pool.num_cached(), expected, "after {computed} computed");
    }
    // Hashes lagging behind the computed positions register only what they cover.
    let mut t2 = Vec::new();
    let mut p2 = PrefixCachingAllocator::new(4, 4, ROOT, true);
    assert!(p2.grow(&mut t2, 11));
    p2.cache_full_blocks(&t2, &h[..1], &tokens, 11);
    assert_eq!(p2.num_cached(), 1);
    p2.cache_full_blocks(&t2, &h, &tokens, 11);
    assert_eq!(p2.num_cached(), 2);
    p2.check_invariants();
}

#[test]
fn a_lookup_checks_the_tokens_and_the_parent() {
    // Hashes that lie (as a 64-bit collision would) find nothing: the block's own tokens and parent decide.
    let mut pool = PrefixCachingAllocator::new(4, 2, ROOT, true);
    let mut a = Seq::admit(&mut pool, &[1, 2, 3, 4, 5]);
    a.compute(&mut pool);
    let mut t = Vec::new();
    assert_eq!(pool.find_cached_prefix(&a.hashes, &[1, 9, 3, 4, 5], 4, &mut t), 0, "other tokens");
    let mut swapped = a.hashes.clone();
    swapped.swap(0, 1);
    assert_eq!(pool.find_cached_prefix(&swapped, &[3, 4, 1, 2, 5], 4, &mut t), 0, "other parent");
    assert!(t.is_empty());
    pool.check_invariants();
}

#[test]
fn without_caching_it_is_the_plain_allocator() {
    let mut rng = TestRng::new(0x0123_4567_89ab_cdef);
    let mut plain = BlockAllocator::new(16, 4);
    let mut pool = PrefixCachingAllocator::new(16, 4, ROOT, false);
    let (mut tp, mut tq): (Vec<Vec<u32>>, Vec<Vec<u32>>) = (vec![Vec::new(); 5], vec![Vec::new(); 5]);
    for _ in 0..2000 {
        let i = rng.below(5);
        match rng.below(4) {
            0 | 1 => {
                let positions = tp[i].len() * 4 + rng.below(12);
                assert_eq!(plain.grow(&mut tp[i], positions), pool.grow(&mut tq[i], positions));
            }
            2 => {
                if let Some(b) = tp[i].pop() {
                    assert_eq!(Some(b), tq[i].pop());
                    plain.release_one(b);
                    pool.release_one(b);
                }
            }
            _ => {
                plain.release(&mut tp[i]);
                pool.release(&mut tq[i]);
            }
        }
        assert_eq!(tp, tq, "the same block numbers");
        assert_eq!(plain.num_free(), pool.num_free());
        let tokens: Vec<TokenId> = (0..tq[i].len() as u32 * 4).collect();
        let mut h = Vec::new();
        pool.extend_hashes(&mut h, &tokens);
        assert!(h.is_empty(), "nothing is hashed");
        let mut full = Vec::new();
        extend_hashes(&mut full, &tokens, 4, ROOT);
        pool.cache_full_blocks(&tq[i], &full, &tokens, tokens.len());
        assert_eq!(pool.num_cached(), 0);
        assert_eq!(pool.find_cached_prefix(&full, &tokens, tokens.len(), &mut Vec::new()), 0);
        pool.check_invariants();
    }
}

/// Deterministic random numbers: the sampler's generator, seeded.
struct TestRng(Xoshiro256StarStar);

impl TestRng {
    fn new(seed: u64) -> Self {
        TestRng(Xoshiro256StarStar::from_seed(seed))
    }

    fn below(&mut self, n: usize) -> usize {
        (self.0.next_u64() % n as u64) as usize
    }
}

/// Many sequences sharing a few prompt stems are admitted, computed chunk by chunk, extended by decoding,
/// preempted, re-admitted and finished on a small pool. After every operation the pool is consistent, and a model
/// of what each block holds (the tokens up to its end, written when computed) says that every hit holds exactly
/// the tokens looked up, and that no block is written while another table shares it.
#[test]
fn random_traffic_keeps_the_pool_consistent_and_hits_exact() {
    const BS: usize = 4;
    const BLOCKS: usize = 48;
    let mut rng = TestRng::new(0x9e37_79b9_7f4a_7c15);
    let mut pool = PrefixCachingAllocator::new(BLOCKS, BS, ROOT, true);
    let stems: Vec<Vec<TokenId>> = (0..4).map(|_| (0..40).map(|_| rng.below(6) as TokenId).collect()).collect();
    // written[b]: the token prefix whose last block block `b` holds, as far as computed.
    let mut written: Vec<Vec<TokenId>> = vec![Vec::new(); BLOCKS];
    let mut running: Vec<Seq> = Vec::new();
    let mut waiting: Vec<Seq> = Vec::new();
    let (mut hit_tokens, mut finished) = (0, 0);

    // Returns whether it was admitted, and the tokens found (also when given back for want of room).
    let admit = |pool: &mut PrefixCachingAllocator, s: &mut Seq, written: &[Vec<TokenId>]| -> (bool, usize) {
        assert!(s.table.is_empty() && s.computed == 0);
        pool.extend_hashes(&mut s.hashes, &s.tokens);
        let max = s.tokens.len() - 1;
        let found = pool.find_cached_prefix(&s.hashes, &s.tokens, max, &mut s.table);
        assert!(found <= max && found.is_multiple_of(BS) && found == s.table.len() * BS);
        for (i, &b) in s.table.iter().enumerate() {
            assert_eq!(written[b as usize], s.tokens[..(i + 1) * BS], "a hit holds the tokens looked up");
        }
        s.computed = found;
        // Room for the first chunk, or give the found blocks back.
        if pool.grow(&mut s.table, found + 1) {
            (true, found)
        } else {
            pool.release(&mut s.table);
            s.computed = 0;
            (false, found)
        }
    };

    for _ in 0..20_000 {
        match rng.below(10) {
            // A new request: a stem's prefix and a few tokens of its own.
            0 | 1 => {
                let stem = &stems[rng.below(stems.len())];
                let mut tokens = stem[..rng.below(stem.len() + 1)].to_vec();
                tokens.extend((0..1 + rng.below(6)).map(|_| rng.below(6) as TokenId));
                waiting.push(Seq { tokens, hashes: Vec::new(), table: Vec::new(), computed: 0 });
            }
            // Admit a waiting sequence.
            2 if !waiting.is_empty() && running.len() < 8 => {
                let mut s = waiting.swap_remove(rng.below(waiting.len()));
                let (admitted, found) = admit(&mut pool, &mut s, &written);
                hit_tokens += found;
                if admitted {
                    running.push(s);
                } else {
                    waiting.push(s);
                }
            }
            // A step of a running sequence: a chunk of its prompt, or the token it sampled.
            3..=6 if !running.is_empty() => {
                let i = rng.below(running.len());
                let s = &mut running[i];
                if s.computed == s.tokens.len() {
                    s.tokens.push(rng.below(6) as TokenId);
                }
                let end = (s.computed + 1 + rng.below(7)).min(s.tokens.len());
                if !pool.grow(&mut s.table, end) {
                    // Preempted: everything computed is dropped; found again on re-admission if still cached.
                    let mut s = running.swap_remove(i);
                    pool.release(&mut s.table);
                    s.computed = 0;
                    waiting.push(s);
                } else {
                    for p in (s.computed..end).step_by(BS).chain([end - 1]) {
                        let b = s.table[p / BS];
                        assert_eq!(pool.ref_count(b), 1, "a block being written is not shared");
                        written[b as usize] = s.tokens[..end.min((p / BS + 1) * BS)].to_vec();
                    }
                    s.computed = end;
                    pool.extend_hashes(&mut s.hashes, &s.tokens);
                    pool.cache_full_blocks(&s.table, &s.hashes, &s.tokens, s.computed);
                }
            }
            // Finish a running sequence.
            7 if !running.is_empty() => {
                let mut s = running.swap_remove(rng.below(running.len()));
                pool.release(&mut s.table);
                finished += 1;
            }
            _ => {}
        }
        pool.check_invariants();
        let held: usize = running.iter().map(|s| s.table.len()).sum();
        assert!(pool.num_referenced() <= held);
    }
    for mut s in running.drain(..) {
        pool.release(&mut s.table);
    }
    pool.check_invariants();
    assert_eq!((pool.num_referenced(), pool.num_free()), (0, BLOCKS));
    assert!(hit_tokens > 1000 && finished > 500, "the run exercised sharing: {hit_tokens} hit tokens, {finished} done");
}
