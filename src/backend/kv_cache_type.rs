//! The element type of the KV cache's keys or values, an engine option per plane (`kv_cache_type_k`,
//! `kv_cache_type_v`), as llama.cpp's `-ctk`/`-ctv`: f16 (the default), or ggml's 8-bit `q8_0` and 4-bit `q4_0`
//! blocks of 32 elements with an f16 scale, which hold a long conversation or many streams in 53 % or 28 % of the
//! bytes.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What one plane (keys or values) of the KV cache stores. In configuration, its [`KvCacheType::name`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum KvCacheType {
    #[default]
    F16,
    Q8_0,
    Q4_0,
}

impl TryFrom<String> for KvCacheType {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        Self::from_name(&name)
            .ok_or_else(|| format!("unknown KV cache type {name:?}, expected \"f16\", \"q8_0\" or \"q4_0\""))
    }
}

impl From<KvCacheType> for &'static str {
    fn from(t: KvCacheType) -> Self {
        t.name()
    }
}

impl KvCacheType {
    /// Every type, in the order the documentation lists them.
    pub const ALL: [KvCacheType; 3] = [KvCacheType::F16, KvCacheType::Q8_0, KvCacheType::Q4_0];

    /// The configuration name: `"f16"`, `"q8_0"` or `"q4_0"`.
    pub fn name(self) -> &'static str {
        match self {
            KvCacheType::F16 => "f16",
            KvCacheType::Q8_0 => "q8_0",
            KvCacheType::Q4_0 => "q4_0",
        }
    }

    /// The type named `name` (one of [`KvCacheType::name`]'s).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Bytes of `elements` elements (a multiple of 32 for the block types).
    pub fn bytes(self, elements: usize) -> usize {
        match self {
            KvCacheType::F16 => 2 * elements,
            KvCacheType::Q8_0 => elements / 32 * 34,
            KvCacheType::Q4_0 => elements / 32 * 18,
        }
    }

    /// Whether rows are blocks of 32 elements (head widths must then be multiples of 32).
    pub fn is_blocked(self) -> bool {
        self != KvCacheType::F16
    }
}

impl fmt::Display for KvCacheType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The types of a cache's two planes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KvCacheTypes {
    pub keys: KvCacheType,
    pub values: KvCacheType,
}

impl KvCacheTypes {
    /// Bytes of keys and values (values only when `values`: latent attention has none) per position of a model
    /// with `n_layer` layers of `kv_dim`-wide rows.
    pub fn bytes_per_position(self, n_layer: usize, kv_dim: usize, values: bool) -> usize {
        let value_bytes = if values { self.values.bytes(kv_dim) } else { 0 };
        n_layer * (self.keys.bytes(kv_dim) + value_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sizes_are_ggmls() {
        for t in KvCacheType::ALL {
            assert_eq!(KvCacheType::from_name(t.name()), Some(t));
        }
        assert_eq!(KvCacheType::from_name("q8"), None);
        assert_eq!(
            [KvCacheType::F16.bytes(64), KvCacheType::Q8_0.bytes(64), KvCacheType::Q4_0.bytes(64)],
            [128, 68, 36]
        );
        let smollm2 = KvCacheTypes::default().bytes_per_position(30, 192, true);
        assert_eq!(smollm2, 23_040, "SmolLM2: 30 layers × 2 × 192 × 2 bytes");
        let q8 = KvCacheTypes { keys: KvCacheType::Q8_0, values: KvCacheType::Q4_0 }.bytes_per_position(30, 192, false);
        assert_eq!(q8, 30 * 6 * 34);
    }
}
