//! The KV cache in device memory: keys and values of every layer, each plane of its `KvCacheType` (f16, or ggml's
//! q8_0 / q4_0 blocks), in the CPU backend's layout (`[num_blocks][block_size][row]` per layer, see
//! `cpu/kv_cache.rs`, a row of `kv_dim` elements in the plane's type, as the bytes `KvCacheType::bytes` counts), so
//! that the engine's block tables mean the same on both and a cache holds the same bytes for the same rows
//! (`kernels/kv_cache.cuh` stores and reads them). One allocation each for keys and values, layer after layer, as
//! 16-bit words (every type's rows are whole words: one per f16 element, 17 per q8_0 block, 9 per q4_0 block); a
//! keys-only cache (DeepSeek's latent attention, whose values are each key row's first `kv_lora_rank` elements, as
//! `cpu/kv_cache.rs` holds them) has no values' allocation, and its layers hand out the keys as the values, of the
//! keys' type (the value type is ignored, as on the CPU).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::calls::LayerCache;
use super::device_array::DeviceArray;
use super::error::CudaBackendError;
use crate::backend::{KvCacheType, KvCacheTypes};

pub struct DeviceKvCache {
    n_layer: usize,
    kv_dim: usize,
    block_size: usize,
    num_blocks: usize,
    /// The planes' types; a keys-only cache's values are its keys, of the keys' type.
    types: KvCacheTypes,
    /// `[n_layer][num_blocks · block_size][row_words(types.keys, kv_dim)]`.
    keys: CudaSlice<u16>,
    /// `[n_layer][num_blocks · block_size][row_words(types.values, kv_dim)]`; `None` for a keys-only cache.
    values: Option<CudaSlice<u16>>,
}

/// 16-bit words of a row of `width` elements of `ty` (`width` a multiple of 32 for the block types, which the
/// backend's option check guarantees).
pub fn row_words(ty: KvCacheType, width: usize) -> usize {
    ty.bytes(width) / 2
}

/// The type's number in the kernels (`KV_*` of kv_cache.cuh).
pub fn kv_type_code(ty: KvCacheType) -> i32 {
    match ty {
        KvCacheType::F16 => 0,
        KvCacheType::Q8_0 => 1,
        KvCacheType::Q4_0 => 2,
    }
}

/// The types a cache of `types` holds: a keys-only cache (`keys_only`) has no values of its own, its keys serve
/// as them, so the value type is the keys'.
pub fn effective_types(types: KvCacheTypes, keys_only: bool) -> KvCacheTypes {
    match keys_only {
        true => KvCacheTypes { keys: types.keys, values: types.keys },
        false => types,
    }
}

impl DeviceKvCache {
    /// Allocates a zeroed cache of `types` (`keys_only`: no values; their type is then the keys').
    pub fn new(
        stream: &Arc<CudaStream>,
        n_layer: usize,
        kv_dim: usize,
        block_size: usize,
        num_blocks: usize,
        types: KvCacheTypes,
        keys_only: bool,
    ) -> Result<Self, CudaBackendError> {
        let types = effective_types(types, keys_only);
        let slots = block_size * num_blocks;
        let words = |ty: KvCacheType| {
            Self::words(n_layer, row_words(ty, kv_dim), slots).ok_or_else(|| {
                CudaBackendError::Options(format!("a KV cache of {num_blocks} blocks of {block_size} overflows"))
            })
        };
        let alloc = |ty: KvCacheType| -> Result<CudaSlice<u16>, CudaBackendError> {
            stream.alloc_zeros(words(ty)?).map_err(CudaBackendError::driver("allocating the KV cache"))
        };
        Ok(DeviceKvCache {
            n_layer,
            kv_dim,
            block_size,
            num_blocks,
            types,
            keys: alloc(types.keys)?,
            values: if keys_only { None } else { Some(alloc(types.values)?) },
        })
    }

    /// Words of keys (or of values) for `slots` rows of `row` words in every layer, if that fits in `usize`.
    fn words(n_layer: usize, row: usize, slots: usize) -> Option<usize> {
        n_layer.checked_mul(slots)?.checked_mul(row)
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
        let range = |ty: KvCacheType| {
            let per_layer = slots * row_words(ty, self.kv_dim);
            layer * per_layer..(layer + 1) * per_layer
        };
        let keys = DeviceArray::new(&self.keys, stream).sub(range(self.types.keys))?;
        let values = match &self.values {
            Some(values) => DeviceArray::new(values, stream).sub(range(self.types.values))?,
            None => keys,
        };
        Ok(LayerCache { keys, values, slots, types: self.types })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_that_overflow_are_caught() {
        assert_eq!(DeviceKvCache::words(30, 192, 16 * 1024), Some(30 * 192 * 16 * 1024));
        assert_eq!(DeviceKvCache::words(usize::MAX / 2, 192, 2), None);
    }

    #[test]
    fn rows_are_the_cpu_planes_bytes_in_words() {
        // SmolLM2's 192-wide rows: 192 halves, 6 blocks of 34 bytes, 6 of 18.
        let words = KvCacheType::ALL.map(|t| row_words(t, 192));
        assert_eq!(words, [192, 6 * 17, 6 * 9]);
        assert_eq!(KvCacheType::ALL.map(kv_type_code), [0, 1, 2]);
        let q8_q4 = KvCacheTypes { keys: KvCacheType::Q8_0, values: KvCacheType::Q4_0 };
        assert_eq!(effective_types(q8_q4, false), q8_q4);
        let latent = effective_types(q8_q4, true);
        assert_eq!((latent.keys, latent.values), (KvCacheType::Q8_0, KvCacheType::Q8_0));
    }
}
