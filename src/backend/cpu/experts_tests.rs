//! Tests of `experts.rs`: the runner against plain per-row arithmetic, its activations and biases against their
//! formulas, its bits across batches, threads and kernel paths, and ignored timings (a child module of `experts`, so
//! that its private pieces are in reach).
use half::f16;

use super::*;
use crate::backend::cpu::kernels::{kernels_named, supported_kernels, PackedMatrix, WeightData, WeightMatrix};
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ8_0};
use crate::model::gguf::kquants::BlockQ4K;
use crate::model::gguf::GgmlType;

/// SplitMix64: seeded, so every run sees the same data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    fn floats(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

/// A matrix's blocks as a file stores them: random bytes, the scales set to finite values of a size that keeps
/// the matmul outputs around 1.
enum Blocks {
    Q4_0(Vec<BlockQ4_0>),
    Q8_0(Vec<BlockQ8_0>),
    Q4K(Vec<BlockQ4K>),
}

impl Blocks {
    fn random(dtype: GgmlType, n_elements: usize, rng: &mut Rng) -> Blocks {
        fn blocks<B: bytemuck::Pod>(n: usize, rng: &mut Rng, mut fix: impl FnMut(&mut B, &mut Rng)) -> Vec<B> {
            let mut v = vec![B::zeroed(); n];
            rng.fill(bytemuck::cast_slice_mut(&mut v));
            v.iter_mut().for_each(|b| fix(b, rng));
            v
        }
        let scale = |rng: &mut Rng, lo: f32, hi: f32| f16::from_f32(rng.uniform(lo, hi));
        match dtype {
            GgmlType::Q4_0 => {
                Blocks::Q4_0(blocks(n_elements / QK, rng, |b: &mut BlockQ4_0, r| b.d = scale(r, 0.002, 0.008)))
            }
            GgmlType::Q8_0 => {
                Blocks::Q8_0(blocks(n_elements / QK, rng, |b: &mut BlockQ8_0, r| b.d = scale(r, 1e-4, 4e-4)))
            }
            GgmlType::Q4K => Blocks::Q4K(blocks(n_elements / 256, rng, |b: &mut BlockQ4K, r| {
                b.d = scale(r, 1e-4, 4e-4);
                b.dmin = scale(r, 1e-4, 4e-4);
            })),
            _ => unreachable!("the tests' types"),
        }
    }

    fn matrix(&self, n_rows: usize, row_len: usize) -> WeightMatrix<'_> {
        let data = match self {
            Blocks::Q4_0(b) => WeightData::Q4_0(b),
            Blocks::Q8_0(b) => WeightData::Q8_0(b),
            Blocks::Q4K(b) => WeightData::Q4K(b),
        };
        WeightMatrix::new(data, n_rows, row_len).expect("the blocks were made for this shape")
    }
}

/// An expert's stored weights.
struct StoredExpert {
    gate: Blocks,
    up: Blocks,
    down: Blocks,
    biases: [Vec<f32>; 3],
}

/// Random experts of one weight type, widths `d` (n_embd) and `ff` (n_ff).
struct Model {
    d: usize,
    ff: usize,
    experts: Vec<StoredExpert>,
}

impl Model {
    fn random(dtype: GgmlType, n_experts: usize, d: usize, ff: usize, biases: bool, rng: &mut Rng) -> Model {
        let bias = |n: usize, rng: &mut Rng, size: f32| if biases { rng.floats(n, -size, size) } else { Vec::new() };
        let experts = (0..n_experts)
            .map(|_| StoredExpert {
                gate: Blocks::random(dtype, ff * d, rng),
                up: Blocks::random(dtype, ff * d, rng),
                down: Blocks::random(dtype, d * ff, rng),
                biases: [bias(ff, rng, 0.5), bias(ff, rng, 0.5), bias(d, rng, 0.05)],
            })
            .collect();
        Model { d, ff, experts }
    }

    /// The experts as the backend resolves them for `precision`: packed on the fast path.
    fn resolve(&self, precision: Precision) -> Vec<ExpertMatrices<'_>> {
        fn resolved(b: &Blocks, n_rows: usize, row_len: usize, precision: Precision) -> Matrix<'_> {
            let w = b.matrix(n_rows, row_len);
            match precision {
                Precision::Quantized8 => Matrix::Packed(PackedMatrix::pack(&w).expect("quantized types pack")),
                Precision::Float32 => Matrix::File(w),
            }
        }
        let m = |b, n_rows, row_len| resolved(b, n_rows, row_len, precision);
        let (d, ff) = (self.d, self.ff);
        self.experts
            .iter()
            .map(|e| ExpertMatrices {
                gate: m(&e.gate, ff, d),
                up: m(&e.up, ff, d),
                down: m(&e.down, d, ff),
                gate_bias: e.biases[0].clone().into(),
                up_bias: e.biases[1].clone().into(),
                down_bias: e.biases[2].clone().into(),
            })
            .collect()
    }
}

/// `t` rows routed to `k` experts each out of `n_experts`, with positive weights summing to about 1: distinct
/// experts per row (a top-k), or with `repeats` any, the same one twice included.
fn routing(t: usize, k: usize, n_experts: usize, repeats: bool, rng: &mut Rng) -> (Vec<u32>, Vec<f32>) {
    let mut selected = Vec::with_capacity(t * k);
    for _ in 0..t {
        let row = selected.len();
        while selected.len() < row + k {
            let e = rng.below(n_experts) as u32;
            if repeats || !selected[row..].contains(&e) {
                selected.push(e);
            }
        }
    }
    let mut weights = rng.floats(t * k, 0.05, 1.0);
    for w in weights.chunks_exact_mut(k) {
        let sum: f32 = w.iter().sum();
        w.iter_mut().for_each(|x| *x /= sum);
    }
    (selected, weights)
}

/// One call of `routed_experts` on a pool of `threads`, with a scratch sized for exactly this call.
#[allow(clippy::too_many_arguments)]
fn run(
    kernels: &Kernels,
    threads: usize,
    precision: Precision,
    experts: &[ExpertMatrices],
    activation: ExpertActivation,
    (d, ff): (usize, usize),
    input: &[f32],
    (selected, weights): (&[u32], &[f32]),
) -> Vec<f32> {
    let pool = ThreadPool::new(threads).expect("threads start");
    let t = input.len() / d;
    let k = selected.len().checked_div(t).unwrap_or(1);
    let mut scratch = ExpertScratch::new(t, k, d, ff, precision);
    let mut out = vec![f32::NAN; t * d];
    routed_experts(&pool, kernels, precision, experts, activation, input, selected, weights, &mut scratch, &mut out);
    out
}

/// `m · x` for one column, as the dense path runs it.
fn matvec(kernels: &Kernels, m: &Matrix, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; m.n_rows()];
    let mut view = OutRows::new(&mut out, 1, m.n_rows());
    let quantized = || {
        let mut q = vec![BlockQ8A::ZERO; x.len() / QK];
        kernels.quantize_row_q8a(x, &mut q);
        q
    };
    match m {
        Matrix::Packed(p) => kernels.matmul_packed(p, &quantized(), 1, &mut view),
        Matrix::File(w) => kernels.matmul_f32(w, x, 1, &mut view),
    }
    out
}

/// One row's output computed the plain way, expert after expert with one-column matmuls (no grouping, no
/// gathering, no parallel split): what `routed_experts` must reproduce bit for bit.
fn reference_row(
    kernels: &Kernels,
    experts: &[ExpertMatrices],
    activation: ExpertActivation,
    x: &[f32],
    selected: &[u32],
    weights: &[f32],
) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for (slot, (&e, &w)) in selected.iter().zip(weights).enumerate() {
        let ex = &experts[e as usize];
        let (mut gate, mut up) = (matvec(kernels, &ex.gate, x), matvec(kernels, &ex.up, x));
        if !ex.gate_bias.is_empty() {
            kernels.add_assign(&mut gate, &ex.gate_bias);
            kernels.add_assign(&mut up, &ex.up_bias);
        }
        let (mut hidden, ones) = (vec![0f32; gate.len()], vec![1f32; gate.len()]);
        activate(kernels, activation, &mut gate, &mut up, &ones, &mut hidden);
        let mut y = matvec(kernels, &ex.down, &hidden);
        if !ex.down_bias.is_empty() {
            y.iter_mut().zip(&ex.down_bias).for_each(|(y, b)| *y += b);
        }
        for (o, y) in out.iter_mut().zip(y) {
            *o = if slot == 0 { y * w } else { *o + y * w };
        }
    }
    out
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

const PRECISIONS: [Precision; 2] = [Precision::Quantized8, Precision::Float32];
/// Every variant; the clamped ones with limits that the tests' values cross often.
const ACTIVATIONS: [ExpertActivation; 4] = [
    ExpertActivation::Silu,
    ExpertActivation::GeluTanh,
    ExpertActivation::SwigluOai { alpha: 1.702, limit: 0.6 },
    ExpertActivation::SiluClamped { limit: 0.4 },
];

/// The test models: Q4_0, Q8_0 (widths whose row counts split unevenly into 16-row tasks) and Q4_K (whole
/// super-blocks), six experts, so that rows share experts.
fn models(rng: &mut Rng, biases: bool) -> Vec<Model> {
    vec![
        Model::random(GgmlType::Q4_0, 6, 64, 160, biases, rng),
        Model::random(GgmlType::Q8_0, 6, 96, 224, biases, rng),
        Model::random(GgmlType::Q4K, 6, 256, 512, biases, rng),
    ]
}

#[test]
fn matches_the_plain_per_row_computation_bit_for_bit() {
    let mut rng = Rng(1);
    let kernels = crate::backend::cpu::kernels::kernels();
    for (model_index, model) in models(&mut rng, true).iter().enumerate() {
        for precision in PRECISIONS {
            let experts = model.resolve(precision);
            for (t, k, repeats) in [(1, 2, false), (3, 3, true), (17, 2, false), (64, 3, true)] {
                let input = rng.floats(t * model.d, -4.0, 4.0);
                let (selected, weights) = routing(t, k, experts.len(), repeats, &mut rng);
                let act = ACTIVATIONS[rng.below(ACTIVATIONS.len())];
                for threads in [1, 2] {
                    let shapes = (model.d, model.ff);
                    let routes = (&selected[..], &weights[..]);
                    let out = run(kernels, threads, precision, &experts, act, shapes, &input, routes);
                    for (r, got) in out.chunks_exact(model.d).enumerate() {
                        let x = &input[r * model.d..(r + 1) * model.d];
                        let want =
                            reference_row(kernels, &experts, act, x, &selected[r * k..][..k], &weights[r * k..][..k]);
                        assert_eq!(
                            bits(got),
                            bits(&want),
                            "model {model_index} {precision:?} T={t} k={k} {act:?} threads={threads} row {r}"
                        );
                    }
                }
            }
        }
    }
}

/// A matrix dequantized, row after row.
fn dense(m: &Matrix, row_len: usize) -> Vec<f32> {
    let mut out = vec![0f32; m.n_rows() * row_len];
    for (r, row) in out.chunks_exact_mut(row_len).enumerate() {
        m.dequantize_row(r, row);
    }
    out
}

/// The activation's formula in f64.
fn act_f64(activation: ExpertActivation, g: f64, u: f64) -> f64 {
    let silu = |g: f64| g / (1.0 + (-g).exp());
    match activation {
        ExpertActivation::Silu => silu(g) * u,
        ExpertActivation::GeluTanh => {
            0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g)).tanh()) * u
        }
        ExpertActivation::SwigluOai { alpha, limit } => {
            let (alpha, limit) = (f64::from(alpha), f64::from(limit));
            let x = g.min(limit);
            x / (1.0 + (-alpha * x).exp()) * (u.clamp(-limit, limit) + 1.0)
        }
        ExpertActivation::SiluClamped { limit } => {
            let limit = f64::from(limit);
            silu(g).min(limit) * u.clamp(-limit, limit)
        }
    }
}

/// The experts' formula in f64 over the dequantized weights (`dense[e]`: gate, up, down), biases included when
/// `biases`: the independent check of what the activations, biases and weights mean.
#[allow(clippy::too_many_arguments)]
fn reference_f64(
    experts: &[ExpertMatrices],
    dense: &[[Vec<f32>; 3]],
    activation: ExpertActivation,
    biases: bool,
    (d, ff): (usize, usize),
    input: &[f32],
    selected: &[u32],
    weights: &[f32],
) -> Vec<f64> {
    let k = selected.len() / (input.len() / d);
    let dot = |w: &[f32], x: &[f64]| w.iter().zip(x).map(|(&w, &x)| f64::from(w) * x).sum::<f64>();
    let bias = |b: &[f32], i: usize| if biases && !b.is_empty() { f64::from(b[i]) } else { 0.0 };
    let mut out = vec![0f64; input.len()];
    for (p, (&e, &w)) in selected.iter().zip(weights).enumerate() {
        let (ex, [gate, up, down]) = (&experts[e as usize], &dense[e as usize]);
        let t = p / k;
        let x: Vec<f64> = input[t * d..(t + 1) * d].iter().map(|&v| f64::from(v)).collect();
        let hidden: Vec<f64> = (0..ff)
            .map(|i| {
                let g = dot(&gate[i * d..(i + 1) * d], &x) + bias(&ex.gate_bias, i);
                let u = dot(&up[i * d..(i + 1) * d], &x) + bias(&ex.up_bias, i);
                act_f64(activation, g, u)
            })
            .collect();
        for j in 0..d {
            let y = dot(&down[j * ff..(j + 1) * ff], &hidden) + bias(&ex.down_bias, j);
            out[t * d + j] += f64::from(w) * y;
        }
    }
    out
}

/// `max |got − want| / max |want|`.
fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let err = got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).abs()).fold(0.0, f64::max);
    err / want.iter().map(|w| w.abs()).fold(f64::MIN_POSITIVE, f64::max)
}

#[test]
fn every_activation_and_the_biases_follow_their_formulas() {
    let mut rng = Rng(2);
    let kernels = crate::backend::cpu::kernels::kernels();
    for model in models(&mut rng, true) {
        let (d, ff) = (model.d, model.ff);
        let (t, k) = (5, 2);
        let input = rng.floats(t * d, -4.0, 4.0);
        let (selected, weights) = routing(t, k, model.experts.len(), false, &mut rng);
        for precision in PRECISIONS {
            let experts = model.resolve(precision);
            let dense: Vec<[Vec<f32>; 3]> =
                experts.iter().map(|e| [dense(&e.gate, d), dense(&e.up, d), dense(&e.down, ff)]).collect();
            // The fast path quantizes the input and the hidden rows to 8 bits (measured: 0.2 % to 1 % of the
            // output's scale); the precise path is within f32 rounding (about 2e-7).
            let tol = if precision == Precision::Float32 { 1e-5 } else { 1.5e-2 };
            for (i, act) in ACTIVATIONS.into_iter().enumerate() {
                let out = run(kernels, 2, precision, &experts, act, (d, ff), &input, (&selected, &weights));
                let reference =
                    |act, biases| reference_f64(&experts, &dense, act, biases, (d, ff), &input, &selected, &weights);
                let case = format!("{:?} {precision:?} {act:?}", model.experts[0].gate.matrix(ff, d).data().dtype());
                let err = relative_error(&out, &reference(act, true));
                assert!(err <= tol, "{case}: relative error {err:e} above {tol:e}");
                if precision == Precision::Quantized8 {
                    continue;
                }
                // The precise path's tolerance tells the variants apart, and the biases matter (measured: 2e-2
                // at least).
                let other = ACTIVATIONS[(i + 1) % ACTIVATIONS.len()];
                let err_other = relative_error(&out, &reference(other, true));
                assert!(err_other > 100.0 * tol, "{case}: as close to {other:?} ({err_other:e})");
                let err_unbiased = relative_error(&out, &reference(act, false));
                assert!(err_unbiased > 100.0 * tol, "{case}: as close without biases ({err_unbiased:e})");
            }
        }
    }
}

#[test]
fn gpt_oss_activation_is_within_a_few_ulp_of_its_formula() {
    let (alpha, limit) = (1.702f32, 7.0f32);
    let act = ExpertActivation::SwigluOai { alpha, limit };
    let mut rng = Rng(10);
    let n = 4096;
    let (gate, up) = (rng.floats(n, -12.0, 12.0), rng.floats(n, -12.0, 12.0));
    for kernels in supported_kernels() {
        let (mut g, mut u, mut out) = (gate.clone(), up.clone(), vec![0f32; n]);
        activate(kernels, act, &mut g, &mut u, &vec![1.0; n], &mut out);
        for ((&g, &u), &got) in gate.iter().zip(&up).zip(&out) {
            // llama.cpp's order in f32 with exact operations after its exponent `alpha · (−x)`, which is rounded
            // to f32 there as here (e^z amplifies that rounding |z|-fold).
            let x = g.min(limit);
            let z = f64::from(alpha * -x);
            let want = f64::from(x) / (1.0 + z.exp()) * (f64::from(u.clamp(-limit, limit)) + 1.0);
            let err = (f64::from(got) - want).abs();
            // Relative to the result (each factor's error is relative), with a floor for a result near 0.
            let bound = 8.0 * f64::from(f32::EPSILON) * want.abs().max(1e-30);
            assert!(err <= bound, "{}: act({g}, {u}) = {got}, want {want}", kernels.name);
        }
        // The clamps: gate above only, up on both sides.
        let at = |g: f32, u: f32| {
            let mut out = [0f32];
            activate(kernels, act, &mut [g], &mut [u], &[1.0], &mut out);
            out[0]
        };
        let sigmoid = |z: f64| 1.0 / (1.0 + (-z).exp());
        for (g, u, x, y) in [(10.0, 10.0, 7.0, 7.0), (-10.0, -10.0, -10.0, -7.0), (1.0, 0.5, 1.0, 0.5)] {
            let want = x * sigmoid(1.702 * x) * (y + 1.0);
            assert!((f64::from(at(g as f32, u as f32)) - want).abs() <= 1e-6 * want.abs(), "({g}, {u})");
        }
        assert_eq!(at(0.0, 3.0), 0.0);
    }
}

#[test]
fn a_row_gets_the_same_bits_alone_and_in_any_batch() {
    let mut rng = Rng(3);
    let kernels = crate::backend::cpu::kernels::kernels();
    for model in models(&mut rng, false) {
        let (d, ff, k) = (model.d, model.ff, 2);
        // 100 candidate rows with their routes; a few of them are followed into batches.
        let rows = rng.floats(100 * d, -4.0, 4.0);
        let (selected, weights) = routing(100, k, model.experts.len(), false, &mut rng);
        for precision in PRECISIONS {
            let experts = model.resolve(precision);
            for target in [0, 37, 99] {
                let batch_of = |members: &[usize]| {
                    let input: Vec<f32> = members.iter().flat_map(|&m| rows[m * d..(m + 1) * d].to_vec()).collect();
                    let sel: Vec<u32> = members.iter().flat_map(|&m| selected[m * k..(m + 1) * k].to_vec()).collect();
                    let w: Vec<f32> = members.iter().flat_map(|&m| weights[m * k..(m + 1) * k].to_vec()).collect();
                    (input, sel, w)
                };
                let alone = {
                    let (input, sel, w) = batch_of(&[target]);
                    run(kernels, 1, precision, &experts, ExpertActivation::Silu, (d, ff), &input, (&sel, &w))
                };
                for (t, threads) in [(1, 2), (3, 1), (3, 2), (17, 1), (17, 2), (64, 1), (64, 2)] {
                    let mut members: Vec<usize> = (0..t).map(|_| rng.below(100)).collect();
                    let at = rng.below(t);
                    members[at] = target;
                    let (input, sel, w) = batch_of(&members);
                    let act = ExpertActivation::Silu;
                    let out = run(kernels, threads, precision, &experts, act, (d, ff), &input, (&sel, &w));
                    assert_eq!(
                        bits(&out[at * d..(at + 1) * d]),
                        bits(&alone),
                        "{precision:?} row {target} at {at} of {t}, {threads} threads"
                    );
                }
            }
        }
    }
}

#[test]
fn every_kernel_path_computes_the_scalar_bits() {
    let mut rng = Rng(4);
    let scalar = kernels_named("scalar").expect("the scalar path always runs");
    let paths: Vec<&Kernels> = supported_kernels().filter(|k| k.name != "scalar").collect();
    for model in models(&mut rng, true) {
        let (d, ff) = (model.d, model.ff);
        for precision in PRECISIONS {
            let experts = model.resolve(precision);
            for (t, act) in [1, 17].into_iter().flat_map(|t| ACTIVATIONS.map(|a| (t, a))) {
                let input = rng.floats(t * d, -4.0, 4.0);
                let (selected, weights) = routing(t, 3, experts.len(), false, &mut rng);
                let routes = (&selected[..], &weights[..]);
                let want = run(scalar, 2, precision, &experts, act, (d, ff), &input, routes);
                for &path in &paths {
                    let got = run(path, 2, precision, &experts, act, (d, ff), &input, routes);
                    assert_eq!(bits(&got), bits(&want), "{} vs scalar: {precision:?} T={t} {act:?}", path.name);
                }
            }
        }
    }
}

#[test]
fn hundreds_of_experts_in_one_step_run_in_several_rounds_of_tasks() {
    let mut rng = Rng(5);
    let kernels = crate::backend::cpu::kernels::kernels();
    let model = Model::random(GgmlType::Q8_0, 300, 64, 32, false, &mut rng);
    let (d, ff, t, k) = (model.d, model.ff, 64, 8);
    let input = rng.floats(t * d, -4.0, 4.0);
    let (selected, weights) = routing(t, k, model.experts.len(), false, &mut rng);
    let mut distinct = selected.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(2 * distinct.len() > MAX_TASKS, "the gate and up matmuls alone fill the task slots");
    for precision in PRECISIONS {
        let experts = model.resolve(precision);
        let act = ExpertActivation::Silu;
        let out = run(kernels, 2, precision, &experts, act, (d, ff), &input, (&selected, &weights));
        for (r, got) in out.chunks_exact(d).enumerate() {
            let (x, s, w) = (&input[r * d..(r + 1) * d], &selected[r * k..(r + 1) * k], &weights[r * k..(r + 1) * k]);
            assert_eq!(bits(got), bits(&reference_row(kernels, &experts, act, x, s, w)), "{precision:?} row {r}");
        }
    }
}

#[test]
fn no_rows_is_nothing_to_do() {
    let mut rng = Rng(6);
    let model = Model::random(GgmlType::Q4_0, 2, 64, 32, false, &mut rng);
    let experts = model.resolve(Precision::Quantized8);
    let kernels = crate::backend::cpu::kernels::kernels();
    let out = run(kernels, 2, Precision::Quantized8, &experts, ExpertActivation::Silu, (64, 32), &[], (&[], &[]));
    assert!(out.is_empty());
}

#[test]
#[should_panic(expected = "selects expert 2 of 2")]
fn an_expert_out_of_range_is_refused() {
    let mut rng = Rng(7);
    let model = Model::random(GgmlType::Q4_0, 2, 64, 32, false, &mut rng);
    let experts = model.resolve(Precision::Quantized8);
    let kernels = crate::backend::cpu::kernels::kernels();
    let input = vec![0.5; 64];
    run(kernels, 1, Precision::Quantized8, &experts, ExpertActivation::Silu, (64, 32), &input, (&[0, 2], &[0.5; 2]));
}

/// The median time per call of each of `cases`, timed round-robin: 15 rounds of a batch of at least 100 ms per
/// case, so that bursts of load from elsewhere (the machine is shared) fall on every case alike.
fn time_interleaved(cases: &mut [&mut dyn FnMut()]) -> Vec<std::time::Duration> {
    const BATCH: std::time::Duration = std::time::Duration::from_millis(100);
    cases.iter_mut().for_each(|f| f());
    let mut times = vec![Vec::new(); cases.len()];
    for _ in 0..15 {
        for (f, times) in cases.iter_mut().zip(&mut times) {
            let (start, mut calls) = (std::time::Instant::now(), 0u32);
            while start.elapsed() < BATCH {
                f();
                calls += 1;
            }
            times.push(start.elapsed() / calls);
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect()
}

/// Prints a timing: time per call, and the rate over `bytes` read per call.
fn report(label: &str, time: std::time::Duration, bytes: f64) {
    let secs = time.as_secs_f64();
    println!("{label}: {:8.1} us/call, {:5.1} MB read/call, {:5.1} GB/s", secs * 1e6, bytes / 1e6, bytes / secs / 1e9);
}

/// Qwen3-30B-A3B's experts (n_embd 2048, n_ff 768, 128 experts, 8 per token) in Q4_K, on 1 and 2 threads: time
/// per call and the rate over the bytes of the experts a call reads, next to matmuls over as many bytes:
/// - `dense`: one matrix of the 24 matrices' rows (a dense FFN's matvec);
/// - `24 matmuls`: the selected experts' 24 matrices, one `parallel_matmul` region each;
/// - `fused`: the 24 matrices as row ranges of three matrices holding every expert (one tensor of the file
///   each), two regions like `routed_experts`'s, matmuls only.
///
/// "stream" rotates over 64 routings of all 128 experts (345 MB, as much again for each other layout: memory,
/// or a large L3); "hot" repeats one call's experts (21.8 MB).
///
/// `cargo test --release --lib experts::tests::timing -- --ignored --nocapture`
#[test]
#[ignore = "a timing: prints numbers, asserts nothing"]
fn timing_qwen3_30b_a3b_experts() {
    use crate::backend::cpu::parallel::{parallel_matmul, MatmulJob};
    const N_EXPERTS: usize = 128;
    const K: usize = 8;
    const D: usize = 2048;
    const FF: usize = 768;
    let mut rng = Rng(8);
    let mut packed = |n_rows: usize, row_len: usize| {
        let blocks = Blocks::random(GgmlType::Q4K, n_rows * row_len, &mut rng);
        Matrix::Packed(PackedMatrix::pack(&blocks.matrix(n_rows, row_len)).expect("Q4_K packs"))
    };
    let experts: Vec<ExpertMatrices> = (0..N_EXPERTS)
        .map(|_| ExpertMatrices {
            gate: packed(FF, D),
            up: packed(FF, D),
            down: packed(D, FF),
            gate_bias: Box::default(),
            up_bias: Box::default(),
            down_bias: Box::default(),
        })
        .collect();
    // Transparent huge pages back a packed matrix only where its mapping holds whole 2 MiB pages: the dense
    // and fused matrices, not an expert's 0.9 MB ones. Linux's count of them:
    let huge_pages = || {
        let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
        rollup.lines().find(|l| l.starts_with("AnonHugePages")).unwrap_or("AnonHugePages: ?").to_owned()
    };
    println!("after packing the experts: {}", huge_pages());
    let dense: Vec<Matrix> = (0..16).map(|_| packed(3 * K * FF, D)).collect();
    let fused = [packed(N_EXPERTS * FF, D), packed(N_EXPERTS * FF, D), packed(N_EXPERTS * D, FF)];
    println!("after packing the dense and fused matrices: {}", huge_pages());
    /// The rows of the (sorted, distinct) `selected` experts of a fused matrix's one-column output, `n_rows`
    /// each, as disjoint views.
    fn rows_of<'b>(buf: &'b mut [f32], n_rows: usize, selected: &[u32; K]) -> [OutRows<'b>; K] {
        let stride = buf.len();
        let mut rest = Some(OutRows::new(buf, 1, stride));
        selected.map(|e| {
            let (_, mine) = rest.take().expect("a view is left").split_at(e as usize * n_rows);
            let (mine, tail) = mine.split_at((e as usize + 1) * n_rows);
            rest = Some(tail);
            mine
        })
    }
    let expert_bytes =
        |e: usize| [&experts[e].gate, &experts[e].up, &experts[e].down].map(Matrix::n_bytes).iter().sum::<usize>();
    let kernels = crate::backend::cpu::kernels::kernels();
    let max_t = 64;
    let input = rng.floats(max_t * D, -1.0, 1.0);
    let routes: Vec<(Vec<u32>, Vec<f32>)> = (0..64).map(|_| routing(max_t, K, N_EXPERTS, false, &mut rng)).collect();
    let mut act = vec![BlockQ8A::ZERO; D / QK];
    kernels.quantize_row_q8a(&input[..D], &mut act);
    let mut hidden_act = vec![BlockQ8A::ZERO; FF / QK];
    kernels.quantize_row_q8a(&input[..FF], &mut hidden_act);
    println!("kernels {}, Q4_K, n_embd {D}, n_ff {FF}, {N_EXPERTS} experts, k {K}", kernels.name);
    /// `routed_experts` over the first `t` rows, on routing `call % 64` (`rotate`) or 0, counting calls and the
    /// bytes of the experts they read.
    struct ExpertsCase {
        t: usize,
        rotate: bool,
        scratch: ExpertScratch,
        out: Vec<f32>,
        calls: usize,
        bytes: usize,
    }
    let new_case = |t, rotate| ExpertsCase {
        t,
        rotate,
        scratch: ExpertScratch::new(t, K, D, FF, Precision::Quantized8),
        out: vec![0f32; t * D],
        calls: 0,
        bytes: 0,
    };
    let run_case = |case: &mut ExpertsCase, pool: &ThreadPool| {
        let (selected, weights) = &routes[if case.rotate { case.calls % routes.len() } else { 0 }];
        let (selected, weights) = (&selected[..case.t * K], &weights[..case.t * K]);
        let mut distinct = [false; N_EXPERTS];
        selected.iter().for_each(|&e| distinct[e as usize] = true);
        case.bytes += (0..N_EXPERTS).filter(|&e| distinct[e]).map(expert_bytes).sum::<usize>();
        case.calls += 1;
        let (x, act, precision) = (&input[..case.t * D], ExpertActivation::Silu, Precision::Quantized8);
        let (scratch, out) = (&mut case.scratch, &mut case.out);
        routed_experts(pool, kernels, precision, &experts, act, x, selected, weights, scratch, out);
    };
    let bytes = (expert_bytes(0) * K) as f64;
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads).expect("threads start");
        let (mut stream, mut hot) = (new_case(1, true), new_case(1, false));
        let mut separate_calls = 0;
        let mut buf = vec![0f32; D];
        // The selected experts' 24 matrices, one `parallel_matmul` region each.
        let mut separate = || {
            let (selected, _) = &routes[separate_calls % routes.len()];
            separate_calls += 1;
            for &e in &selected[..K] {
                let ex = &experts[e as usize];
                for (m, a) in [(&ex.gate, &act[..]), (&ex.up, &act[..]), (&ex.down, &hidden_act[..])] {
                    let out = &mut buf[..m.n_rows()];
                    parallel_matmul(&pool, kernels, Activations::Q8(a), 1, &mut [MatmulJob { weights: m, out }]);
                }
            }
        };
        // The same rows of the fused matrices, in two regions as `routed_experts` runs them; `state`: the calls so
        // far and the three outputs.
        type FusedState = (usize, Vec<f32>, Vec<f32>, Vec<f32>);
        let new_state =
            || -> FusedState { (0, vec![0f32; N_EXPERTS * FF], vec![0f32; N_EXPERTS * FF], vec![0f32; N_EXPERTS * D]) };
        let fused_case = |rotate: bool, (calls, gate_out, up_out, down_out): &mut FusedState| {
            let route = if rotate { *calls % routes.len() } else { 0 };
            let mut selected: [u32; K] = routes[route].0[..K].try_into().expect("K experts");
            selected.sort_unstable();
            *calls += 1;
            let mut region = MatmulRegion::new(&pool, kernels, 2 * K * FF * 2);
            let (gates, ups) = (rows_of(gate_out, FF, &selected), rows_of(up_out, FF, &selected));
            for (g, u) in gates.into_iter().zip(ups) {
                region.push(ExpertMatmul { weights: &fused[0], act: Activations::Q8(&act), out: g });
                region.push(ExpertMatmul { weights: &fused[1], act: Activations::Q8(&act), out: u });
            }
            region.finish();
            let mut region = MatmulRegion::new(&pool, kernels, K * D * 2);
            for d in rows_of(down_out, D, &selected) {
                region.push(ExpertMatmul { weights: &fused[2], act: Activations::Q8(&hidden_act), out: d });
            }
            region.finish();
        };
        let (mut fused_stream, mut fused_hot) = (new_state(), new_state());
        let (mut dense_calls, mut dense_out, mut hot_out) = (0, vec![0f32; 3 * K * FF], vec![0f32; 3 * K * FF]);
        let mut dense_stream = || {
            let job = MatmulJob { weights: &dense[dense_calls % dense.len()], out: &mut dense_out };
            dense_calls += 1;
            parallel_matmul(&pool, kernels, Activations::Q8(&act), 1, &mut [job]);
        };
        let mut dense_hot = || {
            let job = MatmulJob { weights: &dense[0], out: &mut hot_out };
            parallel_matmul(&pool, kernels, Activations::Q8(&act), 1, &mut [job]);
        };
        let times = time_interleaved(&mut [
            &mut || run_case(&mut stream, &pool),
            &mut || run_case(&mut hot, &pool),
            &mut separate,
            &mut || fused_case(true, &mut fused_stream),
            &mut || fused_case(false, &mut fused_hot),
            &mut dense_stream,
            &mut dense_hot,
        ]);
        let labels =
            ["experts    stream", "experts    hot   ", "24 matmuls stream", "fused      stream", "fused      hot   "];
        for (label, time) in labels.iter().zip(&times) {
            report(&format!("{label} T= 1 threads={threads}"), *time, bytes);
        }
        report(&format!("dense      stream T= 1 threads={threads}"), times[5], dense[0].n_bytes() as f64);
        report(&format!("dense      hot    T= 1 threads={threads}"), times[6], dense[0].n_bytes() as f64);
        for t in [4, 64] {
            let mut case = new_case(t, true);
            let time = time_interleaved(&mut [&mut || run_case(&mut case, &pool)])[0];
            report(
                &format!("experts    stream T={t:2} threads={threads}"),
                time,
                case.bytes as f64 / case.calls as f64,
            );
        }
    }
}

/// The gated activation's cost per element of each variant at gpt-oss's width (2880, 4 experts per token).
///
/// `cargo test --release --lib experts::tests::timing -- --ignored --nocapture`
#[test]
#[ignore = "a timing: prints numbers, asserts nothing"]
fn timing_activations() {
    let mut rng = Rng(9);
    let n = 4 * 2880;
    let (gate, up, ones) = (rng.floats(n, -8.0, 8.0), rng.floats(n, -8.0, 8.0), vec![1f32; n]);
    let (mut g, mut u, mut out) = (gate.clone(), up.clone(), vec![0f32; n]);
    for kernels in supported_kernels() {
        for act in [
            ExpertActivation::Silu,
            ExpertActivation::GeluTanh,
            ExpertActivation::SwigluOai { alpha: 1.702, limit: 7.0 },
            ExpertActivation::SiluClamped { limit: 7.0 },
        ] {
            let time = time_interleaved(&mut [&mut || {
                // Fresh rows each call: gpt-oss's variant overwrites them (the copy is timed too).
                g.copy_from_slice(&gate);
                u.copy_from_slice(&up);
                activate(kernels, act, &mut g, &mut u, &ones, &mut out)
            }])[0];
            println!("{:6} {act:?}: {:6.2} ns/element", kernels.name, time.as_secs_f64() * 1e9 / n as f64);
        }
    }
}
