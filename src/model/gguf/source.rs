//! The bytes of a GGUF file: read into memory the process owns, a read-only memory map of the file, or an owned
//! buffer (tests, synthetic models).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::GgufError;
use crate::model::progress::LoadProgress;

/// How a model file's bytes get into the process: the engine option `load` (a public contract,
/// `docs/c_api.md`, "Model files").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum LoadMode {
    /// `Read` for a file under [`AUTO_MAP_BYTES`], `Mmap` from that size on: the default. The CPU backend packs
    /// the quantized weights into memory of its own either way, so reading a large file first would hold its
    /// weights twice (the read copy and the packed one) for as long as the model is loaded.
    #[default]
    Auto,
    /// Read the whole file into anonymous memory when the model is opened: the engine never touches the file
    /// again, so a file truncated, rewritten or deleted under a live engine has no effect on it. Costs the file's
    /// size in private memory per loaded model, and the read itself.
    Read,
    /// Memory-map the file read-only. Pages come from the page cache on first use and are shared with every
    /// process mapping the same file, and loading is near instant; but the file must not be truncated or
    /// rewritten in place while the model is loaded: touching a page past a new end of file raises SIGBUS in
    /// whatever thread touches it, which kills the process. Replacing the file by rename is safe (the map keeps
    /// the old inode).
    Mmap,
}

impl TryFrom<String> for LoadMode {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "auto" => Ok(LoadMode::Auto),
            "read" => Ok(LoadMode::Read),
            "mmap" => Ok(LoadMode::Mmap),
            _ => Err(format!("unknown load mode {name:?}, expected \"auto\", \"read\" or \"mmap\"")),
        }
    }
}

/// Files from this size on are mapped in [`LoadMode::Auto`]: 1 GiB, about a 1.5B-parameter model at 4 to 5 bits
/// per weight. Below it, the second copy a read costs is small beside the KV cache and the process.
pub const AUTO_MAP_BYTES: u64 = 1 << 30;

impl LoadMode {
    /// `Read` or `Mmap`: what `self` means for a file of `file_len` bytes.
    pub fn resolve(self, file_len: u64) -> LoadMode {
        match self {
            LoadMode::Auto if file_len >= AUTO_MAP_BYTES => LoadMode::Mmap,
            LoadMode::Auto => LoadMode::Read,
            mode => mode,
        }
    }
}

/// Where a file's bytes live. Every variant starts at a page boundary, as a memory map does, so tensor data at an
/// offset aligned to `general.alignment` can be viewed as `f32`, `f16` or quant blocks without copying, and sits
/// at the same offsets within cache lines in both: a heap buffer from `malloc` starts 16 bytes past a boundary,
/// which made 64-byte weight loads straddle two cache lines (measured with `cargo bench --bench model_load`: decode
/// 4 % slower than from the map, and equal once the buffer is page-aligned).
pub enum Source {
    Mapped(memmap2::Mmap),
    /// Whole pages; `len` is the byte length.
    Owned {
        pages: Vec<Page>,
        len: usize,
    },
}

const PAGE_BYTES: usize = 4096;

/// How much of a file one read takes: small enough for a progress bar to move (about 10 ms from the page cache),
/// large enough that the calls cost nothing.
const READ_CHUNK_BYTES: usize = 16 << 20;

/// One page-aligned page of bytes.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(4096))]
pub struct Page([u8; PAGE_BYTES]);

/// Zeroed pages for `len` bytes, from the allocator's zeroed memory (fresh pages, zeroed lazily by the kernel),
/// so that filling them costs one pass, not two.
fn zeroed_pages(len: usize) -> Vec<Page> {
    bytemuck::allocation::zeroed_vec(len.div_ceil(PAGE_BYTES))
}

impl Source {
    /// The file at `path`, brought in as `mode` says; reading advances `progress` by each chunk's bytes.
    pub fn open(path: &Path, mode: LoadMode, progress: &mut LoadProgress<'_>) -> Result<Self, GgufError> {
        let len = match mode {
            LoadMode::Auto => {
                std::fs::metadata(path).map_err(|source| GgufError::Io { path: path.to_owned(), source })?.len()
            }
            _ => 0,
        };
        match mode.resolve(len) {
            LoadMode::Mmap => Self::map(path),
            _ => Self::read(path, progress),
        }
    }

    fn map(path: &Path) -> Result<Self, GgufError> {
        let io = |source| GgufError::Io { path: path.to_owned(), source };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. Its validity past this call rests on nobody
        // truncating or rewriting the file while it is open (SIGBUS otherwise): `LoadMode::Mmap` is the opt-in
        // that documents this as the caller's promise, and `LoadMode::Read`, the default, has no such rule.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Source::Mapped(map))
    }

    fn read(path: &Path, progress: &mut LoadProgress<'_>) -> Result<Self, GgufError> {
        let io = |source| GgufError::Io { path: path.to_owned(), source };
        let mut file = File::open(path).map_err(io)?;
        let len = usize::try_from(file.metadata().map_err(io)?.len())
            .map_err(|_| io(std::io::Error::other("the file is larger than the address space")))?;
        let mut pages = zeroed_pages(len);
        // In chunks, so that a host sees the read advance and can cancel it between two. read_exact: a file
        // that shrinks while it is read is an error here, not a short model later.
        for chunk in bytemuck::cast_slice_mut::<Page, u8>(&mut pages)[..len].chunks_mut(READ_CHUNK_BYTES) {
            file.read_exact(chunk).map_err(io)?;
            if !progress.advance(chunk.len() as u64) {
                return Err(GgufError::Cancelled);
            }
        }
        // A file that grew while it was read keeps the size it had when opened: the header and tensor table
        // are validated against these bytes only.
        Ok(Source::Owned { pages, len })
    }

    pub fn owned(bytes: &[u8]) -> Self {
        let mut pages = zeroed_pages(bytes.len());
        bytemuck::cast_slice_mut::<Page, u8>(&mut pages)[..bytes.len()].copy_from_slice(bytes);
        Source::Owned { pages, len: bytes.len() }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Source::Mapped(m) => m,
            Source::Owned { pages, len } => &bytemuck::cast_slice::<Page, u8>(pages)[..*len],
        }
    }

    /// Whether the bytes are a map of the file.
    pub fn is_mapped(&self) -> bool {
        matches!(self, Source::Mapped(_))
    }

    /// Tells the kernel that the mapped bytes `range` are not needed for now: their pages leave this process's
    /// resident set (they stay in the page cache, and come back from it on the next read). Nothing for read
    /// bytes. A hint: it can fail, and a failure changes nothing.
    pub fn release(&self, range: std::ops::Range<usize>) {
        if let Source::Mapped(map) = self {
            // Whole pages inside the range only.
            let start = range.start.next_multiple_of(PAGE_BYTES);
            let end = range.end.min(map.len()) / PAGE_BYTES * PAGE_BYTES;
            if start < end {
                // SAFETY: the map is read-only and of a file (`Source::map`), never written through: dropping its
                // pages only makes the next read of them fault them in again from the page cache or the file,
                // with the same contents under the rule of `LoadMode::Mmap` (the file is not modified in place
                // while mapped). No reference can observe a change.
                let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
            }
        }
    }
}
