//! On-disk layouts of the quantized block types ember computes with, and their scalar dequantization.
//!
//! Layouts follow ggml (`ggml-common.h`: `block_q4_0`, `block_q4_1`, `block_q5_0`, `block_q5_1`, `block_q8_0`). A
//! block covers 32 consecutive elements of a row. In the 4- and 5-bit types, byte `j` of `qs` holds element `j`'s
//! four low bits in its low nibble and element `j + 16`'s in its high nibble. The dequantization functions here
//! (and in `kquants`) equal the `gguf` Python package's bit for bit; they are the permanent scalar reference that
//! every kernel is tested against.

use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};

/// Elements per block of every 32-wide quantized type.
pub const QK: usize = 32;

/// 4-bit symmetric: `x = d * (q - 8)`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

/// 4-bit with a minimum: `x = d * q + m`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}

/// 5-bit symmetric: `x = d * (q - 16)`, the low four bits as in Q4_0, the fifth in `qh`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: f16,
    /// Bit `k` of this little-endian u32 is element `k`'s fifth bit.
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// 5-bit with a minimum: `x = d * q + m`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// The 32 five-bit values (0..=31) of a Q5_0 / Q5_1 block in element order.
#[inline(always)]
pub fn five_bit_values(qs: &[u8; QK / 2], qh: &[u8; 4]) -> [u8; QK] {
    let high = u32::from_le_bytes(*qh);
    std::array::from_fn(|k| {
        let low = if k < QK / 2 { qs[k] & 0x0f } else { qs[k - QK / 2] >> 4 };
        low | ((((high >> k) & 1) as u8) << 4)
    })
}

/// 8-bit symmetric: `x = d * q`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}

// The layouts must match ggml byte for byte: these sizes are what GgmlType::block_bytes promises.
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::align_of::<BlockQ4_1>() == 2);

/// Dequantizes Q4_0 blocks into `out` (`out.len() == blocks.len() * 32`).
pub fn dequantize_q4_0(blocks: &[BlockQ4_0], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK, "output length must be 32 per block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            o[j] = d * ((q & 0x0f) as i32 - 8) as f32;
            o[j + QK / 2] = d * ((q >> 4) as i32 - 8) as f32;
        }
    }
}

/// Dequantizes Q4_1 blocks into `out` (`out.len() == blocks.len() * 32`).
pub fn dequantize_q4_1(blocks: &[BlockQ4_1], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK, "output length must be 32 per block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (j, &q) in b.qs.iter().enumerate() {
            o[j] = d * (q & 0x0f) as f32 + m;
            o[j + QK / 2] = d * (q >> 4) as f32 + m;
        }
    }
}

/// Dequantizes Q5_0 blocks into `out` (`out.len() == blocks.len() * 32`).
pub fn dequantize_q5_0(blocks: &[BlockQ5_0], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK, "output length must be 32 per block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (x, &q) in o.iter_mut().zip(&five_bit_values(&b.qs, &b.qh)) {
            *x = d * (i32::from(q) - 16) as f32;
        }
    }
}

/// Dequantizes Q5_1 blocks into `out` (`out.len() == blocks.len() * 32`).
pub fn dequantize_q5_1(blocks: &[BlockQ5_1], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK, "output length must be 32 per block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (x, &q) in o.iter_mut().zip(&five_bit_values(&b.qs, &b.qh)) {
            *x = d * f32::from(q) + m;
        }
    }
}

/// Dequantizes Q8_0 blocks into `out` (`out.len() == blocks.len() * 32`).
pub fn dequantize_q8_0(blocks: &[BlockQ8_0], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK, "output length must be 32 per block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (x, &q) in o.iter_mut().zip(b.qs.iter()) {
            *x = d * q as f32;
        }
    }
}

/// Converts f16 values to f32.
pub fn dequantize_f16(values: &[f16], out: &mut [f32]) {
    assert_eq!(out.len(), values.len());
    for (o, v) in out.iter_mut().zip(values) {
        *o = v.to_f32();
    }
}

/// Converts bf16 values to f32.
pub fn dequantize_bf16(values: &[bf16], out: &mut [f32]) {
    assert_eq!(out.len(), values.len());
    for (o, v) in out.iter_mut().zip(values) {
        *o = v.to_f32();
    }
}

/// Quantizes 32 values to Q4_1 (the reference rounding: `m` = block minimum, `d` = range / 15, nearest level).
pub fn quantize_q4_1(x: &[f32; QK]) -> BlockQ4_1 {
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let d = (max - min) / 15.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    let level = |v: f32| ((v - min) * inv).round().clamp(0.0, 15.0) as u8;
    let mut qs = [0u8; QK / 2];
    for (j, q) in qs.iter_mut().enumerate() {
        *q = level(x[j]) | (level(x[j + QK / 2]) << 4);
    }
    BlockQ4_1 { d: f16::from_f32(d), m: f16::from_f32(min), qs }
}

/// Quantizes 32 values to Q8_0 (`d` = max |x| / 127, nearest level).
pub fn quantize_q8_0(x: &[f32; QK]) -> BlockQ8_0 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * inv).round().clamp(-127.0, 127.0) as i8;
    }
    BlockQ8_0 { d: f16::from_f32(d), qs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizers_round_trip_within_half_a_step() {
        let x: [f32; 32] = std::array::from_fn(|i| ((i * 37 % 32) as f32 - 13.0) * 0.1);
        let mut out = [0f32; 32];
        let q41 = quantize_q4_1(&x);
        dequantize_q4_1(&[q41], &mut out);
        let step = q41.d.to_f32();
        // Half a level, plus the error of storing d and m as f16.
        x.iter().zip(&out).for_each(|(a, b)| assert!((a - b).abs() <= 0.5 * step + 0.01, "{a} vs {b}"));
        let q80 = quantize_q8_0(&x);
        dequantize_q8_0(&[q80], &mut out);
        let step = q80.d.to_f32();
        x.iter().zip(&out).for_each(|(a, b)| assert!((a - b).abs() <= 0.5 * step + 1e-3, "{a} vs {b}"));
    }

    #[test]
    fn q4_1_uses_low_nibbles_first() {
        let mut qs = [0u8; 16];
        qs[0] = 0x3a; // element 0 = 10, element 16 = 3
        let b = BlockQ4_1 { d: f16::from_f32(0.5), m: f16::from_f32(-1.0), qs };
        let mut out = [0f32; 32];
        dequantize_q4_1(&[b], &mut out);
        assert_eq!(out[0], 4.0);
        assert_eq!(out[16], 0.5);
        assert_eq!(out[1], -1.0);
    }

    #[test]
    fn q4_0_is_centred_on_eight() {
        let b = BlockQ4_0 { d: f16::from_f32(2.0), qs: [0x8f; 16] };
        let mut out = [0f32; 32];
        dequantize_q4_0(&[b], &mut out);
        assert_eq!(out[0], 14.0);
        assert_eq!(out[16], 0.0);
    }

    #[test]
    fn q8_0_scales_signed_values() {
        let mut qs = [0i8; 32];
        qs[5] = -128;
        qs[31] = 127;
        let b = BlockQ8_0 { d: f16::from_f32(0.25), qs };
        let mut out = [0f32; 32];
        dequantize_q8_0(&[b], &mut out);
        assert_eq!(out[5], -32.0);
        assert_eq!(out[31], 31.75);
    }
}
