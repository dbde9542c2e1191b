//! MXFP4 (GGML type 39), the OCP microscaling 4-bit float format that gpt-oss ships its experts in: its block
//! layout, its scale and value codes, and its scalar dequantization.
//!
//! Layout follows ggml (`ggml-common.h`: `block_mxfp4`): a block covers 32 consecutive elements of a row, one E8M0
//! exponent byte `e` and 16 bytes of 4-bit codes, byte `j` holding element `j`'s code in its low nibble and element
//! `j + 16`'s in its high nibble (the order of Q4_0). A code is an E2M1 float, kept doubled as a small integer
//! (`KVALUES`, so that it multiplies as an int8), and the scale is halved to compensate: element `k` is
//! `KVALUES[code_k] · 2^(e − 128)`. Dequantization equals the `gguf` Python package's bit for bit (one f32
//! product of two exact values).

use bytemuck::{Pod, Zeroable};

use super::blocks::QK;

/// The E2M1 values of the 16 codes, doubled (ggml's `kvalues_mxfp4`): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
/// negatives; code 8 is E2M1's −0, which as an integer is 0.
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// 32 elements: `x = KVALUES[code] · 2^(e − 128)`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockMxfp4 {
    /// E8M0 exponent: the block scale is `2^(e − 127)`, halved for the doubled values.
    pub e: u8,
    pub qs: [u8; QK / 2],
}

// The layout must match ggml byte for byte: this size is what GgmlType::block_bytes promises.
const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == 17);

/// Half the E8M0 scale `e`: `2^(e − 128)`, exact for every byte (ggml's `ggml_e8m0_to_fp32_half`). `e` 0 and 1
/// give the subnormals 2^−128 and 2^−127, `e` 255 gives 2^127. (The OCP format reserves 255 for NaN; ggml and
/// gguf-py do not, and neither do we: a file means what those readers make of it.)
#[inline(always)]
pub const fn e8m0_to_fp32_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { (e as u32 - 1) << 23 };
    f32::from_bits(bits)
}

/// The exponent byte whose half scale is `d`: the inverse of [`e8m0_to_fp32_half`] on its 256 values (what
/// packing uses to store a decoded scale again).
#[inline(always)]
pub const fn e8m0_from_fp32_half(d: f32) -> u8 {
    let bits = d.to_bits();
    if bits >= 1 << 23 {
        ((bits >> 23) + 1) as u8
    } else if bits == 0x0040_0000 {
        1
    } else {
        0
    }
}

/// The 32 codes (0..16) of a block, in element order.
#[inline(always)]
pub fn codes(qs: &[u8; QK / 2]) -> [u8; QK] {
    std::array::from_fn(|k| if k < QK / 2 { qs[k] & 0x0f } else { qs[k - QK / 2] >> 4 })
}

/// Dequantizes MXFP4 blocks into `out` (`out.len() == blocks.len() * 32`): `d · f32(KVALUES[code])`, one
/// rounding (none unless the product leaves f32's range), as gguf-py and ggml compute it.
pub fn dequantize_mxfp4(blocks: &[BlockMxfp4], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK, "output length must be 32 per block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = e8m0_to_fp32_half(b.e);
        for (x, &c) in o.iter_mut().zip(&codes(&b.qs)) {
            *x = d * f32::from(KVALUES[usize::from(c)]);
        }
    }
}

/// Quantizes 32 values to MXFP4 as gguf-py's reference quantizer does: the scale from the block's largest
/// magnitude, `e = ⌊log2 amax⌋ − 2 + 127` (so the largest value lands between codes 8 and 16 of the doubled
/// table; 0 for an all-zero block), and each value the code whose value is nearest (the first on a tie).
pub fn quantize_mxfp4(x: &[f32; QK]) -> BlockMxfp4 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let e = if amax > 0.0 { (amax.log2().floor() as i32 - 2 + 127).clamp(0, 255) as u8 } else { 0 };
    let d = e8m0_to_fp32_half(e);
    let code = |v: f32| {
        let error = |c: usize| (d * f32::from(KVALUES[c]) - v).abs();
        (0..16).fold(0, |best, c| if error(c) < error(best) { c } else { best }) as u8
    };
    let mut qs = [0u8; QK / 2];
    for (j, q) in qs.iter_mut().enumerate() {
        *q = code(x[j]) | (code(x[j + QK / 2]) << 4);
    }
    BlockMxfp4 { e, qs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_half_scale_is_two_to_the_e_minus_128() {
        for e in 0..=255u8 {
            let want = 2f64.powi(i32::from(e) - 128);
            assert_eq!(f64::from(e8m0_to_fp32_half(e)), want, "e = {e}");
            assert_eq!(e8m0_from_fp32_half(e8m0_to_fp32_half(e)), e, "round trip of e = {e}");
        }
        assert!(e8m0_to_fp32_half(0).is_subnormal() && e8m0_to_fp32_half(1).is_subnormal());
        assert!(e8m0_to_fp32_half(2).is_normal());
    }

    #[test]
    fn codes_are_low_nibbles_first_and_map_through_the_table() {
        let mut qs = [0u8; 16];
        qs[0] = 0xf7; // element 0: code 7 (12), element 16: code 15 (−12)
        qs[3] = 0x98; // element 3: code 8 (−0 → 0), element 19: code 9 (−1)
        let b = BlockMxfp4 { e: 127, qs };
        let mut out = [f32::NAN; 32];
        dequantize_mxfp4(&[b], &mut out);
        assert_eq!((out[0], out[16], out[19]), (6.0, -6.0, -0.5));
        assert_eq!(out[3].to_bits(), 0f32.to_bits(), "code 8 is +0, as ggml's int8 0 makes it");
        assert_eq!(out[1], 0.0);
    }

    #[test]
    fn quantization_rounds_to_the_nearest_code() {
        let x: [f32; 32] = std::array::from_fn(|i| (i as f32 - 15.5) * 0.37);
        let b = quantize_mxfp4(&x);
        // amax 5.735: ⌊log2⌋ = 2, so e = 127 and the half scale 0.5 (values up to 6).
        assert_eq!(b.e, 127);
        let mut out = [0f32; 32];
        dequantize_mxfp4(&[b], &mut out);
        for (v, q) in x.iter().zip(&out) {
            let nearest = KVALUES.iter().map(|&k| (0.5 * f32::from(k) - v).abs()).fold(f32::INFINITY, f32::min);
            assert_eq!((q - v).abs(), nearest, "{v} became {q}");
        }
        assert_eq!(quantize_mxfp4(&[0.0; 32]).e, 0);
    }

    #[test]
    fn the_largest_scales_overflow_as_the_reference_does() {
        let b = BlockMxfp4 { e: 255, qs: [0x17; 16] };
        let mut out = [0f32; 32];
        dequantize_mxfp4(&[b], &mut out);
        assert_eq!(out[0], f32::INFINITY, "12 · 2^127 is past f32's range");
        assert_eq!(out[16], 2f32.powi(127), "1 · 2^127");
    }
}
