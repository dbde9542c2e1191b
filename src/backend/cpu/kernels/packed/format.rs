//! What each quantized type looks like in a panel (see the module documentation): its planes, the header of a unit,
//! its offset and how its scales apply, and the conversion of one unit of 16 rows from the GGUF blocks.
//!
//! One trait, [`Format`], implemented for each GGUF block type; its constants are what the kernels of every path
//! branch on (at compile time: the kernels are generic over the format). Packing reads a block's values and scales
//! through the decoders the dequantization uses (`blocks`, `kquants`), so a packed matrix holds exactly the
//! integers and scales of the file.

use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::model::gguf::blocks::{five_bit_values, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK};
use crate::model::gguf::coded::{CodedBlock, CodedUnit};
use crate::model::gguf::iq4::{self, BlockIq4Nl, BlockIq4Xs};
use crate::model::gguf::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, SuperBlock, GROUPS, QK_K};
use crate::model::gguf::mxfp4::{self, e8m0_from_fp32_half, e8m0_to_fp32_half, BlockMxfp4, KVALUES};
use crate::model::gguf::GgmlType;

/// Rows of a panel: the outputs one AVX-512 register holds, one per 32-bit lane.
pub const PANEL_ROWS: usize = 16;
/// Bytes of one register of a plane: 4 elements of each of the panel's 16 rows.
pub const SLICE_BYTES: usize = 4 * PANEL_ROWS;
/// Bytes of a 4-bit plane per group (4 registers, each holding two slices in its two nibbles).
pub const NIB_BYTES: usize = 4 * SLICE_BYTES;
/// Bytes of an 8-bit plane per group (a register per slice).
pub const BYTE_BYTES: usize = 8 * SLICE_BYTES;
/// Bytes of a 2-bit plane per group (a register per half, four slices in its bit pairs).
pub const CRUMB_BYTES: usize = 2 * SLICE_BYTES;
/// Bytes of a 1-bit plane per group (a 64-bit mask per slice).
pub const BIT_BYTES: usize = 8 * 8;

/// Where the low bits of a value come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// A 4-bit plane: slice `4h + t` in nibble `h` of register `t`.
    Nibbles,
    /// A 2-bit plane: slice `4h + t` in bits `2t..2t + 2` of register `h`.
    Crumbs,
    /// An 8-bit plane: slice `s` in register `s`.
    Bytes,
}

/// Where the high bits of a value come from, if anywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum High {
    None,
    /// A 1-bit plane, shifted left by the amount: bit `4r + j` of mask `s` is element `4s + j` of row `r`.
    Bit(u32),
    /// A 2-bit plane (laid out as [`Base::Crumbs`]), shifted left by the amount.
    Crumbs(u32),
}

/// How a unit's scales apply to a group's integer dot products (`docs/architecture.md`, "Numerics").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaling {
    /// One f16 scale `d` per 32-element block: header `d: [f16; 16]`.
    Block,
    /// A scale and a minimum per block: header `d: [f16; 16]`, `m: [f16; 16]`.
    BlockMin,
    /// Super-block scales `d`, `dmin` and an integer scale and minimum per group: header `d: [f16; 16]`,
    /// `dmin: [f16; 16]`, `sc: [[u8; 16]; 8]`, `mn: [[u8; 16]; 8]` (Q4_K, Q5_K).
    GroupMin,
    /// A super-block scale `d` and a signed integer scale per half group: header `d: [f32; 16]`,
    /// `sc: [[i8; 16]; 16]`, half `2g + h` (Q3_K, Q6_K).
    Halves,
    /// Super-block scales `d`, `dmin` and a 4-bit scale and minimum per half group: header `d: [f16; 16]`,
    /// `dmin: [f16; 16]`, `scmn: [[u8; 16]; 16]`, scale in the low nibble (Q2_K).
    HalvesMin,
    /// One power-of-two scale per block, stored as its E8M0 exponent byte: header `e: [u8; 16]`, `d = 2^(e − 128)`
    /// (MXFP4; `mxfp4::e8m0_to_fp32_half`). The kernels then apply `d` as `Block` does.
    E8m0,
    /// A super-block scale `d` and a signed integer scale per group, no minimum: header `d: [f32; 16]`,
    /// `sc: [[i8; 16]; 8]` (IQ4_XS, whose `sc` is `ls − 32`; the coded types with a scale per 32 elements, whose
    /// `d` is the file's f16 times a power of two, exact in f32). The kernels apply `d · sc` as `GroupMin` applies
    /// its scale.
    Group,
}

/// One unit of one row, decoded: what dequantization and the scalar kernels read.
pub struct RowUnit {
    /// What the planes store of each element (at most 255): its `u`, or for a type with a codebook its code, whose
    /// `u` [`level`] gives.
    pub u: [u8; QK_K],
    /// `d`, and `m` (BlockMin) or `dmin` (the K-quants with minima).
    pub d: f32,
    pub m: f32,
    /// Integer scale and minimum of each half group (`2g + h`); zero where the type has none.
    pub scales: [i32; 2 * GROUPS],
    pub mins: [i32; 2 * GROUPS],
}

/// A quantized type in panels. `Block` is its GGUF block; a unit is one block (32 elements) or one super-block
/// (256).
pub trait Format {
    type Block: Pod + Zeroable;
    const DTYPE: GgmlType;
    /// Elements per unit (a block, or a super-block of 8 groups).
    const UNIT: usize;
    /// Header bytes per unit and panel.
    const HEADER: usize;
    const BASE: Base;
    const HIGH: High;
    /// Subtracted from every `u`.
    const OFFSET: i32;
    const SCALING: Scaling;
    /// For a type whose values are not evenly spaced (MXFP4, the IQ types): the planes hold codes below 16 (base and
    /// high bits together) and an element's `u` is `CODEBOOK[code]`, which the SIMD paths look up with a byte
    /// shuffle (`pshufb`) right after unpacking the code. `None`: the planes hold `u` itself.
    const CODEBOOK: Option<[u8; 16]> = None;
    /// Plane bytes per group and panel: the high plane, then the base plane.
    const GROUP_BYTES: usize = high_bytes(Self::HIGH) + base_bytes(Self::BASE);

    /// Writes one unit of 16 rows, `block(r)` giving row `r`'s GGUF block (`None` past the matrix's last row: zero
    /// weights): the header into `header`, group `g`'s planes into `planes[g * GROUP_BYTES..]`. `scratch` holds
    /// the decoded rows.
    fn pack_unit<'b>(
        block: impl Fn(usize) -> Option<&'b Self::Block>,
        scratch: &mut [RowUnit; PANEL_ROWS],
        header: &mut [u8],
        planes: &mut [u8],
    ) where
        Self::Block: 'b,
    {
        for (r, unit) in scratch.iter_mut().enumerate() {
            match block(r) {
                Some(b) => Self::decode_block(b, unit),
                None => Self::decode_block(&Self::Block::zeroed(), unit),
            }
        }
        write_header::<Self>(scratch, header);
        for g in 0..Self::UNIT / QK {
            write_planes::<Self>(scratch, g, &mut planes[g * Self::GROUP_BYTES..(g + 1) * Self::GROUP_BYTES]);
        }
    }

    /// One GGUF block decoded into `unit` (`u[..UNIT]`, `d`, `m`, and the scales and minima of its half groups).
    fn decode_block(b: &Self::Block, unit: &mut RowUnit);
}

/// An element's `u` from what its planes store (see [`Format::CODEBOOK`]).
#[inline(always)]
pub fn level<F: Format + ?Sized>(stored: u8) -> u8 {
    match F::CODEBOOK {
        Some(book) => book[usize::from(stored & 0x0f)],
        None => stored,
    }
}

const fn base_bytes(base: Base) -> usize {
    match base {
        Base::Nibbles => NIB_BYTES,
        Base::Crumbs => CRUMB_BYTES,
        Base::Bytes => BYTE_BYTES,
    }
}

const fn high_bytes(high: High) -> usize {
    match high {
        High::None => 0,
        High::Bit(_) => BIT_BYTES,
        High::Crumbs(_) => CRUMB_BYTES,
    }
}

/// Offsets of a header's fields (bytes), by scaling.
pub mod header {
    /// `d` (f16 or, for `Halves`, f32), 16 values.
    pub const D: usize = 0;
    /// `m` or `dmin` (f16), 16 values.
    pub const M: usize = 32;
    /// `GroupMin`: `sc[g]` at `SC + 16g`, `mn[g]` at `MN + 16g`.
    pub const SC: usize = 64;
    pub const MN: usize = 64 + 128;
    /// `Halves`: `sc[2g + h]` at `HALF_SC + 16(2g + h)` (after the f32 `d`).
    pub const HALF_SC: usize = 64;
    /// `HalvesMin`: `scmn[2g + h]` at `HALF_SCMN + 16(2g + h)`.
    pub const HALF_SCMN: usize = 64;
    /// `E8m0`: the exponent bytes, 16 values.
    pub const E: usize = 0;
    /// `Group`: `sc[g]` at `GROUP_SC + 16g` (after the f32 `d`).
    pub const GROUP_SC: usize = 64;
}

fn put_f16(out: &mut [u8], at: usize, r: usize, v: f32) {
    out[at + 2 * r..at + 2 * r + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

fn write_header<F: Format + ?Sized>(rows: &[RowUnit; PANEL_ROWS], out: &mut [u8]) {
    out[..F::HEADER].fill(0);
    for (r, u) in rows.iter().enumerate() {
        match F::SCALING {
            Scaling::Block => put_f16(out, header::D, r, u.d),
            Scaling::BlockMin | Scaling::GroupMin | Scaling::HalvesMin => {
                put_f16(out, header::D, r, u.d);
                put_f16(out, header::M, r, u.m);
            }
            Scaling::Halves | Scaling::Group => {
                out[header::D + 4 * r..header::D + 4 * r + 4].copy_from_slice(&u.d.to_le_bytes())
            }
            Scaling::E8m0 => out[header::E + r] = e8m0_from_fp32_half(u.d),
        }
        match F::SCALING {
            Scaling::Block | Scaling::BlockMin | Scaling::E8m0 => {}
            Scaling::GroupMin => {
                for g in 0..GROUPS {
                    out[header::SC + 16 * g + r] = u.scales[2 * g] as u8;
                    out[header::MN + 16 * g + r] = u.mins[2 * g] as u8;
                }
            }
            Scaling::Group => {
                for g in 0..GROUPS {
                    out[header::GROUP_SC + 16 * g + r] = u.scales[2 * g] as i8 as u8;
                }
            }
            Scaling::Halves => {
                for t in 0..2 * GROUPS {
                    out[header::HALF_SC + 16 * t + r] = u.scales[t] as i8 as u8;
                }
            }
            Scaling::HalvesMin => {
                for t in 0..2 * GROUPS {
                    out[header::HALF_SCMN + 16 * t + r] = (u.scales[t] as u8) | ((u.mins[t] as u8) << 4);
                }
            }
        }
    }
}

/// Writes group `g` of 16 rows into its planes (`out`: `GROUP_BYTES`), a byte of each plane at a time.
fn write_planes<F: Format + ?Sized>(rows: &[RowUnit; PANEL_ROWS], g: usize, out: &mut [u8]) {
    let (high, base) = out.split_at_mut(high_bytes(F::HIGH));
    high.fill(0);
    // The base plane's bits of `v`, and the high plane's.
    let low = |v: u8| match F::HIGH {
        High::None => v,
        High::Bit(shift) | High::Crumbs(shift) => v & ((1 << shift) - 1),
    };
    let top = |v: u8| match F::HIGH {
        High::None => 0,
        High::Bit(shift) | High::Crumbs(shift) => v >> shift,
    };
    // Bits 2t..2t + 2 of each byte from slice 4h + t of `u`, through `f`.
    let crumbs = |u: &[u8; QK], h: usize, j: usize, f: &dyn Fn(u8) -> u8| {
        (0..4).fold(0u8, |byte, t| byte | (f(u[16 * h + 4 * t + j]) << (2 * t)))
    };
    for (r, unit) in rows.iter().enumerate() {
        let u: &[u8; QK] = unit.u[QK * g..QK * g + QK].try_into().expect("a group");
        for j in 0..4 {
            match F::BASE {
                Base::Nibbles => {
                    for t in 0..4 {
                        base[SLICE_BYTES * t + 4 * r + j] = low(u[4 * t + j]) | (low(u[16 + 4 * t + j]) << 4);
                    }
                }
                Base::Crumbs => {
                    for h in 0..2 {
                        base[SLICE_BYTES * h + 4 * r + j] = crumbs(u, h, j, &low);
                    }
                }
                Base::Bytes => {
                    for s in 0..8 {
                        base[SLICE_BYTES * s + 4 * r + j] = u[4 * s + j];
                    }
                }
            }
            match F::HIGH {
                High::None => {}
                High::Bit(_) => {
                    for s in 0..8 {
                        let bit = 4 * r + j;
                        high[8 * s + bit / 8] |= top(u[4 * s + j]) << (bit % 8);
                    }
                }
                High::Crumbs(_) => {
                    for h in 0..2 {
                        high[SLICE_BYTES * h + 4 * r + j] = crumbs(u, h, j, &top);
                    }
                }
            }
        }
    }
}

/// Element `k` (0..32) of row `r` of a group's planes (`GROUP_BYTES`): the inverse of `write_planes`.
#[inline(always)]
pub fn value<F: Format + ?Sized>(planes: &[u8], r: usize, k: usize) -> u8 {
    let (high, base) = planes.split_at(high_bytes(F::HIGH));
    let (s, j) = (k / 4, k % 4);
    let (h, t) = (s / 4, s % 4);
    let low = match F::BASE {
        Base::Nibbles => (base[SLICE_BYTES * t + 4 * r + j] >> (4 * h)) & 0x0f,
        Base::Crumbs => (base[SLICE_BYTES * h + 4 * r + j] >> (2 * t)) & 3,
        Base::Bytes => base[SLICE_BYTES * s + 4 * r + j],
    };
    match F::HIGH {
        High::None => low,
        High::Bit(shift) => low | (((high[8 * s + (4 * r + j) / 8] >> ((4 * r + j) % 8)) & 1) << shift),
        High::Crumbs(shift) => low | (((high[SLICE_BYTES * h + 4 * r + j] >> (2 * t)) & 3) << shift),
    }
}

fn get_f16(bytes: &[u8], at: usize, r: usize) -> f32 {
    f16::from_le_bytes([bytes[at + 2 * r], bytes[at + 2 * r + 1]]).to_f32()
}

impl RowUnit {
    /// A unit to decode into.
    pub const EMPTY: RowUnit = RowUnit { u: [0; QK_K], d: 0.0, m: 0.0, scales: [0; 2 * GROUPS], mins: [0; 2 * GROUPS] };
}

/// Row `r` of a unit's header and planes, decoded into `unit` (the inverse of `pack_unit`): `u[..UNIT]`, `d`, `m`,
/// and the scales and minima of the unit's half groups.
#[inline(always)]
pub fn decode_row<F: Format + ?Sized>(header_bytes: &[u8], planes: &[u8], r: usize, unit: &mut RowUnit) {
    match F::SCALING {
        Scaling::Block => unit.d = get_f16(header_bytes, header::D, r),
        Scaling::BlockMin | Scaling::GroupMin | Scaling::HalvesMin => {
            unit.d = get_f16(header_bytes, header::D, r);
            unit.m = get_f16(header_bytes, header::M, r);
        }
        Scaling::Halves | Scaling::Group => {
            let at = header::D + 4 * r;
            unit.d = f32::from_le_bytes(header_bytes[at..at + 4].try_into().expect("4 bytes"));
        }
        Scaling::E8m0 => unit.d = e8m0_to_fp32_half(header_bytes[header::E + r]),
    }
    for g in 0..F::UNIT / QK {
        for h in 0..2 {
            let t = 2 * g + h;
            let (sc, mn) = match F::SCALING {
                Scaling::Block | Scaling::BlockMin | Scaling::E8m0 => (0, 0),
                Scaling::GroupMin => {
                    (i32::from(header_bytes[header::SC + 16 * g + r]), i32::from(header_bytes[header::MN + 16 * g + r]))
                }
                Scaling::Halves => (i32::from(header_bytes[header::HALF_SC + 16 * t + r] as i8), 0),
                Scaling::Group => (i32::from(header_bytes[header::GROUP_SC + 16 * g + r] as i8), 0),
                Scaling::HalvesMin => {
                    let b = header_bytes[header::HALF_SCMN + 16 * t + r];
                    (i32::from(b & 0x0f), i32::from(b >> 4))
                }
            };
            unit.scales[t] = sc;
            unit.mins[t] = mn;
        }
        let group = &planes[g * F::GROUP_BYTES..(g + 1) * F::GROUP_BYTES];
        for k in 0..QK {
            unit.u[QK * g + k] = value::<F>(group, r, k);
        }
    }
}

/// Dequantizes one decoded unit into `out` (`UNIT` floats) with the formula of its type's dequantization
/// (`blocks::dequantize_*`, `kquants::dequantize_k`, `mxfp4::dequantize_mxfp4`), operation for operation, so the
/// results are the same bits.
pub fn dequantize_unit<F: Format + ?Sized>(unit: &RowUnit, out: &mut [f32]) {
    for (k, x) in out.iter_mut().enumerate().take(F::UNIT) {
        let q = i32::from(level::<F>(unit.u[k])) - F::OFFSET;
        *x = match F::SCALING {
            Scaling::Block | Scaling::E8m0 => unit.d * q as f32,
            Scaling::BlockMin => unit.d * q as f32 + unit.m,
            Scaling::GroupMin | Scaling::Halves | Scaling::HalvesMin | Scaling::Group => {
                let t = k / 16;
                let dl = unit.d * unit.scales[t] as f32;
                if matches!(F::SCALING, Scaling::Halves | Scaling::Group) {
                    dl * q as f32
                } else {
                    dl * q as f32 - unit.m * unit.mins[t] as f32
                }
            }
        };
    }
}

fn legacy(d: f16, m: f16, u: [u8; QK], unit: &mut RowUnit) {
    unit.d = d.to_f32();
    unit.m = m.to_f32();
    unit.u[..QK].copy_from_slice(&u);
}

fn nibble_values(qs: &[u8; QK / 2]) -> [u8; QK] {
    std::array::from_fn(|k| if k < QK / 2 { qs[k] & 0x0f } else { qs[k - QK / 2] >> 4 })
}

impl Format for BlockQ4_0 {
    type Block = Self;
    const DTYPE: GgmlType = GgmlType::Q4_0;
    const UNIT: usize = QK;
    const HEADER: usize = 32;
    const BASE: Base = Base::Nibbles;
    const HIGH: High = High::None;
    const OFFSET: i32 = 8;
    const SCALING: Scaling = Scaling::Block;
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        legacy(b.d, f16::ZERO, nibble_values(&b.qs), unit)
    }
}

impl Format for BlockQ4_1 {
    type Block = Self;
    const DTYPE: GgmlType = GgmlType::Q4_1;
    const UNIT: usize = QK;
    const HEADER: usize = 64;
    const BASE: Base = Base::Nibbles;
    const HIGH: High = High::None;
    const OFFSET: i32 = 0;
    const SCALING: Scaling = Scaling::BlockMin;
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        legacy(b.d, b.m, nibble_values(&b.qs), unit)
    }
}

impl Format for BlockQ5_0 {
    type Block = Self;
    const DTYPE: GgmlType = GgmlType::Q5_0;
    const UNIT: usize = QK;
    const HEADER: usize = 32;
    const BASE: Base = Base::Nibbles;
    const HIGH: High = High::Bit(4);
    const OFFSET: i32 = 16;
    const SCALING: Scaling = Scaling::Block;
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        legacy(b.d, f16::ZERO, five_bit_values(&b.qs, &b.qh), unit)
    }
}

impl Format for BlockQ5_1 {
    type Block = Self;
    const DTYPE: GgmlType = GgmlType::Q5_1;
    const UNIT: usize = QK;
    const HEADER: usize = 64;
    const BASE: Base = Base::Nibbles;
    const HIGH: High = High::Bit(4);
    const OFFSET: i32 = 0;
    const SCALING: Scaling = Scaling::BlockMin;
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        legacy(b.d, b.m, five_bit_values(&b.qs, &b.qh), unit)
    }
}

impl Format for BlockQ8_0 {
    type Block = Self;
    const DTYPE: GgmlType = GgmlType::Q8_0;
    const UNIT: usize = QK;
    const HEADER: usize = 32;
    const BASE: Base = Base::Bytes;
    const HIGH: High = High::None;
    /// Stored as `u = q + 128`, so that the unsigned operand of `vpdpbusd` can carry it.
    const OFFSET: i32 = 128;
    const SCALING: Scaling = Scaling::Block;
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        legacy(b.d, f16::ZERO, b.qs.map(|q| (i32::from(q) + 128) as u8), unit)
    }
}

/// A K-quant super-block decoded through `SuperBlock::group`.
fn k_unit<B: SuperBlock>(b: &B, unit: &mut RowUnit) {
    (unit.d, unit.m) = (b.d(), b.dmin());
    for g in 0..GROUPS {
        let group = b.group(g);
        unit.u[QK * g..QK * g + QK].copy_from_slice(&group.u);
        unit.scales[2 * g..2 * g + 2].copy_from_slice(&group.scales);
        unit.mins[2 * g..2 * g + 2].copy_from_slice(&group.mins);
    }
}

macro_rules! k_format {
    ($block:ty, $dtype:ident, $header:expr, $base:expr, $high:expr, $scaling:expr) => {
        impl Format for $block {
            type Block = Self;
            const DTYPE: GgmlType = GgmlType::$dtype;
            const UNIT: usize = QK_K;
            const HEADER: usize = $header;
            const BASE: Base = $base;
            const HIGH: High = $high;
            const OFFSET: i32 = <$block as SuperBlock>::OFFSET;
            const SCALING: Scaling = $scaling;
            fn decode_block(b: &Self, unit: &mut RowUnit) {
                k_unit(b, unit)
            }
        }
    };
}

k_format!(BlockQ2K, Q2K, 64 + 256, Base::Crumbs, High::None, Scaling::HalvesMin);
k_format!(BlockQ3K, Q3K, 64 + 256, Base::Crumbs, High::Bit(2), Scaling::Halves);
k_format!(BlockQ4K, Q4K, 64 + 256, Base::Nibbles, High::None, Scaling::GroupMin);
k_format!(BlockQ5K, Q5K, 64 + 256, Base::Nibbles, High::Bit(4), Scaling::GroupMin);
k_format!(BlockQ6K, Q6K, 64 + 256, Base::Nibbles, High::Crumbs(4), Scaling::Halves);

/// What MXFP4's codebook adds to its values so that they are unsigned, the left operand `vpdpbusd` and `vpmaddubsw`
/// take: `u = KVALUES[code] + 12`, 0..=24.
const MXFP4_OFFSET: i32 = 12;

/// MXFP4's `u` of each code.
const MXFP4_LEVELS: [u8; 16] = levels(KVALUES, MXFP4_OFFSET);

/// A codebook's `u` of each code: its value plus `offset` (an unsigned byte).
const fn levels(values: [i8; 16], offset: i32) -> [u8; 16] {
    let mut levels = [0u8; 16];
    let mut c = 0;
    while c < 16 {
        levels[c] = (values[c] as i32 + offset) as u8;
        c += 1;
    }
    levels
}

impl Format for BlockMxfp4 {
    type Block = Self;
    const DTYPE: GgmlType = GgmlType::Mxfp4;
    const UNIT: usize = QK;
    const HEADER: usize = 16;
    const BASE: Base = Base::Nibbles;
    const HIGH: High = High::None;
    const OFFSET: i32 = MXFP4_OFFSET;
    const SCALING: Scaling = Scaling::E8m0;
    const CODEBOOK: Option<[u8; 16]> = Some(MXFP4_LEVELS);
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        unit.d = e8m0_to_fp32_half(b.e);
        unit.u[..QK].copy_from_slice(&mxfp4::codes(&b.qs));
    }
}

/// What IQ4's codebook adds to its values so that they are unsigned bytes: `u = iq4::KVALUES[code] + 128`, 1..=241,
/// as Q8_0's `q + 128` (the AVX2 path multiplies such bytes by sign, as it does Q8_0's).
const IQ4_OFFSET: i32 = 128;

/// IQ4_NL's and IQ4_XS's `u` of each code.
const IQ4_LEVELS: [u8; 16] = levels(iq4::KVALUES, IQ4_OFFSET);

impl Format for BlockIq4Nl {
    type Block = Self;
    const DTYPE: GgmlType = GgmlType::Iq4Nl;
    const UNIT: usize = QK;
    const HEADER: usize = 32;
    const BASE: Base = Base::Nibbles;
    const HIGH: High = High::None;
    const OFFSET: i32 = IQ4_OFFSET;
    const SCALING: Scaling = Scaling::Block;
    const CODEBOOK: Option<[u8; 16]> = Some(IQ4_LEVELS);
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        unit.d = b.d.to_f32();
        unit.u[..QK].copy_from_slice(&iq4::codes(&b.qs));
    }
}

impl Format for BlockIq4Xs {
    type Block = Self;
    const DTYPE: GgmlType = GgmlType::Iq4Xs;
    const UNIT: usize = QK_K;
    const HEADER: usize = 64 + 128;
    const BASE: Base = Base::Nibbles;
    const HIGH: High = High::None;
    const OFFSET: i32 = IQ4_OFFSET;
    const SCALING: Scaling = Scaling::Group;
    const CODEBOOK: Option<[u8; 16]> = Some(IQ4_LEVELS);
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        unit.d = b.d.to_f32();
        for g in 0..GROUPS {
            let sc = b.sub_scale(g) - 32;
            unit.scales[2 * g] = sc;
            unit.scales[2 * g + 1] = sc;
            unit.u[QK * g..QK * (g + 1)].copy_from_slice(&iq4::codes(&b.qs[16 * g..16 * (g + 1)]));
        }
    }
}

/// A coded type's `u` of each code: `coded::CodedBlock::LEVELS` plus `coded_offset` (unused codes the offset, the
/// value 0).
const fn coded_levels(values: [i8; 16]) -> [u8; 16] {
    levels(values, coded_offset(values))
}

/// What a coded type's codebook adds to its levels: the smallest power of two (the AVX2 path's offset term of the
/// types scaled per half is a shift) at least the largest negative level's magnitude, so that every `u` is an
/// unsigned byte below 128: IQ2's and IQ3_XXS' (levels within ±62) 64, IQ3_S' and IQ1's (±15, ±9) 16. `vpmaddubsw`
/// then multiplies `u` unsigned without saturating (two products of at most 126 · 127), where an offset of 128, as
/// IQ4's, would need the multiply by sign (a `vpsignb` per slice and column); and the smaller `u` of IQ3_S and IQ1
/// let the AVX2 path add four slices' 16-bit sums before widening. The integer dot `Σ (u − OFFSET)·q` is the same
/// for any offset, so every path's bits are.
const fn coded_offset(values: [i8; 16]) -> i32 {
    let (mut most_negative, mut c) = (0, 0);
    while c < 16 {
        if (values[c] as i32) < most_negative {
            most_negative = values[c] as i32;
        }
        c += 1;
    }
    let mut offset = 1;
    while offset < -most_negative {
        offset *= 2;
    }
    offset
}

/// The coded types (`coded`): their codes in 2 bits (the ternary types, which store the digit itself: `u` is the
/// digit, the offset 1), 3 bits (IQ2, IQ1: a crumb and a sign bit) or 4 (IQ3: a nibble), looked up in a codebook of
/// their levels plus `coded_offset` (not the ternary ones); the scale per 32 elements as IQ4_XS' (`Group`), per 16
/// as Q6_K's (`Halves`), with `d` in f32.
impl<B: CodedBlock> Format for B {
    type Block = Self;
    const DTYPE: GgmlType = B::DTYPE;
    const UNIT: usize = QK_K;
    const HEADER: usize = if B::SCALE_PER_32 { 64 + 128 } else { 64 + 256 };
    const BASE: Base = if B::CODE_BITS == 4 { Base::Nibbles } else { Base::Crumbs };
    const HIGH: High = if B::CODE_BITS == 3 { High::Bit(2) } else { High::None };
    const OFFSET: i32 = if B::CODE_BITS == 2 { 1 } else { coded_offset(B::LEVELS) };
    const SCALING: Scaling = if B::SCALE_PER_32 { Scaling::Group } else { Scaling::Halves };
    const CODEBOOK: Option<[u8; 16]> = if B::CODE_BITS == 2 { None } else { Some(coded_levels(B::LEVELS)) };
    fn decode_block(b: &Self, unit: &mut RowUnit) {
        let mut coded = CodedUnit::EMPTY;
        b.decode(&mut coded);
        unit.d = coded.d;
        unit.scales = coded.scales;
        unit.u = coded.codes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::coded::{BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs};

    /// MXFP4's `u` is its doubled E2M1 value plus `OFFSET`: an unsigned byte for the SIMD dots, at most 24 (AVX2
    /// adds four slices' 16-bit pair sums before widening on that bound).
    #[test]
    fn mxfp4_levels_are_its_values_plus_the_offset() {
        for code in 0..16u8 {
            let u = level::<BlockMxfp4>(code);
            assert_eq!(i32::from(u) - BlockMxfp4::OFFSET, i32::from(KVALUES[usize::from(code)]), "code {code}");
            assert!(u <= 24);
        }
        assert_eq!(level::<BlockQ4_0>(13), 13, "a type without a codebook stores u itself");
    }

    /// IQ4's `u` is its codebook value plus 128: unsigned bytes 1..=241, past what `vpmaddubsw` multiplies
    /// unsigned (AVX2 multiplies them by sign), and the same codebook for IQ4_NL and IQ4_XS.
    #[test]
    fn iq4_levels_are_its_values_plus_128() {
        for code in 0..16u8 {
            let u = level::<BlockIq4Nl>(code);
            assert_eq!(i32::from(u) - 128, i32::from(iq4::KVALUES[usize::from(code)]), "code {code}");
            assert_eq!(u, level::<BlockIq4Xs>(code));
        }
        assert_eq!((level::<BlockIq4Nl>(0), level::<BlockIq4Nl>(15)), (1, 241));
    }

    /// The coded types' `u` are their levels plus a power of two, every one below 128: what the AVX2 path multiplies
    /// unsigned (`vpmaddubsw`, two products of at most 127 · 127 per 16-bit lane) instead of by sign.
    #[test]
    fn coded_levels_are_unsigned_bytes_below_128() {
        fn check<B: CodedBlock>(expected_offset: i32) {
            assert_eq!(<B as Format>::OFFSET, expected_offset, "{:?}", B::DTYPE);
            for code in 0..16u8 {
                let u = level::<B>(code);
                assert_eq!(i32::from(u) - expected_offset, i32::from(B::LEVELS[usize::from(code)]), "{:?}", B::DTYPE);
                assert!(u < 128, "{:?} code {code}: {u}", B::DTYPE);
            }
        }
        check::<BlockIq2Xxs>(64);
        check::<BlockIq2Xs>(64);
        check::<BlockIq2S>(64);
        check::<BlockIq3Xxs>(64);
        check::<BlockIq3S>(16);
        check::<BlockIq1S>(16);
        check::<BlockIq1M>(16);
    }

    /// A packed MXFP4 unit gives back each row's codes and exponent (0, 1, 254 and 255 among them),
    /// and zeros for the rows past the matrix.
    #[test]
    fn mxfp4_units_round_trip_through_the_panel() {
        let blocks: Vec<BlockMxfp4> = (0..PANEL_ROWS)
            .map(|r| BlockMxfp4 {
                e: [0, 1, 2, 127, 128, 200, 254, 255][r % 8],
                qs: std::array::from_fn(|j| (r * 16 + j * 7) as u8),
            })
            .collect();
        let mut scratch = [RowUnit::EMPTY; PANEL_ROWS];
        let (mut header, mut planes) = ([0u8; 16], [0u8; NIB_BYTES]);
        BlockMxfp4::pack_unit(|r| (r < 12).then(|| &blocks[r]), &mut scratch, &mut header, &mut planes);
        let mut unit = RowUnit::EMPTY;
        for (r, b) in blocks.iter().enumerate() {
            decode_row::<BlockMxfp4>(&header, &planes, r, &mut unit);
            let (e, codes) = if r < 12 { (b.e, mxfp4::codes(&b.qs)) } else { (0, [0; QK]) };
            assert_eq!(unit.d.to_bits(), e8m0_to_fp32_half(e).to_bits(), "row {r}");
            assert_eq!(unit.u[..QK], codes, "row {r}");
        }
    }
}
