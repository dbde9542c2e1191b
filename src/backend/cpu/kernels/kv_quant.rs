//! The 8-bit and 4-bit KV cache blocks (ggml's `q8_0` and `q4_0`, as llama.cpp's `-ctk`/`-ctv` store them): 32
//! elements with one f16 scale, `x ≈ d · v`. Keys and values are quantized once, when a position is stored, with
//! ggml's reference rounding (so a cache holds what llama.cpp's would for the same rows), and read by the
//! attention kernels `Kernels::attention_scores_q8_0` / `_q4_0` (keys against queries quantized to
//! [`super::BlockQ8A`], integer dot products per block) and `Kernels::attention_values_q8_0` / `_q4_0`.

use bytemuck::Pod;

use crate::model::gguf::blocks::{BlockQ4_0, BlockQ8_0, QK};

/// A block of 32 cache elements with one scale: element `j` is `scale() · value(j)`.
pub trait KvBlock: Pod + Send + Sync {
    /// The scale, as f32 (exact: it is stored as f16).
    fn scale(&self) -> f32;
    /// Element `j`'s integer (`-127..=127` for q8_0, `-8..=7` for q4_0).
    fn value(&self, j: usize) -> i8;
    /// Quantizes 32 elements into `self`, as ggml's reference quantization of the type does.
    fn quantize(&mut self, x: &[f32; QK]);
}

impl KvBlock for BlockQ8_0 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }

    fn value(&self, j: usize) -> i8 {
        self.qs[j]
    }

    /// `d = max |x| / 127`, `v = round(x / d)` (half away from zero, `roundf`), `d` stored as f16.
    fn quantize(&mut self, x: &[f32; QK]) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        self.d = half::f16::from_f32(d);
        for (q, &v) in self.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
    }
}

impl KvBlock for BlockQ4_0 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }

    /// Elements 0..16 are the low nibbles of the 16 bytes, 16..32 the high ones, each stored as `v + 8`.
    fn value(&self, j: usize) -> i8 {
        let byte = self.qs[j % 16];
        let nibble = if j < 16 { byte & 0x0F } else { byte >> 4 };
        nibble as i8 - 8
    }

    /// `d = m / −8` where `m` is the element of largest magnitude (its sign kept), `v = min(15, trunc(x/d + 8.5))
    /// − 8`, `d` stored as f16.
    fn quantize(&mut self, x: &[f32; QK]) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if amax < v.abs() {
                (amax, max) = (v.abs(), v);
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        self.d = half::f16::from_f32(d);
        let code = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
        for j in 0..16 {
            self.qs[j] = code(x[j]) | (code(x[16 + j]) << 4);
        }
    }
}

/// Quantizes a row (a multiple of 32 elements) into `out`.
pub fn quantize_kv_row<B: KvBlock>(x: &[f32], out: &mut [B]) {
    assert_eq!(x.len(), out.len() * QK, "quantize_kv_row: 32 elements per block");
    for (chunk, block) in x.as_chunks::<QK>().0.iter().zip(out) {
        block.quantize(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::dequantize::dequantize as decode;
    use crate::model::gguf::GgmlType;

    /// Dequantizes through the file reader's own decoder of the type (checked against the `gguf` package).
    fn dequantize<B: KvBlock>(ty: GgmlType, blocks: &[B]) -> Vec<f32> {
        let mut out = vec![0f32; blocks.len() * QK];
        decode(ty, bytemuck::cast_slice(blocks), &mut out).expect("a whole number of blocks");
        out
    }

    fn row() -> Vec<f32> {
        (0..64).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.173).collect()
    }

    #[test]
    fn blocks_round_trip_within_half_a_step_and_value_matches_the_decoder() {
        let x = row();
        let mut q8 = vec![bytemuck::Zeroable::zeroed(); 2];
        quantize_kv_row::<BlockQ8_0>(&x, &mut q8);
        let mut q4 = vec![bytemuck::Zeroable::zeroed(); 2];
        quantize_kv_row::<BlockQ4_0>(&x, &mut q4);
        for (ty, back, blocks_scale, values) in [
            (
                GgmlType::Q8_0,
                dequantize(GgmlType::Q8_0, &q8),
                q8.iter().map(KvBlock::scale).collect::<Vec<_>>(),
                (0..64).map(|j| q8[j / 32].value(j % 32)).collect::<Vec<_>>(),
            ),
            (
                GgmlType::Q4_0,
                dequantize(GgmlType::Q4_0, &q4),
                q4.iter().map(KvBlock::scale).collect(),
                (0..64).map(|j| q4[j / 32].value(j % 32)).collect(),
            ),
        ] {
            for j in 0..64 {
                let d = blocks_scale[j / 32];
                assert_eq!(back[j], d * f32::from(values[j]), "{ty:?} element {j}: value() disagrees with the decoder");
                // q4_0's codes reach +7 only: an element of the block's largest magnitude with the other sign is one
                // step short (ggml's rounding, kept).
                let steps = if ty == GgmlType::Q4_0 { 1.0 } else { 0.5 };
                assert!(
                    (back[j] - x[j]).abs() <= d.abs() * steps * 1.001,
                    "{ty:?} element {j}: {} for {}",
                    back[j],
                    x[j]
                );
            }
        }
        // The extremes: q8_0 maps the largest magnitude to ±127, q4_0 to −8 (its sign taken by d).
        assert_eq!(q8[0].qs.iter().map(|q| q.unsigned_abs()).max(), Some(127));
        assert!((0..32).any(|j| q4[0].value(j) == -8));
    }
}
