//! The device layout of quantized weight matrices: each ggml block split into its quants and its scales.
//!
//! A Q4_1 block is 20 bytes and a Q8_0 block 34, so blocks laid end to end leave most of them misaligned for the
//! 4- and 16-byte loads a GPU reads memory with. Split, both halves align: the quants of a block are 4 (4-bit
//! types) or 8 (Q8_0) whole 32-bit words, exactly the block's `qs` bytes read little-endian, and its scales one
//! 32-bit word. The weights stay quantized; only where their bytes sit changes. `kernels/common.cuh` reads this
//! layout (`slice_dequant`); the tests below hold a Rust copy of that reading to ggml's dequantization.

use half::f16;

use crate::backend::cpu::kernels::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::QK;

/// The quantized block types the kernels read, numbered as `TYPE_*` in `common.cuh`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantType {
    Q4_0 = 0,
    Q4_1 = 1,
    Q8_0 = 2,
}

impl QuantType {
    pub const ALL: [QuantType; 3] = [QuantType::Q4_0, QuantType::Q4_1, QuantType::Q8_0];

    /// 32-bit words of quants per block.
    pub fn quant_words(self) -> usize {
        match self {
            QuantType::Q4_0 | QuantType::Q4_1 => 4,
            QuantType::Q8_0 => 8,
        }
    }

    /// The suffix of this type's kernels' names (`project_small_q4_1`).
    pub fn kernel_suffix(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "q4_0",
            QuantType::Q4_1 => "q4_1",
            QuantType::Q8_0 => "q8_0",
        }
    }
}

/// A weight matrix in the device layout, on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedMatrix {
    pub dtype: QuantType,
    pub rows: usize,
    /// Weights per row, a multiple of 32.
    pub cols: usize,
    /// `[rows][cols / 32][dtype.quant_words()]`: each block's `qs` bytes as little-endian words.
    pub quants: Vec<u32>,
    /// `[rows][cols / 32]`: f16 bits of `d` in the low half, of `m` (Q4_1; 0 otherwise) in the high half.
    pub scales: Vec<u32>,
}

/// Packs `matrix`; `None` for a type the kernels do not read (F32).
pub fn pack(matrix: &WeightMatrix<'_>) -> Option<PackedMatrix> {
    let (rows, cols) = (matrix.n_rows(), matrix.row_len());
    let n_blocks = rows * cols / QK;
    let words = |qs: &[u8], out: &mut Vec<u32>| {
        out.extend(qs.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
    };
    let scale = |d: f16, m: f16| u32::from(d.to_bits()) | (u32::from(m.to_bits()) << 16);
    let (dtype, mut quants, mut scales) = match matrix.data() {
        WeightData::Q4_0(_) => (QuantType::Q4_0, Vec::new(), Vec::new()),
        WeightData::Q4_1(_) => (QuantType::Q4_1, Vec::new(), Vec::new()),
        WeightData::Q8_0(_) => (QuantType::Q8_0, Vec::new(), Vec::new()),
        _ => return None,
    };
    quants.reserve(n_blocks * dtype.quant_words());
    scales.reserve(n_blocks);
    match matrix.data() {
        WeightData::Q4_0(blocks) => blocks.iter().for_each(|b| {
            words(&b.qs, &mut quants);
            scales.push(scale(b.d, f16::ZERO));
        }),
        WeightData::Q4_1(blocks) => blocks.iter().for_each(|b| {
            words(&b.qs, &mut quants);
            scales.push(scale(b.d, b.m));
        }),
        WeightData::Q8_0(blocks) => blocks.iter().for_each(|b| {
            words(bytemuck::cast_slice(&b.qs), &mut quants);
            scales.push(scale(b.d, f16::ZERO));
        }),
        _ => return None,
    }
    Some(PackedMatrix { dtype, rows, cols, quants, scales })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::blocks::{
        dequantize_q4_0, dequantize_q4_1, dequantize_q8_0, quantize_q4_1, quantize_q8_0, BlockQ4_0,
    };

    /// `slice_offsets` of common.cuh: where slice `s`'s two runs of 4 elements start in the block.
    fn slice_offsets(dtype: QuantType, s: usize) -> (usize, usize) {
        match dtype {
            QuantType::Q8_0 => (8 * s, 8 * s + 4),
            QuantType::Q4_0 | QuantType::Q4_1 => (4 * s, 4 * s + 16),
        }
    }

    /// `slice_dequant` of common.cuh, statement for statement: slice `s` of block `block` of `m`.
    fn slice_dequant(m: &PackedMatrix, block: usize, s: usize) -> ([f32; 4], [f32; 4]) {
        let qb = &m.quants[block * m.dtype.quant_words()..][..m.dtype.quant_words()];
        let scale = m.scales[block];
        let d = f16::from_bits((scale & 0xffff) as u16).to_f32();
        let (mut a, mut b) = ([0f32; 4], [0f32; 4]);
        match m.dtype {
            QuantType::Q8_0 => {
                let (w0, w1) = (qb[2 * s], qb[2 * s + 1]);
                for i in 0..4 {
                    a[i] = d * f32::from(((w0 >> (8 * i)) & 0xff) as u8 as i8);
                    b[i] = d * f32::from(((w1 >> (8 * i)) & 0xff) as u8 as i8);
                }
            }
            QuantType::Q4_1 => {
                let (w, mn) = (qb[s], f16::from_bits((scale >> 16) as u16).to_f32());
                for i in 0..4 {
                    a[i] = d * ((w >> (8 * i)) & 0xf) as f32 + mn;
                    b[i] = d * ((w >> (8 * i + 4)) & 0xf) as f32 + mn;
                }
            }
            QuantType::Q4_0 => {
                let w = qb[s];
                for i in 0..4 {
                    a[i] = d * (((w >> (8 * i)) & 0xf) as i32 - 8) as f32;
                    b[i] = d * (((w >> (8 * i + 4)) & 0xf) as i32 - 8) as f32;
                }
            }
        }
        (a, b)
    }

    /// Every element of `m` as the kernels read it, row after row.
    fn kernel_view(m: &PackedMatrix) -> Vec<f32> {
        let mut out = vec![f32::NAN; m.rows * m.cols];
        for block in 0..m.rows * m.cols / QK {
            for s in 0..4 {
                let (first, second) = slice_offsets(m.dtype, s);
                let (a, b) = slice_dequant(m, block, s);
                for i in 0..4 {
                    out[block * QK + first + i] = a[i];
                    out[block * QK + second + i] = b[i];
                }
            }
        }
        out
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    #[test]
    fn the_kernels_read_q4_1_as_ggml_dequantizes_it() {
        let (rows, cols) = (3, 96);
        let x = values(rows * cols, 1);
        let blocks: Vec<_> = x.chunks_exact(QK).map(|c| quantize_q4_1(c.try_into().unwrap())).collect();
        let matrix = WeightMatrix::new(WeightData::Q4_1(&blocks), rows, cols).unwrap();
        let packed = pack(&matrix).unwrap();
        assert_eq!((packed.quants.len(), packed.scales.len()), (rows * 3 * 4, rows * 3));
        let mut expected = vec![0f32; rows * cols];
        dequantize_q4_1(&blocks, &mut expected);
        assert_eq!(kernel_view(&packed), expected);
    }

    #[test]
    fn the_kernels_read_q8_0_as_ggml_dequantizes_it() {
        let (rows, cols) = (2, 64);
        let x = values(rows * cols, 2);
        let blocks: Vec<_> = x.chunks_exact(QK).map(|c| quantize_q8_0(c.try_into().unwrap())).collect();
        let matrix = WeightMatrix::new(WeightData::Q8_0(&blocks), rows, cols).unwrap();
        let packed = pack(&matrix).unwrap();
        assert_eq!(packed.quants.len(), rows * 2 * 8);
        let mut expected = vec![0f32; rows * cols];
        dequantize_q8_0(&blocks, &mut expected);
        assert_eq!(kernel_view(&packed), expected);
    }

    #[test]
    fn the_kernels_read_q4_0_as_ggml_dequantizes_it() {
        // Every nibble value in both halves of each byte, with scales of both signs.
        let blocks: Vec<BlockQ4_0> = (0..4)
            .map(|b| BlockQ4_0 {
                d: f16::from_f32(if b % 2 == 0 { 0.25 } else { -1.5 }),
                qs: std::array::from_fn(|j| ((j + b) % 16) as u8 | ((((15 - j) + 3 * b) % 16) as u8) << 4),
            })
            .collect();
        let matrix = WeightMatrix::new(WeightData::Q4_0(&blocks), 2, 64).unwrap();
        let packed = pack(&matrix).unwrap();
        let mut expected = vec![0f32; 128];
        dequantize_q4_0(&blocks, &mut expected);
        assert_eq!(kernel_view(&packed), expected);
    }

    #[test]
    fn f32_weights_are_not_packed() {
        let data = vec![0f32; 64];
        assert!(pack(&WeightMatrix::new(WeightData::F32(&data), 2, 32).unwrap()).is_none());
    }
}
