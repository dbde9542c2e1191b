//! `Kernels`: one implementation path's table of kernel functions, and the public methods that check arguments
//! before calling into it. Every path (scalar, AVX2, AVX-512, AMX) fills the same table; `select` picks one at run time.

use half::f16;

use super::out_rows::OutRows;
use super::packed::PackedMatrix;
use super::q8a::BlockQ8A;
use super::weights::WeightMatrix;
use crate::model::gguf::blocks::{BlockQ4_0, BlockQ8_0, QK};

/// `out(c, r) = Σ_k w(r, k) · act(c, k)` over quantized activations, for the rows of `out` (see
/// [`Kernels::matmul_q8`]). Arguments are checked before the call.
pub(super) type MatmulQ8Fn = unsafe fn(w: &WeightMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows);
/// The same over packed weights (see [`Kernels::matmul_packed`]).
pub(super) type MatmulPackedFn = unsafe fn(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows);
/// The same over f32 activations (see [`Kernels::matmul_f32`]).
pub(super) type MatmulF32Fn = unsafe fn(w: &WeightMatrix, act: &[f32], n_cols: usize, out: &mut OutRows);

/// Scores of a group of query heads against a run of cache slots (see [`Kernels::attention_scores_f16`]).
pub(super) type AttentionScoresFn =
    unsafe fn(queries: &[f32], keys: CacheRun<'_, f16>, out: &mut [f32], out_stride: usize);
/// Weighted sums of a run of cache slots for a group of heads (see [`Kernels::attention_values_f16`]).
pub(super) type AttentionValuesFn =
    unsafe fn(weights: &[f32], weight_stride: usize, values: CacheRun<'_, f16>, out: &mut [f32]);

/// The same over several runs in order, the weights of each run following the run before's (see
/// [`Kernels::attention_values_f16_runs`]).
pub(super) type AttentionValuesRunsFn =
    unsafe fn(weights: &[f32], weight_stride: usize, runs: &[CacheRun<'_, f16>], out: &mut [f32]);

/// Scores of a group of quantized query heads against a run of a quantized cache's slots (see
/// [`Kernels::attention_scores_q8_0`]).
pub(super) type AttentionScoresQFn<B> =
    unsafe fn(queries: &[BlockQ8A], keys: CacheRun<'_, B>, out: &mut [f32], out_stride: usize);
/// Weighted sums of a run of a quantized cache's slots (see [`Kernels::attention_values_q8_0`]).
pub(super) type AttentionValuesQFn<B> =
    unsafe fn(weights: &[f32], weight_stride: usize, values: CacheRun<'_, B>, out: &mut [f32]);

/// A run of `n` consecutive cache slots of one KV head: slot `i`'s row is `rows[i·stride ..][..width]`.
#[derive(Clone, Copy, Debug)]
pub struct CacheRun<'a, T> {
    pub rows: &'a [T],
    pub width: usize,
    pub stride: usize,
    pub n: usize,
}

impl<T> CacheRun<'_, T> {
    /// Asks the CPU to start loading this run's rows into its caches, so that they arrive while the run before it
    /// is computed: a run is a few KiB (one KV head's slots of one cache block) and the next block is anywhere, too
    /// short a stream for the hardware prefetchers to ramp up on, so without this the attention kernels wait on
    /// the first rows of every block. Changes timing only, never a result.
    #[inline]
    pub fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            const LINE: usize = 64;
            let row_bytes = self.width * size_of::<T>();
            for i in 0..self.n {
                let row = self.rows[i * self.stride..].as_ptr().cast::<u8>();
                for offset in (0..row_bytes).step_by(LINE) {
                    // SAFETY: a prefetch is a hint that never faults; the address is inside `rows`' row `i`.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(row.add(offset).cast::<i8>()) };
                }
            }
        }
    }
}

/// The kernels of one implementation path. Obtained from [`super::kernels`] (the best path this CPU runs) or
/// [`super::kernels_named`]; every table is a `'static` constant.
///
/// The function pointers are `unsafe` because a SIMD path's functions need its CPU features. The invariant that
/// makes calling them sound: a `Kernels` value exists only as a path module's private static, and `select` hands
/// one out only after detecting every feature its path is compiled for (or as a copy of such a table made by
/// [`Kernels::with_overrides`], whose replacements are safe functions). The fields are private, so no other
/// `Kernels` can be built.
///
/// Every path computes the same bits for the same arguments (the arithmetic of `numerics`, documented in
/// `docs/architecture.md`, "Numerics"), and results are deterministic and batch-invariant (see
/// [`Kernels::matmul_q8`]): a path decides speed, never a value.
pub struct Kernels {
    /// `"scalar"`, `"avx2"`, `"avx512"` or `"amx"`.
    pub name: &'static str,
    pub(super) quantize_row_q8a: unsafe fn(x: &[f32], out: &mut [BlockQ8A]),
    pub(super) matmul_q8: MatmulQ8Fn,
    pub(super) matmul_packed: MatmulPackedFn,
    pub(super) matmul_f32: MatmulF32Fn,
    pub(super) rms_norm: unsafe fn(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]),
    pub(super) silu_mul: unsafe fn(gate: &[f32], up: &[f32], out: &mut [f32]),
    pub(super) gelu_mul: unsafe fn(gate: &[f32], up: &[f32], out: &mut [f32]),
    pub(super) add_assign: unsafe fn(x: &mut [f32], y: &[f32]),
    pub(super) softmax_inplace: unsafe fn(x: &mut [f32]) -> (f32, f32),
    pub(super) rope: unsafe fn(head: &mut [f32], cos: &[f32], sin: &[f32]),
    pub(super) attention_scores_f16: AttentionScoresFn,
    pub(super) attention_values_f16: AttentionValuesFn,
    /// A path's kernel for several runs in one call, where it has one (the others take the runs one by one).
    pub(super) attention_values_f16_runs: Option<AttentionValuesRunsFn>,
    pub(super) attention_scores_q8_0: AttentionScoresQFn<BlockQ8_0>,
    pub(super) attention_scores_q4_0: AttentionScoresQFn<BlockQ4_0>,
    pub(super) attention_values_q8_0: AttentionValuesQFn<BlockQ8_0>,
    pub(super) attention_values_q4_0: AttentionValuesQFn<BlockQ4_0>,
    pub(super) argmax: unsafe fn(x: &[f32]) -> usize,
}

/// A replacement for `quantize_row_q8a` (see [`KernelOverrides`]).
pub type QuantizeOverride = fn(x: &[f32], out: &mut [BlockQ8A]);
/// A replacement for `matmul_q8`.
pub type MatmulQ8Override = fn(w: &WeightMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows);
/// A replacement for `matmul_packed`.
pub type MatmulPackedOverride = fn(w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows);
/// A replacement for `silu_mul`.
pub type SiluMulOverride = fn(gate: &[f32], up: &[f32], out: &mut [f32]);

/// A replacement for `softmax_inplace`: returns the maximum and the sum of the exponentials.
pub type SoftmaxOverride = fn(x: &mut [f32]) -> (f32, f32);

/// Kernels to put in place of a path's own (see [`Kernels::with_overrides`]).
#[doc(hidden)]
#[derive(Clone, Copy, Default)]
pub struct KernelOverrides {
    pub quantize_row_q8a: Option<QuantizeOverride>,
    pub matmul_q8: Option<MatmulQ8Override>,
    pub matmul_packed: Option<MatmulPackedOverride>,
    pub silu_mul: Option<SiluMulOverride>,
    pub softmax_inplace: Option<SoftmaxOverride>,
}

impl Kernels {
    /// A copy of this table, named `name`, with some kernels replaced by safe functions of the caller's: how the
    /// reference tests show that their bounds catch a faulty kernel. Sound because the replacements need no CPU
    /// feature and the other entries are this table's. The table is leaked (tests build a handful).
    #[doc(hidden)]
    pub fn with_overrides(&'static self, name: &'static str, overrides: KernelOverrides) -> &'static Kernels {
        let mut k = Kernels { name, ..*self };
        if let Some(f) = overrides.quantize_row_q8a {
            k.quantize_row_q8a = f;
        }
        if let Some(f) = overrides.matmul_q8 {
            k.matmul_q8 = f;
        }
        if let Some(f) = overrides.matmul_packed {
            k.matmul_packed = f;
        }
        if let Some(f) = overrides.silu_mul {
            k.silu_mul = f;
        }
        if let Some(f) = overrides.softmax_inplace {
            k.softmax_inplace = f;
        }
        Box::leak(Box::new(k))
    }
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Checks what every matmul needs: `act_len` activation items for `n_cols` columns, `out` shaped for them, and
/// `out`'s rows inside the matrix.
fn check_matmul(w: &WeightMatrix, act_len: usize, act_per_col: usize, n_cols: usize, out: &OutRows) {
    assert_eq!(act_len, n_cols * act_per_col, "matmul: activations must hold n_cols columns of the row length");
    assert_eq!(out.n_cols(), n_cols, "matmul: output view has another column count");
    assert!(out.rows().end <= w.n_rows(), "matmul: output rows {:?} beyond {} weight rows", out.rows(), w.n_rows());
}

/// Checks a run of `n` cache rows of `width` elements each, `stride` apart, in a slice of `len` elements.
fn check_run(what: &str, width: usize, len: usize, stride: usize, n: usize) {
    if n == 0 {
        return;
    }
    assert!(n == 1 || stride >= width, "{what}: stride {stride} shorter than a row of {width}");
    let needed = (n - 1).checked_mul(stride).and_then(|x| x.checked_add(width));
    assert!(needed.is_some_and(|needed| len >= needed), "{what}: {len} elements cannot hold {n} rows of {width}");
}

/// The heads in `len` elements of heads `width` wide.
fn check_heads(what: &str, len: usize, width: usize) -> usize {
    assert!(width > 0 && len.is_multiple_of(width), "{what}: {len} elements are not whole heads of {width}");
    len / width
}

/// Checks `heads` rows of `n` elements, `stride` apart, in a slice of `len` elements.
fn check_rows(what: &str, len: usize, stride: usize, n: usize, heads: usize) {
    assert!(heads <= 1 || stride >= n, "{what}: stride {stride} shorter than a row of {n}");
    let needed = heads.saturating_sub(1).checked_mul(stride).and_then(|x| x.checked_add(n));
    assert!(
        needed.is_some_and(|needed| heads == 0 || len >= needed),
        "{what}: {len} elements cannot hold {heads} rows of {n}"
    );
}

impl Kernels {
    /// Quantizes `x` to activation blocks (`x.len() == out.len() * 32`); bit-identical on every path to
    /// [`super::quantize_row_q8a_scalar`], whose documentation gives the rounding rule.
    ///
    /// # Panics
    /// When the lengths do not match.
    pub fn quantize_row_q8a(&self, x: &[f32], out: &mut [BlockQ8A]) {
        assert_eq!(x.len(), out.len() * QK, "quantize_row_q8a: x must hold 32 values per output block");
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.quantize_row_q8a)(x, out) }
    }

    /// The matmul of float weights (F32, F16, BF16, which are not packed) with 8-bit activations: for every `r`
    /// in `out.rows()` and `c` in `0..n_cols`, `out(c, r) = Σ_blocks da · Σ w·qa`, where block `b` of weight row
    /// `r` meets block `b` of activation column `c` (`act` is token-major: `n_cols × row_len / 32` blocks), the same
    /// shared code on every path (no model of ours has float matrices). Quantized weights are packed and meet
    /// activations in [`Kernels::matmul_packed`].
    ///
    /// **Batch invariance:** the value written for `(c, r)` is bit-identical whatever `n_cols` is, wherever column
    /// `c` sits in the batch and however `out`'s rows were split, because each output gets the same sequence of
    /// floating-point operations in every tile shape.
    ///
    /// # Panics
    /// When `w` is quantized, `act.len() != n_cols * w.blocks_per_row()`, `out.n_cols() != n_cols` or
    /// `out.rows()` reaches past `w.n_rows()`.
    pub fn matmul_q8(&self, w: &WeightMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
        let dtype = w.data().dtype();
        assert!(dtype.block_len() == 1, "matmul_q8: {} weights are packed (matmul_packed)", dtype.name());
        check_matmul(w, act.len(), w.blocks_per_row(), n_cols, out);
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.matmul_q8)(w, act, n_cols, out) }
    }

    /// The quantized matmul over packed weights ([`PackedMatrix`]): for every `r` in `out.rows()` and `c` in
    /// `0..n_cols`, `out(c, r)` is row `r` against activation column `c` (`act`: `n_cols × row_len / 32` blocks,
    /// token-major), with the arithmetic of `packed::scalar` (one accumulator per output, the row's groups in
    /// order; `docs/architecture.md`, "Numerics"). Batch-invariant like [`Kernels::matmul_q8`]: each output's
    /// operations depend on its row and column only.
    ///
    /// # Panics
    /// When `act.len() != n_cols * w.blocks_per_row()`, `out.n_cols() != n_cols` or `out.rows()` reaches past
    /// `w.n_rows()`.
    pub fn matmul_packed(&self, w: &PackedMatrix, act: &[BlockQ8A], n_cols: usize, out: &mut OutRows) {
        assert_eq!(
            act.len(),
            n_cols * w.blocks_per_row(),
            "matmul: activations must hold n_cols columns of the row length"
        );
        assert_eq!(out.n_cols(), n_cols, "matmul: output view has another column count");
        assert!(out.rows().end <= w.n_rows(), "matmul: output rows {:?} beyond {} weight rows", out.rows(), w.n_rows());
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.matmul_packed)(w, act, n_cols, out) }
    }

    /// The precise matmul: weights dequantized to f32 and multiplied with f32 activations (`act`: `n_cols ×
    /// row_len`, token-major) with f32 accumulation; `out(c, r) = Σ_k w(r, k) · act(c, k)`. Batch-invariant like
    /// [`Kernels::matmul_q8`].
    ///
    /// # Panics
    /// When `act.len() != n_cols * w.row_len()`, `out.n_cols() != n_cols` or `out.rows()` reaches past
    /// `w.n_rows()`.
    pub fn matmul_f32(&self, w: &WeightMatrix, act: &[f32], n_cols: usize, out: &mut OutRows) {
        check_matmul(w, act.len(), w.row_len(), n_cols, out);
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.matmul_f32)(w, act, n_cols, out) }
    }

    /// RMS normalization: `out[i] = x[i] / sqrt(mean(x²) + eps) · weight[i]`.
    ///
    /// # Panics
    /// When the three lengths differ.
    pub fn rms_norm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        assert!(x.len() == weight.len() && x.len() == out.len(), "rms_norm: lengths differ");
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.rms_norm)(x, weight, eps, out) }
    }

    /// The SwiGLU gate: `out[i] = silu(gate[i]) · up[i]` with `silu(g) = g · sigmoid(g)`.
    ///
    /// # Panics
    /// When the three lengths differ.
    pub fn silu_mul(&self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        assert!(gate.len() == up.len() && gate.len() == out.len(), "silu_mul: lengths differ");
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.silu_mul)(gate, up, out) }
    }

    /// The GeGLU gate: `out[i] = gelu(gate[i]) · up[i]`, GELU's tanh approximation (`numerics::gelu_tanh`).
    ///
    /// # Panics
    /// When the three lengths differ.
    pub fn gelu_mul(&self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        assert!(gate.len() == up.len() && gate.len() == out.len(), "gelu_mul: lengths differ");
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.gelu_mul)(gate, up, out) }
    }

    /// `x[i] += y[i]` (the residual add); exact, so identical on every path.
    ///
    /// # Panics
    /// When the lengths differ.
    pub fn add_assign(&self, x: &mut [f32], y: &[f32]) {
        assert_eq!(x.len(), y.len(), "add_assign: lengths differ");
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.add_assign)(x, y) }
    }

    /// Softmax in place, with the maximum subtracted first so that `exp` cannot overflow. `-inf` entries (masked
    /// positions) get probability 0; a slice of only `-inf` becomes NaN. Returns the maximum and the sum of the
    /// exponentials `Σ exp(x[i] − max)` the probabilities were divided by (what merging softmaxes of separate
    /// ranges needs).
    pub fn softmax_inplace(&self, x: &mut [f32]) -> (f32, f32) {
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.softmax_inplace)(x) }
    }

    /// Rotary position embedding of one head: each adjacent pair `(x[2i], x[2i+1])` is rotated by the angle whose
    /// cosine and sine are `cos[i]`, `sin[i]` (the caller computes the tables per position). Adjacent pairs are
    /// ggml's "normal" rope, which GGUF llama models use: the converter permutes Q and K rows to match.
    ///
    /// # Panics
    /// Unless `head.len() == 2 * cos.len() == 2 * sin.len()`.
    pub fn rope(&self, head: &mut [f32], cos: &[f32], sin: &[f32]) {
        assert!(head.len() == 2 * cos.len() && cos.len() == sin.len(), "rope: head must hold one pair per angle");
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.rope)(head, cos, sin) }
    }

    /// Attention scores of a group of query heads against a run of consecutive cache slots of an f16 KV cache:
    /// `out[g·out_stride + i] = Σ_j queries[g·width + j] · keys.rows[i·keys.stride + j]` for every head `g` of
    /// `queries` (`[heads][keys.width]`) and `i < keys.n`. Each score is the single-head dot product of
    /// `numerics` (8 lanes, then the lane tree), whatever the group: the group only lets a path convert each key
    /// once for all its heads.
    ///
    /// # Panics
    /// When `queries` is not whole heads of `keys.width` (non-zero), the run does not fit `keys.rows`, or `out`
    /// cannot hold `keys.n` scores per head `out_stride` apart.
    pub fn attention_scores_f16(&self, queries: &[f32], keys: CacheRun<'_, f16>, out: &mut [f32], out_stride: usize) {
        let heads = check_heads("attention_scores_f16", queries.len(), keys.width);
        check_run("attention_scores_f16", keys.width, keys.rows.len(), keys.stride, keys.n);
        check_rows("attention_scores_f16 out", out.len(), out_stride, keys.n, heads);
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.attention_scores_f16)(queries, keys, out, out_stride) }
    }

    /// Weighted sums of values over a run of consecutive cache slots of an f16 KV cache for a group of heads,
    /// added to `out` (`[heads][values.width]`) position by position: `out[g·width + j] += weights[g·weight_stride
    /// + i] · values.rows[i·values.stride + j]` for `i` in order, one fused multiply-add each.
    ///
    /// # Panics
    /// When `out` is not whole heads of `values.width` (non-zero), the run does not fit `values.rows`, or
    /// `weights` cannot hold `values.n` weights per head `weight_stride` apart.
    pub fn attention_values_f16(
        &self,
        weights: &[f32],
        weight_stride: usize,
        values: CacheRun<'_, f16>,
        out: &mut [f32],
    ) {
        let heads = check_heads("attention_values_f16", out.len(), values.width);
        check_run("attention_values_f16", values.width, values.rows.len(), values.stride, values.n);
        check_rows("attention_values_f16 weights", weights.len(), weight_stride, values.n, heads);
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.attention_values_f16)(weights, weight_stride, values, out) }
    }

    /// [`Kernels::attention_values_f16`] over `runs` in order, as if called once per run with the run's weights:
    /// run `k`'s position `i` takes `weights[g·weight_stride + n₀ + … + n_{k−1} + i]`. The same bits as those
    /// calls (each output element is one chain of fused multiply-adds in position order either way); a path may
    /// keep its sums in registers from run to run, which saves a cache block's run of 16 slots from reloading and
    /// storing them.
    ///
    /// # Panics
    /// As [`Kernels::attention_values_f16`] for each run, when the runs' widths differ, or when `weights` cannot
    /// hold every run's weights.
    pub fn attention_values_f16_runs(
        &self,
        weights: &[f32],
        weight_stride: usize,
        runs: &[CacheRun<'_, f16>],
        out: &mut [f32],
    ) {
        let Some(first) = runs.first() else { return };
        let heads = check_heads("attention_values_f16_runs", out.len(), first.width);
        let mut n = 0usize;
        for run in runs {
            assert!(run.width == first.width, "attention_values_f16_runs: runs {} and {} wide", first.width, run.width);
            check_run("attention_values_f16_runs", run.width, run.rows.len(), run.stride, run.n);
            n = n.checked_add(run.n).expect("attention_values_f16_runs: too many positions");
        }
        check_rows("attention_values_f16_runs weights", weights.len(), weight_stride, n, heads);
        match self.attention_values_f16_runs {
            // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed
            // out.
            Some(runs_fn) => unsafe { runs_fn(weights, weight_stride, runs, out) },
            None => {
                let mut done = 0;
                for run in runs {
                    // SAFETY: as above; each run was checked, and its weights lie after the `done` before it.
                    unsafe { (self.attention_values_f16)(&weights[done..], weight_stride, *run, out) };
                    done += run.n;
                }
            }
        }
    }

    /// Attention scores of a group of query heads, quantized to activation blocks (`queries`: `[heads][keys.width]`
    /// blocks, [`super::quantize_row_q8a`]), against a run of a q8_0 cache's slots (`keys.width` blocks per row):
    /// per key block the exact integer dot product with the query block, then `acc = fma(d_key · d_query, dot,
    /// acc)` over the blocks in order (`scalar::attention_quant`); `out[g·out_stride + i]` as for f16.
    ///
    /// # Panics
    /// As [`Kernels::attention_scores_f16`], with widths in blocks.
    pub fn attention_scores_q8_0(
        &self,
        queries: &[BlockQ8A],
        keys: CacheRun<'_, BlockQ8_0>,
        out: &mut [f32],
        out_stride: usize,
    ) {
        let heads = check_heads("attention_scores_q8_0", queries.len(), keys.width);
        check_run("attention_scores_q8_0", keys.width, keys.rows.len(), keys.stride, keys.n);
        check_rows("attention_scores_q8_0 out", out.len(), out_stride, keys.n, heads);
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.attention_scores_q8_0)(queries, keys, out, out_stride) }
    }

    /// [`Kernels::attention_scores_q8_0`] over a q4_0 cache.
    ///
    /// # Panics
    /// As [`Kernels::attention_scores_q8_0`].
    pub fn attention_scores_q4_0(
        &self,
        queries: &[BlockQ8A],
        keys: CacheRun<'_, BlockQ4_0>,
        out: &mut [f32],
        out_stride: usize,
    ) {
        let heads = check_heads("attention_scores_q4_0", queries.len(), keys.width);
        check_run("attention_scores_q4_0", keys.width, keys.rows.len(), keys.stride, keys.n);
        check_rows("attention_scores_q4_0 out", out.len(), out_stride, keys.n, heads);
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.attention_scores_q4_0)(queries, keys, out, out_stride) }
    }

    /// Weighted sums of a run of a q8_0 cache's slots for a group of heads (`values.width` blocks per row, `out`:
    /// `[heads][32 · values.width]`): per position and block `s = weight · d`, then `out[j] = fma(s, v_j,
    /// out[j])`, positions in order.
    ///
    /// # Panics
    /// As [`Kernels::attention_values_f16`], with widths in blocks.
    pub fn attention_values_q8_0(
        &self,
        weights: &[f32],
        weight_stride: usize,
        values: CacheRun<'_, BlockQ8_0>,
        out: &mut [f32],
    ) {
        let heads = check_heads("attention_values_q8_0", out.len(), QK * values.width);
        check_run("attention_values_q8_0", values.width, values.rows.len(), values.stride, values.n);
        check_rows("attention_values_q8_0 weights", weights.len(), weight_stride, values.n, heads);
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.attention_values_q8_0)(weights, weight_stride, values, out) }
    }

    /// [`Kernels::attention_values_q8_0`] over a q4_0 cache.
    ///
    /// # Panics
    /// As [`Kernels::attention_values_q8_0`].
    pub fn attention_values_q4_0(
        &self,
        weights: &[f32],
        weight_stride: usize,
        values: CacheRun<'_, BlockQ4_0>,
        out: &mut [f32],
    ) {
        let heads = check_heads("attention_values_q4_0", out.len(), QK * values.width);
        check_run("attention_values_q4_0", values.width, values.rows.len(), values.stride, values.n);
        check_rows("attention_values_q4_0 weights", weights.len(), weight_stride, values.n, heads);
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.attention_values_q4_0)(weights, weight_stride, values, out) }
    }

    /// The index of the first maximum. NaN entries are never chosen; a slice of only NaN gives 0.
    ///
    /// # Panics
    /// When `x` is empty.
    pub fn argmax(&self, x: &[f32]) -> usize {
        assert!(!x.is_empty(), "argmax of an empty slice");
        // SAFETY: see the type's documentation: this table's CPU features were detected before it was handed out.
        unsafe { (self.argmax)(x) }
    }
}
