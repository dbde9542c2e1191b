//! Every kernel path this CPU supports against the scalar path, bit for bit (the paths compute one arithmetic,
//! `numerics`: `docs/architecture.md`, "Numerics"), and against float64 arithmetic within error bounds, on seeded
//! random data at the model's shapes and at odd sizes; batch invariance bit for bit; and the real model's weights.
//!
//! Error bounds follow the standard analysis of floating-point summation (Higham, "Accuracy and Stability of
//! Numerical Algorithms", §4.2): adding `n` terms in any order errs by at most `(n − 1)·u·Σ|term|`, `u = 2⁻²⁴`,
//! plus one `u·|term|` per rounded product. Each bound below states which terms it counts.

use bytemuck::Zeroable;
use ember::backend::cpu::kernels::kv_quant::quantize_kv_row;
use ember::backend::cpu::kernels::{
    kernels_named, quantize_row_q8a_scalar, supported_kernels, BlockQ8A, CacheRun, Kernels, OutRows, PackedMatrix,
    WeightData, WeightMatrix,
};
use ember::model::gguf::blocks::{BlockQ4_0, BlockQ8_0, QK};
use ember::model::gguf::kquants::SuperBlock;
use ember::model::gguf::mxfp4::{e8m0_to_fp32_half, KVALUES};
use ember::model::gguf::{GgmlType, GgufFile};
use half::f16;

#[path = "common/rng.rs"]
mod rng;
use rng::Rng;
#[path = "common/quant_blocks.rs"]
mod quant_blocks;
use quant_blocks::{random_blocks, WEIGHT_TYPES};

/// f32 unit roundoff.
const U: f64 = f32::EPSILON as f64 / 2.0;

fn scalar() -> &'static Kernels {
    kernels_named("scalar").expect("the scalar path always exists")
}

/// The SIMD paths this CPU runs (empty on a CPU without any).
fn simd_paths() -> Vec<&'static Kernels> {
    supported_kernels().filter(|k| k.name != "scalar").collect()
}

/// Every weight type ember computes with (`common/quant_blocks.rs`).
const KINDS: [GgmlType; 25] = WEIGHT_TYPES;

/// Whether `dtype` is a float type: the quantized types meet 8-bit activations packed (`matmul_packed`), the float
/// ones as they are (`matmul_q8`).
fn is_float(dtype: GgmlType) -> bool {
    matches!(dtype, GgmlType::F16 | GgmlType::Bf16 | GgmlType::F32)
}

/// Owned random weights of one type, with realistic scales (the models' blocks have d ~ 0.01; the K-quants'
/// super-block scales are smaller, multiplied by their groups' integer scales).
struct Weights {
    dtype: GgmlType,
    /// The blocks' bytes, in 4-byte words so that every block type's alignment holds.
    words: Vec<u32>,
}

impl Weights {
    fn random(dtype: GgmlType, n_rows: usize, row_len: usize, rng: &mut Rng) -> Self {
        let n_items = n_rows * row_len / dtype.block_len() as usize;
        let range = if dtype.block_len() == 256 { (0.0002, 0.002) } else { (0.001, 0.05) };
        let mut scale = |rng: &mut Rng| f16::from_f32(rng.uniform(range.0, range.1));
        let mut bytes = random_blocks(dtype, n_items, rng, true, &mut scale);
        if matches!(dtype, GgmlType::Q4_1 | GgmlType::Q5_1) {
            // Minima as the model's: mostly negative.
            let block = dtype.block_bytes() as usize;
            for b in bytes.chunks_exact_mut(block) {
                b[2..4].copy_from_slice(&f16::from_f32(rng.uniform(-0.3, 0.05)).to_le_bytes());
            }
        }
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        Weights { dtype, words: bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect() }
    }

    fn matrix(&self, n_rows: usize, row_len: usize) -> WeightMatrix<'_> {
        let n_bytes = n_rows * row_len / self.dtype.block_len() as usize * self.dtype.block_bytes() as usize;
        let bytes = &bytemuck::cast_slice::<u32, u8>(&self.words)[..n_bytes];
        let data = WeightData::from_bytes(self.dtype, bytes).expect("a type ember computes with, aligned");
        WeightMatrix::new(data, n_rows, row_len).expect("test shapes are valid")
    }
}

/// Every weight of `w` in f64 as `(value, magnitude)`, row after row, the magnitude bounding what its f32
/// computation sums: the dequantized value, plus for the types with minima `|minimum|` (their dequantization may
/// cancel).
struct RefWeights {
    row_len: usize,
    values: Vec<(f64, f64)>,
}

impl RefWeights {
    fn new(w: &WeightMatrix) -> Self {
        let mut row = vec![0f32; w.row_len()];
        let mut values = Vec::with_capacity(w.n_rows() * w.row_len());
        for r in 0..w.n_rows() {
            w.dequantize_row(r, &mut row);
            values.extend(row.iter().enumerate().map(|(k, &v)| (f64::from(v), f64::from(v).abs() + min_part(w, r, k))));
        }
        RefWeights { row_len: w.row_len(), values }
    }

    /// Weight `k` of row `r`.
    fn get(&self, r: usize, k: usize) -> (f64, f64) {
        self.values[r * self.row_len + k]
    }
}

/// `|m|` of the block holding weight `k` of row `r` for Q4_1 / Q5_1, `|dmin · min|` for the K-quants with minima.
fn min_part(w: &WeightMatrix, r: usize, k: usize) -> f64 {
    let i = r * w.row_len() + k;
    let k_min = |d: f32, mins: [i32; 2]| f64::from(d) * f64::from(mins[(i % 32) / 16]).abs();
    match w.data() {
        WeightData::Q4_1(b) => f64::from(b[i / QK].m.to_f32()).abs(),
        WeightData::Q5_1(b) => f64::from(b[i / QK].m.to_f32()).abs(),
        WeightData::Q2K(b) => k_min(b[i / 256].dmin(), b[i / 256].group(i % 256 / 32).mins),
        WeightData::Q4K(b) => k_min(b[i / 256].dmin(), b[i / 256].group(i % 256 / 32).mins),
        WeightData::Q5K(b) => k_min(b[i / 256].dmin(), b[i / 256].group(i % 256 / 32).mins),
        _ => 0.0,
    }
}

/// `n_cols × row_len` activations shaped like a hidden state: per-block scales spread over four decades, and an
/// outlier now and then.
fn random_activations(n_cols: usize, row_len: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = Vec::with_capacity(n_cols * row_len);
    for _ in 0..n_cols * row_len / QK {
        let scale = 10f32.powf(rng.uniform(-2.0, 2.0));
        for _ in 0..QK {
            let outlier = if rng.next_u64().is_multiple_of(64) { 8.0 } else { 1.0 };
            x.push(rng.uniform(-1.0, 1.0) * scale * outlier);
        }
    }
    x
}

fn quantize(x: &[f32]) -> Vec<BlockQ8A> {
    let mut blocks = vec![BlockQ8A::ZERO; x.len() / QK];
    quantize_row_q8a_scalar(x, &mut blocks);
    blocks
}

fn run_q8(k: &Kernels, w: &WeightMatrix, act: &[BlockQ8A], n_cols: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n_cols * w.n_rows()];
    k.matmul_q8(w, act, n_cols, &mut OutRows::new(&mut out, n_cols, w.n_rows()));
    out
}

fn run_f32(k: &Kernels, w: &WeightMatrix, act: &[f32], n_cols: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n_cols * w.n_rows()];
    k.matmul_f32(w, act, n_cols, &mut OutRows::new(&mut out, n_cols, w.n_rows()));
    out
}

/// `Σ_b Σ_j (|w_j| + |min_j|)·|da·qa_j|` in f64: a bound on the magnitude of the terms a quantized matmul adds in
/// floating point (its integer sums are exact).
fn q8_magnitude(w: &RefWeights, act: &[BlockQ8A], c: usize, r: usize) -> f64 {
    let n = w.row_len / QK;
    let mut total = 0.0;
    for b in 0..n {
        let a = &act[c * n + b];
        for j in 0..QK {
            let (_, mag) = w.get(r, b * QK + j);
            total += mag * f64::from(a.d) * f64::from(a.qs[j]).abs();
        }
    }
    total
}

/// The shapes tested against the scalar path: odd sizes, then the model's (row_len, n_rows).
fn odd_shapes() -> Vec<(usize, usize)> {
    let mut shapes = Vec::new();
    for row_len in [32, 64, 96, 160, 256, 768] {
        for n_rows in [1, 3, 7, 33] {
            shapes.push((row_len, n_rows));
        }
    }
    shapes
}

/// Whether `dtype` can hold rows of `row_len` (the K-quants need whole 256-element super-blocks).
fn fits(dtype: GgmlType, row_len: usize) -> bool {
    row_len.is_multiple_of(dtype.block_len().max(32) as usize)
}
/// SmolLM2's shapes and Gemma 3's (640 wide, 1024 query rows, 2048 FFN rows).
const MODEL_SHAPES: [(usize, usize); 7] =
    [(576, 576), (576, 192), (576, 1536), (1536, 576), (640, 1024), (1024, 640), (2048, 640)];
/// Column counts around the walk's choices (`tiling::run_tiles`): one tile, two even ones (5 as 3 + 2, 8 as
/// 4 + 4), the first count whose rows are unpacked once per panel (9), a panel's whole tiles and an edge.
const ODD_N_COLS: [usize; 10] = [1, 2, 3, 5, 7, 8, 9, 16, 17, 64];

/// The SIMD paths are offered exactly where the CPU runs them, so the comparisons below cover every path this
/// machine has (and a CI machine without AVX-512 still tests AVX2).
#[cfg(target_arch = "x86_64")]
#[test]
fn paths_follow_cpu_features() {
    let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
    let avx512 = avx2
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni");
    assert_eq!(kernels_named("avx2").is_some(), avx2);
    assert_eq!(kernels_named("avx512").is_some(), avx512);
    // AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25); the path also needs the system's permission, which
    // Linux grants from 5.16 on, so the test asks no more than that the path implies the features.
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    let amx_cpu = avx512 && edx & (3 << 24) == 3 << 24;
    let amx = kernels_named("amx").is_some();
    assert!(amx_cpu || !amx, "the amx path is offered without the CPU's AMX-INT8");
    if std::env::var_os(ember::backend::cpu::kernels::KERNELS_ENV_VAR).is_none() {
        let best = if amx {
            "amx"
        } else if avx512 {
            "avx512"
        } else if avx2 {
            "avx2"
        } else {
            "scalar"
        };
        assert_eq!(ember::backend::cpu::kernels::kernels().name, best);
    }
}

#[test]
fn quantize_row_q8a_is_bit_identical_to_scalar() {
    let mut rng = Rng(1);
    for len in [32, 64, 96, 160, 576, 1536] {
        let mut x = random_activations(1, len, &mut rng);
        // An all-zero block, exact ties (amax 127 gives d = 1) and negative zeros.
        x[..QK].fill(0.0);
        if len >= 64 {
            x[QK..2 * QK].iter_mut().enumerate().for_each(|(i, v)| *v = i as f32 - 15.5);
            x[QK] = 127.0;
            x[QK + 1] = -0.0;
        }
        let want = quantize(&x);
        for k in simd_paths() {
            let mut got = vec![BlockQ8A { d: 1.0, s: 1.0, sum: 1, half_sums: [1; 2], qs: [1; QK] }; len / QK];
            k.quantize_row_q8a(&x, &mut got);
            for (b, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.qs, w.qs, "{}: block {b} of {len}", k.name);
                assert_eq!((g.d.to_bits(), g.s.to_bits()), (w.d.to_bits(), w.s.to_bits()), "{}: block {b}", k.name);
            }
        }
    }
}

/// The bound of a quantized matmul output against exact arithmetic on the same quantized operands: each path adds
/// at most `2·n_blocks + 8` terms (lane sums, Q4_1's minima, the lane tree) with two rounded products each, so it
/// errs by at most `(2·n_blocks + 24) · u · Σ|term|`.
fn q8_summation_bound(w: &RefWeights, act: &[BlockQ8A], c: usize, r: usize) -> f64 {
    (2 * w.row_len / QK + 24) as f64 * U * q8_magnitude(w, act, c, r)
}

/// Each SIMD path's matmul of float weights with 8-bit activations equals the scalar one bit for bit, at odd
/// shapes, the model's shapes and every column count around the tile sizes.
#[test]
fn matmul_q8_is_bit_identical_to_scalar() {
    let mut rng = Rng(2);
    let paths = simd_paths();
    let mut cases: Vec<(usize, usize, &[usize])> =
        odd_shapes().into_iter().map(|(l, r)| (l, r, &ODD_N_COLS[..])).collect();
    cases.extend(MODEL_SHAPES.iter().map(|&(l, r)| (l, r, &[1usize, 5, 17][..])));
    for kind in KINDS.into_iter().filter(|&k| is_float(k)) {
        for &(row_len, n_rows, col_counts) in cases.iter().filter(|c| fits(kind, c.0)) {
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let w = weights.matrix(n_rows, row_len);
            let n_cols_max = *col_counts.iter().max().unwrap();
            let act = quantize(&random_activations(n_cols_max, row_len, &mut rng));
            for &n_cols in col_counts {
                let act = &act[..n_cols * w.blocks_per_row()];
                let want = run_q8(scalar(), &w, act, n_cols);
                for k in &paths {
                    let got = run_q8(k, &w, act, n_cols);
                    let what = format!("{} {kind} {n_rows}x{row_len} n_cols {n_cols}", k.name);
                    assert_same_bits(&got, &want, &what);
                }
            }
        }
    }
}

/// Each SIMD path's precise matmul equals the scalar one bit for bit.
#[test]
fn matmul_f32_is_bit_identical_to_scalar() {
    let mut rng = Rng(9);
    let paths = simd_paths();
    for kind in KINDS {
        for (row_len, n_rows) in odd_shapes().into_iter().chain(MODEL_SHAPES).filter(|s| fits(kind, s.0)) {
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let w = weights.matrix(n_rows, row_len);
            let x = random_activations(17, row_len, &mut rng);
            for n_cols in [1, 2, 3, 4, 5, 6, 7, 8, 16, 17] {
                let x = &x[..n_cols * row_len];
                let want = run_f32(scalar(), &w, x, n_cols);
                for k in &paths {
                    let got = run_f32(k, &w, x, n_cols);
                    assert_same_bits(&got, &want, &format!("{} {kind} {n_rows}x{row_len} n_cols {n_cols}", k.name));
                }
            }
        }
    }
}

/// `Σ_k w(r, k)·x(c, k)` in f64 with the magnitude `Σ |w|·|x|` (weights as `weight_f64` gives them).
fn dot_f64(w: &RefWeights, x: &[f32], c: usize, r: usize) -> (f64, f64) {
    let n = w.row_len;
    (0..n).fold((0.0, 0.0), |(sum, mag), k| {
        let (v, m) = w.get(r, k);
        let xv = f64::from(x[c * n + k]);
        (sum + v * xv, mag + m * xv.abs())
    })
}

/// Every path's precise matmul against an f64 dequantize-and-dot: `row_len` products and additions, plus up to
/// two roundings in dequantization, so the error is at most `(row_len + 8) · u · Σ |w|·|x|`.
#[test]
fn matmul_f32_matches_f64_reference() {
    let mut rng = Rng(3);
    let mut cases: Vec<(usize, usize, usize)> = Vec::new();
    for (row_len, n_rows) in odd_shapes() {
        cases.extend([1, 5, 17].map(|n_cols| (row_len, n_rows, n_cols)));
    }
    cases.extend(MODEL_SHAPES.iter().map(|&(l, r)| (l, r, 6)));
    for kind in KINDS {
        for &(row_len, n_rows, n_cols) in cases.iter().filter(|c| fits(kind, c.0)) {
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let w = weights.matrix(n_rows, row_len);
            let x = random_activations(n_cols, row_len, &mut rng);
            let reference = RefWeights::new(&w);
            for k in supported_kernels() {
                let got = run_f32(k, &w, &x, n_cols);
                for c in 0..n_cols {
                    for r in 0..n_rows {
                        let (want, mag) = dot_f64(&reference, &x, c, r);
                        let g = f64::from(got[c * n_rows + r]);
                        let tol = (row_len + 8) as f64 * U * mag;
                        assert!(
                            (g - want).abs() <= tol,
                            "{} {kind} {n_rows}x{row_len} ({c}, {r}): {g} vs {want}, tol {tol:e}",
                            k.name
                        );
                    }
                }
            }
        }
    }
}

/// Every path's quantized matmul against the f64 product with the *unquantized* activations. Rounding `x` to
/// `da·qa` errs by at most `da/2` per element (a hair more: `x·(1/d)` is itself rounded), so the quantized
/// result may differ by `Σ_b 0.5001·da_b·Σ_j |w_j|`, plus the f32 summation bound of `matmul_q8_matches_scalar`.
#[test]
fn matmul_q8_matches_f64_within_activation_rounding() {
    let mut rng = Rng(4);
    for kind in KINDS.into_iter().filter(|&k| is_float(k)) {
        for &(row_len, n_rows) in MODEL_SHAPES.iter().chain(&[(96, 7), (160, 33), (768, 5)]).filter(|s| fits(kind, s.0))
        {
            let n_cols = 3;
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let w = weights.matrix(n_rows, row_len);
            let x = random_activations(n_cols, row_len, &mut rng);
            let act = quantize(&x);
            let n = w.blocks_per_row();
            let reference = RefWeights::new(&w);
            for k in supported_kernels() {
                let got = run_q8(k, &w, &act, n_cols);
                for c in 0..n_cols {
                    for r in 0..n_rows {
                        let (want, _) = dot_f64(&reference, &x, c, r);
                        let rounding: f64 = (0..n)
                            .map(|b| {
                                let w_abs: f64 = (0..QK).map(|j| reference.get(r, b * QK + j).0.abs()).sum();
                                0.5001 * f64::from(act[c * n + b].d) * w_abs
                            })
                            .sum();
                        let tol = rounding + q8_summation_bound(&reference, &act, c, r);
                        let g = f64::from(got[c * n_rows + r]);
                        assert!(
                            (g - want).abs() <= tol,
                            "{} {kind} {n_rows}x{row_len} ({c}, {r}): {g} vs {want}, tol {tol:e}",
                            k.name
                        );
                    }
                }
            }
        }
    }
}

fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i}: {g} vs {w}");
    }
}

/// Runs `matmul` (either flavour) on columns `first..first + n_cols` of `pool`, over the rows split into pieces of
/// `piece` rows (each piece computed by its own call, as the thread pool does), and returns the outputs.
fn split_run(n_rows: usize, n_cols: usize, piece: usize, matmul: &dyn Fn(usize, &mut OutRows)) -> Vec<f32> {
    let mut out = vec![f32::NAN; n_cols * n_rows];
    let mut rest = OutRows::new(&mut out, n_cols, n_rows);
    while rest.rows().len() > piece {
        let at = rest.rows().start + piece;
        let (mut head, tail) = rest.split_at(at);
        matmul(n_cols, &mut head);
        rest = tail;
    }
    matmul(n_cols, &mut rest);
    out
}

/// Batch invariance, bit for bit, on every path: a column's outputs do not depend on how many columns run with
/// it, where it sits in the batch, or how the rows are split.
#[test]
fn matmuls_are_batch_invariant() {
    let mut rng = Rng(5);
    let (n_rows, pool_cols) = (37, 23);
    for kind in KINDS {
        for row_len in [96, 576, 768].into_iter().filter(|&l| fits(kind, l)) {
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let w = weights.matrix(n_rows, row_len);
            let x = random_activations(pool_cols, row_len, &mut rng);
            let act = quantize(&x);
            let n = w.blocks_per_row();
            for k in supported_kernels() {
                // Reference: each column alone, all rows in one call (the quantized types' 8-bit matmul is
                // `matmul_packed_is_batch_invariant`'s).
                let alone_q8: Vec<Vec<f32>> = match is_float(kind) {
                    true => (0..pool_cols).map(|c| run_q8(k, &w, &act[c * n..(c + 1) * n], 1)).collect(),
                    false => Vec::new(),
                };
                let alone_f32: Vec<Vec<f32>> =
                    (0..pool_cols).map(|c| run_f32(k, &w, &x[c * row_len..(c + 1) * row_len], 1)).collect();
                for (first, n_cols) in [(0, 23), (1, 2), (3, 3), (2, 5), (5, 16), (6, 17), (0, 4), (19, 4)] {
                    for piece in [n_rows, 1, 3, 4, 5, 8, 13] {
                        if !is_float(kind) {
                            let got_f32 = split_run(n_rows, n_cols, piece, &|nc: usize, out: &mut OutRows| {
                                k.matmul_f32(&w, &x[first * row_len..(first + nc) * row_len], nc, out)
                            });
                            for c in 0..n_cols {
                                let what = format!(
                                    "f32 {} {kind} row_len {row_len} cols {first}+{n_cols} piece {piece}",
                                    k.name
                                );
                                assert_same_bits(&got_f32[c * n_rows..(c + 1) * n_rows], &alone_f32[first + c], &what);
                            }
                            continue;
                        }
                        let q8 =
                            |nc: usize, out: &mut OutRows| k.matmul_q8(&w, &act[first * n..(first + nc) * n], nc, out);
                        let f32_ = |nc: usize, out: &mut OutRows| {
                            k.matmul_f32(&w, &x[first * row_len..(first + nc) * row_len], nc, out)
                        };
                        let got_q8 = split_run(n_rows, n_cols, piece, &q8);
                        let got_f32 = split_run(n_rows, n_cols, piece, &f32_);
                        for c in 0..n_cols {
                            let what =
                                format!("{} {kind} row_len {row_len} cols {first}+{n_cols} piece {piece}", k.name);
                            let col = c * n_rows..(c + 1) * n_rows;
                            assert_same_bits(&got_q8[col.clone()], &alone_q8[first + c], &format!("q8 {what}"));
                            assert_same_bits(&got_f32[col], &alone_f32[first + c], &format!("f32 {what}"));
                        }
                    }
                }
            }
        }
    }
}

#[test]
#[should_panic(expected = "beyond")]
fn matmul_rejects_output_rows_past_the_matrix() {
    let mut rng = Rng(6);
    let weights = Weights::random(GgmlType::Q4_1, 3, 32, &mut rng);
    let w = PackedMatrix::pack(&weights.matrix(3, 32)).expect("Q4_1 packs");
    let act = quantize(&random_activations(1, 32, &mut rng));
    let mut out = vec![0f32; 4];
    scalar().matmul_packed(&w, &act, 1, &mut OutRows::new(&mut out, 1, 4));
}

/// The quantized types meet 8-bit activations only packed.
#[test]
#[should_panic(expected = "packed")]
fn matmul_q8_refuses_quantized_weights() {
    let mut rng = Rng(6);
    let weights = Weights::random(GgmlType::Q4K, 1, 256, &mut rng);
    let act = quantize(&random_activations(1, 256, &mut rng));
    let mut out = vec![0f32; 1];
    scalar().matmul_q8(&weights.matrix(1, 256), &act, 1, &mut OutRows::new(&mut out, 1, 1));
}

#[test]
#[should_panic(expected = "outside")]
fn out_rows_refuses_writes_outside_its_range() {
    let mut out = vec![0f32; 6];
    let (mut first, _second) = OutRows::new(&mut out, 2, 3).split_at(1);
    first.write(1, 0, &[1.0, 2.0]);
}

/// Element-wise lengths: empty, shorter than a register, with and without a tail, an odd number of 8-lane chunks
/// after whole 16-lane pairs with and without a tail (88, 93: the AVX-512 softmax's last steps), and the model's
/// widths.
const LENGTHS: [usize; 14] = [0, 1, 7, 8, 9, 64, 80, 88, 93, 100, 128, 256, 576, 1536];

fn random_vec(len: usize, lo: f32, hi: f32, rng: &mut Rng) -> Vec<f32> {
    (0..len).map(|_| rng.uniform(lo, hi)).collect()
}

/// Every SIMD path's element-wise kernels equal the scalar ones bit for bit, at lengths with and without a tail.
#[test]
fn element_wise_kernels_are_bit_identical_to_scalar() {
    let mut rng = Rng(7);
    let s = scalar();
    for k in simd_paths() {
        for len in LENGTHS {
            let what = |op: &str| format!("{} {op} len {len}", k.name);
            let x = random_vec(len, -3.0, 3.0, &mut rng);
            let y = random_vec(len, -3.0, 3.0, &mut rng);
            let (mut got, mut want) = (vec![0f32; len], vec![0f32; len]);

            if len > 0 {
                k.rms_norm(&x, &y, 1e-5, &mut got);
                s.rms_norm(&x, &y, 1e-5, &mut want);
                assert_same_bits(&got, &want, &what("rms_norm"));
            }

            // Gates across the range where sigmoid saturates.
            let gate = random_vec(len, -100.0, 30.0, &mut rng);
            k.silu_mul(&gate, &y, &mut got);
            s.silu_mul(&gate, &y, &mut want);
            assert_same_bits(&got, &want, &what("silu_mul"));
            k.gelu_mul(&gate, &y, &mut got);
            s.gelu_mul(&gate, &y, &mut want);
            assert_same_bits(&got, &want, &what("gelu_mul"));

            let (mut a, mut b) = (x.clone(), x.clone());
            k.add_assign(&mut a, &y);
            s.add_assign(&mut b, &y);
            assert_same_bits(&a, &b, &what("add_assign"));

            // Logits-like values with masked (−inf) positions.
            let mut logits = random_vec(len, -20.0, 20.0, &mut rng);
            logits.iter_mut().step_by(5).skip(1).for_each(|v| *v = f32::NEG_INFINITY);
            let (mut a, mut b) = (logits.clone(), logits.clone());
            k.softmax_inplace(&mut a);
            s.softmax_inplace(&mut b);
            assert_same_bits(&a, &b, &what("softmax"));

            if len % 2 == 0 {
                let angles = random_vec(len / 2, -10.0, 10.0, &mut rng);
                let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
                let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
                let (mut a, mut b) = (x.clone(), x.clone());
                k.rope(&mut a, &cos, &sin);
                s.rope(&mut b, &cos, &sin);
                assert_same_bits(&a, &b, &what("rope"));
            }

            check_attention_f16(k, s, &x, &y, &mut rng, &what);

            if len > 0 {
                assert_eq!(k.argmax(&x), s.argmax(&x), "{}", what("argmax"));
            }
        }
    }
}

/// The attention kernels over runs of 1 to 17 cache slots (every remainder of the 4-position groups, and a whole
/// 16-slot block), rows of `x.len()` elements `x.len() + 3` apart, for groups of 1 to 9 query heads (every
/// subgroup split of the SIMD paths), bit for bit against the scalar path.
fn check_attention_f16(k: &Kernels, s: &Kernels, x: &[f32], y: &[f32], rng: &mut Rng, what: &dyn Fn(&str) -> String) {
    let len = x.len();
    if len == 0 {
        return;
    }
    let stride = len + 3;
    for (n, heads) in [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (7, 1), (8, 6), (16, 3), (17, 9), (16, 8)] {
        let cache: Vec<f16> =
            random_vec((n - 1) * stride + len, -4.0, 4.0, rng).into_iter().map(f16::from_f32).collect();
        let run = CacheRun { rows: &cache, width: len, stride, n };
        let queries: Vec<f32> = (0..heads).flat_map(|h| x.iter().map(move |v| v * (1.0 + h as f32 / 8.0))).collect();
        let out_stride = n + 2;
        let (mut got, mut want) = (vec![f32::NAN; heads * out_stride], vec![f32::NAN; heads * out_stride]);
        k.attention_scores_f16(&queries, run, &mut got, out_stride);
        s.attention_scores_f16(&queries, run, &mut want, out_stride);
        assert_same_bits(&got, &want, &format!("{} n {n} heads {heads}", what("attention_scores_f16")));

        let weights = random_vec(heads * out_stride, 0.0, 1.0, rng);
        let outs: Vec<f32> = (0..heads).flat_map(|h| y.iter().map(move |v| v - h as f32)).collect();
        let (mut a, mut b, mut c) = (outs.clone(), outs.clone(), outs);
        k.attention_values_f16(&weights, out_stride, run, &mut a);
        s.attention_values_f16(&weights, out_stride, run, &mut b);
        assert_same_bits(&a, &b, &format!("{} n {n} heads {heads}", what("attention_values_f16")));

        // The same positions as two to four runs in one call: the single run's bits.
        let cuts = [0, n / 3, n / 2, n];
        let runs: Vec<CacheRun<'_, f16>> = cuts
            .windows(2)
            .filter(|w| w[1] > w[0])
            .map(|w| CacheRun { rows: &cache[w[0] * stride..], width: len, stride, n: w[1] - w[0] })
            .collect();
        k.attention_values_f16_runs(&weights, out_stride, &runs, &mut c);
        assert_same_bits(
            &c,
            &b,
            &format!("{} n {n} heads {heads} runs {}", what("attention_values_f16_runs"), runs.len()),
        );
    }
}

/// The 8-bit and 4-bit caches' attention kernels over runs of 1 to 17 slots of heads 1 to 8 blocks wide (32 to 256
/// elements, a latent head's 18), rows padded apart, for groups of 1 to 9 heads, bit for bit against the scalar
/// path; the extreme integers (±127, −8) included.
#[test]
fn quantized_cache_attention_is_bit_identical_to_scalar() {
    let s = scalar();
    let mut rng = Rng(0x5eed_cace);
    for k in simd_paths() {
        for blocks in [1usize, 2, 4, 8, 18] {
            let stride = blocks + 3;
            for (n, heads) in [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (7, 1), (8, 6), (16, 3), (17, 9)] {
                let rows = random_vec(((n - 1) * stride + blocks) * QK, -3.0, 3.0, &mut rng);
                let mut q8 = vec![BlockQ8_0::zeroed(); (n - 1) * stride + blocks];
                let mut q4 = vec![BlockQ4_0::zeroed(); (n - 1) * stride + blocks];
                quantize_kv_row(&rows, &mut q8);
                quantize_kv_row(&rows, &mut q4);
                q8[0].qs[0] = -127;
                q8[0].qs[1] = 127;
                q4[0].qs[0] = 0x0F;
                let queries = quantize(&random_vec(heads * blocks * QK, -2.0, 2.0, &mut rng));
                let out_stride = n + 2;
                let what = |name: &str| format!("{} {name}: {blocks} blocks, n {n}, heads {heads}", k.name);

                let (mut got, mut want) = (vec![f32::NAN; heads * out_stride], vec![f32::NAN; heads * out_stride]);
                let run = CacheRun { rows: &q8[..], width: blocks, stride, n };
                k.attention_scores_q8_0(&queries, run, &mut got, out_stride);
                s.attention_scores_q8_0(&queries, run, &mut want, out_stride);
                assert_same_bits(&got, &want, &what("attention_scores_q8_0"));
                let run4 = CacheRun { rows: &q4[..], width: blocks, stride, n };
                k.attention_scores_q4_0(&queries, run4, &mut got, out_stride);
                s.attention_scores_q4_0(&queries, run4, &mut want, out_stride);
                assert_same_bits(&got, &want, &what("attention_scores_q4_0"));

                let weights = random_vec(heads * out_stride, 0.0, 1.0, &mut rng);
                let outs = random_vec(heads * blocks * QK, -1.0, 1.0, &mut rng);
                let (mut a, mut b) = (outs.clone(), outs.clone());
                k.attention_values_q8_0(&weights, out_stride, run, &mut a);
                s.attention_values_q8_0(&weights, out_stride, run, &mut b);
                assert_same_bits(&a, &b, &what("attention_values_q8_0"));
                let (mut a, mut b) = (outs.clone(), outs);
                k.attention_values_q4_0(&weights, out_stride, run4, &mut a);
                s.attention_values_q4_0(&weights, out_stride, run4, &mut b);
                assert_same_bits(&a, &b, &what("attention_values_q4_0"));
            }
        }
    }
}

#[test]
fn argmax_takes_the_first_maximum_and_skips_nan() {
    let cases: [(&[f32], usize); 7] = [
        (&[1.0], 0),
        (&[f32::NAN, 2.0, 2.0], 1),
        (&[f32::NAN; 3], 0),
        (&[f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY], 1),
        (&[0.0, 5.0, 1.0, 5.0, 2.0, 3.0, 4.0, 5.0, 5.0, 0.0], 1),
        (&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 9.0], 9),
        (&[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0, -0.5], 8),
    ];
    for k in supported_kernels() {
        for (x, want) in cases {
            assert_eq!(k.argmax(x), want, "{} on {x:?}", k.name);
        }
        let mut logits = vec![0f32; 49152];
        logits[40000] = 3.0;
        logits[45000] = 3.0;
        assert_eq!(k.argmax(&logits), 40000, "{}", k.name);
    }
}

/// The real model's weights through `WeightMatrix::from_tensor`, packed, every path against the scalar one, bit
/// for bit.
#[test]
fn real_model_weights_are_bit_identical_to_scalar() {
    let path = ember::model::path::resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
    let file = GgufFile::open(&path).expect("the model opens");
    let mut rng = Rng(8);
    let n_cols = 3;
    for (name, row_len, n_rows) in [
        ("blk.0.attn_q.weight", 576, 576),
        ("blk.7.attn_k.weight", 576, 192),
        ("blk.29.ffn_up.weight", 576, 1536),
        ("blk.12.ffn_down.weight", 1536, 576),
        ("token_embd.weight", 576, 49152),
    ] {
        let w = WeightMatrix::from_tensor(&file.tensor(name).expect("tensor exists")).expect("a matrix");
        assert_eq!((w.row_len(), w.n_rows()), (row_len, n_rows), "{name}");
        let w = PackedMatrix::pack(&w).expect("the model's matrices are quantized");
        let act = quantize(&random_activations(n_cols, row_len, &mut rng));
        let want = run_packed(scalar(), &w, &act, n_cols);
        for k in simd_paths() {
            assert_same_bits(&run_packed(k, &w, &act, n_cols), &want, &format!("{} {name}", k.name));
        }
    }
    let norm = file.tensor("output_norm.weight").expect("tensor exists");
    assert!(WeightMatrix::from_tensor(&norm).is_ok(), "a 1-D F32 tensor of 576 is one row");
}

/// Every quantized type's weights packed (`PackedMatrix`), at odd shapes and the model's, with the rows' count
/// not a multiple of a panel's 16.
fn packed_cases() -> Vec<(usize, usize)> {
    let mut shapes = odd_shapes();
    shapes.extend([(256, 16), (512, 17), (768, 48)]);
    shapes.extend(MODEL_SHAPES);
    shapes
}

fn run_packed(k: &Kernels, w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n_cols * w.n_rows()];
    k.matmul_packed(w, act, n_cols, &mut OutRows::new(&mut out, n_cols, w.n_rows()));
    out
}

/// Packing keeps every weight: a packed row dequantizes to the file's row, bit for bit.
#[test]
fn packed_rows_dequantize_to_the_files() {
    let mut rng = Rng(11);
    for kind in KINDS {
        for (row_len, n_rows) in packed_cases().into_iter().filter(|s| fits(kind, s.0)) {
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let w = weights.matrix(n_rows, row_len);
            let Some(packed) = PackedMatrix::pack(&w) else {
                assert!(matches!(kind, GgmlType::F16 | GgmlType::Bf16 | GgmlType::F32), "{kind} packs");
                continue;
            };
            let (mut got, mut want) = (vec![0f32; row_len], vec![0f32; row_len]);
            for r in 0..n_rows {
                packed.dequantize_row(r, &mut got);
                w.dequantize_row(r, &mut want);
                assert_same_bits(&got, &want, &format!("{kind} {n_rows}x{row_len} row {r}"));
            }
        }
    }
}

/// Each SIMD path's packed matmul equals the scalar one bit for bit, at odd shapes, the model's shapes and every
/// column count around the tile sizes.
#[test]
fn matmul_packed_is_bit_identical_to_scalar() {
    let mut rng = Rng(12);
    let paths = simd_paths();
    for kind in KINDS {
        for (row_len, n_rows) in packed_cases().into_iter().filter(|s| fits(kind, s.0)) {
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let Some(w) = PackedMatrix::pack(&weights.matrix(n_rows, row_len)) else { continue };
            let act = quantize(&random_activations(17, row_len, &mut rng));
            for n_cols in [1, 2, 3, 4, 5, 8, 9, 17] {
                let act = &act[..n_cols * w.blocks_per_row()];
                let want = run_packed(scalar(), &w, act, n_cols);
                for k in &paths {
                    let got = run_packed(k, &w, act, n_cols);
                    assert_same_bits(&got, &want, &format!("{} {kind} {n_rows}x{row_len} n_cols {n_cols}", k.name));
                }
            }
        }
    }
}

/// A batch longer than the AMX path's chunk of gathered columns (256): 300 columns are a chunk, then two tiles and
/// 12 columns on the AVX-512 tiles; every path gives the scalar bits, every type.
#[test]
fn matmul_packed_of_long_batches_is_bit_identical_to_scalar() {
    const N_COLS: usize = 300;
    let mut rng = Rng(31);
    let paths = simd_paths();
    for kind in KINDS {
        let (row_len, n_rows) = (256, 20);
        let weights = Weights::random(kind, n_rows, row_len, &mut rng);
        let Some(w) = PackedMatrix::pack(&weights.matrix(n_rows, row_len)) else { continue };
        let act = quantize(&random_activations(N_COLS, row_len, &mut rng));
        let want = run_packed(scalar(), &w, &act, N_COLS);
        for k in &paths {
            assert_same_bits(&run_packed(k, &w, &act, N_COLS), &want, &format!("{} {kind} n_cols {N_COLS}", k.name));
        }
    }
}

/// Q6_K at its integer extremes: every value at −32 with every scale −128, or at +31 with every scale 127,
/// against activations of ±127. The halves' scaled dots then reach `2·16·32·127·128`, just under 2^24 (the bound
/// `packed::scalar` relies on), and AVX2's 16-bit sums their largest: every path must still give the scalar bits,
/// and those the exact per-group integers times `d·da`.
#[test]
fn matmul_packed_q6k_is_exact_at_its_extremes() {
    const ROW_LEN: usize = 512;
    const N_ROWS: usize = 18;
    let block = |(ql, qh, sc): (u8, u8, i8)| {
        let mut b = vec![ql; 128];
        b.extend([qh; 64]);
        b.extend([sc as u8; 16]);
        b.extend(f16::from_f32(0.5).to_le_bytes());
        b
    };
    let (low, high) = ((0x00, 0x00, i8::MIN), (0xff, 0xff, i8::MAX));
    let mut bytes = Vec::new();
    for r in 0..N_ROWS {
        for b in 0..ROW_LEN / 256 {
            bytes.extend(block(if (r + b).is_multiple_of(2) { low } else { high }));
        }
    }
    // In 4-byte words, so that the blocks' alignment holds.
    let mut words = vec![0u32; bytes.len().div_ceil(4)];
    bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
    let data =
        WeightData::from_bytes(GgmlType::Q6K, &bytemuck::cast_slice(&words)[..bytes.len()]).expect("Q6_K blocks");
    let w = WeightMatrix::new(data, N_ROWS, ROW_LEN).expect("valid shape");
    let packed = PackedMatrix::pack(&w).expect("Q6_K packs");
    // 17 columns: a 16-column AMX tile (whose halves are combined in floats, exact below 2^24) and one more.
    let n_cols = 17;
    let x: Vec<f32> = (0..n_cols * ROW_LEN).map(|i| if (i / ROW_LEN).is_multiple_of(2) { 1.0 } else { -1.0 }).collect();
    let act = quantize(&x);
    assert!(act.iter().all(|a| a.qs.iter().all(|&q| q.unsigned_abs() == 127)));
    let want = run_packed(scalar(), &packed, &act, n_cols);
    for k in simd_paths() {
        assert_same_bits(&run_packed(k, &packed, &act, n_cols), &want, &format!("{} Q6_K extremes", k.name));
    }
    for c in 0..n_cols {
        for r in 0..N_ROWS {
            let mut exact = 0f64;
            for b in 0..ROW_LEN / 256 {
                let (v, sc) = if (r + b).is_multiple_of(2) { (-32i64, -128i64) } else { (31, 127) };
                let q = i64::from(act[c * ROW_LEN / QK].qs[0]);
                let group = 2 * sc * 16 * v * q;
                assert!(group.unsigned_abs() < 1 << 24, "the bound: {group}");
                exact += 8.0 * group as f64 * f64::from(0.5 * act[c * ROW_LEN / QK].d);
            }
            let got = f64::from(want[c * N_ROWS + r]);
            assert!((got - exact).abs() <= 16.0 * U * exact.abs(), "row {r} col {c}: {got} vs {exact}");
        }
    }
}

/// MXFP4 at the ends of its scale range: rows whose blocks take E8M0 bytes 0 and 1 (subnormal scales: `d·da` is
/// then rounded, or flushed to zero, and no path may treat it otherwise), 2 (the smallest normal one), 127 and 128,
/// and up to 200 (2^72), with every code. Every path gives the scalar bits; where `d·da` is normal the scalar
/// result of a one-block row is the exact integer dot times `d·da`, rounded once.
#[test]
fn matmul_packed_mxfp4_is_exact_across_its_scale_range() {
    const EXPONENTS: [u8; 8] = [0, 1, 2, 3, 100, 127, 128, 200];
    let mut rng = Rng(15);
    for row_len in [32, 96] {
        let n_rows = 2 * EXPONENTS.len() + 1;
        let weights = Weights::random(GgmlType::Mxfp4, n_rows, row_len, &mut rng);
        let mut words = weights.words.clone();
        let bytes = bytemuck::cast_slice_mut::<u32, u8>(&mut words);
        for (b, block) in bytes.chunks_exact_mut(17).take(n_rows * row_len / QK).enumerate() {
            block[0] = EXPONENTS[(b / (row_len / QK)) % EXPONENTS.len()];
            // Every code in the row's first block: 16 codes in the low nibbles, reversed in the high ones.
            if b % (row_len / QK) == 0 {
                for (j, q) in block[1..].iter_mut().enumerate() {
                    *q = j as u8 | ((15 - j as u8) << 4);
                }
            }
        }
        let weights = Weights { dtype: GgmlType::Mxfp4, words };
        let w = weights.matrix(n_rows, row_len);
        let packed = PackedMatrix::pack(&w).expect("MXFP4 packs");
        let (mut got, mut want) = (vec![0f32; row_len], vec![0f32; row_len]);
        for r in 0..n_rows {
            packed.dequantize_row(r, &mut got);
            w.dequantize_row(r, &mut want);
            assert_same_bits(&got, &want, &format!("MXFP4 row {r} dequantized"));
        }
        for n_cols in [1, 2, 9] {
            let act = quantize(&random_activations(n_cols, row_len, &mut rng));
            let scalar_out = run_packed(scalar(), &packed, &act, n_cols);
            for k in simd_paths() {
                let what = format!("{} MXFP4 extremes {n_rows}x{row_len} n_cols {n_cols}", k.name);
                assert_same_bits(&run_packed(k, &packed, &act, n_cols), &scalar_out, &what);
            }
            if row_len != QK {
                continue;
            }
            let blocks = match w.data() {
                WeightData::Mxfp4(b) => b,
                _ => unreachable!(),
            };
            for c in 0..n_cols {
                for (r, b) in blocks.iter().enumerate() {
                    let a = &act[c];
                    let dot: i32 = (0..QK)
                        .map(|k| {
                            let code = if k < 16 { b.qs[k] & 0x0f } else { b.qs[k - 16] >> 4 };
                            i32::from(KVALUES[usize::from(code)]) * i32::from(a.qs[k])
                        })
                        .sum();
                    let scale = e8m0_to_fp32_half(b.e) * a.d;
                    if scale.is_normal() {
                        let exact = (f64::from(dot) * f64::from(scale)) as f32;
                        assert_eq!(scalar_out[c * n_rows + r].to_bits(), exact.to_bits(), "e {} col {c}", b.e);
                    }
                }
            }
        }
    }
}

/// Every path's packed matmul against the f64 product with the unquantized activations: activation rounding (as in
/// `matmul_q8_matches_f64_within_activation_rounding`) plus the summation of at most `4·n_groups` terms, each with
/// two rounded products.
#[test]
fn matmul_packed_matches_f64_within_activation_rounding() {
    let mut rng = Rng(13);
    for kind in KINDS {
        for &(row_len, n_rows) in MODEL_SHAPES.iter().chain(&[(96, 7), (160, 33), (768, 5)]).filter(|s| fits(kind, s.0))
        {
            let n_cols = 3;
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let w = weights.matrix(n_rows, row_len);
            let Some(packed) = PackedMatrix::pack(&w) else { continue };
            let x = random_activations(n_cols, row_len, &mut rng);
            let act = quantize(&x);
            let n = w.blocks_per_row();
            let reference = RefWeights::new(&w);
            for k in supported_kernels() {
                let got = run_packed(k, &packed, &act, n_cols);
                for c in 0..n_cols {
                    for r in 0..n_rows {
                        let (want, _) = dot_f64(&reference, &x, c, r);
                        let rounding: f64 = (0..n)
                            .map(|b| {
                                let w_abs: f64 = (0..QK).map(|j| reference.get(r, b * QK + j).0.abs()).sum();
                                0.5001 * f64::from(act[c * n + b].d) * w_abs
                            })
                            .sum();
                        let summation = (4 * n + 8) as f64 * U * q8_magnitude(&reference, &act, c, r);
                        let tol = rounding + summation;
                        let g = f64::from(got[c * n_rows + r]);
                        assert!(
                            (g - want).abs() <= tol,
                            "{} {kind} {n_rows}x{row_len} ({c}, {r}): {g} vs {want}, tol {tol:e}",
                            k.name
                        );
                    }
                }
            }
        }
    }
}

/// Batch invariance of the packed matmul, bit for bit, on every path: a column's outputs do not depend on how many
/// columns run with it, where it sits in the batch, or how the rows are split (also inside a panel).
#[test]
fn matmul_packed_is_batch_invariant() {
    let mut rng = Rng(14);
    let (n_rows, pool_cols) = (37, 23);
    for kind in KINDS {
        for row_len in [96, 768].into_iter().filter(|&l| fits(kind, l)) {
            let weights = Weights::random(kind, n_rows, row_len, &mut rng);
            let Some(w) = PackedMatrix::pack(&weights.matrix(n_rows, row_len)) else { continue };
            let act = quantize(&random_activations(pool_cols, row_len, &mut rng));
            let n = w.blocks_per_row();
            for k in supported_kernels() {
                let alone: Vec<Vec<f32>> =
                    (0..pool_cols).map(|c| run_packed(k, &w, &act[c * n..(c + 1) * n], 1)).collect();
                for (first, n_cols) in [(0, 23), (1, 2), (3, 3), (2, 5), (5, 16), (6, 17), (19, 4)] {
                    for piece in [n_rows, 1, 5, 16, 32] {
                        let run = |nc: usize, out: &mut OutRows| {
                            k.matmul_packed(&w, &act[first * n..(first + nc) * n], nc, out)
                        };
                        let got = split_run(n_rows, n_cols, piece, &run);
                        for c in 0..n_cols {
                            let what =
                                format!("{} {kind} row_len {row_len} cols {first}+{n_cols} piece {piece}", k.name);
                            assert_same_bits(&got[c * n_rows..(c + 1) * n_rows], &alone[first + c], &what);
                        }
                    }
                }
            }
        }
    }
}
