//! The CPU forward pass of the real model against two references:
//!
//! - float64 logits at every prompt position of 4 chat prompts (`reference_logits.{json,f32}`, written by
//!   `scripts/reference/make_reference_logits.py` from the dequantized weights): the precise path must match them
//!   closely, the fast path is measured against them;
//! - llama.cpp's greedy distributions (`greedy_ref.json`), fed back token by token (teacher forcing), so that one
//!   early disagreement does not hide how the fast path does at every later position.
//!
//! Logits come from one-token steps, one per position: the backend returns logits only for the last token of each
//! sequence's chunk, so a prompt chunk would yield one row. The cases run side by side in one batch (each in its own
//! KV blocks), which makes each step a 4- or 8-token matmul instead of 4 or 8 one-token ones: the weights, which
//! dominate a step's cost, are read once per step. Batching changes no logit (`batch_invariance.rs`), so each case
//! is judged as if it ran alone.

use ember::backend::KvCacheTypes;
use serde::Deserialize;

use ember::backend::cpu::kernels::{kernels, KernelOverrides, Kernels};
use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::model::llama::{forward, LlamaConfig, SeqChunk};
use ember::model::{Model, TokenId};

#[path = "common/logits.rs"]
mod logits;
use logits::{argmax, softmax};

const REFERENCE_LOGITS_JSON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/reference_logits.json");
const REFERENCE_LOGITS_F32: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/reference_logits.f32");
const GREEDY_REF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/greedy_ref.json");

/// Positions per KV block of the test backends.
const KV_BLOCK_SIZE: usize = 16;
/// Room for the longest fed sequence of the fixtures (56 prompt tokens + 63 reference tokens).
const MAX_SEQ_LEN: usize = 128;
/// Most sequences run side by side (the 8 greedy cases).
const MAX_SEQS: usize = 8;

/// `reference_logits.json`: which prompts, and which vocabulary entries each position's row stores.
#[derive(Deserialize)]
struct ReferenceLogits {
    /// `[1024]` vocabulary ids, the same for every position.
    subset: Vec<usize>,
    /// How many largest logits each position stores after the subset (64).
    top: usize,
    cases: Vec<ReferenceCase>,
}

#[derive(Deserialize)]
struct ReferenceCase {
    greedy_ref_case: usize,
    prompt_ids: Vec<TokenId>,
    /// `[positions][top]`: the ids of each position's largest reference logits, largest first.
    top_ids: Vec<Vec<usize>>,
}

/// `greedy_ref.json` (see `shared/reference/README.md`).
#[derive(Deserialize)]
struct GreedyRef {
    cases: Vec<GreedyCase>,
}

#[derive(Deserialize)]
struct GreedyCase {
    message: String,
    prompt_ids: Vec<TokenId>,
    /// The greedy continuation, the final `<|im_end|>` included when generation stopped on it.
    generated_ids: Vec<TokenId>,
    /// `[generated_ids.len()]`: the distribution that produced each generated token.
    top5_per_position: Vec<RefPosition>,
}

#[derive(Deserialize)]
struct RefPosition {
    /// The 5 most likely tokens, most likely first; `prob` is the softmax over the full vocabulary.
    top5: Vec<RefToken>,
}

#[derive(Deserialize)]
struct RefToken {
    id: TokenId,
    prob: f64,
}

fn load_model() -> Model {
    Model::load(None).unwrap_or_else(|e| panic!("{e}"))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &str) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("cannot parse {path}: {e}"))
}

/// A backend on `kernels`, one thread: the tests of this file run in parallel with each other, one core each.
fn backend_on<'m>(model: &'m Model, precision: Precision, kernels: &'static Kernels) -> CpuBackend<'m> {
    let options = CpuBackendOptions {
        threads: 1,
        max_batch_tokens: 512,
        kv_block_size: KV_BLOCK_SIZE,
        kv_num_blocks: MAX_SEQS * MAX_SEQ_LEN / KV_BLOCK_SIZE,
        kv_window_blocks: None,
        precision,
        kv_cache: KvCacheTypes::default(),
    };
    CpuBackend::with_kernels(&model.file, model.config.clone(), options, kernels).unwrap_or_else(|e| panic!("{e}"))
}

/// A sequence to run: `tokens[..first_logits]` is prefilled in one chunk, then each later token is fed alone, so
/// that every position from `first_logits` on yields its logits.
struct Feed<'a> {
    tokens: &'a [TokenId],
    first_logits: usize,
}

/// Runs `feeds` side by side on `backend`, each in its own KV blocks, and calls `visit(feed, pos, logits)` with the
/// logits after `tokens[..=pos]` (`[vocab]`) for every `pos` from `first_logits` on.
fn visit_logits(
    config: &LlamaConfig,
    backend: &mut CpuBackend<'_>,
    feeds: &[Feed<'_>],
    mut visit: impl FnMut(usize, usize, &[f32]),
) {
    let blocks_per_seq = MAX_SEQ_LEN / KV_BLOCK_SIZE;
    let tables: Vec<Vec<u32>> =
        (0..feeds.len()).map(|i| (i * blocks_per_seq..(i + 1) * blocks_per_seq).map(|b| b as u32).collect()).collect();
    assert!(feeds.len() <= MAX_SEQS, "{} sequences, room for {MAX_SEQS}", feeds.len());
    for feed in feeds {
        assert!(feed.tokens.len() <= MAX_SEQ_LEN, "{} tokens, room for {MAX_SEQ_LEN}", feed.tokens.len());
        assert!(feed.first_logits < feed.tokens.len(), "no position to return logits for");
    }

    let prefill: Vec<SeqChunk<'_>> = feeds
        .iter()
        .zip(&tables)
        .filter(|(f, _)| f.first_logits > 0)
        .map(|(f, table)| SeqChunk {
            tokens: &f.tokens[..f.first_logits],
            start_pos: 0,
            block_table: table,
            window_table: &[],
            logit_rows: 0,
        })
        .collect();
    if !prefill.is_empty() {
        forward(config, backend, &prefill, &mut []).unwrap_or_else(|e| panic!("prefill: {e}"));
    }

    let vocab = config.vocab_size;
    let mut logits = vec![0f32; feeds.len() * vocab];
    for step in 0.. {
        // `(feed index, position)` of each sequence still running, in batch order.
        let running: Vec<(usize, usize)> = feeds
            .iter()
            .enumerate()
            .map(|(i, f)| (i, f.first_logits + step))
            .filter(|&(i, pos)| pos < feeds[i].tokens.len())
            .collect();
        if running.is_empty() {
            break;
        }
        let batch: Vec<SeqChunk<'_>> = running
            .iter()
            .map(|&(i, pos)| SeqChunk {
                tokens: &feeds[i].tokens[pos..=pos],
                start_pos: pos,
                block_table: &tables[i],
                window_table: &[],
                logit_rows: 1,
            })
            .collect();
        let out = &mut logits[..running.len() * vocab];
        forward(config, backend, &batch, out).unwrap_or_else(|e| panic!("step {step}: {e}"));
        for (&(i, pos), row) in running.iter().zip(out.chunks_exact(vocab)) {
            visit(i, pos, row);
        }
    }
}

/// `‖ours − ref‖ / ‖ref‖` over the stored entries of one position: `reference` holds the subset's logits then the
/// `top_ids`' logits.
fn relative_error(ours: &[f32], subset: &[usize], top_ids: &[usize], reference: &[f32]) -> f64 {
    let ids = subset.iter().chain(top_ids);
    let (mut diff, mut norm) = (0f64, 0f64);
    for (&id, &r) in ids.zip(reference) {
        diff += (f64::from(ours[id]) - f64::from(r)).powi(2);
        norm += f64::from(r).powi(2);
    }
    (diff / norm).sqrt()
}

/// The relative error at every prompt position of the reference prompts, case after case.
fn errors_against_float64(precision: Precision, kernels: &'static Kernels) -> Vec<f64> {
    let model = load_model();
    let meta: ReferenceLogits = read_json(REFERENCE_LOGITS_JSON);
    let bytes =
        std::fs::read(REFERENCE_LOGITS_F32).unwrap_or_else(|e| panic!("cannot read {REFERENCE_LOGITS_F32}: {e}"));
    let row_len = meta.subset.len() + meta.top;
    // `[case][position][row_len]`, float32 little-endian, case after case.
    let reference: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let positions: usize = meta.cases.iter().map(|c| c.prompt_ids.len()).sum();
    assert_eq!(reference.len(), positions * row_len, "{REFERENCE_LOGITS_F32} does not match its JSON");
    let case_start: Vec<usize> =
        meta.cases.iter().scan(0, |at, c| Some(std::mem::replace(at, *at + c.prompt_ids.len()))).collect();

    let feeds: Vec<Feed<'_>> = meta.cases.iter().map(|c| Feed { tokens: &c.prompt_ids, first_logits: 0 }).collect();
    let mut errors = vec![f64::NAN; positions];
    let mut backend = backend_on(&model, precision, kernels);
    visit_logits(&model.config, &mut backend, &feeds, |case, pos, row| {
        let c = &meta.cases[case];
        assert_eq!(c.top_ids[pos].len(), meta.top);
        let at = case_start[case] + pos;
        errors[at] = relative_error(row, &meta.subset, &c.top_ids[pos], &reference[at * row_len..(at + 1) * row_len]);
    });
    for (c, &start) in meta.cases.iter().zip(&case_start) {
        let e = &errors[start..start + c.prompt_ids.len()];
        // The prompts share their first ~25 positions (the default system prompt), hence the same maxima there.
        let (worst, max) = e.iter().enumerate().fold((0, 0f64), |m, (i, &x)| if x > m.1 { (i, x) } else { m });
        println!(
            "{precision:?}, greedy_ref case {}: {} positions, median relative error {:.2e}, max {max:.2e} at \
             position {worst}",
            c.greedy_ref_case,
            e.len(),
            median(e)
        );
    }
    errors
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// The precise path's bounds. Issue 3 asked for 1e-3 relative error at every position; its arithmetic is f32
/// throughout and its KV cache stores f32 (`kv_cache.rs`), and it measures far better: median 9.4e-7, max 5.1e-6
/// over the 149 positions, on every kernel path (8.9e-7 and 3.3e-6 under an earlier summation order). (With an f16
/// cache the error was median 7e-4, max 5e-3: f16 rounding of keys and values dominates, which is why the precise
/// path keeps f32.) The bounds sit 10× above the measurements, so that a kernel erring far below 8-bit activation
/// noise still fails (`the_bounds_catch_broken_kernels`: a softmax exponential off by 6e-4 gives median 7.5e-5).
const PRECISE_MEDIAN_BOUND: f64 = 1e-5;
const PRECISE_POSITION_BOUND: f64 = 5e-5;

/// `x ≤ bound`, false for NaN: every bound below fails a NaN.
fn within(x: f64, bound: f64) -> bool {
    x <= bound
}

/// The precise path's bounds over the relative errors of every position; `Err` names the first violation.
fn precise_verdict(errors: &[f64]) -> Result<(), String> {
    for (i, &e) in errors.iter().enumerate() {
        if !within(e, PRECISE_POSITION_BOUND) {
            return Err(format!(
                "position {i} (counted over all cases): relative error {e:.3e} > {PRECISE_POSITION_BOUND:e}"
            ));
        }
    }
    let med = median(errors);
    if !within(med, PRECISE_MEDIAN_BOUND) {
        return Err(format!("median relative error {med:.3e} > {PRECISE_MEDIAN_BOUND:e}"));
    }
    Ok(())
}

#[test]
fn precise_path_matches_float64_logits_at_every_position() {
    let errors = errors_against_float64(Precision::Float32, kernels());
    println!(
        "Float32: {} positions, median relative error {:.2e}, max {:.2e}",
        errors.len(),
        median(&errors),
        max(&errors)
    );
    precise_verdict(&errors).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn fast_path_error_against_float64_is_reported() {
    let errors = errors_against_float64(Precision::Quantized8, kernels());
    let (med, worst) = (median(&errors), max(&errors));
    println!("Quantized8: {} positions, median relative error {med:.3}, max {worst:.3}", errors.len());
    // Only a sanity bound: 8-bit activation blocks err by design. A numpy simulation of them (llama.cpp's Q8_1
    // scheme against the same float64 reference) measured median 0.034 and max 0.20 on these prompts; a median
    // beyond 0.1 means a real fault, not rounding. The teacher-forced test below holds the fast path to llama.cpp.
    assert!(errors.iter().all(|e| e.is_finite()), "non-finite relative error");
    assert!(med <= 0.1, "median relative error {med:.3} > 0.1");
}

/// The greedy reference's positions where it was confident: top-1 probability ahead of top-2 by at least this.
const CONFIDENT_MARGIN: f64 = 0.2;
/// Most a probability of the reference token may move at a confident position. Measured on every path (they give
/// the same bits): max 0.118 (case 0, token 9). Before the paths shared one arithmetic, three valid summation
/// orders measured 0.103, 0.118 and 0.151 here: that spread is what a legitimate change of rounding can do, so the
/// bound leaves room for it; the broken kernels of `the_bounds_catch_broken_kernels` measure 0.19 to 0.99.
const MAX_PROB_DIFF: f64 = 0.18;
/// Most the mean over confident positions may reach. Measured: 0.0077 (0.0076 to 0.0089 under the three earlier
/// orders); the broken kernels measure 0.018 to 0.5.
const MAX_MEAN_PROB_DIFF: f64 = 0.015;

/// What one reference position compares, as `(case, index in generated_ids)`.
struct Comparison {
    at: (usize, usize),
    confident: bool,
    argmax_agrees: bool,
    /// |our probability of the reference token − the reference's|.
    prob_diff: f64,
}

/// Feeds each prompt and llama.cpp's own greedy tokens to the fast path on `kernels`, comparing the distribution
/// at every generated position with the reference's.
fn teacher_forced(model: &Model, reference: &GreedyRef, kernels: &'static Kernels) -> Vec<Comparison> {
    // The logits at the prompt's last position and after each fed reference token are the distributions that
    // produced the reference tokens.
    let sequences: Vec<Vec<TokenId>> = reference
        .cases
        .iter()
        .map(|c| c.prompt_ids.iter().chain(&c.generated_ids[..c.generated_ids.len() - 1]).copied().collect())
        .collect();
    let feeds: Vec<Feed<'_>> = sequences
        .iter()
        .zip(&reference.cases)
        .map(|(tokens, c)| Feed { tokens, first_logits: c.prompt_ids.len() - 1 })
        .collect();
    let mut comparisons = Vec::new();
    let mut backend = backend_on(model, Precision::Quantized8, kernels);
    visit_logits(&model.config, &mut backend, &feeds, |case, pos, row| {
        let c = &reference.cases[case];
        let i = pos - (c.prompt_ids.len() - 1);
        let (top5, token) = (&c.top5_per_position[i].top5, c.generated_ids[i]);
        assert_eq!(top5[0].id, token, "case {case}: greedy reference token {i} is not its own top-1");
        let probs = softmax(row);
        comparisons.push(Comparison {
            at: (case, i),
            confident: top5[0].prob - top5[1].prob >= CONFIDENT_MARGIN,
            argmax_agrees: argmax(row) == token,
            prob_diff: (probs[token as usize] - top5[0].prob).abs(),
        });
    });
    comparisons
}

/// Prints what the comparisons measured.
fn report(reference: &GreedyRef, comparisons: &[Comparison]) {
    let all: Vec<&Comparison> = comparisons.iter().collect();
    let confident: Vec<&Comparison> = comparisons.iter().filter(|c| c.confident).collect();
    let agreeing = |xs: &[&Comparison]| xs.iter().filter(|c| c.argmax_agrees).count();
    println!(
        "all {} positions: argmax agrees at {} ({:.1}%), mean |Δp| {:.4}",
        all.len(),
        agreeing(&all),
        100.0 * agreeing(&all) as f64 / all.len() as f64,
        mean_prob_diff(&all)
    );
    if let Some(worst) = confident.iter().max_by(|a, b| a.prob_diff.total_cmp(&b.prob_diff)) {
        println!(
            "{} confident positions (margin ≥ {CONFIDENT_MARGIN}): argmax agrees at {}, mean |Δp| {:.4}, \
             max {:.4} (case {}, token {})",
            confident.len(),
            agreeing(&confident),
            mean_prob_diff(&confident),
            worst.prob_diff,
            worst.at.0,
            worst.at.1
        );
    }
    for c in comparisons.iter().filter(|c| !c.argmax_agrees) {
        let (case, i) = c.at;
        println!("  differs: case {case} ({:?}) token {i}, |Δp| {:.3}", reference.cases[case].message, c.prob_diff);
    }
}

fn mean_prob_diff(xs: &[&Comparison]) -> f64 {
    xs.iter().map(|c| c.prob_diff).sum::<f64>() / xs.len() as f64
}

/// The bounds: at every confident position the same argmax and a probability within `MAX_PROB_DIFF`, and a mean
/// within `MAX_MEAN_PROB_DIFF`. `Err` names the first violation.
fn verdict(comparisons: &[Comparison]) -> Result<(), String> {
    let confident: Vec<&Comparison> = comparisons.iter().filter(|c| c.confident).collect();
    if confident.len() < 100 {
        return Err(format!("only {} confident positions: fixture changed?", confident.len()));
    }
    for c in &confident {
        let (case, i) = c.at;
        if !c.argmax_agrees {
            return Err(format!("case {case}, generated token {i}: our argmax differs at a confident position"));
        }
        if !within(c.prob_diff, MAX_PROB_DIFF) {
            return Err(format!("case {case}, generated token {i}: |Δp| {:.3} > {MAX_PROB_DIFF}", c.prob_diff));
        }
    }
    let mean = mean_prob_diff(&confident);
    if !within(mean, MAX_MEAN_PROB_DIFF) {
        return Err(format!("mean |Δp| over confident positions {mean:.4} > {MAX_MEAN_PROB_DIFF}"));
    }
    Ok(())
}

#[test]
fn fast_path_agrees_with_llama_cpp_under_teacher_forcing() {
    let model = load_model();
    let reference: GreedyRef = read_json(GREEDY_REF);
    let comparisons = teacher_forced(&model, &reference, kernels());
    println!("kernels: {}", kernels().name);
    report(&reference, &comparisons);
    verdict(&comparisons).unwrap_or_else(|e| panic!("{e}"));
}

/// Kernels with a deliberate fault of the kinds a kernel change can bring, each on top of this CPU's path.
mod broken {
    use ember::backend::cpu::kernels::{kernels, BlockQ8A, OutRows, PackedMatrix};
    use ember::model::gguf::blocks::QK;
    use ember::model::gguf::GgmlType;

    /// Activations rounded toward zero instead of to nearest (a cast where a rounding was meant).
    pub fn quantize_truncating(x: &[f32], out: &mut [BlockQ8A]) {
        for (xs, block) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let amax = xs.iter().fold(0f32, |m, &v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (q, &v) in block.qs.iter_mut().zip(xs) {
                *q = (v * id) as i8;
            }
            let half = |h: usize| block.qs[16 * h..16 * h + 16].iter().map(|&q| i32::from(q)).sum::<i32>();
            block.half_sums = [half(0) as i16, half(1) as i16];
            block.sum = half(0) + half(1);
            block.d = d;
            block.s = d * block.sum as f32;
        }
    }

    /// Q4_1's minimum term lost for the last block of every row (an off-by-one in a tail).
    pub fn matmul_dropping_last_minimum(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
        let mut act = act.to_vec();
        if w.dtype() == GgmlType::Q4_1 {
            let n = w.blocks_per_row();
            for c in 0..n_cols {
                // `s` feeds only the `mw·sa` term of Q4_1 weights.
                act[c * n + n - 1].s = 0.0;
            }
        }
        kernels().matmul_packed(w, &act, n_cols, out);
    }

    /// SiLU with a "fast" sigmoid, `0.5 + x/4` clamped to [0, 1] (the hard sigmoid).
    pub fn silu_hard_sigmoid(gate: &[f32], up: &[f32], out: &mut [f32]) {
        for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
            *o = g * (0.5 + g / 4.0).clamp(0.0, 1.0) * u;
        }
    }

    /// Softmax with an exponential accurate to about 6e-4 (the same reduction, a Taylor polynomial of degree 3: what
    /// a too-short polynomial gives).
    pub fn softmax_low_degree_exp(x: &mut [f32]) -> (f32, f32) {
        let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let exp = |v: f32| {
            if v < -80.0 {
                return 0.0;
            }
            let n = (v * std::f32::consts::LOG2_E).round();
            let r = v - n * std::f32::consts::LN_2;
            let p = 1.0 + r * (1.0 + r * (0.5 + r / 6.0));
            p * 2f32.powi(n as i32)
        };
        let mut sum = 0.0;
        for v in x.iter_mut() {
            *v = exp(*v - max);
            sum += *v;
        }
        x.iter_mut().for_each(|v| *v /= sum);
        (max, sum)
    }
}

/// The reference checks are not so loose that a faulty kernel passes them: each deliberately broken kernel, put in
/// place of this CPU's own, must fail the teacher-forced verdict or, for the kernels the precise path shares (SiLU,
/// softmax), the float64 one. An error much below 8-bit activation noise (the degree-3 exponential: 6e-4 relative)
/// is invisible against llama.cpp's own 8-bit logits, and is what the precise path's float64 bounds are for.
#[test]
fn the_bounds_catch_broken_kernels() {
    let model = load_model();
    let reference: GreedyRef = read_json(GREEDY_REF);
    let no = KernelOverrides::default();
    let faults: [(&'static str, KernelOverrides); 4] = [
        (
            "truncating activation quantization",
            KernelOverrides { quantize_row_q8a: Some(broken::quantize_truncating), ..no },
        ),
        (
            "Q4_1 minimum lost in the last block",
            KernelOverrides { matmul_packed: Some(broken::matmul_dropping_last_minimum), ..no },
        ),
        ("hard sigmoid in SiLU", KernelOverrides { silu_mul: Some(broken::silu_hard_sigmoid), ..no }),
        ("degree-3 exp in softmax", KernelOverrides { softmax_inplace: Some(broken::softmax_low_degree_exp), ..no }),
    ];
    let mut passed = Vec::new();
    for (name, overrides) in faults {
        let broken = kernels().with_overrides(name, overrides);
        let comparisons = teacher_forced(&model, &reference, broken);
        println!("{name}:");
        report(&reference, &comparisons);
        let caught = verdict(&comparisons).err().or_else(|| {
            let shared_by_precise_path = overrides.silu_mul.is_some() || overrides.softmax_inplace.is_some();
            let errors = errors_against_float64(Precision::Float32, broken);
            println!("  precise path: median relative error {:.2e}, max {:.2e}", median(&errors), max(&errors));
            precise_verdict(&errors).err().filter(|_| shared_by_precise_path)
        });
        match caught {
            Some(e) => println!("  caught: {e}"),
            None => passed.push(name),
        }
    }
    assert!(passed.is_empty(), "broken kernels that pass the reference checks: {passed:?}");
}
