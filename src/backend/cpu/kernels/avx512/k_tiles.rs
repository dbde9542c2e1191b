//! AVX-512 VNNI tiles of the quantized matmul for the K-quants (Q2_K … Q6_K): the AVX2 tiles' arithmetic
//! (`avx2::k_tiles`, the scalar `output_q8_k`) with each 512-bit register holding one group of two weight rows side
//! by side (row `r` in the low 256 bits, row `r + 1` in the high), as the 32-element types' AVX-512 tiles do.
//!
//! Groups are unpacked by the AVX2 code (`Unpack`, `header`, `group`: the same values, scales and minima) and
//! paired; each half then computes, lane for lane, what an AVX2 register computes for one output: the exact
//! integer dot `Σ (u − OFFSET)·qa` (`vpdpbusd` from a start of `−OFFSET · Σ qa`, the same integer as AVX2's
//! `vpmaddubsw` sum minus the offset term), converted, one FMA with `(d·scale_h)·da`, and for the types with minima
//! `(Σ qa · da)` times `−dmin·min_h` with a second FMA. So the results equal the AVX2 and scalar
//! paths' bit for bit, and nothing depends on the tile (batch invariance, see `tiling`). A tile with an odd number
//! of rows pairs its last row with an all-zero super-block (its half is computed and dropped).

use std::arch::x86_64::*;
use std::mem::{size_of, MaybeUninit};
use std::ops::Range;

use bytemuck::Zeroable;

use super::{store_pair_results, MAX_PAIRS};
use crate::backend::cpu::kernels::avx2::k_tiles::{group, header, GroupRegs, Unpack};
use crate::backend::cpu::kernels::avx2::lanes::{load_32, prefetch};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::tiling::{
    run_tiles, tile_fns, walk_prepared_columns, PreparedTileFn, TileTable, PREFETCH_TILES,
};
use crate::model::gguf::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, GROUPS};

/// One group of two rows: row `r` in lanes 0..8, row `r + 1` in lanes 8..16.
#[derive(Clone, Copy)]
struct PairGroup {
    /// The unsigned values, each row's 32 in element order.
    u: __m512i,
    /// `d` times each lane's half's integer scale.
    scales: __m512,
    /// `−dmin` times each lane's half's integer minimum.
    mins: __m512,
}

/// One super-block of two rows, unpacked.
#[derive(Clone, Copy)]
struct PairBlock {
    groups: [PairGroup; GROUPS],
}

/// One activation block of one column, in both halves.
#[derive(Clone, Copy)]
struct ColBlock {
    q: __m512i,
    /// `−OFFSET · Σ qa` of each lane's four activations: the integer dot's start.
    start: __m512i,
    /// `Σ qa · da` of each lane's four activations.
    sums_d: __m512,
    /// `da` in every lane.
    d: __m512,
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn join_i(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn join(lo: __m256, hi: __m256) -> __m512 {
    // As integers: the float insert needs AVX-512 DQ, which this path does not require.
    _mm512_castsi512_ps(join_i(_mm256_castps_si256(lo), _mm256_castps_si256(hi)))
}

/// Super-block `b0` and `b1` (of two rows) unpacked.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn pair_block<B: Unpack>(b0: &B, b1: &B) -> PairBlock {
    let (h0, h1) = (header(b0), header(b1));
    let zero = _mm512_setzero_ps();
    let mut groups = [PairGroup { u: _mm512_setzero_si512(), scales: zero, mins: zero }; GROUPS];
    for (g, pair) in groups.iter_mut().enumerate() {
        let (r0, r1): (GroupRegs, GroupRegs) = (group(b0, &h0, g), group(b1, &h1, g));
        *pair = PairGroup { u: join_i(r0.u, r1.u), scales: join(r0.scales, r1.scales), mins: join(r0.mins, r1.mins) };
    }
    PairBlock { groups }
}

/// Super-block `b` of each of `R` rows, paired (an odd last row with a zero super-block); pairs past the tile's
/// rows stay zero (never read).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn pair_rows<B: Unpack + Zeroable, const R: usize>(blocks: [&B; R]) -> [PairBlock; MAX_PAIRS] {
    let padding = B::zeroed();
    let (zero, zero_i) = (_mm512_setzero_ps(), _mm512_setzero_si512());
    let empty = PairGroup { u: zero_i, scales: zero, mins: zero };
    let mut out = [PairBlock { groups: [empty; GROUPS] }; MAX_PAIRS];
    for (p, pair) in out.iter_mut().enumerate().take(R.div_ceil(2)) {
        let second = if 2 * p + 1 < R { blocks[2 * p + 1] } else { &padding };
        *pair = pair_block(blocks[2 * p], second);
    }
    out
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn col_block<B: Unpack>(a: &BlockQ8A) -> ColBlock {
    let q = _mm512_broadcast_i64x4(load_32(&a.qs));
    let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), q);
    ColBlock {
        q,
        start: _mm512_mullo_epi32(sums, _mm512_set1_epi32(-B::OFFSET)),
        sums_d: _mm512_mul_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(a.d)),
        d: _mm512_set1_ps(a.d),
    }
}

/// Adds group `g` of one super-block of every row pair and column of an `R × C` tile to `acc[c][p]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn accumulate_group<B: Unpack, const R: usize, const C: usize>(
    acc: &mut [[__m512; MAX_PAIRS]; C],
    w: &[PairBlock; MAX_PAIRS],
    cols: &[&[BlockQ8A; GROUPS]; C],
    g: usize,
) {
    for c in 0..C {
        let a = col_block::<B>(&cols[c][g]);
        for p in 0..R.div_ceil(2) {
            let regs = &w[p].groups[g];
            let dot = _mm512_dpbusd_epi32(a.start, regs.u, a.q);
            acc[c][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(regs.scales, a.d), acc[c][p]);
            if B::HAS_MIN {
                acc[c][p] = _mm512_fmadd_ps(a.sums_d, regs.mins, acc[c][p]);
            }
        }
    }
}

/// The column blocks of super-block `b` of each of a tile's `C` columns.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn column_blocks<const C: usize>(cols: &[[BlockQ8A; GROUPS]], n_blocks: usize, b: usize) -> [&[BlockQ8A; GROUPS]; C] {
    let mut col: [&[BlockQ8A; GROUPS]; C] = [&cols[b]; C];
    for (c, slot) in col.iter_mut().enumerate() {
        *slot = &cols[c * n_blocks + b];
    }
    col
}

/// One `R × C` tile (see `tiling::TileFn`; a "block" is a super-block and its eight activation blocks).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile<B: Unpack + Zeroable, const R: usize, const C: usize>(
    rows: &[B],
    cols: &[[BlockQ8A; GROUPS]],
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm512_setzero_ps(); MAX_PAIRS]; C];
    let ahead = PREFETCH_TILES * R * n_blocks;
    for b in 0..n_blocks {
        let mut blocks: [&B; R] = [&rows[b]; R];
        for (r, block) in blocks.iter_mut().enumerate() {
            *block = &rows[r * n_blocks + b];
            prefetch((*block as *const B).wrapping_add(ahead).cast(), size_of::<B>());
        }
        let w = pair_rows::<B, R>(blocks);
        let col = column_blocks::<C>(cols, n_blocks, b);
        for g in 0..GROUPS {
            accumulate_group::<B, R, C>(&mut acc, &w, &col, g);
        }
    }
    store_pair_results::<R, C>(&acc, out);
}

/// Most super-blocks per row a row tile's buffer holds: rows of up to 4096 weights, 1.6 KiB per super-block and row
/// pair on the stack. Longer rows take the tile functions.
const MAX_PREPARED_BLOCKS: usize = 16;

/// The `tiling::RowTileFn` of the K-quants: `R` rows unpacked and paired once, then every column tile against them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn row_tile<B: Unpack + Zeroable, const R: usize>(
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
    let mut prepared = [const { MaybeUninit::<[PairBlock; MAX_PAIRS]>::uninit() }; MAX_PREPARED_BLOCKS];
    for (b, slot) in prepared[..n_blocks].iter_mut().enumerate() {
        let blocks: [&B; R] = std::array::from_fn(|r| &rows[r * n_blocks + b]);
        slot.write(pair_rows::<B, R>(blocks));
    }
    // SAFETY: entries 0..n_blocks were written just above; MaybeUninit<T> has T's layout.
    let prepared: &[[PairBlock; MAX_PAIRS]] = unsafe { std::slice::from_raw_parts(prepared.as_ptr().cast(), n_blocks) };
    let fns: [PreparedTileFn<_, [BlockQ8A; GROUPS]>; 4] =
        [prepared_tile::<B, R, 1>, prepared_tile::<B, R, 2>, prepared_tile::<B, R, 3>, prepared_tile::<B, R, 4>];
    // SAFETY: the functions need the features this function is compiled with.
    unsafe { walk_prepared_columns::<_, _, R, 4>(&fns, prepared, act, n_blocks, cols, r0, out) };
    true
}

/// `tile` with the rows already unpacked (`prepared[b]`: super-block `b` of the tile's row pairs).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn prepared_tile<B: Unpack, const R: usize, const C: usize>(
    prepared: &[[PairBlock; MAX_PAIRS]],
    cols: &[[BlockQ8A; GROUPS]],
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm512_setzero_ps(); MAX_PAIRS]; C];
    for (b, w) in prepared.iter().enumerate() {
        let col = column_blocks::<C>(cols, n_blocks, b);
        for g in 0..GROUPS {
            accumulate_group::<B, R, C>(&mut acc, w, &col, g);
        }
    }
    store_pair_results::<R, C>(&acc, out);
}

/// Rows per tile for batches of several columns: 4 × 4 tiles, as for the 32-element types.
const BATCH_ROWS: usize = 4;

/// The tile table of one K-quant on this path.
pub(super) trait Tables: Unpack + Zeroable {
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

/// The AVX-512 `Kernels::matmul_q8` for K-quant weights `rows` (the caller checked the arguments).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn matmul_q8_k<B: Tables>(
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
