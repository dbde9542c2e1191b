//! The routed experts of a mixture-of-experts FFN on the CPU, batched by expert: each selected expert runs once over
//! every row routed to it.
//!
//! A step of `T` tokens, each routed to `k` experts, has `T·k` (token, slot) pairs. They are sorted by expert (then
//! by pair), which gives the *expert-major* layout every buffer of [`ExpertScratch`] uses: expert `e`'s pairs are
//! rows `start .. start + len` of it. The input rows are quantized once and gathered into that layout, and then
//!
//! 1. one parallel region computes every selected expert's gate and up matmuls, split by expert and by ranges of
//!    weight rows, each matmul with its own activations and column count (its `len` rows);
//! 2. the biases, the gated activation and the quantization of the hidden rows, row by row;
//! 3. one parallel region computes every selected expert's down matmul;
//! 4. each token's output is the weighted sum of its `k` expert outputs, in slot order.
//!
//! A decode step therefore reads only the `k` selected experts' bytes, and a prefill or batched decode reads an
//! expert once for all the rows routed to it.
//!
//! **Batch invariance.** A token's output is bit-identical whichever tokens share the step, whatever `T`, thread
//! count and kernel path: its input row is quantized on its own (blocks are independent); a matmul output `(c, r)`
//! depends only on weight row `r` and activation column `c`, whatever the column count and row split (the kernels'
//! guarantee, `Kernels::matmul_packed`); biases, activation and quantization of the hidden rows are row by row; and
//! the weighted sum adds the token's own `k` rows in slot order. Where a row sits in the expert-major layout, and
//! which other rows share its expert, changes no operation on it.

use std::sync::Mutex;

use super::kernels::numerics::{max_lane, min_lane};
use super::kernels::{BlockQ8A, Kernels, OutRows};
use super::model_weights::Matrix;
use super::parallel::{parallel_rows_mut, Activations, MAX_TASKS};
use super::pool::ThreadPool;
use super::Precision;
use crate::model::gguf::blocks::QK;

/// Weight rows per task are a multiple of this, so that tasks start at a packed panel (16 rows) and kernels run
/// whole register tiles (as in `parallel_matmul`).
const ROW_ALIGN: usize = 16;
/// Tasks per thread of a matmul region: a few, so that a thread that finishes early takes over work (as in
/// `parallel_matmul`).
const TASKS_PER_THREAD: usize = 4;
/// Row-wise work (activation floats) below which the activation runs on the calling thread: a parallel region
/// would cost more than it saves (`parallel_rows_mut`'s threshold).
const MIN_PARALLEL_WORK: usize = 32 * 1024;

/// One expert's matrices: gate and up `[n_ff rows × n_embd]`, down `[n_embd rows × n_ff]`, resolved for the
/// backend's precision as the dense matrices are (`Matrix::Packed` for quantized types on
/// [`Precision::Quantized8`], `Matrix::File` on [`Precision::Float32`]). Biases are empty when absent (gpt-oss has
/// one per expert on all three matrices, added after each matmul).
pub struct ExpertMatrices<'m> {
    pub gate: Matrix<'m>,
    pub up: Matrix<'m>,
    pub down: Matrix<'m>,
    pub gate_bias: Box<[f32]>,
    pub up_bias: Box<[f32]>,
    pub down_bias: Box<[f32]>,
}

/// The gated activation of the experts: `hidden = act(gate, up)` element by element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExpertActivation {
    /// `silu(gate) · up` (Qwen3 MoE, Mixtral), the dense FFN's kernel.
    Silu,
    /// `gelu_tanh(gate) · up`, the dense FFN's kernel.
    GeluTanh,
    /// gpt-oss: `x = min(gate, limit)`, `y = clamp(up, −limit, limit)`, `x · σ(alpha·x) · (y + 1)` (llama.cpp's
    /// `ggml_swiglu_oai`; alpha 1.702, limit 7.0), within a few ulp of its order of operations (see `activate`).
    /// `alpha` must be a normal float.
    SwigluOai { alpha: f32, limit: f32 },
    /// SiLU with clamps (llama.cpp's `swiglu_clamp_exp` path): `min(silu(gate), limit) · clamp(up, −limit, limit)`.
    // For the families that clamp (none ember loads yet); tested here.
    #[allow(dead_code)]
    SiluClamped { limit: f32 },
}

/// The experts' run of one step: the `len` pairs routed to `expert` are rows `start .. start + len` of the
/// expert-major layout.
#[derive(Clone, Copy, Debug)]
struct Group {
    expert: usize,
    start: usize,
    len: usize,
}

/// Buffers for [`routed_experts`], sized once for up to `max_tokens` rows of `k` experts each (a call allocates
/// nothing). Rows of the expert-major layout (see the module documentation) are `P = max_tokens · k`.
pub struct ExpertScratch {
    max_tokens: usize,
    k: usize,
    n_embd: usize,
    n_ff: usize,
    precision: Precision,
    /// `expert << 32 | pair` of each pair (`pair = token · k + slot`), sorted: row `i` of the expert-major layout
    /// is pair `order[i] as u32` of expert `order[i] >> 32`.
    order: Vec<u64>,
    /// `[P]`: each pair's row in the expert-major layout.
    row_of_pair: Vec<u32>,
    /// The step's experts in index order (capacity `P`: at most one per pair).
    groups: Vec<Group>,
    /// `[max_tokens][n_embd / 32]`: the input rows quantized (fast path only).
    input_q8: Vec<BlockQ8A>,
    /// `[P][n_embd / 32]`: the input rows gathered into the expert-major layout (fast path only).
    rows_q8: Vec<BlockQ8A>,
    /// `[P][n_embd]`: the same in f32 (precise path only).
    rows_f32: Vec<f32>,
    /// `[P][n_ff]` each: gate and up matmul outputs, the gated activation.
    gate: Vec<f32>,
    up: Vec<f32>,
    hidden: Vec<f32>,
    /// `[P][n_ff / 32]`: the hidden rows quantized (fast path only).
    hidden_q8: Vec<BlockQ8A>,
    /// `[P][n_embd]`: the down matmul outputs.
    down: Vec<f32>,
    /// `[n_ff]` ones: `silu_mul(gate, ones)` is `silu(gate)` exactly, for the clamped SiLU.
    ones: Vec<f32>,
}

impl ExpertScratch {
    /// Buffers for up to `max_tokens` rows of `k` experts each, widths `n_embd` and `n_ff`, on `precision`'s path.
    ///
    /// # Panics
    /// When `k` is 0, a width is not a positive multiple of 32, or `max_tokens · k` exceeds `u32::MAX`.
    pub fn new(max_tokens: usize, k: usize, n_embd: usize, n_ff: usize, precision: Precision) -> Self {
        assert!(k > 0, "ExpertScratch: k must be at least 1");
        assert!(
            n_embd > 0 && n_ff > 0 && n_embd.is_multiple_of(QK) && n_ff.is_multiple_of(QK),
            "ExpertScratch: widths {n_embd} and {n_ff} must be positive multiples of {QK}"
        );
        let pairs = max_tokens.checked_mul(k).filter(|&p| p <= u32::MAX as usize);
        let pairs = pairs.unwrap_or_else(|| panic!("ExpertScratch: {max_tokens} tokens × {k} experts is too many"));
        let quantized = precision == Precision::Quantized8;
        let q8 = |n: usize| if quantized { vec![BlockQ8A::ZERO; n] } else { Vec::new() };
        ExpertScratch {
            max_tokens,
            k,
            n_embd,
            n_ff,
            precision,
            order: vec![0; pairs],
            row_of_pair: vec![0; pairs],
            groups: Vec::with_capacity(pairs),
            input_q8: q8(max_tokens * n_embd / QK),
            rows_q8: q8(pairs * n_embd / QK),
            rows_f32: if quantized { Vec::new() } else { vec![0.0; pairs * n_embd] },
            gate: vec![0.0; pairs * n_ff],
            up: vec![0.0; pairs * n_ff],
            hidden: vec![0.0; pairs * n_ff],
            hidden_q8: q8(pairs * n_ff / QK),
            down: vec![0.0; pairs * n_embd],
            ones: vec![1.0; n_ff],
        }
    }

    /// Sorts the `selected` experts of the pairs into the expert-major layout: `order`, `row_of_pair`, `groups`.
    fn group_by_expert(&mut self, selected: &[u32], n_experts: usize) {
        let order = &mut self.order[..selected.len()];
        for (pair, (key, &e)) in order.iter_mut().zip(selected).enumerate() {
            assert!((e as usize) < n_experts, "routed_experts: pair {pair} selects expert {e} of {n_experts}");
            *key = (u64::from(e) << 32) | pair as u64;
        }
        // In place (no allocation); the keys are distinct, so the order is the same however it is reached.
        order.sort_unstable();
        self.groups.clear();
        for (row, &key) in order.iter().enumerate() {
            let (expert, pair) = ((key >> 32) as usize, key as u32 as usize);
            self.row_of_pair[pair] = row as u32;
            match self.groups.last_mut() {
                Some(g) if g.expert == expert => g.len += 1,
                // Within capacity: there are at most as many groups as pairs.
                _ => self.groups.push(Group { expert, start: row, len: 1 }),
            }
        }
    }

    /// Prepares the `T` rows of `input` as the gate and up matmuls' activations, gathered into the expert-major
    /// layout: quantized once per token and copied per pair (fast path), or copied as they are (precise path).
    fn gather_input(&mut self, kernels: &Kernels, input: &[f32]) {
        let (d, k) = (self.n_embd, self.k);
        let n_pairs = input.len() / d * k;
        match self.precision {
            Precision::Quantized8 => {
                let quantized = &mut self.input_q8[..input.len() / QK];
                kernels.quantize_row_q8a(input, quantized);
                let width = d / QK;
                for (row, &key) in self.rows_q8.chunks_exact_mut(width).zip(&self.order[..n_pairs]) {
                    let token = key as u32 as usize / k;
                    row.copy_from_slice(&quantized[token * width..(token + 1) * width]);
                }
            }
            Precision::Float32 => {
                for (row, &key) in self.rows_f32.chunks_exact_mut(d).zip(&self.order[..n_pairs]) {
                    let token = key as u32 as usize / k;
                    row.copy_from_slice(&input[token * d..(token + 1) * d]);
                }
            }
        }
    }
}

/// Runs the routed experts of a mixture-of-experts FFN over `T = input.len() / n_embd` rows:
///
/// `out[t] = Σ_{s=0..k} w[t·k+s] · ffn_e(x[t])`, `e = selected[t·k+s]`, summed in slot order (`(y0·w0 + y1·w1) +
/// y2·w2 …`, as llama.cpp's `build_moe_ffn` weights each expert's output and then adds the views in slot order), with
/// `ffn_e(x) = down_e · act(gate_e · x + gate_bias_e, up_e · x + up_bias_e) + down_bias_e`.
///
/// `input` and `out` are `T × n_embd`, token-major (`out` is overwritten); `selected` and `weights` are `T × k`.
/// Each selected expert runs once over all its rows; see the module documentation for the steps and why a row's
/// result is the same in any batch, on any thread count and kernel path.
///
/// # Panics
/// On arguments inconsistent with each other or with `scratch` (lengths, `T > max_tokens`, another precision), an
/// expert index out of `experts`, or a selected expert whose shapes or biases do not match the widths (or whose
/// matrices are not resolved for `precision`).
#[allow(clippy::too_many_arguments)] // the operation's operands, as the model passes them
pub fn routed_experts(
    pool: &ThreadPool,
    kernels: &Kernels,
    precision: Precision,
    experts: &[ExpertMatrices<'_>],
    activation: ExpertActivation,
    input: &[f32],
    selected: &[u32],
    weights: &[f32],
    scratch: &mut ExpertScratch,
    out: &mut [f32],
) {
    let (k, d, ff) = (scratch.k, scratch.n_embd, scratch.n_ff);
    assert_eq!(precision, scratch.precision, "routed_experts: the scratch was sized for another precision");
    assert!(input.len().is_multiple_of(d), "routed_experts: input of {} floats is not rows of {d}", input.len());
    let t = input.len() / d;
    assert!(t <= scratch.max_tokens, "routed_experts: {t} rows, scratch sized for {}", scratch.max_tokens);
    assert_eq!(selected.len(), t * k, "routed_experts: selected must hold {k} experts per row");
    assert_eq!(weights.len(), t * k, "routed_experts: weights must hold {k} weights per row");
    assert_eq!(out.len(), t * d, "routed_experts: out must hold {t} rows of {d}");
    if let ExpertActivation::SwigluOai { alpha, .. } = activation {
        assert!(alpha.is_normal(), "routed_experts: SwigluOai's alpha {alpha} must be a normal float (it divides)");
    }
    if t == 0 {
        return;
    }
    scratch.group_by_expert(selected, experts.len());
    for g in &scratch.groups {
        check_expert(g.expert, &experts[g.expert], precision, d, ff);
    }
    scratch.gather_input(kernels, input);
    gate_up(pool, kernels, experts, scratch, t * k);
    activate_rows(pool, kernels, experts, activation, scratch, t * k);
    down(pool, kernels, experts, scratch, t * k);
    weighted_sum(pool, experts, selected, weights, scratch, out);
}

/// Weights per row of a matrix.
fn row_len(m: &Matrix) -> usize {
    match m {
        Matrix::File(w) => w.row_len(),
        Matrix::Packed(p) => p.row_len(),
    }
}

/// Checks expert `e`'s shapes against the widths `d` (n_embd) and `ff` (n_ff), and that its matrices are resolved
/// for `precision` (here rather than in a pool task, whose panic would reach the caller without its message).
fn check_expert(e: usize, ex: &ExpertMatrices, precision: Precision, d: usize, ff: usize) {
    let resolved = |m: &Matrix| match (precision, m) {
        (Precision::Quantized8, Matrix::File(w)) => w.data().dtype().block_len() == 1,
        (Precision::Quantized8, Matrix::Packed(_)) | (Precision::Float32, Matrix::File(_)) => true,
        (Precision::Float32, Matrix::Packed(_)) => false,
    };
    for (name, m) in [("gate", &ex.gate), ("up", &ex.up), ("down", &ex.down)] {
        assert!(resolved(m), "routed_experts: expert {e}'s {name} is not resolved for {precision:?} (packed or not)");
    }
    let shape = |m: &Matrix| (m.n_rows(), row_len(m));
    assert_eq!(shape(&ex.gate), (ff, d), "routed_experts: expert {e}'s gate must be {ff} rows of {d}");
    assert_eq!(shape(&ex.up), (ff, d), "routed_experts: expert {e}'s up must be {ff} rows of {d}");
    assert_eq!(shape(&ex.down), (d, ff), "routed_experts: expert {e}'s down must be {d} rows of {ff}");
    let bias_ok = |b: &[f32], n: usize| b.is_empty() || b.len() == n;
    assert!(bias_ok(&ex.gate_bias, ff), "routed_experts: expert {e}'s gate bias must be empty or {ff} floats");
    assert!(bias_ok(&ex.up_bias, ff), "routed_experts: expert {e}'s up bias must be empty or {ff} floats");
    assert!(bias_ok(&ex.down_bias, d), "routed_experts: expert {e}'s down bias must be empty or {d} floats");
}

/// The first `n` elements of `*buf` (fewer when it is shorter), leaving the rest in `*buf`: how the expert-major
/// buffers are cut into disjoint per-expert and per-task pieces without indices.
fn take_front<'a, T>(buf: &mut &'a mut [T], n: usize) -> &'a mut [T] {
    let n = n.min(buf.len());
    let (head, tail) = std::mem::take(buf).split_at_mut(n);
    *buf = tail;
    head
}

/// The activations of rows `rows` of an expert-major buffer `width` floats wide, quantized or not.
fn activations<'a>(
    q8: &'a [BlockQ8A],
    f32s: &'a [f32],
    precision: Precision,
    g: &Group,
    width: usize,
) -> Activations<'a> {
    let rows = g.start..g.start + g.len;
    match precision {
        Precision::Quantized8 => Activations::Q8(&q8[rows.start * width / QK..rows.end * width / QK]),
        Precision::Float32 => Activations::F32(&f32s[rows.start * width..rows.end * width]),
    }
}

/// Step 1: every selected expert's gate and up matmuls, one parallel region.
fn gate_up(pool: &ThreadPool, kernels: &Kernels, experts: &[ExpertMatrices], s: &mut ExpertScratch, n_pairs: usize) {
    let (d, ff) = (s.n_embd, s.n_ff);
    let cost = s.groups.iter().map(|g| 2 * ff * (g.len + 1)).sum();
    let mut region = MatmulRegion::new(pool, kernels, cost);
    let (mut gate, mut up) = (&mut s.gate[..n_pairs * ff], &mut s.up[..n_pairs * ff]);
    for g in &s.groups {
        let act = activations(&s.rows_q8, &s.rows_f32, s.precision, g, d);
        let ex = &experts[g.expert];
        region.push(ExpertMatmul::new(&ex.gate, act, take_front(&mut gate, g.len * ff), g.len));
        region.push(ExpertMatmul::new(&ex.up, act, take_front(&mut up, g.len * ff), g.len));
    }
    region.finish();
}

/// Step 3: every selected expert's down matmul, one parallel region.
fn down(pool: &ThreadPool, kernels: &Kernels, experts: &[ExpertMatrices], s: &mut ExpertScratch, n_pairs: usize) {
    let (d, ff) = (s.n_embd, s.n_ff);
    let cost = s.groups.iter().map(|g| d * (g.len + 1)).sum();
    let mut region = MatmulRegion::new(pool, kernels, cost);
    let mut out = &mut s.down[..n_pairs * d];
    for g in &s.groups {
        let act = activations(&s.hidden_q8, &s.hidden, s.precision, g, ff);
        region.push(ExpertMatmul::new(&experts[g.expert].down, act, take_front(&mut out, g.len * d), g.len));
    }
    region.finish();
}

/// A task's share of the activation step: rows `first ..` of the expert-major gate, up, hidden and quantized hidden
/// buffers (the last empty on the precise path).
struct HiddenRows<'a> {
    first: usize,
    gate: &'a mut [f32],
    up: &'a mut [f32],
    hidden: &'a mut [f32],
    hidden_q8: &'a mut [BlockQ8A],
}

/// Step 2: for each of the `n_pairs` rows, the biases added to gate and up, the gated activation into `hidden`, and
/// on the fast path `hidden` quantized as the down matmuls' activations. Row by row, split across the pool when
/// there is enough work.
fn activate_rows(
    pool: &ThreadPool,
    kernels: &Kernels,
    experts: &[ExpertMatrices],
    activation: ExpertActivation,
    s: &mut ExpertScratch,
    n_pairs: usize,
) {
    let ff = s.n_ff;
    let n_tasks = if pool.threads() == 1 || n_pairs * ff < MIN_PARALLEL_WORK {
        1
    } else {
        (pool.threads() * TASKS_PER_THREAD).min(n_pairs).min(MAX_TASKS)
    };
    let per_task = n_pairs.div_ceil(n_tasks);
    let q8_width = if s.precision == Precision::Quantized8 { ff / QK } else { 0 };
    let (mut gate, mut up) = (&mut s.gate[..n_pairs * ff], &mut s.up[..n_pairs * ff]);
    let (mut hidden, mut hidden_q8) = (&mut s.hidden[..n_pairs * ff], &mut s.hidden_q8[..n_pairs * q8_width]);
    let mut slots: [Mutex<Option<HiddenRows>>; MAX_TASKS] = std::array::from_fn(|_| Mutex::new(None));
    let mut n_chunks = 0;
    while !gate.is_empty() {
        let chunk = HiddenRows {
            first: n_chunks * per_task,
            gate: take_front(&mut gate, per_task * ff),
            up: take_front(&mut up, per_task * ff),
            hidden: take_front(&mut hidden, per_task * ff),
            hidden_q8: take_front(&mut hidden_q8, per_task * q8_width),
        };
        *slots[n_chunks].get_mut().unwrap_or_else(|e| e.into_inner()) = Some(chunk);
        n_chunks += 1;
    }
    let (order, ones) = (&s.order, &s.ones[..]);
    pool.run(n_chunks, &|task| {
        let Some(rows) = slots[task].lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        let n_rows = rows.gate.len() / ff;
        for i in 0..n_rows {
            let ex = &experts[(order[rows.first + i] >> 32) as usize];
            let r = i * ff..(i + 1) * ff;
            let (gate, up, hidden) = (&mut rows.gate[r.clone()], &mut rows.up[r.clone()], &mut rows.hidden[r]);
            if !ex.gate_bias.is_empty() {
                kernels.add_assign(gate, &ex.gate_bias);
            }
            if !ex.up_bias.is_empty() {
                kernels.add_assign(up, &ex.up_bias);
            }
            activate(kernels, activation, gate, up, ones, hidden);
            if q8_width > 0 {
                kernels.quantize_row_q8a(hidden, &mut rows.hidden_q8[i * q8_width..(i + 1) * q8_width]);
            }
        }
    });
}

/// `out = act(gate, up)` for one row (`ones`: as many ones). `gate` and `up` are scratch rows, which gpt-oss's
/// variant overwrites.
///
/// Every variant goes through a SiLU or GELU kernel, so that its exponential is the vectorized one of each path
/// (the same bits on every path; shared scalar code calling `numerics::exp` costs 60 ns an element where `fma` is
/// not compiled in, against about 1). The clamps are `numerics`' `min`/`max` lanes (a NaN input gives a limit). The
/// clamped SiLU multiplies the kernel's `silu(gate) · 1` (exact). gpt-oss's `x · σ(alpha·x) · (y + 1)` is computed
/// as `silu(alpha·x) · ((y + 1) · (1 / alpha))`: the exponent is llama.cpp's `alpha · (−x)` exactly, and the
/// result is within 8 ulp (relative `8 · 2⁻²³`, tested) of its `x / (1 + e^(alpha·(−x))) · (y + 1)` computed
/// exactly from there.
fn activate(
    kernels: &Kernels,
    activation: ExpertActivation,
    gate: &mut [f32],
    up: &mut [f32],
    ones: &[f32],
    out: &mut [f32],
) {
    match activation {
        ExpertActivation::Silu => kernels.silu_mul(gate, up, out),
        ExpertActivation::GeluTanh => kernels.gelu_mul(gate, up, out),
        ExpertActivation::SiluClamped { limit } => {
            kernels.silu_mul(gate, ones, out);
            for (o, &u) in out.iter_mut().zip(up.iter()) {
                *o = min_lane(*o, limit) * clamp(u, limit);
            }
        }
        ExpertActivation::SwigluOai { alpha, limit } => {
            let inv_alpha = 1.0 / alpha;
            gate.iter_mut().for_each(|g| *g = alpha * min_lane(*g, limit));
            up.iter_mut().for_each(|u| *u = (clamp(*u, limit) + 1.0) * inv_alpha);
            kernels.silu_mul(gate, up, out);
        }
    }
}

/// `v` clamped to `[−limit, limit]` (`maxps` then `minps` semantics: NaN gives `−limit`).
#[inline(always)]
fn clamp(v: f32, limit: f32) -> f32 {
    min_lane(max_lane(v, -limit), limit)
}

/// Step 4: `out[t] = Σ_s (down row of pair (t, s) + its expert's down bias) · weights[t·k + s]`, the products added
/// in slot order starting from slot 0's (no fused multiply-add: shared code, the same bits everywhere).
fn weighted_sum(
    pool: &ThreadPool,
    experts: &[ExpertMatrices],
    selected: &[u32],
    weights: &[f32],
    s: &ExpertScratch,
    out: &mut [f32],
) {
    let (d, k) = (s.n_embd, s.k);
    let (down, row_of_pair) = (&s.down, &s.row_of_pair);
    parallel_rows_mut(pool, out, d, &|tokens, chunk| {
        for (t, o) in tokens.zip(chunk.chunks_exact_mut(d)) {
            for slot in 0..k {
                let pair = t * k + slot;
                let row = row_of_pair[pair] as usize;
                let y = &down[row * d..(row + 1) * d];
                let (w, bias) = (weights[pair], &experts[selected[pair] as usize].down_bias[..]);
                match (slot, bias.is_empty()) {
                    (0, true) => o.iter_mut().zip(y).for_each(|(o, &y)| *o = y * w),
                    (0, false) => o.iter_mut().zip(y).zip(bias).for_each(|((o, &y), &b)| *o = (y + b) * w),
                    (_, true) => o.iter_mut().zip(y).for_each(|(o, &y)| *o += y * w),
                    (_, false) => o.iter_mut().zip(y).zip(bias).for_each(|((o, &y), &b)| *o += (y + b) * w),
                }
            }
        }
    });
}

/// One matmul of an expert region: `out(c, r) = weights(r) · act(c)` for the rows of `out` and its columns (the
/// rows routed to the expert).
struct ExpertMatmul<'a> {
    weights: &'a Matrix<'a>,
    act: Activations<'a>,
    out: OutRows<'a>,
}

impl<'a> ExpertMatmul<'a> {
    /// The whole matmul of `weights` over `n_cols` columns of `act` into `out` (`n_cols × n_rows`, token-major).
    fn new(weights: &'a Matrix<'a>, act: Activations<'a>, out: &'a mut [f32], n_cols: usize) -> Self {
        let n_rows = weights.n_rows();
        ExpertMatmul { weights, act, out: OutRows::new(out, n_cols, n_rows) }
    }

    /// Splits off rows `rows().start .. r` (see `OutRows::split_at`).
    fn split_at(self, r: usize) -> (Self, Self) {
        let (head, tail) = self.out.split_at(r);
        (ExpertMatmul { out: head, ..self }, ExpertMatmul { out: tail, ..self })
    }

    fn run(&mut self, kernels: &Kernels) {
        let n_cols = self.out.n_cols();
        match (self.act, self.weights) {
            (Activations::Q8(a), Matrix::Packed(w)) => kernels.matmul_packed(w, a, n_cols, &mut self.out),
            (Activations::Q8(a), Matrix::File(w)) => kernels.matmul_q8(w, a, n_cols, &mut self.out),
            (Activations::F32(a), Matrix::File(w)) => kernels.matmul_f32(w, a, n_cols, &mut self.out),
            (Activations::F32(_), Matrix::Packed(_)) => unreachable!("check_expert refuses packed experts here"),
        }
    }
}

/// A parallel region of expert matmuls, each with its own activations and column count: `parallel_matmul`'s split
/// generalized. Each matmul is cut into tasks of whole 16-row panels sized so that the region makes about
/// `TASKS_PER_THREAD` tasks per thread, counting a task's cost as `rows × (columns + 1)` (each column's arithmetic,
/// plus streaming the rows once, which dominates a matvec). Tasks wait in a fixed array of slots (no allocation);
/// when it is full (hundreds of experts in one prefill) the tasks so far run as a region of their own and the
/// slots fill again. How the tasks fall changes no result (see the module documentation).
struct MatmulRegion<'p, 'a> {
    pool: &'p ThreadPool,
    kernels: &'p Kernels,
    /// The cost a task aims at; `None`: one task per matmul (one thread).
    task_cost: Option<usize>,
    slots: [Mutex<Option<ExpertMatmul<'a>>>; MAX_TASKS],
    n_tasks: usize,
}

impl<'p, 'a> MatmulRegion<'p, 'a> {
    /// A region for matmuls of `total_cost` in all.
    fn new(pool: &'p ThreadPool, kernels: &'p Kernels, total_cost: usize) -> Self {
        let task_cost = (pool.threads() > 1).then(|| total_cost.div_ceil(pool.threads() * TASKS_PER_THREAD));
        MatmulRegion { pool, kernels, task_cost, slots: std::array::from_fn(|_| Mutex::new(None)), n_tasks: 0 }
    }

    /// Adds `m`, cut into tasks.
    fn push(&mut self, m: ExpertMatmul<'a>) {
        let rows_per_task = match self.task_cost {
            Some(cost) => (cost / (m.out.n_cols() + 1)).max(1).next_multiple_of(ROW_ALIGN),
            None => usize::MAX,
        };
        let mut rest = m;
        while rest.out.rows().len() > rows_per_task {
            let at = rest.out.rows().start + rows_per_task;
            let (head, tail) = rest.split_at(at);
            self.add(head);
            rest = tail;
        }
        self.add(rest);
    }

    fn add(&mut self, task: ExpertMatmul<'a>) {
        if self.n_tasks == MAX_TASKS {
            self.run();
        }
        *self.slots[self.n_tasks].get_mut().unwrap_or_else(|e| e.into_inner()) = Some(task);
        self.n_tasks += 1;
    }

    /// Runs the tasks waiting in the slots.
    fn run(&mut self) {
        let (slots, kernels) = (&self.slots, self.kernels);
        self.pool.run(self.n_tasks, &|task| {
            if let Some(mut m) = slots[task].lock().unwrap_or_else(|e| e.into_inner()).take() {
                m.run(kernels);
            }
        });
        self.n_tasks = 0;
    }

    /// Runs what is left.
    fn finish(mut self) {
        self.run();
    }
}

#[cfg(test)]
#[path = "experts_tests.rs"]
mod tests;
