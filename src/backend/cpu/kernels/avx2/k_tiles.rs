//! AVX2 tiles of the quantized matmul for the K-quants (Q2_K … Q6_K): each 256-element super-block's scales decoded
//! once (`Header`), then its eight 32-element groups unpacked with SIMD shifts and masks, one register of unsigned
//! values per group, against eight activation blocks. A tile unpacks each group right before using it; a row tile
//! unpacks whole super-blocks once for all its column tiles.
//!
//! Per output, super-block and group, the arithmetic of the scalar `output_q8_k` (`numerics`: 8 lanes, lane `j`
//! holding elements `4j..4j + 4`): the exact integer lane sums `Σ (u − OFFSET)·qa` (`vpmaddubsw`, `vpmaddwd`),
//! converted to f32, one FMA with `(d·scale_h)·da`; the types with minima add `(Σ qa · da)` times `−dmin·min_h`
//! with a second FMA. `d·scale_h` and `−dmin·min_h` (exact) are computed once per row and group (`group`), `Σ qa ·
//! da` once per column and group (`col_block`). After the last super-block the lanes are summed by `lanes::hsum`.
//! Nothing depends on the tile shape, so results are batch-invariant (see `tiling`).

use std::arch::x86_64::*;
use std::mem::{size_of, MaybeUninit};
use std::ops::Range;

use super::lanes::{hsum, load_32, prefetch};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::tiling::{
    run_tiles, tile_fns, walk_prepared_columns, PreparedTileFn, TileTable, PREFETCH_TILES,
};
use crate::model::gguf::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, SuperBlock, GROUPS};

/// One 32-element group, unpacked.
#[derive(Clone, Copy)]
pub(in crate::backend::cpu::kernels) struct GroupRegs {
    /// The unsigned values `u` in element order (at most 63).
    pub(in crate::backend::cpu::kernels) u: __m256i,
    /// `d` times the integer scale of each lane's half (exact): `[d·s0; 4]` then `[d·s1; 4]`.
    pub(in crate::backend::cpu::kernels) scales: __m256,
    /// `−dmin` times the integer minimum of each lane's half (exact; zero for the types without minima).
    pub(in crate::backend::cpu::kernels) mins: __m256,
}

/// One super-block, unpacked.
#[derive(Clone, Copy)]
pub(in crate::backend::cpu::kernels) struct Unpacked {
    groups: [GroupRegs; GROUPS],
}

/// One activation block, prepared for every row of a tile.
#[derive(Clone, Copy)]
struct ColBlock {
    q: __m256i,
    /// `OFFSET · Σ qa` over each lane's four activations.
    offset: __m256i,
    /// `Σ qa · da` over each lane's four activations.
    sums_d: __m256,
    /// `da` in every lane.
    d: __m256,
}

/// `Σ` of each group of 4 adjacent u8 × i8 products as 8 i32 lanes (no saturation: |u| ≤ 63, |i| ≤ 127).
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_u8_i8(u: __m256i, i: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, i), _mm256_set1_epi16(1))
}

/// What a super-block's groups share, decoded once per super-block and row.
#[derive(Clone, Copy)]
pub(in crate::backend::cpu::kernels) struct Header {
    /// The 16 integer half scales as f32 (`SuperBlock::half_scales`): halves 0..8 (groups 0..4), then 8..16.
    scales: [__m256; 2],
    /// The 16 integer half minima, likewise.
    mins: [__m256; 2],
    /// `d` in every lane.
    d: __m256,
    /// `−dmin` in every lane.
    dmin_neg: __m256,
}

/// How a K-quant's groups are unpacked into registers.
pub(in crate::backend::cpu::kernels) trait Unpack: SuperBlock {
    /// The unsigned values `u` of group `g` (0..8) in element order.
    ///
    /// # Safety
    /// Needs AVX2, FMA and F16C.
    unsafe fn values(&self, g: usize) -> __m256i;
}

/// 32 bytes from `bytes` at `at` (no alignment needed).
#[target_feature(enable = "avx2,fma,f16c")]
fn load_at(bytes: &[u8], at: usize) -> __m256i {
    let run: &[u8; 32] = bytes[at..at + 32].try_into().expect("32 bytes");
    // SAFETY: `run` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(run.as_ptr().cast()) }
}

/// Each byte of `x` shifted right by `n` (within 16-bit lanes: the caller masks off what crosses from the next byte).
#[target_feature(enable = "avx2,fma,f16c")]
fn shift_right(x: __m256i, n: usize) -> __m256i {
    _mm256_srl_epi16(x, _mm_cvtsi32_si128(n as i32))
}

/// Bits `2s..2s + 2` of the 32 bytes at `32i` of a Q2_K / Q3_K `qs` or a Q6_K `qh`: the 2-bit fields of group
/// `4i + s`.
#[target_feature(enable = "avx2,fma,f16c")]
fn crumbs(bytes: &[u8], i: usize, s: usize) -> __m256i {
    _mm256_and_si256(shift_right(load_at(bytes, 32 * i), 2 * s), _mm256_set1_epi8(3))
}

/// Bit `g` of each of 32 bytes, moved to bit `to`.
#[target_feature(enable = "avx2,fma,f16c")]
fn bit_of(bytes: &[u8], g: usize, to: i32) -> __m256i {
    let bit = _mm256_and_si256(shift_right(load_at(bytes, 0), g), _mm256_set1_epi8(1));
    _mm256_sll_epi16(bit, _mm_cvtsi32_si128(to))
}

/// The four low bits of Q4_K / Q5_K group `g`: the low or high nibbles of 32 bytes of `qs`.
#[target_feature(enable = "avx2,fma,f16c")]
fn k_nibbles(qs: &[u8], g: usize) -> __m256i {
    _mm256_and_si256(shift_right(load_at(qs, 32 * (g / 2)), 4 * (g % 2)), _mm256_set1_epi8(0x0f))
}

impl Unpack for BlockQ2K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(&self, g: usize) -> __m256i {
        crumbs(&self.qs, g / 4, g % 4)
    }
}

impl Unpack for BlockQ3K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(&self, g: usize) -> __m256i {
        _mm256_or_si256(crumbs(&self.qs, g / 4, g % 4), bit_of(&self.hmask, g, 2))
    }
}

impl Unpack for BlockQ4K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(&self, g: usize) -> __m256i {
        k_nibbles(&self.qs, g)
    }
}

impl Unpack for BlockQ5K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(&self, g: usize) -> __m256i {
        _mm256_or_si256(k_nibbles(&self.qs, g), bit_of(&self.qh, g, 4))
    }
}

impl Unpack for BlockQ6K {
    /// Group `4i + s`: nibble `s / 2` of the 32-byte run `s % 2` of half `i`'s `ql`, and bit pair `s` of its `qh`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(&self, g: usize) -> __m256i {
        let (i, s) = (g / 4, g % 4);
        let low = shift_right(load_at(&self.ql, 64 * i + 32 * (s % 2)), 4 * (s / 2));
        let low = _mm256_and_si256(low, _mm256_set1_epi8(0x0f));
        _mm256_or_si256(low, _mm256_slli_epi16::<4>(crumbs(&self.qh, i, s)))
    }
}

/// The header of super-block `b`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn header<B: SuperBlock>(b: &B) -> Header {
    let (scales, mins) = b.half_scales();
    let eight = |v: &[i32; 16], h: usize| {
        let half: &[i32; 8] = v[8 * h..8 * h + 8].try_into().expect("8 values");
        // SAFETY: `half` is 8 readable i32; `loadu` has no alignment requirement.
        _mm256_cvtepi32_ps(unsafe { _mm256_loadu_si256(half.as_ptr().cast()) })
    };
    Header {
        scales: [eight(&scales, 0), eight(&scales, 1)],
        mins: [eight(&mins, 0), eight(&mins, 1)],
        d: _mm256_set1_ps(b.d()),
        dmin_neg: _mm256_set1_ps(-b.dmin()),
    }
}

/// Group `g` of super-block `b` in registers: its values, and its halves' `d·scale` and `−dmin·min` in lanes 0..4,
/// 4..8.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::backend::cpu::kernels) fn group<B: Unpack>(b: &B, h: &Header, g: usize) -> GroupRegs {
    let (first, second) = (2 * (g % 4) as i32, 2 * (g % 4) as i32 + 1);
    let lanes = _mm256_setr_epi32(first, first, first, first, second, second, second, second);
    let mins = if B::HAS_MIN {
        _mm256_mul_ps(h.dmin_neg, _mm256_permutevar8x32_ps(h.mins[g / 4], lanes))
    } else {
        _mm256_setzero_ps()
    };
    GroupRegs {
        // SAFETY: this function has the features `values` needs.
        u: unsafe { b.values(g) },
        scales: _mm256_mul_ps(h.d, _mm256_permutevar8x32_ps(h.scales[g / 4], lanes)),
        mins,
    }
}

/// Super-block `b` unpacked whole, for the prepared row tiles.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack<B: Unpack>(b: &B) -> Unpacked {
    let h = header(b);
    let mut groups = [GroupRegs { u: _mm256_setzero_si256(), scales: h.d, mins: h.d }; GROUPS];
    for (g, regs) in groups.iter_mut().enumerate() {
        *regs = group(b, &h, g);
    }
    Unpacked { groups }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn col_block<B: SuperBlock>(a: &BlockQ8A) -> ColBlock {
    let q = load_32(&a.qs);
    let sums = dot_u8_i8(_mm256_set1_epi8(1), q);
    ColBlock {
        q,
        offset: _mm256_mullo_epi32(sums, _mm256_set1_epi32(B::OFFSET)),
        sums_d: _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(a.d)),
        d: _mm256_set1_ps(a.d),
    }
}

/// Adds group `g` of one super-block of every row (`regs`) and column of a tile to the accumulators `acc[c][r]`.
#[target_feature(enable = "avx2,fma,f16c")]
fn accumulate_group<B: SuperBlock, const R: usize, const C: usize>(
    acc: &mut [[__m256; R]; C],
    regs: &[GroupRegs; R],
    cols: &[&[BlockQ8A; GROUPS]; C],
    g: usize,
) {
    for c in 0..C {
        let a = col_block::<B>(&cols[c][g]);
        for r in 0..R {
            let mut dot = dot_u8_i8(regs[r].u, a.q);
            if B::OFFSET != 0 {
                dot = _mm256_sub_epi32(dot, a.offset);
            }
            acc[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(regs[r].scales, a.d), acc[c][r]);
            if B::HAS_MIN {
                acc[c][r] = _mm256_fmadd_ps(a.sums_d, regs[r].mins, acc[c][r]);
            }
        }
    }
}

/// One `R × C` tile (see `tiling::TileFn`; a "block" here is a super-block and its eight activation blocks). Each
/// super-block's groups are unpacked one at a time, into registers, right before they are used.
#[target_feature(enable = "avx2,fma,f16c")]
fn tile<B: Unpack, const R: usize, const C: usize>(
    rows: &[B],
    cols: &[[BlockQ8A; GROUPS]],
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    let ahead = PREFETCH_TILES * R * n_blocks;
    let zero = _mm256_setzero_ps();
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
        let mut headers = [Header { scales: [zero; 2], mins: [zero; 2], d: zero, dmin_neg: zero }; R];
        for r in 0..R {
            headers[r] = header(blocks[r]);
        }
        for g in 0..GROUPS {
            let mut regs = [GroupRegs { u: _mm256_setzero_si256(), scales: zero, mins: zero }; R];
            for r in 0..R {
                regs[r] = group(blocks[r], &headers[r], g);
            }
            accumulate_group::<B, R, C>(&mut acc, &regs, &col, g);
        }
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
        let mut unpacked = [MaybeUninit::<Unpacked>::uninit(); R];
        for (r, u) in unpacked.iter_mut().enumerate() {
            u.write(unpack(&rows[r * n_blocks + b]));
        }
        // SAFETY: every entry was written just above.
        slot.write(unpacked.map(|u| unsafe { u.assume_init() }));
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
    let zero = _mm256_setzero_ps();
    for (b, w) in prepared.iter().enumerate() {
        let mut col: [&[BlockQ8A; GROUPS]; C] = [&cols[b]; C];
        for c in 0..C {
            col[c] = &cols[c * n_blocks + b];
        }
        for g in 0..GROUPS {
            let mut regs = [GroupRegs { u: _mm256_setzero_si256(), scales: zero, mins: zero }; R];
            for r in 0..R {
                regs[r] = w[r].groups[g];
            }
            accumulate_group::<B, R, C>(&mut acc, &regs, &col, g);
        }
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
