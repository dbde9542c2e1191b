//! The device layout of weight matrices: every ggml type as groups of 32 elements, each split into its values and
//! its scales.
//!
//! A Q4_1 block is 20 bytes and a Q4_K super-block 144, so blocks laid end to end leave most of them misaligned for
//! the 4- and 16-byte loads a GPU reads memory with, and a K-quant scatters one group's bits over its super-block.
//! Packed, every 32-element group is `quant_words` 32-bit words of values and `scale_words` words of scales, both
//! arrays aligned, and one slice of 8 elements reads one word (or part of one) of each bit plane. The weights stay
//! quantized with ggml's own codes and scales, so the dequantized values are ggml's exactly; only where the bits
//! sit changes (for all but the codebook types below). `kernels/common.cuh` ("Packed weight matrices") documents the layout and reads it; the CPU
//! emulation of the kernels reads matrices this module packed (`tests/cuda_packed_fixtures.rs`) and checks what the
//! kernels compute from them against the CPU's dequantization.
//!
//! What it costs: a K-quant's super-block scale and minimum are repeated in each of its 8 groups beside the group's
//! own integer scales (2 words per 32 elements), so Q4_K takes 6.0 bits per weight on the device against 4.5 in
//! the file, Q6_K 8.0 against 6.56 (about 1.5 more for every K-quant); a legacy type's f16 scales take a whole word
//! (Q4_0 5.0 against 4.5, Q4_1 and Q5_1 their file size), and so does MXFP4's E8M0 byte, widened to the f32 it
//! stands for (5.0 against 4.25).
//!
//! The codebook types (IQ4_NL, IQ4_XS, and the types `coded.rs` decodes to codes into a table of levels: IQ3_XXS,
//! IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0) are one layout: a code per element into the type's 16
//! levels, in the planes its bits need (4 bits in the nibble plane: IQ4's bytes as stored, the IQ3 types; 3 bits in
//! pairs and bits, as Q3_K: the IQ2 and IQ1 types; 2 bits in pairs, as Q2_K: the ternary types), and the f32 bits of
//! each group's exact scale (IQ4_NL's `d`, IQ4_XS's `d · (ls − 32)`, a coded type's `d · scale`), one word per 16
//! elements for IQ2_XS, IQ2_S and IQ1_M, whose halves have their own scales; the kernels look the code's level up in
//! the type's 16 (`PackedType::levels`). The values are still exactly the CPU's dequantization (the gguf package's),
//! but the codes are no longer the file's bits: the lattice types' grids are decoded here, once, at upload. Simple
//! and exact, but the low-bit types pay for it in memory: bits per weight on the device against the file's, IQ4_NL
//! 5.0 / 4.5, IQ4_XS 5.0 / 4.25, IQ3_S 5.0 / 3.44, IQ3_XXS 5.0 / 3.06, IQ2_S 5.0 / 2.56, IQ2_XS 5.0 / 2.31, IQ2_XXS
//! 4.0 / 2.06, IQ1_M 5.0 / 1.75, IQ1_S 4.0 / 1.56, TQ2_0 3.0 / 2.06, TQ1_0 3.0 / 1.69.

use half::f16;

use crate::backend::cpu::kernels::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::{five_bit_values, QK};
use crate::model::gguf::coded::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockTq1_0, BlockTq2_0,
    CodedBlock, CodedUnit,
};
use crate::model::gguf::iq4::KVALUES;
use crate::model::gguf::kquants::{SuperBlock, GROUPS};
use crate::model::gguf::mxfp4::e8m0_to_fp32_half;

/// The weight types the kernels read, numbered as `TYPE_*` in `common.cuh`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PackedType {
    Q4_0 = 0,
    Q4_1 = 1,
    Q8_0 = 2,
    Q5_0 = 3,
    Q5_1 = 4,
    Q2K = 5,
    Q3K = 6,
    Q4K = 7,
    Q5K = 8,
    Q6K = 9,
    F16 = 10,
    Bf16 = 11,
    F32 = 12,
    Mxfp4 = 13,
    Iq4Nl = 14,
    Iq4Xs = 15,
    Iq3Xxs = 16,
    Iq3S = 17,
    Iq2Xxs = 18,
    Iq2Xs = 19,
    Iq2S = 20,
    Iq1S = 21,
    Iq1M = 22,
    Tq1_0 = 23,
    Tq2_0 = 24,
}

impl PackedType {
    /// In `TYPE_*` order (a type's position is its number), as `FOR_EACH_WEIGHT_TYPE` lists them.
    pub const ALL: [PackedType; 25] = [
        PackedType::Q4_0,
        PackedType::Q4_1,
        PackedType::Q8_0,
        PackedType::Q5_0,
        PackedType::Q5_1,
        PackedType::Q2K,
        PackedType::Q3K,
        PackedType::Q4K,
        PackedType::Q5K,
        PackedType::Q6K,
        PackedType::F16,
        PackedType::Bf16,
        PackedType::F32,
        PackedType::Mxfp4,
        PackedType::Iq4Nl,
        PackedType::Iq4Xs,
        PackedType::Iq3Xxs,
        PackedType::Iq3S,
        PackedType::Iq2Xxs,
        PackedType::Iq2Xs,
        PackedType::Iq2S,
        PackedType::Iq1S,
        PackedType::Iq1M,
        PackedType::Tq1_0,
        PackedType::Tq2_0,
    ];

    /// 32-bit words of values per group (`QWORDS`).
    pub fn quant_words(self) -> usize {
        match self {
            // The codebook types' codes take their `CodedBlock::CODE_BITS` (IQ4's 4): 2 words of 2-bit codes for
            // the ternary types, 3 of 3-bit codes for the IQ2 and IQ1 types, 4 of 4-bit codes for the others.
            PackedType::Q2K | PackedType::Tq1_0 | PackedType::Tq2_0 => 2,
            PackedType::Q3K
            | PackedType::Iq2Xxs
            | PackedType::Iq2Xs
            | PackedType::Iq2S
            | PackedType::Iq1S
            | PackedType::Iq1M => 3,
            PackedType::Q4_0
            | PackedType::Q4_1
            | PackedType::Q4K
            | PackedType::Mxfp4
            | PackedType::Iq4Nl
            | PackedType::Iq4Xs
            | PackedType::Iq3Xxs
            | PackedType::Iq3S => 4,
            PackedType::Q5_0 | PackedType::Q5_1 | PackedType::Q5K => 5,
            PackedType::Q6K => 6,
            PackedType::Q8_0 => 8,
            PackedType::F16 | PackedType::Bf16 => 16,
            PackedType::F32 => 32,
        }
    }

    /// 32-bit words of scales per group (`SWORDS`).
    pub fn scale_words(self) -> usize {
        match self {
            PackedType::Q4_0
            | PackedType::Q4_1
            | PackedType::Q8_0
            | PackedType::Q5_0
            | PackedType::Q5_1
            | PackedType::Mxfp4 => 1,
            PackedType::Q2K | PackedType::Q3K | PackedType::Q4K | PackedType::Q5K | PackedType::Q6K => 2,
            PackedType::F16 | PackedType::Bf16 | PackedType::F32 => 0,
            // One f32 scale per 32 elements, or per 16 where the type scales halves of 32 apart.
            PackedType::Iq4Nl
            | PackedType::Iq4Xs
            | PackedType::Iq3Xxs
            | PackedType::Iq3S
            | PackedType::Iq2Xxs
            | PackedType::Iq1S
            | PackedType::Tq1_0
            | PackedType::Tq2_0 => 1,
            PackedType::Iq2Xs | PackedType::Iq2S | PackedType::Iq1M => 2,
        }
    }

    /// The suffix of this type's kernels' names (`project_small_q4_k`).
    pub fn kernel_suffix(self) -> &'static str {
        match self {
            PackedType::Q4_0 => "q4_0",
            PackedType::Q4_1 => "q4_1",
            PackedType::Q8_0 => "q8_0",
            PackedType::Q5_0 => "q5_0",
            PackedType::Q5_1 => "q5_1",
            PackedType::Q2K => "q2_k",
            PackedType::Q3K => "q3_k",
            PackedType::Q4K => "q4_k",
            PackedType::Q5K => "q5_k",
            PackedType::Q6K => "q6_k",
            PackedType::F16 => "f16",
            PackedType::Bf16 => "bf16",
            PackedType::F32 => "f32",
            PackedType::Mxfp4 => "mxfp4",
            PackedType::Iq4Nl => "iq4_nl",
            PackedType::Iq4Xs => "iq4_xs",
            PackedType::Iq3Xxs => "iq3_xxs",
            PackedType::Iq3S => "iq3_s",
            PackedType::Iq2Xxs => "iq2_xxs",
            PackedType::Iq2Xs => "iq2_xs",
            PackedType::Iq2S => "iq2_s",
            PackedType::Iq1S => "iq1_s",
            PackedType::Iq1M => "iq1_m",
            PackedType::Tq1_0 => "tq1_0",
            PackedType::Tq2_0 => "tq2_0",
        }
    }

    /// The 16 signed integer levels of a codebook type's codes (`LEVELS_*` in `common.cuh`): IQ4_NL's and IQ4_XS's
    /// `KVALUES`, a coded type's `CodedBlock::LEVELS`; `None` for the other types (MXFP4 computes its values).
    pub fn levels(self) -> Option<[i8; 16]> {
        Some(match self {
            PackedType::Iq4Nl | PackedType::Iq4Xs => KVALUES,
            PackedType::Iq3Xxs => BlockIq3Xxs::LEVELS,
            PackedType::Iq3S => BlockIq3S::LEVELS,
            PackedType::Iq2Xxs => BlockIq2Xxs::LEVELS,
            PackedType::Iq2Xs => BlockIq2Xs::LEVELS,
            PackedType::Iq2S => BlockIq2S::LEVELS,
            PackedType::Iq1S => BlockIq1S::LEVELS,
            PackedType::Iq1M => BlockIq1M::LEVELS,
            PackedType::Tq1_0 => BlockTq1_0::LEVELS,
            PackedType::Tq2_0 => BlockTq2_0::LEVELS,
            _ => return None,
        })
    }

    /// The device type of `data`: every type the CPU backend reads has one.
    pub fn of(data: &WeightData<'_>) -> PackedType {
        match data {
            WeightData::Q4_0(_) => PackedType::Q4_0,
            WeightData::Q4_1(_) => PackedType::Q4_1,
            WeightData::Q8_0(_) => PackedType::Q8_0,
            WeightData::Q5_0(_) => PackedType::Q5_0,
            WeightData::Q5_1(_) => PackedType::Q5_1,
            WeightData::Q2K(_) => PackedType::Q2K,
            WeightData::Q3K(_) => PackedType::Q3K,
            WeightData::Q4K(_) => PackedType::Q4K,
            WeightData::Q5K(_) => PackedType::Q5K,
            WeightData::Q6K(_) => PackedType::Q6K,
            WeightData::F16(_) => PackedType::F16,
            WeightData::Bf16(_) => PackedType::Bf16,
            WeightData::F32(_) => PackedType::F32,
            WeightData::Mxfp4(_) => PackedType::Mxfp4,
            WeightData::Iq4Nl(_) => PackedType::Iq4Nl,
            WeightData::Iq4Xs(_) => PackedType::Iq4Xs,
            WeightData::Iq3Xxs(_) => PackedType::Iq3Xxs,
            WeightData::Iq3S(_) => PackedType::Iq3S,
            WeightData::Iq2Xxs(_) => PackedType::Iq2Xxs,
            WeightData::Iq2Xs(_) => PackedType::Iq2Xs,
            WeightData::Iq2S(_) => PackedType::Iq2S,
            WeightData::Iq1S(_) => PackedType::Iq1S,
            WeightData::Iq1M(_) => PackedType::Iq1M,
            WeightData::Tq1_0(_) => PackedType::Tq1_0,
            WeightData::Tq2_0(_) => PackedType::Tq2_0,
        }
    }
}

/// A weight matrix in the device layout, on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedMatrix {
    pub dtype: PackedType,
    pub rows: usize,
    /// Weights per row, a multiple of 32.
    pub cols: usize,
    /// `[rows][cols / 32][dtype.quant_words()]`.
    pub quants: Vec<u32>,
    /// `[rows][cols / 32][dtype.scale_words()]`.
    pub scales: Vec<u32>,
}

/// Packs `matrix` (rows of any weight type are whole groups of 32: blocks are 32 or 256 elements).
pub fn pack(matrix: &WeightMatrix<'_>) -> PackedMatrix {
    let data = matrix.data();
    let dtype = PackedType::of(&data);
    let groups = matrix.n_rows() * matrix.row_len() / QK;
    let mut out = Planes {
        quants: Vec::with_capacity(groups * dtype.quant_words()),
        scales: Vec::with_capacity(groups * dtype.scale_words()),
    };
    let legacy_scale = |d: f16, m: f16| u32::from(d.to_bits()) | (u32::from(m.to_bits()) << 16);
    match data {
        WeightData::Q4_0(blocks) => blocks.iter().for_each(|b| {
            out.raw_bytes(&b.qs);
            out.scales.push(legacy_scale(b.d, f16::ZERO));
        }),
        WeightData::Q4_1(blocks) => blocks.iter().for_each(|b| {
            out.raw_bytes(&b.qs);
            out.scales.push(legacy_scale(b.d, b.m));
        }),
        WeightData::Q8_0(blocks) => blocks.iter().for_each(|b| {
            out.raw_bytes(bytemuck::cast_slice(&b.qs));
            out.scales.push(legacy_scale(b.d, f16::ZERO));
        }),
        WeightData::Q5_0(blocks) => blocks.iter().for_each(|b| {
            out.five_bits(&five_bit_values(&b.qs, &b.qh));
            out.scales.push(legacy_scale(b.d, f16::ZERO));
        }),
        WeightData::Q5_1(blocks) => blocks.iter().for_each(|b| {
            out.five_bits(&five_bit_values(&b.qs, &b.qh));
            out.scales.push(legacy_scale(b.d, b.m));
        }),
        WeightData::Q2K(blocks) => out.k_quant(blocks, |p, u| p.pairs(u, 0)),
        WeightData::Q3K(blocks) => out.k_quant(blocks, |p, u| {
            p.pairs(u, 0);
            p.bits(u, 2);
        }),
        WeightData::Q4K(blocks) => out.k_quant(blocks, |p, u| p.nibbles(u, 0)),
        WeightData::Q5K(blocks) => out.k_quant(blocks, |p, u| p.five_bits(u)),
        WeightData::Q6K(blocks) => out.k_quant(blocks, |p, u| {
            p.nibbles(u, 0);
            p.pairs(u, 4);
        }),
        WeightData::F16(values) => out.raw_bytes(bytemuck::cast_slice(values)),
        WeightData::Bf16(values) => out.raw_bytes(bytemuck::cast_slice(values)),
        WeightData::F32(values) => out.raw_bytes(bytemuck::cast_slice(values)),
        // The codes as stored (the nibble plane, as Q4_0's), the scale as the f32 bits of its exact value.
        WeightData::Mxfp4(blocks) => blocks.iter().for_each(|b| {
            out.raw_bytes(&b.qs);
            out.scales.push(e8m0_to_fp32_half(b.e).to_bits());
        }),
        // The codebook types: codes in the nibble plane (IQ4's bytes as stored, in Q4_0's order), each group's
        // exact f32 scale (IQ4_XS's `d · (ls − 32)`, a coded type's `d · scale` of each half where they differ).
        WeightData::Iq4Nl(blocks) => blocks.iter().for_each(|b| {
            out.raw_bytes(&b.qs);
            out.scales.push(b.d.to_f32().to_bits());
        }),
        WeightData::Iq4Xs(blocks) => blocks.iter().for_each(|b| {
            for s in 0..GROUPS {
                let (d, qs) = b.sub_block(s);
                out.raw_bytes(qs);
                out.scales.push(d.to_bits());
            }
        }),
        WeightData::Iq3Xxs(blocks) => out.coded(blocks),
        WeightData::Iq3S(blocks) => out.coded(blocks),
        WeightData::Iq2Xxs(blocks) => out.coded(blocks),
        WeightData::Iq2Xs(blocks) => out.coded(blocks),
        WeightData::Iq2S(blocks) => out.coded(blocks),
        WeightData::Iq1S(blocks) => out.coded(blocks),
        WeightData::Iq1M(blocks) => out.coded(blocks),
        WeightData::Tq1_0(blocks) => out.coded(blocks),
        WeightData::Tq2_0(blocks) => out.coded(blocks),
    }
    debug_assert_eq!(out.quants.len(), groups * dtype.quant_words());
    debug_assert_eq!(out.scales.len(), groups * dtype.scale_words());
    PackedMatrix { dtype, rows: matrix.n_rows(), cols: matrix.row_len(), quants: out.quants, scales: out.scales }
}

/// The packed words, appended group after group.
struct Planes {
    quants: Vec<u32>,
    scales: Vec<u32>,
}

/// Element `4s + i` (first run) or `4s + 16 + i` (second run) of slice `s`: the order every plane follows.
fn element(s: usize, second: bool, i: usize) -> usize {
    4 * s + if second { 16 } else { 0 } + i
}

impl Planes {
    /// Bytes as little-endian words, unchanged (Q4_0 and Q4_1, whose `qs` already are the nibble plane; Q8_0; the
    /// float types, in element order).
    fn raw_bytes(&mut self, bytes: &[u8]) {
        self.quants.extend(bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
    }

    /// 4 words: bits `shift..shift + 4` of each code, byte `i` of word `s` holding elements `4s + i` (low nibble)
    /// and `4s + 16 + i` (high nibble).
    fn nibbles(&mut self, u: &[u8; QK], shift: u32) {
        for s in 0..4 {
            let mut word = 0u32;
            for i in 0..4 {
                let lo = u32::from(u[element(s, false, i)] >> shift) & 0xf;
                let hi = u32::from(u[element(s, true, i)] >> shift) & 0xf;
                word |= (lo | (hi << 4)) << (8 * i);
            }
            self.quants.push(word);
        }
    }

    /// 2 words: bits `shift..shift + 2` of each code, slice `s` in the 16 bits at `16 · (s % 2)` of word `s / 2`,
    /// element `4s + i` at bit `2i`, `4s + 16 + i` at bit `8 + 2i`.
    fn pairs(&mut self, u: &[u8; QK], shift: u32) {
        let mut words = [0u32; 2];
        for s in 0..4 {
            for i in 0..4 {
                let lo = u32::from(u[element(s, false, i)] >> shift) & 3;
                let hi = u32::from(u[element(s, true, i)] >> shift) & 3;
                words[s / 2] |= (lo << (2 * i) | hi << (8 + 2 * i)) << (16 * (s % 2));
            }
        }
        self.quants.extend(words);
    }

    /// 1 word: bit `shift` of each code, slice `s` in byte `s`, element `4s + i` at bit `i`, `4s + 16 + i` at
    /// bit `4 + i`.
    fn bits(&mut self, u: &[u8; QK], shift: u32) {
        let mut word = 0u32;
        for s in 0..4 {
            for i in 0..4 {
                let lo = u32::from(u[element(s, false, i)] >> shift) & 1;
                let hi = u32::from(u[element(s, true, i)] >> shift) & 1;
                word |= (lo << i | hi << (4 + i)) << (8 * s);
            }
        }
        self.quants.push(word);
    }

    /// Five-bit codes: the nibble plane, then the fifth bits.
    fn five_bits(&mut self, u: &[u8; QK]) {
        self.nibbles(u, 0);
        self.bits(u, 4);
    }

    /// Every group of every super-block: its codes through `values`, then the super-block's `d | dmin << 16` (as
    /// stored, f16) and the group's integer scales (signed bytes) and minima (unsigned bytes) of its two halves.
    fn k_quant<B: SuperBlock>(&mut self, blocks: &[B], values: impl Fn(&mut Self, &[u8; QK])) {
        for b in blocks {
            let header =
                u32::from(f16::from_f32(b.d()).to_bits()) | (u32::from(f16::from_f32(b.dmin()).to_bits()) << 16);
            for g in 0..GROUPS {
                let group = b.group(g);
                values(self, &group.u);
                // Scales are −32..=63 and minima 0..=63 in every K-quant, so bytes hold them exactly.
                let byte = |v: i32| u32::from(v as i8 as u8);
                let ints = byte(group.scales[0])
                    | byte(group.scales[1]) << 8
                    | byte(group.mins[0]) << 16
                    | byte(group.mins[1]) << 24;
                self.scales.extend([header, ints]);
            }
        }
    }

    /// Every group of every super-block of a coded type, decoded: its codes (each below `2^CODE_BITS`) in as many
    /// planes as they need (Q2_K's pairs for 2 bits, Q3_K's pairs and bits for 3, the nibbles for 4), then the f32
    /// bits of `d · scale`, once per group when `SCALE_PER_32` (both halves' scales are equal), else once per half. Those products are exact (`coded.rs`), the very factors the CPU's dequantization multiplies
    /// the levels by, so the kernels' `scale · level` is its value bit for bit.
    fn coded<B: CodedBlock>(&mut self, blocks: &[B]) {
        let mut unit = CodedUnit::EMPTY;
        for b in blocks {
            b.decode(&mut unit);
            for g in 0..GROUPS {
                let codes: &[u8; QK] = unit.codes[QK * g..QK * (g + 1)].try_into().expect("32 codes");
                debug_assert!(codes.iter().all(|&c| u32::from(c) < 1 << B::CODE_BITS), "codes of CODE_BITS bits");
                match B::CODE_BITS {
                    2 => self.pairs(codes, 0),
                    3 => {
                        self.pairs(codes, 0);
                        self.bits(codes, 2);
                    }
                    _ => self.nibbles(codes, 0),
                }
                let half = |h: usize| (unit.d * unit.scales[2 * g + h] as f32).to_bits();
                if B::SCALE_PER_32 {
                    debug_assert_eq!(unit.scales[2 * g], unit.scales[2 * g + 1], "one scale per 32 elements");
                    self.scales.push(half(0));
                } else {
                    self.scales.extend([half(0), half(1)]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::blocks::{quantize_q4_1, BlockQ4_0};
    use crate::model::gguf::GgmlType;

    #[test]
    fn q4_blocks_keep_their_bytes_and_scales() {
        let blocks: Vec<BlockQ4_0> = (0..4)
            .map(|b| BlockQ4_0 {
                d: f16::from_f32(if b % 2 == 0 { 0.25 } else { -1.5 }),
                qs: std::array::from_fn(|j| (j as u8 + b as u8) | ((15 - j as u8) << 4)),
            })
            .collect();
        let packed = pack(&WeightMatrix::new(WeightData::Q4_0(&blocks), 2, 64).unwrap());
        assert_eq!((packed.quants.len(), packed.scales.len()), (16, 4));
        assert_eq!(packed.quants[4], u32::from_le_bytes([0xf1, 0xe2, 0xd3, 0xc4]), "block 1's first word, as stored");
        assert_eq!(packed.scales[1], u32::from(f16::from_f32(-1.5).to_bits()));
        let x: Vec<f32> = (0..64).map(|i| i as f32 / 7.0 - 3.0).collect();
        let q41: Vec<_> = x.chunks_exact(QK).map(|c| quantize_q4_1(c.try_into().unwrap())).collect();
        let packed = pack(&WeightMatrix::new(WeightData::Q4_1(&q41), 1, 64).unwrap());
        assert_eq!(packed.scales[0] >> 16, u32::from(q41[0].m.to_bits()));
    }

    #[test]
    fn planes_put_each_code_where_the_kernels_read_it() {
        // Codes that name their element: every bit of every plane lands at a distinct, predictable place.
        let u: [u8; QK] = std::array::from_fn(|k| k as u8 * 2 + 1);
        let mut p = Planes { quants: Vec::new(), scales: Vec::new() };
        p.nibbles(&u, 0);
        p.pairs(&u, 4);
        p.bits(&u, 2);
        for (k, &code) in u.iter().enumerate() {
            let (s, i, second) = ((k % 16) / 4, k % 4, k >= 16);
            let nibble = (p.quants[s] >> (8 * i + if second { 4 } else { 0 })) & 0xf;
            let pair = (p.quants[4 + s / 2] >> (16 * (s % 2) + 2 * i + if second { 8 } else { 0 })) & 3;
            let bit = (p.quants[6] >> (8 * s + i + if second { 4 } else { 0 })) & 1;
            assert_eq!(nibble, u32::from(code) & 0xf, "nibble of element {k}");
            assert_eq!(pair, (u32::from(code) >> 4) & 3, "pair of element {k}");
            assert_eq!(bit, (u32::from(code) >> 2) & 1, "bit of element {k}");
        }
    }

    #[test]
    fn mxfp4_keeps_its_codes_and_widens_its_scale() {
        use crate::model::gguf::mxfp4::BlockMxfp4;
        let blocks: Vec<BlockMxfp4> =
            [0u8, 1, 128, 255].iter().map(|&e| BlockMxfp4 { e, qs: std::array::from_fn(|j| (j as u8) * 17) }).collect();
        let packed = pack(&WeightMatrix::new(WeightData::Mxfp4(&blocks), 2, 64).unwrap());
        assert_eq!((packed.dtype, packed.quants.len(), packed.scales.len()), (PackedType::Mxfp4, 16, 4));
        assert_eq!(packed.quants[4], u32::from_le_bytes([0x00, 0x11, 0x22, 0x33]), "block 1's first word, as stored");
        let scales: Vec<f32> = packed.scales.iter().map(|&w| f32::from_bits(w)).collect();
        assert_eq!(scales, [2f32.powi(-128), 2f32.powi(-127), 1.0, 2f32.powi(127)]);
    }

    #[test]
    fn every_type_has_its_kernels_number() {
        for (i, t) in PackedType::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i);
        }
    }

    /// The codebook types: every type the CPU reads, one byte pattern each with a finite scale.
    const CODEBOOK: [(GgmlType, PackedType); 11] = [
        (GgmlType::Iq4Nl, PackedType::Iq4Nl),
        (GgmlType::Iq4Xs, PackedType::Iq4Xs),
        (GgmlType::Iq3Xxs, PackedType::Iq3Xxs),
        (GgmlType::Iq3S, PackedType::Iq3S),
        (GgmlType::Iq2Xxs, PackedType::Iq2Xxs),
        (GgmlType::Iq2Xs, PackedType::Iq2Xs),
        (GgmlType::Iq2S, PackedType::Iq2S),
        (GgmlType::Iq1S, PackedType::Iq1S),
        (GgmlType::Iq1M, PackedType::Iq1M),
        (GgmlType::Tq1_0, PackedType::Tq1_0),
        (GgmlType::Tq2_0, PackedType::Tq2_0),
    ];

    /// `n` blocks of pseudo-random bytes of `dtype` whose f16 super-scale is finite (0x2c00 + noise, about 0.06).
    fn random_codebook_blocks(dtype: GgmlType, n: usize) -> Vec<u8> {
        let size = dtype.block_bytes() as usize;
        let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ dtype as u64;
        let mut bytes: Vec<u8> = (0..n * size)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            })
            .collect();
        for block in bytes.chunks_exact_mut(size) {
            match dtype {
                // The f16 last.
                GgmlType::Tq1_0 | GgmlType::Tq2_0 => block[size - 1] = 0x2c | (block[size - 1] & 3),
                // The f16's top nibble is the top nibble of the last scale word (bytes 48..56).
                GgmlType::Iq1M => block[55] = 0x20 | (block[55] & 0x0f),
                // The f16 first.
                _ => block[1] = 0x2c | (block[1] & 3),
            }
        }
        bytes
    }

    #[test]
    fn every_weight_type_has_a_device_type() {
        for (dtype, packed) in CODEBOOK {
            let bytes = random_codebook_blocks(dtype, 1);
            let data = WeightData::from_bytes(dtype, &bytes).unwrap();
            assert_eq!(PackedType::of(&data), packed, "{dtype}");
        }
    }

    #[test]
    fn codebook_levels_are_the_kernels_constants() {
        let source = include_str!("kernels/common.cuh");
        for (_, t) in CODEBOOK {
            let levels = t.levels().unwrap();
            let word = |half: &[i8]| u64::from_le_bytes(std::array::from_fn(|i| half[i] as u8));
            let line = format!(
                "template <> struct Levels<TYPE_{}> {{ static const unsigned long long LO = 0x{:016x}ull, HI = \
                 0x{:016x}ull; }};",
                t.kernel_suffix().to_uppercase(),
                word(&levels[..8]),
                word(&levels[8..])
            );
            assert!(source.contains(&line), "common.cuh lacks {line}");
        }
        assert_eq!(PackedType::Mxfp4.levels(), None);
    }

    /// Every element of every codebook type, read back as the kernels read it (`slice_dequant`: the code of element
    /// `4s + i` or `4s + 16 + i` from slice `s`'s part of each plane, the group's scale word or its half's, the level
    /// from the type's table), equals the CPU's dequantization bit for bit.
    #[test]
    fn codebook_types_read_back_as_the_cpu_dequantizes_them() {
        for (dtype, t) in CODEBOOK {
            let (rows, cols) = (3, 512);
            let n_blocks = rows * cols / dtype.block_len() as usize;
            let bytes = random_codebook_blocks(dtype, n_blocks);
            let matrix = WeightMatrix::new(WeightData::from_bytes(dtype, &bytes).unwrap(), rows, cols).unwrap();
            let packed = pack(&matrix);
            let groups = rows * cols / QK;
            assert_eq!(packed.dtype, t);
            let (qw, sw) = (t.quant_words(), t.scale_words());
            assert_eq!((packed.quants.len(), packed.scales.len()), (qw * groups, sw * groups), "{dtype}");
            let levels = t.levels().unwrap();
            let mut row = vec![0f32; cols];
            let mut nonzero = 0;
            for r in 0..rows {
                matrix.dequantize_row(r, &mut row);
                for (c, &want) in row.iter().enumerate() {
                    let (g, k) = ((r * cols + c) / QK, c % QK);
                    let (s, i, second) = ((k % 16) / 4, k % 4, k >= 16);
                    let q = &packed.quants[g * qw..(g + 1) * qw];
                    let code = match qw {
                        // Nibbles: byte i of word s, the high nibble for the second run.
                        4 => (q[s] >> (8 * i + if second { 4 } else { 0 })) & 0xf,
                        // Pairs (word s / 2, half s % 2), and for 3 bits the bits plane's byte s as bit 2.
                        _ => {
                            let pair = (q[s / 2] >> (16 * (s % 2) + 2 * i + if second { 8 } else { 0 })) & 3;
                            let bit = if qw == 3 { (q[2] >> (8 * s + i + if second { 4 } else { 0 })) & 1 } else { 0 };
                            pair | bit << 2
                        }
                    };
                    let scale = f32::from_bits(packed.scales[g * sw + if second { sw - 1 } else { 0 }]);
                    let got = scale * f32::from(levels[code as usize]);
                    assert_eq!(got.to_bits(), want.to_bits(), "{dtype} row {r} column {c}: {got} against {want}");
                    nonzero += usize::from(want != 0.0);
                }
            }
            assert!(nonzero > rows * cols / 4, "{dtype}: {nonzero} nonzero weights, too few to check the layout");
        }
    }
}
