//! How the precise path's SIMD matmuls (`f32_tiles`: weights in the file's layout, f32 activations) walk their
//! output: register tiles of a few weight rows × a few activation columns, so each dequantized weight block is
//! reused across columns and each activation block across rows. (The fast path's matmul walks packed panels:
//! `packed`.)
//!
//! Each SIMD path supplies a table of tile functions, one per tile shape `R × C` up to its largest (const generics:
//! the loops over rows and columns unroll, the accumulators live in registers). The walker here covers `out` with
//! the largest tile and fills the edges with smaller ones. Batch invariance rests on one rule the tile functions
//! keep: the operations that produce output `(c, r)` depend only on row `r`, column `c` and the row length, never
//! on the tile's shape or position. So an output is bit-identical in a 4 × 4 tile, in a 1 × 1 edge tile, for any
//! batch and any row split.

use std::mem::size_of;

use super::out_rows::OutRows;

/// Computes a tile of `R` weight rows × `C` activation columns, `R` and `C` fixed per function.
///
/// `rows`: `R × n_blocks` weight blocks (row after row); `cols`: `C × n_blocks` activation blocks (column after
/// column); `out`: `R × C` results, `out[c * R + r]`.
/// `unsafe` because it needs its path's CPU features.
pub(super) type TileFn<W, A> = unsafe fn(rows: &[W], cols: &[A], n_blocks: usize, out: &mut [f32]);

/// The tile functions of one path for one weight type: `fns[R - 1][C - 1]` computes `R × C` tiles.
pub(super) struct TileTable<W: 'static, A: 'static, const RM: usize, const CM: usize> {
    pub fns: [[TileFn<W, A>; CM]; RM],
    /// Rows per tile when the batch has several columns (at most `RM`). A matvec uses all `RM` rows, to keep as many
    /// independent rows in flight as possible; a wider batch may want fewer, so that its `rows × CM` accumulators fit
    /// the register file.
    pub batch_rows: usize,
}

/// Activations kept hot while a panel of columns meets every row tile: the panel stays in L2 (2 MiB per core on
/// the Xeons we measure on, 256 KiB at least on any x86 core of the last decade), so weights are read from memory
/// once per panel.
const PANEL_BYTES: usize = 256 * 1024;

/// Computes `out`'s rows for `n_cols` columns from `weights` (`n_rows × n_blocks`) and `act` (`n_cols ×
/// n_blocks`), tile by tile. Arguments were checked by `Kernels`.
///
/// Order: column panels, then row tiles, then column tiles within the panel, the columns split evenly (5 as 3 + 2,
/// not 4 + 1).
///
/// Inlined into each path's `matmul_f32`, so that every path has its own copy of this walk, compiled with the
/// path's target features.
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
