//! Scalar matmuls: one output at a time, blocks in order, 8 lane accumulators per output, exactly the arithmetic
//! of `numerics` that the SIMD paths reproduce.
//!
//! Quantized (`matmul_q8`): for each block, lane `j` holds the exact integer dot of the block's elements
//! `4j..4j + 4` (activation order); the lane is converted to f32 (exact: |lane| ≤ 4·128·127) and fused-multiply-added
//! with the block's `dw · da` into accumulator lane `j`; Q4_1 and Q5_1 then add `mw · [sa, 0, …, 0]` with a second
//! fused multiply-add. The K-quants (`kquants`: 32-element groups of integers with a scale and minimum per 16) do
//! the same per group, with each lane's integer sum multiplied by its half's integer scale (exact) before the
//! conversion, and their minima as a second integer lane sum `min_h · Σ qa` times `−dmin · da` (see `output_q8_k`).
//! Precise (`matmul_f32`): each block dequantized to floats, element `8i + j` fused-multiply-added with its
//! activation into lane `j`. Both end with `numerics::sum_lanes`. Float weights (F32, F16, BF16) in the quantized
//! matmul dot each block with the dequantized activations in element order (`dot_block_f32`).
//!
//! No closures or iterator sums in the per-block code: the path is compiled a second time for FMA and AVX2 (see
//! `scalar`), and a closure the compiler does not inline would be compiled without them, one call per element.

use crate::backend::cpu::kernels::numerics::{sum_lanes, Lanes, LANES};
use crate::backend::cpu::kernels::out_rows::OutRows;
use crate::backend::cpu::kernels::q8a::BlockQ8A;
use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
use half::{bf16, f16};

use crate::model::gguf::blocks::{five_bit_values, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK};
use crate::model::gguf::kquants::{dequantize_k, SuperBlock, GROUPS, QK_K};

/// Integer lane sums of one weight block against one activation block: lane `j` is `Σ_{k=4j}^{4j+3} w_k · qa_k`.
type LaneSums = [i32; LANES];

/// `lane_j = Σ_{k=4j}^{4j+3} w_k · qa_k` for integer weights `w` in activation order.
#[inline(always)]
fn lane_sums(w: &[i32; QK], a: &BlockQ8A) -> LaneSums {
    let mut lanes = [0i32; LANES];
    for k in 0..QK {
        lanes[k / 4] += w[k] * i32::from(a.qs[k]);
    }
    lanes
}

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

/// What the quantized matmul needs of a weight block.
trait QuantBlock {
    /// The block's scale `dw`.
    fn scale(&self) -> f32;
    /// Q4_1's minimum `mw`.
    fn min(&self) -> Option<f32>;
    fn lane_sums(&self, a: &BlockQ8A) -> LaneSums;
}

impl QuantBlock for BlockQ4_0 {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    fn min(&self) -> Option<f32> {
        None
    }
    /// With Q4_0's offset applied exactly, in integers: `Σ (qw − 8) · qa`.
    #[inline(always)]
    fn lane_sums(&self, a: &BlockQ8A) -> LaneSums {
        lane_sums(&nibbles(&self.qs, 8), a)
    }
}

impl QuantBlock for BlockQ4_1 {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    fn min(&self) -> Option<f32> {
        Some(self.m.to_f32())
    }
    #[inline(always)]
    fn lane_sums(&self, a: &BlockQ8A) -> LaneSums {
        lane_sums(&nibbles(&self.qs, 0), a)
    }
}

impl QuantBlock for BlockQ8_0 {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    fn min(&self) -> Option<f32> {
        None
    }
    #[inline(always)]
    fn lane_sums(&self, a: &BlockQ8A) -> LaneSums {
        let mut w = [0i32; QK];
        for (wk, &q) in w.iter_mut().zip(&self.qs) {
            *wk = i32::from(q);
        }
        lane_sums(&w, a)
    }
}

/// The 32 weights of a 5-bit block in activation order, minus `offset`.
#[inline(always)]
fn five_bits(qs: &[u8; QK / 2], qh: &[u8; 4], offset: i32) -> [i32; QK] {
    let u = five_bit_values(qs, qh);
    let mut w = [0i32; QK];
    for k in 0..QK {
        w[k] = i32::from(u[k]) - offset;
    }
    w
}

impl QuantBlock for BlockQ5_0 {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    fn min(&self) -> Option<f32> {
        None
    }
    #[inline(always)]
    fn lane_sums(&self, a: &BlockQ8A) -> LaneSums {
        lane_sums(&five_bits(&self.qs, &self.qh, 16), a)
    }
}

impl QuantBlock for BlockQ5_1 {
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    fn min(&self) -> Option<f32> {
        Some(self.m.to_f32())
    }
    #[inline(always)]
    fn lane_sums(&self, a: &BlockQ8A) -> LaneSums {
        lane_sums(&five_bits(&self.qs, &self.qh, 0), a)
    }
}

/// Adds one block's terms to the accumulators.
#[inline(always)]
fn accumulate_q8<W: QuantBlock>(acc: &mut Lanes, w: &W, a: &BlockQ8A) {
    let lanes = w.lane_sums(a);
    let scale = w.scale() * a.d;
    for j in 0..LANES {
        acc[j] = (lanes[j] as f32).mul_add(scale, acc[j]);
    }
    if let Some(m) = w.min() {
        // `mw · sa` lands in lane 0; the other lanes add `mw · 0`, as the SIMD paths' vector `[sa, 0, …, 0]` does.
        let mut s: Lanes = [0.0; LANES];
        s[0] = a.s;
        for j in 0..LANES {
            acc[j] = m.mul_add(s[j], acc[j]);
        }
    }
}

/// Group `g` of a K-quant super-block against activation block `a`: lane `j` (elements `4j..4j + 4`, half
/// `h = j / 4`) adds `f32(Σ (u − OFFSET) · qa) · ((d · scale_h) · da)`, then with minima
/// `(f32(Σ qa) · da) · (−dmin · min_h)`, each one fused multiply-add. `d · scale_h` and `dmin · min_h` are exact
/// (an f16 times an integer of at most 8 bits), so per output each term rounds once in its product and once in its
/// FMA; the factors are ordered so that a SIMD path computes `d · scale_h` and `−dmin · min_h` once per row and
/// group, and `Σ qa · da` once per column and group, leaving one multiply and two FMAs per output.
#[inline(always)]
fn accumulate_group<B: SuperBlock>(acc: &mut Lanes, b: &B, g: usize, a: &BlockQ8A) {
    let group = b.group(g);
    let mut dots = [0i32; LANES];
    let mut sums = [0i32; LANES];
    for k in 0..QK {
        let q = i32::from(a.qs[k]);
        dots[k / 4] += (i32::from(group.u[k]) - B::OFFSET) * q;
        sums[k / 4] += q;
    }
    for j in 0..LANES {
        let scale = (b.d() * group.scales[j / 4] as f32) * a.d;
        acc[j] = (dots[j] as f32).mul_add(scale, acc[j]);
    }
    if B::HAS_MIN {
        for j in 0..LANES {
            let min = -b.dmin() * group.mins[j / 4] as f32;
            acc[j] = (sums[j] as f32 * a.d).mul_add(min, acc[j]);
        }
    }
}

/// One quantized output of a K-quant row: super-blocks in order, groups in order within each.
#[inline(always)]
fn output_q8_k<B: SuperBlock>(row: &[B], col: &[BlockQ8A]) -> f32 {
    let mut acc: Lanes = [0.0; LANES];
    for (b, a) in row.iter().zip(col.chunks_exact(GROUPS)) {
        for (g, a) in a.iter().enumerate() {
            accumulate_group(&mut acc, b, g, a);
        }
    }
    sum_lanes(acc)
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

/// One quantized output: the blocks of `row` against those of `col`.
#[inline(always)]
fn output_q8<W: QuantBlock>(row: &[W], col: &[BlockQ8A]) -> f32 {
    let mut acc: Lanes = [0.0; LANES];
    for (w, a) in row.iter().zip(col) {
        accumulate_q8(&mut acc, w, a);
    }
    sum_lanes(acc)
}

/// The scalar `Kernels::matmul_q8` (arguments checked by the caller). The SIMD paths use it for F32 weights.
#[inline(always)]
pub(in crate::backend::cpu::kernels) fn matmul_q8(
    w: &WeightMatrix,
    act: &[BlockQ8A],
    n_cols: usize,
    out: &mut OutRows,
) {
    let n = w.blocks_per_row();
    let (blocks, supers) = ((n, n), (n / GROUPS, n));
    match w.data() {
        WeightData::Q4_0(b) => for_each_output(b, blocks, act, n_cols, out, output_q8),
        WeightData::Q4_1(b) => for_each_output(b, blocks, act, n_cols, out, output_q8),
        WeightData::Q5_0(b) => for_each_output(b, blocks, act, n_cols, out, output_q8),
        WeightData::Q5_1(b) => for_each_output(b, blocks, act, n_cols, out, output_q8),
        WeightData::Q8_0(b) => for_each_output(b, blocks, act, n_cols, out, output_q8),
        WeightData::Q2K(b) => for_each_output(b, supers, act, n_cols, out, output_q8_k),
        WeightData::Q3K(b) => for_each_output(b, supers, act, n_cols, out, output_q8_k),
        WeightData::Q4K(b) => for_each_output(b, supers, act, n_cols, out, output_q8_k),
        WeightData::Q5K(b) => for_each_output(b, supers, act, n_cols, out, output_q8_k),
        WeightData::Q6K(b) => for_each_output(b, supers, act, n_cols, out, output_q8_k),
        WeightData::F16(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_q8_float),
        WeightData::Bf16(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_q8_float),
        WeightData::F32(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_q8_float),
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
        WeightData::F16(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_f32),
        WeightData::Bf16(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_f32),
        WeightData::F32(v) => for_each_output(v.as_chunks::<QK>().0, blocks, act, n_cols, out, output_f32),
    }
}
