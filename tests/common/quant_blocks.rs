//! Random, valid GGUF tensor data of every weight type ember computes with: random bytes with each f16 scale
//! field replaced by a finite value (MXFP4's exponent byte by the power of two nearest that value), for the
//! dequantization reference test and the kernel tests. Included with `#[path]`.
#![allow(dead_code)] // each includer uses some of the functions

use ember::model::gguf::GgmlType;
use half::{bf16, f16};

use crate::rng::Rng; // the includer declares `mod rng` (common/rng.rs)

/// Every weight type ember computes with.
pub const WEIGHT_TYPES: [GgmlType; 25] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Bf16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Mxfp4,
    GgmlType::Iq4Nl,
    GgmlType::Iq4Xs,
    GgmlType::Iq3Xxs,
    GgmlType::Iq3S,
    GgmlType::Iq2Xxs,
    GgmlType::Iq2Xs,
    GgmlType::Iq2S,
    GgmlType::Iq1S,
    GgmlType::Iq1M,
    GgmlType::Tq1_0,
    GgmlType::Tq2_0,
];

/// The types whose values are codes into a table of levels (`ember::model::gguf::coded`).
pub const CODED_TYPES: [GgmlType; 9] = [
    GgmlType::Iq3Xxs,
    GgmlType::Iq3S,
    GgmlType::Iq2Xxs,
    GgmlType::Iq2Xs,
    GgmlType::Iq2S,
    GgmlType::Iq1S,
    GgmlType::Iq1M,
    GgmlType::Tq1_0,
    GgmlType::Tq2_0,
];

/// The types whose values are codes into a codebook of unevenly spaced levels: the IQ4 types and the coded ones.
pub const CODEBOOK_TYPES: [GgmlType; 11] = {
    let mut types = [GgmlType::Iq4Nl; 11];
    types[1] = GgmlType::Iq4Xs;
    let mut i = 0;
    while i < CODED_TYPES.len() {
        types[2 + i] = CODED_TYPES[i];
        i += 1;
    }
    types
};

/// Byte offsets of the f16 scale fields in one block of `dtype` (`ggml-common.h`); empty for the float types.
fn scale_offsets(dtype: GgmlType) -> &'static [usize] {
    match dtype {
        GgmlType::Q4_0
        | GgmlType::Q5_0
        | GgmlType::Q8_0
        | GgmlType::Iq4Nl
        | GgmlType::Iq4Xs
        | GgmlType::Iq3Xxs
        | GgmlType::Iq3S
        | GgmlType::Iq2Xxs
        | GgmlType::Iq2Xs
        | GgmlType::Iq2S
        | GgmlType::Iq1S => &[0],
        GgmlType::Tq1_0 => &[52],
        GgmlType::Tq2_0 => &[64],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        GgmlType::Q6K => &[208],
        _ => &[],
    }
}

/// Any finite f16, subnormals and negatives included.
pub fn any_finite_f16(rng: &mut Rng) -> f16 {
    loop {
        let v = f16::from_bits(rng.next_u64() as u16);
        if v.is_finite() {
            return v;
        }
    }
}

/// `n_blocks` blocks of `dtype` (elements, for the float types): random bytes, scales from `scale`, float
/// elements finite (uniform in [−1, 1) with `realistic`, else any finite bit pattern).
pub fn random_blocks(
    dtype: GgmlType,
    n_blocks: usize,
    rng: &mut Rng,
    realistic: bool,
    scale: &mut dyn FnMut(&mut Rng) -> f16,
) -> Vec<u8> {
    let block_bytes = dtype.block_bytes() as usize;
    let mut bytes: Vec<u8> = (0..n_blocks * block_bytes).map(|_| rng.byte()).collect();
    match dtype {
        GgmlType::F32 => bytes.chunks_exact_mut(4).for_each(|c| {
            let v = if realistic { rng.uniform(-1.0, 1.0) } else { finite_f32(rng) };
            c.copy_from_slice(&v.to_le_bytes());
        }),
        GgmlType::F16 => bytes.chunks_exact_mut(2).for_each(|c| {
            let v = if realistic { f16::from_f32(rng.uniform(-1.0, 1.0)) } else { any_finite_f16(rng) };
            c.copy_from_slice(&v.to_le_bytes());
        }),
        GgmlType::Bf16 => bytes.chunks_exact_mut(2).for_each(|c| {
            let v = if realistic { bf16::from_f32(rng.uniform(-1.0, 1.0)) } else { finite_bf16(rng) };
            c.copy_from_slice(&v.to_le_bytes());
        }),
        GgmlType::Mxfp4 => {
            for block in bytes.chunks_exact_mut(block_bytes) {
                block[0] = e8m0_near(scale(rng).to_f32());
            }
        }
        GgmlType::Iq1M => {
            // The f16 `d` is spread over the top nibbles of the four u16 scale words (bytes 48..56).
            for block in bytes.chunks_exact_mut(block_bytes) {
                let d = scale(rng).to_bits();
                for i in 0..4 {
                    let at = 48 + 2 * i + 1;
                    block[at] = (block[at] & 0x0f) | ((((d >> (4 * i)) & 0x0f) as u8) << 4);
                }
            }
        }
        _ => {
            for block in bytes.chunks_exact_mut(block_bytes) {
                for &at in scale_offsets(dtype) {
                    block[at..at + 2].copy_from_slice(&scale(rng).to_le_bytes());
                }
            }
        }
    }
    bytes
}

/// The E8M0 byte whose MXFP4 half scale, `2^(e − 128)`, is the power of two nearest `|v|` in log scale (0 for 0).
pub fn e8m0_near(v: f32) -> u8 {
    if v == 0.0 {
        return 0;
    }
    (v.abs().log2().round() as i32 + 128).clamp(0, 255) as u8
}

fn finite_f32(rng: &mut Rng) -> f32 {
    loop {
        let v = f32::from_bits(rng.next_u64() as u32);
        if v.is_finite() {
            return v;
        }
    }
}

fn finite_bf16(rng: &mut Rng) -> bf16 {
    loop {
        let v = bf16::from_bits(rng.next_u64() as u16);
        if v.is_finite() {
            return v;
        }
    }
}
