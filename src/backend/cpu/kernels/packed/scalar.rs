//! The quantized matmul over packed weights, written plainly: the definition of its arithmetic (`docs/architecture.md`,
//! "Numerics"), which the SIMD paths reproduce bit for bit.
//!
//! Each output `(c, r)` is one f32 accumulator, starting at +0, that takes the row's 32-element groups in order.
//! Per group (against activation block `a` of column `c`: `da = a.d`, `sa = a.s`), the exact integer dot
//! `i = Σ (u − OFFSET)·q` (over the group, or over each half for the types with a scale per half) is converted
//! (exactly: |i| < 2^24) and added with one fused multiply-add:
//! - `Block`, `E8m0` (MXFP4, whose `d` is a power of two and `u` its codebook's entry): `acc = fma(f32(i), d·da,
//!   acc)`;
//! - `BlockMin`: then `acc = fma(m, sa, acc)`;
//! - `GroupMin`: `acc = fma(f32(i), (d·sc)·da, acc)`, then `acc = fma((−dmin)·mn, sa, acc)`;
//! - `Group` (IQ4_XS, `sc` signed): `acc = fma(f32(i), (d·sc)·da, acc)`;
//! - `Halves`: `i = sc_0·i_0 + sc_1·i_1` over the halves' dots, in integers, then `acc = fma(f32(i), d·da, acc)`;
//! - `HalvesMin`, per half `h`: `acc = fma(f32(i_h), (d·sc_h)·da, acc)`, then `acc = fma((−dmin)·mn_h,
//!   da·f32(Σ_h q), acc)`.
//!
//! `d·sc` and `(−dmin)·mn` are exact (an f16 times a small integer); each other product is rounded once. There is
//! no horizontal sum: a SIMD path holds 16 outputs' accumulators in one register and performs exactly these steps
//! on each lane.

use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::model::gguf::blocks::QK;

use super::format::{decode_row, level, Format, RowUnit, Scaling, PANEL_ROWS};
use super::PackedMatrix;

/// Columns accumulated at once per decoded row (on the stack).
const COLS: usize = 32;

/// Adds group `g` of a decoded unit, its codes already mapped to `u` (`to_levels`), against activation block `a` to
/// `acc`.
#[inline(always)]
fn add_group<F: Format>(unit: &RowUnit, g: usize, a: &BlockQ8A, mut acc: f32) -> f32 {
    let u = &unit.u[QK * g..QK * g + QK];
    let dot = |range: std::ops::Range<usize>, start: i32| {
        let mut i = start;
        for k in range {
            i += i32::from(u[k]) * i32::from(a.qs[k]);
        }
        i
    };
    if F::SCALING == Scaling::Halves {
        // Both halves' dots scaled and summed in integers (exact: |i| < 2^24), then one float step.
        let mut i = 0;
        for h in 0..2 {
            let half = dot(16 * h..16 * h + 16, -F::OFFSET * i32::from(a.half_sums[h]));
            i += unit.scales[2 * g + h] * half;
        }
        return (i as f32).mul_add(unit.d * a.d, acc);
    }
    if F::SCALING == Scaling::HalvesMin {
        for h in 0..2 {
            let t = 2 * g + h;
            let i = dot(16 * h..16 * h + 16, -F::OFFSET * i32::from(a.half_sums[h]));
            acc = (i as f32).mul_add((unit.d * unit.scales[t] as f32) * a.d, acc);
            acc = ((-unit.m) * unit.mins[t] as f32).mul_add(a.d * f32::from(a.half_sums[h]), acc);
        }
        return acc;
    }
    let i = dot(0..QK, -F::OFFSET * a.sum) as f32;
    match F::SCALING {
        Scaling::Block | Scaling::E8m0 => i.mul_add(unit.d * a.d, acc),
        Scaling::BlockMin => unit.m.mul_add(a.s, i.mul_add(unit.d * a.d, acc)),
        Scaling::Group => i.mul_add((unit.d * unit.scales[2 * g] as f32) * a.d, acc),
        _ => {
            let t = 2 * g;
            let acc = i.mul_add((unit.d * unit.scales[t] as f32) * a.d, acc);
            ((-unit.m) * unit.mins[t] as f32).mul_add(a.s, acc)
        }
    }
}

/// A decoded unit's codes replaced by their `u` (types with a codebook; the others store `u`): once per unit, not in
/// each column's dot, where the lookup slowed the products (MXFP4's scalar matvec at Llama 3.2 1B's FFN shape took
/// 1.75 times Q4_0's time with the lookup in the dot, 1.16 times with it here).
#[inline(always)]
fn to_levels<F: Format>(unit: &mut RowUnit) {
    if F::CODEBOOK.is_some() {
        for u in &mut unit.u[..F::UNIT] {
            *u = level::<F>(*u);
        }
    }
}

/// `Kernels::matmul_packed` for format `F` (arguments checked by the caller): each row of `out` decoded unit by
/// unit, once per up to `COLS` columns.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn matmul<F: Format>(
    w: &PackedMatrix,
    act: &[BlockQ8A],
    n_cols: usize,
    out: &mut OutRows,
) {
    let n_groups = w.blocks_per_row();
    let units = w.row_len() / F::UNIT;
    let groups_per_unit = F::UNIT / QK;
    let unit_planes = groups_per_unit * F::GROUP_BYTES;
    let mut unit = RowUnit::EMPTY;
    for row in out.rows() {
        let (headers, planes) = w.panel(row / PANEL_ROWS);
        let mut c0 = 0;
        while c0 < n_cols {
            let n_c = COLS.min(n_cols - c0);
            let mut acc = [0f32; COLS];
            for b in 0..units {
                let header = &headers[b * F::HEADER..(b + 1) * F::HEADER];
                decode_row::<F>(header, &planes[b * unit_planes..(b + 1) * unit_planes], row % PANEL_ROWS, &mut unit);
                to_levels::<F>(&mut unit);
                for g in 0..groups_per_unit {
                    let group = b * groups_per_unit + g;
                    for (c, acc) in acc[..n_c].iter_mut().enumerate() {
                        *acc = add_group::<F>(&unit, g, &act[(c0 + c) * n_groups + group], *acc);
                    }
                }
            }
            for (c, &v) in acc[..n_c].iter().enumerate() {
                out.set(c0 + c, row, v);
            }
            c0 += n_c;
        }
    }
}
