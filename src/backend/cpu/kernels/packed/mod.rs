//! Quantized weight matrices rearranged at load for the matmul kernels: rows interleaved in panels of 16, each
//! 32-element group's values in bit planes that one SIMD register of 16 rows reads whole.
//!
//! A GGUF file stores a matrix row after row, each row a run of blocks (`blocks`, `kquants`). A matvec over that
//! layout computes one output at a time, and each output's sum has to be folded from its vector lanes at the end;
//! for the K-quants every super-block's packed 6-bit scales have to be decoded for each row, by scalar code. Both
//! costs dominated ember's decode at 1B sizes (issue 28: unpacking and scale decoding were half of a Q4_K_M decode
//! step, the integer dot a fifth). Packed, a register holds the same four elements of 16 rows side by side, so one
//! `vpdpbusd` computes four products for each of 16 outputs, each output's sum stays in its own 32-bit lane, and
//! the scales of a unit are plain bytes, one per row, that a register loads and converts at once. This is the
//! layout of llama.cpp's CPU "repack" (rows interleaved at load), arranged so that every type unpacks with a few
//! shifts and masks.
//!
//! **Layout.** Rows `16p .. 16p + 16` form panel `p` (the last panel's missing rows are zero). A panel is its units'
//! headers (`Format::HEADER` bytes each, the region padded to 64 bytes), then its groups' planes
//! (`Format::GROUP_BYTES` each), units and groups in row order. A unit is one block (32 elements) or one K-quant
//! super-block (256 elements, 8 groups). Within a group, "slice" `s` (0..8) is elements `4s..4s + 4`, half `h` is
//! slices `4h..4h + 4`, and a plane register is 64 bytes: byte `4r + j` belongs to row `r`, element `4s + j`:
//! - a 4-bit plane has 4 registers: register `t` holds slice `t` in its low nibbles and slice `4 + t` in its high;
//! - an 8-bit plane has 8 registers, one per slice (Q8_0, stored as `q + 128`);
//! - a 2-bit plane has 2 registers: register `h` holds slice `4h + t` in bits `2t..2t + 2`;
//! - a 1-bit plane has 8 64-bit masks: bit `4r + j` of mask `s` belongs to row `r`, element `4s + j`.
//!
//! A value `u` is its base plane's bits ORed with its high plane's, shifted (`Format::BASE`, `Format::HIGH`), or for
//! MXFP4 and the IQ types, whose codes stand for unevenly spaced values, the entry of its codebook that code (base
//! and high bits, below 16) indexes (`Format::CODEBOOK`); the header holds the scales as `Format::SCALING` says,
//! each field a run of 16 values, one per row. Sizes equal the file's but for the K-quants' unpacked 6-bit scales
//! (Q4_K +2.8 %, Q5_K +2.3 %), Q3_K's f32 scale and the coded types (`gguf::coded`), whose lattice grids become a
//! code per element (docs/architecture.md lists their bits per weight).
//!
//! Every path's kernels read this one layout, so the choice of path never repacks anything.

pub mod format;
pub mod scalar;

use std::fmt;
use std::sync::Mutex;

use format::{decode_row, dequantize_unit, Format, RowUnit, PANEL_ROWS};

use super::weights::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK};
use crate::model::gguf::coded::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockTq1_0, BlockTq2_0,
};
use crate::model::gguf::iq4::{BlockIq4Nl, BlockIq4Xs};
use crate::model::gguf::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use crate::model::gguf::mxfp4::BlockMxfp4;
use crate::model::gguf::GgmlType;

/// How far ahead of the group it computes, a SIMD tile requests the panel's planes into L2, in bytes: the hardware
/// prefetcher stops at page boundaries, and a matvec does too little work per byte to hide a miss (in a batch the
/// planes are in cache after the first column tile, and the requests cost a few instructions per group). Measured on
/// a Zen 4 EPYC, 1B Q4_K_M decode (docs/performance.md): no requests 19 tokens/s on one thread; into L1 2 KiB
/// ahead 24; into L1 4 KiB ahead 26; into L2 16 KiB ahead 27-28, and on two threads 1.1x the L1 4 KiB figure.
/// Into L2 because 16 KiB ahead would evict from L1 what the tile is reading.
pub const PREFETCH_AHEAD: usize = 16384;

/// The bytes a matvec requests (`PREFETCH_AHEAD` ahead) on reaching group `group` of the panel that starts at
/// `panel`: its start and length. A panel is its units' headers, then its groups' planes; a tile reads both at
/// once, so the requests advance through the panel's bytes in proportion, a group's planes plus, at each unit's
/// first group, a header's worth. They then sweep every panel whole and run on into the next without a gap
/// (requesting only the planes' share would leave a header region's worth of each panel unrequested).
pub(in crate::backend::cpu::kernels) fn ahead<F: Format>(panel: *const u8, group: usize) -> (*const u8, usize) {
    let groups_per_unit = F::UNIT / QK;
    let (unit, g) = (group / groups_per_unit, group % groups_per_unit);
    let unit_bytes = F::HEADER + groups_per_unit * F::GROUP_BYTES;
    let (at, len) =
        if g == 0 { (0, F::HEADER + F::GROUP_BYTES) } else { (F::HEADER + g * F::GROUP_BYTES, F::GROUP_BYTES) };
    (panel.wrapping_add(PREFETCH_AHEAD + unit * unit_bytes + at), len)
}

/// Asks for share `k` of `n` of a panel's header region and planes (into L2). A batch expands each panel once
/// (`expand`), reading it from memory; the column tiles of the panel before it each ask for a share of it, so that
/// the expansion finds it in L2 instead of waiting on it (a 1B model's prefill of 128 tokens spent 6 % of its time
/// there).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse")]
pub(in crate::backend::cpu::kernels) fn request_share(panel: (&[u8], &[u8]), k: usize, n: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    for bytes in [panel.0, panel.1] {
        let (from, to) = (bytes.len() * k / n, bytes.len() * (k + 1) / n);
        for line in (from..to).step_by(64) {
            _mm_prefetch::<_MM_HINT_T1>(bytes.as_ptr().wrapping_add(line).cast());
        }
    }
}

/// 64 bytes, 64-byte aligned: the unit of a packed matrix's storage where it cannot be mapped.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(in crate::backend::cpu::kernels) struct Line(pub [u8; 64]);

/// A packed matrix's bytes: anonymous pages asked to be huge pages (a matvec streams hundreds of megabytes per
/// token; with 4 KiB pages that is a TLB miss every 4 KiB and, when the matrix is written at load, a page fault
/// every 4 KiB), or 64-byte aligned heap lines where the mapping fails. Page-aligned either way, so every plane
/// register is one aligned cache line.
enum Storage {
    Mapped(memmap2::MmapMut),
    Heap(Vec<Line>),
}

impl Storage {
    /// `len` zero bytes (a multiple of 64).
    fn zeroed(len: usize) -> Storage {
        match memmap2::MmapMut::map_anon(len) {
            Ok(map) => {
                // Only advice: without transparent huge pages the mapping works the same.
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::HugePage);
                Storage::Mapped(map)
            }
            Err(_) => Storage::Heap(vec![Line([0; 64]); len / 64]),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(map) => map,
            Storage::Heap(lines) => bytemuck::cast_slice(lines),
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Mapped(map) => map,
            Storage::Heap(lines) => bytemuck::cast_slice_mut(lines),
        }
    }
}

impl Line {
    pub(in crate::backend::cpu::kernels) const ZERO: Line = Line([0; 64]);
}

/// A batch matmul's weights unpacked into bytes, a register per slice (each path's `EXPANDED_GROUP` bytes per group,
/// 64-byte aligned): the SIMD paths unpack a panel once for every column of a batch instead of once per column tile.
/// One per thread, grown to the largest panel it has met.
pub(in crate::backend::cpu::kernels) fn with_expanded<T>(bytes: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    thread_local! {
        static EXPANDED: std::cell::RefCell<Vec<Line>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    EXPANDED.with_borrow_mut(|lines| {
        if lines.len() * 64 < bytes {
            lines.resize(bytes.div_ceil(64), Line::ZERO);
        }
        f(&mut bytemuck::cast_slice_mut(lines)[..bytes])
    })
}

/// Whether a batch expands format `F`'s panels first: every type whose slice takes more than a load to unpack.
pub(in crate::backend::cpu::kernels) const fn expands<F: Format>() -> bool {
    !matches!((F::BASE, F::HIGH), (format::Base::Bytes, format::High::None))
}

/// The first `N` values of `xs`: a tile's `R` panels or `C` columns out of a path's fixed-size arrays.
pub(in crate::backend::cpu::kernels) fn first<T: Copy, const N: usize>(xs: &[T]) -> [T; N] {
    xs[..N].try_into().expect("N is within the array")
}

/// Runs `n` tasks `f(0) .. f(n − 1)`, in parallel where it can (a thread pool's `run`).
pub type RunTasks<'a> = &'a dyn Fn(usize, &(dyn Fn(usize) + Sync));

/// Runs tasks one after another on the calling thread.
pub fn run_in_order(n: usize, f: &(dyn Fn(usize) + Sync)) {
    (0..n).for_each(f);
}

/// A quantized weight matrix in panels (see the module documentation).
pub struct PackedMatrix {
    dtype: GgmlType,
    n_rows: usize,
    row_len: usize,
    /// Bytes of a panel's header region (padded to 64).
    header_region: usize,
    /// Bytes of a panel.
    panel_bytes: usize,
    storage: Storage,
}

impl fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("dtype", &self.dtype)
            .field("n_rows", &self.n_rows)
            .field("row_len", &self.row_len)
            .finish_non_exhaustive()
    }
}

/// `$body` with `$F` bound to the format type of `$dtype` (a quantized type that packs), or `$none` otherwise.
macro_rules! with_format {
    ($dtype:expr, $F:ident => $body:expr, _ => $none:expr) => {
        match $dtype {
            GgmlType::Q4_0 => {
                type $F = BlockQ4_0;
                $body
            }
            GgmlType::Q4_1 => {
                type $F = BlockQ4_1;
                $body
            }
            GgmlType::Q5_0 => {
                type $F = BlockQ5_0;
                $body
            }
            GgmlType::Q5_1 => {
                type $F = BlockQ5_1;
                $body
            }
            GgmlType::Q8_0 => {
                type $F = BlockQ8_0;
                $body
            }
            GgmlType::Q2K => {
                type $F = BlockQ2K;
                $body
            }
            GgmlType::Q3K => {
                type $F = BlockQ3K;
                $body
            }
            GgmlType::Q4K => {
                type $F = BlockQ4K;
                $body
            }
            GgmlType::Q5K => {
                type $F = BlockQ5K;
                $body
            }
            GgmlType::Q6K => {
                type $F = BlockQ6K;
                $body
            }
            GgmlType::Mxfp4 => {
                type $F = BlockMxfp4;
                $body
            }
            GgmlType::Iq4Nl => {
                type $F = BlockIq4Nl;
                $body
            }
            GgmlType::Iq4Xs => {
                type $F = BlockIq4Xs;
                $body
            }
            GgmlType::Iq3Xxs => {
                type $F = $crate::model::gguf::coded::BlockIq3Xxs;
                $body
            }
            GgmlType::Iq3S => {
                type $F = $crate::model::gguf::coded::BlockIq3S;
                $body
            }
            GgmlType::Iq2Xxs => {
                type $F = $crate::model::gguf::coded::BlockIq2Xxs;
                $body
            }
            GgmlType::Iq2Xs => {
                type $F = $crate::model::gguf::coded::BlockIq2Xs;
                $body
            }
            GgmlType::Iq2S => {
                type $F = $crate::model::gguf::coded::BlockIq2S;
                $body
            }
            GgmlType::Iq1S => {
                type $F = $crate::model::gguf::coded::BlockIq1S;
                $body
            }
            GgmlType::Iq1M => {
                type $F = $crate::model::gguf::coded::BlockIq1M;
                $body
            }
            GgmlType::Tq1_0 => {
                type $F = $crate::model::gguf::coded::BlockTq1_0;
                $body
            }
            GgmlType::Tq2_0 => {
                type $F = $crate::model::gguf::coded::BlockTq2_0;
                $body
            }
            _ => $none,
        }
    };
}
pub(in crate::backend::cpu::kernels) use with_format;

impl PackedMatrix {
    /// `w` packed on the calling thread, or `None` for the float types (which the kernels read as they are).
    pub fn pack(w: &WeightMatrix) -> Option<PackedMatrix> {
        Self::pack_with(w, &run_in_order)
    }

    /// `w` packed by tasks that `run` runs (a few panels each), or `None` for the float types.
    pub fn pack_with(w: &WeightMatrix, run: RunTasks<'_>) -> Option<PackedMatrix> {
        let (n_rows, row_len) = (w.n_rows(), w.row_len());
        Some(match w.data() {
            WeightData::Q4_0(b) => Self::pack_as::<BlockQ4_0>(b, n_rows, row_len, run),
            WeightData::Q4_1(b) => Self::pack_as::<BlockQ4_1>(b, n_rows, row_len, run),
            WeightData::Q5_0(b) => Self::pack_as::<BlockQ5_0>(b, n_rows, row_len, run),
            WeightData::Q5_1(b) => Self::pack_as::<BlockQ5_1>(b, n_rows, row_len, run),
            WeightData::Q8_0(b) => Self::pack_as::<BlockQ8_0>(b, n_rows, row_len, run),
            WeightData::Q2K(b) => Self::pack_as::<BlockQ2K>(b, n_rows, row_len, run),
            WeightData::Q3K(b) => Self::pack_as::<BlockQ3K>(b, n_rows, row_len, run),
            WeightData::Q4K(b) => Self::pack_as::<BlockQ4K>(b, n_rows, row_len, run),
            WeightData::Q5K(b) => Self::pack_as::<BlockQ5K>(b, n_rows, row_len, run),
            WeightData::Q6K(b) => Self::pack_as::<BlockQ6K>(b, n_rows, row_len, run),
            WeightData::Mxfp4(b) => Self::pack_as::<BlockMxfp4>(b, n_rows, row_len, run),
            WeightData::Iq4Nl(b) => Self::pack_as::<BlockIq4Nl>(b, n_rows, row_len, run),
            WeightData::Iq4Xs(b) => Self::pack_as::<BlockIq4Xs>(b, n_rows, row_len, run),
            WeightData::Iq3Xxs(b) => Self::pack_as::<BlockIq3Xxs>(b, n_rows, row_len, run),
            WeightData::Iq3S(b) => Self::pack_as::<BlockIq3S>(b, n_rows, row_len, run),
            WeightData::Iq2Xxs(b) => Self::pack_as::<BlockIq2Xxs>(b, n_rows, row_len, run),
            WeightData::Iq2Xs(b) => Self::pack_as::<BlockIq2Xs>(b, n_rows, row_len, run),
            WeightData::Iq2S(b) => Self::pack_as::<BlockIq2S>(b, n_rows, row_len, run),
            WeightData::Iq1S(b) => Self::pack_as::<BlockIq1S>(b, n_rows, row_len, run),
            WeightData::Iq1M(b) => Self::pack_as::<BlockIq1M>(b, n_rows, row_len, run),
            WeightData::Tq1_0(b) => Self::pack_as::<BlockTq1_0>(b, n_rows, row_len, run),
            WeightData::Tq2_0(b) => Self::pack_as::<BlockTq2_0>(b, n_rows, row_len, run),
            WeightData::F16(_) | WeightData::Bf16(_) | WeightData::F32(_) => return None,
        })
    }

    fn pack_as<F: Format<Block = F> + bytemuck::Pod + Sync>(
        blocks: &[F],
        n_rows: usize,
        row_len: usize,
        run: RunTasks<'_>,
    ) -> PackedMatrix {
        /// Panels per task: about a megabyte of packed weights.
        const TASK_BYTES: usize = 1 << 20;
        let units = row_len / F::UNIT;
        let header_region = (units * F::HEADER).next_multiple_of(64);
        let panel_bytes = header_region + row_len / QK * F::GROUP_BYTES;
        let n_panels = n_rows.div_ceil(PANEL_ROWS);
        let mut storage = Storage::zeroed(n_panels * panel_bytes);
        let panels_per_task = (TASK_BYTES / panel_bytes).max(1);
        let chunks: Vec<Mutex<Option<&mut [u8]>>> = storage.bytes_mut()[..n_panels * panel_bytes]
            .chunks_mut(panels_per_task * panel_bytes)
            .map(|c| Mutex::new(Some(c)))
            .collect();
        run(chunks.len(), &|task| {
            let Some(chunk) = chunks[task].lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
            let mut scratch = [RowUnit::EMPTY; PANEL_ROWS];
            let unit_planes = F::UNIT / QK * F::GROUP_BYTES;
            for (i, panel) in chunk.chunks_exact_mut(panel_bytes).enumerate() {
                let p = task * panels_per_task + i;
                let (headers, planes) = panel.split_at_mut(header_region);
                for b in 0..units {
                    let block = |r: usize| {
                        let row = p * PANEL_ROWS + r;
                        (row < n_rows).then(|| &blocks[row * units + b])
                    };
                    let header = &mut headers[b * F::HEADER..(b + 1) * F::HEADER];
                    F::pack_unit(block, &mut scratch, header, &mut planes[b * unit_planes..(b + 1) * unit_planes]);
                }
            }
        });
        drop(chunks);
        PackedMatrix { dtype: F::DTYPE, n_rows, row_len, header_region, panel_bytes, storage }
    }

    pub fn dtype(&self) -> GgmlType {
        self.dtype
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Weights per row.
    pub fn row_len(&self) -> usize {
        self.row_len
    }

    /// 32-element groups per row (the activation blocks a row meets).
    pub fn blocks_per_row(&self) -> usize {
        self.row_len / QK
    }

    /// Panels of 16 rows (the last one possibly partial).
    pub fn n_panels(&self) -> usize {
        self.n_rows.div_ceil(PANEL_ROWS)
    }

    /// Bytes of storage (what a matvec streams from memory).
    pub fn n_bytes(&self) -> usize {
        self.n_panels() * self.panel_bytes
    }

    /// Panel `p`: its header region and its planes.
    pub(in crate::backend::cpu::kernels) fn panel(&self, p: usize) -> (&[u8], &[u8]) {
        self.storage.bytes()[p * self.panel_bytes..(p + 1) * self.panel_bytes].split_at(self.header_region)
    }

    /// Dequantizes row `row` into `out` (`row_len` floats), bit-identical to [`WeightMatrix::dequantize_row`] on
    /// the matrix it was packed from.
    ///
    /// # Panics
    /// When `row` is not a row of the matrix or `out` has another length.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        assert!(row < self.n_rows && out.len() == self.row_len, "dequantize_row: row {row} or output length");
        with_format!(self.dtype, F => self.dequantize_row_as::<F>(row, out), _ => unreachable!("packed types only"))
    }

    fn dequantize_row_as<F: Format>(&self, row: usize, out: &mut [f32]) {
        let (headers, planes) = self.panel(row / PANEL_ROWS);
        let unit_planes = F::UNIT / QK * F::GROUP_BYTES;
        let mut unit = RowUnit::EMPTY;
        for (b, chunk) in out.chunks_exact_mut(F::UNIT).enumerate() {
            let (header, unit_planes) =
                (&headers[b * F::HEADER..(b + 1) * F::HEADER], &planes[b * unit_planes..(b + 1) * unit_planes]);
            decode_row::<F>(header, unit_planes, row % PANEL_ROWS, &mut unit);
            dequantize_unit::<F>(&unit, chunk);
        }
    }
}
