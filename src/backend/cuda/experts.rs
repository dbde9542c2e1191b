//! A mixture-of-experts block's weights on the device: the router, the routed experts as the file stacks them (one
//! packed matrix per tensor, expert `e`'s rows at `e × its rows`, so that a kernel reaches any expert by an
//! offset and a step reads only the experts it chose), the shared expert's dense matrices (Qwen 2 MoE's gated one,
//! or DeepSeek's counted shared experts as one ungated FFN), gpt-oss' biases (the router's and each expert's, f32,
//! stacked as the matrices are) and DeepSeek's selection bias.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::calls_moe::{ExpertBiases, ExpertRows};
use super::device_array::DeviceArray;
use super::error::CudaBackendError;
use super::weights::DeviceMatrix;
use crate::model::gguf::GgufFile;
use crate::model::llama::experts::{FUSED_GATE_UP_EXPS, SELECTION_BIAS};
use crate::model::llama::{LlamaConfig, MoeConfig};

/// The shared expert: a dense FFN every token runs.
pub struct DeviceSharedExpert {
    pub gate: DeviceMatrix,
    pub up: DeviceMatrix,
    pub down: DeviceMatrix,
    /// `[1 row][n_embd]`: `ffn_gate_inp_shexp`, whose product with a row gates the expert's output (Qwen 2 MoE).
    pub gate_inp: Option<DeviceMatrix>,
}

/// The biases of a layer whose experts have them (`MoeConfig::biases`).
pub struct DeviceExpertBiases {
    /// `[n_expert]`: `ffn_gate_inp.bias`, added to the router's logits.
    pub router: CudaSlice<f32>,
    /// `[n_expert][n_ff_exp]`, `[n_expert][n_ff_exp]`, `[n_expert][n_embd]`: `ffn_{gate,up,down}_exps.bias`.
    gate: CudaSlice<f32>,
    up: CudaSlice<f32>,
    down: CudaSlice<f32>,
}

impl DeviceExpertBiases {
    /// The experts' biases as the kernels read them.
    pub fn experts<'a>(&'a self, stream: &CudaStream) -> ExpertBiases<'a> {
        ExpertBiases {
            gate: DeviceArray::new(&self.gate, stream),
            up: DeviceArray::new(&self.up, stream),
            down: DeviceArray::new(&self.down, stream),
        }
    }
}

/// One layer's experts.
pub struct DeviceExperts {
    /// `[n_expert rows][n_embd]`: `ffn_gate_inp`, as the file has it (F32 in every file llama-quantize writes).
    pub router: DeviceMatrix,
    /// `[n_expert · n_ff_exp rows][n_embd]`, or the fused `[n_expert · 2 n_ff_exp rows][n_embd]`.
    gate: DeviceMatrix,
    /// `None` when fused into `gate`.
    up: Option<DeviceMatrix>,
    /// `[n_expert · n_embd rows][n_ff_exp]`.
    pub down: DeviceMatrix,
    pub shared: Option<DeviceSharedExpert>,
    pub biases: Option<DeviceExpertBiases>,
    /// `[n_expert]`: `exp_probs_b.bias` (`MoeConfig::selection_bias`), added to the probabilities for the choice.
    pub selection_bias: Option<CudaSlice<f32>>,
    n_ff: usize,
}

impl DeviceExperts {
    /// Uploads layer `l`'s experts. The gate and up of the routed experts must have one type (one kernel reads
    /// both); a file whose do not is refused naming them.
    pub fn upload(
        file: &GgufFile,
        l: usize,
        moe: &MoeConfig,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, CudaBackendError> {
        let name = |suffix: &str| LlamaConfig::layer_tensor(l, suffix);
        let matrix = |suffix: &str| DeviceMatrix::upload(file, &name(suffix), None, stream);
        let (gate, up) = if moe.fused_gate_up {
            (matrix(FUSED_GATE_UP_EXPS)?, None)
        } else {
            let (gate, up) = (matrix("ffn_gate_exps.weight")?, matrix("ffn_up_exps.weight")?);
            if gate.dtype != up.dtype {
                return Err(CudaBackendError::Unsupported(format!(
                    "{} ({:?}) and {} ({:?}) of different types: the CUDA backend reads an expert's gate and up \
                     with one kernel",
                    name("ffn_gate_exps.weight"),
                    gate.dtype,
                    name("ffn_up_exps.weight"),
                    up.dtype
                )));
            }
            (gate, Some(up))
        };
        let shared = match moe.shared {
            None => None,
            Some(s) => Some(DeviceSharedExpert {
                gate: matrix("ffn_gate_shexp.weight")?,
                up: matrix("ffn_up_shexp.weight")?,
                down: matrix("ffn_down_shexp.weight")?,
                gate_inp: if s.gated { Some(matrix("ffn_gate_inp_shexp.weight")?) } else { None },
            }),
        };
        let bias = |suffix: &str| -> Result<CudaSlice<f32>, CudaBackendError> {
            let values = file.tensor(&name(suffix))?.as_f32()?;
            stream.clone_htod(values).map_err(CudaBackendError::driver("uploading the weights"))
        };
        // The file's loader checked their shapes against the config (`config.rs`).
        let biases = match moe.biases {
            false => None,
            true => Some(DeviceExpertBiases {
                router: bias("ffn_gate_inp.bias")?,
                gate: bias("ffn_gate_exps.bias")?,
                up: bias("ffn_up_exps.bias")?,
                down: bias("ffn_down_exps.bias")?,
            }),
        };
        Ok(DeviceExperts {
            router: matrix("ffn_gate_inp.weight")?,
            gate,
            up,
            down: matrix("ffn_down_exps.weight")?,
            shared,
            biases,
            selection_bias: match moe.selection_bias {
                true => Some(bias(SELECTION_BIAS)?),
                false => None,
            },
            n_ff: moe.n_ff_exp,
        })
    }

    /// The routed experts' gate and up rows as the kernel reads them.
    pub fn rows<'a>(&'a self, stream: &CudaStream) -> ExpertRows<'a> {
        let gate = self.gate.array(stream);
        match &self.up {
            Some(up) => ExpertRows { gate, up: up.array(stream), stride: self.n_ff, up_offset: 0 },
            None => ExpertRows { gate, up: gate, stride: 2 * self.n_ff, up_offset: self.n_ff },
        }
    }

    /// The routed experts' stacked matrices (gate, down, and up unless fused), which moe.cu's per-type kernels read.
    pub fn routed(&self) -> impl Iterator<Item = &DeviceMatrix> {
        [&self.gate, &self.down].into_iter().chain(&self.up)
    }

    /// Every matrix, for the list of weight types to compile kernels for.
    pub fn matrices(&self) -> impl Iterator<Item = &DeviceMatrix> {
        let shared = self.shared.iter().flat_map(|s| [&s.gate, &s.up, &s.down].into_iter().chain(&s.gate_inp));
        [&self.router, &self.gate, &self.down].into_iter().chain(&self.up).chain(shared)
    }

    /// Bytes a token reads: the router, `k` routed experts (the stacked tensors' bytes over `n_expert`, times `k`)
    /// and the shared expert.
    pub fn bytes_per_token(&self, moe: &MoeConfig) -> usize {
        let routed = self.gate.bytes() + self.up.as_ref().map_or(0, DeviceMatrix::bytes) + self.down.bytes();
        let shared = self.shared.iter().flat_map(|s| [&s.gate, &s.up, &s.down].into_iter().chain(&s.gate_inp));
        self.router.bytes() + routed / moe.n_expert * moe.n_expert_used + shared.map(DeviceMatrix::bytes).sum::<usize>()
    }
}
