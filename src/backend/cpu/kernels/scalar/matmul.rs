//! Scalar matmuls over weights in the file's layout: one output at a time, blocks in order, exactly the arithmetic
//! of `numerics` that the SIMD paths reproduce. (The quantized types meet 8-bit activations packed: `packed`.)
//!
//! Precise (`matmul_f32`): each block dequantized to floats, element `8i + j` fused-multiply-added with its
//! activation into lane `j`, then `numerics::sum_lanes`. Float weights (F32, F16, BF16) in the quantized matmul
//! (`matmul_q8`) dot each block with the dequantized activations in element order (`dot_block_f32`), the same code
//! on every path.
//!
//! No closures or iterator sums in the per-block code: the path is compiled a second time for FMA and AVX2 (see
//! `scalar`), and a closure the compiler does not inline would be compiled without them, one call per element.

use crate::backend::cpu::kernels::numerics::{sum_lanes, Lanes, LANES};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
use half::{bf16, f16};

use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK};
use crate::model::gguf::coded::{dequantize_coded, CodedBlock};
use crate::model::gguf::iq4::{BlockIq4Nl, BlockIq4Xs};
use crate::model::gguf::kquants::{dequantize_k, SuperBlock, GROUPS, QK_K};
use crate::model::gguf::mxfp4::BlockMxfp4;

/// The 32 weights of a 4-bit block in activation order, minus `offset`: byte `k` holds element `k` in its low
/// nibble and element `k + 16` in its high nibble (`ggml-common.h`).
#[inline(always)]
fn nibbles(qs: &[u8; QK / 2], offset: i32) -> [i32; QK] {
    let mut w = [0i32; QK];
    for k in 0..QK / 2 {
        w[k] = i32::from(qs[k] & 0x0f) - offset;
        w[k + QK / 2] = i32::from(qs[k] >> 4) - offset;
    }
    w
}

/// The 32 values of a float weight block as f32.
trait FloatBlock {
    fn values(&self) -> [f32; QK];
}

impl FloatBlock for [f32; QK] {
    #[inline(always)]
    fn values(&self) -> [f32; QK] {
        *self
    }
}

impl FloatBlock for [f16; QK] {
    #[inline(always)]
    fn values(&self) -> [f32; QK] {
        let mut v = [0f32; QK];
        for k in 0..QK {
            v[k] = self[k].to_f32();
        }
        v
    }
}

impl FloatBlock for [bf16; QK] {
    #[inline(always)]
    fn values(&self) -> [f32; QK] {
        let mut v = [0f32; QK];
        for k in 0..QK {
            v[k] = self[k].to_f32();
        }
        v
    }
}

/// Float weights against dequantized activations: `da · Σ_j w_j · qa_j` per block in element order, the blocks
/// summed in order (every path runs this one; the models we know keep only norms in float).
#[inline(always)]
fn dot_block_f32(w: &[f32; QK], a: &BlockQ8A) -> f32 {
    let sum: f32 = w.iter().zip(&a.qs).map(|(&x, &q)| x * f32::from(q)).sum();
    a.d * sum
}

/// One quantized output of a float row.
#[inline(always)]
fn output_q8_float<W: FloatBlock>(row: &[W], col: &[BlockQ8A]) -> f32 {
    row.iter().zip(col).fold(0f32, |sum, (w, a)| sum + dot_block_f32(&w.values(), a))
}

/// Calls `output(row, col)` for every (column, row) pair of `out` and writes its result; a row holds `w_per_row`
/// weight items, a column `a_per_row` activation items.
#[inline(always)]
fn for_each_output<W, A>(
    weights: &[W],
    (w_per_row, a_per_row): (usize, usize),
    act: &[A],
    n_cols: usize,
    out: &mut OutRows,
    output: impl Fn(&[W], &[A]) -> f32,
) {
    for c in 0..n_cols {
        let col = &act[c * a_per_row..][..a_per_row];
        for r in out.rows() {
            let row = &weights[r * w_per_row..][..w_per_row];
            out.set(c, r, output(row, col));
        }
    }
}

/// The `Kernels::matmul_q8` of every path (arguments checked by the caller): float weights only, the quantized
/// types being packed (`packed::scalar`).
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn matmul_q8(
    w: &WeightMatrix,
    act: &[BlockQ8A],
    n_cols: usize,
    out: &mut OutRows,
) {
    let n = w.blocks_per_row();
    let blocks = (n, n);
    match w.data() {
        WeightData::F16(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_q8_float),
        WeightData::Bf16(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_q8_float),
        WeightData::F32(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_q8_float),
        other => unreachable!("{} weights are packed for the quantized matmul", other.type_name()),
    }
}

/// Dequantizes one block to 32 floats in activation order, as the SIMD paths do: `d · (q − 8)`, `d · q + m`
/// (fused), `d · q`.
trait DequantizeBlock {
    fn dequantize(&self) -> [f32; QK];
}

impl DequantizeBlock for BlockQ4_0 {
    #[inline(always)]
    fn dequantize(&self) -> [f32; QK] {
        let (d, q) = (self.d.to_f32(), nibbles(&self.qs, 8));
        let mut w = [0f32; QK];
        for k in 0..QK {
            w[k] = d * q[k] as f32;
        }
        w
    }
}

impl DequantizeBlock for BlockQ4_1 {
    #[inline(always)]
    fn dequantize(&self) -> [f32; QK] {
        let (d, m, q) = (self.d.to_f32(), self.m.to_f32(), nibbles(&self.qs, 0));
        let mut w = [0f32; QK];
        for k in 0..QK {
            w[k] = d.mul_add(q[k] as f32, m);
        }
        w
    }
}

impl DequantizeBlock for BlockQ8_0 {
    #[inline(always)]
    fn dequantize(&self) -> [f32; QK] {
        let d = self.d.to_f32();
        let mut w = [0f32; QK];
        for (wk, &q) in w.iter_mut().zip(&self.qs) {
            *wk = d * f32::from(q);
        }
        w
    }
}

impl DequantizeBlock for BlockQ5_0 {
    #[inline(always)]
    fn dequantize(&self) -> [f32; QK] {
        let mut w = [0f32; QK];
        crate::model::gguf::blocks::dequantize_q5_0(std::slice::from_ref(self), &mut w);
        w
    }
}

impl DequantizeBlock for BlockQ5_1 {
    #[inline(always)]
    fn dequantize(&self) -> [f32; QK] {
        let mut w = [0f32; QK];
        crate::model::gguf::blocks::dequantize_q5_1(std::slice::from_ref(self), &mut w);
        w
    }
}

impl DequantizeBlock for BlockMxfp4 {
    #[inline(always)]
    fn dequantize(&self) -> [f32; QK] {
        let mut w = [0f32; QK];
        crate::model::gguf::mxfp4::dequantize_mxfp4(std::slice::from_ref(self), &mut w);
        w
    }
}

impl DequantizeBlock for BlockIq4Nl {
    #[inline(always)]
    fn dequantize(&self) -> [f32; QK] {
        let mut w = [0f32; QK];
        crate::model::gguf::iq4::dequantize_iq4_nl(std::slice::from_ref(self), &mut w);
        w
    }
}

impl<T: FloatBlock> DequantizeBlock for T {
    #[inline(always)]
    fn dequantize(&self) -> [f32; QK] {
        self.values()
    }
}

/// Adds `w · x` for one 32-element block, element `8i + j` into lane `j`.
#[inline(always)]
fn accumulate_f32(acc: &mut Lanes, w: &[f32; QK], x: &[f32; QK]) {
    for (wc, xc) in w.as_chunks::<LANES>().0.iter().zip(x.as_chunks::<LANES>().0) {
        for j in 0..LANES {
            acc[j] = wc[j].mul_add(xc[j], acc[j]);
        }
    }
}

/// One precise output: element `8i + j` of each block into lane `j`.
#[inline(always)]
fn output_f32<W: DequantizeBlock>(row: &[W], col: &[[f32; QK]]) -> f32 {
    let mut acc: Lanes = [0.0; LANES];
    for (w, x) in row.iter().zip(col) {
        accumulate_f32(&mut acc, &w.dequantize(), x);
    }
    sum_lanes(acc)
}

/// One precise output of a K-quant row: each super-block dequantized (as `kquants::dequantize_k`), then its eight
/// 32-element blocks as in `output_f32`.
#[inline(always)]
fn output_f32_k<B: SuperBlock>(row: &[B], col: &[[f32; QK]]) -> f32 {
    let mut acc: Lanes = [0.0; LANES];
    let mut w = [0f32; QK_K];
    for (b, x) in row.iter().zip(col.chunks_exact(GROUPS)) {
        dequantize_k(std::slice::from_ref(b), &mut w);
        for (wb, xb) in w.as_chunks::<QK>().0.iter().zip(x) {
            accumulate_f32(&mut acc, wb, xb);
        }
    }
    sum_lanes(acc)
}

/// One precise output of an IQ4_XS row: each super-block dequantized (as `iq4::dequantize_iq4_xs`), then its eight
/// 32-element blocks as in `output_f32`.
#[inline(always)]
fn output_f32_iq4_xs(row: &[BlockIq4Xs], col: &[[f32; QK]]) -> f32 {
    let mut acc: Lanes = [0.0; LANES];
    let mut w = [0f32; QK_K];
    for (b, x) in row.iter().zip(col.chunks_exact(GROUPS)) {
        crate::model::gguf::iq4::dequantize_iq4_xs(std::slice::from_ref(b), &mut w);
        for (wb, xb) in w.as_chunks::<QK>().0.iter().zip(x) {
            accumulate_f32(&mut acc, wb, xb);
        }
    }
    sum_lanes(acc)
}

/// One precise output of a coded row (`coded`): each super-block dequantized (as `coded::dequantize_coded`), then
/// its eight 32-element blocks as in `output_f32`.
#[inline(always)]
fn output_f32_coded<B: CodedBlock>(row: &[B], col: &[[f32; QK]]) -> f32 {
    let mut acc: Lanes = [0.0; LANES];
    let mut w = [0f32; QK_K];
    for (b, x) in row.iter().zip(col.chunks_exact(GROUPS)) {
        dequantize_coded(std::slice::from_ref(b), &mut w);
        for (wb, xb) in w.as_chunks::<QK>().0.iter().zip(x) {
            accumulate_f32(&mut acc, wb, xb);
        }
    }
    sum_lanes(acc)
}

/// The scalar `Kernels::matmul_f32` (arguments checked by the caller).
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn matmul_f32(w: &WeightMatrix, act: &[f32], n_cols: usize, out: &mut OutRows) {
    let n = w.blocks_per_row();
    let (blocks, supers) = ((n, n), (n / GROUPS, n));
    let act = act.as_chunks::<QK>().0;
    match w.data() {
        WeightData::Q4_0(b) => for_each_output(b, blocks, act, n_cols, out, output_f32),
        WeightData::Q4_1(b) => for_each_output(b, blocks, act, n_cols, out, output_f32),
        WeightData::Q5_0(b) => for_each_output(b, blocks, act, n_cols, out, output_f32),
        WeightData::Q5_1(b) => for_each_output(b, blocks, act, n_cols, out, output_f32),
        WeightData::Q8_0(b) => for_each_output(b, blocks, act, n_cols, out, output_f32),
        WeightData::Q2K(b) => for_each_output(b, supers, act, n_cols, out, output_f32_k),
        WeightData::Q3K(b) => for_each_output(b, supers, act, n_cols, out, output_f32_k),
        WeightData::Q4K(b) => for_each_output(b, supers, act, n_cols, out, output_f32_k),
        WeightData::Q5K(b) => for_each_output(b, supers, act, n_cols, out, output_f32_k),
        WeightData::Q6K(b) => for_each_output(b, supers, act, n_cols, out, output_f32_k),
        WeightData::Mxfp4(b) => for_each_output(b, blocks, act, n_cols, out, output_f32),
        WeightData::Iq4Nl(b) => for_each_output(b, blocks, act, n_cols, out, output_f32),
        WeightData::Iq4Xs(b) => for_each_output(b, supers, act, n_cols, out, output_f32_iq4_xs),
        WeightData::Iq3Xxs(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::Iq3S(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::Iq2Xxs(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::Iq2Xs(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::Iq2S(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::Iq1S(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::Iq1M(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::Tq1_0(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::Tq2_0(b) => for_each_output(b, supers, act, n_cols, out, output_f32_coded),
        WeightData::F16(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_f32),
        WeightData::Bf16(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_f32),
        WeightData::F32(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_f32),
    }
}
