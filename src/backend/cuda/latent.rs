//! A latent-attention layer's weights on the device (`LlamaConfig::latent`, `model/llama/latent.rs`): the query
//! projection (`attn_q`, or `attn_q_a`, its norm and `attn_q_b`), the compressed key row's (`attn_kv_a_mqa`) and its
//! norm, and the per-head stacks `attn_k_b` (`kv_lora_rank` rows of `nope_dim` per head) and `attn_v_b`
//! (`v_head_dim` rows of `kv_lora_rank` per head), each packed whole as the file stacks it (as `experts.rs` packs the
//! stacked experts), so that one head's matrix is a run of its rows.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::device_array::MatrixArray;
use super::error::CudaBackendError;
use super::weights::DeviceMatrix;
use crate::model::gguf::GgufFile;
use crate::model::llama::latent::{LatentAttention, KV_A, KV_A_NORM, K_B, Q_A, Q_A_NORM, Q_B, V_B};
use crate::model::llama::LlamaConfig;

pub struct DeviceLatent {
    /// `[n_head · (nope + rope)][n_embd or q_lora_rank]`: `attn_q`, or `attn_q_b`.
    pub q: DeviceMatrix,
    /// `attn_q_a` (`[q_lora_rank][n_embd]`) and `attn_q_a_norm`, when the queries go through a compressed rank.
    pub q_a: Option<(DeviceMatrix, CudaSlice<f32>)>,
    /// `[kv_lora_rank + rope][n_embd]`: `attn_kv_a_mqa`.
    pub kv_a: DeviceMatrix,
    /// `[kv_lora_rank]`: `attn_kv_a_norm`.
    pub kv_a_norm: CudaSlice<f32>,
    /// `[n_head · kv_lora_rank][nope]`.
    k_b: DeviceMatrix,
    /// `[n_head · v_head_dim][kv_lora_rank]`.
    v_b: DeviceMatrix,
    shapes: LatentAttention,
}

impl DeviceLatent {
    /// Uploads layer `l`'s latent-attention weights (the file's loader checked their shapes against the config).
    pub fn upload(
        file: &GgufFile,
        l: usize,
        shapes: LatentAttention,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, CudaBackendError> {
        let name = |suffix: &str| LlamaConfig::layer_tensor(l, suffix);
        let matrix = |suffix: &str| DeviceMatrix::upload(file, &name(suffix), None, stream);
        let norm = |suffix: &str| -> Result<CudaSlice<f32>, CudaBackendError> {
            let values = file.tensor(&name(suffix))?.as_f32()?;
            stream.clone_htod(values).map_err(CudaBackendError::driver("uploading the weights"))
        };
        let (q, q_a) = match shapes.q_lora_rank {
            Some(_) => (matrix(Q_B)?, Some((matrix(Q_A)?, norm(Q_A_NORM)?))),
            None => (matrix("attn_q.weight")?, None),
        };
        Ok(DeviceLatent {
            q,
            q_a,
            kv_a: matrix(KV_A)?,
            kv_a_norm: norm(KV_A_NORM)?,
            k_b: matrix(K_B)?,
            v_b: matrix(V_B)?,
            shapes,
        })
    }

    /// Head `h`'s `attn_k_b`: `kv_lora_rank` rows of `nope_dim`.
    pub fn k_b<'a>(&'a self, h: usize, stream: &CudaStream) -> Result<MatrixArray<'a>, CudaBackendError> {
        let r = self.shapes.kv_lora_rank;
        self.k_b.array(stream).rows(h * r, r)
    }

    /// Head `h`'s `attn_v_b`: `v_head_dim` rows of `kv_lora_rank`.
    pub fn v_b<'a>(&'a self, h: usize, stream: &CudaStream) -> Result<MatrixArray<'a>, CudaBackendError> {
        let v = self.shapes.v_head_dim;
        self.v_b.array(stream).rows(h * v, v)
    }

    /// Every matrix, for the list of weight types to compile kernels for.
    pub fn matrices(&self) -> impl Iterator<Item = &DeviceMatrix> {
        [&self.q, &self.kv_a, &self.k_b, &self.v_b].into_iter().chain(self.q_a.iter().map(|(m, _)| m))
    }
}
