//! The AVX2 matmul over packed weights (`packed`): a 256-bit register holds one accumulator for each of 8 rows, an
//! "octet", the low or the high half of a 16-row panel (bytes `0..32` or `32..64` of each 64-byte plane register).
//!
//! Without VNNI, the integer dot of a slice is `vpmaddubsw` (two products per 16-bit lane) then `vpmaddwd` by ones
//! (four per 32-bit lane); for Q3_K and Q6_K, whose halves' dots are scaled in integers, `vpmaddwd` by the half's
//! integer scale instead, which does that multiply for free. The 16-bit sums of several slices are added before
//! widening while they cannot overflow: `2·u_max·127` per slice (`u_max` the type's largest value), so a group's
//! eight slices for the 4-bit types, four for the 5-bit ones and MXFP4 (whose codebook's `u` reach 24), two for the
//! 6-bit one. Q8_0's values (`q + 128`), and the IQ4 types' (their codebook's value + 128),
//! exceed what `vpmaddubsw` multiplies without saturating, so they are turned back into `q` and multiplied by sign
//! (`|q|` times the activation with `q`'s sign), and its dot starts from 0 instead of `−128·Σ qa`: the same
//! integer. The IQ4 types' codebook gives each value in sign and magnitude, so that the magnitude is one mask.
//! Then each lane takes the group's float steps of `packed::scalar`, in its order, so every output is the scalar
//! path's bits, whatever the tile (batch invariance).

use std::arch::x86_64::*;

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

/// Rows of an octet.
const OCTET: usize = 8;
/// Most octets and columns of a tile.
const MAX_R: usize = 2;
const MAX_C: usize = 4;

/// Activations kept hot while a panel of columns meets every row tile (as in `tiling`).
const PANEL_BYTES: usize = 256 * 1024;

/// 32 bytes at `p`.
///
/// # Safety
/// `p` must point to 32 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// 8 f16 values at `p`, as f32.
///
/// # Safety
/// `p` must point to 16 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes; `loadu` has no alignment requirement.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
}

/// 8 signed bytes at `p` as 32-bit integers (IQ4_XS' group scales).
///
/// # Safety
/// `p` must point to 8 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_signed_bytes_i32(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 8 readable bytes.
    _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(unsafe { p.cast::<i64>().read_unaligned() }))
}

/// 8 unsigned bytes at `p` as 32-bit integers.
///
/// # Safety
/// `p` must point to 8 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_bytes_i32(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 8 readable bytes.
    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(unsafe { p.cast::<i64>().read_unaligned() }))
}

/// The half scales `2^(e − 128)` of the 8 E8M0 bytes at `p` (MXFP4), each as `mxfp4::e8m0_to_fp32_half` builds
/// its bits: `(e − 1) << 23`, or the subnormal `0x200000 << e` for `e` 0 and 1.
///
/// # Safety
/// `p` must point to 8 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_e8m0(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 8 readable bytes.
    let e = unsafe { load_bytes_i32(p) };
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small))
}

/// Bytes before a group's base plane.
const fn high_bytes<F: Format>() -> usize {
    match F::HIGH {
        High::None => 0,
        High::Bit(_) => BIT_BYTES,
        High::Crumbs(_) => CRUMB_BYTES,
    }
}

/// The largest `u` of a type.
const fn max_value<F: Format>() -> i32 {
    if let Some(book) = F::CODEBOOK {
        let (mut max, mut c) = (0, 0);
        while c < 16 {
            if book[c] as i32 > max {
                max = book[c] as i32;
            }
            c += 1;
        }
        return max;
    }
    let base = match F::BASE {
        Base::Nibbles => 15,
        Base::Crumbs => 3,
        Base::Bytes => 255,
    };
    match F::HIGH {
        High::None => base,
        High::Bit(shift) => base | (1 << shift),
        High::Crumbs(shift) => base | (3 << shift),
    }
}

/// Whether the type's `u` (`q + 128`, Q8_0's, or a codebook's entries past 127, the IQ4 types') are multiplied by
/// sign: `vpmaddubsw` would saturate on them as unsigned bytes.
const fn by_sign<F: Format>() -> bool {
    matches!(F::BASE, Base::Bytes) || max_value::<F>() > 127
}

/// Slices whose 16-bit sums can be added before widening (see the module documentation).
const fn slices_per_widening<F: Format>() -> usize {
    if by_sign::<F>() {
        return 1;
    }
    let per_slice = 2 * max_value::<F>() * 127;
    let n = (i16::MAX as i32 / per_slice) as usize;
    if n >= 8 {
        8
    } else if n >= 4 {
        4
    } else if n >= 2 {
        2
    } else {
        1
    }
}

/// Bits `0..32` of `bits`, one per byte: `0xff` where set.
#[target_feature(enable = "avx2,fma,f16c")]
fn bit_bytes(bits: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select)
}

/// Slice `4h + t` of octet `o` of the group whose planes start at `planes`: its 8 rows' four values each (`u`, or
/// for a codebook type multiplied by sign, the value in sign and magnitude).
///
/// # Safety
/// `planes` must point to a group's `Format::GROUP_BYTES` readable bytes, `o < 2`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack<F: Format>(planes: *const u8, o: usize, h: usize, t: usize) -> __m256i {
    // SAFETY (every access below): the offsets stay inside the group's planes, whose layout `Format` describes.
    unsafe {
        let base = planes.add(high_bytes::<F>() + 32 * o);
        let mut v = match F::BASE {
            Base::Nibbles => {
                let x = load(base.add(SLICE_BYTES * t));
                let x = if h == 0 { x } else { _mm256_srli_epi16::<4>(x) };
                _mm256_and_si256(x, _mm256_set1_epi8(0x0f))
            }
            Base::Crumbs => {
                let x = load(base.add(SLICE_BYTES * h));
                _mm256_and_si256(_mm256_srl_epi16(x, _mm_cvtsi32_si128(2 * t as i32)), _mm256_set1_epi8(3))
            }
            Base::Bytes => load(base.add(SLICE_BYTES * (4 * h + t))),
        };
        match F::HIGH {
            High::None => {}
            High::Bit(shift) => {
                let bits = planes.add(8 * (4 * h + t) + 4 * o).cast::<u32>().read_unaligned();
                v = _mm256_or_si256(v, _mm256_and_si256(bit_bytes(bits), _mm256_set1_epi8(1 << shift)));
            }
            High::Crumbs(shift) => {
                let x = load(planes.add(SLICE_BYTES * h + 32 * o));
                let (from, to) = (2 * t as i32, shift as i32);
                let x = if to >= from {
                    _mm256_sll_epi16(x, _mm_cvtsi32_si128(to - from))
                } else {
                    _mm256_srl_epi16(x, _mm_cvtsi32_si128(from - to))
                };
                v = _mm256_or_si256(v, _mm256_and_si256(x, _mm256_set1_epi8((3 << shift) as i8)));
            }
        }
        match F::CODEBOOK {
            // Each byte's code (below 16) picks its entry from the codebook in its 128-bit lane: `u`, or for the
            // types multiplied by sign the value in sign and magnitude (`sign_magnitude`).
            Some(_) => {
                let book = const { lookup::<F>() };
                _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(book.as_ptr().cast())), v)
            }
            None => v,
        }
    }
}

/// The entries `unpack` looks a type's codes up in.
const fn lookup<F: Format>() -> [u8; 16] {
    match F::CODEBOOK {
        Some(book) if by_sign::<F>() => sign_magnitude(book),
        Some(book) => book,
        None => [0; 16],
    }
}

/// A codebook of `u = value + 128` (multiplied by sign) as each value's sign and magnitude: bit 7 set for a
/// negative value, bits `0..7` its magnitude (at most 127). `vpsignb` reads the sign from the byte as it is and
/// the magnitude is one mask away, where `u` needs a flip of bit 7 and a `vpabsb` (`pair_sums`).
const fn sign_magnitude(book: [u8; 16]) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut c = 0;
    while c < 16 {
        let value = book[c] as i32 - 128;
        out[c] = if value < 0 { 0x80 | (-value) as u8 } else { value as u8 };
        c += 1;
    }
    out
}

/// The four activations of slice `4h + t` of `a`, in every 32-bit lane.
#[target_feature(enable = "avx2,fma,f16c")]
fn activations(a: &BlockQ8A, h: usize, t: usize) -> __m256i {
    let at = 16 * h + 4 * t;
    _mm256_set1_epi32(i32::from_le_bytes([a.qs[at] as u8, a.qs[at + 1] as u8, a.qs[at + 2] as u8, a.qs[at + 3] as u8]))
}

/// The 16-bit pair sums of one slice: `w·q` two products per lane, exact.
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_sums<F: Format>(w: __m256i, q: __m256i) -> __m256i {
    const { assert!(!by_sign::<F>() || F::OFFSET == 128, "multiplied by sign: u is the value plus 128") };
    if by_sign::<F>() && F::CODEBOOK.is_some() {
        // `w` holds the value in sign and magnitude (`unpack`): its magnitude times the activation with its sign.
        _mm256_maddubs_epi16(_mm256_and_si256(w, _mm256_set1_epi8(0x7f)), _mm256_sign_epi8(q, w))
    } else if by_sign::<F>() {
        // `w` holds q_w + 128: back to q_w, then |q_w| times the activation with q_w's sign.
        let signed = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
        _mm256_maddubs_epi16(_mm256_abs_epi8(signed), _mm256_sign_epi8(q, signed))
    } else {
        _mm256_maddubs_epi16(w, q)
    }
}

/// Adds the integer dots of halves `halves` of one group of each of `R` octets against each of `C` columns to
/// `dot[c][r]`, each times `scale[r]`: the 16-bit sums are widened by `vpmaddwd` with `scale[r]`, whose 16-bit
/// lanes hold a row's integer scale twice (ones for the types without one).
///
/// # Safety
/// Each `planes[r]` must point to a group's `Format::GROUP_BYTES` readable bytes (with `X`, its octet's
/// `EXPANDED_GROUP`), `octets[r] < 2`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn add_dots<F: Format, const R: usize, const C: usize, const X: bool>(
    planes: &[*const u8; R],
    octets: &[usize; R],
    a: &[&BlockQ8A; C],
    halves: std::ops::Range<usize>,
    scale: &[__m256i; R],
    dot: &mut [[__m256i; R]; C],
) {
    let per_widening = slices_per_widening::<F>();
    let mut sums = [[_mm256_setzero_si256(); R]; C];
    let mut pending = 0;
    for h in halves {
        for t in 0..4 {
            let mut w = [_mm256_setzero_si256(); R];
            for r in 0..R {
                // SAFETY: the caller guarantees the planes and octets.
                w[r] = unsafe {
                    if X {
                        load(planes[r].add(OCTET_SLICE * (4 * h + t)))
                    } else {
                        unpack::<F>(planes[r], octets[r], h, t)
                    }
                };
            }
            for c in 0..C {
                let q = activations(a[c], h, t);
                for r in 0..R {
                    let p = pair_sums::<F>(w[r], q);
                    sums[c][r] = if pending == 0 { p } else { _mm256_add_epi16(sums[c][r], p) };
                }
            }
            pending += 1;
            if pending == per_widening {
                for c in 0..C {
                    for r in 0..R {
                        dot[c][r] = _mm256_add_epi32(dot[c][r], _mm256_madd_epi16(sums[c][r], scale[r]));
                    }
                }
                pending = 0;
            }
        }
    }
    if pending > 0 {
        for c in 0..C {
            for r in 0..R {
                dot[c][r] = _mm256_add_epi32(dot[c][r], _mm256_madd_epi16(sums[c][r], scale[r]));
            }
        }
    }
}

/// The integer dot's start for an offset `OFFSET · Σ qa` (Q8_0's sign multiply needs none).
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_start<F: Format>(sum: i32) -> __m256i {
    if by_sign::<F>() {
        _mm256_setzero_si256()
    } else {
        _mm256_set1_epi32(-F::OFFSET * sum)
    }
}

/// One tile: octets `octets[r]` of panels `panels[r]` × columns `cols` (each `n_groups` blocks); the results of
/// column `c`, octet `r` go to `out[c][r]`.
#[target_feature(enable = "avx2,fma,f16c")]
fn tile<F: Format, const R: usize, const C: usize, const X: bool>(
    panels: [(&[u8], &[u8]); R],
    octets: [usize; R],
    cols: [&[BlockQ8A]; C],
    n_groups: usize,
    out: &mut [[__m256; MAX_R]; MAX_C],
) {
    let groups_per_unit = F::UNIT / QK;
    let units = n_groups / groups_per_unit;
    let group_bytes = if X { EXPANDED_GROUP } else { F::GROUP_BYTES };
    for r in 0..R {
        assert!(panels[r].0.len() >= units * F::HEADER && panels[r].1.len() >= n_groups * group_bytes);
        assert!(octets[r] < 2);
    }
    assert!(cols.iter().all(|col| col.len() >= n_groups));
    let zero = _mm256_setzero_ps();
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[zero; R]; C];
    for b in 0..units {
        let mut hdr = [std::ptr::null::<u8>(); R];
        let mut d = [zero; R];
        // `m` (BlockMin) or `−dmin` (GroupMin, HalvesMin).
        let mut m = [zero; R];
        for r in 0..R {
            let o = octets[r];
            // SAFETY: unit `b`'s header lies in the header region (asserted above); each field read below is
            // inside the `Format::HEADER` bytes its scaling lays out, at octet `o`'s 8 of its 16 values.
            unsafe {
                hdr[r] = panels[r].0.as_ptr().add(b * F::HEADER);
                d[r] = match F::SCALING {
                    Scaling::Halves | Scaling::Group => _mm256_loadu_ps(hdr[r].add(header::D + 32 * o).cast()),
                    Scaling::E8m0 => load_e8m0(hdr[r].add(header::E + 8 * o)),
                    _ => load_f16(hdr[r].add(header::D + 16 * o)),
                };
                m[r] = match F::SCALING {
                    Scaling::BlockMin => load_f16(hdr[r].add(header::M + 16 * o)),
                    Scaling::GroupMin | Scaling::HalvesMin => {
                        _mm256_sub_ps(zero, load_f16(hdr[r].add(header::M + 16 * o)))
                    }
                    _ => zero,
                };
            }
        }
        for g in 0..groups_per_unit {
            let group = b * groups_per_unit + g;
            let mut planes = [std::ptr::null::<u8>(); R];
            for r in 0..R {
                // SAFETY: group `group`'s planes lie in the panel's planes (asserted above).
                planes[r] = unsafe { panels[r].1.as_ptr().add(group * group_bytes) };
                if !X && octets[r] == 0 {
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
                // Per row, the two halves' integer scales: interleaved as 16-bit pairs (for the offset term) and
                // each repeated in both 16-bit lanes of a row (for `add_dots`).
                let mut sc_pairs = [_mm256_setzero_si256(); R];
                let mut sc_half = [[_mm256_setzero_si256(); R]; 2];
                for r in 0..R {
                    let o = octets[r];
                    // SAFETY: the scale bytes of halves `2g` and `2g + 1` lie in the unit's header.
                    let (lo, hi) = unsafe {
                        (
                            _mm_loadl_epi64(hdr[r].add(header::HALF_SC + 16 * (2 * g) + 8 * o).cast()),
                            _mm_loadl_epi64(hdr[r].add(header::HALF_SC + 16 * (2 * g + 1) + 8 * o).cast()),
                        )
                    };
                    sc_pairs[r] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, hi));
                    sc_half[0][r] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, lo));
                    sc_half[1][r] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(hi, hi));
                }
                // The dots start from `−OFFSET · (sc_0·Σ_0 q + sc_1·Σ_1 q)`: one `vpmaddwd` of the scale pairs with
                // the half sums, shifted (`OFFSET` is a power of two) and negated.
                const {
                    let shifts = F::OFFSET.count_ones() == 1;
                    assert!(shifts || !matches!(F::SCALING, Scaling::Halves), "the offset term is a shift");
                };
                let shift = _mm_cvtsi32_si128(F::OFFSET.trailing_zeros() as i32);
                let mut dot = [[_mm256_setzero_si256(); R]; C];
                // Types multiplied by sign start from 0 (`dot_start`).
                for c in 0..C {
                    let half_sums = _mm256_set1_epi32(i32::from_le_bytes(bytemuck::cast(a[c].half_sums)));
                    for r in 0..R {
                        if !by_sign::<F>() {
                            let offset = _mm256_sll_epi32(_mm256_madd_epi16(sc_pairs[r], half_sums), shift);
                            dot[c][r] = _mm256_sub_epi32(_mm256_setzero_si256(), offset);
                        }
                    }
                }
                for (h, scale) in sc_half.iter().enumerate() {
                    // SAFETY: `planes` point to this group's planes, the octets are 0 or 1.
                    unsafe { add_dots::<F, R, C, X>(&planes, &octets, &a, h..h + 1, scale, &mut dot) };
                }
                for c in 0..C {
                    let da = _mm256_set1_ps(a[c].d);
                    for r in 0..R {
                        let s = _mm256_mul_ps(d[r], da);
                        acc[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[c][r]), s, acc[c][r]);
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
                        let o = octets[r];
                        // SAFETY: the scale bytes of half `half` lie in the unit's header.
                        let scmn = unsafe { load_bytes_i32(hdr[r].add(header::HALF_SCMN + 16 * half + 8 * o)) };
                        let sc = _mm256_and_si256(scmn, _mm256_set1_epi32(0x0f));
                        scale[r] = _mm256_mul_ps(d[r], _mm256_cvtepi32_ps(sc));
                        min[r] = _mm256_mul_ps(m[r], _mm256_cvtepi32_ps(_mm256_srli_epi32::<4>(scmn)));
                    }
                    let mut dot = [[_mm256_setzero_si256(); R]; C];
                    for c in 0..C {
                        dot[c] = [dot_start::<F>(i32::from(a[c].half_sums[h])); R];
                    }
                    // SAFETY: `planes` point to this group's planes, the octets are 0 or 1.
                    unsafe { add_dots::<F, R, C, X>(&planes, &octets, &a, h..h + 1, &[ones; R], &mut dot) };
                    for c in 0..C {
                        let da = _mm256_set1_ps(a[c].d);
                        let sa = _mm256_set1_ps(a[c].d * f32::from(a[c].half_sums[h]));
                        for r in 0..R {
                            let s = _mm256_mul_ps(scale[r], da);
                            acc[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[c][r]), s, acc[c][r]);
                            acc[c][r] = _mm256_fmadd_ps(min[r], sa, acc[c][r]);
                        }
                    }
                }
                continue;
            }
            let mut scale = d;
            let mut min = m;
            if F::SCALING == Scaling::GroupMin {
                for r in 0..R {
                    let o = octets[r];
                    // SAFETY: group `g`'s scale and minimum bytes lie in the unit's header.
                    unsafe {
                        let sc = load_bytes_i32(hdr[r].add(header::SC + 16 * g + 8 * o));
                        let mn = load_bytes_i32(hdr[r].add(header::MN + 16 * g + 8 * o));
                        scale[r] = _mm256_mul_ps(d[r], _mm256_cvtepi32_ps(sc));
                        min[r] = _mm256_mul_ps(m[r], _mm256_cvtepi32_ps(mn));
                    }
                }
            }
            if F::SCALING == Scaling::Group {
                for r in 0..R {
                    // SAFETY: group `g`'s signed scale bytes lie in the unit's header, octet `o`'s 8 of 16.
                    let sc = unsafe { load_signed_bytes_i32(hdr[r].add(header::GROUP_SC + 16 * g + 8 * octets[r])) };
                    scale[r] = _mm256_mul_ps(d[r], _mm256_cvtepi32_ps(sc));
                }
            }
            let mut dot = [[_mm256_setzero_si256(); R]; C];
            for c in 0..C {
                dot[c] = [dot_start::<F>(a[c].sum); R];
            }
            // SAFETY: `planes` point to this group's planes, the octets are 0 or 1.
            unsafe { add_dots::<F, R, C, X>(&planes, &octets, &a, 0..2, &[ones; R], &mut dot) };
            for c in 0..C {
                let da = _mm256_set1_ps(a[c].d);
                let sa = _mm256_set1_ps(a[c].s);
                for r in 0..R {
                    let s = _mm256_mul_ps(scale[r], da);
                    acc[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[c][r]), s, acc[c][r]);
                    if matches!(F::SCALING, Scaling::BlockMin | Scaling::GroupMin) {
                        acc[c][r] = _mm256_fmadd_ps(min[r], sa, acc[c][r]);
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
    unsafe fn([(&[u8], &[u8]); MAX_R], [usize; MAX_R], [&[BlockQ8A]; MAX_C], usize, &mut [[__m256; MAX_R]; MAX_C]);

/// `tile::<F, R, C, X>` behind a common signature (the first `R` octets and `C` columns are used).
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_entry<F: Format, const R: usize, const C: usize, const X: bool>(
    panels: [(&[u8], &[u8]); MAX_R],
    octets: [usize; MAX_R],
    cols: [&[BlockQ8A]; MAX_C],
    n_groups: usize,
    out: &mut [[__m256; MAX_R]; MAX_C],
) {
    tile::<F, R, C, X>(first(&panels), first(&octets), first(&cols), n_groups, out)
}

fn tiles<F: Format>() -> [[TileFn; MAX_C]; MAX_R] {
    [
        [
            tile_entry::<F, 1, 1, false>,
            tile_entry::<F, 1, 2, false>,
            tile_entry::<F, 1, 3, false>,
            tile_entry::<F, 1, 4, false>,
        ],
        [
            tile_entry::<F, 2, 1, false>,
            tile_entry::<F, 2, 2, false>,
            tile_entry::<F, 2, 3, false>,
            tile_entry::<F, 2, 4, false>,
        ],
    ]
}

/// The tiles of one expanded octet, by columns.
fn expanded_tiles<F: Format>() -> [TileFn; MAX_C] {
    [tile_entry::<F, 1, 1, true>, tile_entry::<F, 1, 2, true>, tile_entry::<F, 1, 3, true>, tile_entry::<F, 1, 4, true>]
}

/// Bytes of one slice of an octet: 4 values of each of its 8 rows.
const OCTET_SLICE: usize = SLICE_BYTES / 2;
/// Bytes of an expanded group of one octet (`expand`): its 8 slices, a register each.
const EXPANDED_GROUP: usize = 8 * OCTET_SLICE;

/// Unpacks octet `o` of the `n_groups` groups of a panel's planes into `out`, slice `s` of group `g` at
/// `EXPANDED_GROUP · g + OCTET_SLICE · s`: the registers `unpack` would give, computed once for every column of a
/// batch.
#[target_feature(enable = "avx2,fma,f16c")]
fn expand<F: Format>(planes: &[u8], o: usize, n_groups: usize, out: &mut [u8]) {
    assert!(o < 2 && planes.len() >= n_groups * F::GROUP_BYTES && out.len() >= n_groups * EXPANDED_GROUP);
    for g in 0..n_groups {
        let group = planes.as_ptr().wrapping_add(g * F::GROUP_BYTES);
        if o == 0 {
            for line in (0..F::GROUP_BYTES).step_by(64) {
                _mm_prefetch::<_MM_HINT_T1>(group.wrapping_add(PREFETCH_AHEAD + line).cast());
            }
        }
        for s in 0..8 {
            // SAFETY: group `g`'s planes and its expanded registers lie in the slices (asserted above).
            unsafe {
                let v = unpack::<F>(group, o, s / 4, s % 4);
                _mm256_storeu_si256(out.as_mut_ptr().add(g * EXPANDED_GROUP + s * OCTET_SLICE).cast(), v);
            }
        }
    }
}

/// Writes a tile's results: the rows of each octet (`first_octet + r`, counted over the whole matrix) that lie in
/// `out.rows()`.
#[target_feature(enable = "avx2,fma,f16c")]
fn store(results: &[[__m256; MAX_R]; MAX_C], first_octet: usize, n_r: usize, c0: usize, n_c: usize, out: &mut OutRows) {
    let rows = out.rows();
    for (c, col) in results.iter().enumerate().take(n_c) {
        for (r, v) in col.iter().enumerate().take(n_r) {
            let mut values = [0f32; OCTET];
            // SAFETY: `values` is 8 writable floats; `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_ps(values.as_mut_ptr(), *v) };
            let first = (first_octet + r) * OCTET;
            let (lo, hi) = (first.max(rows.start), (first + OCTET).min(rows.end));
            if lo < hi {
                out.write(c0 + c, lo, &values[lo - first..hi - first]);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn matmul<F: Format>(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
    let n_groups = w.blocks_per_row();
    let rows = out.rows();
    if rows.is_empty() || n_cols == 0 {
        return;
    }
    let (o_start, o_end) = (rows.start / OCTET, rows.end.div_ceil(OCTET));
    let fns = tiles::<F>();
    let col = |c: usize| &act[c * n_groups..(c + 1) * n_groups];
    let mut results = [[_mm256_setzero_ps(); MAX_R]; MAX_C];
    let panel_cols = (PANEL_BYTES / (n_groups * size_of::<BlockQ8A>()).max(1)).max(MAX_C);
    // A matvec takes a panel's two octets at once; a batch one octet by up to four columns (the accumulators of
    // wider tiles do not fit AVX2's 16 registers).
    let (octets_per_tile, cols_per_tile) = if n_cols == 1 { (MAX_R, 1) } else { (1, MAX_C) };
    // Where more than one column tile meets an octet, the octet is unpacked once (`expand`; see the AVX-512 path).
    let expanded_fns = expanded_tiles::<F>();
    let mut col_start = 0;
    while col_start < n_cols {
        let col_end = (col_start + panel_cols).min(n_cols);
        let expand_octets = expands::<F>() && col_end - col_start > cols_per_tile;
        let mut o = o_start;
        while o < o_end {
            let n_r = octets_per_tile.min(o_end - o);
            // Only the tile's `n_r` octets and `n_c` columns are set: a tile reads no others.
            let mut panels: [(&[u8], &[u8]); MAX_R] = [(&[], &[]); MAX_R];
            let mut octets = [0; MAX_R];
            for r in 0..n_r {
                panels[r] = w.panel((o + r) * OCTET / PANEL_ROWS);
                octets[r] = (o + r) % (PANEL_ROWS / OCTET);
            }
            // The next octet's panel, where it is another one: each column tile asks for its share (as the
            // AVX-512 path does).
            let next_octet = o + n_r;
            let next =
                if expand_octets && next_octet < o_end && next_octet * OCTET / PANEL_ROWS != o * OCTET / PANEL_ROWS {
                    w.panel(next_octet * OCTET / PANEL_ROWS)
                } else {
                    (&[][..], &[][..])
                };
            let n_tiles = (col_end - col_start).div_ceil(cols_per_tile);
            let mut column_tiles = |panels: [(&[u8], &[u8]); MAX_R], fns: &[TileFn; MAX_C]| {
                let mut c0 = col_start;
                while c0 < col_end {
                    let n_c = cols_per_tile.min(col_end - c0);
                    request_share(next, (c0 - col_start) / cols_per_tile, n_tiles);
                    let mut cols: [&[BlockQ8A]; MAX_C] = [&[]; MAX_C];
                    for (c, slot) in cols.iter_mut().enumerate().take(n_c) {
                        *slot = col(c0 + c);
                    }
                    // SAFETY: this function has the features the tile functions need.
                    unsafe { fns[n_c - 1](panels, octets, cols, n_groups, &mut results) };
                    store(&results, o, n_r, c0, n_c, out);
                    c0 += n_c;
                }
            };
            if expand_octets {
                with_expanded(n_groups * EXPANDED_GROUP, |expanded| {
                    expand::<F>(panels[0].1, octets[0], n_groups, expanded);
                    column_tiles([(panels[0].0, &*expanded); MAX_R], &expanded_fns)
                });
            } else {
                column_tiles(panels, &fns[n_r - 1]);
            }
            o += n_r;
        }
        col_start = col_end;
    }
}

/// The AVX2 `Kernels::matmul_packed` (arguments checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn matmul_packed(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
    with_format!(w.dtype(), F => matmul::<F>(w, act, n_cols, out), _ => unreachable!("packed types only"))
}

/// `Kernels::matmul_q8` on this path: the float weight types, which are not packed, run the shared scalar code
/// (every path runs it; the models we know keep only norms in float), compiled with this path's features.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn matmul_q8_float(w: &WeightMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
    scalar::matmul_q8(w, act, n_cols, out)
}
