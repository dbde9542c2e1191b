//! IQ4_NL (GGML type 20) and IQ4_XS (type 23): 4-bit codes into one non-linear codebook of 16 values, the
//! "importance" quantizations most downloaded GGUF repositories offer beside the K-quants. Their block layouts,
//! codebook and scalar dequantization, equal to the `gguf` Python package's bit for bit.
//!
//! Layouts follow ggml (`ggml-common.h`):
//! - `block_iq4_nl`: 32 elements, an f16 scale `d` and 16 bytes of codes, byte `j` holding element `j`'s code in its
//!   low nibble and element `j + 16`'s in its high nibble (Q4_0's order): element `k` is `d · KVALUES[code_k]`.
//! - `block_iq4_xs`: 256 elements in 8 sub-blocks of 32, an f16 super-scale `d`, a 6-bit scale `ls` per sub-block
//!   (its low 4 bits in `scales_l`, two sub-blocks a byte, its high 2 bits in `scales_h`, two bits a sub-block) and
//!   each sub-block's 16 bytes of codes in IQ4_NL's order: element `k` of sub-block `s` is
//!   `(d · (ls_s − 32)) · KVALUES[code_k]`. The sub-block scale `d · (ls − 32)` is exact in f32 (an f16 times an
//!   integer of 6 bits), so it can stand for the sub-block as IQ4_NL's `d` does, without a rounding.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::blocks::QK;
use super::kquants::QK_K;

/// The 16 values of the codebook (ggml's `kvalues_iq4nl`).
pub const KVALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// 32 elements: `x = d · KVALUES[code]`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq4Nl {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

/// 256 elements in 8 sub-blocks of 32: `x = (d · (ls − 32)) · KVALUES[code]`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq4Xs {
    pub d: f16,
    /// Bits 4..6 of each sub-block's scale, two bits per sub-block (sub-block `s` at bit `2s`).
    pub scales_h: u16,
    /// Bits 0..4 of each sub-block's scale, sub-block `s` in the low nibble of byte `s / 2` when `s` is even.
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}

// The layouts must match ggml byte for byte: these sizes are what GgmlType::block_bytes promises.
const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == 18);
const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == 136);

/// The 32 codes (0..16) of 16 bytes, in element order.
#[inline(always)]
pub fn codes(qs: &[u8]) -> [u8; QK] {
    std::array::from_fn(|k| if k < QK / 2 { qs[k] & 0x0f } else { qs[k - QK / 2] >> 4 })
}

impl BlockIq4Xs {
    /// Sub-block `s`'s 6-bit scale `ls` (0..64).
    #[inline(always)]
    pub fn sub_scale(&self, s: usize) -> i32 {
        let low = (self.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
        let high = (self.scales_h >> (2 * s)) & 3;
        i32::from(low) | (i32::from(high) << 4)
    }

    /// Sub-block `s` as an IQ4_NL-like block: its exact scale `d · (ls − 32)` (f32) and its 16 bytes of codes.
    #[inline(always)]
    pub fn sub_block(&self, s: usize) -> (f32, &[u8]) {
        (self.d.to_f32() * (self.sub_scale(s) - 32) as f32, &self.qs[16 * s..16 * (s + 1)])
    }
}

/// Dequantizes IQ4_NL blocks into `out` (`out.len() == blocks.len() * 32`): `d · f32(KVALUES[code])`, one rounding,
/// as gguf-py and ggml compute it.
pub fn dequantize_iq4_nl(blocks: &[BlockIq4Nl], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK, "output length must be 32 per block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        dequantize_codes(b.d.to_f32(), &b.qs, o);
    }
}

/// Dequantizes IQ4_XS blocks into `out` (`out.len() == blocks.len() * 256`): `(d · (ls − 32)) · f32(KVALUES[code])`,
/// the first product exact, as gguf-py and ggml compute it.
pub fn dequantize_iq4_xs(blocks: &[BlockIq4Xs], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK_K, "output length must be 256 per block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        for (s, sub) in o.chunks_exact_mut(QK).enumerate() {
            let (d, qs) = b.sub_block(s);
            dequantize_codes(d, qs, sub);
        }
    }
}

/// 32 elements of 16 code bytes scaled by `d`.
#[inline(always)]
fn dequantize_codes(d: f32, qs: &[u8], out: &mut [f32]) {
    for (x, &c) in out.iter_mut().zip(&codes(qs)) {
        *x = d * f32::from(KVALUES[usize::from(c)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iq4_xs_sub_scales_unpack_as_ggml_packs_them() {
        // Sub-block s has scale 8s + 3 (0..64): low nibbles two a byte, high crumbs two bits a sub-block.
        let scales: [u8; 8] = std::array::from_fn(|s| 8 * s as u8 + 3);
        let mut b = BlockIq4Xs { d: f16::from_f32(0.5), scales_h: 0, scales_l: [0; 4], qs: [0; 128] };
        for (s, &ls) in scales.iter().enumerate() {
            b.scales_l[s / 2] |= (ls & 0x0f) << (4 * (s % 2));
            b.scales_h |= u16::from(ls >> 4) << (2 * s);
        }
        for (s, &ls) in scales.iter().enumerate() {
            assert_eq!(b.sub_scale(s), i32::from(ls), "sub-block {s}");
            assert_eq!(b.sub_block(s).0, 0.5 * (f32::from(ls) - 32.0));
        }
    }

    #[test]
    fn the_scale_of_a_sub_block_is_exact() {
        // The largest f16 times the largest |ls − 32| keeps every bit: 17 significant bits fit f32's 24.
        let b = BlockIq4Xs { d: f16::MAX, scales_h: 0, scales_l: [0; 4], qs: [0; 128] };
        assert_eq!(f64::from(b.sub_block(0).0), f64::from(f16::MAX.to_f32()) * -32.0);
    }
}
