//! AVX-512 VNNI tiles of the quantized matmul: each 512-bit register holds one 32-weight block of two weight rows
//! side by side (row `r` in the low 256 bits, row `r + 1` in the high), so that each half is, lane for lane, the
//! 8-lane vector of the AVX2 path and of `numerics` for one output. Integer dot products with `vpdpbusd` (u8 × i8,
//! four products summed into each i32 lane, without saturation): lane `j` of a half is the exact dot of the block's
//! elements `4j..4j + 4`.
//!
//! Per output `(c, r)` and block, in each half: the lane sums converted to f32, times `dw·da`, added with one FMA
//! into the output's 8 lanes; Q4_1 and Q5_1 then add `mw · [sa, 0, …, 0]` with a second FMA. After the last block each
//! half is summed by `numerics::sum_lanes`' tree. So the wider register computes two outputs at once and never
//! changes how one is summed: the results equal the scalar and AVX2 paths' bit for bit, and nothing depends on
//! the tile, which makes them batch-invariant (see `tiling`). A tile with an odd number of rows pairs its last
//! row with an all-zero block.
//!
//! Signedness: `vpdpbusd` multiplies unsigned by signed bytes. Q4 and Q5 weights are unsigned (0..=15, 0..=31) and
//! meet the signed activations directly; Q4_0's offset of 8 and Q5_0's of 16 are folded into the integer
//! accumulator's start (`−8 · Σ x`, `−16 · Σ x`). Q8_0
//! weights are signed, so the activations are offset instead: `(x + 128)` is a valid u8 and the accumulator starts
//! at `−128 · Σ w`, so `Σ (x + 128)·w − 128·Σ w = Σ x·w`, exact for every input (unlike the sign trick).

use std::arch::x86_64::*;
use std::mem::{size_of, MaybeUninit};
use std::ops::Range;

use bytemuck::Zeroable;

use super::{k_tiles, load_two_32, spread, store_pair_results, two_scales, MAX_PAIRS};
use crate::backend::cpu::kernels::avx2;
use crate::backend::cpu::kernels::avx2::lanes::{f16_pair, load_16, load_32, prefetch};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::scalar;
use crate::backend::cpu::kernels::tiling::{
    run_tiles, tile_fns, walk_prepared_columns, PreparedTileFn, TileTable, PREFETCH_TILES,
};
use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};

/// One block of two rows, unpacked: row `r` in lanes 0..8, row `r + 1` in lanes 8..16.
#[derive(Clone, Copy)]
struct RowPair {
    /// 64 weights, each row's 32 in activation order: Q4 nibbles (0..=15) as the unsigned operand; Q8_0 weights as
    /// the signed one.
    q: __m512i,
    /// Q8_0: each i32 lane's `−128 · Σ` of its 4 weights, the integer dot's starting value.
    start: __m512i,
    /// `[dw_r ×8 | dw_r+1 ×8]`.
    d: __m512,
    /// Q4_1: `[mw_r ×8 | mw_r+1 ×8]`.
    m: __m512,
}

/// One activation block of one column, in both halves.
#[derive(Clone, Copy)]
struct ColBlock {
    /// The 32 activations twice: signed for Q4 weights; offset by 128 as the unsigned operand for Q8_0 weights.
    q: __m512i,
    /// Q4_0: each i32 lane's `−8 · Σ` of its 4 activations, the integer dot's starting value.
    start: __m512i,
    /// `da` in every lane.
    d: __m512,
    /// `[sa, 0 ×7 | sa, 0 ×7]`: Q4_1's `mw·sa` lands once per block and output.
    s: __m512,
}

/// What differs between weight types.
trait Format {
    /// All-zero is a valid block (scale 0), used to pad a tile's odd last row.
    type Block: Copy + Zeroable;
    /// Whether blocks carry a minimum (`+ mw·sa`).
    const HAS_MIN: bool;
    /// One block of each of two rows.
    ///
    /// # Safety
    /// Needs the AVX-512 path's features.
    unsafe fn row_pair(b0: &Self::Block, b1: &Self::Block) -> RowPair;
    /// One activation block, prepared for this weight type.
    ///
    /// # Safety
    /// Needs the AVX-512 path's features.
    unsafe fn col_block(a: &BlockQ8A) -> ColBlock;
    /// The exact integer dots of a row pair with an activation block, as 2 × 8 lane sums.
    ///
    /// # Safety
    /// Needs the AVX-512 path's features.
    unsafe fn dot(w: &RowPair, a: &ColBlock) -> __m512i;
}

/// The nibbles of two 4-bit blocks as 64 weights 0..=15 in activation order:
/// `[low(q0) | high(q0) | low(q1) | high(q1)]`, 16 bytes each.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_nibbles(q0: &[u8; 16], q1: &[u8; 16]) -> __m512i {
    let both = _mm512_castsi256_si512(_mm256_set_m128i(load_16(q1), load_16(q0)));
    let doubled = _mm512_shuffle_i64x2::<0b01_01_00_00>(both, both); // 128-bit lanes [q0, q0, q1, q1]
    let shifted = _mm512_srli_epi16::<4>(doubled);
    // 64-bit lanes 2, 3, 6, 7 (the second copy of each block) take the high nibbles.
    _mm512_and_si512(_mm512_mask_blend_epi64(0b1100_1100, doubled, shifted), _mm512_set1_epi8(0x0f))
}

/// The 32 activations of `a` in both halves.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn broadcast_activations(a: &BlockQ8A) -> __m512i {
    _mm512_broadcast_i64x4(load_32(&a.qs))
}

/// `da` in every lane and `[sa, 0 ×7 | sa, 0 ×7]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn activation_scales(a: &BlockQ8A) -> (__m512, __m512) {
    (_mm512_set1_ps(a.d), _mm512_maskz_mov_ps(0x0101, _mm512_set1_ps(a.s)))
}

/// The five-bit values of two 5-bit blocks, each in activation order: `[q0's 32 | q1's 32]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_five_bits(b0: (&[u8; 16], &[u8; 4]), b1: (&[u8; 16], &[u8; 4])) -> __m512i {
    let (low, high) = (avx2::unpack_five_bits(b0.0, b0.1), avx2::unpack_five_bits(b1.0, b1.1));
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high)
}

struct Q4_0;
struct Q4_1;
struct Q5_0;
struct Q5_1;
struct Q8_0;

impl Format for Q4_0 {
    type Block = BlockQ4_0;
    const HAS_MIN: bool = false;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn row_pair(b0: &BlockQ4_0, b1: &BlockQ4_0) -> RowPair {
        RowPair {
            q: unpack_nibbles(&b0.qs, &b1.qs),
            start: _mm512_setzero_si512(),
            d: spread::<0, 1>(two_scales(b0.d, b1.d)),
            m: _mm512_setzero_ps(),
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn col_block(a: &BlockQ8A) -> ColBlock {
        let q = broadcast_activations(a);
        let eight_sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(8), q);
        let (d, s) = activation_scales(a);
        ColBlock { q, start: _mm512_sub_epi32(_mm512_setzero_si512(), eight_sums), d, s }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot(w: &RowPair, a: &ColBlock) -> __m512i {
        _mm512_dpbusd_epi32(a.start, w.q, a.q)
    }
}

impl Format for Q4_1 {
    type Block = BlockQ4_1;
    const HAS_MIN: bool = true;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn row_pair(b0: &BlockQ4_1, b1: &BlockQ4_1) -> RowPair {
        // [d0, d1, m0, m1]. Not [d0, m0, d1, m1]: then `d` and the activations' `d` would be spread by the same
        // permutation, and LLVM multiplies the two 4-lane vectors before spreading, including lanes it considers
        // dead, which hold whatever bytes it loaded; denormal garbage there costs a microcode assist per multiply
        // (measured: 2.5× slower matvecs, depending on the data).
        let dm = _mm_cvtph_ps(_mm_unpacklo_epi32(f16_pair(b0.d, b1.d), f16_pair(b0.m, b1.m)));
        RowPair {
            q: unpack_nibbles(&b0.qs, &b1.qs),
            start: _mm512_setzero_si512(),
            d: spread::<0, 1>(dm),
            m: spread::<2, 3>(dm),
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn col_block(a: &BlockQ8A) -> ColBlock {
        let (d, s) = activation_scales(a);
        ColBlock { q: broadcast_activations(a), start: _mm512_setzero_si512(), d, s }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot(w: &RowPair, a: &ColBlock) -> __m512i {
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.q, a.q)
    }
}

impl Format for Q5_0 {
    type Block = BlockQ5_0;
    const HAS_MIN: bool = false;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn row_pair(b0: &BlockQ5_0, b1: &BlockQ5_0) -> RowPair {
        RowPair {
            q: unpack_five_bits((&b0.qs, &b0.qh), (&b1.qs, &b1.qh)),
            start: _mm512_setzero_si512(),
            d: spread::<0, 1>(two_scales(b0.d, b1.d)),
            m: _mm512_setzero_ps(),
        }
    }

    /// Q5_0's offset of 16 folded into the accumulator's start, as Q4_0's 8 is.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn col_block(a: &BlockQ8A) -> ColBlock {
        let q = broadcast_activations(a);
        let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(16), q);
        let (d, s) = activation_scales(a);
        ColBlock { q, start: _mm512_sub_epi32(_mm512_setzero_si512(), sums), d, s }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot(w: &RowPair, a: &ColBlock) -> __m512i {
        _mm512_dpbusd_epi32(a.start, w.q, a.q)
    }
}

impl Format for Q5_1 {
    type Block = BlockQ5_1;
    const HAS_MIN: bool = true;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn row_pair(b0: &BlockQ5_1, b1: &BlockQ5_1) -> RowPair {
        // [d0, d1, m0, m1], as for Q4_1.
        let dm = _mm_cvtph_ps(_mm_unpacklo_epi32(f16_pair(b0.d, b1.d), f16_pair(b0.m, b1.m)));
        RowPair {
            q: unpack_five_bits((&b0.qs, &b0.qh), (&b1.qs, &b1.qh)),
            start: _mm512_setzero_si512(),
            d: spread::<0, 1>(dm),
            m: spread::<2, 3>(dm),
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn col_block(a: &BlockQ8A) -> ColBlock {
        let (d, s) = activation_scales(a);
        ColBlock { q: broadcast_activations(a), start: _mm512_setzero_si512(), d, s }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot(w: &RowPair, a: &ColBlock) -> __m512i {
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.q, a.q)
    }
}

impl Format for Q8_0 {
    type Block = BlockQ8_0;
    const HAS_MIN: bool = false;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn row_pair(b0: &BlockQ8_0, b1: &BlockQ8_0) -> RowPair {
        let q = load_two_32(&b0.qs, &b1.qs);
        let sums_128 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), q);
        RowPair {
            q,
            start: _mm512_sub_epi32(_mm512_setzero_si512(), sums_128),
            d: spread::<0, 1>(two_scales(b0.d, b1.d)),
            m: _mm512_setzero_ps(),
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn col_block(a: &BlockQ8A) -> ColBlock {
        let (d, s) = activation_scales(a);
        // x + 128 as u8 is x with its top bit flipped.
        let q = _mm512_xor_si512(broadcast_activations(a), _mm512_set1_epi8(-128));
        ColBlock { q, start: _mm512_setzero_si512(), d, s }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot(w: &RowPair, a: &ColBlock) -> __m512i {
        _mm512_dpbusd_epi32(w.start, a.q, w.q)
    }
}

/// Unpacks one block of each of `R` rows into `R.div_ceil(2)` pairs, an odd last row paired with a zero block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_rows<F: Format, const R: usize>(blocks: [&F::Block; R]) -> [RowPair; MAX_PAIRS] {
    let (zero, zero_i) = (_mm512_setzero_ps(), _mm512_setzero_si512());
    let mut w = [RowPair { q: zero_i, start: zero_i, d: zero, m: zero }; MAX_PAIRS];
    let padding = F::Block::zeroed();
    for p in 0..R.div_ceil(2) {
        let second = if 2 * p + 1 < R { blocks[2 * p + 1] } else { &padding };
        // SAFETY: this function has the features F's functions need.
        w[p] = unsafe { F::row_pair(blocks[2 * p], second) };
    }
    w
}

/// Adds one block of every row pair (unpacked) and column of an `R × C` tile to the accumulators `acc[c][p]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn accumulate_unpacked<F: Format, const R: usize, const C: usize>(
    acc: &mut [[__m512; MAX_PAIRS]; C],
    w: &[RowPair; MAX_PAIRS],
    cols: [&BlockQ8A; C],
) {
    for c in 0..C {
        // SAFETY: this function has the features F's functions need.
        let a = unsafe { F::col_block(cols[c]) };
        for p in 0..R.div_ceil(2) {
            // SAFETY: as above.
            let dot = unsafe { F::dot(&w[p], &a) };
            let scale = _mm512_mul_ps(w[p].d, a.d);
            acc[c][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[c][p]);
            if F::HAS_MIN {
                acc[c][p] = _mm512_fmadd_ps(w[p].m, a.s, acc[c][p]);
            }
        }
    }
}

/// One `R × C` tile (see `tiling::TileFn` for the slice shapes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile<F: Format, const R: usize, const C: usize>(
    rows: &[F::Block],
    cols: &[BlockQ8A],
    n_blocks: usize,
    out: &mut [f32],
) {
    // No closures here: a closure does not inherit this function's target features, so intrinsics in one
    // would not inline.
    let mut row_blocks: [&[F::Block]; R] = [&[]; R];
    for (r, row) in row_blocks.iter_mut().enumerate() {
        *row = &rows[r * n_blocks..][..n_blocks];
    }
    let mut col_blocks: [&[BlockQ8A]; C] = [&[]; C];
    for (c, col) in col_blocks.iter_mut().enumerate() {
        *col = &cols[c * n_blocks..][..n_blocks];
    }
    let mut acc = [[_mm512_setzero_ps(); MAX_PAIRS]; C];
    let ahead = PREFETCH_TILES * R * n_blocks;
    for b in 0..n_blocks {
        let mut blocks: [&F::Block; R] = [&row_blocks[0][b]; R];
        for r in 0..R {
            blocks[r] = &row_blocks[r][b];
            prefetch((blocks[r] as *const F::Block).wrapping_add(ahead).cast(), size_of::<F::Block>());
        }
        let mut col: [&BlockQ8A; C] = [&col_blocks[0][b]; C];
        for c in 0..C {
            col[c] = &col_blocks[c][b];
        }
        accumulate_unpacked::<F, R, C>(&mut acc, &unpack_rows::<F, R>(blocks), col);
    }
    store_pair_results::<R, C>(&acc, out);
}

/// Most blocks per row a row tile's buffer holds: rows of up to 4096 weights (SmolLM2's longest has 1536), 512
/// bytes per block on the stack. Longer rows take the tile functions.
const MAX_PREPARED_BLOCKS: usize = 128;

/// The `tiling::RowTileFn` of this path: `R` rows unpacked once into an L1-resident buffer, then every column tile
/// of `cols` against them. What it saves is the nibble unpacking and scale conversion a tile repeats for each of
/// its column tiles.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn row_tile<F: Format, const R: usize>(
    rows: &[F::Block],
    n_blocks: usize,
    act: &[BlockQ8A],
    cols: Range<usize>,
    r0: usize,
    out: &mut OutRows,
) -> bool {
    if n_blocks > MAX_PREPARED_BLOCKS {
        return false;
    }
    let mut prepared = [const { MaybeUninit::<[RowPair; MAX_PAIRS]>::uninit() }; MAX_PREPARED_BLOCKS];
    let ahead = PREFETCH_TILES * R * n_blocks;
    for (b, slot) in prepared[..n_blocks].iter_mut().enumerate() {
        let blocks: [&F::Block; R] = std::array::from_fn(|r| &rows[r * n_blocks + b]);
        for block in blocks {
            prefetch((block as *const F::Block).wrapping_add(ahead).cast(), size_of::<F::Block>());
        }
        slot.write(unpack_rows::<F, R>(blocks));
    }
    // SAFETY: entries 0..n_blocks were written just above; MaybeUninit<T> has T's layout.
    let prepared: &[[RowPair; MAX_PAIRS]] = unsafe { std::slice::from_raw_parts(prepared.as_ptr().cast(), n_blocks) };
    let fns: [PreparedTileFn<_, BlockQ8A>; 4] =
        [prepared_tile::<F, R, 1>, prepared_tile::<F, R, 2>, prepared_tile::<F, R, 3>, prepared_tile::<F, R, 4>];
    // SAFETY: the functions need the features this function is compiled with.
    unsafe { walk_prepared_columns::<_, _, R, 4>(&fns, prepared, act, n_blocks, cols, r0, out) };
    true
}

/// `tile` with the rows already unpacked (`prepared[b]`: block `b` of the tile's row pairs).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn prepared_tile<F: Format, const R: usize, const C: usize>(
    prepared: &[[RowPair; MAX_PAIRS]],
    cols: &[BlockQ8A],
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm512_setzero_ps(); MAX_PAIRS]; C];
    for (b, w) in prepared.iter().enumerate() {
        let mut col: [&BlockQ8A; C] = [&cols[b]; C];
        for c in 0..C {
            col[c] = &cols[c * n_blocks + b];
        }
        accumulate_unpacked::<F, R, C>(&mut acc, w, col);
    }
    store_pair_results::<R, C>(&acc, out);
}

/// Rows per tile for every batch: 4 × 4 tiles (16 accumulators of the 32 zmm registers). On our development Xeon,
/// 2 × 8, 3 × 8 and 6 × 4 were slower and 3 × 6 and 4 × 6 within the noise of its shared cores.
const BATCH_ROWS: usize = 4;
static Q4_0_TILES: TileTable<BlockQ4_0, BlockQ8A, 4, 4> = TileTable {
    fns: tile_fns!(tile, Q4_0, [1, 2, 3, 4], [1, 2, 3, 4]),
    batch_rows: BATCH_ROWS,
    row_tiles: Some([row_tile::<Q4_0, 1>, row_tile::<Q4_0, 2>, row_tile::<Q4_0, 3>, row_tile::<Q4_0, 4>]),
};
static Q4_1_TILES: TileTable<BlockQ4_1, BlockQ8A, 4, 4> = TileTable {
    fns: tile_fns!(tile, Q4_1, [1, 2, 3, 4], [1, 2, 3, 4]),
    batch_rows: BATCH_ROWS,
    row_tiles: Some([row_tile::<Q4_1, 1>, row_tile::<Q4_1, 2>, row_tile::<Q4_1, 3>, row_tile::<Q4_1, 4>]),
};
static Q5_0_TILES: TileTable<BlockQ5_0, BlockQ8A, 4, 4> = TileTable {
    fns: tile_fns!(tile, Q5_0, [1, 2, 3, 4], [1, 2, 3, 4]),
    batch_rows: BATCH_ROWS,
    row_tiles: Some([row_tile::<Q5_0, 1>, row_tile::<Q5_0, 2>, row_tile::<Q5_0, 3>, row_tile::<Q5_0, 4>]),
};
static Q5_1_TILES: TileTable<BlockQ5_1, BlockQ8A, 4, 4> = TileTable {
    fns: tile_fns!(tile, Q5_1, [1, 2, 3, 4], [1, 2, 3, 4]),
    batch_rows: BATCH_ROWS,
    row_tiles: Some([row_tile::<Q5_1, 1>, row_tile::<Q5_1, 2>, row_tile::<Q5_1, 3>, row_tile::<Q5_1, 4>]),
};
static Q8_0_TILES: TileTable<BlockQ8_0, BlockQ8A, 4, 4> = TileTable {
    fns: tile_fns!(tile, Q8_0, [1, 2, 3, 4], [1, 2, 3, 4]),
    batch_rows: BATCH_ROWS,
    row_tiles: Some([row_tile::<Q8_0, 1>, row_tile::<Q8_0, 2>, row_tile::<Q8_0, 3>, row_tile::<Q8_0, 4>]),
};

/// The AVX-512 `Kernels::matmul_q8` (arguments checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn matmul_q8(w: &WeightMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
    let n = w.blocks_per_row();
    // SAFETY: the tables' functions need the features this function is compiled with.
    unsafe {
        match w.data() {
            WeightData::Q4_0(b) => run_tiles(&Q4_0_TILES, b, n, act, n_cols, out),
            WeightData::Q4_1(b) => run_tiles(&Q4_1_TILES, b, n, act, n_cols, out),
            WeightData::Q5_0(b) => run_tiles(&Q5_0_TILES, b, n, act, n_cols, out),
            WeightData::Q5_1(b) => run_tiles(&Q5_1_TILES, b, n, act, n_cols, out),
            WeightData::Q8_0(b) => run_tiles(&Q8_0_TILES, b, n, act, n_cols, out),
            WeightData::Q2K(b) => k_tiles::matmul_q8_k(b, n, act, n_cols, out),
            WeightData::Q3K(b) => k_tiles::matmul_q8_k(b, n, act, n_cols, out),
            WeightData::Q4K(b) => k_tiles::matmul_q8_k(b, n, act, n_cols, out),
            WeightData::Q5K(b) => k_tiles::matmul_q8_k(b, n, act, n_cols, out),
            WeightData::Q6K(b) => k_tiles::matmul_q8_k(b, n, act, n_cols, out),
            // Float weights on every path: the scalar kernel.
            WeightData::F16(_) | WeightData::Bf16(_) | WeightData::F32(_) => scalar::matmul_q8(w, act, n_cols, out),
        }
    }
}
