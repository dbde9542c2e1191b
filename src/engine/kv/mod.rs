//! The KV cache's bookkeeping: which blocks are free, which hold a cached prefix, and which each sequence holds.
//! The storage is the backend's; the engine hands out block numbers. `kv_blocks.rs` is the plain free list,
//! `kv_prefix.rs` the global pool's allocator with the prefix cache, `kv_window.rs` the sliding-window layers'
//! own pool and its release rule, and `kv_pools.rs` the two as the scheduler grows and frees a sequence's blocks
//! (`docs/architecture.md`, "The KV cache").
//!
//! Owns: the pools, and each sequence's part of them (`SeqKv`, `kv_pools.rs`: its block tables and block hashes,
//! which only the pools change as the scheduler admits, grows, preempts and frees the sequence, and its computed
//! positions, which advance as steps compute them: `SeqKv::computed`).

pub mod kv_blocks;
pub mod kv_pools;
pub mod kv_prefix;
#[cfg(test)]
mod kv_prefix_tests;
pub mod kv_window;
