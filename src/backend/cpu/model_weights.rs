//! The model's weights as the CPU kernels read them, resolved once: on the fast path the quantized matrices packed
//! (`kernels::packed`) and the norms copied, so that the backend never reads the model file's bytes again (a
//! mapped file's pages can leave the process: `GgufFile::release_tensor_data`); float matrices, and every matrix
//! on the precise path, as views into the file's bytes.

use crate::model::gguf::{GgufError, GgufFile};
use crate::model::llama::forward::{Bias, Norm, Weight};
use crate::model::llama::LlamaConfig;

use super::experts::ExpertMatrices;
use super::kernels::packed::RunTasks;
use super::kernels::{PackedMatrix, WeightMatrix};
use super::latent::LatentWeights;
use crate::model::llama::config::ATTN_SINKS;
use crate::model::llama::experts::{FUSED_GATE_UP_EXPS, SELECTION_BIAS};
use crate::model::llama::latent;

/// A weight matrix as the matmuls read it.
pub enum Matrix<'m> {
    /// The file's blocks as they are (float types, and the precise path).
    File(WeightMatrix<'m>),
    /// Rearranged at load for the quantized matmul.
    Packed(PackedMatrix),
}

impl<'m> Matrix<'m> {
    /// The matrix packed by `pack`'s tasks when there are some and its type packs; the file's view otherwise.
    pub(super) fn new(w: WeightMatrix<'m>, pack: Option<RunTasks<'_>>) -> Self {
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

/// A mixture-of-experts block's weights (`LlamaConfig::moe`).
pub struct LayerExperts<'m> {
    /// `[n_expert rows × n_embd]`: the router, read as the file has it (not packed: its logits are computed from
    /// f32 activations, so that the choice of experts does not hang on 8-bit rounding).
    pub router: Matrix<'m>,
    /// One per routed expert.
    pub routed: Vec<ExpertMatrices<'m>>,
    /// The shared expert (a list of one, as `routed_experts` takes it), or empty.
    pub shared: Vec<ExpertMatrices<'m>>,
    /// `[n_embd]`: the shared expert's gate (`ffn_gate_inp_shexp`), or empty.
    pub shared_gate: Box<[f32]>,
    /// `[n_expert]`: the router's bias (`ffn_gate_inp.bias`), or empty.
    pub router_bias: Box<[f32]>,
    /// `[n_expert]`: the bias of the choice (`exp_probs_b.bias`, `MoeConfig::selection_bias`), or empty.
    pub selection_bias: Box<[f32]>,
}

/// The matrices of one transformer block.
struct LayerWeights<'m> {
    /// The query, key and value projections (absent with latent attention).
    attn_qkv: Option<[Matrix<'m>; 3]>,
    /// Latent attention's matrices (`LlamaConfig::latent`).
    latent: Option<LatentWeights<'m>>,
    attn_output: Matrix<'m>,
    /// The dense FFN's (absent in a mixture-of-experts block).
    ffn: Option<[Matrix<'m>; 3]>,
    experts: Option<LayerExperts<'m>>,
    /// Empty without `LlamaConfig::pre_norms` (OLMo 2).
    attn_norm: Box<[f32]>,
    ffn_norm: Box<[f32]>,
    /// The norms some architectures add (see `LlamaConfig::qk_norm`, `post_norms`); empty when absent.
    post_attn_norm: Box<[f32]>,
    post_ffn_norm: Box<[f32]>,
    q_norm: Box<[f32]>,
    k_norm: Box<[f32]>,
    /// The projections' biases (`LlamaConfig::qkv_bias`, `attn_output_bias`); empty when absent.
    q_bias: Box<[f32]>,
    k_bias: Box<[f32]>,
    v_bias: Box<[f32]>,
    o_bias: Box<[f32]>,
    /// `[n_head]`: the attention sinks (`LlamaConfig::attn_sinks`), or empty.
    sinks: Box<[f32]>,
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
        let norm_if = |present: bool, n: Norm| if present { norm(&config.norm_tensor(n)) } else { Ok(Box::default()) };
        let bias_if = |present: bool, b: Bias| if present { norm(&b.tensor_name()) } else { Ok(Box::default()) };
        let token_embd = matrix("token_embd.weight")?;
        let output = if config.tied_output { None } else { Some(matrix("output.weight")?) };
        let layers = (0..config.n_layer)
            .map(|l| {
                Ok(LayerWeights {
                    attn_qkv: match config.latent {
                        Some(_) => None,
                        None => Some([weight(Weight::AttnQ(l))?, weight(Weight::AttnK(l))?, weight(Weight::AttnV(l))?]),
                    },
                    latent: match &config.latent {
                        Some(shapes) => Some(latent_weights(file, l, config, shapes, pack)?),
                        None => None,
                    },
                    attn_output: weight(Weight::AttnOutput(l))?,
                    ffn: match config.is_moe_layer(l) {
                        true => None,
                        false => {
                            Some([weight(Weight::FfnGate(l))?, weight(Weight::FfnUp(l))?, weight(Weight::FfnDown(l))?])
                        }
                    },
                    experts: match &config.moe {
                        Some(moe) if moe.has_layer(l) => Some(layer_experts(file, l, moe, pack)?),
                        _ => None,
                    },
                    attn_norm: norm_if(config.pre_norms, Norm::Attn(l))?,
                    ffn_norm: norm_if(config.pre_norms, Norm::Ffn(l))?,
                    post_attn_norm: norm_if(config.post_norms, Norm::PostAttn(l))?,
                    post_ffn_norm: norm_if(config.post_norms, Norm::PostFfn(l))?,
                    q_norm: norm_if(config.qk_norm.is_some(), Norm::QHead(l))?,
                    k_norm: norm_if(config.qk_norm.is_some(), Norm::KHead(l))?,
                    q_bias: bias_if(config.qkv_bias, Bias::AttnQ(l))?,
                    k_bias: bias_if(config.qkv_bias, Bias::AttnK(l))?,
                    v_bias: bias_if(config.qkv_bias, Bias::AttnV(l))?,
                    o_bias: bias_if(config.attn_output_bias, Bias::AttnOutput(l))?,
                    sinks: match config.attn_sinks {
                        true => norm(&LlamaConfig::layer_tensor(l, ATTN_SINKS))?,
                        false => Box::default(),
                    },
                })
            })
            .collect::<Result<Vec<_>, GgufError>>()?;
        Ok(CpuModelWeights { token_embd, output, output_norm: norm(&Norm::Output.tensor_name())?, layers })
    }

    pub fn matrix(&self, w: Weight) -> &Matrix<'m> {
        match w {
            Weight::AttnQ(l) => &self.attn_qkv(l)[0],
            Weight::AttnK(l) => &self.attn_qkv(l)[1],
            Weight::AttnV(l) => &self.attn_qkv(l)[2],
            Weight::AttnOutput(l) => &self.layers[l].attn_output,
            Weight::FfnGate(l) => &self.dense_ffn(l)[0],
            Weight::FfnUp(l) => &self.dense_ffn(l)[1],
            Weight::FfnDown(l) => &self.dense_ffn(l)[2],
        }
    }

    fn attn_qkv(&self, layer: usize) -> &[Matrix<'m>; 3] {
        self.layers[layer].attn_qkv.as_ref().expect("q/k/v projections are asked for outside latent attention only")
    }

    /// Layer `layer`'s latent-attention weights.
    pub fn latent(&self, layer: usize) -> &LatentWeights<'m> {
        self.layers[layer].latent.as_ref().expect("latent-attention weights are asked for such a model only")
    }

    fn dense_ffn(&self, layer: usize) -> &[Matrix<'m>; 3] {
        self.layers[layer].ffn.as_ref().expect("a dense FFN's weights are asked for a dense layer only")
    }

    /// Layer `layer`'s experts.
    pub fn experts(&self, layer: usize) -> &LayerExperts<'m> {
        self.layers[layer].experts.as_ref().expect("a mixture-of-experts layer's weights are asked for such a layer")
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
            Bias::AttnOutput(l) => &self.layers[l].o_bias,
        }
    }

    /// Layer `layer`'s attention sinks, one per query head (empty without `LlamaConfig::attn_sinks`).
    pub fn sinks(&self, layer: usize) -> &[f32] {
        &self.layers[layer].sinks
    }

    pub fn token_embd(&self) -> &Matrix<'m> {
        &self.token_embd
    }

    pub fn output(&self) -> &Matrix<'m> {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Whether any weight is still read from the file's bytes (a float matrix, or the precise path).
    pub fn reads_the_file(&self) -> bool {
        // The routers are read from the file on purpose (see `LayerExperts::router`).
        let layer = |l: &LayerWeights| l.matrices().any(|m| m.reads_the_file());
        self.token_embd.reads_the_file()
            || self.output.as_ref().is_some_and(Matrix::reads_the_file)
            || self.layers.iter().any(layer)
    }

    /// Bytes of weights one token's decode reads: the attention's and dense FFNs' matrices, the routers, the
    /// `n_expert_used` routed experts' matrices (each expert's size times `n_expert_used`; experts of one layer
    /// have one size) and the shared experts', and the output projection.
    pub fn bytes_read_per_token(&self, n_expert_used: usize) -> usize {
        let experts = |e: &LayerExperts| {
            let one = |x: &ExpertMatrices| x.gate.n_bytes() + x.up.n_bytes() + x.down.n_bytes();
            e.router.n_bytes()
                + e.routed.first().map_or(0, one) * n_expert_used
                + e.shared.iter().map(one).sum::<usize>()
        };
        let per_layer = |l: &LayerWeights| {
            l.attention().map(Matrix::n_bytes).sum::<usize>()
                + l.ffn.iter().flatten().map(Matrix::n_bytes).sum::<usize>()
                + l.experts.as_ref().map_or(0, experts)
        };
        self.layers.iter().map(per_layer).sum::<usize>() + self.output().n_bytes()
    }
}

impl<'m> LayerWeights<'m> {
    fn attention(&self) -> impl Iterator<Item = &Matrix<'_>> {
        let latent = self.latent.iter().flat_map(LatentWeights::matrices);
        self.attn_qkv.iter().flatten().chain([&self.attn_output]).chain(latent)
    }

    /// Every matrix of the block but the routers (what the packing replaces).
    fn matrices(&self) -> impl Iterator<Item = &Matrix<'_>> {
        let experts = self.experts.iter().flat_map(|e| e.routed.iter().chain(&e.shared));
        self.attention().chain(self.ffn.iter().flatten()).chain(experts.flat_map(|x| [&x.gate, &x.up, &x.down]))
    }
}

/// Layer `l`'s experts: each routed expert's rows of the stacked `ffn_*_exps` tensors (or of the fused
/// `ffn_gate_up_exps`), packed like the dense matrices; the router as the file has it; the shared expert's.
fn layer_experts<'m>(
    file: &'m GgufFile,
    l: usize,
    moe: &crate::model::llama::MoeConfig,
    pack: Option<RunTasks<'_>>,
) -> Result<LayerExperts<'m>, GgufError> {
    let name = |suffix: &str| LlamaConfig::layer_tensor(l, suffix);
    let view = |name: &str| WeightMatrix::from_tensor(&file.tensor(name)?);
    let ff = moe.n_ff_exp;
    // Rows `rows` of a stacked tensor as a matrix of their own, packed when `pack` is given.
    let part = |whole: &WeightMatrix<'m>, tensor: &str, rows: std::ops::Range<usize>| {
        let m = whole.rows(rows.clone()).ok_or_else(|| GgufError::MissingTensor {
            name: format!("{tensor} rows {}..{} (of {})", rows.start, rows.end, whole.n_rows()),
        })?;
        Ok::<_, GgufError>(Matrix::new(m, pack))
    };
    let down_name = name("ffn_down_exps.weight");
    let down = view(&down_name)?;
    let d = down.n_rows() / moe.n_expert;
    let (gate_name, up_name) = match moe.fused_gate_up {
        true => (name(FUSED_GATE_UP_EXPS), name(FUSED_GATE_UP_EXPS)),
        false => (name("ffn_gate_exps.weight"), name("ffn_up_exps.weight")),
    };
    let (gate, up) = (view(&gate_name)?, view(&up_name)?);
    // The experts' biases (`MoeConfig::biases`): `[n_expert][rows]` f32, expert `e`'s row `e`.
    let biases = |suffix: &str| -> Result<Vec<f32>, GgufError> {
        Ok(if moe.biases { file.tensor(&name(suffix))?.as_f32()?.to_vec() } else { Vec::new() })
    };
    let (gate_b, up_b, down_b) =
        (biases("ffn_gate_exps.bias")?, biases("ffn_up_exps.bias")?, biases("ffn_down_exps.bias")?);
    let bias_of = |all: &[f32], e: usize, rows: usize| -> Box<[f32]> {
        if all.is_empty() {
            Box::default()
        } else {
            all[e * rows..(e + 1) * rows].into()
        }
    };
    let mut routed = Vec::with_capacity(moe.n_expert);
    for e in 0..moe.n_expert {
        let (gate_rows, up_rows) = match moe.fused_gate_up {
            true => (2 * e * ff..2 * e * ff + ff, 2 * e * ff + ff..2 * (e + 1) * ff),
            false => (e * ff..(e + 1) * ff, e * ff..(e + 1) * ff),
        };
        routed.push(ExpertMatrices {
            gate: part(&gate, &gate_name, gate_rows)?,
            up: part(&up, &up_name, up_rows)?,
            down: part(&down, &down_name, e * d..(e + 1) * d)?,
            gate_bias: bias_of(&gate_b, e, ff),
            up_bias: bias_of(&up_b, e, ff),
            down_bias: bias_of(&down_b, e, d),
        });
    }
    if pack.is_some() && routed.iter().all(|x| !x.gate.reads_the_file()) {
        for tensor in [&gate_name, &up_name, &down_name] {
            file.release_tensor(tensor);
        }
    }
    let shared = match moe.shared {
        None => Vec::new(),
        Some(_) => {
            let matrix = |suffix: &str| {
                let m = Matrix::new(view(&name(suffix))?, pack);
                if !m.reads_the_file() {
                    file.release_tensor(&name(suffix));
                }
                Ok::<_, GgufError>(m)
            };
            vec![ExpertMatrices {
                gate: matrix("ffn_gate_shexp.weight")?,
                up: matrix("ffn_up_shexp.weight")?,
                down: matrix("ffn_down_shexp.weight")?,
                gate_bias: Box::default(),
                up_bias: Box::default(),
                down_bias: Box::default(),
            }]
        }
    };
    let shared_gate = match moe.shared {
        Some(s) if s.gated => file.tensor(&name("ffn_gate_inp_shexp.weight"))?.as_f32()?.into(),
        _ => Box::default(),
    };
    let router_bias = match moe.biases {
        true => file.tensor(&name("ffn_gate_inp.bias"))?.as_f32()?.into(),
        false => Box::default(),
    };
    let selection_bias = match moe.selection_bias {
        true => file.tensor(&name(SELECTION_BIAS))?.as_f32()?.into(),
        false => Box::default(),
    };
    let router = Matrix::File(view(&name("ffn_gate_inp.weight"))?);
    Ok(LayerExperts { router, routed, shared, shared_gate, router_bias, selection_bias })
}

/// Layer `l`'s latent-attention weights (`latent.rs`): the projections packed like the dense matrices, `attn_k_b`
/// and `attn_v_b` taken apart into one matrix per head.
fn latent_weights<'m>(
    file: &'m GgufFile,
    l: usize,
    config: &LlamaConfig,
    shapes: &latent::LatentAttention,
    pack: Option<RunTasks<'_>>,
) -> Result<LatentWeights<'m>, GgufError> {
    let name = |suffix: &str| LlamaConfig::layer_tensor(l, suffix);
    let matrix = |suffix: &str| {
        let m = Matrix::new(WeightMatrix::from_tensor(&file.tensor(&name(suffix))?)?, pack);
        if !m.reads_the_file() {
            file.release_tensor(&name(suffix));
        }
        Ok::<_, GgufError>(m)
    };
    let norm = |suffix: &str| Ok::<Box<[f32]>, GgufError>(file.tensor(&name(suffix))?.as_f32()?.into());
    // A stacked tensor's `rows` rows per head, each head a matrix of its own.
    let per_head = |suffix: &str, rows: usize| {
        let whole = WeightMatrix::from_tensor(&file.tensor(&name(suffix))?)?;
        let heads = (0..config.n_head)
            .map(|h| {
                let part = whole.rows(h * rows..(h + 1) * rows).ok_or_else(|| GgufError::MissingTensor {
                    name: format!("{} rows {}..{} (of {})", name(suffix), h * rows, (h + 1) * rows, whole.n_rows()),
                })?;
                Ok(Matrix::new(part, pack))
            })
            .collect::<Result<Vec<_>, GgufError>>()?;
        if heads.iter().all(|m| !m.reads_the_file()) {
            file.release_tensor(&name(suffix));
        }
        Ok::<_, GgufError>(heads)
    };
    let (q, q_a) = match shapes.q_lora_rank {
        Some(_) => (matrix(latent::Q_B)?, Some((matrix(latent::Q_A)?, norm(latent::Q_A_NORM)?))),
        None => (matrix("attn_q.weight")?, None),
    };
    Ok(LatentWeights {
        q,
        q_a,
        kv_a: matrix(latent::KV_A)?,
        kv_a_norm: norm(latent::KV_A_NORM)?,
        k_b: per_head(latent::K_B, shapes.kv_lora_rank)?,
        v_b: per_head(latent::V_B, shapes.v_head_dim)?,
    })
}
