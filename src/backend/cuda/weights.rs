//! The model's weights on the device, uploaded once when the backend is built and kept quantized: each matrix in
//! the layout of `packing.rs`, the norms as f32.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::device_array::{DeviceArray, MatrixArray};
use super::error::CudaBackendError;
use super::experts::DeviceExperts;
use super::latent::DeviceLatent;
use super::module::KernelTypes;
use super::packing::{pack, PackedType};
use crate::backend::cpu::kernels::WeightMatrix;
use crate::model::gguf::GgufFile;
use crate::model::llama::config::ATTN_SINKS;
use crate::model::llama::forward::{Bias, Norm, Weight};
use crate::model::llama::LlamaConfig;

/// One packed matrix in device memory.
pub struct DeviceMatrix {
    pub dtype: PackedType,
    pub rows: usize,
    pub cols: usize,
    /// `[rows][cols / 32][dtype.quant_words()]`.
    quants: CudaSlice<u32>,
    /// `[rows][cols / 32][dtype.scale_words()]` (one unused word for the float types).
    scales: CudaSlice<u32>,
}

impl DeviceMatrix {
    /// Uploads tensor `name`, or only its rows `rows` (one part of a fused tensor).
    pub(super) fn upload(
        file: &GgufFile,
        name: &str,
        rows: Option<Range<usize>>,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, CudaBackendError> {
        let mut matrix = WeightMatrix::from_tensor(&file.tensor(name)?)?;
        if let Some(rows) = rows {
            matrix = matrix
                .rows(rows.clone())
                .ok_or_else(|| CudaBackendError::Internal(format!("{name} has no rows {rows:?}")))?;
        }
        let packed = pack(&matrix);
        // The float types have no scales; a device allocation of no bytes is an error, so they get one unused word.
        let scales = if packed.scales.is_empty() { vec![0] } else { packed.scales };
        let upload = CudaBackendError::driver("uploading the weights");
        Ok(DeviceMatrix {
            dtype: packed.dtype,
            rows: packed.rows,
            cols: packed.cols,
            quants: stream.clone_htod(&packed.quants).map_err(upload)?,
            scales: stream.clone_htod(&scales).map_err(CudaBackendError::driver("uploading the weights"))?,
        })
    }

    pub fn array<'a>(&'a self, stream: &CudaStream) -> MatrixArray<'a> {
        MatrixArray {
            dtype: self.dtype,
            rows: self.rows,
            cols: self.cols,
            quants: DeviceArray::new(&self.quants, stream),
            scales: DeviceArray::new(&self.scales, stream),
        }
    }

    /// Bytes of device memory.
    pub fn bytes(&self) -> usize {
        4 * (self.quants.len() + self.scales.len())
    }
}

/// The matrices and norms of one transformer block.
struct LayerWeights {
    /// The attention's q, k and v, indexed as [`matrix_index`] orders them (absent with latent attention).
    qkv: Option<[DeviceMatrix; 3]>,
    /// The attention's output projection.
    output: DeviceMatrix,
    /// DeepSeek's latent attention (`LlamaConfig::latent`) in place of `qkv`.
    latent: Option<DeviceLatent>,
    /// The dense FFN's gate, up and down (absent in a mixture-of-experts block).
    ffn: Option<[DeviceMatrix; 3]>,
    experts: Option<DeviceExperts>,
    /// The attention's and the FFN's input norms (`pre_norms`; all but OLMo 2).
    pre_norms: Option<[CudaSlice<f32>; 2]>,
    /// Gemma 3's norms of the attention and feed-forward outputs (`post_norms`).
    post_norms: Option<[CudaSlice<f32>; 2]>,
    /// The norms of queries and keys (`qk_norm`): `[head_dim]` each, or `[q_dim]` and `[kv_dim]` for whole rows.
    head_norms: Option<[CudaSlice<f32>; 2]>,
    /// The query, key and value projections' biases (`qkv_bias`).
    biases: Option<[CudaSlice<f32>; 3]>,
    /// `[n_embd]`: the output projection's bias (`attn_output_bias`, gpt-oss).
    output_bias: Option<CudaSlice<f32>>,
    /// `[n_head]`: each query head's sink logit (`attn_sinks`, gpt-oss).
    sinks: Option<CudaSlice<f32>>,
}

impl LayerWeights {
    fn matrices(&self) -> impl Iterator<Item = &DeviceMatrix> {
        let experts = self.experts.iter().flat_map(DeviceExperts::matrices);
        let latent = self.latent.iter().flat_map(DeviceLatent::matrices);
        self.qkv.iter().flatten().chain([&self.output]).chain(latent).chain(self.ffn.iter().flatten()).chain(experts)
    }
}

/// Position of a layer's matrix in `LayerWeights::qkv` (0..3), the output projection (3) or `ffn` (4..7), and its
/// layer.
fn matrix_index(w: Weight) -> (usize, usize) {
    match w {
        Weight::AttnQ(l) => (l, 0),
        Weight::AttnK(l) => (l, 1),
        Weight::AttnV(l) => (l, 2),
        Weight::AttnOutput(l) => (l, 3),
        Weight::FfnGate(l) => (l, 4),
        Weight::FfnUp(l) => (l, 5),
        Weight::FfnDown(l) => (l, 6),
    }
}

/// Every weight of the model, on the device.
pub struct DeviceWeights {
    /// `[vocab][n_embd]`.
    token_embd: DeviceMatrix,
    /// `[vocab][n_embd]`; `None` when the model ties it to `token_embd`.
    output: Option<DeviceMatrix>,
    /// `[n_embd]`.
    output_norm: CudaSlice<f32>,
    layers: Vec<LayerWeights>,
}

impl DeviceWeights {
    /// Uploads every tensor the forward pass reads (the file was validated against `config` when it was loaded).
    pub fn upload(file: &GgufFile, config: &LlamaConfig, stream: &Arc<CudaStream>) -> Result<Self, CudaBackendError> {
        let matrix = |name: &str| DeviceMatrix::upload(file, name, None, stream);
        let weight = |w: Weight| {
            let (name, rows) = config.weight_source(w);
            DeviceMatrix::upload(file, &name, rows, stream)
        };
        let norm = |name: &str| -> Result<CudaSlice<f32>, CudaBackendError> {
            let values = file.tensor(name)?.as_f32()?;
            stream.clone_htod(values).map_err(CudaBackendError::driver("uploading the weights"))
        };
        let layers = (0..config.n_layer)
            .map(|l| {
                Ok(LayerWeights {
                    qkv: match config.latent {
                        Some(_) => None,
                        None => Some([weight(Weight::AttnQ(l))?, weight(Weight::AttnK(l))?, weight(Weight::AttnV(l))?]),
                    },
                    output: weight(Weight::AttnOutput(l))?,
                    latent: match config.latent {
                        Some(shapes) => Some(DeviceLatent::upload(file, l, shapes, stream)?),
                        None => None,
                    },
                    // A layer has a dense FFN or experts, as the forward pass chooses (DeepSeek's leading dense blocks
                    // come before its mixture-of-experts layers).
                    ffn: match config.is_moe_layer(l) {
                        true => None,
                        false => {
                            Some([weight(Weight::FfnGate(l))?, weight(Weight::FfnUp(l))?, weight(Weight::FfnDown(l))?])
                        }
                    },
                    experts: match &config.moe {
                        Some(moe) if moe.has_layer(l) => Some(DeviceExperts::upload(file, l, moe, stream)?),
                        _ => None,
                    },
                    pre_norms: match config.pre_norms {
                        true => Some([norm(&Norm::Attn(l).tensor_name())?, norm(&config.norm_tensor(Norm::Ffn(l)))?]),
                        false => None,
                    },
                    post_norms: match config.post_norms {
                        true => Some([norm(&Norm::PostAttn(l).tensor_name())?, norm(&Norm::PostFfn(l).tensor_name())?]),
                        false => None,
                    },
                    head_norms: match config.qk_norm {
                        Some(_) => Some([norm(&Norm::QHead(l).tensor_name())?, norm(&Norm::KHead(l).tensor_name())?]),
                        None => None,
                    },
                    biases: match config.qkv_bias {
                        true => Some([
                            norm(&Bias::AttnQ(l).tensor_name())?,
                            norm(&Bias::AttnK(l).tensor_name())?,
                            norm(&Bias::AttnV(l).tensor_name())?,
                        ]),
                        false => None,
                    },
                    output_bias: match config.attn_output_bias {
                        true => Some(norm(&Bias::AttnOutput(l).tensor_name())?),
                        false => None,
                    },
                    sinks: match config.attn_sinks {
                        true => Some(norm(&LlamaConfig::layer_tensor(l, ATTN_SINKS))?),
                        false => None,
                    },
                })
            })
            .collect::<Result<Vec<_>, CudaBackendError>>()?;
        Ok(DeviceWeights {
            token_embd: matrix("token_embd.weight")?,
            output: if config.tied_output { None } else { Some(matrix("output.weight")?) },
            output_norm: norm(&Norm::Output.tensor_name())?,
            layers,
        })
    }

    /// The weight types of the model's matrices, and of its routed experts' (for the kernels that read them).
    pub fn types(&self) -> KernelTypes {
        let layers = self.layers.iter().flat_map(|l| l.matrices());
        let weights = layers.chain([&self.token_embd]).chain(&self.output).map(|m| m.dtype).collect();
        let routed = self.layers.iter().flat_map(|l| l.experts.iter().flat_map(DeviceExperts::routed));
        // The cache's types are the backend's to add (`CudaBackend::new`).
        KernelTypes { weights, experts: routed.map(|m| m.dtype).collect(), kv_caches: Vec::new() }
    }

    pub fn matrix(&self, w: Weight) -> &DeviceMatrix {
        let (layer, i) = matrix_index(w);
        let layer = &self.layers[layer];
        match i {
            0..3 => &layer.qkv.as_ref().expect("q/k/v weights are asked for without latent attention only")[i],
            3 => &layer.output,
            _ => &layer.ffn.as_ref().expect("a dense FFN's weights are asked for a dense layer only")[i - 4],
        }
    }

    /// Layer `layer`'s latent-attention weights; an internal error for a model without latent attention.
    pub fn latent(&self, layer: usize) -> Result<&DeviceLatent, CudaBackendError> {
        let found = self.layers.get(layer).and_then(|l| l.latent.as_ref());
        found.ok_or_else(|| CudaBackendError::Internal(format!("layer {layer} has no latent attention")))
    }

    /// Layer `layer`'s experts; an internal error for a dense layer (the forward pass asks only a mixture-of-experts
    /// model's).
    pub fn experts(&self, layer: usize) -> Result<&DeviceExperts, CudaBackendError> {
        let found = self.layers.get(layer).and_then(|l| l.experts.as_ref());
        found.ok_or_else(|| CudaBackendError::Internal(format!("layer {layer} has no experts")))
    }

    /// The weight of norm `n`; an error for a norm the model does not have (the forward pass names only those its
    /// config has, so this is an internal error).
    pub fn norm(&self, n: Norm) -> Result<&CudaSlice<f32>, CudaBackendError> {
        let layer = |l: usize| self.layers.get(l);
        let found = match n {
            Norm::Attn(l) => layer(l).and_then(|w| w.pre_norms.as_ref()).map(|[a, _]| a),
            Norm::Ffn(l) => layer(l).and_then(|w| w.pre_norms.as_ref()).map(|[_, f]| f),
            Norm::PostAttn(l) => layer(l).and_then(|w| w.post_norms.as_ref()).map(|[a, _]| a),
            Norm::PostFfn(l) => layer(l).and_then(|w| w.post_norms.as_ref()).map(|[_, f]| f),
            Norm::QHead(l) => layer(l).and_then(|w| w.head_norms.as_ref()).map(|[q, _]| q),
            Norm::KHead(l) => layer(l).and_then(|w| w.head_norms.as_ref()).map(|[_, k]| k),
            Norm::Output => Some(&self.output_norm),
        };
        found.ok_or_else(|| CudaBackendError::Internal(format!("the model has no norm {n:?}")))
    }

    /// The bias `b`; an internal error for a model without biases (the forward pass adds them only when its
    /// config has them).
    pub fn bias(&self, b: Bias) -> Result<&CudaSlice<f32>, CudaBackendError> {
        let qkv = |l: usize, i: usize| self.layers.get(l).and_then(|w| w.biases.as_ref()).map(|b| &b[i]);
        let found = match b {
            Bias::AttnQ(l) => qkv(l, 0),
            Bias::AttnK(l) => qkv(l, 1),
            Bias::AttnV(l) => qkv(l, 2),
            Bias::AttnOutput(l) => self.layers.get(l).and_then(|w| w.output_bias.as_ref()),
        };
        found.ok_or_else(|| CudaBackendError::Internal(format!("the model has no bias {b:?}")))
    }

    /// Layer `layer`'s attention sinks, `None` for a model without them.
    pub fn sinks(&self, layer: usize) -> Option<&CudaSlice<f32>> {
        self.layers.get(layer).and_then(|w| w.sinks.as_ref())
    }

    pub fn token_embd(&self) -> &DeviceMatrix {
        &self.token_embd
    }

    pub fn output(&self) -> &DeviceMatrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Bytes of weights a one-token decode step reads: every dense matrix once, the output projection included,
    /// and of a mixture-of-experts block its router, `n_expert_used` routed experts and its shared expert.
    pub fn bytes_per_token(&self, config: &LlamaConfig) -> usize {
        let layer = |l: &LayerWeights| -> usize {
            let latent = l.latent.iter().flat_map(DeviceLatent::matrices);
            let attention = l.qkv.iter().flatten().chain([&l.output]).chain(latent);
            let dense = attention.chain(l.ffn.iter().flatten()).map(DeviceMatrix::bytes).sum::<usize>();
            let experts = match (&l.experts, &config.moe) {
                (Some(e), Some(moe)) => e.bytes_per_token(moe),
                _ => 0,
            };
            dense + experts
        };
        self.layers.iter().map(layer).sum::<usize>() + self.output().bytes()
    }
}
