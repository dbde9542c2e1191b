//! AVX2 tiles of the quantized matmul: one 32-weight block per 256-bit register, integer dot products with
//! `vpmaddubsw` (u8 × i8 → i16 pairs) and `vpmaddwd` (i16 pairs → i32), eight f32 partial sums per output.
//!
//! Per output `(c, r)` and block: the integer dot of the block's 32 products as 8 lane sums (exact), converted to
//! f32, times `dw·da`, added with one FMA into the output's 8-lane accumulator; Q4_1 then adds `mw·sa` into lane
//! 0 with a second FMA. After the last block the 8 lanes are summed by `lanes::hsum`. Nothing in that sequence
//! depends on the tile, which makes the results batch-invariant (see `tiling`).

use std::arch::x86_64::*;
use std::mem::{size_of, MaybeUninit};
use std::ops::Range;

use super::k_tiles;
use super::lanes::{f16_pair, hsum, load_16, load_32, prefetch};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::scalar;
use crate::backend::cpu::kernels::tiling::{
    run_tiles, tile_fns, walk_prepared_columns, PreparedTileFn, TileTable, PREFETCH_TILES,
};
use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};

/// One weight block, unpacked.
#[derive(Clone, Copy)]
struct RowBlock {
    /// The 32 weights in activation order as the unsigned operand of `vpmaddubsw`: Q4 nibbles (0..=15), or for
    /// Q8_0 their absolute values (the signs move to the activations, as `vpmaddubsw` needs one unsigned side).
    q: __m256i,
    /// Q8_0: the signed weights, whose signs `vpsignb` applies to the activations.
    signs: __m256i,
    /// `dw` in every lane.
    d: __m256,
    /// Q4_1: `mw` in every lane.
    m: __m256,
}

/// One activation block, prepared.
#[derive(Clone, Copy)]
struct ColBlock {
    /// The 32 activations (signed, `-127..=127`).
    q: __m256i,
    /// Q4_0: `8 · Σ` of the 4 activations of each i32 lane, subtracted to apply the weights' offset of 8.
    offset: __m256i,
    /// `da` in every lane.
    d: __m256,
    /// `sa` in lane 0, zero elsewhere: Q4_1's `mw·sa` lands once per block.
    s: __m256,
}

/// What differs between weight types.
trait Format {
    type Block;
    /// Whether blocks carry a minimum (`+ mw·sa`).
    const HAS_MIN: bool;
    /// # Safety
    /// Needs AVX2, FMA and F16C.
    unsafe fn row_block(block: &Self::Block) -> RowBlock;
    /// The exact integer dot of one weight block and one activation block, as 8 lane sums.
    ///
    /// # Safety
    /// Needs AVX2, FMA and F16C.
    unsafe fn dot(w: &RowBlock, a: &ColBlock) -> __m256i;
}

/// The 16 bytes of a 4-bit block as 32 weights 0..=15 in activation order: low nibbles (elements 0..16), then
/// high nibbles (elements 16..32).
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_nibbles(qs: &[u8; 16]) -> __m256i {
    let x = load_16(qs);
    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(x), x), _mm256_set1_epi8(0x0f))
}

/// `Σ` of each group of 4 adjacent u8 × i8 products, as 8 i32 lanes. `vpmaddubsw` saturates its i16 pair sums,
/// which cannot happen here: |u| ≤ 128 and |i| ≤ 127 keep every pair within ±32512.
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_u8_i8(u: __m256i, i: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, i), _mm256_set1_epi16(1))
}

/// The 32 five-bit values (0..=31) of a Q5_0 / Q5_1 block in activation order: the nibbles, with bit `k` of `qh`
/// as element `k`'s fifth bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn unpack_five_bits(qs: &[u8; 16], qh: &[u8; 4]) -> __m256i {
    // Byte k of the register sees byte k / 8 of qh, tests its bit k mod 8, and becomes 0x10 where it is set.
    let bits = _mm256_set1_epi32(i32::from_le_bytes(*qh));
    let spread = _mm256_shuffle_epi8(
        bits,
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
    _mm256_or_si256(unpack_nibbles(qs), _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

struct Q4_0;
struct Q4_1;
struct Q5_0;
struct Q5_1;
struct Q8_0;

impl Format for Q4_0 {
    type Block = BlockQ4_0;
    const HAS_MIN: bool = false;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn row_block(b: &BlockQ4_0) -> RowBlock {
        let d = _mm256_broadcastss_ps(_mm_cvtph_ps(f16_pair(b.d, half::f16::ZERO)));
        RowBlock { q: unpack_nibbles(&b.qs), signs: _mm256_setzero_si256(), d, m: _mm256_setzero_ps() }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot(w: &RowBlock, a: &ColBlock) -> __m256i {
        // Σ (q − 8)·x = Σ q·x − 8·Σ x, exactly, in integers.
        _mm256_sub_epi32(dot_u8_i8(w.q, a.q), a.offset)
    }
}

impl Format for Q4_1 {
    type Block = BlockQ4_1;
    const HAS_MIN: bool = true;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn row_block(b: &BlockQ4_1) -> RowBlock {
        let dm = _mm_cvtph_ps(f16_pair(b.d, b.m));
        RowBlock {
            q: unpack_nibbles(&b.qs),
            signs: _mm256_setzero_si256(),
            d: _mm256_broadcastss_ps(dm),
            m: _mm256_broadcastss_ps(_mm_movehdup_ps(dm)),
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot(w: &RowBlock, a: &ColBlock) -> __m256i {
        dot_u8_i8(w.q, a.q)
    }
}

impl Format for Q5_0 {
    type Block = BlockQ5_0;
    const HAS_MIN: bool = false;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn row_block(b: &BlockQ5_0) -> RowBlock {
        let d = _mm256_broadcastss_ps(_mm_cvtph_ps(f16_pair(b.d, half::f16::ZERO)));
        RowBlock { q: unpack_five_bits(&b.qs, &b.qh), signs: _mm256_setzero_si256(), d, m: _mm256_setzero_ps() }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot(w: &RowBlock, a: &ColBlock) -> __m256i {
        // Σ (q − 16)·x = Σ q·x − 2·(8·Σ x), exactly.
        _mm256_sub_epi32(dot_u8_i8(w.q, a.q), _mm256_slli_epi32::<1>(a.offset))
    }
}

impl Format for Q5_1 {
    type Block = BlockQ5_1;
    const HAS_MIN: bool = true;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn row_block(b: &BlockQ5_1) -> RowBlock {
        let dm = _mm_cvtph_ps(f16_pair(b.d, b.m));
        RowBlock {
            q: unpack_five_bits(&b.qs, &b.qh),
            signs: _mm256_setzero_si256(),
            d: _mm256_broadcastss_ps(dm),
            m: _mm256_broadcastss_ps(_mm_movehdup_ps(dm)),
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot(w: &RowBlock, a: &ColBlock) -> __m256i {
        dot_u8_i8(w.q, a.q)
    }
}

impl Format for Q8_0 {
    type Block = BlockQ8_0;
    const HAS_MIN: bool = false;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn row_block(b: &BlockQ8_0) -> RowBlock {
        let signs = load_32(&b.qs);
        let d = _mm256_broadcastss_ps(_mm_cvtph_ps(f16_pair(b.d, half::f16::ZERO)));
        // |−128| reads as 128 when taken as unsigned, which is right.
        RowBlock { q: _mm256_abs_epi8(signs), signs, d, m: _mm256_setzero_ps() }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot(w: &RowBlock, a: &ColBlock) -> __m256i {
        // w·x = |w| · (sign(w)·x); vpsignb also zeroes x where w is 0. Exact while x > −128 (BlockQ8A's invariant).
        dot_u8_i8(w.q, _mm256_sign_epi8(a.q, w.signs))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn col_block(a: &BlockQ8A) -> ColBlock {
    let q = load_32(&a.qs);
    ColBlock {
        q,
        offset: dot_u8_i8(_mm256_set1_epi8(8), q),
        d: _mm256_set1_ps(a.d),
        s: _mm256_zextps128_ps256(_mm_set_ss(a.s)),
    }
}

/// One `R × C` tile (see `tiling::TileFn` for the slice shapes).
#[target_feature(enable = "avx2,fma,f16c")]
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
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    let ahead = PREFETCH_TILES * R * n_blocks;
    for b in 0..n_blocks {
        let mut blocks: [&F::Block; R] = [&row_blocks[0][b]; R];
        for r in 0..R {
            blocks[r] = &row_blocks[r][b];
            prefetch((blocks[r] as *const F::Block).wrapping_add(ahead).cast(), size_of::<F::Block>());
        }
        let mut cols: [&BlockQ8A; C] = [&col_blocks[0][b]; C];
        for c in 0..C {
            cols[c] = &col_blocks[c][b];
        }
        accumulate_unpacked::<F, R, C>(&mut acc, &unpack_rows::<F, R>(blocks), cols);
    }
    for c in 0..C {
        for r in 0..R {
            out[c * R + r] = hsum(acc[c][r]);
        }
    }
}

/// Unpacks one block of each of `R` rows.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_rows<F: Format, const R: usize>(blocks: [&F::Block; R]) -> [RowBlock; R] {
    let (zero, zero_i) = (_mm256_setzero_ps(), _mm256_setzero_si256());
    let mut w = [RowBlock { q: zero_i, signs: zero_i, d: zero, m: zero }; R];
    for r in 0..R {
        // SAFETY: this function has the features F's functions need.
        w[r] = unsafe { F::row_block(blocks[r]) };
    }
    w
}

/// Adds one block of every row (unpacked) and column of a tile to the accumulators `acc[c][r]`.
#[target_feature(enable = "avx2,fma,f16c")]
fn accumulate_unpacked<F: Format, const R: usize, const C: usize>(
    acc: &mut [[__m256; R]; C],
    w: &[RowBlock; R],
    cols: [&BlockQ8A; C],
) {
    for c in 0..C {
        let a = col_block(cols[c]);
        for r in 0..R {
            // SAFETY: this function has the features F's functions need.
            let p = unsafe { F::dot(&w[r], &a) };
            let scale = _mm256_mul_ps(w[r].d, a.d);
            acc[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[c][r]);
            if F::HAS_MIN {
                acc[c][r] = _mm256_fmadd_ps(w[r].m, a.s, acc[c][r]);
            }
        }
    }
}

/// Most blocks per row a row tile's buffer holds: rows of up to 4096 weights (SmolLM2's longest has 1536),
/// `R × 128` bytes per block on the stack. Longer rows take the tile functions.
const MAX_PREPARED_BLOCKS: usize = 128;

/// The `tiling::RowTileFn` of this path: `R` rows unpacked once into an L1-resident buffer, then every column tile
/// of `cols` against them, instead of unpacking the rows again for each column tile.
#[target_feature(enable = "avx2,fma,f16c")]
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
    let mut prepared = [const { MaybeUninit::<[RowBlock; R]>::uninit() }; MAX_PREPARED_BLOCKS];
    let ahead = PREFETCH_TILES * R * n_blocks;
    for (b, slot) in prepared[..n_blocks].iter_mut().enumerate() {
        let blocks: [&F::Block; R] = std::array::from_fn(|r| &rows[r * n_blocks + b]);
        for block in blocks {
            prefetch((block as *const F::Block).wrapping_add(ahead).cast(), size_of::<F::Block>());
        }
        slot.write(unpack_rows::<F, R>(blocks));
    }
    // SAFETY: entries 0..n_blocks were written just above; MaybeUninit<T> has T's layout.
    let prepared: &[[RowBlock; R]] = unsafe { std::slice::from_raw_parts(prepared.as_ptr().cast(), n_blocks) };
    let fns: [PreparedTileFn<_, BlockQ8A>; 4] =
        [prepared_tile::<F, R, 1>, prepared_tile::<F, R, 2>, prepared_tile::<F, R, 3>, prepared_tile::<F, R, 4>];
    // SAFETY: the functions need the features this function is compiled with.
    unsafe { walk_prepared_columns::<_, _, R, 4>(&fns, prepared, act, n_blocks, cols, r0, out) };
    true
}

/// `tile` with the rows already unpacked (`prepared[b][r]`: block `b` of row `r`).
#[target_feature(enable = "avx2,fma,f16c")]
fn prepared_tile<F: Format, const R: usize, const C: usize>(
    prepared: &[[RowBlock; R]],
    cols: &[BlockQ8A],
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    for (b, w) in prepared.iter().enumerate() {
        let mut col: [&BlockQ8A; C] = [&cols[b]; C];
        for c in 0..C {
            col[c] = &cols[c * n_blocks + b];
        }
        accumulate_unpacked::<F, R, C>(&mut acc, w, col);
    }
    for c in 0..C {
        for r in 0..R {
            out[c * R + r] = hsum(acc[c][r]);
        }
    }
}

/// Rows per tile for batches of several columns: a 4 × 4 tile's 16 accumulators alone fill the 16 ymm registers,
/// and 2 × 4 measured 25-35% faster for 64 columns (4 rows stay for the matvec, where they were 10% faster than 2).
const BATCH_ROWS: usize = 2;
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

/// The AVX2 `Kernels::matmul_q8` (arguments checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn matmul_q8(
    w: &WeightMatrix,
    act: &[BlockQ8A],
    n_cols: usize,
    out: &mut OutRows,
) {
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
