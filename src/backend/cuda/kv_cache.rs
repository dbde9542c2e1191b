//! The KV cache in device memory: keys and values of every layer in f16, the CPU backend's layout
//! (`[num_blocks][block_size][kv_dim]` per layer, see `cpu/kv_cache.rs`), so that the engine's block tables mean the
//! same on both. One allocation each for keys and values, layer after layer; a keys-only cache (DeepSeek's latent
//! attention, whose values are each key row's first `kv_lora_rank` elements, as `cpu/kv_cache.rs` holds them) has
//! no values' allocation, and its layers hand out the keys as the values.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::calls::LayerCache;
use super::device_array::DeviceArray;
use super::error::CudaBackendError;

pub struct DeviceKvCache {
    n_layer: usize,
    kv_dim: usize,
    block_size: usize,
    num_blocks: usize,
    /// `[n_layer][num_blocks · block_size][kv_dim]` f16 bits.
    keys: CudaSlice<u16>,
    /// `[n_layer][num_blocks · block_size][kv_dim]` f16 bits; `None` for a keys-only cache.
    values: Option<CudaSlice<u16>>,
}

impl DeviceKvCache {
    /// Allocates a zeroed cache (`keys_only`: no values).
    pub fn new(
        stream: &Arc<CudaStream>,
        n_layer: usize,
        kv_dim: usize,
        block_size: usize,
        num_blocks: usize,
        keys_only: bool,
    ) -> Result<Self, CudaBackendError> {
        let elements = Self::elements(n_layer, kv_dim, block_size * num_blocks).ok_or_else(|| {
            CudaBackendError::Options(format!("a KV cache of {num_blocks} blocks of {block_size} overflows"))
        })?;
        let alloc = CudaBackendError::driver("allocating the KV cache");
        Ok(DeviceKvCache {
            n_layer,
            kv_dim,
            block_size,
            num_blocks,
            keys: stream.alloc_zeros(elements).map_err(alloc)?,
            values: match keys_only {
                true => None,
                false => {
                    Some(stream.alloc_zeros(elements).map_err(CudaBackendError::driver("allocating the KV cache"))?)
                }
            },
        })
    }

    /// f16 elements of keys (or of values) for `slots` positions of every layer, if that fits in `usize`.
    fn elements(n_layer: usize, kv_dim: usize, slots: usize) -> Option<usize> {
        n_layer.checked_mul(slots)?.checked_mul(kv_dim)
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    /// The keys and values of `layer` (of a keys-only cache: the keys twice).
    pub fn layer<'a>(&'a self, layer: usize, stream: &CudaStream) -> Result<LayerCache<'a>, CudaBackendError> {
        if layer >= self.n_layer {
            return Err(CudaBackendError::Internal(format!("layer {layer} of {}", self.n_layer)));
        }
        let slots = self.block_size * self.num_blocks;
        let range = layer * slots * self.kv_dim..(layer + 1) * slots * self.kv_dim;
        let keys = DeviceArray::new(&self.keys, stream).sub(range.clone())?;
        let values = match &self.values {
            Some(values) => DeviceArray::new(values, stream).sub(range)?,
            None => keys,
        };
        Ok(LayerCache { keys, values, slots })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_that_overflow_are_caught() {
        assert_eq!(DeviceKvCache::elements(30, 192, 16 * 1024), Some(30 * 192 * 16 * 1024));
        assert_eq!(DeviceKvCache::elements(usize::MAX / 2, 192, 2), None);
    }
}
