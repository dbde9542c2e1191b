//! The mixture-of-experts FFN of a step on the CPU (`LlamaBackend::moe_ffn`): the router's logits from the
//! normalized rows in f32, each row's experts and weights (`MoeConfig::route`), the routed experts batched by expert
//! (`experts.rs`), and the shared expert beside them.
//!
//! The shared expert is `routed_experts` with one slot per row whose weight is its gate (σ of a dot product, or 1),
//! so its output is `g · y` as llama.cpp's `ggml_mul(ffn_shexp, gate)`; it is added after the routed sum, as
//! llama.cpp adds `moe_out + ffn_shexp_out`.

use super::backend::Precision;
use super::experts::{routed_experts, ExpertActivation, ExpertScratch};
use super::kernels::Kernels;
use super::model_weights::LayerExperts;
use super::parallel::{parallel_matmul, Activations, MatmulJob};
use super::pool::ThreadPool;
use crate::model::llama::architecture::ExpertGlu;
use crate::model::llama::{FfnActivation, LlamaConfig, MoeConfig};

/// The buffers of a model's mixture-of-experts blocks, sized once for `max_batch_tokens` rows.
pub(super) struct MoeScratch {
    /// `[T][n_expert]`: router logits, then probabilities.
    logits: Vec<f32>,
    /// `[n_expert]`: the values a row's experts are chosen by, where they are not its probabilities.
    choice: Vec<f32>,
    /// `[T][n_expert_used]`: each row's experts and weights.
    selected: Vec<u32>,
    weights: Vec<f32>,
    routed: ExpertScratch,
    shared: Option<SharedScratch>,
}

struct SharedScratch {
    scratch: ExpertScratch,
    /// `[T]` zeros: every row's one slot is the shared expert, index 0 of its list of one.
    expert: Vec<u32>,
    /// `[T]`: each row's gate.
    gate: Vec<f32>,
    /// `[T][n_embd]`: its output.
    out: Vec<f32>,
}

impl MoeScratch {
    pub(super) fn new(config: &LlamaConfig, moe: &MoeConfig, max_tokens: usize, precision: Precision) -> Self {
        let (d, k) = (config.n_embd, moe.n_expert_used);
        MoeScratch {
            logits: vec![0.0; max_tokens * moe.n_expert],
            choice: vec![0.0; moe.n_expert],
            selected: vec![0; max_tokens * k],
            weights: vec![0.0; max_tokens * k],
            routed: ExpertScratch::new(max_tokens, k, d, moe.n_ff_exp, precision),
            shared: moe.shared.map(|s| SharedScratch {
                scratch: ExpertScratch::new(max_tokens, 1, d, s.n_ff, precision),
                expert: vec![0; max_tokens],
                gate: vec![0.0; max_tokens],
                out: vec![0.0; max_tokens * d],
            }),
        }
    }
}

/// What the operation reads besides its rows.
pub(super) struct MoeOperands<'a, 'm> {
    pub pool: &'a ThreadPool,
    pub kernels: &'static Kernels,
    pub precision: Precision,
    pub config: &'a LlamaConfig,
    pub experts: &'a LayerExperts<'m>,
}

/// `out[t]` = the block's output for normalized row `input[t]` (`T × n_embd` each).
pub(super) fn moe_ffn(op: &MoeOperands<'_, '_>, scratch: &mut MoeScratch, input: &[f32], out: &mut [f32]) {
    let moe = op.config.moe.as_ref().expect("a mixture-of-experts block");
    let d = op.config.n_embd;
    let t = input.len() / d;
    let (n, k) = (moe.n_expert, moe.n_expert_used);
    let logits = &mut scratch.logits[..t * n];
    let job = MatmulJob { weights: &op.experts.router, out: logits };
    parallel_matmul(op.pool, op.kernels, Activations::F32(input), t, &mut [job]);
    if !op.experts.router_bias.is_empty() {
        for row in logits.chunks_exact_mut(n) {
            op.kernels.add_assign(row, &op.experts.router_bias);
        }
    }
    for row in 0..t {
        let (sel, w) = (&mut scratch.selected[row * k..(row + 1) * k], &mut scratch.weights[row * k..(row + 1) * k]);
        let logits = &mut scratch.logits[row * n..(row + 1) * n];
        moe.route(logits, &op.experts.selection_bias, &mut scratch.choice, sel, w);
    }
    let activation = match (moe.activation, op.config.ffn_activation) {
        (ExpertGlu::SwigluOai { alpha, limit }, _) => ExpertActivation::SwigluOai { alpha, limit },
        (ExpertGlu::AsDense, FfnActivation::Silu) => ExpertActivation::Silu,
        (ExpertGlu::AsDense, FfnActivation::GeluTanh) => ExpertActivation::GeluTanh,
    };
    routed_experts(
        op.pool,
        op.kernels,
        op.precision,
        &op.experts.routed,
        activation,
        input,
        &scratch.selected[..t * k],
        &scratch.weights[..t * k],
        &mut scratch.routed,
        out,
    );
    if let Some(shared) = &mut scratch.shared {
        for (g, row) in shared.gate[..t].iter_mut().zip(input.chunks_exact(d)) {
            *g = shared_gate(&op.experts.shared_gate, row);
        }
        routed_experts(
            op.pool,
            op.kernels,
            op.precision,
            &op.experts.shared,
            activation,
            input,
            &shared.expert[..t],
            &shared.gate[..t],
            &mut shared.scratch,
            &mut shared.out[..t * d],
        );
        op.kernels.add_assign(out, &shared.out[..t * d]);
    }
}

/// The shared expert's weight for `row`: σ(`gate · row`) computed as llama.cpp does (`silu(x) / x`, but ½ at 0),
/// or 1 without a gate.
fn shared_gate(gate: &[f32], row: &[f32]) -> f32 {
    if gate.is_empty() {
        return 1.0;
    }
    let x: f32 = gate.iter().zip(row).map(|(g, r)| g * r).sum();
    if x == 0.0 {
        // σ(0); llama.cpp's `silu(0) / 0` is NaN there, which would poison the whole row.
        return 0.5;
    }
    (x / (1.0 + (-x).exp())) / x
}
