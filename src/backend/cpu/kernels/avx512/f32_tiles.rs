//! AVX-512 tiles of the precise matmul: each 512-bit register holds 8 dequantized weights of two rows side by side
//! (row `r` in the low 256 bits, row `r + 1` in the high), so that each half is, lane for lane, the AVX2 path's
//! 8-lane vector for one output: per block, four FMAs per row pair and column (elements `8i..8i + 8`, `i` in
//! order), then each half summed by `numerics::sum_lanes`' tree. The results equal the scalar and AVX2 paths' bit
//! for bit, and the sequence per output is independent of the tile, so they are batch-invariant. A tile with an
//! odd number of rows pairs its last row with an all-zero block.

use std::arch::x86_64::*;

use bytemuck::Zeroable;

use super::{spread, store_pair_results, two_scales, MAX_PAIRS};
use half::{bf16, f16};

use crate::backend::cpu::kernels::avx2::lanes::{f16_pair, load_16, load_32, load_8f, load_8h};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::scalar;
use crate::backend::cpu::kernels::tiling::{run_tiles, tile_fns, TileTable};
use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QK};

/// One block of two rows as four registers: register `i` holds elements `8i..8i + 8` of each row.
type Dequantized = [__m512; 4];

trait Dequantize {
    /// All-zero is a valid block, used to pad a tile's odd last row.
    type Block: Copy + Zeroable;
    /// # Safety
    /// Needs the AVX-512 path's features.
    unsafe fn dequantize(b0: &Self::Block, b1: &Self::Block) -> Dequantized;
}

/// The four 8-byte chunks of one block of two rows, each as `[row 0's chunk | row 1's chunk]`: chunks 0 and 1 are
/// the low and high halves of `lo0` / `lo1`, chunks 2 and 3 those of `hi0` / `hi1`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn interleave_halves(lo0: __m128i, lo1: __m128i, hi0: __m128i, hi1: __m128i) -> [__m128i; 4] {
    [
        _mm_unpacklo_epi64(lo0, lo1),
        _mm_unpackhi_epi64(lo0, lo1),
        _mm_unpacklo_epi64(hi0, hi1),
        _mm_unpackhi_epi64(hi0, hi1),
    ]
}

/// The 32 nibbles of two 4-bit blocks in element order as four registers of 16 i32 (`[row 0 | row 1]` each).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn nibbles_i32(q0: &[u8; 16], q1: &[u8; 16]) -> [__m512i; 4] {
    let mask = _mm_set1_epi8(0x0f);
    let (x0, x1) = (load_16(q0), load_16(q1));
    let chunks = interleave_halves(
        _mm_and_si128(x0, mask),
        _mm_and_si128(x1, mask),
        _mm_and_si128(_mm_srli_epi16::<4>(x0), mask),
        _mm_and_si128(_mm_srli_epi16::<4>(x1), mask),
    );
    // No closure (`map`): it would not inherit this function's target features.
    let mut q = [_mm512_setzero_si512(); 4];
    for i in 0..4 {
        q[i] = _mm512_cvtepu8_epi32(chunks[i]);
    }
    q
}

struct Q4_0;
struct Q4_1;
struct Q8_0;
struct F32;
struct F16;
struct Bf16;

impl Dequantize for Q4_0 {
    type Block = BlockQ4_0;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dequantize(b0: &BlockQ4_0, b1: &BlockQ4_0) -> Dequantized {
        let d = spread::<0, 1>(two_scales(b0.d, b1.d));
        // d · (q − 8): the integer subtraction is exact, leaving one rounding, as in the scalar path.
        let q = nibbles_i32(&b0.qs, &b1.qs);
        let eight = _mm512_set1_epi32(8);
        let mut w = [_mm512_setzero_ps(); 4];
        for i in 0..4 {
            w[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(q[i], eight)));
        }
        w
    }
}

impl Dequantize for Q4_1 {
    type Block = BlockQ4_1;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dequantize(b0: &BlockQ4_1, b1: &BlockQ4_1) -> Dequantized {
        let dm = _mm_cvtph_ps(_mm_unpacklo_epi32(f16_pair(b0.d, b1.d), f16_pair(b0.m, b1.m)));
        let (d, m) = (spread::<0, 1>(dm), spread::<2, 3>(dm));
        let q = nibbles_i32(&b0.qs, &b1.qs);
        let mut w = [_mm512_setzero_ps(); 4];
        for i in 0..4 {
            w[i] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(q[i]), m);
        }
        w
    }
}

impl Dequantize for Q8_0 {
    type Block = BlockQ8_0;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dequantize(b0: &BlockQ8_0, b1: &BlockQ8_0) -> Dequantized {
        let d = spread::<0, 1>(two_scales(b0.d, b1.d));
        let (q0, q1) = (load_32(&b0.qs), load_32(&b1.qs));
        let chunks = interleave_halves(
            _mm256_castsi256_si128(q0),
            _mm256_castsi256_si128(q1),
            _mm256_extracti128_si256::<1>(q0),
            _mm256_extracti128_si256::<1>(q1),
        );
        let mut w = [_mm512_setzero_ps(); 4];
        for i in 0..4 {
            w[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(chunks[i])));
        }
        w
    }
}

impl Dequantize for F32 {
    type Block = [f32; QK];

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dequantize(b0: &[f32; QK], b1: &[f32; QK]) -> Dequantized {
        let (c0, c1) = (b0.as_chunks::<8>().0, b1.as_chunks::<8>().0);
        let mut w = [_mm512_setzero_ps(); 4];
        for i in 0..4 {
            w[i] = two_halves(load_8f(&c0[i]), load_8f(&c1[i]));
        }
        w
    }
}

impl Dequantize for F16 {
    type Block = [f16; QK];

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dequantize(b0: &[f16; QK], b1: &[f16; QK]) -> Dequantized {
        let (c0, c1) = (b0.as_chunks::<8>().0, b1.as_chunks::<8>().0);
        let mut w = [_mm512_setzero_ps(); 4];
        for i in 0..4 {
            w[i] = two_halves(load_8h(&c0[i]), load_8h(&c1[i]));
        }
        w
    }
}

impl Dequantize for Bf16 {
    type Block = [bf16; QK];

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dequantize(b0: &[bf16; QK], b1: &[bf16; QK]) -> Dequantized {
        let (c0, c1) = (b0.as_chunks::<8>().0, b1.as_chunks::<8>().0);
        let mut w = [_mm512_setzero_ps(); 4];
        for i in 0..4 {
            // SAFETY: each chunk covers 16 readable bytes; `loadu` has no alignment requirement.
            let (h0, h1) = unsafe { (_mm_loadu_si128(c0[i].as_ptr().cast()), _mm_loadu_si128(c1[i].as_ptr().cast())) };
            // bf16 → f32 exactly: the 16 bits become an f32's top half.
            let wide = _mm512_cvtepu16_epi32(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(h0), h1));
            w[i] = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(wide));
        }
        w
    }
}

/// `[lo | hi]` as one register.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn two_halves(lo: __m256, hi: __m256) -> __m512 {
    let lo = _mm512_castpd256_pd512(_mm256_castps_pd(lo));
    _mm512_castpd_ps(_mm512_insertf64x4::<1>(lo, _mm256_castps_pd(hi)))
}

/// The 8 activations `x` in both halves.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn broadcast_8(x: &[f32; 8]) -> __m512 {
    _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(load_8f(x))))
}

/// One `R × C` tile (see `tiling::TileFn` for the slice shapes; activation "blocks" are 32 floats).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile<F: Dequantize, const R: usize, const C: usize>(
    rows: &[F::Block],
    cols: &[[f32; QK]],
    n_blocks: usize,
    out: &mut [f32],
) {
    // No closures here: a closure does not inherit this function's target features, so intrinsics in one
    // would not inline.
    let mut row_blocks: [&[F::Block]; R] = [&[]; R];
    for (r, row) in row_blocks.iter_mut().enumerate() {
        *row = &rows[r * n_blocks..][..n_blocks];
    }
    let mut col_blocks: [&[[f32; QK]]; C] = [&[]; C];
    for (c, col) in col_blocks.iter_mut().enumerate() {
        *col = &cols[c * n_blocks..][..n_blocks];
    }
    let zero = _mm512_setzero_ps();
    let padding = F::Block::zeroed();
    let mut acc = [[zero; MAX_PAIRS]; C];
    let mut w = [[zero; 4]; MAX_PAIRS];
    for b in 0..n_blocks {
        for p in 0..R.div_ceil(2) {
            let second = if 2 * p + 1 < R { &row_blocks[2 * p + 1][b] } else { &padding };
            // SAFETY: this function has the features F's functions need.
            w[p] = unsafe { F::dequantize(&row_blocks[2 * p][b], second) };
        }
        for c in 0..C {
            let (a, _) = col_blocks[c][b].as_chunks::<8>();
            for i in 0..4 {
                let x = broadcast_8(&a[i]);
                for p in 0..R.div_ceil(2) {
                    acc[c][p] = _mm512_fmadd_ps(w[p][i], x, acc[c][p]);
                }
            }
        }
    }
    store_pair_results::<R, C>(&acc, out);
}

/// Rows per tile for every batch. Four rows (two pairs) by eight columns: 16 accumulators and 8 dequantized
/// registers fit the 32 zmm registers, and each dequantized block (for F16, two conversions and an insert per
/// register, on the FMAs' pipes) serves eight columns' FMAs instead of four.
const BATCH_ROWS: usize = 4;
type Tiles<W> = TileTable<W, [f32; QK], 4, 8>;
static Q4_0_TILES: Tiles<BlockQ4_0> =
    TileTable { fns: tile_fns!(tile, Q4_0, [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]), batch_rows: BATCH_ROWS };
static Q4_1_TILES: Tiles<BlockQ4_1> =
    TileTable { fns: tile_fns!(tile, Q4_1, [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]), batch_rows: BATCH_ROWS };
static Q8_0_TILES: Tiles<BlockQ8_0> =
    TileTable { fns: tile_fns!(tile, Q8_0, [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]), batch_rows: BATCH_ROWS };
static F32_TILES: Tiles<[f32; QK]> =
    TileTable { fns: tile_fns!(tile, F32, [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]), batch_rows: BATCH_ROWS };
static F16_TILES: Tiles<[f16; QK]> =
    TileTable { fns: tile_fns!(tile, F16, [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]), batch_rows: BATCH_ROWS };
static BF16_TILES: Tiles<[bf16; QK]> =
    TileTable { fns: tile_fns!(tile, Bf16, [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]), batch_rows: BATCH_ROWS };

/// The AVX-512 `Kernels::matmul_f32` (arguments checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn matmul_f32(w: &WeightMatrix, act: &[f32], n_cols: usize, out: &mut OutRows) {
    let n = w.blocks_per_row();
    let flat = act;
    let act = act.as_chunks::<QK>().0;
    // SAFETY: the tables' functions need the features this function is compiled with.
    unsafe {
        match w.data() {
            WeightData::Q4_0(b) => run_tiles(&Q4_0_TILES, b, n, act, n_cols, out),
            WeightData::Q4_1(b) => run_tiles(&Q4_1_TILES, b, n, act, n_cols, out),
            WeightData::Q8_0(b) => run_tiles(&Q8_0_TILES, b, n, act, n_cols, out),
            WeightData::F32(v) => run_tiles(&F32_TILES, v.as_chunks::<QK>().0, n, act, n_cols, out),
            WeightData::F16(v) => run_tiles(&F16_TILES, v.as_chunks::<QK>().0, n, act, n_cols, out),
            WeightData::Bf16(v) => run_tiles(&BF16_TILES, v.as_chunks::<QK>().0, n, act, n_cols, out),
            // The types this path has no tiles for yet: the scalar kernel (the same arithmetic).
            _ => scalar::matmul_f32(w, flat, n_cols, out),
        }
    }
}
