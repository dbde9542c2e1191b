//! The operands of each kernel, their checks, and the shape of its launch: one `*Call` struct per kernel, whose
//! `args()` is a pure function (tested below without a GPU) returning the kernel's parameter struct and grid.

use cudarc::driver::LaunchConfig;

use super::args::*;
use super::device_array::{DeviceArray, MatrixArray};
use super::error::CudaBackendError;
use super::kv_cache::{kv_type_code, row_words};
use crate::backend::{KvCacheType, KvCacheTypes};
use crate::model::llama::FfnActivation;

/// Tokens `project_small` computes at once (`MMV_MAX_TOKENS` of matvec.cu); more go to `matmul_tiled`.
pub const SMALL_BATCH_MAX_TOKENS: usize = 8;
/// Query heads one attention block serves (`ATT_MAX_GROUP` of attention.cu); a KV head with more has several
/// blocks, on the grid's z.
pub const ATTENTION_MAX_GROUP: usize = 8;
/// Widest head (key or value) of `attention` (`ATT_MAX_HEAD_DIM` of attention.cu).
pub const ATTENTION_MAX_HEAD_DIM: usize = 256;
/// Widest head of `attention_wide` (`ATT_WIDE_MAX_HEAD_DIM`: DeepSeek's 512 + 64).
pub const ATTENTION_WIDE_MAX_HEAD_DIM: usize = 576;
/// A grid's largest second and third dimensions.
const MAX_GRID_YZ: usize = 65535;
/// Largest k of `top_k`: a bound on the rounds it runs, not a limit of the kernel.
pub const TOP_K_MAX: usize = 256;

/// Threads per block of each kernel (the `*_THREADS` of the `.cu` files; `__launch_bounds__` holds them to it).
const NORM_THREADS: u32 = 128;
const EMBED_THREADS: u32 = 128;
const MMV_THREADS: u32 = 128;
const MMV_ROWS_PER_BLOCK: usize = 4;
const MM_THREADS: u32 = 256;
const MM_ROWS_PER_BLOCK: usize = 64;
const ROPE_THREADS: u32 = 128;
const ATT_THREADS: u32 = 128;
const ELEMENTWISE_THREADS: u32 = 256;
const TOP_K_THREADS: u32 = 256;

/// `ACT_*` of common.cuh.
pub(super) fn activation_code(a: FfnActivation) -> i32 {
    match a {
        FfnActivation::Silu => 0,
        FfnActivation::GeluTanh => 1,
    }
}

pub(super) fn internal(detail: String) -> CudaBackendError {
    CudaBackendError::Internal(detail)
}

/// `n` as a kernel's `int`.
pub(super) fn int(n: usize, what: &str) -> Result<i32, CudaBackendError> {
    i32::try_from(n).map_err(|_| internal(format!("{what} = {n} does not fit a kernel's int")))
}

/// Blocks to cover `n` items at `per_block` items each, as a grid dimension.
pub(super) fn blocks(n: usize, per_block: usize) -> Result<u32, CudaBackendError> {
    u32::try_from(n.div_ceil(per_block)).map_err(|_| internal(format!("{n} items need too many blocks")))
}

pub(super) fn config(grid: (u32, u32), threads: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid.0, grid.1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

/// `out[t] = table[tokens[t]] · scale`, dequantized; `out` is `[n_tokens][table.cols]`.
pub struct EmbedCall<'a> {
    pub table: MatrixArray<'a>,
    /// `[n_tokens]`, each `< table.rows` (checked on the host before the upload).
    pub tokens: DeviceArray<'a, i32>,
    pub out: DeviceArray<'a, f32>,
    pub n_tokens: usize,
    pub scale: f32,
}

impl EmbedCall<'_> {
    pub fn args(&self) -> Result<(EmbedArgs, LaunchConfig), CudaBackendError> {
        let (qs, sc) = self.table.addresses("the embedding table")?;
        let args = EmbedArgs {
            qs,
            sc,
            tokens: self.tokens.covering(self.n_tokens, "the token ids")?,
            out: self.out.covering(self.n_tokens * self.table.cols, "the embedding output")?,
            n_tokens: int(self.n_tokens, "tokens")?,
            width: int(self.table.cols, "the embedding width")?,
            vocab: int(self.table.rows, "the vocabulary")?,
            scale: self.scale,
        };
        Ok((args, config((blocks(self.n_tokens, 1)?, 1), EMBED_THREADS)))
    }
}

/// `out[i] (+)= x[r] / rms(x[r]) ⊙ weight` with `r = rows[i]`, or `r = i` without `rows`; `out` may be `x` itself
/// (in place, without `rows`).
pub struct RmsNormCall<'a> {
    /// `[at least n_rows, or every row that rows names][width]`.
    pub x: DeviceArray<'a, f32>,
    pub weight: DeviceArray<'a, f32>,
    /// `[n_rows][width]`.
    pub out: DeviceArray<'a, f32>,
    /// `[n_rows]` rows of `x` (each `< x.len() / width`, as the step layout builds them).
    pub rows: Option<DeviceArray<'a, i32>>,
    pub n_rows: usize,
    pub width: usize,
    pub eps: f32,
    /// Adds into `out` instead of overwriting it.
    pub add: bool,
}

impl RmsNormCall<'_> {
    pub fn args(&self) -> Result<(RmsNormArgs, LaunchConfig), CudaBackendError> {
        let rows = match self.rows {
            Some(rows) => rows.covering(self.n_rows, "the gathered rows")?,
            None => 0,
        };
        let x_rows = if self.rows.is_some() { 1 } else { self.n_rows };
        let args = RmsNormArgs {
            x: self.x.covering(x_rows * self.width, "the norm's input")?,
            w: self.weight.covering(self.width, "the norm's weight")?,
            out: self.out.covering(self.n_rows * self.width, "the norm's output")?,
            rows,
            n_rows: int(self.n_rows, "rows")?,
            width: int(self.width, "the norm's width")?,
            eps: self.eps,
            add: i32::from(self.add),
        };
        Ok((args, config((blocks(self.n_rows, 1)?, 1), NORM_THREADS)))
    }
}

/// The RMSNorm fused into a projection: its weight, and where the normalized input is written.
#[derive(Clone, Copy)]
pub struct FusedNorm<'a> {
    /// `[k]`.
    pub weight: DeviceArray<'a, f32>,
    /// `[n_tokens][k]`, or none.
    pub normalized: Option<DeviceArray<'a, f32>>,
    pub eps: f32,
}

/// `y_m[t] (+)= W_m · x'[t]` for up to three matrices of the same type and row length, `x'` being `x`
/// normalized when `norm` is set; at most [`SMALL_BATCH_MAX_TOKENS`] tokens. With `gated`, exactly two matrices
/// (gate, up) of equal shape, and `y_0 = act(gate·x')·(up·x')`, `y_1 = up·x'`.
pub struct ProjectSmallCall<'a> {
    /// Each matrix with its output, `[n_tokens][rows]`.
    pub outputs: &'a [(MatrixArray<'a>, DeviceArray<'a, f32>)],
    /// `[n_tokens][k]`.
    pub x: DeviceArray<'a, f32>,
    pub n_tokens: usize,
    pub norm: Option<FusedNorm<'a>>,
    pub add: bool,
    /// The gated unit's activation, for a projection of gate and up.
    pub gated: Option<FfnActivation>,
}

impl ProjectSmallCall<'_> {
    pub fn args(&self) -> Result<(ProjectionArgs, LaunchConfig), CudaBackendError> {
        let n = self.outputs.len();
        let Some((first, _)) = self.outputs.first() else { return Err(internal("a projection of no matrix".into())) };
        if n > 3 || (self.gated.is_some() && (n != 2 || self.add)) {
            return Err(internal(format!("{n} matrices in one projection (gated {:?}, add {})", self.gated, self.add)));
        }
        if self.n_tokens == 0 || self.n_tokens > SMALL_BATCH_MAX_TOKENS {
            return Err(internal(format!("{} tokens for project_small", self.n_tokens)));
        }
        let k = first.cols;
        let mut args = ProjectionArgs {
            x: self.x.covering(self.n_tokens * k, "the projection's input")?,
            n_mats: n as i32,
            k: int(k, "the row length")?,
            n_tokens: self.n_tokens as i32,
            add: i32::from(self.add),
            act: self.gated.map_or(0, activation_code),
            ..ProjectionArgs::default()
        };
        for (m, (matrix, y)) in self.outputs.iter().enumerate() {
            if matrix.dtype != first.dtype || matrix.cols != k {
                return Err(internal("one projection of matrices of different types or row lengths".into()));
            }
            if self.gated.is_some() && matrix.rows != first.rows {
                return Err(internal("gate and up of different heights".into()));
            }
            (args.qs[m], args.sc[m]) = matrix.addresses("a projection's matrix")?;
            args.y[m] = y.covering(self.n_tokens * matrix.rows, "a projection's output")?;
            args.rows[m] = int(matrix.rows, "a matrix's rows")?;
        }
        if let Some(norm) = self.norm {
            args.norm_w = norm.weight.covering(k, "the fused norm's weight")?;
            args.xn = match norm.normalized {
                Some(xn) => xn.covering(self.n_tokens * k, "the normalized input")?,
                None => 0,
            };
            args.eps = norm.eps;
        }
        let rows = if self.gated.is_some() { first.rows } else { self.outputs.iter().map(|(m, _)| m.rows).sum() };
        Ok((args, config((blocks(rows, MMV_ROWS_PER_BLOCK)?, 1), MMV_THREADS)))
    }
}

/// Tokens per tile of `matmul_tiled` for `n_tokens` tokens: 16, 32 or 64 (its `_n16`, `_n32`, `_n64`).
pub fn matmul_tile(n_tokens: usize) -> usize {
    match n_tokens {
        0..=16 => 16,
        17..=32 => 32,
        _ => 64,
    }
}

/// `y[t] (+)= W · x[t]` for any number of tokens.
pub struct MatmulCall<'a> {
    pub matrix: MatrixArray<'a>,
    /// `[n_tokens][matrix.cols]`.
    pub x: DeviceArray<'a, f32>,
    /// `[n_tokens][matrix.rows]`.
    pub y: DeviceArray<'a, f32>,
    pub n_tokens: usize,
    pub add: bool,
}

impl MatmulCall<'_> {
    pub fn args(&self) -> Result<(MatmulArgs, LaunchConfig), CudaBackendError> {
        let (qs, sc) = self.matrix.addresses("a matmul's matrix")?;
        let args = MatmulArgs {
            qs,
            sc,
            x: self.x.covering(self.n_tokens * self.matrix.cols, "the matmul's input")?,
            y: self.y.covering(self.n_tokens * self.matrix.rows, "the matmul's output")?,
            rows: int(self.matrix.rows, "a matrix's rows")?,
            k: int(self.matrix.cols, "the row length")?,
            n_tokens: int(self.n_tokens, "tokens")?,
            add: i32::from(self.add),
        };
        let grid = (blocks(self.matrix.rows, MM_ROWS_PER_BLOCK)?, blocks(self.n_tokens, matmul_tile(self.n_tokens))?);
        Ok((args, config(grid, MM_THREADS)))
    }
}

/// The cos and sin of every new token's rotation angles, `[n_tokens][half]` each.
pub struct RopeTableCall<'a> {
    pub positions: DeviceArray<'a, i32>,
    /// `[half]`: base^(−2i / rope_dim).
    pub inv_freq: DeviceArray<'a, f64>,
    pub cos: DeviceArray<'a, f32>,
    pub sin: DeviceArray<'a, f32>,
    /// Multiplies every cosine and sine (`LlamaConfig::rope_magnitude`).
    pub scale: f64,
    pub n_tokens: usize,
    pub half: usize,
}

impl RopeTableCall<'_> {
    pub fn args(&self) -> Result<(RopeTableArgs, LaunchConfig), CudaBackendError> {
        let n = self.n_tokens * self.half;
        let args = RopeTableArgs {
            positions: self.positions.covering(self.n_tokens, "the positions")?,
            inv_freq: self.inv_freq.covering(self.half, "the RoPE frequencies")?,
            cos: self.cos.covering(n, "the cos table")?,
            sin: self.sin.covering(n, "the sin table")?,
            scale: self.scale,
            n_tokens: int(self.n_tokens, "tokens")?,
            half: int(self.half, "rope_dim / 2")?,
        };
        Ok((args, config((blocks(n, ROPE_THREADS as usize)?, 1), ROPE_THREADS)))
    }
}

/// The shape of attention heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub rope_dim: usize,
}

impl HeadShape {
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Whether the kernels handle this shape (the backend checks it once, when it is built).
    pub fn check(&self) -> Result<(), String> {
        let chunks = self.n_head.checked_div(self.n_head_kv).unwrap_or(0).div_ceil(ATTENTION_MAX_GROUP);
        if self.n_head_kv == 0
            || self.n_head == 0
            || !self.n_head.is_multiple_of(self.n_head_kv)
            || self.n_head_kv > MAX_GRID_YZ
            || chunks > MAX_GRID_YZ
        {
            return Err(format!("{} query heads over {} KV heads", self.n_head, self.n_head_kv));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(8) || self.head_dim > ATTENTION_WIDE_MAX_HEAD_DIM {
            return Err(format!("head width {} (a multiple of 8 up to {ATTENTION_WIDE_MAX_HEAD_DIM})", self.head_dim));
        }
        if self.rope_dim == 0 || !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim {
            return Err(format!("RoPE over {} of {} dimensions", self.rope_dim, self.head_dim));
        }
        Ok(())
    }
}

/// The cache rows of one layer, `[slots]` rows of `kv_dim` elements each in their plane's type, as 16-bit words
/// (`kv_cache.rs`).
#[derive(Clone, Copy)]
pub struct LayerCache<'a> {
    pub keys: DeviceArray<'a, u16>,
    pub values: DeviceArray<'a, u16>,
    pub slots: usize,
    /// The planes' types (of a keys-only cache: the keys' twice).
    pub types: KvCacheTypes,
}

impl LayerCache<'_> {
    /// The addresses of the key and value planes, once each covers `slots` rows of `width` elements in its type, and
    /// rows of a block type are whole blocks.
    fn planes(&self, width: usize) -> Result<(u64, u64), CudaBackendError> {
        let plane = |array: DeviceArray<'_, u16>, ty: KvCacheType, what: &str| {
            if !whole_blocks(ty, width) {
                return Err(internal(format!("{what} of {ty} in rows of {width}, not whole blocks of 32")));
            }
            array.covering(self.slots * row_words(ty, width), what)
        };
        Ok((
            plane(self.keys, self.types.keys, "the key cache")?,
            plane(self.values, self.types.values, "the value cache")?,
        ))
    }
}

/// Whether heads of `width` elements at `width`-element offsets in a row are whole blocks of `ty` (always for f16).
fn whole_blocks(ty: KvCacheType, width: usize) -> bool {
    !ty.is_blocked() || width.is_multiple_of(32)
}

/// Rotates `q` and `k` in place and stores each token's key and value at `slots[t]` of `cache`.
pub struct RopeStoreCall<'a> {
    pub q: DeviceArray<'a, f32>,
    pub k: DeviceArray<'a, f32>,
    pub v: DeviceArray<'a, f32>,
    pub cos: DeviceArray<'a, f32>,
    pub sin: DeviceArray<'a, f32>,
    pub positions: DeviceArray<'a, i32>,
    /// `[n_tokens]`, each `< cache.slots` or −1 (the step layout builds them so).
    pub slots: DeviceArray<'a, i32>,
    pub cache: LayerCache<'a>,
    pub shape: HeadShape,
    pub n_tokens: usize,
    /// NEOX-style pairs `(i, i + rope_dim / 2)` instead of adjacent ones.
    pub neox: bool,
}

impl RopeStoreCall<'_> {
    pub fn args(&self) -> Result<(RopeStoreArgs, LaunchConfig), CudaBackendError> {
        let (s, n) = (self.shape, self.n_tokens);
        let (kv, half) = (s.kv_dim(), s.rope_dim / 2);
        let (k_cache, v_cache) = self.cache.planes(kv)?;
        let args = RopeStoreArgs {
            q: self.q.covering(n * s.n_head * s.head_dim, "the queries")?,
            k: self.k.covering(n * kv, "the keys")?,
            v: self.v.covering(n * kv, "the values")?,
            cos: self.cos.covering(n * half, "the cos table")?,
            sin: self.sin.covering(n * half, "the sin table")?,
            positions: self.positions.covering(n, "the positions")?,
            slots: self.slots.covering(n, "the cache slots")?,
            k_cache,
            v_cache,
            n_tokens: int(n, "tokens")?,
            n_head: int(s.n_head, "heads")?,
            n_head_kv: int(s.n_head_kv, "KV heads")?,
            head_dim: int(s.head_dim, "the head width")?,
            rope_dim: int(s.rope_dim, "rope_dim")?,
            neox: i32::from(self.neox),
            k_type: kv_type_code(self.cache.types.keys),
            v_type: kv_type_code(self.cache.types.values),
        };
        Ok((args, config((blocks(n, 1)?, 1), ROPE_THREADS)))
    }
}

/// Causal attention of every new token over its sequence's cached positions `0..=position` (the last `window`
/// of them in a sliding-window layer).
pub struct AttentionCall<'a> {
    /// `[n_tokens][n_head · head_dim]`, rotated.
    pub q: DeviceArray<'a, f32>,
    pub out: DeviceArray<'a, f32>,
    pub cache: LayerCache<'a>,
    pub positions: DeviceArray<'a, i32>,
    /// `[n_tokens]`: where each token's block table starts in `block_tables`.
    pub table_offsets: DeviceArray<'a, i32>,
    /// Every sequence's block table, concatenated; each covers its tokens' positions with blocks of the cache.
    pub block_tables: DeviceArray<'a, i32>,
    pub shape: HeadShape,
    pub block_size: usize,
    pub n_tokens: usize,
    pub window: Option<usize>,
    /// What multiplies each query·key product (`LlamaConfig::attention_scale`).
    pub scale: f32,
    /// Gemma 2's cap on the scaled scores (`LlamaConfig::attn_softcap`).
    pub softcap: Option<f32>,
    /// `[n_head]`: each query head's sink logit (gpt-oss' `attn_sinks`).
    pub sinks: Option<DeviceArray<'a, f32>>,
    /// Each KV head's value width: `head_dim`, or the compressed rank of DeepSeek's latent attention.
    pub value_dim: usize,
    /// The values are the first `value_dim` elements of each key row (a keys-only cache, one KV head), not
    /// `cache.values`' rows.
    pub values_in_keys: bool,
}

impl AttentionCall<'_> {
    /// Whether the heads take `attention_wide` (wider than `attention`'s 256).
    pub fn wide(&self) -> bool {
        self.shape.head_dim.max(self.value_dim) > ATTENTION_MAX_HEAD_DIM
    }

    pub fn args(&self) -> Result<(AttentionArgs, LaunchConfig), CudaBackendError> {
        let (s, n, vd) = (self.shape, self.n_tokens, self.value_dim);
        s.check().map_err(internal)?;
        if vd == 0 || vd > ATTENTION_WIDE_MAX_HEAD_DIM {
            return Err(internal(format!("a value width of {vd} (at most {ATTENTION_WIDE_MAX_HEAD_DIM})")));
        }
        let types = self.cache.types;
        // Heads of a block type are whole blocks (so are the rows then), read block by block.
        if !whole_blocks(types.keys, s.head_dim) || !whole_blocks(types.values, vd) {
            let detail = format!("{} keys of {} and {} values of {vd}", types.keys, s.head_dim, types.values);
            return Err(internal(format!("{detail}: heads of a q8_0 or q4_0 cache are whole blocks of 32")));
        }
        // Values in rows as wide as the key rows: the value cache's, or the key rows' first `vd` elements.
        let (k_cache, values) = self.cache.planes(s.kv_dim())?;
        let v_cache = if self.values_in_keys {
            if s.n_head_kv != 1 || vd > s.head_dim {
                let detail = format!("values of {vd} in key rows of {} with {} KV heads", s.head_dim, s.n_head_kv);
                return Err(internal(detail));
            }
            if types.values != types.keys {
                return Err(internal(format!("values in {} key rows read as {}", types.keys, types.values)));
            }
            k_cache
        } else {
            if vd != s.head_dim {
                return Err(internal(format!("a value cache of {vd}-wide heads beside {}-wide keys", s.head_dim)));
            }
            values
        };
        let args = AttentionArgs {
            q: self.q.covering(n * s.n_head * s.head_dim, "the queries")?,
            out: self.out.covering(n * s.n_head * vd, "the attention output")?,
            k_cache,
            v_cache,
            positions: self.positions.covering(n, "the positions")?,
            table_offsets: self.table_offsets.covering(n, "the table offsets")?,
            block_tables: self.block_tables.covering(1, "the block tables")?,
            sinks: match self.sinks {
                Some(sinks) => sinks.covering(s.n_head, "the attention sinks")?,
                None => 0,
            },
            n_tokens: int(n, "tokens")?,
            n_head: int(s.n_head, "heads")?,
            n_head_kv: int(s.n_head_kv, "KV heads")?,
            head_dim: int(s.head_dim, "the head width")?,
            value_dim: int(vd, "the value width")?,
            pad: 0,
            block_size: int(self.block_size, "the block size")?,
            scale: self.scale,
            window: match self.window {
                Some(0) => return Err(internal("a window of no positions".into())),
                Some(w) => int(w, "the window")?,
                None => 0,
            },
            softcap: positive_or_none(self.softcap, "the attention soft cap")?,
        };
        // `check` bounds both by the grid's limit.
        let chunks = (s.n_head / s.n_head_kv).div_ceil(ATTENTION_MAX_GROUP) as u32;
        let mut cfg = config((blocks(n, 1)?, s.n_head_kv as u32), ATT_THREADS);
        cfg.grid_dim.2 = chunks;
        Ok((args, cfg))
    }
}

/// `gate = act(gate) ⊙ up` over `n` elements.
pub struct GatedCall<'a> {
    pub gate: DeviceArray<'a, f32>,
    pub up: DeviceArray<'a, f32>,
    pub n: usize,
    pub activation: FfnActivation,
}

impl GatedCall<'_> {
    pub fn args(&self) -> Result<(GatedArgs, LaunchConfig), CudaBackendError> {
        let args = GatedArgs {
            gate: self.gate.covering(self.n, "the gate")?,
            up: self.up.covering(self.n, "the up projection")?,
            n: int(self.n, "elements")?,
            act: activation_code(self.activation),
        };
        Ok((args, config((blocks(self.n, ELEMENTWISE_THREADS as usize)?, 1), ELEMENTWISE_THREADS)))
    }
}

/// `x[r] += bias` for each of the `rows` rows of `width` of `x`.
pub struct AddBiasCall<'a> {
    pub x: DeviceArray<'a, f32>,
    pub bias: DeviceArray<'a, f32>,
    pub rows: usize,
    pub width: usize,
}

impl AddBiasCall<'_> {
    pub fn args(&self) -> Result<(AddBiasArgs, LaunchConfig), CudaBackendError> {
        let n = self.rows.checked_mul(self.width).ok_or_else(|| internal("bias rows overflow".into()))?;
        let args = AddBiasArgs {
            x: self.x.covering(n, "the biased rows")?,
            bias: self.bias.covering(self.width, "the bias")?,
            n: int(n, "elements")?,
            width: int(self.width, "the bias width")?,
        };
        Ok((args, config((blocks(n, ELEMENTWISE_THREADS as usize)?, 1), ELEMENTWISE_THREADS)))
    }
}

/// `dst += factor · src` over `n` elements (`LlamaConfig::residual_scale`).
pub struct AddScaledCall<'a> {
    pub dst: DeviceArray<'a, f32>,
    pub src: DeviceArray<'a, f32>,
    pub n: usize,
    pub factor: f32,
}

impl AddScaledCall<'_> {
    pub fn args(&self) -> Result<(AddScaledArgs, LaunchConfig), CudaBackendError> {
        let args = AddScaledArgs {
            dst: self.dst.covering(self.n, "the residual stream")?,
            src: self.src.covering(self.n, "the scaled branch")?,
            n: int(self.n, "elements")?,
            factor: self.factor,
        };
        Ok((args, config((blocks(self.n, ELEMENTWISE_THREADS as usize)?, 1), ELEMENTWISE_THREADS)))
    }
}

/// The logits, in place: times `1 / logit_scale`, then soft-capped (`LlamaConfig::logit_scale`, `final_softcap`).
pub struct FinishLogitsCall<'a> {
    pub logits: DeviceArray<'a, f32>,
    pub n: usize,
    pub logit_scale: Option<f32>,
    pub softcap: Option<f32>,
}

impl FinishLogitsCall<'_> {
    pub fn args(&self) -> Result<(FinishLogitsArgs, LaunchConfig), CudaBackendError> {
        let args = FinishLogitsArgs {
            x: self.logits.covering(self.n, "the logits")?,
            n: int(self.n, "logits")?,
            factor: match self.logit_scale {
                None => 1.0,
                scale => 1.0 / positive_or_none(scale, "the logit scale")?,
            },
            cap: positive_or_none(self.softcap, "the final soft cap")?,
            pad: 0,
        };
        Ok((args, config((blocks(self.n, ELEMENTWISE_THREADS as usize)?, 1), ELEMENTWISE_THREADS)))
    }
}

/// A kernel's optional positive parameter: its value, or 0 (the kernels' "none"); an internal error for a value
/// that is not positive and finite (the config's reader refuses those).
fn positive_or_none(value: Option<f32>, what: &str) -> Result<f32, CudaBackendError> {
    match value {
        None => Ok(0.0),
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        Some(v) => Err(internal(format!("{what} {v} is not positive"))),
    }
}

/// The `k` largest logits of each row with their ids, largest first (lower id first among equals).
pub struct TopKCall<'a> {
    /// `[n_rows][vocab]`.
    pub logits: DeviceArray<'a, f32>,
    /// `[n_rows][k]`.
    pub ids: DeviceArray<'a, i32>,
    /// `[n_rows][k]`.
    pub values: DeviceArray<'a, f32>,
    pub n_rows: usize,
    pub vocab: usize,
    pub k: usize,
}

impl TopKCall<'_> {
    pub fn args(&self) -> Result<(TopKArgs, LaunchConfig), CudaBackendError> {
        if self.k == 0 || self.k > self.vocab || self.k > TOP_K_MAX {
            return Err(internal(format!("top-{} of {} logits (at most {TOP_K_MAX})", self.k, self.vocab)));
        }
        let args = TopKArgs {
            logits: self.logits.covering(self.n_rows * self.vocab, "the logits")?,
            ids: self.ids.covering(self.n_rows * self.k, "the top-k ids")?,
            values: self.values.covering(self.n_rows * self.k, "the top-k values")?,
            n_rows: int(self.n_rows, "rows")?,
            vocab: int(self.vocab, "the vocabulary")?,
            k: self.k as i32,
            pad: 0,
        };
        Ok((args, config((blocks(self.n_rows, 1)?, 1), TOP_K_THREADS)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::packing::PackedType;

    #[test]
    fn activation_numbers_are_the_kernels_act_numbers() {
        let source = crate::backend::cuda::module::program_source(&crate::backend::cuda::module::KERNEL_FILES);
        for (a, name) in [(FfnActivation::Silu, "ACT_SILU"), (FfnActivation::GeluTanh, "ACT_GELU_TANH")] {
            let define = format!("#define {name} {}", activation_code(a));
            assert!(source.contains(&define), "common.cuh lacks {define:?}");
        }
    }

    fn matrix<'a>(dtype: PackedType, rows: usize, cols: usize) -> MatrixArray<'a> {
        let blocks = rows * cols / 32;
        MatrixArray {
            dtype,
            rows,
            cols,
            quants: DeviceArray::fake(0x1000, blocks * dtype.quant_words()),
            scales: DeviceArray::fake(0x9000_0000, blocks * dtype.scale_words()),
        }
    }

    #[test]
    fn a_projection_checks_every_operand_and_sizes_its_grid() {
        let (q, k) = (matrix(PackedType::Q4_1, 576, 576), matrix(PackedType::Q4_1, 192, 576));
        let outputs = [(q, DeviceArray::fake(0x10, 2 * 576)), (k, DeviceArray::fake(0x20, 2 * 192))];
        let call = |outputs, x_len, n_tokens| ProjectSmallCall {
            outputs,
            x: DeviceArray::fake(0x30, x_len),
            n_tokens,
            norm: None,
            add: false,
            gated: None,
        };
        let (args, cfg) = call(&outputs, 2 * 576, 2).args().unwrap();
        assert_eq!((args.rows, args.n_mats, args.k, args.n_tokens), ([576, 192, 0], 2, 576, 2));
        assert_eq!(cfg.grid_dim.0, (576 + 192) / 4);
        assert!(call(&outputs, 2 * 576 - 1, 2).args().is_err(), "short input");
        assert!(call(&outputs, 9 * 576, 9).args().is_err(), "too many tokens");
        assert!(call(&outputs[..1], 3 * 576, 3).args().is_err(), "short output");
        let mixed =
            [(q, DeviceArray::fake(0x10, 576)), (matrix(PackedType::Q8_0, 192, 576), DeviceArray::fake(0, 192))];
        assert!(call(&mixed, 576, 1).args().is_err(), "two types in one launch");
    }

    #[test]
    fn the_matmul_tile_follows_the_token_count() {
        let w = matrix(PackedType::Q8_0, 49152, 576);
        let call = |n| MatmulCall {
            matrix: w,
            x: DeviceArray::fake(0, n * 576),
            y: DeviceArray::fake(0, n * 49152),
            n_tokens: n,
            add: false,
        };
        assert_eq!(call(9).args().unwrap().1.grid_dim, (768, 1, 1));
        assert_eq!(call(33).args().unwrap().1.grid_dim, (768, 1, 1));
        assert_eq!(call(512).args().unwrap().1.grid_dim, (768, 8, 1));
        assert_eq!([1, 16, 17, 32, 33, 300].map(matmul_tile), [16, 16, 32, 32, 64, 64]);
    }

    #[test]
    fn head_shapes_outside_the_kernels_are_refused() {
        let smollm = HeadShape { n_head: 9, n_head_kv: 3, head_dim: 64, rope_dim: 64 };
        assert!(smollm.check().is_ok());
        // 9 and 128 query heads over one KV head: blocks of 8 on the grid's z.
        assert!(HeadShape { n_head_kv: 1, ..smollm }.check().is_ok());
        assert!(HeadShape { n_head: 128, n_head_kv: 1, head_dim: 576, rope_dim: 64 }.check().is_ok());
        assert!(HeadShape { head_dim: 584, rope_dim: 64, ..smollm }.check().is_err(), "wider than attention_wide");
        assert!(HeadShape { head_dim: 60, rope_dim: 60, ..smollm }.check().is_err());
        assert!(HeadShape { rope_dim: 65, ..smollm }.check().is_err());
        assert!(HeadShape { n_head_kv: 0, ..smollm }.check().is_err());
        assert!(HeadShape { n_head: 0, ..smollm }.check().is_err());
    }

    #[test]
    fn attention_takes_its_values_from_the_value_rows_or_the_key_rows_prefix() {
        let call = |shape: HeadShape, value_dim, values_in_keys| AttentionCall {
            q: DeviceArray::fake(0x100, 3 * shape.n_head * shape.head_dim),
            out: DeviceArray::fake(0x200, 3 * shape.n_head * value_dim),
            cache: LayerCache {
                keys: DeviceArray::fake(0x1000, 64 * shape.kv_dim()),
                values: DeviceArray::fake(0x2000, 64 * shape.kv_dim()),
                slots: 64,
                types: KvCacheTypes::default(),
            },
            positions: DeviceArray::fake(0, 3),
            table_offsets: DeviceArray::fake(0, 3),
            block_tables: DeviceArray::fake(0, 4),
            shape,
            block_size: 16,
            n_tokens: 3,
            window: None,
            scale: 0.125,
            softcap: None,
            sinks: None,
            value_dim,
            values_in_keys,
        };
        let smollm = HeadShape { n_head: 9, n_head_kv: 3, head_dim: 64, rope_dim: 64 };
        let dense = call(smollm, 64, false);
        let (args, cfg) = dense.args().unwrap();
        assert_eq!((args.v_cache, args.value_dim, cfg.grid_dim), (0x2000, 64, (3, 3, 1)));
        assert!(!dense.wide());
        // DeepSeek-V2-Lite: 16 heads on one row of 512 + 64, the values its first 512.
        let lite = HeadShape { n_head: 16, n_head_kv: 1, head_dim: 576, rope_dim: 64 };
        let latent = call(lite, 512, true);
        let (args, cfg) = latent.args().unwrap();
        assert_eq!((args.v_cache, args.value_dim, cfg.grid_dim), (0x1000, 512, (3, 1, 2)));
        assert!(latent.wide());
        assert!(call(lite, 580, true).args().is_err(), "values wider than the key row");
        assert!(call(smollm, 64, true).args().is_err(), "values in the keys of several KV heads");
        assert!(call(smollm, 0, false).args().is_err());
        assert!(call(smollm, 32, false).args().is_err(), "value rows narrower than the key rows");
    }

    /// A cache of `types` whose planes hold `rows` rows of `width` elements (the last word short with `short`).
    fn cache(types: KvCacheTypes, rows: usize, width: usize, short: bool) -> LayerCache<'static> {
        let words = |ty| rows * row_words(ty, width) - usize::from(short);
        LayerCache {
            keys: DeviceArray::fake(0x1000, words(types.keys)),
            values: DeviceArray::fake(0x9000, words(types.values)),
            slots: rows,
            types,
        }
    }

    #[test]
    fn quantized_caches_are_sized_in_blocks_and_read_by_whole_blocks() {
        let q8_q4 = KvCacheTypes { keys: KvCacheType::Q8_0, values: KvCacheType::Q4_0 };
        let smollm = HeadShape { n_head: 9, n_head_kv: 3, head_dim: 64, rope_dim: 64 };
        let store = |cache, shape: HeadShape| RopeStoreCall {
            q: DeviceArray::fake(0, 2 * shape.n_head * shape.head_dim),
            k: DeviceArray::fake(0, 2 * shape.kv_dim()),
            v: DeviceArray::fake(0, 2 * shape.kv_dim()),
            cos: DeviceArray::fake(0, shape.rope_dim),
            sin: DeviceArray::fake(0, shape.rope_dim),
            positions: DeviceArray::fake(0, 2),
            slots: DeviceArray::fake(0, 2),
            cache,
            shape,
            n_tokens: 2,
            neox: false,
        };
        // 64 rows of 192: 6 blocks of 17 words of keys, of 9 words of values.
        let (args, _) = store(cache(q8_q4, 64, 192, false), smollm).args().unwrap();
        assert_eq!((args.k_cache, args.v_cache, args.k_type, args.v_type), (0x1000, 0x9000, 1, 2));
        assert!(store(cache(q8_q4, 64, 192, true), smollm).args().is_err(), "a plane one word short");
        let f16 = store(cache(KvCacheTypes::default(), 64, 192, false), smollm).args().unwrap().0;
        assert_eq!((f16.k_type, f16.v_type), (0, 0));
        // Heads of 48: rows of 144 are not whole blocks.
        let odd = HeadShape { head_dim: 48, rope_dim: 48, ..smollm };
        assert!(store(cache(q8_q4, 64, 144, false), odd).args().is_err());
        let attend = |cache, shape: HeadShape, value_dim, values_in_keys| AttentionCall {
            q: DeviceArray::fake(0, 2 * shape.n_head * shape.head_dim),
            out: DeviceArray::fake(0, 2 * shape.n_head * value_dim),
            cache,
            positions: DeviceArray::fake(0, 2),
            table_offsets: DeviceArray::fake(0, 2),
            block_tables: DeviceArray::fake(0, 4),
            shape,
            block_size: 16,
            n_tokens: 2,
            window: None,
            scale: 0.125,
            softcap: None,
            sinks: None,
            value_dim,
            values_in_keys,
        };
        assert!(attend(cache(q8_q4, 64, 192, false), smollm, 64, false).args().is_ok());
        assert!(attend(cache(q8_q4, 64, 192, true), smollm, 64, false).args().is_err());
        assert!(attend(cache(q8_q4, 64, 144, false), odd, 48, false).args().is_err());
        // A keys-only cache's values are its keys, of their type: DeepSeek's 128 + 32 rows, values the first 128.
        let lite = HeadShape { n_head: 16, n_head_kv: 1, head_dim: 160, rope_dim: 32 };
        let q4 = KvCacheTypes { keys: KvCacheType::Q4_0, values: KvCacheType::Q4_0 };
        assert!(attend(cache(q4, 64, 160, false), lite, 128, true).args().is_ok());
        let mixed = KvCacheTypes { keys: KvCacheType::Q4_0, values: KvCacheType::Q8_0 };
        assert!(attend(cache(mixed, 64, 160, false), lite, 128, true).args().is_err(), "values typed apart");
        assert!(attend(cache(q4, 64, 160, false), lite, 80, true).args().is_err(), "values not whole blocks");
    }

    #[test]
    fn top_k_is_bounded() {
        let call = |k| TopKCall {
            logits: DeviceArray::fake(0, 2 * 100),
            ids: DeviceArray::fake(0, 2 * 100),
            values: DeviceArray::fake(0, 2 * 100),
            n_rows: 2,
            vocab: 100,
            k,
        };
        assert!(call(1).args().is_ok());
        assert!(call(100).args().is_ok());
        assert!(call(0).args().is_err());
        assert!(call(101).args().is_err());
    }
}
