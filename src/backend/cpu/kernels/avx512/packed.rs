//! The AVX-512 VNNI matmul over packed weights (`packed`): a 512-bit register holds one accumulator per row of a
//! 16-row panel, and one `vpdpbusd` adds four products to each of the 16 (the panel's 4 weight bytes of each row
//! against the same 4 activation bytes, broadcast).
//!
//! Per group, a tile of `R` panels × `C` columns unpacks each slice of its panels once (a few shifts and masks,
//! `unpack`) and feeds it to the integer dot of every column; then each lane takes the group's float steps of
//! `packed::scalar`, in its order, so every output is the scalar path's bits. Nothing depends on the tile's shape
//! or place (batch invariance).

use std::arch::x86_64::*;

use super::amx;
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::packed::format::{
    header, Base, Format, High, Scaling, BIT_BYTES, CRUMB_BYTES, PANEL_ROWS, SLICE_BYTES,
};
use crate::backend::cpu::kernels::packed::{
    ahead, expands, first, request_share, with_expanded, with_format, PackedMatrix, PREFETCH_AHEAD,
};
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::scalar;
use crate::backend::cpu::kernels::weights::WeightMatrix;
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK};
use crate::model::gguf::iq4::{BlockIq4Nl, BlockIq4Xs};
use crate::model::gguf::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use crate::model::gguf::mxfp4::BlockMxfp4;
use crate::model::gguf::GgmlType;

/// Most panels and columns of a tile.
const MAX_R: usize = 2;
const MAX_C: usize = 8;
/// The tile of a batch of several columns: panels × columns.
const BATCH_R: usize = 1;
const BATCH_C: usize = 8;

/// 64 bytes at `p`.
///
/// # Safety
/// `p` must point to 64 readable bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn load(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// 16 f16 values at `p`, as f32.
///
/// # Safety
/// `p` must point to 32 readable bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn load_f16(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 32 readable bytes; `loadu` has no alignment requirement.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
}

/// 16 unsigned bytes at `p` as 32-bit integers, converted to f32.
///
/// # Safety
/// `p` must point to 16 readable bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn load_bytes_f32(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 16 readable bytes; `loadu` has no alignment requirement.
    let v = unsafe { _mm_loadu_si128(p.cast()) };
    _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v))
}

/// 16 signed bytes at `p`, as f32 (IQ4_XS' group scales).
///
/// # Safety
/// `p` must point to 16 readable bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn load_signed_bytes_f32(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 16 readable bytes; `loadu` has no alignment requirement.
    let v = unsafe { _mm_loadu_si128(p.cast()) };
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v))
}

/// The half scales `2^(e − 128)` of the 16 E8M0 bytes at `p` (MXFP4), each as `mxfp4::e8m0_to_fp32_half` builds
/// its bits: `(e − 1) << 23`, or the subnormal `0x200000 << e` for `e` 0 and 1.
///
/// # Safety
/// `p` must point to 16 readable bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn load_e8m0(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 16 readable bytes; `loadu` has no alignment requirement.
    let e = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(p.cast()) });
    let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
    let subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
    let small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal))
}

/// The scales of the unit whose header is at `hdr`: its `d`, and its `m` (BlockMin) or `−dmin` (GroupMin,
/// HalvesMin), zero for the other scalings.
///
/// # Safety
/// `hdr` must point to a unit's `Format::HEADER` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn unit_scales<F: Format>(hdr: *const u8) -> (__m512, __m512) {
    let zero = _mm512_setzero_ps();
    // SAFETY: each field read is inside the `Format::HEADER` bytes its scaling lays out.
    unsafe {
        let d = match F::SCALING {
            Scaling::Halves | Scaling::Group => _mm512_loadu_ps(hdr.add(header::D).cast()),
            Scaling::E8m0 => load_e8m0(hdr.add(header::E)),
            _ => load_f16(hdr.add(header::D)),
        };
        let m = match F::SCALING {
            Scaling::BlockMin => load_f16(hdr.add(header::M)),
            Scaling::GroupMin | Scaling::HalvesMin => _mm512_sub_ps(zero, load_f16(hdr.add(header::M))),
            _ => zero,
        };
        (d, m)
    }
}

/// Bytes before a group's base plane.
const fn high_bytes<F: Format>() -> usize {
    match F::HIGH {
        High::None => 0,
        High::Bit(_) => BIT_BYTES,
        High::Crumbs(_) => CRUMB_BYTES,
    }
}

/// Slice `4h + t` of the group whose planes start at `planes`: its 16 rows' four values each.
///
/// # Safety
/// `planes` must point to a group's `Format::GROUP_BYTES` readable bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn unpack<F: Format>(planes: *const u8, h: usize, t: usize) -> __m512i {
    // SAFETY (every access below): the offsets stay inside the group's planes, whose layout `Format` describes.
    unsafe {
        let base = planes.add(high_bytes::<F>());
        let mut v = match F::BASE {
            Base::Nibbles => {
                let x = load(base.add(SLICE_BYTES * t));
                let x = if h == 0 { x } else { _mm512_srli_epi16::<4>(x) };
                _mm512_and_si512(x, _mm512_set1_epi8(0x0f))
            }
            Base::Crumbs => {
                let x = load(base.add(SLICE_BYTES * h));
                _mm512_and_si512(_mm512_srl_epi16(x, _mm_cvtsi32_si128(2 * t as i32)), _mm512_set1_epi8(3))
            }
            Base::Bytes => load(base.add(SLICE_BYTES * (4 * h + t))),
        };
        match F::HIGH {
            High::None => {}
            High::Bit(shift) => {
                let mask = planes.add(8 * (4 * h + t)).cast::<u64>().read_unaligned();
                v = _mm512_mask_add_epi8(v, mask, v, _mm512_set1_epi8(1 << shift));
            }
            High::Crumbs(shift) => {
                let x = load(planes.add(SLICE_BYTES * h));
                let (from, to) = (2 * t as i32, shift as i32);
                let x = if to >= from {
                    _mm512_sll_epi16(x, _mm_cvtsi32_si128(to - from))
                } else {
                    _mm512_srl_epi16(x, _mm_cvtsi32_si128(from - to))
                };
                v = _mm512_or_si512(v, _mm512_and_si512(x, _mm512_set1_epi8((3 << shift) as i8)));
            }
        }
        match F::CODEBOOK {
            // Each byte's code (below 16) picks its `u` from the codebook in its 128-bit lane.
            Some(book) => _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(book.as_ptr().cast())), v),
            None => v,
        }
    }
}

/// The four activations of slice `4h + t` of `a`, in every 32-bit lane.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn activations(a: &BlockQ8A, h: usize, t: usize) -> __m512i {
    let at = 16 * h + 4 * t;
    _mm512_set1_epi32(i32::from_le_bytes([a.qs[at] as u8, a.qs[at + 1] as u8, a.qs[at + 2] as u8, a.qs[at + 3] as u8]))
}

/// Adds the integer dots of halves `halves` of one group of each of `R` panels against each of `C` columns to
/// `dot[c][r]`; with `X`, the group's slices come expanded (`expand`) instead of packed. With at most two dots in
/// the tile, the even and odd slices go to separate accumulators (summed at the end: integer addition is exact), so
/// that consecutive `vpdpbusd` do not wait on each other.
///
/// # Safety
/// Each `planes[r]` must point to a group's `Format::GROUP_BYTES` readable bytes (with `X`, `EXPANDED_GROUP`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn add_dots<F: Format, const R: usize, const C: usize, const X: bool>(
    planes: &[*const u8; R],
    a: &[&BlockQ8A; C],
    halves: std::ops::Range<usize>,
    dot: &mut [[__m512i; R]; C],
) {
    let split = R * C <= 2;
    let mut odd = [[_mm512_setzero_si512(); R]; C];
    for h in halves {
        for t in 0..4 {
            let mut w = [_mm512_setzero_si512(); R];
            for r in 0..R {
                // SAFETY: the caller guarantees the planes (or the expanded group's 8 registers).
                w[r] = unsafe {
                    if X {
                        load(planes[r].add(SLICE_BYTES * (4 * h + t)))
                    } else {
                        unpack::<F>(planes[r], h, t)
                    }
                };
            }
            for c in 0..C {
                let q = activations(a[c], h, t);
                for r in 0..R {
                    if split && t % 2 == 1 {
                        odd[c][r] = _mm512_dpbusd_epi32(odd[c][r], w[r], q);
                    } else {
                        dot[c][r] = _mm512_dpbusd_epi32(dot[c][r], w[r], q);
                    }
                }
            }
        }
    }
    if split {
        for c in 0..C {
            for r in 0..R {
                dot[c][r] = _mm512_add_epi32(dot[c][r], odd[c][r]);
            }
        }
    }
}

/// Bytes of an expanded group (`expand`): its 8 slices, a register each.
const EXPANDED_GROUP: usize = 8 * SLICE_BYTES;
// A batch's tile is one panel, the one `expand` unpacks.
const _: () = assert!(BATCH_R == 1);

/// Unpacks the `n_groups` groups of a panel's planes into `out`, slice `s` of group `g` at `EXPANDED_GROUP · g +
/// SLICE_BYTES · s`: the registers `unpack` would give, computed once for every column of a batch.
///
/// With `SIGNED`, each byte is `u − OFFSET` instead (as a signed byte: every type's values fit), what the AMX tiles
/// multiply.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn expand<F: Format, const SIGNED: bool>(planes: &[u8], n_groups: usize, out: &mut [u8]) {
    assert!(planes.len() >= n_groups * F::GROUP_BYTES && out.len() >= n_groups * EXPANDED_GROUP);
    for g in 0..n_groups {
        let group = planes.as_ptr().wrapping_add(g * F::GROUP_BYTES);
        for line in (0..F::GROUP_BYTES).step_by(64) {
            _mm_prefetch::<_MM_HINT_T1>(group.wrapping_add(PREFETCH_AHEAD + line).cast());
        }
        for s in 0..8 {
            // SAFETY: group `g`'s planes and its expanded registers lie in the slices (asserted above).
            unsafe {
                let mut v = unpack::<F>(group, s / 4, s % 4);
                if SIGNED {
                    v = _mm512_sub_epi8(v, _mm512_set1_epi8(F::OFFSET as u8 as i8));
                }
                _mm512_storeu_si512(out.as_mut_ptr().add(g * EXPANDED_GROUP + s * SLICE_BYTES).cast(), v);
            }
        }
    }
}

/// One tile: panels `panels` (their header regions and planes, or with `X` their expanded planes) × columns `cols`
/// (each `n_groups` blocks); the results of column `c`, panel `r` go to `out[c][r]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile<F: Format, const R: usize, const C: usize, const X: bool>(
    panels: [(&[u8], &[u8]); R],
    cols: [&[BlockQ8A]; C],
    n_groups: usize,
    out: &mut [[__m512; MAX_R]; MAX_C],
) {
    let groups_per_unit = F::UNIT / QK;
    let units = n_groups / groups_per_unit;
    let group_bytes = if X { EXPANDED_GROUP } else { F::GROUP_BYTES };
    assert!(panels.iter().all(|(h, p)| h.len() >= units * F::HEADER && p.len() >= n_groups * group_bytes));
    assert!(cols.iter().all(|col| col.len() >= n_groups));
    let zero = _mm512_setzero_ps();
    let mut acc = [[zero; R]; C];
    for b in 0..units {
        let mut hdr = [std::ptr::null::<u8>(); R];
        let mut d = [zero; R];
        // `m` (BlockMin) or `−dmin` (GroupMin, HalvesMin).
        let mut m = [zero; R];
        for r in 0..R {
            // SAFETY: unit `b`'s header lies in the header region (asserted above); each field read below is
            // inside the `Format::HEADER` bytes its scaling lays out.
            unsafe {
                hdr[r] = panels[r].0.as_ptr().add(b * F::HEADER);
                (d[r], m[r]) = unit_scales::<F>(hdr[r]);
            }
        }
        for g in 0..groups_per_unit {
            let group = b * groups_per_unit + g;
            let mut planes = [std::ptr::null::<u8>(); R];
            for r in 0..R {
                // SAFETY: group `group`'s planes lie in the panel's planes (asserted above).
                planes[r] = unsafe { panels[r].1.as_ptr().add(group * group_bytes) };
                if !X {
                    let (from, len) = ahead::<F>(panels[r].0.as_ptr(), group);
                    for line in (0..len).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T1>(from.wrapping_add(line).cast());
                    }
                }
            }
            let mut a = [&cols[0][group]; C];
            for c in 0..C {
                a[c] = &cols[c][group];
            }
            if F::SCALING == Scaling::Halves {
                // Each half's integer dot times its row's integer scale (`vpmulld`), summed: one float step.
                let mut sc = [[_mm512_setzero_si512(); R]; 2];
                for (h, sc) in sc.iter_mut().enumerate() {
                    for r in 0..R {
                        // SAFETY: the scale bytes of half `2g + h` lie in the unit's header.
                        let run = unsafe { _mm_loadu_si128(hdr[r].add(header::HALF_SC + 16 * (2 * g + h)).cast()) };
                        sc[r] = _mm512_cvtepi8_epi32(run);
                    }
                }
                let mut dot = [[[_mm512_setzero_si512(); R]; C]; 2];
                for (h, dot) in dot.iter_mut().enumerate() {
                    for c in 0..C {
                        dot[c] = [_mm512_set1_epi32(-F::OFFSET * i32::from(a[c].half_sums[h])); R];
                    }
                    // SAFETY: `planes` point to this group's planes.
                    unsafe { add_dots::<F, R, C, X>(&planes, &a, h..h + 1, dot) };
                }
                for c in 0..C {
                    let da = _mm512_set1_ps(a[c].d);
                    for r in 0..R {
                        let i = _mm512_add_epi32(
                            _mm512_mullo_epi32(dot[0][c][r], sc[0][r]),
                            _mm512_mullo_epi32(dot[1][c][r], sc[1][r]),
                        );
                        acc[c][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(d[r], da), acc[c][r]);
                    }
                }
                continue;
            }
            if F::SCALING == Scaling::HalvesMin {
                for h in 0..2 {
                    let half = 2 * g + h;
                    let mut scale = [zero; R];
                    let mut min = [zero; R];
                    for r in 0..R {
                        // SAFETY: the scale bytes of half `half` lie in the unit's header.
                        let run = unsafe { _mm_loadu_si128(hdr[r].add(header::HALF_SCMN + 16 * half).cast()) };
                        let scmn = _mm512_cvtepu8_epi32(run);
                        let sc = _mm512_and_si512(scmn, _mm512_set1_epi32(0x0f));
                        scale[r] = _mm512_mul_ps(d[r], _mm512_cvtepi32_ps(sc));
                        min[r] = _mm512_mul_ps(m[r], _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(scmn)));
                    }
                    let mut dot = [[_mm512_setzero_si512(); R]; C];
                    for c in 0..C {
                        dot[c] = [_mm512_set1_epi32(-F::OFFSET * i32::from(a[c].half_sums[h])); R];
                    }
                    // SAFETY: `planes` point to this group's planes.
                    unsafe { add_dots::<F, R, C, X>(&planes, &a, h..h + 1, &mut dot) };
                    for c in 0..C {
                        let da = _mm512_set1_ps(a[c].d);
                        let sa = _mm512_set1_ps(a[c].d * f32::from(a[c].half_sums[h]));
                        for r in 0..R {
                            let s = _mm512_mul_ps(scale[r], da);
                            acc[c][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[c][r]), s, acc[c][r]);
                            acc[c][r] = _mm512_fmadd_ps(min[r], sa, acc[c][r]);
                        }
                    }
                }
                continue;
            }
            let mut scale = d;
            let mut min = m;
            if F::SCALING == Scaling::GroupMin {
                for r in 0..R {
                    // SAFETY: group `g`'s scale and minimum bytes lie in the unit's header.
                    unsafe {
                        scale[r] = _mm512_mul_ps(d[r], load_bytes_f32(hdr[r].add(header::SC + 16 * g)));
                        min[r] = _mm512_mul_ps(m[r], load_bytes_f32(hdr[r].add(header::MN + 16 * g)));
                    }
                }
            }
            if F::SCALING == Scaling::Group {
                for r in 0..R {
                    // SAFETY: group `g`'s signed scale bytes lie in the unit's header.
                    scale[r] =
                        _mm512_mul_ps(d[r], unsafe { load_signed_bytes_f32(hdr[r].add(header::GROUP_SC + 16 * g)) });
                }
            }
            let mut dot = [[_mm512_setzero_si512(); R]; C];
            for c in 0..C {
                dot[c] = [_mm512_set1_epi32(-F::OFFSET * a[c].sum); R];
            }
            // SAFETY: `planes` point to this group's planes.
            unsafe { add_dots::<F, R, C, X>(&planes, &a, 0..2, &mut dot) };
            for c in 0..C {
                let da = _mm512_set1_ps(a[c].d);
                let sa = _mm512_set1_ps(a[c].s);
                for r in 0..R {
                    let s = _mm512_mul_ps(scale[r], da);
                    acc[c][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[c][r]), s, acc[c][r]);
                    if matches!(F::SCALING, Scaling::BlockMin | Scaling::GroupMin) {
                        acc[c][r] = _mm512_fmadd_ps(min[r], sa, acc[c][r]);
                    }
                }
            }
        }
    }
    for c in 0..C {
        for r in 0..R {
            out[c][r] = acc[c][r];
        }
    }
}

type TileFn =
    unsafe fn(panels: [(&[u8], &[u8]); MAX_R], cols: [&[BlockQ8A]; MAX_C], usize, &mut [[__m512; MAX_R]; MAX_C]);

/// `tile::<F, R, C, X>` behind a common signature (the first `R` panels and `C` columns are used).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn tile_entry<F: Format, const R: usize, const C: usize, const X: bool>(
    panels: [(&[u8], &[u8]); MAX_R],
    cols: [&[BlockQ8A]; MAX_C],
    n_groups: usize,
    out: &mut [[__m512; MAX_R]; MAX_C],
) {
    tile::<F, R, C, X>(first(&panels), first(&cols), n_groups, out)
}

fn tiles<F: Format>() -> [[TileFn; MAX_C]; MAX_R] {
    [
        [
            tile_entry::<F, 1, 1, false>,
            tile_entry::<F, 1, 2, false>,
            tile_entry::<F, 1, 3, false>,
            tile_entry::<F, 1, 4, false>,
            tile_entry::<F, 1, 5, false>,
            tile_entry::<F, 1, 6, false>,
            tile_entry::<F, 1, 7, false>,
            tile_entry::<F, 1, 8, false>,
        ],
        [
            tile_entry::<F, 2, 1, false>,
            tile_entry::<F, 2, 2, false>,
            tile_entry::<F, 2, 3, false>,
            tile_entry::<F, 2, 4, false>,
            tile_entry::<F, 2, 4, false>,
            tile_entry::<F, 2, 4, false>,
            tile_entry::<F, 2, 4, false>,
            tile_entry::<F, 2, 4, false>,
        ],
    ]
}

/// The tiles of one expanded panel (`BATCH_R` is 1), by columns.
fn expanded_tiles<F: Format>() -> [TileFn; MAX_C] {
    [
        tile_entry::<F, 1, 1, true>,
        tile_entry::<F, 1, 2, true>,
        tile_entry::<F, 1, 3, true>,
        tile_entry::<F, 1, 4, true>,
        tile_entry::<F, 1, 5, true>,
        tile_entry::<F, 1, 6, true>,
        tile_entry::<F, 1, 7, true>,
        tile_entry::<F, 1, 8, true>,
    ]
}

/// Writes a tile's results: rows `16p..16p + 16` of each panel that lie in `out.rows()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn store(results: &[[__m512; MAX_R]; MAX_C], p0: usize, n_r: usize, c0: usize, n_c: usize, out: &mut OutRows) {
    for (c, col) in results.iter().enumerate().take(n_c) {
        for (r, v) in col.iter().enumerate().take(n_r) {
            store_column(*v, p0 + r, c0 + c, out);
        }
    }
}

/// Writes the 16 results of panel `p`, column `c`: those of its rows that lie in `out.rows()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn store_column(v: __m512, p: usize, c: usize, out: &mut OutRows) {
    let rows = out.rows();
    let mut values = [0f32; PANEL_ROWS];
    // SAFETY: `values` is 16 writable floats; `storeu` has no alignment requirement.
    unsafe { _mm512_storeu_ps(values.as_mut_ptr(), v) };
    let first = p * PANEL_ROWS;
    let (lo, hi) = (first.max(rows.start), (first + PANEL_ROWS).min(rows.end));
    if lo < hi {
        out.write(c, lo, &values[lo - first..hi - first]);
    }
}

/// With `AMX`, each run of 16 columns of a batch goes to one AMX tile (`amx::tile`) and the rest to this path's
/// tiles; the results are the same bits either way.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn matmul<F: Format, const AMX: bool>(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
    if !(AMX && n_cols >= amx::TILE_COLS) {
        return matmul_with::<F, false>(w, act, 0, n_cols, out, &[]);
    }
    // Runs of at most `amx::CHUNK_COLS` columns, each gathered on its own: a thread's copy of the activations stays
    // a few MiB however long the batch.
    let n_groups = w.blocks_per_row();
    let mut first = 0;
    while first < n_cols {
        let n = amx::CHUNK_COLS.min(n_cols - first);
        let chunk = &act[first * n_groups..(first + n) * n_groups];
        amx::with_gathered(chunk, n, n_groups, |gathered| matmul_with::<F, AMX>(w, chunk, first, n, out, gathered));
        first += n;
    }
}

/// `matmul` of the `n_cols` columns of `act`, which are the batch's columns `first_col..` (where `out` takes
/// them), the activations of their whole 16-column tiles gathered in `gathered` (`amx::with_gathered`) when `AMX`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn matmul_with<F: Format, const AMX: bool>(
    w: &PackedMatrix,
    act: &[BlockQ8A],
    first_col: usize,
    n_cols: usize,
    out: &mut OutRows,
    gathered: &[amx::GatheredGroup],
) {
    let n_groups = w.blocks_per_row();
    let rows = out.rows();
    if rows.is_empty() || n_cols == 0 {
        return;
    }
    let (p_start, p_end) = (rows.start / PANEL_ROWS, rows.end.div_ceil(PANEL_ROWS));
    let fns = tiles::<F>();
    let expanded_fns = expanded_tiles::<F>();
    let col = |c: usize| &act[c * n_groups..(c + 1) * n_groups];
    let mut results = [[_mm512_setzero_ps(); MAX_R]; MAX_C];
    // Row tiles outside, every column inside: a row tile's weights (tens to hundreds of KiB) stay in L2 while the
    // batch's activations pass by, so each weight is read from memory once per matmul.
    let (rows_per_tile, cols_per_tile) = if n_cols == 1 { (1, 1) } else { (BATCH_R, BATCH_C) };
    // Where more than one column tile meets a panel, the panel is unpacked once (`expand`) and each tile loads its
    // slices: for Q6_K the unpacking was a fifth of a batch's instructions, done again for every 8 columns.
    let expand_panels = expands::<F>() && n_cols > cols_per_tile;
    let amx = AMX && n_cols >= amx::TILE_COLS;
    // SAFETY: `AMX` is set only by `matmul_packed_amx`, reached through the `amx` table, which `select` hands out
    // after `amx::is_supported`.
    let _tiles = amx.then(|| unsafe { amx::Tiles::configure::<F>() });
    let mut amx_results = [_mm512_setzero_ps(); amx::TILE_COLS];
    let mut p = p_start;
    while p < p_end {
        let n_r = rows_per_tile.min(p_end - p);
        // Only the tile's `n_r` panels and `n_c` columns are set: a tile reads no others.
        let mut panels: [(&[u8], &[u8]); MAX_R] = [(&[], &[]); MAX_R];
        for (r, panel) in panels.iter_mut().enumerate().take(n_r) {
            *panel = w.panel(p + r);
        }
        // A panel's expansion reads it from memory; each column tile of this panel asks for its share of the
        // next one (`request_share`), so that expansion finds it in L2 instead of waiting on it.
        let next = if p + 1 < p_end { w.panel(p + 1) } else { (&[][..], &[][..]) };
        let mut column_tiles =
            |c0: usize, panels: [(&[u8], &[u8]); MAX_R], fns: &[TileFn; MAX_C], out: &mut OutRows| {
                let mut c0 = c0;
                let n_tiles = (n_cols - c0.min(n_cols)).div_ceil(cols_per_tile);
                while c0 < n_cols {
                    let n_c = cols_per_tile.min(n_cols - c0);
                    if expand_panels {
                        request_share(next, n_tiles - (n_cols - c0).div_ceil(cols_per_tile), n_tiles);
                    }
                    let mut cols: [&[BlockQ8A]; MAX_C] = [&[]; MAX_C];
                    for (c, slot) in cols.iter_mut().enumerate().take(n_c) {
                        *slot = col(c0 + c);
                    }
                    // SAFETY: this function has the features the tile functions need.
                    unsafe { fns[n_c - 1](panels, cols, n_groups, &mut results) };
                    store(&results, p, n_r, first_col + c0, n_c, out);
                    c0 += n_c;
                }
            };
        if amx {
            // Every type expanded, as signed `u − OFFSET` (`tdpbssd`): the offset then costs nothing per column.
            let done = with_expanded(n_groups * EXPANDED_GROUP, |expanded| {
                expand::<F, true>(panels[0].1, n_groups, expanded);
                let mut c0 = 0;
                let n_tiles = n_cols / amx::TILE_COLS;
                while n_cols - c0 >= amx::TILE_COLS {
                    request_share(next, c0 / amx::TILE_COLS, n_tiles);
                    // SAFETY: tiles configured above; `amx::tile` asserts the slices' lengths.
                    unsafe {
                        let tile_groups = &gathered[c0 / amx::TILE_COLS * n_groups..];
                        let cols = &act[c0 * n_groups..];
                        amx::tile::<F>(panels[0].0, expanded, tile_groups, cols, n_groups, &mut amx_results)
                    };
                    for (c, v) in amx_results.iter().enumerate() {
                        store_column(*v, p, first_col + c0 + c, out);
                    }
                    c0 += amx::TILE_COLS;
                }
                c0
            });
            // The last columns (fewer than a tile's 16) on this path's tiles, unpacking as they go.
            column_tiles(done, panels, &fns[0], out);
        } else if expand_panels {
            with_expanded(n_groups * EXPANDED_GROUP, |expanded| {
                expand::<F, false>(panels[0].1, n_groups, expanded);
                column_tiles(0, [(panels[0].0, &*expanded); MAX_R], &expanded_fns, out)
            });
        } else {
            column_tiles(0, panels, &fns[n_r - 1], out);
        }
        p += n_r;
    }
}

/// The AVX-512 `Kernels::matmul_packed` (arguments checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn matmul_packed(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
    with_format!(w.dtype(), F => matmul::<F, false>(w, act, n_cols, out), _ => unreachable!("packed types only"))
}

/// The `amx` path's `Kernels::matmul_packed` (arguments checked by the caller): this path's, with batches of 16
/// columns and more on AMX tiles.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn matmul_packed_amx(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
    with_format!(w.dtype(), F => matmul::<F, true>(w, act, n_cols, out), _ => unreachable!("packed types only"))
}

/// `Kernels::matmul_q8` on this path: the float weight types, which are not packed, run the shared scalar code
/// (every path runs it; the models we know keep only norms in float), compiled with this path's features.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn matmul_q8_float(w: &WeightMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
    scalar::matmul_q8(w, act, n_cols, out)
}
