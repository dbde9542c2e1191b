//! A mixture-of-experts block enqueued on the stream (`Launch::Moe`): the router's logits, the routing (which adds
//! gpt-oss' router bias, and DeepSeek's selection bias and group limit for the choice), the routed experts (with
//! gpt-oss' biases and activation), the shared expert. Everything stays on the device, so that a decode step with
//! experts replays from a CUDA graph like a dense one (the chosen experts are data the kernels read, not launch
//! parameters). The routed experts run per (token, slot) pair for a few rows and grouped by expert for more
//! (`calls_moe::grouped_experts`), with the same bits either way.
//!
//! The order matters because the block's input and output are one buffer (`io`, the normalized rows): every
//! kernel that reads the input (router, routed gate/up, the shared expert's gate/up and gate) runs before
//! `moe_down` (or `moe_weighted_sum`) overwrites it with the routed experts' weighted sum; the shared expert's
//! output is added after, as the CPU adds it.

use super::buffers::{MoeBuffers, SharedBuffers};
use super::calls::{GatedCall, MatmulCall, ProjectSmallCall, SMALL_BATCH_MAX_TOKENS};
use super::calls_moe::{grouped_experts, MoeDownCall, MoeGateUpCall, MoeGroupCall, MoeSharedAddCall, RouteCall};
use super::device_array::{DeviceArray, MatrixArray};
use super::error::CudaBackendError;
use super::execute::StepRun;
use super::experts::DeviceSharedExpert;
use super::weights::DeviceMatrix;
use crate::model::llama::forward::Buf;

fn internal(detail: &str) -> CudaBackendError {
    CudaBackendError::Internal(detail.to_owned())
}

impl StepRun<'_> {
    /// Replaces the rows of `io` by layer `layer`'s mixture-of-experts FFN of them.
    pub(super) fn moe(&self, layer: usize, io: Buf) -> Result<(), CudaBackendError> {
        let moe = self.config.moe.as_ref().ok_or_else(|| internal("a mixture-of-experts block in a dense model"))?;
        let bufs = self.buffers.moe.as_ref().ok_or_else(|| internal("no mixture-of-experts buffers"))?;
        let experts = self.weights.experts(layer)?;
        let (s, k, n_tokens) = (self.stream, moe.n_expert_used, self.rows);
        let MoeBuffers { logits, selected, weights, hidden, shared: shared_bufs, grouped } = bufs;
        let (x, logits) = (self.buffers.activation(io, s), DeviceArray::new(logits, s));
        let (selected, weights, hidden) =
            (DeviceArray::new(selected, s), DeviceArray::new(weights, s), DeviceArray::new(hidden, s));

        let biases = experts.biases.as_ref();
        self.dense(&experts.router, x, logits)?;
        let bias = biases.map(|b| DeviceArray::new(&b.router, s));
        let selection_bias = experts.selection_bias.as_ref().map(|b| DeviceArray::new(b, s));
        let route = RouteCall { logits, bias, selection_bias, selected, weights, n_tokens, moe };
        self.kernels.moe_route(s, &route)?;
        let expert_biases = biases.map(|b| b.experts(s));
        let gate_up = MoeGateUpCall {
            experts: experts.rows(s),
            x,
            selected,
            hidden,
            n_tokens,
            k,
            n_expert: moe.n_expert,
            n_ff: moe.n_ff_exp,
            activation: self.config.ffn_activation,
            glu: moe.activation,
            biases: expert_biases,
        };
        // The step's pairs by expert, when it takes the grouped path.
        let tiles = match (grouped_experts(n_tokens, k, moe.n_expert), grouped) {
            (false, _) => None,
            (true, Some(g)) => Some(g.tiles(s, n_tokens * k, moe.n_expert)),
            (true, None) => return Err(internal("a grouped step without the grouped path's buffers")),
        };
        match &tiles {
            Some(tiles) => {
                let group = MoeGroupCall {
                    selected,
                    tiles: *tiles,
                    pairs: n_tokens * k,
                    n_expert: moe.n_expert,
                    width: self.config.n_embd,
                };
                self.kernels.moe_group(s, &group)?;
                self.kernels.moe_gate_up_tiled(s, &gate_up, tiles)?;
            }
            None => self.kernels.moe_gate_up(s, &gate_up)?,
        }
        let shared = match (&experts.shared, shared_bufs) {
            (Some(weights), Some(bufs)) => Some((weights, bufs)),
            (None, None) => None,
            _ => return Err(internal("a shared expert without its buffers, or buffers without one")),
        };
        if let Some((w, b)) = shared {
            self.shared_hidden(w, b, x)?;
            if let Some(gate_inp) = &w.gate_inp {
                self.dense(gate_inp, x, DeviceArray::new(&b.gate_logit, s))?;
            }
        }
        // From here on `io` is written: nothing reads the block's input any more.
        let down = MoeDownCall {
            down: experts.down.array(s),
            hidden,
            selected,
            weights,
            out: x,
            bias: expert_biases.map(|b| b.down),
            n_tokens,
            k,
            n_expert: moe.n_expert,
        };
        match &tiles {
            Some(tiles) => {
                self.kernels.moe_down_tiled(s, &down, tiles)?;
                self.kernels.moe_weighted_sum(s, &down, tiles)?;
            }
            None => self.kernels.moe_down(s, &down)?,
        }
        if let Some((w, b)) = shared {
            let out = DeviceArray::new(&b.out, s);
            self.dense(&w.down, DeviceArray::new(&b.gate, s), out)?;
            let add = MoeSharedAddCall {
                out: x,
                y: out,
                gate: w.gate_inp.as_ref().map(|_| DeviceArray::new(&b.gate_logit, s)),
                n_tokens,
                width: self.config.n_embd,
            };
            self.kernels.moe_shared_add(s, &add)?;
        }
        Ok(())
    }

    /// `y = m · x` over the step's rows: `project_small` for a few, the tiled matmul for more (the same bits).
    pub(super) fn dense(
        &self,
        m: &DeviceMatrix,
        x: DeviceArray<'_, f32>,
        y: DeviceArray<'_, f32>,
    ) -> Result<(), CudaBackendError> {
        self.dense_array(m.array(self.stream), x, y)
    }

    /// [`dense`](Self::dense) of a matrix as the kernels read it (one head's rows of a per-head stack).
    pub(super) fn dense_array(
        &self,
        m: MatrixArray<'_>,
        x: DeviceArray<'_, f32>,
        y: DeviceArray<'_, f32>,
    ) -> Result<(), CudaBackendError> {
        let (s, n_tokens) = (self.stream, self.rows);
        if n_tokens <= SMALL_BATCH_MAX_TOKENS {
            let outputs = [(m, y)];
            let call = ProjectSmallCall { outputs: &outputs, x, n_tokens, norm: None, add: false, gated: None };
            self.kernels.project_small(s, &call)
        } else {
            self.kernels.matmul(s, &MatmulCall { matrix: m, x, y, n_tokens, add: false })
        }
    }

    /// The shared expert's `act(gate · x) ⊙ (up · x)` into `b.gate`: one fused launch for a few rows of one type,
    /// else the two projections and the activation (bit for bit the same, `kernels/emulation`'s gated check).
    fn shared_hidden(
        &self,
        w: &DeviceSharedExpert,
        b: &SharedBuffers,
        x: DeviceArray<'_, f32>,
    ) -> Result<(), CudaBackendError> {
        let (s, n_tokens) = (self.stream, self.rows);
        let (gate, up) = (DeviceArray::new(&b.gate, s), DeviceArray::new(&b.up, s));
        let activation = self.config.ffn_activation;
        if n_tokens <= SMALL_BATCH_MAX_TOKENS && w.gate.dtype == w.up.dtype {
            let outputs = [(w.gate.array(s), gate), (w.up.array(s), up)];
            let call =
                ProjectSmallCall { outputs: &outputs, x, n_tokens, norm: None, add: false, gated: Some(activation) };
            return self.kernels.project_small(s, &call);
        }
        self.dense(&w.gate, x, gate)?;
        self.dense(&w.up, x, up)?;
        self.kernels.gated_activation(s, &GatedCall { gate, up, n: n_tokens * w.gate.rows, activation })
    }
}
