//! The bytes of a GGUF file: a read-only memory map of the file, or an owned buffer (tests, synthetic models).

use std::fs::File;
use std::path::Path;

use super::error::GgufError;

/// Where a file's bytes live. Both variants start at an address aligned to at least 8 bytes, so tensor data at an
/// offset aligned to `general.alignment` can be viewed as `f32`, `f16` or quant blocks without copying.
pub enum Source {
    Mapped(memmap2::Mmap),
    /// Stored as `u64` words for alignment; `len` is the byte length.
    Owned {
        words: Vec<u64>,
        len: usize,
    },
}

impl Source {
    pub fn map(path: &Path) -> Result<Self, GgufError> {
        let io = |source| GgufError::Io { path: path.to_owned(), source };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. Like every reader of memory-mapped model
        // files (llama.cpp included), we rely on nobody truncating or rewriting the file while it is open;
        // doing so is documented as unsupported. A memory map is the requirement: weights stay in the
        // page cache, shared between processes, instead of being copied into the heap.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Source::Mapped(map))
    }

    pub fn owned(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Source::Owned { words, len: bytes.len() }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Source::Mapped(m) => m,
            Source::Owned { words, len } => &bytemuck::cast_slice::<u64, u8>(words)[..*len],
        }
    }
}
