//! AVX2 tiles of the quantized matmul for the K-quants (Q2_K … Q6_K): each 256-element super-block unpacked into
//! eight 32-element groups, one register of unsigned values per group, against eight activation blocks.
//!
//! Per output, super-block and group, the arithmetic of the scalar `output_q8_k` (`numerics`: 8 lanes, lane `j`
//! holding elements `4j..4j + 4`): the exact integer lane sums `Σ (u − OFFSET)·qa` (`vpmaddubsw`, `vpmaddwd`),
//! converted to f32 and multiplied by the lane's half's integer scale (exact: the product stays below 2^24, so it
//! equals the scalar path's integer product converted), then one FMA with `d·da`; the types with minima add
//! `(Σ qa · min_h)` (exact again) times `−dmin·da` with a second FMA. After the last super-block the lanes are
//! summed by `lanes::hsum`. Nothing depends on the tile shape, so results are batch-invariant (see `tiling`).

use std::arch::x86_64::*;
use std::mem::{size_of, MaybeUninit};
use std::ops::Range;

use super::lanes::{hsum, load_32, prefetch};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::tiling::{
    run_tiles, tile_fns, walk_prepared_columns, PreparedTileFn, TileTable, PREFETCH_TILES,
};
use crate::model::gguf::kquants::{k_scale_min, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, SuperBlock, GROUPS};

/// One 32-element group, unpacked.
#[derive(Clone, Copy)]
struct GroupRegs {
    /// The unsigned values `u` in element order (at most 63).
    u: __m256i,
    /// The integer scale of each lane's half, as f32: `[s0; 4]` then `[s1; 4]`.
    scales: __m256,
    /// The integer minimum of each lane's half, as f32 (zero for the types without minima).
    mins: __m256,
}

/// One super-block, unpacked.
#[derive(Clone, Copy)]
pub(in crate::backend::cpu::kernels) struct Unpacked {
    groups: [GroupRegs; GROUPS],
    /// `d` in every lane.
    d: __m256,
    /// `−dmin` in every lane.
    dmin_neg: __m256,
}

/// One activation block, prepared for every row of a tile.
#[derive(Clone, Copy)]
struct ColBlock {
    q: __m256i,
    /// `OFFSET · Σ qa` over each lane's four activations.
    offset: __m256i,
    /// `Σ qa` over each lane's four activations, as f32.
    sums: __m256,
    /// `da` in every lane.
    d: __m256,
}

/// `Σ` of each group of 4 adjacent u8 × i8 products as 8 i32 lanes (no saturation: |u| ≤ 63, |i| ≤ 127).
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_u8_i8(u: __m256i, i: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, i), _mm256_set1_epi16(1))
}

/// `[a; 4]` then `[b; 4]` as f32.
#[target_feature(enable = "avx2,fma,f16c")]
fn halves(a: i32, b: i32) -> __m256 {
    _mm256_set_m128(_mm_set1_ps(b as f32), _mm_set1_ps(a as f32))
}

/// How a K-quant's super-block is unpacked into registers.
pub(in crate::backend::cpu::kernels) trait Unpack: SuperBlock {
    /// # Safety
    /// Needs AVX2, FMA and F16C.
    unsafe fn unpack(&self) -> Unpacked;
}

/// The unpacking any K-quant can use: its scalar decoding (`kquants::SuperBlock::group`), loaded into registers.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_decoded<B: SuperBlock>(b: &B) -> Unpacked {
    let mut groups =
        [GroupRegs { u: _mm256_setzero_si256(), scales: _mm256_setzero_ps(), mins: _mm256_setzero_ps() }; GROUPS];
    for (g, regs) in groups.iter_mut().enumerate() {
        let group = b.group(g);
        // SAFETY: `u` is 32 bytes; the load has no alignment requirement.
        let u = unsafe { _mm256_loadu_si256(group.u.as_ptr().cast()) };
        *regs = GroupRegs {
            u,
            scales: halves(group.scales[0], group.scales[1]),
            mins: halves(group.mins[0], group.mins[1]),
        };
    }
    Unpacked { groups, d: _mm256_set1_ps(b.d()), dmin_neg: _mm256_set1_ps(-b.dmin()) }
}

impl Unpack for BlockQ2K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack(&self) -> Unpacked {
        unpack_decoded(self)
    }
}

impl Unpack for BlockQ3K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack(&self) -> Unpacked {
        unpack_decoded(self)
    }
}

impl Unpack for BlockQ5K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack(&self) -> Unpacked {
        unpack_decoded(self)
    }
}

impl Unpack for BlockQ4K {
    /// Groups `2c` and `2c + 1` are the low and high nibbles of the same 32 bytes.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack(&self) -> Unpacked {
        let low = _mm256_set1_epi8(0x0f);
        let mut groups = [GroupRegs { u: low, scales: _mm256_setzero_ps(), mins: _mm256_setzero_ps() }; GROUPS];
        for c in 0..GROUPS / 2 {
            // SAFETY: bytes 32c..32c + 32 of the 128-byte `qs`; no alignment requirement.
            let bytes = unsafe { _mm256_loadu_si256(self.qs.as_ptr().add(32 * c).cast()) };
            groups[2 * c].u = _mm256_and_si256(bytes, low);
            groups[2 * c + 1].u = _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), low);
        }
        for (g, regs) in groups.iter_mut().enumerate() {
            let (sc, m) = k_scale_min(&self.scales, g);
            let (sc, m) = (i32::from(sc), i32::from(m));
            (regs.scales, regs.mins) = (halves(sc, sc), halves(m, m));
        }
        Unpacked { groups, d: _mm256_set1_ps(self.d()), dmin_neg: _mm256_set1_ps(-self.dmin()) }
    }
}

impl Unpack for BlockQ6K {
    /// Each 128-element half: two 32-byte runs of `ql` (low, then high nibbles) and one of `qh` (bit pairs).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack(&self) -> Unpacked {
        let (low, pair) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x03));
        let zero = _mm256_setzero_ps();
        let mut groups = [GroupRegs { u: low, scales: zero, mins: zero }; GROUPS];
        for i in 0..2 {
            // SAFETY: bytes 64i..64i + 64 of the 128-byte `ql` and 32i..32i + 32 of the 64-byte `qh`.
            let (ql0, ql1, qh) = unsafe {
                (
                    _mm256_loadu_si256(self.ql.as_ptr().add(64 * i).cast()),
                    _mm256_loadu_si256(self.ql.as_ptr().add(64 * i + 32).cast()),
                    _mm256_loadu_si256(self.qh.as_ptr().add(32 * i).cast()),
                )
            };
            // (Shifts of 16-bit lanes, then masks: the bits that cross from the neighbouring byte are masked off.)
            let g = &mut groups[4 * i..4 * i + 4];
            let six_bits = |nibbles: __m256i, pairs: __m256i| {
                _mm256_or_si256(_mm256_and_si256(nibbles, low), _mm256_slli_epi16::<4>(_mm256_and_si256(pairs, pair)))
            };
            g[0].u = six_bits(ql0, qh);
            g[1].u = six_bits(ql1, _mm256_srli_epi16::<2>(qh));
            g[2].u = six_bits(_mm256_srli_epi16::<4>(ql0), _mm256_srli_epi16::<4>(qh));
            g[3].u = six_bits(_mm256_srli_epi16::<4>(ql1), _mm256_srli_epi16::<6>(qh));
        }
        for (g, regs) in groups.iter_mut().enumerate() {
            regs.scales = halves(i32::from(self.scales[2 * g]), i32::from(self.scales[2 * g + 1]));
        }
        Unpacked { groups, d: _mm256_set1_ps(self.d()), dmin_neg: zero }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn col_block<B: SuperBlock>(a: &BlockQ8A) -> ColBlock {
    let q = load_32(&a.qs);
    let sums = dot_u8_i8(_mm256_set1_epi8(1), q);
    ColBlock {
        q,
        offset: _mm256_mullo_epi32(sums, _mm256_set1_epi32(B::OFFSET)),
        sums: _mm256_cvtepi32_ps(sums),
        d: _mm256_set1_ps(a.d),
    }
}

/// Adds one super-block of every row (unpacked) and column of a tile to the accumulators `acc[c][r]`.
// The group index picks the same group from the rows and the columns; an iterator over one would hide that.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c")]
fn accumulate<B: SuperBlock, const R: usize, const C: usize>(
    acc: &mut [[__m256; R]; C],
    w: &[Unpacked; R],
    cols: [&[BlockQ8A; GROUPS]; C],
) {
    for g in 0..GROUPS {
        for c in 0..C {
            let a = col_block::<B>(&cols[c][g]);
            for r in 0..R {
                let regs = &w[r].groups[g];
                let mut dot = dot_u8_i8(regs.u, a.q);
                if B::OFFSET != 0 {
                    dot = _mm256_sub_epi32(dot, a.offset);
                }
                let p = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), regs.scales);
                acc[c][r] = _mm256_fmadd_ps(p, _mm256_mul_ps(w[r].d, a.d), acc[c][r]);
                if B::HAS_MIN {
                    let n = _mm256_mul_ps(a.sums, regs.mins);
                    acc[c][r] = _mm256_fmadd_ps(n, _mm256_mul_ps(w[r].dmin_neg, a.d), acc[c][r]);
                }
            }
        }
    }
}

/// Unpacks one super-block of each of `R` rows.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_rows<B: Unpack, const R: usize>(blocks: [&B; R]) -> [Unpacked; R] {
    let mut w = [MaybeUninit::<Unpacked>::uninit(); R];
    for r in 0..R {
        // SAFETY: this function has the features `unpack` needs.
        w[r].write(unsafe { blocks[r].unpack() });
    }
    // SAFETY: every entry was written just above.
    w.map(|u| unsafe { u.assume_init() })
}

/// One `R × C` tile (see `tiling::TileFn`; a "block" here is a super-block and its eight activation blocks).
#[target_feature(enable = "avx2,fma,f16c")]
fn tile<B: Unpack, const R: usize, const C: usize>(
    rows: &[B],
    cols: &[[BlockQ8A; GROUPS]],
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    let ahead = PREFETCH_TILES * R * n_blocks;
    for b in 0..n_blocks {
        let mut blocks: [&B; R] = [&rows[b]; R];
        for r in 0..R {
            blocks[r] = &rows[r * n_blocks + b];
            prefetch((blocks[r] as *const B).wrapping_add(ahead).cast(), size_of::<B>());
        }
        let mut col: [&[BlockQ8A; GROUPS]; C] = [&cols[b]; C];
        for c in 0..C {
            col[c] = &cols[c * n_blocks + b];
        }
        accumulate::<B, R, C>(&mut acc, &unpack_rows::<B, R>(blocks), col);
    }
    for c in 0..C {
        for r in 0..R {
            out[c * R + r] = hsum(acc[c][r]);
        }
    }
}

/// Most super-blocks per row a row tile's buffer holds: rows of up to 4096 weights, `R × 832` bytes per
/// super-block on the stack. Longer rows take the tile functions.
const MAX_PREPARED_BLOCKS: usize = 16;

/// The `tiling::RowTileFn` of the K-quants: `R` rows unpacked once, then every column tile against them.
#[target_feature(enable = "avx2,fma,f16c")]
fn row_tile<B: Unpack, const R: usize>(
    rows: &[B],
    n_blocks: usize,
    act: &[[BlockQ8A; GROUPS]],
    cols: Range<usize>,
    r0: usize,
    out: &mut OutRows,
) -> bool {
    if n_blocks > MAX_PREPARED_BLOCKS {
        return false;
    }
    let mut prepared = [const { MaybeUninit::<[Unpacked; R]>::uninit() }; MAX_PREPARED_BLOCKS];
    for (b, slot) in prepared[..n_blocks].iter_mut().enumerate() {
        let blocks: [&B; R] = std::array::from_fn(|r| &rows[r * n_blocks + b]);
        slot.write(unpack_rows::<B, R>(blocks));
    }
    // SAFETY: entries 0..n_blocks were written just above; MaybeUninit<T> has T's layout.
    let prepared: &[[Unpacked; R]] = unsafe { std::slice::from_raw_parts(prepared.as_ptr().cast(), n_blocks) };
    let fns: [PreparedTileFn<_, [BlockQ8A; GROUPS]>; 4] =
        [prepared_tile::<B, R, 1>, prepared_tile::<B, R, 2>, prepared_tile::<B, R, 3>, prepared_tile::<B, R, 4>];
    // SAFETY: the functions need the features this function is compiled with.
    unsafe { walk_prepared_columns::<_, _, R, 4>(&fns, prepared, act, n_blocks, cols, r0, out) };
    true
}

/// `tile` with the rows already unpacked (`prepared[b][r]`: super-block `b` of row `r`).
#[target_feature(enable = "avx2,fma,f16c")]
fn prepared_tile<B: Unpack, const R: usize, const C: usize>(
    prepared: &[[Unpacked; R]],
    cols: &[[BlockQ8A; GROUPS]],
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    for (b, w) in prepared.iter().enumerate() {
        let mut col: [&[BlockQ8A; GROUPS]; C] = [&cols[b]; C];
        for c in 0..C {
            col[c] = &cols[c * n_blocks + b];
        }
        accumulate::<B, R, C>(&mut acc, w, col);
    }
    for c in 0..C {
        for r in 0..R {
            out[c * R + r] = hsum(acc[c][r]);
        }
    }
}

/// Rows per tile for batches of several columns (as for the 32-element types).
const BATCH_ROWS: usize = 2;

/// The tile table of one K-quant.
pub(in crate::backend::cpu::kernels) trait Tables: Unpack {
    const TILES: TileTable<Self, [BlockQ8A; GROUPS], 4, 4>;
}

macro_rules! k_tables {
    ($($block:ty),+) => {$(
        impl Tables for $block {
            const TILES: TileTable<Self, [BlockQ8A; GROUPS], 4, 4> = TileTable {
                fns: tile_fns!(tile, $block, [1, 2, 3, 4], [1, 2, 3, 4]),
                batch_rows: BATCH_ROWS,
                row_tiles: Some([
                    row_tile::<$block, 1>,
                    row_tile::<$block, 2>,
                    row_tile::<$block, 3>,
                    row_tile::<$block, 4>,
                ]),
            };
        }
    )+};
}
k_tables!(BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K);

/// The AVX2 `Kernels::matmul_q8` for K-quant weights `rows` (`blocks_per_row` activation blocks per row; the
/// caller checked the arguments).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn matmul_q8_k<B: Tables>(
    rows: &[B],
    blocks_per_row: usize,
    act: &[BlockQ8A],
    n_cols: usize,
    out: &mut OutRows,
) {
    let act = act.as_chunks::<GROUPS>().0;
    // SAFETY: the table's functions need the features this function is compiled with.
    unsafe { run_tiles(&B::TILES, rows, blocks_per_row / GROUPS, act, n_cols, out) }
}
