//! The portable scalar path: the definition every SIMD path reproduces bit for bit (`numerics`), and the fallback
//! on CPUs without them. Written for clarity; each kernel is the plain loop its documentation describes, with no
//! intrinsics.
//!
//! Its fused multiply-adds are `f32::mul_add`, exactly specified (one rounding), its integer arithmetic is exact
//! and the compiler never reassociates floating-point operations, so the compiler's choice of instructions cannot
//! change a result. Without the `fma` target feature each `mul_add` is a libm call, and without AVX2 the integer
//! lane sums vectorize poorly, which made this path 2.5 times slower than it need be; so on x86-64 the same source
//! is compiled a second time with `fma` and `avx2` enabled (the compiler may vectorize across the independent
//! lanes, never within a sum), and [`kernels`] hands out that copy where the CPU has both. It is still this path:
//! no intrinsics, the same operations, the same bits as the portable copy (a unit test checks).

mod attention_quant;
mod elementwise;
mod matmul;

pub(super) use elementwise::{dot_f16, gelu_mul, rms_scale, rope_pair, silu_mul_one};
pub(super) use matmul::{matmul_f32, matmul_q8};

use super::q8a::quantize_row_q8a_scalar;
use super::table::Kernels;

/// The scalar table, compiled with the target features `$features` (none for the portable copy).
macro_rules! scalar_table {
    ($table:ident, $module:ident, $($features:literal)?) => {
        mod $module {
            use half::f16;

            use super::{attention_quant, elementwise, matmul};
            use crate::backend::cpu::kernels::out_rows::OutRows;
            use crate::backend::cpu::kernels::packed::{scalar, with_format, PackedMatrix};
            use crate::backend::cpu::kernels::q8a::BlockQ8A;
            use crate::backend::cpu::kernels::table::CacheRun;
            use crate::backend::cpu::kernels::weights::WeightMatrix;
            use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};
            use crate::model::gguf::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
            use crate::model::gguf::iq4::{BlockIq4Nl, BlockIq4Xs};
            use crate::model::gguf::mxfp4::BlockMxfp4;
            use crate::model::gguf::GgmlType;

            $(#[target_feature(enable = $features)])?
            pub(super) fn matmul_q8(w: &WeightMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
                matmul::matmul_q8(w, act, n_cols, out)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn matmul_packed(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
                with_format!(w.dtype(), F => scalar::matmul::<F>(w, act, n_cols, out), _ => unreachable!())
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn matmul_f32(w: &WeightMatrix, act: &[f32], n_cols: usize, out: &mut OutRows) {
                matmul::matmul_f32(w, act, n_cols, out)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
                elementwise::rms_norm(x, weight, eps, out)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
                elementwise::silu_mul(gate, up, out)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn gelu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
                elementwise::gelu_mul(gate, up, out)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn add_assign(x: &mut [f32], y: &[f32]) {
                elementwise::add_assign(x, y)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
                elementwise::softmax_inplace(x)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn rope(head: &mut [f32], cos: &[f32], sin: &[f32]) {
                elementwise::rope(head, cos, sin)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn attention_scores_f16(
                queries: &[f32],
                keys: CacheRun<'_, f16>,
                out: &mut [f32],
                out_stride: usize,
            ) {
                elementwise::attention_scores_f16(queries, keys, out, out_stride)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn attention_values_f16(
                weights: &[f32],
                weight_stride: usize,
                values: CacheRun<'_, f16>,
                out: &mut [f32],
            ) {
                elementwise::attention_values_f16(weights, weight_stride, values, out)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn attention_scores_q8_0(
                queries: &[BlockQ8A],
                keys: CacheRun<'_, BlockQ8_0>,
                out: &mut [f32],
                out_stride: usize,
            ) {
                attention_quant::attention_scores_q(queries, keys, out, out_stride)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn attention_scores_q4_0(
                queries: &[BlockQ8A],
                keys: CacheRun<'_, BlockQ4_0>,
                out: &mut [f32],
                out_stride: usize,
            ) {
                attention_quant::attention_scores_q(queries, keys, out, out_stride)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn attention_values_q8_0(
                weights: &[f32],
                weight_stride: usize,
                values: CacheRun<'_, BlockQ8_0>,
                out: &mut [f32],
            ) {
                attention_quant::attention_values_q(weights, weight_stride, values, out)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn attention_values_q4_0(
                weights: &[f32],
                weight_stride: usize,
                values: CacheRun<'_, BlockQ4_0>,
                out: &mut [f32],
            ) {
                attention_quant::attention_values_q(weights, weight_stride, values, out)
            }
            $(#[target_feature(enable = $features)])?
            pub(super) fn argmax(x: &[f32]) -> usize {
                elementwise::argmax(x)
            }
        }

        static $table: Kernels = Kernels {
            name: "scalar",
            quantize_row_q8a: quantize_row_q8a_scalar,
            matmul_q8: $module::matmul_q8,
            matmul_packed: $module::matmul_packed,
            matmul_f32: $module::matmul_f32,
            rms_norm: $module::rms_norm,
            silu_mul: $module::silu_mul,
            gelu_mul: $module::gelu_mul,
            add_assign: $module::add_assign,
            softmax_inplace: $module::softmax_inplace,
            rope: $module::rope,
            attention_scores_f16: $module::attention_scores_f16,
            attention_values_f16: $module::attention_values_f16,
            attention_values_f16_runs: None,
            attention_scores_q8_0: $module::attention_scores_q8_0,
            attention_scores_q4_0: $module::attention_scores_q4_0,
            attention_values_q8_0: $module::attention_values_q8_0,
            attention_values_q4_0: $module::attention_values_q4_0,
            argmax: $module::argmax,
        };
    };
}

scalar_table!(PORTABLE, portable,);
#[cfg(target_arch = "x86_64")]
scalar_table!(FOR_AVX2_FMA, for_avx2_fma, "fma,avx2");

/// The scalar path: the copy compiled for FMA and AVX2 where this CPU has them, the portable one elsewhere.
pub(super) fn kernels() -> &'static Kernels {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx2") {
        return &FOR_AVX2_FMA;
    }
    &PORTABLE
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use bytemuck::Zeroable;
    use half::f16;

    use super::*;
    use crate::backend::cpu::kernels::q8a::BlockQ8A;
    use crate::backend::cpu::kernels::table::CacheRun;
    use crate::backend::cpu::kernels::weights::{WeightData, WeightMatrix};
    use crate::backend::cpu::kernels::{OutRows, PackedMatrix};
    use crate::model::gguf::blocks::{BlockQ4_1, QK};

    /// A small deterministic generator (the tests' shared one lives outside the crate).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        }
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn the_avx2_fma_copy_computes_the_portable_copys_bits() {
        if !(is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx2")) {
            return;
        }
        let (p, f) = (&PORTABLE, &FOR_AVX2_FMA);
        let mut rng = Lcg(7);
        for len in [1usize, 7, 8, 13, 64, 100] {
            let x: Vec<f32> = (0..len).map(|_| rng.next()).collect();
            let y: Vec<f32> = (0..len).map(|_| rng.next()).collect();
            let (mut a, mut b) = (vec![0f32; len], vec![0f32; len]);
            // SAFETY: FMA and AVX2 were detected above; the portable copy needs nothing.
            unsafe {
                (p.rms_norm)(&x, &y, 1e-5, &mut a);
                (f.rms_norm)(&x, &y, 1e-5, &mut b);
                assert_eq!(bits(&a), bits(&b), "rms_norm {len}");
                (p.silu_mul)(&x, &y, &mut a);
                (f.silu_mul)(&x, &y, &mut b);
                assert_eq!(bits(&a), bits(&b), "silu_mul {len}");
                (p.gelu_mul)(&x, &y, &mut a);
                (f.gelu_mul)(&x, &y, &mut b);
                assert_eq!(bits(&a), bits(&b), "gelu_mul {len}");
                let (mut s, mut t) = (x.clone(), x.clone());
                (p.softmax_inplace)(&mut s);
                (f.softmax_inplace)(&mut t);
                assert_eq!(bits(&s), bits(&t), "softmax {len}");
                let keys: Vec<f16> = (0..3 * len).map(|_| f16::from_f32(rng.next())).collect();
                let (mut s, mut t) = ([0f32; 3], [0f32; 3]);
                let run = CacheRun { rows: &keys, width: len, stride: len, n: 3 };
                (p.attention_scores_f16)(&x, run, &mut s, 3);
                (f.attention_scores_f16)(&x, run, &mut t, 3);
                assert_eq!(bits(&s), bits(&t), "scores {len}");
            }
        }
        let (rows, row_len, cols) = (5, 96, 3);
        let blocks: Vec<BlockQ4_1> = (0..rows * row_len / QK)
            .map(|i| BlockQ4_1 {
                d: f16::from_f32(0.01 + rng.next().abs() * 0.01),
                m: f16::from_f32(-0.1 * rng.next().abs()),
                qs: std::array::from_fn(|j| (i * 31 + j * 7) as u8),
            })
            .collect();
        let w = WeightMatrix::new(WeightData::Q4_1(&blocks), rows, row_len).expect("valid shape");
        let packed = PackedMatrix::pack(&w).expect("Q4_1 packs");
        let x: Vec<f32> = (0..cols * row_len).map(|_| rng.next()).collect();
        let mut act = vec![BlockQ8A::zeroed(); cols * row_len / QK];
        quantize_row_q8a_scalar(&x, &mut act);
        let (mut a, mut b) = (vec![0f32; rows * cols], vec![0f32; rows * cols]);
        // SAFETY: as above.
        unsafe {
            (p.matmul_packed)(&packed, &act, cols, &mut OutRows::new(&mut a, cols, rows));
            (f.matmul_packed)(&packed, &act, cols, &mut OutRows::new(&mut b, cols, rows));
            assert_eq!(bits(&a), bits(&b), "matmul_packed");
            (p.matmul_f32)(&w, &x, cols, &mut OutRows::new(&mut a, cols, rows));
            (f.matmul_f32)(&w, &x, cols, &mut OutRows::new(&mut b, cols, rows));
            assert_eq!(bits(&a), bits(&b), "matmul_f32");
        }
    }
}
