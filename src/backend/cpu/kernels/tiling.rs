//! How the SIMD matmuls walk their output: register tiles of a few weight rows × a few activation columns, so each
//! unpacked weight block is reused across columns and each prepared activation block across rows.
//!
//! Each SIMD path supplies a table of tile functions, one per tile shape `R × C` up to its largest (const generics:
//! the loops over rows and columns unroll, the accumulators live in registers). The walker here covers `out` with
//! the largest tile and fills the edges with smaller ones. Batch invariance rests on one rule the tile functions
//! keep: the operations that produce output `(c, r)` depend only on row `r`, column `c` and the row length, never
//! on the tile's shape or position. So an output is bit-identical in a 4 × 4 tile, in a 1 × 1 edge tile, for any
//! batch and any row split.

use std::mem::size_of;
use std::ops::Range;

use super::out_rows::OutRows;

/// Computes a tile of `R` weight rows × `C` activation columns, `R` and `C` fixed per function.
///
/// `rows`: `R × n_blocks` weight blocks (row after row); `cols`: `C × n_blocks` activation blocks (column after
/// column); `out`: `R × C` results, `out[c * R + r]`.
/// `unsafe` because it needs its path's CPU features.
pub(super) type TileFn<W, A> = unsafe fn(rows: &[W], cols: &[A], n_blocks: usize, out: &mut [f32]);

/// Computes `R` weight rows (`R` fixed per function) against columns `cols` of `act`, writing rows `r0..r0 + R`
/// of those columns into `out`, with the rows' weights prepared (unpacked) once for all the column tiles instead
/// of once per tile. Bit-identical to the tile functions: unpacking is exact, and each output then sees the same
/// operations in the same order. Returns false, having written nothing, when its buffer cannot hold the rows
/// (longer than the model's); the walker then uses the tile functions.
/// `unsafe` because it needs its path's CPU features.
pub(super) type RowTileFn<W, A> =
    unsafe fn(rows: &[W], n_blocks: usize, act: &[A], cols: Range<usize>, r0: usize, out: &mut OutRows) -> bool;

/// Computes a tile of prepared rows × `C` columns (`C` fixed per function) for a row tile function: `prepared`
/// holds the row tile's weights as its path unpacked them; `cols`, `out` as for [`TileFn`].
/// `unsafe` because it needs its path's CPU features.
pub(super) type PreparedTileFn<P, A> = unsafe fn(prepared: &[P], cols: &[A], n_blocks: usize, out: &mut [f32]);

/// The column walk of a row tile function: the columns `cols` of `act` in tiles of up to `CM`, each computed by
/// `fns[C - 1]` against the `R` prepared rows and written to rows `r0..r0 + R` of `out`.
///
/// Inlined into each path's row tile functions, like [`run_tiles`].
///
/// # Safety
/// The CPU must have the features `fns` are compiled for.
#[inline(always)]
pub(super) unsafe fn walk_prepared_columns<P, A, const R: usize, const CM: usize>(
    fns: &[PreparedTileFn<P, A>; CM],
    prepared: &[P],
    act: &[A],
    n_blocks: usize,
    cols: Range<usize>,
    r0: usize,
    out: &mut OutRows,
) {
    let mut results = [[0f32; R]; CM];
    let mut c0 = cols.start;
    while c0 < cols.end {
        let n_c = CM.min(cols.end - c0);
        let tile_cols = &act[c0 * n_blocks..(c0 + n_c) * n_blocks];
        let results = &mut results.as_flattened_mut()[..R * n_c];
        // SAFETY: the caller guarantees the functions' CPU features; the slices have the shapes they take.
        unsafe { fns[n_c - 1](prepared, tile_cols, n_blocks, results) };
        for (c, col_results) in results.chunks_exact(R).enumerate() {
            out.write(c0 + c, r0, col_results);
        }
        c0 += n_c;
    }
}

/// The tile functions of one path for one weight type: `fns[R - 1][C - 1]` computes `R × C` tiles.
pub(super) struct TileTable<W: 'static, A: 'static, const RM: usize, const CM: usize> {
    pub fns: [[TileFn<W, A>; CM]; RM],
    /// `row_tiles[R - 1]`, for paths where unpacking the weights costs enough that doing it once per panel rather
    /// than once per column tile pays (used when a panel holds more than two column tiles).
    pub row_tiles: Option<[RowTileFn<W, A>; RM]>,
    /// Rows per tile when the batch has several columns (at most `RM`). A matvec uses all `RM` rows, to keep as many
    /// independent rows in flight as possible; a wider batch may want fewer, so that its `rows × CM` accumulators fit
    /// the register file.
    pub batch_rows: usize,
}

/// How far ahead of its current rows a tile prefetches weights, in row tiles. A matvec streams the model's ~100 MB
/// per token from L3 or DRAM in short rows (360 to 960 bytes), and the hardware prefetchers lose several lines at
/// every row start; explicit requests for the rows four tiles ahead made streaming matvecs 1.7× (Q4_1) to 3× (Q8_0)
/// faster on our development Xeon, where 1, 2, 8 and 16 tiles did no better.
pub(super) const PREFETCH_TILES: usize = 4;

/// Activations kept hot while a panel of columns meets every row tile: the panel stays in L2 (2 MiB per core on
/// the Xeons we measure on, 256 KiB at least on any x86 core of the last decade), so weights are read from memory
/// once per panel. With 512 columns of 576 activations (Q8A: 40 bytes per 32) one panel holds 227 columns.
const PANEL_BYTES: usize = 256 * 1024;

/// Computes `out`'s rows for `n_cols` columns from `weights` (`n_rows × n_blocks`) and `act` (`n_cols ×
/// n_blocks`), tile by tile. Arguments were checked by `Kernels`.
///
/// Order: column panels, then row tiles, then column tiles within the panel. Each row tile's weights are unpacked
/// once per panel and stay in L1 while the panel's columns pass by, when the panel has more than two column tiles
/// (`row_tiles`). Up to two, the tile functions unpack the weights themselves, once per column tile, and the
/// columns are split evenly (5 as 3 + 2, not 4 + 1): writing and re-reading the unpacked rows costs more than a
/// second unpacking, and a 1-column tile pays for its unpacking alone. This is what a decode step verifying a
/// speculative draft computes (a few columns against weights streamed from memory); on a 2-vCPU EPYC (AVX-512)
/// it made SmolLM2's matrices 1.07–1.39× faster at 5 columns and 1.14–1.31× at 8 (`cargo bench --bench kernels
/// -- avx512 n_cols=5`, medians of 3 interleaved runs).
///
/// Inlined into each path's `matmul_q8` / `matmul_f32`, so that every path has its own copy of this walk, compiled
/// with the path's target features: as one copy shared by the paths, its code (and the speed of the AVX2 Q8_0
/// matmul at 512 columns, by 10 %) moved with unrelated changes elsewhere in the crate.
///
/// # Safety
/// The CPU must have the features the table's functions are compiled for.
#[inline(always)]
pub(super) unsafe fn run_tiles<W, A, const RM: usize, const CM: usize>(
    table: &TileTable<W, A, RM, CM>,
    weights: &[W],
    n_blocks: usize,
    act: &[A],
    n_cols: usize,
    out: &mut OutRows,
) {
    let rows = out.rows();
    let rows_per_tile = if n_cols == 1 { RM } else { table.batch_rows.clamp(1, RM) };
    let col_bytes = (n_blocks * size_of::<A>()).max(1);
    let panel_cols = (PANEL_BYTES / col_bytes / CM * CM).max(CM);
    // Results of one tile, `tile[c * R + r]`.
    let mut tile = [[0f32; RM]; CM];
    let mut panel_start = 0;
    while panel_start < n_cols {
        let panel_end = (panel_start + panel_cols).min(n_cols);
        let mut r0 = rows.start;
        while r0 < rows.end {
            let n_r = rows_per_tile.min(rows.end - r0);
            let tile_rows = &weights[r0 * n_blocks..(r0 + n_r) * n_blocks];
            if let Some(row_tiles) = table.row_tiles.as_ref().filter(|_| panel_end - panel_start > 2 * CM) {
                // SAFETY: as for the tile functions below; the row tile function checks its own buffer's size.
                if unsafe { row_tiles[n_r - 1](tile_rows, n_blocks, act, panel_start..panel_end, r0, out) } {
                    r0 += n_r;
                    continue;
                }
            }
            let mut c0 = panel_start;
            while c0 < panel_end {
                // The fewest tiles that hold the columns left, as even as they go.
                let left = panel_end - c0;
                let n_c = left.div_ceil(left.div_ceil(CM));
                let tile_cols = &act[c0 * n_blocks..(c0 + n_c) * n_blocks];
                let results = &mut tile.as_flattened_mut()[..n_r * n_c];
                // SAFETY: the caller guarantees the table's CPU features; the slices hold exactly n_r rows and n_c
                // columns of n_blocks blocks, and results n_r * n_c floats, the tile function's shape.
                unsafe { (table.fns[n_r - 1][n_c - 1])(tile_rows, tile_cols, n_blocks, results) };
                for (c, col_results) in results.chunks_exact(n_r).enumerate() {
                    out.write(c0 + c, r0, col_results);
                }
                c0 += n_c;
            }
            r0 += n_r;
        }
        panel_start = panel_end;
    }
}

/// The `fns` of a `TileTable`: `$tile::<$format, R, C>` for every listed `R` and `C`, e.g.
/// `tile_fns!(tile, Q4_1, [1, 2, 3, 4], [1, 2, 3, 4])`.
macro_rules! tile_fns {
    ($tile:ident, $format:ty, [$($r:literal),+], $cols:tt) => {
        [$($crate::backend::cpu::kernels::tiling::tile_fns!(@row $tile, $format, $r, $cols)),+]
    };
    (@row $tile:ident, $format:ty, $r:literal, [$($c:literal),+]) => {
        [$($tile::<$format, $r, $c>),+]
    };
}
pub(super) use tile_fns;
