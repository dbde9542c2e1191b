//! KV cache storage of the CPU backend: keys and values of every layer, in fixed-size blocks.
//!
//! f16 by default (`q8_0` and `q4_0` blocks per plane when the engine asks, `backend::KvCacheType`): the cache is
//! read in full for every decoded token, so halving its bytes halves the attention's
//! memory traffic, and a 4096-token context of SmolLM2-135M takes 94 MB instead of 189 MB (the product's RSS
//! budget is 250 MB with the 98 MB of weights). f16 keeps 11 bits of mantissa, well within the error the 8-bit
//! activation quantization already admits; llama.cpp's default cache type is f16 too. The precise path
//! (`Precision::Float32`) stores f32 instead, because there the f16 rounding of keys and values would dominate
//! its error against a float64 reference (measured: median 7e-4, max 5e-3 relative, against 2e-6 with f32).
//!
//! Layout of each layer's keys (and values): `[num_blocks][n_head_kv][block_size][head_width]`, so a block is one
//! contiguous range and within it each KV head's slots are together. Attention reads one KV head at a time (all
//! its query heads at once): with a position's heads together instead (`[slot][kv_dim]`, the CUDA cache's order) it
//! read a few cache lines out of every row, a pattern the hardware prefetchers follow too late. Measured at Llama
//! 3.2 1B's shapes (8 KV heads of 64), depth 4096, 2 threads: decode 29-37 → 46 tokens/s. Which blocks belong to
//! which sequence is the engine's business (its block tables); this type only stores.
//!
//! The storage is allocated zeroed (`calloc`-style), so the OS commits pages only as positions are written: a
//! large cache costs resident memory in proportion to its use.
//!
//! A model with latent attention (`LlamaConfig::latent`) stores keys only: its values are the first elements of each
//! key row (llama.cpp stores that cache the same way, K without V), and [`CpuKvCache::layer`] hands out the keys'
//! plane as the values' too.
//!
//! Two pools of blocks, when the model has sliding-window layers and the engine asked for it: the other layers'
//! blocks (the global pool, `block_table`) and the windowed layers' own, smaller pool (`window_table`), which only
//! needs room for the positions still inside some query's window. A windowed layer in the global pool would
//! store every position of the context for nothing.

use half::f16;

use super::kernels::kv_quant::{quantize_kv_row, KvBlock};
use crate::backend::KvCacheType;
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ8_0, QK};

/// The element type of one plane (keys or values) of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvElementType {
    F16,
    /// The precise path's.
    F32,
    Q8_0,
    Q4_0,
}

impl From<KvCacheType> for KvElementType {
    fn from(t: KvCacheType) -> Self {
        match t {
            KvCacheType::F16 => KvElementType::F16,
            KvCacheType::Q8_0 => KvElementType::Q8_0,
            KvCacheType::Q4_0 => KvElementType::Q4_0,
        }
    }
}

/// One plane of every layer: `[n_layer][elements]`, as 16-bit words (f16 bits, or the blocks' bytes: both block
/// types are whole numbers of words and 2-aligned), or f32. A zeroed `Vec<u16>` is allocated lazily (`calloc`);
/// `vec![block; n]` would write every element.
enum Plane {
    Words { ty: KvElementType, layers: Vec<Vec<u16>> },
    F32(Vec<Vec<f32>>),
}

impl Plane {
    /// A plane of `ty` with `elements[l]` elements for layer `l`.
    fn new(ty: KvElementType, elements: &[usize]) -> Self {
        let words = |n: usize| match ty {
            KvElementType::F16 => n,
            KvElementType::Q8_0 => n / QK * (std::mem::size_of::<BlockQ8_0>() / 2),
            KvElementType::Q4_0 => n / QK * (std::mem::size_of::<BlockQ4_0>() / 2),
            KvElementType::F32 => unreachable!("f32 planes hold floats"),
        };
        match ty {
            KvElementType::F32 => Plane::F32(elements.iter().map(|&n| vec![0f32; n]).collect()),
            _ => Plane::Words { ty, layers: elements.iter().map(|&n| vec![0u16; words(n)]).collect() },
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Plane::Words { layers, .. } => layers.iter().map(|l| l.len() * 2).sum(),
            Plane::F32(layers) => layers.iter().map(|l| l.len() * 4).sum(),
        }
    }

    fn layer(&self, layer: usize) -> KvPlane<'_> {
        match self {
            Plane::Words { ty: KvElementType::F16, layers } => KvPlane::F16(bytemuck::cast_slice(&layers[layer])),
            Plane::Words { ty: KvElementType::Q8_0, layers } => KvPlane::Q8_0(bytemuck::cast_slice(&layers[layer])),
            Plane::Words { ty: KvElementType::Q4_0, layers } => KvPlane::Q4_0(bytemuck::cast_slice(&layers[layer])),
            Plane::Words { ty: KvElementType::F32, .. } => unreachable!("f32 planes hold floats"),
            Plane::F32(layers) => KvPlane::F32(&layers[layer]),
        }
    }

    /// Stores `head`, one KV head's elements of a position, at element `at` of `layer`.
    fn store(&mut self, layer: usize, at: usize, head: &[f32]) {
        let n = head.len();
        match self {
            Plane::Words { ty: KvElementType::F16, layers } => {
                for (dst, &x) in layers[layer][at..][..n].iter_mut().zip(head) {
                    *dst = f16::from_f32(x).to_bits();
                }
            }
            Plane::Words { ty: KvElementType::Q8_0, layers } => store_blocks::<BlockQ8_0>(&mut layers[layer], at, head),
            Plane::Words { ty: KvElementType::Q4_0, layers } => store_blocks::<BlockQ4_0>(&mut layers[layer], at, head),
            Plane::Words { ty: KvElementType::F32, .. } => unreachable!("f32 planes hold floats"),
            Plane::F32(layers) => layers[layer][at..][..n].copy_from_slice(head),
        }
    }
}

/// Quantizes `head` into the blocks from element `at` (a multiple of 32) of a layer's words.
fn store_blocks<B: KvBlock>(words: &mut [u16], at: usize, head: &[f32]) {
    let blocks: &mut [B] = bytemuck::cast_slice_mut(words);
    quantize_kv_row(head, &mut blocks[at / QK..][..head.len() / QK]);
}

/// Which block pool a layer's keys and values live in (and so which of a sequence's tables addresses them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvPool {
    /// `SeqChunk::block_table`: every layer's pool unless the layer is in the window pool.
    Global,
    /// `SeqChunk::window_table`: the sliding-window layers' pool.
    Window,
}

/// One plane of one layer, `[num_blocks][n_head_kv][block_size][head_width]` flattened (its pool's `num_blocks`),
/// in elements or in blocks of 32.
#[derive(Clone, Copy)]
pub enum KvPlane<'a> {
    F16(&'a [f16]),
    F32(&'a [f32]),
    Q8_0(&'a [BlockQ8_0]),
    Q4_0(&'a [BlockQ4_0]),
}

/// One layer's keys and values.
#[derive(Clone, Copy)]
pub struct KvLayer<'a> {
    pub keys: KvPlane<'a>,
    pub values: KvPlane<'a>,
}

/// Keys and values of all layers.
pub struct CpuKvCache {
    kv_dim: usize,
    /// KV heads of a row (`kv_dim` is `heads` heads of `kv_dim / heads`).
    heads: usize,
    block_size: usize,
    num_blocks: usize,
    /// Blocks of the window pool (0 when no layer is in it).
    window_blocks: usize,
    /// `[n_layer]`: each layer's pool.
    pools: Vec<KvPool>,
    keys: Plane,
    /// `None`: the keys' plane serves as the values' (latent attention).
    values: Option<Plane>,
}

impl CpuKvCache {
    /// Allocates the cache (lazily committed, see the module documentation): one layer per entry of `pools`, with
    /// `num_blocks` blocks for those in the global pool and `window_blocks` for those in the window pool, rows of
    /// `heads` KV heads of `head_width` elements; keys of `types.0` and values of `types.1`, or keys only when
    /// `values` is false (latent attention). Block types need `head_width` a multiple of 32 (the caller checks the
    /// heads).
    ///
    /// # Panics
    /// When the size overflows `usize` (callers validate sizes from configuration first).
    pub fn new(
        pools: &[KvPool],
        (heads, head_width): (usize, usize),
        block_size: usize,
        num_blocks: usize,
        window_blocks: usize,
        types: (KvElementType, KvElementType),
        values: bool,
    ) -> Self {
        let kv_dim = heads.checked_mul(head_width).expect("KV size");
        let elements = |blocks: usize| blocks.checked_mul(block_size).and_then(|n| n.checked_mul(kv_dim));
        let sizes: Vec<usize> = pools
            .iter()
            .map(|pool| match pool {
                KvPool::Global => elements(num_blocks),
                KvPool::Window => elements(window_blocks),
            })
            .collect::<Option<_>>()
            .expect("KV size");
        let window_blocks = if pools.contains(&KvPool::Window) { window_blocks } else { 0 };
        CpuKvCache {
            kv_dim,
            heads,
            block_size,
            num_blocks,
            window_blocks,
            pools: pools.to_vec(),
            keys: Plane::new(types.0, &sizes),
            values: values.then(|| Plane::new(types.1, &sizes)),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks of the global pool.
    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    /// Blocks of the window pool, when some layer is in it.
    pub fn window_blocks(&self) -> Option<usize> {
        (self.window_blocks > 0).then_some(self.window_blocks)
    }

    /// The pool of `layer`.
    pub fn pool_of(&self, layer: usize) -> KvPool {
        self.pools[layer]
    }

    /// Bytes allocated for keys and values, every layer together (resident only as far as written).
    pub fn allocated_bytes(&self) -> usize {
        self.keys.bytes() + self.values.as_ref().map_or(0, Plane::bytes)
    }

    /// The row index of position `pos` of a sequence with `block_table` (validated by the batch check).
    #[inline]
    pub fn slot(&self, block_table: &[u32], pos: usize) -> usize {
        block_table[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }

    /// Keys and values of `layer` (without value planes, the keys' plane as both).
    pub fn layer(&self, layer: usize) -> KvLayer<'_> {
        let keys = self.keys.layer(layer);
        KvLayer { keys, values: self.values.as_ref().map_or(keys, |v| v.layer(layer)) }
    }

    /// Stores the key and value rows (`kv_dim` each) of one position, quantized where the plane's type is a block
    /// type; `value` is empty in a cache without value planes.
    ///
    /// # Panics
    /// When `value` is not empty in a cache without value planes.
    pub fn store(&mut self, layer: usize, slot: usize, key: &[f32], value: &[f32]) {
        assert!(self.values.is_some() || value.is_empty(), "a keys-only cache stores no values");
        let width = self.kv_dim / self.heads;
        let (block, from) = (slot / self.block_size, slot % self.block_size);
        for head in 0..self.heads {
            let (at, _) = self.head_rows(block, from, head);
            self.keys.store(layer, at, &key[head * width..][..width]);
            if let Some(values) = &mut self.values {
                values.store(layer, at, &value[head * width..][..width]);
            }
        }
    }

    /// Where KV head `head`'s elements of slot `from` of block `block` start in a layer's plane, and the elements
    /// from one slot's to the next's: a block holds each head's slots together (`[block][head][slot][width]`), so
    /// that attention, which reads one KV head at a time, streams contiguous memory.
    #[inline]
    pub fn head_rows(&self, block: usize, from: usize, head: usize) -> (usize, usize) {
        let width = self.kv_dim / self.heads;
        (((block * self.heads + head) * self.block_size + from) * width, width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F16: (KvElementType, KvElementType) = (KvElementType::F16, KvElementType::F16);
    const F32: (KvElementType, KvElementType) = (KvElementType::F32, KvElementType::F32);

    /// Element `i` of a plane, dequantized.
    fn element(plane: KvPlane<'_>, i: usize) -> f32 {
        match plane {
            KvPlane::F16(x) => x[i].to_f32(),
            KvPlane::F32(x) => x[i],
            KvPlane::Q8_0(b) => b[i / QK].scale() * f32::from(b[i / QK].value(i % QK)),
            KvPlane::Q4_0(b) => b[i / QK].scale() * f32::from(b[i / QK].value(i % QK)),
        }
    }

    #[test]
    fn positions_map_through_the_block_table() {
        for types in [F16, F32] {
            let mut c = CpuKvCache::new(&[KvPool::Global; 2], (1, 4), 16, 8, 0, types, true);
            let table = [5u32, 2];
            assert_eq!(c.slot(&table, 0), 80);
            assert_eq!(c.slot(&table, 17), 33);
            c.store(1, 33, &[1.0, 2.0, 3.0, 4.0], &[-1.0; 4]);
            let (l1, l0) = (c.layer(1), c.layer(0));
            let got = (element(l1.keys, 33 * 4 + 2), element(l1.values, 33 * 4), element(l0.keys, 33 * 4 + 2));
            assert_eq!(got, (3.0, -1.0, 0.0));
        }
    }

    #[test]
    fn a_block_holds_each_heads_slots_together() {
        // 2 heads of 4, blocks of 16: head h of slot s of block b starts at element ((b·2 + h)·16 + s)·4.
        let mut c = CpuKvCache::new(&[KvPool::Global], (2, 4), 16, 4, 0, F16, true);
        c.store(0, 16 * 2 + 5, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[-1.0; 8]);
        let layer = c.layer(0);
        let (head0, head1) = (((2 * 2) * 16 + 5) * 4, ((2 * 2 + 1) * 16 + 5) * 4);
        assert_eq!(c.head_rows(2, 5, 1), (head1, 4));
        let got: Vec<f32> =
            (0..4).flat_map(|i| [element(layer.keys, head0 + i), element(layer.keys, head1 + i)]).collect();
        assert_eq!(got, [1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 4.0, 8.0]);
        assert_eq!(element(layer.values, head1 + 3), -1.0);
    }

    #[test]
    fn block_types_store_quantized_rows_of_their_own_sizes() {
        let row: Vec<f32> = (0..64).map(|i| i as f32 / 8.0 - 4.0).collect();
        let types = (KvElementType::Q8_0, KvElementType::Q4_0);
        let mut c = CpuKvCache::new(&[KvPool::Global], (1, 64), 16, 2, 0, types, true);
        assert_eq!(c.allocated_bytes(), 2 * 16 * 2 * (34 + 18), "32 slots × 2 blocks of each type");
        c.store(0, 17, &row, &row);
        let layer = c.layer(0);
        for (i, &x) in row.iter().enumerate() {
            let (k, v) = (element(layer.keys, 17 * 64 + i), element(layer.values, 17 * 64 + i));
            assert!((k - x).abs() <= 4.0 / 127.0, "q8_0 key {i}: {k} for {x}");
            assert!((v - x).abs() <= 4.0 / 8.0, "q4_0 value {i}: {v} for {x}");
        }
        assert_eq!(element(layer.keys, 16 * 64 + 5), 0.0, "other slots untouched");
    }

    #[test]
    fn window_layers_get_the_window_pools_blocks() {
        let pools = [KvPool::Window, KvPool::Global, KvPool::Window];
        let c = CpuKvCache::new(&pools, (1, 4), 16, 8, 3, F16, true);
        assert_eq!(
            (c.num_blocks(), c.window_blocks(), c.pool_of(1), c.pool_of(2)),
            (8, Some(3), KvPool::Global, KvPool::Window)
        );
        let len = |layer| match c.layer(layer) {
            KvLayer { keys: KvPlane::F16(keys), values: KvPlane::F16(values) } => (keys.len(), values.len()),
            _ => panic!("type changed"),
        };
        assert_eq!((len(0), len(1), len(2)), ((3 * 16 * 4, 3 * 16 * 4), (8 * 16 * 4, 8 * 16 * 4), (192, 192)));
        assert_eq!(c.allocated_bytes(), 2 * 2 * (3 + 8 + 3) * 16 * 4);
        let global_only = CpuKvCache::new(&[KvPool::Global; 2], (1, 4), 16, 8, 3, F32, true);
        assert_eq!((global_only.window_blocks(), global_only.allocated_bytes()), (None, 2 * 4 * 2 * 8 * 16 * 4));
    }

    #[test]
    fn a_keys_only_cache_hands_out_its_keys_as_the_values() {
        let mut c = CpuKvCache::new(&[KvPool::Global], (1, 4), 16, 2, 0, F16, false);
        c.store(0, 3, &[1.0, 2.0, 3.0, 4.0], &[]);
        match c.layer(0) {
            KvLayer { keys: KvPlane::F16(keys), values: KvPlane::F16(values) } => {
                assert!(std::ptr::eq(keys, values));
                assert_eq!(values[3 * 4 + 1].to_f32(), 2.0);
            }
            _ => panic!("type changed"),
        }
        assert_eq!(c.allocated_bytes(), 2 * 16 * 4 * 2, "keys only");
    }
}
