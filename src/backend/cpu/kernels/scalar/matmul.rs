//! Scalar reference matmuls: one output at a time, blocks in order, one f32 accumulator per output.

use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QK};

/// Weight `j` (in activation order) of a 4-bit block: byte `j` holds element `j` in its low nibble and element
/// `j + 16` in its high nibble (`ggml-common.h`).
fn nibble(qs: &[u8; QK / 2], j: usize) -> i32 {
    i32::from(if j < QK / 2 { qs[j] & 0x0f } else { qs[j - QK / 2] >> 4 })
}

/// `Σ_j (qw_j − 8) · qa_j`: Q4_0's offset applied exactly, in integers (equal to `Σ qw·qa − 8·Σ qa`, the
/// `− 8·dw·sa` term of the documented formula before scaling).
fn dot_block_q4_0(w: &BlockQ4_0, a: &BlockQ8A) -> f32 {
    let isum: i32 = (0..QK).map(|j| (nibble(&w.qs, j) - 8) * i32::from(a.qs[j])).sum();
    w.d.to_f32() * a.d * isum as f32
}

fn dot_block_q4_1(w: &BlockQ4_1, a: &BlockQ8A) -> f32 {
    let isum: i32 = (0..QK).map(|j| nibble(&w.qs, j) * i32::from(a.qs[j])).sum();
    w.d.to_f32() * a.d * isum as f32 + w.m.to_f32() * a.s
}

fn dot_block_q8_0(w: &BlockQ8_0, a: &BlockQ8A) -> f32 {
    let isum: i32 = w.qs.iter().zip(&a.qs).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum();
    w.d.to_f32() * a.d * isum as f32
}

/// F32 weights against dequantized activations: `da · Σ_j w_j · qa_j` per block.
fn dot_block_f32(w: &[f32; QK], a: &BlockQ8A) -> f32 {
    let sum: f32 = w.iter().zip(&a.qs).map(|(&x, &q)| x * f32::from(q)).sum();
    a.d * sum
}

/// Runs `dot_block` over the blocks of every (column, row) pair of `out` in order, summing in one f32.
fn for_each_output<W, A>(
    weights: &[W],
    blocks_per_row: usize,
    act: &[A],
    n_cols: usize,
    out: &mut OutRows,
    dot_block: impl Fn(&W, &A) -> f32,
) {
    for c in 0..n_cols {
        let col = &act[c * blocks_per_row..][..blocks_per_row];
        for r in out.rows() {
            let row = &weights[r * blocks_per_row..][..blocks_per_row];
            let sum = row.iter().zip(col).fold(0f32, |sum, (w, a)| sum + dot_block(w, a));
            out.set(c, r, sum);
        }
    }
}

/// The scalar `Kernels::matmul_q8` (arguments checked by the caller). The SIMD paths use it for F32 weights.
pub(in crate::backend::cpu::kernels) fn matmul_q8(
    w: &WeightMatrix,
    act: &[BlockQ8A],
    n_cols: usize,
    out: &mut OutRows,
) {
    let n = w.blocks_per_row();
    match w.data() {
        WeightData::Q4_0(b) => for_each_output(b, n, act, n_cols, out, dot_block_q4_0),
        WeightData::Q4_1(b) => for_each_output(b, n, act, n_cols, out, dot_block_q4_1),
        WeightData::Q8_0(b) => for_each_output(b, n, act, n_cols, out, dot_block_q8_0),
        WeightData::F32(v) => for_each_output(v.as_chunks::<QK>().0, n, act, n_cols, out, dot_block_f32),
    }
}

/// Dequantizes one block to 32 floats in activation order, with the formulas of `gguf::blocks`.
trait DequantizeBlock {
    fn dequantize(&self) -> [f32; QK];
}

impl DequantizeBlock for BlockQ4_0 {
    fn dequantize(&self) -> [f32; QK] {
        let d = self.d.to_f32();
        std::array::from_fn(|j| d * (nibble(&self.qs, j) - 8) as f32)
    }
}

impl DequantizeBlock for BlockQ4_1 {
    fn dequantize(&self) -> [f32; QK] {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        std::array::from_fn(|j| d * nibble(&self.qs, j) as f32 + m)
    }
}

impl DequantizeBlock for BlockQ8_0 {
    fn dequantize(&self) -> [f32; QK] {
        let d = self.d.to_f32();
        self.qs.map(|q| d * f32::from(q))
    }
}

impl DequantizeBlock for [f32; QK] {
    fn dequantize(&self) -> [f32; QK] {
        *self
    }
}

fn dot_block_dequantized<W: DequantizeBlock>(w: &W, a: &[f32; QK]) -> f32 {
    w.dequantize().iter().zip(a).map(|(&x, &y)| x * y).sum()
}

/// The scalar `Kernels::matmul_f32` (arguments checked by the caller): per block an f32 dot in element order,
/// the block results summed in order.
pub(in crate::backend::cpu::kernels) fn matmul_f32(w: &WeightMatrix, act: &[f32], n_cols: usize, out: &mut OutRows) {
    let n = w.blocks_per_row();
    let act = act.as_chunks::<QK>().0;
    match w.data() {
        WeightData::Q4_0(b) => for_each_output(b, n, act, n_cols, out, dot_block_dequantized),
        WeightData::Q4_1(b) => for_each_output(b, n, act, n_cols, out, dot_block_dequantized),
        WeightData::Q8_0(b) => for_each_output(b, n, act, n_cols, out, dot_block_dequantized),
        WeightData::F32(v) => for_each_output(v.as_chunks::<QK>().0, n, act, n_cols, out, dot_block_dequantized),
    }
}
