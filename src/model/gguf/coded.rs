//! The IQ types built on lattice grids (IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) and the ternary types
//! (TQ1_0, TQ2_0): their block layouts, and each super-block decoded into what every one of them reduces to, a code
//! per element into a small table of signed integer levels, an integer scale per 16 elements and one float scale:
//! element `k` is `(d · scales[k / 16]) · LEVELS[code_k]`. Dequantization computes exactly that, and equals the `gguf`
//! Python package's bit for bit (`tests/dequantize_reference.rs`); the packed CPU kernels store the codes (two to
//! four bits an element) and look their levels up with a byte shuffle.
//!
//! Layouts follow ggml (`ggml-common.h`), formulas its `dequantize_row_*` (gguf-py's numpy code is the reference):
//! - IQ2_XXS: per 32 elements two u32, the first four grid indices (`iq2xxs_grid`, 8 elements each), the second
//!   four 7-bit sign indices (`ksigns`: the 8th sign is the parity of the 7) and a 4-bit scale `ls`:
//!   `x = d · (0.5 + ls) · 0.25 · grid · sign`.
//! - IQ2_XS: per 8 elements a u16, a 9-bit grid index and a 7-bit sign index; a 4-bit scale per 16 elements.
//! - IQ2_S: per 8 elements a grid index of 10 bits (a byte and 2 bits of `qh`) and a byte of signs; a 4-bit scale
//!   per 16 elements.
//! - IQ3_XXS: per 4 elements a grid index (`iq3xxs_grid`); per 32 a u32 of four sign indices and `ls`:
//!   `x = d · (0.5 + ls) · 0.5 · grid · sign`.
//! - IQ3_S: per 4 elements a 9-bit grid index (a byte and a bit of `qh`), a sign bit per element, a 4-bit scale per
//!   32: `x = d · (1 + 2 ls) · grid · sign`.
//! - IQ1_S: per 8 elements an 11-bit index into `iq1s_grid` (values −1, 0, 1); per 32 a u16 of the indices' high
//!   bits, a 3-bit scale and the sign of a shift `delta` = ±1/8: `x = d · (2 ls + 1) · (grid + delta)`.
//! - IQ1_M: the same grid; per 8 elements the index's high bits and `delta`'s sign in a nibble, a 3-bit scale per
//!   16 elements, and the f16 `d` spread over the scales' top nibbles.
//! - TQ1_0: 256 ternary digits, five a byte (then four) as base-3 fractions, then an f16 `d`: `x = d · (q − 1)`.
//! - TQ2_0: 2 bits an element, then an f16 `d`.
//!
//! Every scale factor above is exact in f32 (an f16 times an integer of at most 5 bits and a power of two), so
//! `d · scales` can stand for it: the file's one rounding is `db · level`, ember's too.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dtype::GgmlType;
use super::iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::kquants::QK_K;

/// Integer scales per super-block: one per 16 elements.
pub const SCALES: usize = QK_K / 16;

/// A super-block decoded: element `k` is `(d · scales[k / 16]) · LEVELS[codes[k]]`.
#[derive(Clone, Debug)]
pub struct CodedUnit {
    pub d: f32,
    pub scales: [i32; SCALES],
    /// Below 16: an index into the type's `LEVELS`.
    pub codes: [u8; QK_K],
}

impl CodedUnit {
    pub const EMPTY: CodedUnit = CodedUnit { d: 0.0, scales: [0; SCALES], codes: [0; QK_K] };
}

/// A 256-element block type whose values are codes into a table of levels (see the module documentation).
pub trait CodedBlock: Pod {
    const DTYPE: GgmlType;
    /// The signed integer value of each code (unused codes 0).
    const LEVELS: [i8; 16];
    /// Bits a code needs: 2 (ternary), 3 (IQ2, IQ1: a magnitude or digit and a sign) or 4 (IQ3).
    const CODE_BITS: u32;
    /// Whether a scale covers 32 elements (both of its halves' scales equal) rather than 16.
    const SCALE_PER_32: bool;
    fn decode(&self, out: &mut CodedUnit);
}

/// Dequantizes blocks of a coded type into `out` (`out.len() == blocks.len() * 256`).
pub fn dequantize_coded<B: CodedBlock>(blocks: &[B], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK_K, "output length must be 256 per block");
    let mut unit = CodedUnit::EMPTY;
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        b.decode(&mut unit);
        for (k, x) in o.iter_mut().enumerate() {
            let dl = unit.d * unit.scales[k / 16] as f32;
            *x = dl * f32::from(B::LEVELS[usize::from(unit.codes[k])]);
        }
    }
}

/// ggml's `ksigns_iq2xs`: a 7-bit sign index and, as bit 7, its parity (an even number of minus signs).
const fn ksigns(i: u32) -> u8 {
    (i | ((i.count_ones() & 1) << 7)) as u8
}

/// The codes of 8 elements of a grid with 2-bit indices (IQ2: magnitude index, IQ1: value + 1) and the 8 sign bits
/// `signs` (bit `j`: element `j` negative, or for IQ1 `delta` negative): `index | sign << 2`.
#[inline(always)]
fn codes2(entry: u16, signs: u8, out: &mut [u8]) {
    for (j, c) in out[..8].iter_mut().enumerate() {
        *c = ((entry >> (2 * j)) & 3) as u8 | (((signs >> j) & 1) << 2);
    }
}

/// The codes of 4 elements of a grid with 3-bit indices (IQ3), signs in the low 4 bits of `signs`:
/// `index | sign << 3`.
#[inline(always)]
fn codes3(entry: u16, signs: u8, out: &mut [u8]) {
    for (j, c) in out[..4].iter_mut().enumerate() {
        *c = ((entry >> (3 * j)) & 7) as u8 | (((signs >> j) & 1) << 3);
    }
}

/// The IQ2 types' levels: magnitudes 8, 25, 43, then the same negated (code `index | sign << 2`).
const IQ2_LEVELS: [i8; 16] = [8, 25, 43, 0, -8, -25, -43, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// IQ1's levels in eighths: `8 · grid + delta`, grid −1, 0, 1 (code `grid + 1 | delta_negative << 2`).
const IQ1_LEVELS: [i8; 16] = [-7, 1, 9, 0, -9, -1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// The ternary levels: digit − 1 (TQ2_0's 2 bits can hold a 3, which ggml dequantizes as 2 like any digit).
const TERNARY_LEVELS: [i8; 16] = [-1, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// An IQ3 type's levels from its 8 magnitudes: `m[i]`, then `−m[i]` (code `index | sign << 3`).
const fn signed_levels(m: [i8; 8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    let mut i = 0;
    while i < 8 {
        out[i] = m[i];
        out[i + 8] = -m[i];
        i += 1;
    }
    out
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// 256 elements in 8 groups of 32: per group two u32 (grid indices; sign indices and scale).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2Xxs {
    pub d: f16,
    pub qs: [u8; QK_K / 4],
}

/// 256 elements: a u16 per 8 (9-bit grid index, 7-bit sign index), a 4-bit scale per 16.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2Xs {
    pub d: f16,
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; QK_K / 32],
}

/// 256 elements: per 8 a grid index byte, 2 high index bits in `qh` and a sign byte; a 4-bit scale per 16.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2S {
    pub d: f16,
    /// 32 grid index bytes, then 32 sign bytes.
    pub qs: [u8; QK_K / 4],
    pub qh: [u8; QK_K / 32],
    pub scales: [u8; QK_K / 32],
}

/// 256 elements: a grid index byte per 4, then per 32 a u32 of sign indices and scale.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq3Xxs {
    pub d: f16,
    pub qs: [u8; 3 * QK_K / 8],
}

/// 256 elements: per 4 a grid index byte and a high bit in `qh`, a sign bit per element, a 4-bit scale per 32.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq3S {
    pub d: f16,
    pub qs: [u8; QK_K / 4],
    pub qh: [u8; QK_K / 32],
    pub signs: [u8; QK_K / 8],
    pub scales: [u8; QK_K / 64],
}

/// 256 elements: a grid index byte per 8; per 32 a u16 of the indices' high bits, scale and `delta`'s sign.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq1S {
    pub d: f16,
    pub qs: [u8; QK_K / 8],
    pub qh: [u8; QK_K / 16],
}

/// 256 elements: a grid index byte per 8, a nibble per 8 (high index bits, `delta`'s sign), 3-bit scales per 16
/// and the f16 `d` in the scales' top nibbles.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq1M {
    pub qs: [u8; QK_K / 8],
    pub qh: [u8; QK_K / 16],
    pub scales: [u8; QK_K / 32],
}

/// 256 ternary digits: 240 five a byte, 16 four a byte, then `d`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockTq1_0 {
    pub qs: [u8; (QK_K - 4 * QK_K / 64) / 5],
    pub qh: [u8; QK_K / 64],
    pub d: f16,
}

/// 256 digits of 2 bits, then `d`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockTq2_0 {
    pub qs: [u8; QK_K / 4],
    pub d: f16,
}

// The layouts must match ggml byte for byte: these sizes are what GgmlType::block_bytes promises.
const _: () = assert!(std::mem::size_of::<BlockIq2Xxs>() == 66);
const _: () = assert!(std::mem::size_of::<BlockIq2Xs>() == 74);
const _: () = assert!(std::mem::size_of::<BlockIq2S>() == 82);
const _: () = assert!(std::mem::size_of::<BlockIq3Xxs>() == 98);
const _: () = assert!(std::mem::size_of::<BlockIq3S>() == 110);
const _: () = assert!(std::mem::size_of::<BlockIq1S>() == 50);
const _: () = assert!(std::mem::size_of::<BlockIq1M>() == 56);
const _: () = assert!(std::mem::size_of::<BlockTq1_0>() == 54);
const _: () = assert!(std::mem::size_of::<BlockTq2_0>() == 66);

/// Sets both 16-element scales of group `g` (0..8) to `sc`.
fn scale_32(unit: &mut CodedUnit, g: usize, sc: i32) {
    unit.scales[2 * g] = sc;
    unit.scales[2 * g + 1] = sc;
}

impl CodedBlock for BlockIq2Xxs {
    const DTYPE: GgmlType = GgmlType::Iq2Xxs;
    const LEVELS: [i8; 16] = IQ2_LEVELS;
    const CODE_BITS: u32 = 3;
    const SCALE_PER_32: bool = true;
    fn decode(&self, out: &mut CodedUnit) {
        out.d = self.d.to_f32() * 0.125;
        for g in 0..8 {
            let (grid, signs) = (u32_at(&self.qs, 8 * g), u32_at(&self.qs, 8 * g + 4));
            scale_32(out, g, 2 * (signs >> 28) as i32 + 1);
            for l in 0..4 {
                let entry = IQ2XXS_GRID[((grid >> (8 * l)) & 0xff) as usize];
                codes2(entry, ksigns((signs >> (7 * l)) & 0x7f), &mut out.codes[32 * g + 8 * l..]);
            }
        }
    }
}

impl CodedBlock for BlockIq2Xs {
    const DTYPE: GgmlType = GgmlType::Iq2Xs;
    const LEVELS: [i8; 16] = IQ2_LEVELS;
    const CODE_BITS: u32 = 3;
    const SCALE_PER_32: bool = false;
    fn decode(&self, out: &mut CodedUnit) {
        out.d = self.d.to_f32() * 0.125;
        for (t, sc) in out.scales.iter_mut().enumerate() {
            *sc = 2 * i32::from((self.scales[t / 2] >> (4 * (t % 2))) & 0x0f) + 1;
        }
        for i in 0..QK_K / 8 {
            let q = u16::from_le_bytes([self.qs[2 * i], self.qs[2 * i + 1]]);
            codes2(IQ2XS_GRID[usize::from(q & 511)], ksigns(u32::from(q >> 9)), &mut out.codes[8 * i..]);
        }
    }
}

impl CodedBlock for BlockIq2S {
    const DTYPE: GgmlType = GgmlType::Iq2S;
    const LEVELS: [i8; 16] = IQ2_LEVELS;
    const CODE_BITS: u32 = 3;
    const SCALE_PER_32: bool = false;
    fn decode(&self, out: &mut CodedUnit) {
        out.d = self.d.to_f32() * 0.125;
        for (t, sc) in out.scales.iter_mut().enumerate() {
            *sc = 2 * i32::from((self.scales[t / 2] >> (4 * (t % 2))) & 0x0f) + 1;
        }
        let (index, signs) = self.qs.split_at(QK_K / 8);
        for i in 0..QK_K / 8 {
            let high = (self.qh[i / 4] >> (2 * (i % 4))) & 3;
            let entry = IQ2S_GRID[usize::from(index[i]) | (usize::from(high) << 8)];
            codes2(entry, signs[i], &mut out.codes[8 * i..]);
        }
    }
}

impl CodedBlock for BlockIq3Xxs {
    const DTYPE: GgmlType = GgmlType::Iq3Xxs;
    const LEVELS: [i8; 16] = signed_levels([4, 12, 20, 28, 36, 44, 52, 62]);
    const CODE_BITS: u32 = 4;
    const SCALE_PER_32: bool = true;
    fn decode(&self, out: &mut CodedUnit) {
        out.d = self.d.to_f32() * 0.25;
        let (index, rest) = self.qs.split_at(QK_K / 4);
        for g in 0..8 {
            let aux = u32_at(rest, 4 * g);
            scale_32(out, g, 2 * (aux >> 28) as i32 + 1);
            for l in 0..4 {
                let signs = ksigns((aux >> (7 * l)) & 0x7f);
                let at = 32 * g + 8 * l;
                codes3(IQ3XXS_GRID[usize::from(index[8 * g + 2 * l])], signs, &mut out.codes[at..]);
                codes3(IQ3XXS_GRID[usize::from(index[8 * g + 2 * l + 1])], signs >> 4, &mut out.codes[at + 4..]);
            }
        }
    }
}

impl CodedBlock for BlockIq3S {
    const DTYPE: GgmlType = GgmlType::Iq3S;
    const LEVELS: [i8; 16] = signed_levels([1, 3, 5, 7, 9, 11, 13, 15]);
    const CODE_BITS: u32 = 4;
    const SCALE_PER_32: bool = true;
    fn decode(&self, out: &mut CodedUnit) {
        out.d = self.d.to_f32();
        for g in 0..8 {
            scale_32(out, g, 1 + 2 * i32::from((self.scales[g / 2] >> (4 * (g % 2))) & 0x0f));
        }
        for i in 0..QK_K / 4 {
            let high = (self.qh[i / 8] >> (i % 8)) & 1;
            let entry = IQ3S_GRID[usize::from(self.qs[i]) | (usize::from(high) << 8)];
            codes3(entry, self.signs[i / 2] >> (4 * (i % 2)), &mut out.codes[4 * i..]);
        }
    }
}

impl CodedBlock for BlockIq1S {
    const DTYPE: GgmlType = GgmlType::Iq1S;
    const LEVELS: [i8; 16] = IQ1_LEVELS;
    const CODE_BITS: u32 = 3;
    const SCALE_PER_32: bool = true;
    fn decode(&self, out: &mut CodedUnit) {
        out.d = self.d.to_f32() * 0.125;
        for g in 0..8 {
            let qh = u16::from_le_bytes([self.qh[2 * g], self.qh[2 * g + 1]]);
            scale_32(out, g, 2 * i32::from((qh >> 12) & 7) + 1);
            let delta = if qh & 0x8000 != 0 { 0xff } else { 0 };
            for l in 0..4 {
                let index = usize::from(self.qs[4 * g + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
                codes2(IQ1S_GRID[index], delta, &mut out.codes[32 * g + 8 * l..]);
            }
        }
    }
}

impl BlockIq1M {
    /// The f16 super-scale, its four nibbles the top nibbles of the four u16 scale words.
    pub fn d(&self) -> f16 {
        let word = |i: usize| u16::from_le_bytes([self.scales[2 * i], self.scales[2 * i + 1]]);
        f16::from_bits((word(0) >> 12) | ((word(1) >> 8) & 0x00f0) | ((word(2) >> 4) & 0x0f00) | (word(3) & 0xf000))
    }
}

impl CodedBlock for BlockIq1M {
    const DTYPE: GgmlType = GgmlType::Iq1M;
    const LEVELS: [i8; 16] = IQ1_LEVELS;
    const CODE_BITS: u32 = 3;
    const SCALE_PER_32: bool = false;
    fn decode(&self, out: &mut CodedUnit) {
        out.d = self.d().to_f32() * 0.125;
        for (t, sc) in out.scales.iter_mut().enumerate() {
            let word = u16::from_le_bytes([self.scales[2 * (t / 4)], self.scales[2 * (t / 4) + 1]]);
            *sc = 2 * i32::from((word >> (3 * (t % 4))) & 7) + 1;
        }
        for i in 0..QK_K / 8 {
            let nibble = (self.qh[i / 2] >> (4 * (i % 2))) & 0x0f;
            let index = usize::from(self.qs[i]) | (usize::from(nibble & 7) << 8);
            let delta = if nibble & 8 != 0 { 0xff } else { 0 };
            codes2(IQ1S_GRID[index], delta, &mut out.codes[8 * i..]);
        }
    }
}

/// A base-3 digit of TQ1_0: byte `x` times `3^n` (wrapping, as ggml's u8 arithmetic), scaled back to 0..3.
#[inline(always)]
fn trit(x: u8, pow3: u8) -> u8 {
    ((u16::from(x.wrapping_mul(pow3)) * 3) >> 8) as u8
}

impl CodedBlock for BlockTq1_0 {
    const DTYPE: GgmlType = GgmlType::Tq1_0;
    const LEVELS: [i8; 16] = TERNARY_LEVELS;
    const CODE_BITS: u32 = 2;
    const SCALE_PER_32: bool = true;
    fn decode(&self, out: &mut CodedUnit) {
        const POW3: [u8; 5] = [1, 3, 9, 27, 81];
        out.d = self.d.to_f32();
        out.scales = [1; SCALES];
        // Elements 32n + m from byte m (0..32) with 3^n, then 160 + 16n + m from byte 32 + m, then 240 + 4n + m
        // from qh[m] (n < 4).
        for (n, &p) in POW3.iter().enumerate() {
            for m in 0..32 {
                out.codes[32 * n + m] = trit(self.qs[m], p);
            }
            for m in 0..16 {
                out.codes[160 + 16 * n + m] = trit(self.qs[32 + m], p);
            }
        }
        for (n, &p) in POW3[..4].iter().enumerate() {
            for m in 0..4 {
                out.codes[240 + 4 * n + m] = trit(self.qh[m], p);
            }
        }
    }
}

impl CodedBlock for BlockTq2_0 {
    const DTYPE: GgmlType = GgmlType::Tq2_0;
    const LEVELS: [i8; 16] = TERNARY_LEVELS;
    const CODE_BITS: u32 = 2;
    const SCALE_PER_32: bool = true;
    fn decode(&self, out: &mut CodedUnit) {
        out.d = self.d.to_f32();
        out.scales = [1; SCALES];
        // Element 128j + 32l + m: bits 2l..2l + 2 of byte 32j + m.
        for (k, c) in out.codes.iter_mut().enumerate() {
            let (j, l, m) = (k / 128, (k % 128) / 32, k % 32);
            *c = (self.qs[32 * j + m] >> (2 * l)) & 3;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ksigns_are_ggmls_table() {
        // ggml's first and last rows: 0x00 0x81 0x82 0x03 ... and ... 0x7d 0x7e 0xff.
        assert_eq!([ksigns(0), ksigns(1), ksigns(2), ksigns(3)], [0x00, 0x81, 0x82, 0x03]);
        assert_eq!([ksigns(125), ksigns(126), ksigns(127)], [0x7d, 0x7e, 0xff]);
        // Eight signs always hold an even number of minus signs.
        assert!((0..128).all(|i| ksigns(i).count_ones().is_multiple_of(2)));
    }

    #[test]
    fn ternary_digits_decode_as_ggml_packs_them() {
        // A byte holds five digits as the fraction Σ d_n 3^(4−n) / 243, rounded up (gguf-py's quantizer).
        let digits = [2u8, 0, 1, 1, 2];
        let value: u16 = digits.iter().fold(0, |v, &d| 3 * v + u16::from(d));
        let byte = (value * 256).div_ceil(243) as u8;
        let got: Vec<u8> = [1u8, 3, 9, 27, 81].iter().map(|&p| trit(byte, p)).collect();
        assert_eq!(got, digits);
    }

    #[test]
    fn iq1_m_assembles_its_scale_from_four_nibbles() {
        let d = f16::from_f32(0.0123);
        let mut b = BlockIq1M { qs: [0; 32], qh: [0; 16], scales: [0; 8] };
        for i in 0..4 {
            let nibble = (d.to_bits() >> (4 * i)) & 0x0f;
            b.scales[2 * i + 1] = (nibble << 4) as u8;
        }
        assert_eq!(b.d(), d);
    }
}
