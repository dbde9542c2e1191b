//! AVX2 tiles of the precise matmul: each weight block dequantized once to 32 floats (four registers) and reused
//! across the tile's columns; per output, one 8-lane f32 accumulator updated by four FMAs per block, then
//! `lanes::hsum`. The sequence per output is independent of the tile, so results are batch-invariant.

use std::arch::x86_64::*;

use half::{bf16, f16};

use super::lanes::{f16_pair, hsum, load_16, load_32, load_8f, load_8h};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::scalar;
use crate::backend::cpu::kernels::tiling::{run_tiles, tile_fns, TileTable};
use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QK};

/// A block of 32 weights as four registers of 8 floats, in element order.
type Dequantized = [__m256; 4];

trait Dequantize {
    type Block;
    /// # Safety
    /// Needs AVX2, FMA and F16C.
    unsafe fn dequantize(block: &Self::Block) -> Dequantized;
}

/// The 32 nibbles of a 4-bit block, in element order, as four registers of 8 i32.
#[target_feature(enable = "avx2,fma,f16c")]
fn nibbles_i32(qs: &[u8; 16]) -> [__m256i; 4] {
    let x = load_16(qs);
    let low = _mm_and_si128(x, _mm_set1_epi8(0x0f));
    let high = _mm_and_si128(_mm_srli_epi16::<4>(x), _mm_set1_epi8(0x0f));
    [
        _mm256_cvtepu8_epi32(low),
        _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(low)),
        _mm256_cvtepu8_epi32(high),
        _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(high)),
    ]
}

struct Q4_0;
struct Q4_1;
struct Q8_0;
struct F32;
struct F16;
struct Bf16;

impl Dequantize for Q4_0 {
    type Block = BlockQ4_0;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dequantize(b: &BlockQ4_0) -> Dequantized {
        let d = _mm256_broadcastss_ps(_mm_cvtph_ps(f16_pair(b.d, half::f16::ZERO)));
        // d · (q − 8): the integer subtraction is exact, leaving one rounding, as in `blocks::dequantize_q4_0`.
        let q = nibbles_i32(&b.qs);
        let eight = _mm256_set1_epi32(8);
        let mut w = [_mm256_setzero_ps(); 4];
        for i in 0..4 {
            w[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(q[i], eight)));
        }
        w
    }
}

impl Dequantize for Q4_1 {
    type Block = BlockQ4_1;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dequantize(b: &BlockQ4_1) -> Dequantized {
        let dm = _mm_cvtph_ps(f16_pair(b.d, b.m));
        let (d, m) = (_mm256_broadcastss_ps(dm), _mm256_broadcastss_ps(_mm_movehdup_ps(dm)));
        let q = nibbles_i32(&b.qs);
        let mut w = [_mm256_setzero_ps(); 4];
        for i in 0..4 {
            w[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q[i]), m);
        }
        w
    }
}

impl Dequantize for Q8_0 {
    type Block = BlockQ8_0;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dequantize(b: &BlockQ8_0) -> Dequantized {
        let d = _mm256_broadcastss_ps(_mm_cvtph_ps(f16_pair(b.d, half::f16::ZERO)));
        let q = load_32(&b.qs);
        let (low, high) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
        let eighths = [low, _mm_srli_si128::<8>(low), high, _mm_srli_si128::<8>(high)];
        let mut w = [_mm256_setzero_ps(); 4];
        for i in 0..4 {
            w[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eighths[i])));
        }
        w
    }
}

impl Dequantize for F32 {
    type Block = [f32; QK];

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dequantize(b: &[f32; QK]) -> Dequantized {
        let (eights, _) = b.as_chunks::<8>();
        [load_8f(&eights[0]), load_8f(&eights[1]), load_8f(&eights[2]), load_8f(&eights[3])]
    }
}

impl Dequantize for F16 {
    type Block = [f16; QK];

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dequantize(b: &[f16; QK]) -> Dequantized {
        let (eights, _) = b.as_chunks::<8>();
        [load_8h(&eights[0]), load_8h(&eights[1]), load_8h(&eights[2]), load_8h(&eights[3])]
    }
}

impl Dequantize for Bf16 {
    type Block = [bf16; QK];

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dequantize(b: &[bf16; QK]) -> Dequantized {
        let (eights, _) = b.as_chunks::<8>();
        [load_8bf(&eights[0]), load_8bf(&eights[1]), load_8bf(&eights[2]), load_8bf(&eights[3])]
    }
}

/// 8 bf16 values as f32 (exact: a bf16 is the top half of an f32).
#[target_feature(enable = "avx2,fma,f16c")]
fn load_8bf(x: &[bf16; 8]) -> __m256 {
    // SAFETY: the reference covers 16 readable bytes; `loadu` has no alignment requirement.
    let halves = unsafe { _mm_loadu_si128(x.as_ptr().cast()) };
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(halves)))
}

/// One `R × C` tile (see `tiling::TileFn` for the slice shapes; activation "blocks" are 32 floats).
#[target_feature(enable = "avx2,fma,f16c")]
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
    let zero = _mm256_setzero_ps();
    let mut acc = [[zero; R]; C];
    let mut w = [[zero; 4]; R];
    for b in 0..n_blocks {
        for r in 0..R {
            // SAFETY: this function has the features F's functions need.
            w[r] = unsafe { F::dequantize(&row_blocks[r][b]) };
        }
        for c in 0..C {
            let (a, _) = col_blocks[c][b].as_chunks::<8>();
            for i in 0..4 {
                let x = load_8f(&a[i]);
                for r in 0..R {
                    acc[c][r] = _mm256_fmadd_ps(w[r][i], x, acc[c][r]);
                }
            }
        }
    }
    for c in 0..C {
        for r in 0..R {
            out[c * R + r] = hsum(acc[c][r]);
        }
    }
}

/// Rows per tile for batches of several columns: 2 × 4 accumulators plus two dequantized blocks (8 registers) fit
/// the 16 ymm registers; 4 × 4 would spill.
const BATCH_ROWS: usize = 2;
type Tiles<W> = TileTable<W, [f32; QK], 4, 4>;
static Q4_0_TILES: Tiles<BlockQ4_0> =
    TileTable { fns: tile_fns!(tile, Q4_0, [1, 2, 3, 4], [1, 2, 3, 4]), batch_rows: BATCH_ROWS };
static Q4_1_TILES: Tiles<BlockQ4_1> =
    TileTable { fns: tile_fns!(tile, Q4_1, [1, 2, 3, 4], [1, 2, 3, 4]), batch_rows: BATCH_ROWS };
static Q8_0_TILES: Tiles<BlockQ8_0> =
    TileTable { fns: tile_fns!(tile, Q8_0, [1, 2, 3, 4], [1, 2, 3, 4]), batch_rows: BATCH_ROWS };
static F32_TILES: Tiles<[f32; QK]> =
    TileTable { fns: tile_fns!(tile, F32, [1, 2, 3, 4], [1, 2, 3, 4]), batch_rows: BATCH_ROWS };
static F16_TILES: Tiles<[f16; QK]> =
    TileTable { fns: tile_fns!(tile, F16, [1, 2, 3, 4], [1, 2, 3, 4]), batch_rows: BATCH_ROWS };
static BF16_TILES: Tiles<[bf16; QK]> =
    TileTable { fns: tile_fns!(tile, Bf16, [1, 2, 3, 4], [1, 2, 3, 4]), batch_rows: BATCH_ROWS };

/// The AVX2 `Kernels::matmul_f32` (arguments checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
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
