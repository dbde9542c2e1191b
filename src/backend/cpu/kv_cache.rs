//! KV cache storage of the CPU backend: keys and values of every layer, in fixed-size blocks.
//!
//! f16 by default: the cache is read in full for every decoded token, so halving its bytes halves the attention's
//! memory traffic, and a 4096-token context of SmolLM2-135M takes 94 MB instead of 189 MB (the product's RSS
//! budget is 250 MB with the 98 MB of weights). f16 keeps 11 bits of mantissa, well within the error the 8-bit
//! activation quantization already admits; llama.cpp's default cache type is f16 too. The precise path
//! (`Precision::Float32`) stores f32 instead, because there the f16 rounding of keys and values would dominate
//! its error against a float64 reference (measured: median 7e-4, max 5e-3 relative, against 2e-6 with f32).
//!
//! Layout of each layer's keys (and values): `[num_blocks][block_size][kv_dim]`, so the keys of one position are
//! contiguous (one write per new token) and a block is one contiguous range. Which blocks belong to which sequence
//! is the engine's business (its block tables); this type only stores.
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

/// The element type of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvPrecision {
    F16,
    F32,
}

enum Storage {
    /// f16 bit patterns (a zeroed `Vec<u16>` is allocated lazily; `vec![f16::ZERO; n]` would write every element).
    F16 {
        keys: Vec<Vec<u16>>,
        values: Vec<Vec<u16>>,
    },
    F32 {
        keys: Vec<Vec<f32>>,
        values: Vec<Vec<f32>>,
    },
}

/// Which block pool a layer's keys and values live in (and so which of a sequence's tables addresses them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvPool {
    /// `SeqChunk::block_table`: every layer's pool unless the layer is in the window pool.
    Global,
    /// `SeqChunk::window_table`: the sliding-window layers' pool.
    Window,
}

/// One layer's keys and values, each `[num_blocks * block_size][kv_dim]` flattened (its pool's `num_blocks`).
#[derive(Clone, Copy)]
pub enum KvLayer<'a> {
    F16 { keys: &'a [f16], values: &'a [f16] },
    F32 { keys: &'a [f32], values: &'a [f32] },
}

/// Keys and values of all layers.
pub struct CpuKvCache {
    kv_dim: usize,
    block_size: usize,
    num_blocks: usize,
    /// Blocks of the window pool (0 when no layer is in it).
    window_blocks: usize,
    /// `[n_layer]`: each layer's pool.
    pools: Vec<KvPool>,
    /// Values have planes of their own (false: the keys' plane serves as the values', latent attention).
    values: bool,
    storage: Storage,
}

impl CpuKvCache {
    /// Allocates the cache (lazily committed, see the module documentation): one layer per entry of `pools`, with
    /// `num_blocks` blocks for those in the global pool and `window_blocks` for those in the window pool; keys only
    /// when `values` is false (latent attention).
    ///
    /// # Panics
    /// When the size overflows `usize` (callers validate sizes from configuration first).
    pub fn new(
        pools: &[KvPool],
        kv_dim: usize,
        block_size: usize,
        num_blocks: usize,
        window_blocks: usize,
        precision: KvPrecision,
        values: bool,
    ) -> Self {
        let elements = |blocks: usize| blocks.checked_mul(block_size).and_then(|n| n.checked_mul(kv_dim));
        let sizes: Vec<usize> = pools
            .iter()
            .map(|pool| match pool {
                KvPool::Global => elements(num_blocks),
                KvPool::Window => elements(window_blocks),
            })
            .collect::<Option<_>>()
            .expect("KV size");
        let value_size = |n: usize| if values { n } else { 0 };
        let storage = match precision {
            KvPrecision::F16 => Storage::F16 {
                keys: sizes.iter().map(|&n| vec![0u16; n]).collect(),
                values: sizes.iter().map(|&n| vec![0u16; value_size(n)]).collect(),
            },
            KvPrecision::F32 => Storage::F32 {
                keys: sizes.iter().map(|&n| vec![0f32; n]).collect(),
                values: sizes.iter().map(|&n| vec![0f32; value_size(n)]).collect(),
            },
        };
        let window_blocks = if pools.contains(&KvPool::Window) { window_blocks } else { 0 };
        CpuKvCache { kv_dim, block_size, num_blocks, window_blocks, pools: pools.to_vec(), values, storage }
    }

    /// Bytes of f16 keys (and values, when `values`) for `positions` positions of a model with these dimensions.
    pub fn bytes_for(n_layer: usize, kv_dim: usize, positions: usize, values: bool) -> usize {
        (1 + usize::from(values)) * n_layer * kv_dim * positions * std::mem::size_of::<f16>()
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
        match &self.storage {
            Storage::F16 { keys, values } => keys.iter().chain(values).map(|l| l.len() * 2).sum(),
            Storage::F32 { keys, values } => keys.iter().chain(values).map(|l| l.len() * 4).sum(),
        }
    }

    /// The row index of position `pos` of a sequence with `block_table` (validated by the batch check).
    #[inline]
    pub fn slot(&self, block_table: &[u32], pos: usize) -> usize {
        block_table[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }

    /// Keys and values of `layer` (without value planes, the keys' plane as both).
    pub fn layer(&self, layer: usize) -> KvLayer<'_> {
        match &self.storage {
            Storage::F16 { keys, values } => {
                let keys: &[f16] = bytemuck::cast_slice(&keys[layer]);
                let values = if self.values { bytemuck::cast_slice(&values[layer]) } else { keys };
                KvLayer::F16 { keys, values }
            }
            Storage::F32 { keys, values } => {
                let values = if self.values { &values[layer] } else { &keys[layer] };
                KvLayer::F32 { keys: &keys[layer], values }
            }
        }
    }

    /// Stores the key and value rows (`kv_dim` each) of one position; `value` is empty in a cache without value
    /// planes.
    ///
    /// # Panics
    /// When `value` is not empty in a cache without value planes.
    pub fn store(&mut self, layer: usize, slot: usize, key: &[f32], value: &[f32]) {
        assert!(self.values || value.is_empty(), "a keys-only cache stores no values");
        let range = slot * self.kv_dim..(slot + 1) * self.kv_dim;
        let values_range = if self.values { range.clone() } else { 0..0 };
        match &mut self.storage {
            Storage::F16 { keys, values } => {
                for (dst, &x) in keys[layer][range].iter_mut().zip(key) {
                    *dst = f16::from_f32(x).to_bits();
                }
                for (dst, &x) in values[layer][values_range].iter_mut().zip(value) {
                    *dst = f16::from_f32(x).to_bits();
                }
            }
            Storage::F32 { keys, values } => {
                keys[layer][range].copy_from_slice(key);
                values[layer][values_range].copy_from_slice(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_map_through_the_block_table() {
        for precision in [KvPrecision::F16, KvPrecision::F32] {
            let mut c = CpuKvCache::new(&[KvPool::Global; 2], 4, 16, 8, 0, precision, true);
            let table = [5u32, 2];
            assert_eq!(c.slot(&table, 0), 80);
            assert_eq!(c.slot(&table, 17), 33);
            c.store(1, 33, &[1.0, 2.0, 3.0, 4.0], &[-1.0; 4]);
            let (k3, v0, other) = match (c.layer(1), c.layer(0)) {
                (KvLayer::F16 { keys, values }, KvLayer::F16 { keys: k0, .. }) => {
                    (keys[33 * 4 + 2].to_f32(), values[33 * 4].to_f32(), k0[33 * 4 + 2].to_f32())
                }
                (KvLayer::F32 { keys, values }, KvLayer::F32 { keys: k0, .. }) => {
                    (keys[33 * 4 + 2], values[33 * 4], k0[33 * 4 + 2])
                }
                _ => panic!("precision changed"),
            };
            assert_eq!((k3, v0, other), (3.0, -1.0, 0.0));
        }
        assert_eq!(CpuKvCache::bytes_for(30, 192, 4096, true), 94_371_840);
        assert_eq!(CpuKvCache::bytes_for(30, 192, 4096, false), 47_185_920);
    }

    #[test]
    fn window_layers_get_the_window_pools_blocks() {
        let pools = [KvPool::Window, KvPool::Global, KvPool::Window];
        let c = CpuKvCache::new(&pools, 4, 16, 8, 3, KvPrecision::F16, true);
        assert_eq!(
            (c.num_blocks(), c.window_blocks(), c.pool_of(1), c.pool_of(2)),
            (8, Some(3), KvPool::Global, KvPool::Window)
        );
        let len = |layer| match c.layer(layer) {
            KvLayer::F16 { keys, values } => (keys.len(), values.len()),
            KvLayer::F32 { .. } => panic!("precision changed"),
        };
        assert_eq!((len(0), len(1), len(2)), ((3 * 16 * 4, 3 * 16 * 4), (8 * 16 * 4, 8 * 16 * 4), (192, 192)));
        assert_eq!(c.allocated_bytes(), 2 * 2 * (3 + 8 + 3) * 16 * 4);
        let global_only = CpuKvCache::new(&[KvPool::Global; 2], 4, 16, 8, 3, KvPrecision::F32, true);
        assert_eq!((global_only.window_blocks(), global_only.allocated_bytes()), (None, 2 * 4 * 2 * 8 * 16 * 4));
    }

    #[test]
    fn a_keys_only_cache_hands_out_its_keys_as_the_values() {
        let mut c = CpuKvCache::new(&[KvPool::Global], 4, 16, 2, 0, KvPrecision::F16, false);
        c.store(0, 3, &[1.0, 2.0, 3.0, 4.0], &[]);
        match c.layer(0) {
            KvLayer::F16 { keys, values } => {
                assert!(std::ptr::eq(keys, values));
                assert_eq!(values[3 * 4 + 1].to_f32(), 2.0);
            }
            KvLayer::F32 { .. } => panic!("precision changed"),
        }
        assert_eq!(c.allocated_bytes(), 2 * 16 * 4 * 2, "keys only");
    }
}
