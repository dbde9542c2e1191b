//! The backend's working memory on the device, allocated once for the largest step: nothing is allocated while
//! steps run, and every address stays fixed, as the CUDA graphs that recorded them need.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::calls::TOP_K_MAX;
use super::calls_moe::{expert_tile, grouped_experts, max_expert_tiles, PairTiles};
use super::device_array::DeviceArray;
use super::error::CudaBackendError;
use crate::model::llama::forward::Buf;
use crate::model::llama::LlamaConfig;

/// Every activation buffer of the forward pass, and the step's outputs.
pub struct Buffers {
    /// Indexed by [`index`]; `[max_tokens][width(buf)]` each.
    activations: [CudaSlice<f32>; 8],
    /// `[max_tokens][n_embd]`: the final norm of the rows that want logits.
    pub logits_input: CudaSlice<f32>,
    /// `[max_tokens][vocab]`.
    pub logits: CudaSlice<f32>,
    /// One per RoPE base of the model (`LlamaConfig::rope_bases`; Gemma 3 has two: local and global layers).
    pub rope: Vec<RopeTables>,
    /// `[max_tokens][TOP_K_MAX]`.
    pub top_ids: CudaSlice<i32>,
    /// `[max_tokens][TOP_K_MAX]`.
    pub top_values: CudaSlice<f32>,
    /// A mixture-of-experts model's (`LlamaConfig::moe`).
    pub moe: Option<MoeBuffers>,
    /// A latent-attention model's (`LlamaConfig::latent`).
    pub latent: Option<LatentBuffers>,
}

/// The working memory of DeepSeek's latent attention (`execute_latent.rs`), `T = max_tokens` rows of each; its
/// queries go to `Q` (`[T][n_head · (kv_lora_rank + rope)]`), its key rows to `K` and its output to `Att`.
pub struct LatentBuffers {
    /// `[T][q_lora_rank]`: the compressed queries (one unused element without a query rank).
    pub q_latent: CudaSlice<f32>,
    /// `[T][n_head · (nope + rope)]`: the projected queries.
    pub q: CudaSlice<f32>,
    /// `[T][n_head · kv_lora_rank]`: the attention's output, still compressed.
    pub latent: CudaSlice<f32>,
    /// `[n_head][T][max(nope, kv_lora_rank)]`: a per-head projection's inputs, head-major.
    pub heads_in: CudaSlice<f32>,
    /// `[n_head][T][max(kv_lora_rank, v_head_dim)]`: its outputs.
    pub heads_out: CudaSlice<f32>,
}

/// The working memory of a mixture-of-experts block (`moe.cu`), `T = max_tokens` rows of each.
pub struct MoeBuffers {
    /// `[T][n_expert]`: the router's logits.
    pub logits: CudaSlice<f32>,
    /// `[T][k]`: each token's experts and their weights.
    pub selected: CudaSlice<i32>,
    pub weights: CudaSlice<f32>,
    /// `[T · k][n_ff_exp]`: each (token, slot) pair's act(gate)·up.
    pub hidden: CudaSlice<f32>,
    /// The shared expert's, when the model has one.
    pub shared: Option<SharedBuffers>,
    /// The grouped path's (`calls_moe::grouped_experts`), when a step of `T` rows can take it.
    pub grouped: Option<GroupedBuffers>,
}

/// Where `moe_group` groups a step's pairs by expert, and the tiled down's output (`calls_moe::PairTiles`).
pub struct GroupedBuffers {
    /// `[T · k]`: the pairs in expert-major order.
    pub order: CudaSlice<i32>,
    /// `[max tiles][3]`: the most tiles of `T · k` pairs at the narrowest tile (16).
    pub tiles: CudaSlice<i32>,
    /// `[1]`.
    pub n_tiles: CudaSlice<i32>,
    /// `[T · k][n_embd]`: each pair's expert output, before the weighted sum.
    pub pair_out: CudaSlice<f32>,
}

impl GroupedBuffers {
    /// The buffers as the grouped kernels read them, for a step of `pairs` pairs over `n_expert` experts.
    pub fn tiles<'a>(&'a self, stream: &CudaStream, pairs: usize, n_expert: usize) -> PairTiles<'a> {
        PairTiles {
            order: DeviceArray::new(&self.order, stream),
            tiles: DeviceArray::new(&self.tiles, stream),
            n_tiles: DeviceArray::new(&self.n_tiles, stream),
            pair_out: DeviceArray::new(&self.pair_out, stream),
            tile: expert_tile(pairs, n_expert),
        }
    }
}

/// The shared expert's working memory.
pub struct SharedBuffers {
    /// `[T][n_ff]` each: its gate (then act(gate)·up) and up projections.
    pub gate: CudaSlice<f32>,
    pub up: CudaSlice<f32>,
    /// `[T]`: `ffn_gate_inp_shexp · x`.
    pub gate_logit: CudaSlice<f32>,
    /// `[T][n_embd]`: its output.
    pub out: CudaSlice<f32>,
}

/// The rotation angles of one RoPE base.
pub struct RopeTables {
    /// `[max_tokens][rope_dim / 2]`: cos of each new token's rotation angles.
    pub cos: CudaSlice<f32>,
    /// `[max_tokens][rope_dim / 2]`.
    pub sin: CudaSlice<f32>,
    /// `[rope_dim / 2]`: base^(−2i / rope_dim) (with Llama 3's frequency factors), computed on the host in f64 as
    /// the CPU backend does.
    pub inv_freq: CudaSlice<f64>,
}

/// The position of `b` in `Buffers::activations`.
fn index(b: Buf) -> usize {
    match b {
        Buf::X => 0,
        Buf::Xn => 1,
        Buf::Q => 2,
        Buf::K => 3,
        Buf::V => 4,
        Buf::Att => 5,
        Buf::Gate => 6,
        Buf::Up => 7,
    }
}

/// The row width of activation buffer `b` (queries and attention outputs are q_dim wide: n_embd for llama,
/// wider for Gemma 3's heads).
pub fn width(config: &LlamaConfig, b: Buf) -> usize {
    let (d, q, kv, ff) = (config.n_embd, config.q_dim(), config.kv_dim(), config.n_ff);
    [d, d, q, kv, kv, q, ff, ff][index(b)]
}

impl Buffers {
    pub fn new(stream: &Arc<CudaStream>, config: &LlamaConfig, max_tokens: usize) -> Result<Self, CudaBackendError> {
        let alloc = |n: usize| -> Result<CudaSlice<f32>, CudaBackendError> {
            stream.alloc_zeros(n).map_err(CudaBackendError::driver("allocating activation buffers"))
        };
        let ints = |n: usize| -> Result<CudaSlice<i32>, CudaBackendError> {
            stream.alloc_zeros(n).map_err(CudaBackendError::driver("allocating activation buffers"))
        };
        let d = config.n_embd;
        let half = config.rope_dim / 2;
        let rope = (0..config.rope_bases.len())
            .map(|base| {
                Ok(RopeTables {
                    cos: alloc(max_tokens * half)?,
                    sin: alloc(max_tokens * half)?,
                    inv_freq: stream
                        .clone_htod(&config.inv_frequencies(base))
                        .map_err(CudaBackendError::driver("uploading RoPE frequencies"))?,
                })
            })
            .collect::<Result<Vec<_>, CudaBackendError>>()?;
        let [x, xn, q, k, v, att, gate, up] = [Buf::X, Buf::Xn, Buf::Q, Buf::K, Buf::V, Buf::Att, Buf::Gate, Buf::Up]
            .map(|b| alloc(max_tokens * width(config, b)));
        Ok(Buffers {
            activations: [x?, xn?, q?, k?, v?, att?, gate?, up?],
            logits_input: alloc(max_tokens * d)?,
            logits: alloc(max_tokens * config.vocab_size)?,
            rope,
            top_ids: stream
                .alloc_zeros(max_tokens * TOP_K_MAX)
                .map_err(CudaBackendError::driver("allocating activation buffers"))?,
            top_values: alloc(max_tokens * TOP_K_MAX)?,
            latent: match config.latent {
                None => None,
                Some(l) => {
                    let (h, r, rope) = (config.n_head, l.kv_lora_rank, config.rope_dim);
                    Some(LatentBuffers {
                        q_latent: alloc(max_tokens * l.q_lora_rank.unwrap_or(0) + 1)?,
                        q: alloc(max_tokens * h * (l.nope_dim + rope))?,
                        latent: alloc(max_tokens * h * r)?,
                        heads_in: alloc(h * max_tokens * l.nope_dim.max(r))?,
                        heads_out: alloc(h * max_tokens * r.max(l.v_head_dim))?,
                    })
                }
            },
            moe: match &config.moe {
                None => None,
                Some(moe) => {
                    let pairs = max_tokens * moe.n_expert_used;
                    Some(MoeBuffers {
                        logits: alloc(max_tokens * moe.n_expert)?,
                        selected: ints(pairs)?,
                        weights: alloc(pairs)?,
                        hidden: alloc(pairs * moe.n_ff_exp)?,
                        grouped: match grouped_experts(max_tokens, moe.n_expert_used, moe.n_expert) {
                            false => None,
                            true => Some(GroupedBuffers {
                                order: ints(pairs)?,
                                tiles: ints(3 * max_expert_tiles(pairs, moe.n_expert, 16))?,
                                n_tiles: ints(1)?,
                                pair_out: alloc(pairs * d)?,
                            }),
                        },
                        shared: match moe.shared {
                            None => None,
                            Some(s) => Some(SharedBuffers {
                                gate: alloc(max_tokens * s.n_ff)?,
                                up: alloc(max_tokens * s.n_ff)?,
                                gate_logit: alloc(max_tokens)?,
                                out: alloc(max_tokens * d)?,
                            }),
                        },
                    })
                }
            },
        })
    }

    pub fn activation<'a>(&'a self, b: Buf, stream: &CudaStream) -> DeviceArray<'a, f32> {
        DeviceArray::new(&self.activations[index(b)], stream)
    }
}
