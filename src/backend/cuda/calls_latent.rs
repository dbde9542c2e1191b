//! The operands of the latent-attention kernels (`kernels/latent.cu`), their checks and launch shapes, as `calls.rs`
//! does for the dense ones: `args()` is a pure function, tested below without a GPU.

use cudarc::driver::LaunchConfig;

use super::args::{HeadsCopyArgs, LatentKeysArgs, LatentQueriesArgs};
use super::calls::{blocks, config, int, internal};
use super::device_array::DeviceArray;
use super::error::CudaBackendError;
use super::kv_cache::{kv_type_code, row_words};
use crate::backend::KvCacheType;

const LATENT_THREADS: u32 = 128;
/// Widest key row of `latent_keys` (`LATENT_MAX_WIDTH` of latent.cu).
const LATENT_MAX_WIDTH: usize = 576;
const HEADS_COPY_THREADS: u32 = 256;

/// Each token's key row `c | k_pe`, normalized and rotated, stored in the keys-only cache at its slot.
pub struct LatentKeysCall<'a> {
    /// `[n_tokens][rank + rope_dim]`: `attn_kv_a_mqa`'s output.
    pub kv: DeviceArray<'a, f32>,
    /// `[rank]`: `attn_kv_a_norm`.
    pub norm: DeviceArray<'a, f32>,
    pub cos: DeviceArray<'a, f32>,
    pub sin: DeviceArray<'a, f32>,
    pub positions: DeviceArray<'a, i32>,
    /// `[n_tokens]`, each `< slots` or −1.
    pub slots: DeviceArray<'a, i32>,
    /// This layer's keys, `[n_slots]` rows of `rank + rope_dim` elements of `key_type` (`kv_cache.rs`).
    pub keys: DeviceArray<'a, u16>,
    pub key_type: KvCacheType,
    pub n_slots: usize,
    pub n_tokens: usize,
    pub rank: usize,
    pub rope_dim: usize,
    pub eps: f32,
}

impl LatentKeysCall<'_> {
    pub fn args(&self) -> Result<(LatentKeysArgs, LaunchConfig), CudaBackendError> {
        let (n, width, half) = (self.n_tokens, self.rank + self.rope_dim, self.rope_dim / 2);
        // The kernel holds a row in shared memory (`LATENT_MAX_WIDTH`); a block type takes it in blocks of 32.
        let whole_blocks = !self.key_type.is_blocked() || width.is_multiple_of(32);
        if self.rank == 0 || !self.rope_dim.is_multiple_of(2) || width > LATENT_MAX_WIDTH || !whole_blocks {
            return Err(internal(format!("{} key rows of {} + {}", self.key_type, self.rank, self.rope_dim)));
        }
        let args = LatentKeysArgs {
            kv: self.kv.covering(n * width, "the key rows")?,
            norm_w: self.norm.covering(self.rank, "the key norm")?,
            cos: self.cos.covering(n * half, "the cos table")?,
            sin: self.sin.covering(n * half, "the sin table")?,
            positions: self.positions.covering(n, "the positions")?,
            slots: self.slots.covering(n, "the cache slots")?,
            k_cache: self.keys.covering(self.n_slots * row_words(self.key_type, width), "the key cache")?,
            n_tokens: int(n, "tokens")?,
            rank: int(self.rank, "kv_lora_rank")?,
            rope_dim: int(self.rope_dim, "rope_dim")?,
            eps: self.eps,
            k_type: kv_type_code(self.key_type),
            pad: 0,
        };
        Ok((args, config((blocks(n, 1)?, 1), LATENT_THREADS)))
    }
}

/// Where `(head, token)` rows of `width` sit in a buffer: `head · per_head + token · per_token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadRows {
    pub per_head: usize,
    pub per_token: usize,
}

impl HeadRows {
    /// Token-major rows: `[token][n_head · stride]`, head `h`'s `width` elements at `h · stride + offset`.
    pub fn token_major(n_head: usize, stride: usize) -> Self {
        HeadRows { per_head: stride, per_token: n_head * stride }
    }

    /// Head-major rows: `[head][n_tokens][width]`.
    pub fn head_major(n_tokens: usize, width: usize) -> Self {
        HeadRows { per_head: n_tokens * width, per_token: width }
    }

    /// Elements a buffer of these rows must hold.
    fn extent(&self, n_head: usize, n_tokens: usize, width: usize) -> usize {
        (n_head - 1) * self.per_head + (n_tokens - 1) * self.per_token + width
    }
}

/// `dst`'s `(head, token)` rows = `src`'s, `width` elements each.
pub struct HeadsCopyCall<'a> {
    pub src: DeviceArray<'a, f32>,
    pub src_rows: HeadRows,
    pub dst: DeviceArray<'a, f32>,
    pub dst_rows: HeadRows,
    pub n_head: usize,
    pub n_tokens: usize,
    pub width: usize,
}

impl HeadsCopyCall<'_> {
    pub fn args(&self) -> Result<(HeadsCopyArgs, LaunchConfig), CudaBackendError> {
        let (h, t, w) = (self.n_head, self.n_tokens, self.width);
        if h == 0 || t == 0 || w == 0 {
            return Err(internal(format!("copying {h} heads of {t} rows of {w}")));
        }
        let (s, d) = (self.src_rows, self.dst_rows);
        let args = HeadsCopyArgs {
            src: self.src.covering(s.extent(h, t, w), "the heads' source rows")?,
            dst: self.dst.covering(d.extent(h, t, w), "the heads' destination rows")?,
            n_head: int(h, "heads")?,
            n_tokens: int(t, "tokens")?,
            width: int(w, "the head rows' width")?,
            src_head: int(s.per_head, "the source head stride")?,
            src_token: int(s.per_token, "the source row stride")?,
            dst_head: int(d.per_head, "the destination head stride")?,
            dst_token: int(d.per_token, "the destination row stride")?,
            pad: 0,
        };
        Ok((args, config((blocks(h * t * w, HEADS_COPY_THREADS as usize)?, 1), HEADS_COPY_THREADS)))
    }
}

/// The rows the latent attention reads: each head's absorbed query followed by its rotated RoPE part.
pub struct LatentQueriesCall<'a> {
    /// `[n_head][n_tokens][rank]`.
    pub absorbed: DeviceArray<'a, f32>,
    /// `[n_tokens][n_head · (nope + rope_dim)]`.
    pub q: DeviceArray<'a, f32>,
    pub cos: DeviceArray<'a, f32>,
    pub sin: DeviceArray<'a, f32>,
    /// `[n_tokens][n_head · (rank + rope_dim)]`.
    pub out: DeviceArray<'a, f32>,
    pub n_tokens: usize,
    pub n_head: usize,
    pub rank: usize,
    pub nope: usize,
    pub rope_dim: usize,
}

impl LatentQueriesCall<'_> {
    pub fn args(&self) -> Result<(LatentQueriesArgs, LaunchConfig), CudaBackendError> {
        let (n, h, half) = (self.n_tokens, self.n_head, self.rope_dim / 2);
        if !self.rope_dim.is_multiple_of(2) {
            return Err(internal(format!("RoPE over {} dimensions", self.rope_dim)));
        }
        let args = LatentQueriesArgs {
            absorbed: self.absorbed.covering(h * n * self.rank, "the absorbed queries")?,
            q: self.q.covering(n * h * (self.nope + self.rope_dim), "the projected queries")?,
            cos: self.cos.covering(n * half, "the cos table")?,
            sin: self.sin.covering(n * half, "the sin table")?,
            out: self.out.covering(n * h * (self.rank + self.rope_dim), "the attention's queries")?,
            n_tokens: int(n, "tokens")?,
            n_head: int(h, "heads")?,
            rank: int(self.rank, "kv_lora_rank")?,
            nope: int(self.nope, "the no-RoPE width")?,
            rope_dim: int(self.rope_dim, "rope_dim")?,
            pad: 0,
        };
        Ok((args, config((blocks(n, 1)?, 1), LATENT_THREADS)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_rows_cover_their_buffers_both_ways() {
        // deepseek2-lite-small: 8 heads of 64 + 32 query dims, gathered head-major for attn_k_b.
        let call = |src_len: usize, dst_len: usize| HeadsCopyCall {
            src: DeviceArray::fake(0x100, src_len),
            src_rows: HeadRows::token_major(8, 96),
            dst: DeviceArray::fake(0x9000, dst_len),
            dst_rows: HeadRows::head_major(3, 64),
            n_head: 8,
            n_tokens: 3,
            width: 64,
        };
        let (args, cfg) = call(3 * 8 * 96, 8 * 3 * 64).args().unwrap();
        assert_eq!((args.src_head, args.src_token, args.dst_head, args.dst_token), (96, 768, 192, 64));
        assert_eq!(cfg.grid_dim, (6, 1, 1));
        // The last head's row ends 32 short of the source's end (its RoPE part is not copied).
        assert!(call(3 * 8 * 96 - 33, 8 * 3 * 64).args().is_err());
        assert!(call(3 * 8 * 96 - 32, 8 * 3 * 64).args().is_ok());
        assert!(call(3 * 8 * 96, 8 * 3 * 64 - 1).args().is_err());
    }

    #[test]
    fn keys_and_queries_cover_their_rows() {
        let keys = |slots_len: usize, key_type: KvCacheType, rank: usize| LatentKeysCall {
            kv: DeviceArray::fake(0, 2 * 160),
            norm: DeviceArray::fake(0, 128),
            cos: DeviceArray::fake(0, 2 * 16),
            sin: DeviceArray::fake(0, 2 * 16),
            positions: DeviceArray::fake(0, 2),
            slots: DeviceArray::fake(0, 2),
            keys: DeviceArray::fake(0x4000, slots_len),
            key_type,
            n_slots: 64,
            n_tokens: 2,
            rank,
            rope_dim: 32,
            eps: 1e-6,
        };
        assert_eq!(keys(64 * 160, KvCacheType::F16, 128).args().unwrap().0.k_cache, 0x4000);
        assert!(keys(64 * 160 - 1, KvCacheType::F16, 128).args().is_err(), "a cache short of one slot's row");
        // Rows of 5 blocks: 17 words each in q8_0, 9 in q4_0; rows of 120 + 32 are not whole blocks.
        let (q8, _) = keys(64 * 5 * 17, KvCacheType::Q8_0, 128).args().unwrap();
        assert_eq!(q8.k_type, 1);
        assert!(keys(64 * 5 * 17 - 1, KvCacheType::Q8_0, 128).args().is_err());
        assert_eq!(keys(64 * 5 * 9, KvCacheType::Q4_0, 128).args().unwrap().0.k_type, 2);
        assert!(keys(64 * 152, KvCacheType::Q4_0, 120).args().is_err());
        assert!(keys(64 * 152, KvCacheType::F16, 120).args().is_ok());
        assert!(keys(64 * 608, KvCacheType::F16, 576).args().is_err(), "wider than the kernel's row");
        let queries = LatentQueriesCall {
            absorbed: DeviceArray::fake(0, 8 * 2 * 128),
            q: DeviceArray::fake(0, 2 * 8 * 96),
            cos: DeviceArray::fake(0, 2 * 16),
            sin: DeviceArray::fake(0, 2 * 16),
            out: DeviceArray::fake(0, 2 * 8 * 160),
            n_tokens: 2,
            n_head: 8,
            rank: 128,
            nope: 64,
            rope_dim: 32,
        };
        assert_eq!(queries.args().unwrap().1.grid_dim, (2, 1, 1));
        assert!(LatentQueriesCall { rope_dim: 31, ..queries }.args().is_err());
    }
}
