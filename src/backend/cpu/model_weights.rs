//! The model's weights as the CPU kernels read them, resolved once: on the fast path the quantized matrices packed
//! (`kernels::packed`) and the norms copied, so that the backend never reads the model file's bytes again (a
//! mapped file's pages can leave the process: `GgufFile::release_tensor_data`); float matrices, and every matrix
//! on the precise path, as views into the file's bytes.

use crate::model::gguf::{GgufError, GgufFile};
use crate::model::llama::forward::{Bias, Norm, Weight};
use crate::model::llama::LlamaConfig;

use super::kernels::packed::RunTasks;
use super::kernels::{PackedMatrix, WeightMatrix};

/// A weight matrix as the matmuls read it.
pub enum Matrix<'m> {
    /// The file's blocks as they are (float types, and the precise path).
    File(WeightMatrix<'m>),
    /// Rearranged at load for the quantized matmul.
    Packed(PackedMatrix),
}

impl<'m> Matrix<'m> {
    /// The matrix packed by `pack`'s tasks when there are some and its type packs; the file's view otherwise.
    fn new(w: WeightMatrix<'m>, pack: Option<RunTasks<'_>>) -> Self {
        match pack.and_then(|run| PackedMatrix::pack_with(&w, run)) {
            Some(packed) => Matrix::Packed(packed),
            None => Matrix::File(w),
        }
    }

    pub fn n_rows(&self) -> usize {
        match self {
            Matrix::File(w) => w.n_rows(),
            Matrix::Packed(p) => p.n_rows(),
        }
    }

    /// Row `row` dequantized into `out` (an embedding lookup), the same bits packed or not.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        match self {
            Matrix::File(w) => w.dequantize_row(row, out),
            Matrix::Packed(p) => p.dequantize_row(row, out),
        }
    }

    /// Whether the matrix reads the file's bytes.
    fn reads_the_file(&self) -> bool {
        matches!(self, Matrix::File(_))
    }

    /// Bytes a matvec streams.
    pub fn n_bytes(&self) -> usize {
        match self {
            Matrix::File(w) => w.data().n_bytes(),
            Matrix::Packed(p) => p.n_bytes(),
        }
    }
}

/// The matrices of one transformer block.
struct LayerWeights<'m> {
    attn_q: Matrix<'m>,
    attn_k: Matrix<'m>,
    attn_v: Matrix<'m>,
    attn_output: Matrix<'m>,
    ffn_gate: Matrix<'m>,
    ffn_up: Matrix<'m>,
    ffn_down: Matrix<'m>,
    /// Empty without `LlamaConfig::pre_norms` (OLMo 2).
    attn_norm: Box<[f32]>,
    ffn_norm: Box<[f32]>,
    /// The norms some architectures add (see `LlamaConfig::qk_norm`, `post_norms`); empty when absent.
    post_attn_norm: Box<[f32]>,
    post_ffn_norm: Box<[f32]>,
    q_norm: Box<[f32]>,
    k_norm: Box<[f32]>,
    /// The projections' biases (`LlamaConfig::qkv_bias`); empty when absent.
    q_bias: Box<[f32]>,
    k_bias: Box<[f32]>,
    v_bias: Box<[f32]>,
}

/// Every weight the forward pass reads.
pub struct CpuModelWeights<'m> {
    /// `[vocab][n_embd]`: rows are token embeddings.
    token_embd: Matrix<'m>,
    /// `[vocab][n_embd]`: the output projection; `None` when tied to the embedding table.
    output: Option<Matrix<'m>>,
    output_norm: Box<[f32]>,
    layers: Vec<LayerWeights<'m>>,
}

impl<'m> CpuModelWeights<'m> {
    /// Resolves every tensor (the file was validated against `config` by [`LlamaConfig::from_gguf`]), packing
    /// the quantized matrices by `pack`'s tasks when it is given.
    pub fn new(file: &'m GgufFile, config: &LlamaConfig, pack: Option<RunTasks<'_>>) -> Result<Self, GgufError> {
        let view = |name: &str| WeightMatrix::from_tensor(&file.tensor(name)?);
        let matrix = |name: &str| {
            let m = Matrix::new(view(name)?, pack);
            if !m.reads_the_file() {
                file.release_tensor(name);
            }
            Ok::<_, GgufError>(m)
        };
        // A layer's matrix, its rows of a fused tensor taken apart (`LlamaConfig::weight_source`).
        let weight = |w: Weight| {
            let (name, rows) = config.weight_source(w);
            let Some(rows) = rows else { return matrix(&name) };
            let whole = view(&name)?;
            let part = whole.rows(rows.clone()).ok_or_else(|| GgufError::MissingTensor {
                name: format!("{name} rows {}..{} (of {})", rows.start, rows.end, whole.n_rows()),
            })?;
            // The fused tensor's pages are released once its last part is packed (the mapped pages come back
            // from the file if an earlier part is read again).
            let m = Matrix::new(part, pack);
            if !m.reads_the_file() && rows.end == whole.n_rows() {
                file.release_tensor(&name);
            }
            Ok::<_, GgufError>(m)
        };
        // Copied: a few kilobytes, read at every step.
        let norm = |name: &str| Ok::<Box<[f32]>, GgufError>(file.tensor(name)?.as_f32()?.into());
        let norm_if = |present: bool, n: Norm| if present { norm(&n.tensor_name()) } else { Ok(Box::default()) };
        let bias_if = |b: Bias| if config.qkv_bias { norm(&b.tensor_name()) } else { Ok(Box::default()) };
        let token_embd = matrix("token_embd.weight")?;
        let output = if config.tied_output { None } else { Some(matrix("output.weight")?) };
        let layers = (0..config.n_layer)
            .map(|l| {
                Ok(LayerWeights {
                    attn_q: weight(Weight::AttnQ(l))?,
                    attn_k: weight(Weight::AttnK(l))?,
                    attn_v: weight(Weight::AttnV(l))?,
                    attn_output: weight(Weight::AttnOutput(l))?,
                    ffn_gate: weight(Weight::FfnGate(l))?,
                    ffn_up: weight(Weight::FfnUp(l))?,
                    ffn_down: weight(Weight::FfnDown(l))?,
                    attn_norm: norm_if(config.pre_norms, Norm::Attn(l))?,
                    ffn_norm: norm_if(config.pre_norms, Norm::Ffn(l))?,
                    post_attn_norm: norm_if(config.post_norms, Norm::PostAttn(l))?,
                    post_ffn_norm: norm_if(config.post_norms, Norm::PostFfn(l))?,
                    q_norm: norm_if(config.qk_norm.is_some(), Norm::QHead(l))?,
                    k_norm: norm_if(config.qk_norm.is_some(), Norm::KHead(l))?,
                    q_bias: bias_if(Bias::AttnQ(l))?,
                    k_bias: bias_if(Bias::AttnK(l))?,
                    v_bias: bias_if(Bias::AttnV(l))?,
                })
            })
            .collect::<Result<Vec<_>, GgufError>>()?;
        Ok(CpuModelWeights { token_embd, output, output_norm: norm(&Norm::Output.tensor_name())?, layers })
    }

    pub fn matrix(&self, w: Weight) -> &Matrix<'m> {
        match w {
            Weight::AttnQ(l) => &self.layers[l].attn_q,
            Weight::AttnK(l) => &self.layers[l].attn_k,
            Weight::AttnV(l) => &self.layers[l].attn_v,
            Weight::AttnOutput(l) => &self.layers[l].attn_output,
            Weight::FfnGate(l) => &self.layers[l].ffn_gate,
            Weight::FfnUp(l) => &self.layers[l].ffn_up,
            Weight::FfnDown(l) => &self.layers[l].ffn_down,
        }
    }

    pub fn norm(&self, n: Norm) -> &[f32] {
        match n {
            Norm::Attn(l) => &self.layers[l].attn_norm,
            Norm::Ffn(l) => &self.layers[l].ffn_norm,
            Norm::PostAttn(l) => &self.layers[l].post_attn_norm,
            Norm::PostFfn(l) => &self.layers[l].post_ffn_norm,
            Norm::QHead(l) => &self.layers[l].q_norm,
            Norm::KHead(l) => &self.layers[l].k_norm,
            Norm::Output => &self.output_norm,
        }
    }

    pub fn bias(&self, b: Bias) -> &[f32] {
        match b {
            Bias::AttnQ(l) => &self.layers[l].q_bias,
            Bias::AttnK(l) => &self.layers[l].k_bias,
            Bias::AttnV(l) => &self.layers[l].v_bias,
        }
    }

    pub fn token_embd(&self) -> &Matrix<'m> {
        &self.token_embd
    }

    pub fn output(&self) -> &Matrix<'m> {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Whether any weight is still read from the file's bytes (a float matrix, or the precise path).
    pub fn reads_the_file(&self) -> bool {
        let layer = |l: &LayerWeights| {
            [&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down]
                .iter()
                .any(|m| m.reads_the_file())
        };
        self.token_embd.reads_the_file()
            || self.output.as_ref().is_some_and(Matrix::reads_the_file)
            || self.layers.iter().any(layer)
    }

    /// Bytes of weights one decode step streams (every matrix once, the output projection included).
    pub fn bytes_per_token(&self) -> usize {
        let per_layer = |l: &LayerWeights| {
            [&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down]
                .iter()
                .map(|m| m.n_bytes())
                .sum::<usize>()
        };
        self.layers.iter().map(per_layer).sum::<usize>() + self.output().n_bytes()
    }
}
