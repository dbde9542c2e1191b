//! The `amx` path's batch matmul: the integer dots of 16 columns × 16 rows of one group computed by one AMX tile
//! instruction (`tdpbssd`, Intel since Sapphire Rapids), the float steps after it the AVX-512 path's, lane for lane.
//!
//! A prefill spends most of its time in the packed matmul, and on the AVX-512 path most of that in `vpdpbusd`
//! with an activation broadcast per four products of 16 rows: 16 instructions per group and column. One `tdpbssd`
//! computes a group's 512 products for 16 columns at once, reading the activations as a tile (16 columns' 32
//! bytes, straight from their `BlockQ8A` blocks) and the weights as the panel's expanded slices, which are the
//! tile layout the instruction wants (row `k` of the weight tile holds elements `4k..4k + 4` of the 16 rows). The
//! panel is expanded as signed `u − OFFSET` (every type's values fit a signed byte), so that the offset costs no
//! instruction per column. The integer dots are exactly the other paths' (sums of the same products, in 32 bits
//! without overflow), so this path computes every other path's bits (`packed::scalar`); only the tile's 16 × 16
//! dots go through memory (`tilestored`) on their way to the lanes of the accumulators, which then take the float
//! steps of `avx512::packed::tile`.
//!
//! What limits it (Sapphire Rapids guest, `cargo bench --bench kernels -- amx 1b_up n_cols=512`): the tile loads
//! and stores, not the products. A 32-element group gives only 16 × 16 × 32 products per stored tile of dots
//! (every group has its own activation scale, so the dots cannot stay in the tile across groups), and the types
//! with a scale per 16 elements need two such tiles per group and twice the float steps. One thread, GMAC/s,
//! AVX-512 → AMX: Q8_0 192 → 372, Q4_K 208 → 293, Q6_K 188 → 204. Gathering each tile's activations once per
//! matmul (`with_gathered`: 8 consecutive lines per tile load instead of 16 scattered blocks) took Q8_0 from 321 to
//! 372; starting the next group's products before storing this group's dots saved 7-13 % of the tiles' own time.
//!
//! Linux hands out AMX's 8 KiB of tile state per process on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`): the first
//! time the kernel paths are listed, ember asks, and without the permission this path is not offered. The request
//! enlarges the signal frames of every thread of the host process (the kernel refuses it when a thread's
//! alternate signal stack is too small for them); a host that wants none of that sets `EMBER_CPU_KERNELS=avx512`.

use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::packed::{load_bytes_f32, load_signed_bytes_f32, unit_scales};
use crate::backend::cpu::kernels::packed::format::{header, Format, Scaling, SLICE_BYTES};
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::model::gguf::blocks::QK;

/// Columns of an AMX tile (its rows: one per column of the batch).
pub(super) const TILE_COLS: usize = 16;

/// Columns gathered at once (`with_gathered`; a whole number of tiles): a batch of more runs in chunks of these, so
/// that a thread's gathered copy of the activations stays below 40 bytes × 256 columns × the row's groups (2.6 MiB
/// for an 8192-wide row) however long the batch, at the cost of expanding each panel once per chunk.
pub(super) const CHUNK_COLS: usize = 256;
const _: () = assert!(CHUNK_COLS.is_multiple_of(TILE_COLS));

/// Whether this CPU and its operating system let the process use AMX's integer tiles (asked once).
pub(super) fn is_supported() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(|| has_amx_int8() && request_tile_permission())
}

/// CPUID leaf 7: AMX-TILE (EDX bit 24) and AMX-INT8 (EDX bit 25).
fn has_amx_int8() -> bool {
    let max_leaf = __cpuid(0).eax;
    if max_leaf < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    edx & (1 << 24) != 0 && edx & (1 << 25) != 0
}

/// Asks Linux for the tile data state (XFEATURE 18) and confirms it was granted.
#[cfg(target_os = "linux")]
fn request_tile_permission() -> bool {
    const ARCH_GET_XCOMP_PERM: libc::c_long = 0x1022;
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: `arch_prctl` with these codes reads its integer argument; a kernel without them returns an error.
    let asked = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) };
    let mut granted: u64 = 0;
    // SAFETY: ARCH_GET_XCOMP_PERM writes one u64 to the address passed, which is `granted`.
    let got = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mut granted as *mut u64) };
    asked == 0 && got == 0 && granted & (1 << XFEATURE_XTILEDATA) != 0
}

/// Other systems: not offered (their permission models are untested here).
#[cfg(not(target_os = "linux"))]
fn request_tile_permission() -> bool {
    false
}

/// One group of a 16-column tile's activations, gathered from the columns' blocks: their 32 bytes as one 512-byte
/// tile, then their scales `d` and sums `s`. A tile then loads 8 consecutive lines instead of a line or two from
/// each of 16 blocks scattered over the batch, and the float steps read 16 scales from one line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct GatheredGroup {
    qs: [[i8; QK]; TILE_COLS],
    d: [f32; TILE_COLS],
    s: [f32; TILE_COLS],
}

impl GatheredGroup {
    const ZERO: GatheredGroup = GatheredGroup { qs: [[0; QK]; TILE_COLS], d: [0.0; TILE_COLS], s: [0.0; TILE_COLS] };
}

/// `f` with the activations of every whole 16-column tile of a batch gathered: `act` holds `n_cols` columns of
/// `n_groups` blocks; tile `t`, group `g` is entry `t · n_groups + g`. One buffer per thread, grown to the largest
/// batch it has met.
pub(super) fn with_gathered<T>(
    act: &[BlockQ8A],
    n_cols: usize,
    n_groups: usize,
    f: impl FnOnce(&[GatheredGroup]) -> T,
) -> T {
    thread_local! {
        static GATHERED: std::cell::RefCell<Vec<GatheredGroup>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let n_tiles = n_cols / TILE_COLS;
    GATHERED.with_borrow_mut(|buffer| {
        if buffer.len() < n_tiles * n_groups {
            buffer.resize(n_tiles * n_groups, GatheredGroup::ZERO);
        }
        let gathered = &mut buffer[..n_tiles * n_groups];
        for (i, entry) in gathered.iter_mut().enumerate() {
            let (t, g) = (i / n_groups, i % n_groups);
            for c in 0..TILE_COLS {
                let block = &act[(TILE_COLS * t + c) * n_groups + g];
                entry.qs[c] = block.qs;
                entry.d[c] = block.d;
                entry.s[c] = block.s;
            }
        }
        f(gathered)
    })
}

/// Whether format `F` takes its dots per half group (a scale per 16 elements).
const fn by_halves<F: Format>() -> bool {
    matches!(F::SCALING, Scaling::Halves | Scaling::HalvesMin)
}

/// The tile registers' shapes (`ldtilecfg`'s 64-byte palette-1 record: colsb as u16 at 16 + 2t, rows at 48 + t), in
/// two sets so that one group's products run while the previous group's dots are read (`tile`):
/// - whole groups: set `s` has its dots (16 columns × 16 rows of i32) in tmm`s`, its activations (16 columns × 32
///   bytes) in tmm`2 + s`, its weights (8 slices × 64 bytes) in tmm`4 + s`;
/// - half groups: set `s` has its two halves' dots in tmm`2s` and tmm`2s + 1`, a half's activations (16 × 16 bytes)
///   in tmm`4 + s` and its weights (4 slices × 64 bytes) in tmm`6 + s`.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn new(halves: bool) -> TileConfig {
        let shapes: [(u8, u16); 8] = if halves {
            [(16, 64), (16, 64), (16, 64), (16, 64), (16, 16), (16, 16), (4, 64), (4, 64)]
        } else {
            [(16, 64), (16, 64), (16, 32), (16, 32), (8, 64), (8, 64), (0, 0), (0, 0)]
        };
        let mut c = TileConfig([0; 64]);
        c.0[0] = 1;
        for (t, (rows, colsb)) in shapes.into_iter().enumerate() {
            c.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            c.0[48 + t] = rows;
        }
        c
    }
}

/// Tiles configured on the calling thread for as long as the value lives; released when it drops, so that a
/// thread that is not in a matmul carries no tile state through its context switches.
pub(super) struct Tiles(());

impl Tiles {
    /// Tiles shaped for format `F`.
    ///
    /// # Safety
    /// Only on a CPU where [`is_supported`] returned true.
    pub(super) unsafe fn configure<F: Format>() -> Tiles {
        let config = TileConfig::new(by_halves::<F>());
        // SAFETY: the caller guarantees AMX with the permission; the record is 64 readable bytes.
        unsafe { asm!("ldtilecfg [{0}]", in(reg) config.0.as_ptr(), options(nostack, readonly)) };
        Tiles(())
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: a `Tiles` exists only after `configure` succeeded on this CPU.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// 16 × 16 dots, a 64-byte row per column.
#[repr(C, align(64))]
struct Dots([i32; 256]);

impl Dots {
    const ZERO: Dots = Dots([0; 256]);

    /// Column `c`'s 16 dots, one per row of the panel.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn column(&self, c: usize) -> __m512i {
        // SAFETY: row `c` (< 16) of the 256 values is 64 aligned bytes.
        unsafe { _mm512_load_si512(self.0.as_ptr().add(16 * c).cast()) }
    }
}

/// Starts the products of one group in tile set `S`: `Σ q·(u − OFFSET)` over its 32 elements (or, with `HALVES`, over each
/// half), for 16 columns (their 32 bytes each `stride` bytes apart from `qs`) × 16 rows (the group's 8 expanded
/// slices at `planes`). The dots stay in the set's tiles until [`store_dots`].
///
/// # Safety
/// Tiles configured for `HALVES` (`Tiles`); `qs` points to 16 runs of 32 bytes `stride` bytes apart, `planes` to
/// 512 bytes.
#[inline(always)]
unsafe fn start_products<const S: usize, const HALVES: bool>(qs: *const u8, stride: usize, planes: *const u8) {
    // SAFETY: the caller guarantees the tiles' shapes and the bytes each load reads (16 columns' 32 or 2 × 16
    // bytes, the group's 8 or 2 × 4 slices).
    unsafe {
        if HALVES {
            asm!(
                "tileloadd tmm{a}, [{q0} + {stride}*1]",
                "tileloadd tmm{w}, [{w0} + {slice}*1]",
                "tilezero tmm{d0}",
                "tdpbssd tmm{d0}, tmm{a}, tmm{w}",
                "tileloadd tmm{a}, [{q1} + {stride}*1]",
                "tileloadd tmm{w}, [{w1} + {slice}*1]",
                "tilezero tmm{d1}",
                "tdpbssd tmm{d1}, tmm{a}, tmm{w}",
                q0 = in(reg) qs,
                q1 = in(reg) qs.add(16),
                stride = in(reg) stride,
                w0 = in(reg) planes,
                w1 = in(reg) planes.add(4 * SLICE_BYTES),
                slice = in(reg) SLICE_BYTES,
                d0 = const 2 * S,
                d1 = const 2 * S + 1,
                a = const 4 + S,
                w = const 6 + S,
                options(nostack, readonly),
            )
        } else {
            asm!(
                "tileloadd tmm{a}, [{q} + {stride}*1]",
                "tileloadd tmm{w}, [{planes} + {slice}*1]",
                "tilezero tmm{d}",
                "tdpbssd tmm{d}, tmm{a}, tmm{w}",
                q = in(reg) qs,
                stride = in(reg) stride,
                planes = in(reg) planes,
                slice = in(reg) SLICE_BYTES,
                d = const S,
                a = const 2 + S,
                w = const 4 + S,
                options(nostack, readonly),
            )
        }
    }
}

/// Writes tile set `S`'s dots (both halves' with `HALVES`) to `out`.
///
/// # Safety
/// Tiles configured for `HALVES`, and products started in set `S`.
#[inline(always)]
unsafe fn store_dots<const S: usize, const HALVES: bool>(out: &mut [Dots; 2]) {
    let [first, second] = out;
    // SAFETY: each store writes 16 rows of 64 bytes to a 1 KiB `Dots`.
    unsafe {
        if HALVES {
            asm!(
                "tilestored [{o0} + {row}*1], tmm{d0}",
                "tilestored [{o1} + {row}*1], tmm{d1}",
                o0 = in(reg) first.0.as_mut_ptr(),
                o1 = in(reg) second.0.as_mut_ptr(),
                row = in(reg) 64usize,
                d0 = const 2 * S,
                d1 = const 2 * S + 1,
                options(nostack),
            )
        } else {
            asm!(
                "tilestored [{o} + {row}*1], tmm{d}",
                o = in(reg) first.0.as_mut_ptr(),
                row = in(reg) 64usize,
                d = const S,
                options(nostack),
            )
        }
    }
}

/// `$body` for each of the 16 columns, `$c` bound to `0..16` as constants: spelled out so that the accumulators,
/// indexed by constants, stay in registers (a loop over them kept them on the stack, a load and a store per column
/// and group).
macro_rules! each_column {
    ($c:ident => $body:block) => {
        each_column!(@ $c $body 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $c:ident $body:block $($n:literal)*) => {
        $({
            let $c: usize = $n;
            $body
        })*
    };
}

/// One tile of 16 columns against one panel whose groups come expanded (`expanded`: 8 slices of 64 bytes per group,
/// as `avx512::packed::expand` writes them, or a byte format's own planes): `out[c]` gets column `c`'s 16 results,
/// each computed with the float steps of `avx512::packed::tile` in its order. A group's products run on the tiles
/// while the previous group's dots go through the float steps (two tile sets, alternating).
///
/// # Safety
/// Tiles configured for `F` (`Tiles::configure`); `headers` holds the panel's unit headers, `expanded` `n_groups`
/// expanded groups and `act` 16 columns of `n_groups` blocks each (the lengths are checked by assertions).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn tile<F: Format>(
    headers: &[u8],
    expanded: &[u8],
    gathered: &[GatheredGroup],
    act: &[BlockQ8A],
    n_groups: usize,
    out: &mut [__m512; TILE_COLS],
) {
    let groups_per_unit = F::UNIT / QK;
    let units = n_groups / groups_per_unit;
    assert!(headers.len() >= units * F::HEADER && expanded.len() >= n_groups * 8 * SLICE_BYTES);
    assert!(gathered.len() >= n_groups && act.len() >= TILE_COLS * n_groups);
    let stride = QK;
    let start = |group: usize| {
        let planes = expanded.as_ptr().wrapping_add(group * 8 * SLICE_BYTES);
        let qs = gathered[group].qs.as_ptr().cast::<u8>();
        // SAFETY: the caller configured the tiles for `F`; the 16 columns' 32 bytes (`stride` apart) and the
        // group's slices lie in `gathered` and `expanded` (asserted above).
        unsafe {
            match (group % 2, by_halves::<F>()) {
                (0, false) => start_products::<0, false>(qs, stride, planes),
                (0, true) => start_products::<0, true>(qs, stride, planes),
                (_, false) => start_products::<1, false>(qs, stride, planes),
                (_, true) => start_products::<1, true>(qs, stride, planes),
            }
        }
    };
    let mut acc = [_mm512_setzero_ps(); TILE_COLS];
    let mut dots = [Dots::ZERO, Dots::ZERO];
    if n_groups > 0 {
        start(0);
    }
    for group in 0..n_groups {
        // The next group's products first, so that the tiles have them in hand while this group's dots are stored.
        if group + 1 < n_groups {
            start(group + 1);
        }
        // SAFETY: products were started in set `group % 2` (the previous iteration, or above for group 0).
        unsafe {
            match (group % 2, by_halves::<F>()) {
                (0, false) => store_dots::<0, false>(&mut dots),
                (0, true) => store_dots::<0, true>(&mut dots),
                (_, false) => store_dots::<1, false>(&mut dots),
                (_, true) => store_dots::<1, true>(&mut dots),
            }
        }
        // SAFETY: the header of the group's unit lies in `headers` (asserted above).
        let hdr = unsafe { headers.as_ptr().add(group / groups_per_unit * F::HEADER) };
        let columns = Columns { gathered: &gathered[group], block: |c| &act[c * n_groups + group] };
        // SAFETY: as above.
        unsafe { float_steps::<F, _>(hdr, group % groups_per_unit, &dots, &columns, &mut acc) };
    }
    *out = acc;
}

/// A group's 16 columns: their gathered scales and sums, and their blocks (for the half sums, which only Q2_K reads).
struct Columns<'a, B: Fn(usize) -> &'a BlockQ8A> {
    gathered: &'a GatheredGroup,
    block: B,
}

/// The float steps of group `g` of the unit whose header is at `hdr`, its dots in `dots`, for the 16 columns
/// `columns`: `avx512::packed::tile`'s, lane for lane.
///
/// # Safety
/// `hdr` must point to the unit's `Format::HEADER` bytes.
#[inline(always)]
unsafe fn float_steps<'a, F: Format, B: Fn(usize) -> &'a BlockQ8A>(
    hdr: *const u8,
    g: usize,
    dots: &[Dots; 2],
    columns: &Columns<'a, B>,
    acc: &mut [__m512; TILE_COLS],
) {
    let (da, sa) = (&columns.gathered.d, &columns.gathered.s);
    // SAFETY: the caller guarantees the unit's header.
    let (d, m) = unsafe { unit_scales::<F>(hdr) };
    if F::SCALING == Scaling::Halves {
        // SAFETY: the scale bytes of halves `2g` and `2g + 1` lie in the unit's header.
        let sc = unsafe {
            [0, 1].map(|h| _mm512_cvtepi8_epi32(_mm_loadu_si128(hdr.add(header::HALF_SC + 16 * (2 * g + h)).cast())))
        };
        // `sc_0·i_0 + sc_1·i_1` in floats, exactly the integer sum's conversion: `packed::scalar` relies on
        // `|sc_0·i_0| + |sc_1·i_1| < 2^24` (Q6_K's is the largest, 2 · 16 · 32 · 127 · 128), so each product and the
        // sum are exact in f32 and the multiply and the fused add round nothing (and cost fewer instructions than
        // two `vpmulld`).
        let sc = [_mm512_cvtepi32_ps(sc[0]), _mm512_cvtepi32_ps(sc[1])];
        each_column!(c => {
            let acc = &mut acc[c];
            let second = _mm512_mul_ps(_mm512_cvtepi32_ps(dots[1].column(c)), sc[1]);
            let i = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[0].column(c)), sc[0], second);
            *acc = _mm512_fmadd_ps(i, _mm512_mul_ps(d, _mm512_set1_ps(da[c])), *acc);
        });
        return;
    }
    if F::SCALING == Scaling::HalvesMin {
        for (h, dots) in dots.iter().enumerate() {
            // SAFETY: the scale bytes of half `2g + h` lie in the unit's header.
            let run = unsafe { _mm_loadu_si128(hdr.add(header::HALF_SCMN + 16 * (2 * g + h)).cast()) };
            let scmn = _mm512_cvtepu8_epi32(run);
            let scale = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(scmn, _mm512_set1_epi32(0x0f))));
            let min = _mm512_mul_ps(m, _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(scmn)));
            each_column!(c => {
                let acc = &mut acc[c];
                let a = (columns.block)(c);
                let dot = dots.column(c);
                let s = _mm512_mul_ps(scale, _mm512_set1_ps(da[c]));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, *acc);
                let sa = _mm512_set1_ps(a.d * f32::from(a.half_sums[h]));
                *acc = _mm512_fmadd_ps(min, sa, *acc);
            });
        }
        return;
    }
    let (mut scale, mut min) = (d, m);
    // SAFETY (both): group `g`'s scale (and minimum) bytes lie in the unit's header.
    if F::SCALING == Scaling::GroupMin {
        unsafe {
            scale = _mm512_mul_ps(d, load_bytes_f32(hdr.add(header::SC + 16 * g)));
            min = _mm512_mul_ps(m, load_bytes_f32(hdr.add(header::MN + 16 * g)));
        }
    }
    if F::SCALING == Scaling::Group {
        scale = _mm512_mul_ps(d, unsafe { load_signed_bytes_f32(hdr.add(header::GROUP_SC + 16 * g)) });
    }
    each_column!(c => {
        let acc = &mut acc[c];
        let dot = dots[0].column(c);
        let s = _mm512_mul_ps(scale, _mm512_set1_ps(da[c]));
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, *acc);
        if matches!(F::SCALING, Scaling::BlockMin | Scaling::GroupMin) {
            *acc = _mm512_fmadd_ps(min, _mm512_set1_ps(sa[c]), *acc);
        }
    });
}
