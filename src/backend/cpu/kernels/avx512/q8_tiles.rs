//! AVX-512 VNNI tiles of the quantized matmul: two 32-weight blocks per 512-bit register, integer dot products
//! with `vpdpbusd` (u8 × i8, four products summed into each i32 lane, without saturation), sixteen f32 partial
//! sums per output (lanes 0..8 for the even block of a pair, 8..16 for the odd one).
//!
//! Per output `(c, r)` and block pair: the exact integer dot as 16 lane sums, converted to f32, times the lanes'
//! `dw·da`, added with one FMA into the output's 16-lane accumulator; Q4_1 then adds `mw·sa` into lanes 0 and 8
//! with a second FMA. A row with an odd number of blocks ends with a pair padded by an all-zero block. After the
//! last pair the 16 lanes are summed in a fixed order. Nothing in that sequence depends on the tile, which makes
//! the results batch-invariant (see `tiling`).
//!
//! Signedness: `vpdpbusd` multiplies unsigned by signed bytes. Q4 weights are unsigned nibbles and meet the signed
//! activations directly; Q4_0's offset of 8 is folded into the integer accumulator's start (`−8 · Σ x`). Q8_0
//! weights are signed, so the activations are offset instead: `(x + 128)` is a valid u8 and the accumulator starts
//! at `−128 · Σ w`, so `Σ (x + 128)·w − 128·Σ w = Σ x·w`, exact for every input (unlike the sign trick).

use std::arch::x86_64::*;
use std::mem::{size_of, MaybeUninit};
use std::ops::Range;

use bytemuck::Zeroable;
use half::f16;

use super::load_two_32;
use crate::backend::cpu::kernels::avx2::lanes::{f16_pair, load_16, prefetch};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::scalar;
use crate::backend::cpu::kernels::tiling::{
    run_tiles, tile_fns, walk_prepared_columns, PreparedTileFn, TileTable, PREFETCH_TILES,
};
use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0};

/// Two weight blocks of one row, unpacked.
#[derive(Clone, Copy)]
struct RowPair {
    /// 64 weights in activation order: Q4 nibbles (0..=15) as the unsigned operand; Q8_0 weights as the signed one.
    q: __m512i,
    /// Q8_0: each i32 lane's `−128 · Σ` of its 4 weights, the integer dot's starting value.
    start: __m512i,
    /// `[dw0 ×8 | dw1 ×8]`.
    d: __m512,
    /// Q4_1: `[mw0, 0 ×7 | mw1, 0 ×7]`.
    m: __m512,
}

/// Two activation blocks of one column, prepared.
#[derive(Clone, Copy)]
struct ColPair {
    /// 64 activations: signed for Q4 weights; offset by 128 as the unsigned operand for Q8_0 weights.
    q: __m512i,
    /// Q4_0: each i32 lane's `−8 · Σ` of its 4 activations, the integer dot's starting value.
    start: __m512i,
    /// `[da0 ×8 | da1 ×8]`.
    d: __m512,
    /// `[sa0 ×8 | sa1 ×8]`.
    s: __m512,
}

/// What differs between weight types.
trait Format {
    /// All-zero is a valid block (scale 0), used to pad a row's last pair.
    type Block: Copy + Zeroable;
    /// Whether blocks carry a minimum (`+ mw·sa`).
    const HAS_MIN: bool;
    /// # Safety
    /// Needs the AVX-512 path's features.
    unsafe fn row_pair(pair: &[Self::Block; 2]) -> RowPair;
    /// The pair of activation blocks, prepared for this weight type.
    ///
    /// # Safety
    /// Needs the AVX-512 path's features.
    unsafe fn col_pair(pair: &[BlockQ8A; 2]) -> ColPair;
    /// The exact integer dot of a weight pair and an activation pair, as 16 lane sums.
    ///
    /// # Safety
    /// Needs the AVX-512 path's features.
    unsafe fn dot(w: &RowPair, a: &ColPair) -> __m512i;
}

/// Lanes 0..8 from lane `LO` of `x`, lanes 8..16 from lane `HI`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn spread<const LO: i32, const HI: i32>(x: __m128) -> __m512 {
    let index = _mm512_set_epi32(HI, HI, HI, HI, HI, HI, HI, HI, LO, LO, LO, LO, LO, LO, LO, LO);
    _mm512_permutexvar_ps(index, _mm512_castps128_ps512(x))
}

/// Lane 0 from lane `LO` of `x`, lane 8 from lane `HI`, zeros elsewhere.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn spread_once<const LO: i32, const HI: i32>(x: __m128) -> __m512 {
    let index = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, HI, 0, 0, 0, 0, 0, 0, 0, LO);
    _mm512_maskz_permutexvar_ps(0x0101, index, _mm512_castps128_ps512(x))
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

/// The scales of two blocks, `[d0, d1, 0, 0]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn two_scales(d0: f16, d1: f16) -> __m128 {
    _mm_cvtph_ps(f16_pair(d0, d1))
}

/// The activations of a pair with `[da ×8 | da ×8]` and `[sa ×8 | sa ×8]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn load_col_pair([a0, a1]: &[BlockQ8A; 2]) -> (__m512i, __m512, __m512) {
    let ds = _mm_setr_ps(a0.d, a0.s, a1.d, a1.s);
    (load_two_32(&a0.qs, &a1.qs), spread::<0, 2>(ds), spread::<1, 3>(ds))
}

struct Q4_0;
struct Q4_1;
struct Q8_0;

impl Format for Q4_0 {
    type Block = BlockQ4_0;
    const HAS_MIN: bool = false;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn row_pair([b0, b1]: &[BlockQ4_0; 2]) -> RowPair {
        RowPair {
            q: unpack_nibbles(&b0.qs, &b1.qs),
            start: _mm512_setzero_si512(),
            d: spread::<0, 1>(two_scales(b0.d, b1.d)),
            m: _mm512_setzero_ps(),
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn col_pair(pair: &[BlockQ8A; 2]) -> ColPair {
        let (q, d, s) = load_col_pair(pair);
        let eight_sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(8), q);
        ColPair { q, start: _mm512_sub_epi32(_mm512_setzero_si512(), eight_sums), d, s }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot(w: &RowPair, a: &ColPair) -> __m512i {
        _mm512_dpbusd_epi32(a.start, w.q, a.q)
    }
}

impl Format for Q4_1 {
    type Block = BlockQ4_1;
    const HAS_MIN: bool = true;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn row_pair([b0, b1]: &[BlockQ4_1; 2]) -> RowPair {
        // [d0, d1, m0, m1]. Not [d0, m0, d1, m1]: then `d` and the activations' `d` would be spread by the same
        // permutation, and LLVM multiplies the two 4-lane vectors before spreading, including lanes it considers
        // dead, which hold whatever bytes it loaded; denormal garbage there costs a microcode assist per multiply
        // (measured: 2.5× slower matvecs, depending on the data).
        let dm = _mm_cvtph_ps(_mm_unpacklo_epi32(f16_pair(b0.d, b1.d), f16_pair(b0.m, b1.m)));
        RowPair {
            q: unpack_nibbles(&b0.qs, &b1.qs),
            start: _mm512_setzero_si512(),
            d: spread::<0, 1>(dm),
            m: spread_once::<2, 3>(dm),
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn col_pair(pair: &[BlockQ8A; 2]) -> ColPair {
        let (q, d, s) = load_col_pair(pair);
        ColPair { q, start: _mm512_setzero_si512(), d, s }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot(w: &RowPair, a: &ColPair) -> __m512i {
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.q, a.q)
    }
}

impl Format for Q8_0 {
    type Block = BlockQ8_0;
    const HAS_MIN: bool = false;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn row_pair([b0, b1]: &[BlockQ8_0; 2]) -> RowPair {
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
    unsafe fn col_pair(pair: &[BlockQ8A; 2]) -> ColPair {
        let (q, d, s) = load_col_pair(pair);
        // x + 128 as u8 is x with its top bit flipped.
        ColPair { q: _mm512_xor_si512(q, _mm512_set1_epi8(-128)), start: _mm512_setzero_si512(), d, s }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot(w: &RowPair, a: &ColPair) -> __m512i {
        _mm512_dpbusd_epi32(w.start, a.q, w.q)
    }
}

/// `Σ v` in a fixed order (halves, then `lanes::hsum`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn hsum(v: __m512) -> f32 {
    let halves =
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
    crate::backend::cpu::kernels::avx2::lanes::hsum(halves)
}

/// Unpacks one block pair of each of `R` rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack_rows<F: Format, const R: usize>(rows: [&[F::Block; 2]; R]) -> [RowPair; R] {
    let (zero, zero_i) = (_mm512_setzero_ps(), _mm512_setzero_si512());
    let mut w = [RowPair { q: zero_i, start: zero_i, d: zero, m: zero }; R];
    for r in 0..R {
        // SAFETY: this function has the features F's functions need.
        w[r] = unsafe { F::row_pair(rows[r]) };
    }
    w
}

/// Adds one block pair of every row (unpacked) and column of the tile to the accumulators `acc[c][r]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn accumulate_unpacked<F: Format, const R: usize, const C: usize>(
    acc: &mut [[__m512; R]; C],
    w: &[RowPair; R],
    cols: [&[BlockQ8A; 2]; C],
) {
    for c in 0..C {
        // SAFETY: this function has the features F's functions need.
        let a = unsafe { F::col_pair(cols[c]) };
        for r in 0..R {
            // SAFETY: as above.
            let p = unsafe { F::dot(&w[r], &a) };
            let scale = _mm512_mul_ps(w[r].d, a.d);
            acc[c][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[c][r]);
            if F::HAS_MIN {
                acc[c][r] = _mm512_fmadd_ps(w[r].m, a.s, acc[c][r]);
            }
        }
    }
}

/// Adds one block pair of every row and column of the tile to the accumulators `acc[c][r]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn accumulate_pair<F: Format, const R: usize, const C: usize>(
    acc: &mut [[__m512; R]; C],
    rows: [&[F::Block; 2]; R],
    cols: [&[BlockQ8A; 2]; C],
) {
    accumulate_unpacked::<F, R, C>(acc, &unpack_rows::<F, R>(rows), cols);
}

/// One `R × C` tile (see `tiling::TileFn` for the slice shapes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile<F: Format, const R: usize, const C: usize>(
    rows: &[F::Block],
    cols: &[BlockQ8A],
    n_blocks: usize,
    out: &mut [f32],
) {
    // Whole pairs, then (for an odd block count) a last pair padded with a zero block. No closures here: a
    // closure does not inherit this function's target features, so intrinsics in one would not inline.
    let n_pairs = n_blocks / 2;
    let mut row_pairs: [&[[F::Block; 2]]; R] = [&[]; R];
    for (r, pairs) in row_pairs.iter_mut().enumerate() {
        *pairs = rows[r * n_blocks..][..2 * n_pairs].as_chunks::<2>().0;
    }
    let mut col_pairs: [&[[BlockQ8A; 2]]; C] = [&[]; C];
    for (c, pairs) in col_pairs.iter_mut().enumerate() {
        *pairs = cols[c * n_blocks..][..2 * n_pairs].as_chunks::<2>().0;
    }
    // The padded last pair (all zeros when the block count is even, and then unused).
    let mut row_last = [[F::Block::zeroed(); 2]; R];
    let mut col_last = [[BlockQ8A::zeroed(); 2]; C];
    if n_blocks % 2 == 1 {
        for r in 0..R {
            row_last[r][0] = rows[r * n_blocks + n_blocks - 1];
        }
        for c in 0..C {
            col_last[c][0] = cols[c * n_blocks + n_blocks - 1];
        }
    }
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    let mut row_pair: [&[F::Block; 2]; R] = [&row_last[0]; R];
    let mut col_pair: [&[BlockQ8A; 2]; C] = [&col_last[0]; C];
    let ahead = PREFETCH_TILES * R * n_blocks;
    for p in 0..n_pairs {
        for r in 0..R {
            row_pair[r] = &row_pairs[r][p];
            let pair_start: *const F::Block = row_pair[r].as_ptr();
            prefetch(pair_start.wrapping_add(ahead).cast(), size_of::<[F::Block; 2]>());
        }
        for c in 0..C {
            col_pair[c] = &col_pairs[c][p];
        }
        accumulate_pair::<F, R, C>(&mut acc, row_pair, col_pair);
    }
    if n_blocks % 2 == 1 {
        for r in 0..R {
            row_pair[r] = &row_last[r];
        }
        for c in 0..C {
            col_pair[c] = &col_last[c];
        }
        accumulate_pair::<F, R, C>(&mut acc, row_pair, col_pair);
    }
    for c in 0..C {
        for r in 0..R {
            out[c * R + r] = hsum(acc[c][r]);
        }
    }
}

/// Most block pairs per row a row tile's buffer holds: rows of up to 4096 weights (SmolLM2's longest has 1536),
/// `R × 256` bytes per pair on the stack. Longer rows take the tile functions.
const MAX_PREPARED_PAIRS: usize = 64;

/// The `tiling::RowTileFn` of this path: `R` rows unpacked once into an L1-resident buffer (`R × 256` bytes per
/// block pair), then every column tile of `cols` against them. What it saves is the nibble unpacking and scale
/// conversion a tile repeats for each of its column tiles: about a third of a 4 × 4 tile's instructions.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn row_tile<F: Format, const R: usize>(
    rows: &[F::Block],
    n_blocks: usize,
    act: &[BlockQ8A],
    cols: Range<usize>,
    r0: usize,
    out: &mut OutRows,
) -> bool {
    let (n_pairs, odd) = (n_blocks / 2, n_blocks % 2 == 1);
    if n_pairs + usize::from(odd) > MAX_PREPARED_PAIRS {
        return false;
    }
    let mut prepared = [const { MaybeUninit::<[RowPair; R]>::uninit() }; MAX_PREPARED_PAIRS];
    let ahead = PREFETCH_TILES * R * n_blocks;
    for p in 0..n_pairs {
        let pair: [&[F::Block; 2]; R] =
            std::array::from_fn(|r| rows[r * n_blocks + 2 * p..].first_chunk::<2>().expect("two blocks"));
        for row_pair in pair {
            let pair_start: *const F::Block = row_pair.as_ptr();
            prefetch(pair_start.wrapping_add(ahead).cast(), size_of::<[F::Block; 2]>());
        }
        prepared[p].write(unpack_rows::<F, R>(pair));
    }
    if odd {
        // The padded last pair, as in `tile`.
        let mut last = [[F::Block::zeroed(); 2]; R];
        for r in 0..R {
            last[r][0] = rows[r * n_blocks + n_blocks - 1];
        }
        let pair: [&[F::Block; 2]; R] = std::array::from_fn(|r| &last[r]);
        prepared[n_pairs].write(unpack_rows::<F, R>(pair));
    }
    // SAFETY: entries 0..n_pairs (+1 when odd) were written just above; MaybeUninit<T> has T's layout.
    let prepared: &[[RowPair; R]] =
        unsafe { std::slice::from_raw_parts(prepared.as_ptr().cast(), n_pairs + usize::from(odd)) };
    let fns: [PreparedTileFn<_, BlockQ8A>; 4] =
        [prepared_tile::<F, R, 1>, prepared_tile::<F, R, 2>, prepared_tile::<F, R, 3>, prepared_tile::<F, R, 4>];
    // SAFETY: the functions need the features this function is compiled with.
    unsafe { walk_prepared_columns::<_, _, R, 4>(&fns, prepared, act, n_blocks, cols, r0, out) };
    true
}

/// `tile` with the rows already unpacked (`prepared[p][r]`: pair `p` of row `r`, the last one padded).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn prepared_tile<F: Format, const R: usize, const C: usize>(
    prepared: &[[RowPair; R]],
    cols: &[BlockQ8A],
    n_blocks: usize,
    out: &mut [f32],
) {
    let n_pairs = n_blocks / 2;
    let mut col_pairs: [&[[BlockQ8A; 2]]; C] = [&[]; C];
    for (c, pairs) in col_pairs.iter_mut().enumerate() {
        *pairs = cols[c * n_blocks..][..2 * n_pairs].as_chunks::<2>().0;
    }
    let mut col_last = [[BlockQ8A::zeroed(); 2]; C];
    if n_blocks % 2 == 1 {
        for c in 0..C {
            col_last[c][0] = cols[c * n_blocks + n_blocks - 1];
        }
    }
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    let mut col_pair: [&[BlockQ8A; 2]; C] = [&col_last[0]; C];
    for p in 0..n_pairs {
        for c in 0..C {
            col_pair[c] = &col_pairs[c][p];
        }
        accumulate_unpacked::<F, R, C>(&mut acc, &prepared[p], col_pair);
    }
    if n_blocks % 2 == 1 {
        for c in 0..C {
            col_pair[c] = &col_last[c];
        }
        accumulate_unpacked::<F, R, C>(&mut acc, &prepared[n_pairs], col_pair);
    }
    for c in 0..C {
        for r in 0..R {
            out[c * R + r] = hsum(acc[c][r]);
        }
    }
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
            WeightData::Q8_0(b) => run_tiles(&Q8_0_TILES, b, n, act, n_cols, out),
            WeightData::F32(_) => scalar::matmul_q8(w, act, n_cols, out),
        }
    }
}
