//! KV cache storage of the CPU backend: keys and values of every layer in f16, in fixed-size blocks.
//!
//! f16 rather than f32: the cache is read in full for every decoded token, so halving its bytes halves the
//! attention's memory traffic, and a 4096-token context of SmolLM2-135M takes 94 MB instead of 189 MB (the
//! product's RSS budget is 250 MB with the 98 MB of weights). f16 keeps 11 bits of mantissa, far below the
//! error the 8-bit activation quantization already admits; llama.cpp's default cache type is f16 too.
//!
//! Layout of each layer's keys (and values): `[num_blocks][block_size][kv_dim]`, so the keys of one position
//! are contiguous (one write per new token) and a block is one contiguous range. Which blocks belong to which
//! sequence is the engine's business (its block tables); this type only stores.

use half::f16;

/// Keys and values of all layers.
pub struct CpuKvCache {
    n_layer: usize,
    kv_dim: usize,
    block_size: usize,
    num_blocks: usize,
    /// Per layer, `[num_blocks * block_size * kv_dim]`.
    keys: Vec<Vec<f16>>,
    /// Per layer, `[num_blocks * block_size * kv_dim]`.
    values: Vec<Vec<f16>>,
}

impl CpuKvCache {
    /// Allocates the cache. Pages are zeroed lazily by the OS, so memory is committed as positions are written.
    ///
    /// # Panics
    /// When the size overflows `usize` (callers validate sizes from configuration first).
    pub fn new(n_layer: usize, kv_dim: usize, block_size: usize, num_blocks: usize) -> Self {
        let per_layer = num_blocks.checked_mul(block_size).and_then(|n| n.checked_mul(kv_dim)).expect("KV size");
        CpuKvCache {
            n_layer,
            kv_dim,
            block_size,
            num_blocks,
            keys: (0..n_layer).map(|_| vec![f16::ZERO; per_layer]).collect(),
            values: (0..n_layer).map(|_| vec![f16::ZERO; per_layer]).collect(),
        }
    }

    /// Bytes of keys and values for `positions` positions of a model with these dimensions.
    pub fn bytes_for(n_layer: usize, kv_dim: usize, positions: usize) -> usize {
        2 * n_layer * kv_dim * positions * std::mem::size_of::<f16>()
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    pub fn n_layer(&self) -> usize {
        self.n_layer
    }

    /// The row index of position `pos` of a sequence with `block_table` (validated by the batch check).
    #[inline]
    pub fn slot(&self, block_table: &[u32], pos: usize) -> usize {
        block_table[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }

    /// Keys and values of `layer`, each `[num_blocks * block_size][kv_dim]` flattened.
    pub fn layer(&self, layer: usize) -> (&[f16], &[f16]) {
        (&self.keys[layer], &self.values[layer])
    }

    /// Stores the key and value rows (`kv_dim` each) of one position.
    pub fn store(&mut self, layer: usize, slot: usize, key: &[f32], value: &[f32]) {
        let range = slot * self.kv_dim..(slot + 1) * self.kv_dim;
        for (dst, &x) in self.keys[layer][range.clone()].iter_mut().zip(key) {
            *dst = f16::from_f32(x);
        }
        for (dst, &x) in self.values[layer][range].iter_mut().zip(value) {
            *dst = f16::from_f32(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_map_through_the_block_table() {
        let mut c = CpuKvCache::new(2, 4, 16, 8);
        let table = [5u32, 2];
        assert_eq!(c.slot(&table, 0), 80);
        assert_eq!(c.slot(&table, 17), 33);
        c.store(1, 33, &[1.0, 2.0, 3.0, 4.0], &[-1.0; 4]);
        let (k, v) = c.layer(1);
        assert_eq!(k[33 * 4 + 2].to_f32(), 3.0);
        assert_eq!(v[33 * 4].to_f32(), -1.0);
        assert_eq!(c.layer(0).0[33 * 4 + 2].to_f32(), 0.0);
        assert_eq!(CpuKvCache::bytes_for(30, 192, 4096), 94_371_840);
    }
}
